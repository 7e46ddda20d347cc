"""Publishing: the open-data format, a data-independent row order, and an atomic ``latest``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from opal_dp.defs.marginals.publish import published_release
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import private_parquet
from opal_dp.defs.shared.partitions import period_mode, release_periods
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.network import MODES, load_stops
from opal_dp.release import publish as publish_module
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.published_folder import FILES, LATEST_JSON, latest_release, validate_published
from opal_dp.release.publish import DateFiles, publish
from opal_dp.private_files import write_parquet_atomic
from opal_dp.settings import WORKERS_ENV
from opal_dp_tests.release.test_statement import PARTS, released as ledger_release
from opal_dp_tests.release.test_statement import statement as ledger_statement

LABELS = ["-1", "2000", "2010", "Central"]
STOPS = load_stops()
KEYS = ["2016-07-26|train", "2016-07-25|bus", "2016-07-25|train"]
assert sorted(KEYS) == sorted(PARTS)


def statement(release_id: str) -> dict:
    """A real statement of a ledger release of the KEYS partitions (made once, in a scratch folder)."""
    if not _LEDGER:
        _LEDGER.append(ledger_release(Path(tempfile.mkdtemp(prefix="opal-statement-"))))
    return ledger_statement(*_LEDGER[0], release_id=release_id)


_LEDGER: list = []


def released(marginal, key: str) -> pd.DataFrame:
    """A hand-made released frame in canonical order; tap-off holds the unknown (-1) bin."""
    known = [(10, "2000"), (10, "Central"), (54, "2010"), (95, "2000")]
    bins = ([(-1, "-1")] if marginal.tap == "off" else []) + known
    if not marginal.by_loc:
        bins = sorted({(w, "") for w, _ in bins})
    if not marginal.by_time:
        bins = sorted({(0, label) for _, label in bins})
    offset = sorted(KEYS).index(key) * 100 + (marginal.tap == "off") * 50
    columns = {}
    if marginal.by_time:
        columns["time_window"] = pd.array([w for w, _ in bins], dtype="int16")
    if marginal.by_loc:
        columns["loc"] = pd.Categorical([label for _, label in bins], categories=LABELS)
    columns["count"] = pd.array([18 + offset + i for i in range(len(bins))], dtype="int64")
    return pd.DataFrame(columns)


def releases(keys: list[str] = KEYS) -> dict[str, dict[str, pd.DataFrame]]:
    return {m.name: {k: released(m, k) for k in keys} for m in MARGINALS}


def date_files(keys: list[str] = KEYS) -> list[DateFiles]:
    """The published dates of ``keys``, each with its own tables (draw ids: stand-ins, one per partition)."""
    days = sorted({k.split("|")[0] for k in keys})
    out = []
    for day in days:
        mine = sorted(k for k in keys if k.startswith(day))
        out.append(DateFiles(day.replace("-", ""), to_open_data(releases(mine)),
                             tuple(sorted(KEYS).index(k) + 1 for k in mine), tuple(k.split("|")[1] for k in mine)))
    return out


def publish_release(root: Path, release_id: str, dates: list[DateFiles] | None = None) -> Path:
    """Publish (again) every date of KEYS, or ``dates``, under ``release_id``."""
    stated = statement(release_id=release_id)
    return publish(root, date_files() if dates is None else dates, lambda summary: stated, STOPS,
                   root.parent / f"{root.name}-state")


def visible(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if not p.name.startswith(".")}


def test_tables_have_the_open_data_format(tmp_path):
    folder = publish_release(tmp_path, "r1")
    validate_published(folder)
    time_csv = (folder / "time.csv").read_text().splitlines()
    assert time_csv[:6] == [
        "mode,date,tap,time,loc,count",
        "bus,20160725,on,2:30,-,18",
        "bus,20160725,on,13:30,-,19",
        "bus,20160725,on,23:45,-,20",
        "bus,20160725,off,-1,-,68",
        "bus,20160725,off,2:30,-,69",
    ]
    loc_csv = pd.read_csv(folder / "loc.csv", dtype=str, keep_default_na=False)
    assert (loc_csv["time"] == "-").all() and set(loc_csv["loc"]) == set(LABELS)
    time_loc = pd.read_csv(folder / "time-loc.csv", dtype=str, keep_default_na=False)
    assert list(time_loc.columns) == ["mode", "date", "tap", "time", "loc", "count"]
    unknown = time_loc[time_loc["time"] == "-1"]
    assert (unknown["loc"] == "-1").all() and (unknown["tap"] == "off").all() and len(unknown) == len(KEYS)
    assert set(time_loc["time"]) == {"-1", "2:30", "13:30", "23:45"}
    assert set(zip(time_loc["date"], time_loc["mode"])) == {
        ("20160725", "bus"), ("20160725", "train"), ("20160726", "train")
    }


def test_row_order_does_not_depend_on_input_order():
    expected = {t: frame.to_csv(index=False) for t, frame in to_open_data(releases()).items()}
    rng = random.Random(3)
    for _ in range(5):
        shuffled = {}
        for name in rng.sample(list(releases()), len(MARGINALS)):
            keys = rng.sample(KEYS, len(KEYS))
            shuffled[name] = {}
            for key in keys:
                frame = released(next(m for m in MARGINALS if m.name == name), key)
                frame = frame.sample(frac=1, random_state=rng.randrange(2**32)).reset_index(drop=True)
                if "loc" in frame:
                    frame["loc"] = frame["loc"].cat.reorder_categories(rng.sample(LABELS, len(LABELS)))
                shuffled[name][key] = frame
        assert {t: f.to_csv(index=False) for t, f in to_open_data(shuffled).items()} == expected


def test_inconsistent_releases_are_refused():
    with pytest.raises(ValueError, match="exactly the marginals"):
        to_open_data({"tap_on_time": releases()["tap_on_time"]})
    partial = releases()
    partial["tap_on_loc"] = {k: partial["tap_on_loc"][k] for k in KEYS[:2]}
    with pytest.raises(ValueError, match="same"):
        to_open_data(partial)
    doubled = releases()
    frame = doubled["tap_on_time"][KEYS[0]]
    doubled["tap_on_time"][KEYS[0]] = pd.concat([frame, frame], ignore_index=True)
    with pytest.raises(ValueError, match="unique"):
        to_open_data(doubled)


def _replace(old: str, new: str, count: int = 1):
    return lambda text: text.replace(old, new, count)


@pytest.mark.parametrize(
    ("file", "corrupt", "message"),
    [
        ("time.csv", _replace("mode,date", "mode,day"), "header"),
        ("time.csv", _replace(",2:30,", ",02:30,"), "H:MM"),
        ("time-loc.csv", _replace(",13:30,", ",13:31,"), "H:MM"),
        ("time.csv", _replace(",20160725,", ",2016-07-25,"), "YYYYMMDD"),
        ("loc.csv", _replace(",20160725,", ",20160732,"), "YYYYMMDD"),
        ("loc.csv", _replace(",20160725,", ",20160727,"), "privacy.json"),
        ("time.csv", _replace(",-,", ",2000,"), "'-'"),
        ("loc.csv", _replace("on,-,", "on,2:30,"), "'-'"),
        ("time-loc.csv", _replace(",2000,", ",-,"), "label"),
        ("time.csv", _replace("bus,", "tram,"), "mode"),
        ("time.csv", _replace(",on,", ",in,"), "tap"),
        ("time.csv", _replace(",18\n", ",0\n"), "positive integer"),
        ("time.csv", _replace(",18\n", ",18.0\n"), "positive integer"),
        ("time.csv", _replace("off,-1,-,68", "on,-1,-,68"), "tap-on"),
        ("time-loc.csv", _replace("off,-1,-1,", "off,-1,2000,"), "together"),
        ("time-loc.csv", _replace(",2000,", ",other,"), "remainder"),  # an SBH release has no remainder rows
        ("time-loc.csv", _replace(",13:30,", ",other,"), "H:MM"),
        ("loc.csv", _replace(",2000,", ",other,"), "remainder"),
        ("time.csv", _replace(",2:30,-,18\n", ",23:45,-,18\n"), "duplicate"),
        ("time.csv", _replace(",2:30,-,18\n", ",14:00,-,18\n"), "order"),
        ("privacy.json", lambda t: t[:-3], "JSON"),
        ("privacy.json", _replace('"epsilon": 8.0', '"epsilon": 1.0'), "PRIVACY.md"),
        ("PRIVACY.md", _replace("Presence", "Absence"), "PRIVACY.md"),
        ("index.html", _replace("<style>", '<script src="https://cdn.example/x.js"></script><style>'), "outside"),
        ("index.html", _replace("<style>", "<style>@import 'fonts.css';"), "outside"),
        ("index.html", _replace("</body>", '<img src="map.png"></body>'), "outside"),
        ("index.html", _replace('href="time.csv"', 'href="//cdn.example/time.csv"'), "outside"),
        ("index.html", _replace('href="time.csv"', 'href="../r0/time.csv"'), "outside"),
        ("index.html", _replace('href="loc.csv"', 'href="gone.csv"'), "link to exactly"),
        ("index.html", _replace('class="epsilon" data-value="8.0"', 'class="epsilon" data-value="0.8"'), "guarantee"),
        ("index.html", _replace('class="delta"', 'class="d"'), "guarantee"),
        ("index.html", _replace('href="PRIVACY.md"', 'title="PRIVACY.md"', -1), "link to exactly"),
        ("index.html", _replace('data-bytes="', 'data-bytes="1'), "sizes"),
    ],
)
def test_validation_rejects_malformed_files(tmp_path, file, corrupt, message):
    folder = tmp_path / "copy"
    shutil.copytree(publish_release(tmp_path / "published", "r1"), folder)
    path = folder / ("dates/20160725/" if file.endswith(".csv") else "") / file
    text = path.read_text(encoding="utf-8")
    assert corrupt(text) != text
    path.write_text(corrupt(text), encoding="utf-8")
    with pytest.raises(PublishedFormatError, match=message):
        validate_published(folder)


def test_validation_rejects_extra_files(tmp_path):
    folder = publish_release(tmp_path / "published", "r1")
    (folder / "notes.txt").write_text("x")
    with pytest.raises(PublishedFormatError, match="exactly the files"):
        validate_published(folder)


def test_a_dates_manifest_must_be_the_one_the_index_lists(tmp_path):
    """The index holds each date's manifest hash and the manifest each file's: a file changed together with its
    manifest is still caught, by the index; a file changed alone, by its manifest."""
    folder = publish_release(tmp_path / "published", "r1")
    day = folder / "dates" / "20160725"
    manifest = json.loads((day / "manifest.json").read_text())
    assert manifest["files"]["time.csv"]["sha256"] == hashlib.sha256((day / "time.csv").read_bytes()).hexdigest()
    *rows, last = (day / "time.csv").read_text().splitlines()
    *bin_, count = last.split(",")
    (day / "time.csv").write_text("\n".join([*rows, ",".join([*bin_, str(int(count) + 1)])]) + "\n")  # still valid
    with pytest.raises(PublishedFormatError, match="not the file its manifest.json lists"):
        validate_published(folder)
    manifest["files"]["time.csv"]["sha256"] = hashlib.sha256((day / "time.csv").read_bytes()).hexdigest()
    (day / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    with pytest.raises(PublishedFormatError, match="not the manifest index.json lists"):
        validate_published(folder)


def test_a_combined_file_must_be_its_dates_files_in_order(tmp_path):
    folder = publish_release(tmp_path / "published", "r1")
    lines = (folder / "time.csv").read_text().splitlines(keepends=True)
    (folder / "time.csv").write_text("".join([lines[0], *lines[2:], lines[1]]))
    with pytest.raises(PublishedFormatError, match="dates' files in date order"):
        validate_published(folder)


def test_publish_writes_the_publication_folder_and_its_pointer_only(tmp_path):
    root = tmp_path / "published"
    publish_release(root, "r1")
    publish_release(root, "r2")
    assert {p.name for p in root.iterdir()} == {"latest", LATEST_JSON}
    assert latest_release(root) == root / "latest" and oct(os.stat(root / LATEST_JSON).st_mode)[-3:] == "644"
    assert sorted(p.name for p in (root / "latest").iterdir()) == sorted([*FILES, "dates"])
    assert sorted(p.name for p in (root / "latest" / "dates").iterdir()) == ["20160725", "20160726"]
    validate_published(root / "latest")


def test_new_dates_are_appended_and_old_ones_untouched(tmp_path):
    """Date 20160726 after 20160725: its files are new, 20160725's are not rewritten, the combined files grow
    by its rows (appended: their inode stays), and the result is what publishing both at once gives."""
    root = tmp_path / "published"
    first, second = date_files()
    publish_release(root, "r1", [first])
    old = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in (root / "latest" / "dates").rglob("*.csv")}
    inode = (root / "latest" / "time.csv").stat().st_ino
    publish_release(root, "r2", [second])
    assert {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in old} == old
    assert (root / "latest" / "time.csv").stat().st_ino == inode
    validate_published(root / "latest")
    at_once = tmp_path / "at-once"
    publish_release(at_once, "r2")
    for name in ("time-loc.csv", "time.csv", "loc.csv", "index.json", "index.html"):
        assert (root / "latest" / name).read_bytes() == (at_once / "latest" / name).read_bytes(), name


def test_nothing_changed_writes_nothing(tmp_path):
    root = tmp_path / "published"
    publish_release(root, "r1")
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    publish_release(root, "r2", [])
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    assert json.loads((root / LATEST_JSON).read_text())["release_id"] == "r1"


def test_refuses_a_bad_release_id(tmp_path):
    root = tmp_path / "published"
    publish_release(root, "r1")
    for bad in ("latest", "../x", ".staging-x", ""):
        with pytest.raises(ValueError, match="release id"):
            publish_release(root, bad)
    assert json.loads((root / LATEST_JSON).read_text())["release_id"] == "r1"


def refuse_the_second_date(day: DateFiles) -> DateFiles:
    """A gate (``publish``'s ``prepare``) that refuses the second date of KEYS, after a moment: the first date's
    worker is writing meanwhile."""
    if day.date == date_files()[1].date:
        time.sleep(0.5)
        raise ValueError(f"{day.date} refused")
    return day


def test_a_date_refused_in_a_worker_publishes_nothing_and_leaves_nothing(tmp_path, monkeypatch):
    """The dates are gated and staged side by side in worker processes: one refused leaves the publication as it
    was, the other date's staged files included (removed once its worker has ended)."""
    root = tmp_path / "published"
    first, second = date_files()
    publish_release(root, "r1", [first])
    before = {p: p.read_bytes() if p.is_file() else None for p in root.rglob("*")}
    monkeypatch.setenv(WORKERS_ENV, "2")
    with pytest.raises(ValueError, match=f"{second.date} refused"):
        publish(root, [first, second], lambda summary: statement(release_id="r2"), STOPS,
                root.parent / f"{root.name}-state", prepare=refuse_the_second_date)
    assert {p: p.read_bytes() if p.is_file() else None for p in root.rglob("*")} == before


def slow_stage(day: DateFiles) -> DateFiles:
    """A ``prepare`` that takes a moment: the first date's worker is still staging when the second is refused."""
    time.sleep(0.5)
    return day


def test_a_date_refused_while_the_first_is_staged_publishes_nothing_and_leaves_nothing(tmp_path, monkeypatch):
    """The step gates each date as ``publish`` asks for it, while the workers stage the dates gated before: a
    refusal in gating a later date leaves the publication as it was, once the first date's worker has ended."""
    root = tmp_path / "published"
    first, second = date_files()
    publish_release(root, "r1", [first])
    before = {p: p.read_bytes() if p.is_file() else None for p in root.rglob("*")}
    monkeypatch.setenv(WORKERS_ENV, "2")

    def gated():
        yield first
        time.sleep(0.2)  # the first date is being staged in a worker
        raise ValueError(f"{second.date} refused by its gate")

    with pytest.raises(ValueError, match="refused by its gate"):
        publish(root, gated(), lambda summary: statement(release_id="r2"), STOPS, root.parent / f"{root.name}-state",
                prepare=slow_stage, count=2)
    time.sleep(0.6)  # a worker still writing would show now
    assert {p: p.read_bytes() if p.is_file() else None for p in root.rglob("*")} == before


def test_a_date_not_in_the_published_form_is_refused_before_any_of_its_files(tmp_path):
    """A date names a folder under ``dates/``: only ``YYYYMMDD`` (no separators, nothing that climbs the tree)."""
    root = tmp_path / "published"
    first = date_files()[0]
    for bad in ("2016-07-25", "../20160725", "2016072"):
        with pytest.raises(ValueError, match="YYYYMMDD"):
            publish_release(root, "r1", [dataclasses.replace(first, date=bad)])
        assert not [p for p in root.rglob("*") if p.is_file()]


def test_failure_mid_write_keeps_the_publication(tmp_path, monkeypatch):
    root = tmp_path / "published"
    publish_release(root, "r1")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    real_write, calls = publish_module.write_durably, []

    def failing_write(path, text):
        calls.append(path)
        if len(calls) == 2:
            path.write_text(text[: len(text) // 2])
            raise OSError("disk full")
        real_write(path, text)

    monkeypatch.setattr(publish_module, "write_durably", failing_write)
    monkeypatch.setenv(WORKERS_ENV, "1")  # the dates staged in this process, where the patched write applies
    with pytest.raises(OSError, match="disk full"):
        publish_release(root, "r2")
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert latest_release(root) == root / "latest"
    validate_published(root / "latest")
    monkeypatch.undo()
    publish_release(root, "r3")
    assert json.loads((root / LATEST_JSON).read_text())["release_id"] == "r3"
    validate_published(root / "latest")


CHILD = """
import os, pickle, sys, time
from pathlib import Path
from opal_dp.network import load_stops
from opal_dp.release import publish as module
root, payload, flag, hang = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
dates, statement = pickle.loads(payload.read_bytes())

def stop(*args):
    flag.write_text("ready")
    time.sleep(600)

if hang == "write":
    real, calls = module.write_durably, []
    def write_durably(path, text):
        calls.append(path)
        if len(calls) == 2:
            with open(path, "w") as handle:
                handle.write(text[: len(text) // 2])
            stop()
        real(path, text)
    module.write_durably = write_durably
else:
    real_append = module._append
    def append(path, parts):
        real_append(path, parts[:1])
        stop()
    module._append = append
module.publish(root, dates, lambda summary: statement, load_stops(), Path(str(root) + "-state"))
"""


@pytest.mark.parametrize("hang", ["write", "append"])
def test_sigkill_mid_publish_keeps_the_publication(tmp_path, hang):
    """Killed while writing a date, or mid-way through the combined files: the committed publication stays
    valid (a half-written combined file is rebuilt by the next publish, which also removes the leftovers)."""
    root = tmp_path / "published"
    first, second = date_files()
    publish_release(root, "r1", [first])
    payload, flag = tmp_path / "payload.pkl", tmp_path / "ready"
    payload.write_bytes(pickle.dumps(([second], statement(release_id="r2"))))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(payload), str(flag), hang])
    try:
        deadline = time.monotonic() + 300  # generous: a busy machine (a mutation run) must not fail it
        while not flag.exists():
            assert child.poll() is None and time.monotonic() < deadline, "child never reached the hang point"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert json.loads((root / LATEST_JSON).read_text())["release_id"] == "r1"
    assert json.loads((root / "latest" / "index.json").read_text())["release_id"] == "r1"
    publish_release(root, "r3", [second])
    assert not any(p.name.startswith(".") for p in root.rglob("*"))
    validate_published(root / "latest")
    assert json.loads((root / LATEST_JSON).read_text())["release_id"] == "r3"


def test_published_release_asset_refuses_releases_the_ledger_never_charged(tmp_path, monkeypatch):
    """The publish gate builds the statement from the ledger: release assets whose draws the ledger does not
    hold never count as complete, so they stay pending and nothing appears under published/."""
    monkeypatch.setenv("OPAL_DP_DATA_DIR", str(tmp_path))
    keys = [f"2016-07-25|{mode}" for mode in MODES]
    no_trips = pd.DataFrame({
        "tap": pd.array([], dtype=object), "time_window": pd.array([], dtype="int16"),
        "loc": pd.Categorical([], categories=LABELS), "count": pd.array([], dtype="int64"),
        "bounded_count": pd.array([], dtype="int64"),
    })
    for i, key in enumerate(keys):
        folder = tmp_path.joinpath("private")
        write_parquet_atomic(no_trips, folder.joinpath("true_cells", *key.split("|")).with_suffix(".parquet"))
        draws = pd.DataFrame({"marginal": [m.name for m in MARGINALS], "draw_id": range(6 * i + 1, 6 * i + 7),
                              "charge_id": range(6 * i + 1, 6 * i + 7)})
        write_parquet_atomic(draws, folder.joinpath("release_draws", *key.split("|")).with_suffix(".parquet"))
        for marginal in MARGINALS:
            path = folder.joinpath("release", marginal.name, *key.split("|"))
            write_parquet_atomic(released(marginal, KEYS[0]), path.with_suffix(".parquet"))
    sources = [
        dg.AssetSpec(key, partitions_def=period_mode).with_io_manager_key("private_parquet")
        for key in (["true_cells"], ["release_draws"], *(["release", m.name] for m in MARGINALS))
    ] + [dg.AssetSpec(key, partitions_def=release_periods).with_io_manager_key("private_parquet")
         for key in ("od_prefix_tree", "od_hierarchy")]
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [*sources, published_release],
        instance=instance,
        resources={"private_parquet": private_parquet, "privacy_budget": PrivacyBudget(), "workers": PerDayWorkers(),
                   "reference": ReferenceNetwork(), "storage": OpalStorage(data_dir=str(tmp_path))},
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert "no week's release is complete" in message
    assert not (tmp_path / "published").exists()
