"""Incremental publication, end to end under the trip unit (one scope per (date, mode) partition): each date is
published once; a re-run with no new data writes and charges nothing; a corrected raw file re-releases and
republishes that date only; the statement and the page never read a published CSV back; and the folder is
byte for byte what a publication from scratch of the same ledger gives.

One history is made once per module: day A released and published, then day B (with every published CSV
unreadable), then a re-run of both, then A's raw file replaced and A released again. Each step's published
files (size, mtime, SHA-256) and ledger are recorded. The audit runs at 10^5 releases per input, as in
``test_publish_gate`` (false-alarm bound alpha = 1e-6 at any number of runs).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from opal_dp.cli import run_release
from opal_dp.settings import AUDIT_RUNS_ENV
from opal_dp.definitions import defs
from opal_dp.defs.marginals.publish import PUBLICATION_STATE
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.published_folder import latest_release, validate_published
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, TRIP
from opal_dp_tests.fuzz.raw import tiny_day, write_day

pytestmark = pytest.mark.slow
AUDIT_RUNS = 10**5
A, B = (d.isoformat() for d in DAYS)
CA, CB = (d.replace("-", "") for d in (A, B))


def snapshot(storage: OpalStorage) -> dict[str, tuple[int, int, str]]:
    """Every published file -> (bytes, mtime in ns, SHA-256)."""
    root = storage.published_dir
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def ledger_state(storage: OpalStorage) -> tuple:
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    return ledger.charges(), ledger.draws()


def changed(before: dict, after: dict) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def forbid_reading_published(patch: pytest.MonkeyPatch, storage: OpalStorage, old_dates: list[str]) -> list[str]:
    """Any ``read_csv`` of a published file (other than the new date's, validated in its staging folder as it is
    written), and any opening for reading of an old date's published file, fails (and is recorded)."""
    published, attempts = str(storage.published_dir.resolve()), []
    old = [str(storage.published_dir.resolve() / "latest" / "dates" / d) for d in old_dates]
    read_csv, open_ = pd.read_csv, builtins.open

    def guarded_read_csv(path, *args, **kwargs):
        if str(Path(path).resolve()).startswith(published) and "/.staging-" not in str(path):
            attempts.append(str(path))
            raise AssertionError(f"read back a published CSV: {path}")
        return read_csv(path, *args, **kwargs)

    def guarded_open(path, mode="r", *args, **kwargs):
        if isinstance(path, (str, Path)) and "r" in mode and any(str(Path(path).resolve()).startswith(o) for o in old):
            attempts.append(str(path))
            raise AssertionError(f"opened an old date's published file: {path}")
        return open_(path, mode, *args, **kwargs)

    patch.setattr(pd, "read_csv", guarded_read_csv)
    patch.setattr(builtins, "open", guarded_open)
    return attempts


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    storage = OpalStorage(data_dir=str(tmp_path_factory.mktemp("incremental")))
    for day in (A, B):
        write_day(storage.raw_dir, day, tiny_day(day, trips=1_500))
    instance = dg.DagsterInstance.ephemeral()
    steps = {}

    delivered: set[str] = set()

    def release(dates: list[str], name: str) -> None:  # the week released with the days delivered so far
        delivered.update(dates)
        run_release(instance, dates=dates, data_dir=storage.root, budget=TRIP, without=other_days(delivered))
        steps[name] = (snapshot(storage), ledger_state(storage))

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AUDIT_RUNS_ENV, str(AUDIT_RUNS))
        release([A], "first")
        with pytest.MonkeyPatch.context() as guard:
            attempts = forbid_reading_published(guard, storage, [CA])
            release([B], "second")
        steps["read_back"] = attempts
        release([A, B], "rerun")
        write_day(storage.raw_dir, A, tiny_day(A, trips=1_500, seed=1))  # a corrected raw file for A
        cap = PrivacyBudget(**TRIP).ledger(storage).cap("trip")  # its release is charged again: room for it
        PrivacyBudget(**TRIP).ledger(storage).raise_cap("trip", 2 * cap.epsilon, 2 * cap.delta, "a corrected raw file")
        steps["raised"] = ledger_state(storage)
        release([A], "corrected")
    return instance, storage, steps


def test_each_date_is_published_once_and_the_old_dates_files_are_not_rewritten(history):
    _, storage, steps = history
    first, second = steps["first"][0], steps["second"][0]
    assert {n for n in first if n.startswith("latest/dates/")} == {
        *(f"latest/dates/{CA}/{t}.csv" for t in ("time-loc", "time", "loc", "od", "od-sequences")),
        f"latest/dates/{CA}/manifest.json"}
    touched = changed(first, second)
    assert not [n for n in touched if n.startswith(f"latest/dates/{CA}/")]
    assert {n for n in touched if n.startswith("latest/dates/")} == {n.replace(CA, CB) for n in first
                                                                    if n.startswith("latest/dates/")}
    index = json.loads((latest_release(storage.published_dir) / "index.json").read_text())
    assert sorted(index["dates"]) == [CA, CB]
    assert index["combined"]["time.csv"]["date_runs"] == [[CA, CA], [CB, CB]]  # two days apart
    # the index holds per date only its manifest's hash (the manifest lists the date's draws): a line a date
    manifest = latest_release(storage.published_dir) / "dates" / CA / "manifest.json"
    assert index["dates"][CA] == {"manifest.json": hashlib.sha256(manifest.read_bytes()).hexdigest()}


def test_the_statement_and_page_are_rebuilt_without_reading_a_published_csv(history):
    """Publishing B with every published CSV unreadable (``read_csv`` under published/ fails, and so does opening
    any file of date A): the run succeeds and its statement and page cover A and B."""
    _, storage, steps = history
    assert steps["read_back"] == []
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    assert {k["date"] for k in partition_keys(statement)} == {CA, CB}
    page = (storage.published_dir / "latest" / "index.html").read_text()
    assert all(f"{d[:4]}-{d[4:6]}-{d[6:]}" in page or d in page for d in (CA, CB))


def test_a_rerun_with_no_new_data_publishes_and_charges_nothing(history):
    _, _, steps = history
    assert steps["rerun"][0] == steps["second"][0]  # bytes, mtimes and contents of every published file
    assert steps["rerun"][1] == steps["second"][1]  # charges and draws


def test_a_correction_republishes_that_date_only_and_the_statement_names_it(history):
    _, storage, steps = history
    (before, _), (charges, draws) = steps["rerun"], steps["raised"]
    after, (charges_now, draws_now) = steps["corrected"]
    touched = changed(before, after)
    combined = [f"latest/{t}.csv" for t in ("time-loc", "time", "loc", "od", "od-sequences")]
    own = ["latest/index.json", "latest/privacy.json", "latest/PRIVACY.md", "latest/index.html", "latest.json"]
    assert touched == sorted({*(n for n in before if n.startswith(f"latest/dates/{CA}/")), *combined, *own})
    new_charges = [c for c in charges_now if c not in charges]
    assert new_charges and {c.scope.split("|")[0] for c in new_charges if c.unit == "trip"} == {A}
    assert {d.date for d in draws_now if d not in draws} == {A}
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    assert statement["corrections"] and {c["date"] for c in statement["corrections"]} == {CA}
    assert f"Corrected: {CA}" in (storage.published_dir / "latest" / "PRIVACY.md").read_text()
    validate_published(latest_release(storage.published_dir))


def test_the_incremental_folder_is_what_a_publication_from_scratch_gives(history, tmp_path):
    """The same ledger and release assets published at once into an empty folder: every file byte-identical,
    once the release id and creation time (the only things a publication run adds) are made the same."""
    instance, storage, _ = history
    scratch = OpalStorage(data_dir=str(tmp_path / "data"))
    shutil.copytree(storage.root, scratch.root, symlinks=True)
    shutil.rmtree(scratch.published_dir)
    shutil.rmtree(scratch.private_dir / PUBLICATION_STATE)
    config = {"resources": {"storage": {"config": {"data_dir": scratch.data_dir}},
                            "privacy_budget": {"config": TRIP}}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AUDIT_RUNS_ENV, str(AUDIT_RUNS))
        result = defs().resolve_job_def("rollup").execute_in_process(
            instance=instance, run_config=config, asset_selection=[dg.AssetKey("published_release")])
    assert result.success

    def release(root: Path) -> dict:
        return json.loads((root / "latest" / "privacy.json").read_text())["release"]

    ours, theirs = release(storage.published_dir), release(scratch.published_dir)
    files = sorted(str(p.relative_to(storage.published_dir)) for p in storage.published_dir.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(scratch.published_dir)) for p in scratch.published_dir.rglob("*")
                           if p.is_file())
    for name in files:
        text = (storage.published_dir / name).read_text(encoding="utf-8")
        for key in ("id", "created_at"):
            text = text.replace(ours[key], theirs[key])
        assert text == (scratch.published_dir / name).read_text(encoding="utf-8"), name
