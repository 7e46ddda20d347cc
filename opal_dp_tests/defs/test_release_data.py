"""The command line as an agency runs it: real data is never mixed with the sample, one bad raw file never blocks
the good days, and bytes that are not text are rejected row by row without ever being printed or logged.

Every test runs ``python -m opal_dp.cli release`` in its own process on a few tiny days and reads what it published
and printed (in process, the command's progress bars and Dagster's log capture would share pytest's captured
streams)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from opal_dp.cli import ensure_dagster_home
from opal_dp.settings import STRICT_PERMISSIONS_ENV
from opal_dp.release.published_folder import LATEST
from opal_dp.release.statement.plain import SYNTHETIC_SAMPLE
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.fuzz.raw import tiny_day, write_day

GOOD, BAD, BYTES = "2016-07-25", "2016-07-26", "2016-07-27"
MARKERS = ("PLANTED-NUL", "PLANTED-89", "PLANTED-LATIN", "PLANTED-SHORT")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A Dagster home of the test's own (the CLI would otherwise make one under private/)."""
    path = ensure_dagster_home(tmp_path / "dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(path))
    monkeypatch.delenv(STRICT_PERMISSIONS_ENV, raising=False)
    return path


SMALL_SAMPLE = ("from opal_dp.simulate import sample; sample.SAMPLE_SCALE = 0.002; "
                "sample.SAMPLE_DATES = sample.SAMPLE_DATES[:1]; ")


WEEK = [f"2016-07-{d}" for d in range(25, 32)]


def release(data: Path, *extra: str, prelude: str = "", days: tuple[str, ...] = (GOOD, BAD, BYTES)) -> \
        subprocess.CompletedProcess:
    """``python -m opal_dp.cli release --data-dir DATA --privacy-unit trip ...`` in a process of its own
    (``prelude``: Python run first). These tests release a few ``days`` of one week: the week without the others
    (``--without``), at trip level."""
    without = [f"--without={d}" for d in WEEK if d not in days]
    args = ["release", "--data-dir", str(data), "--workers", "1", "--privacy-unit", "trip", *without, *extra]
    code = f"{prelude}import sys; from opal_dp.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=dict(os.environ),
                          timeout=900)


def statement(data: Path) -> dict:
    return json.loads((data / "published" / LATEST / "privacy.json").read_text(encoding="utf-8"))


def published_dates(data: Path) -> set[str]:
    return {k["date"] for k in partition_keys(statement(data))}


def test_a_data_directory_that_does_not_exist_is_refused_and_not_created(tmp_path, home):
    missing = tmp_path / "mistyped"
    run = release(missing)
    assert run.returncode != 0 and re.search(f"data directory {re.escape(str(missing))} does not exist.*--sample",
                                             run.stderr, re.S)
    assert not missing.exists()


def test_an_empty_data_directory_is_refused_without_generating_anything(tmp_path, home):
    run = release(tmp_path)
    assert run.returncode != 0 and re.search("no raw files in .*or give --sample", run.stderr, re.S)
    assert not (tmp_path / "raw").exists() or not any((tmp_path / "raw").iterdir())


@pytest.mark.slow
def test_the_sample_only_with_sample_and_every_published_file_set_says_it_is_synthetic(tmp_path, home):
    data = tmp_path / "new"
    run = release(data, "--sample", prelude=SMALL_SAMPLE, days=(GOOD,))
    assert run.returncode == 0, run.stderr[-2000:]
    days = ["20160725"]
    others = [d.replace("-", "") for d in WEEK[1:]]
    assert statement(data)["data"] == {"synthetic_sample": True, "synthetic_sample_dates": days, "pending_dates": [],
                                       "left_out_dates": others}
    assert published_dates(data) == set(days)
    text = (data / "published" / LATEST / "PRIVACY.md").read_text(encoding="utf-8")
    assert f"> **{SYNTHETIC_SAMPLE}**" in text
    assert "the bundled SYNTHETIC sample (generated trips, not real travel) for 1 of 1 days" in run.stdout

    # A real day and a malformed one next to the sample: --sample adds nothing, the release says which dates are
    # synthetic, and --strict-days publishes the good days (the week without the bad one) but exits with an error.
    write_day(data / "raw", BYTES, tiny_day(BYTES))
    write_day(data / "raw", BAD, tiny_day(BAD, seed=1).drop(columns="tap_off_stop"))
    files = sorted(p.name for p in (data / "raw").iterdir())
    run = release(data, "--sample", "--strict-days", prelude=SMALL_SAMPLE, days=(GOOD, BYTES))
    assert run.returncode != 0 and "--strict-days: 1 days could not be used" in run.stderr
    assert sorted(p.name for p in (data / "raw").iterdir()) == files
    assert "--sample: nothing generated" in run.stderr
    assert statement(data)["data"] == {"synthetic_sample": True, "synthetic_sample_dates": days, "pending_dates": [],
                                       "left_out_dates": [d for d in others if d != "20160727"]}
    assert published_dates(data) == {"20160725", "20160727"}
    text = (data / "published" / LATEST / "PRIVACY.md").read_text(encoding="utf-8")
    assert f"> **{SYNTHETIC_SAMPLE}**" in text and "Synthetic (the bundled sample): dates 20160725; the other" in text


def bad_bytes_day(raw: Path) -> tuple[Path, list[int]]:
    """A CSV day of good rows with rows holding NUL, 0x89 and Latin-1 bytes (each with a planted marker); returns
    the file and the lines that must be rejected."""
    good = tiny_day(BYTES, trips=1_500)
    lines = good.to_csv(index=False, lineterminator="\n").encode().splitlines()
    bad = {
        5: b"PLANTED-NUL\x00,bus,x,1,,",
        9: b"PLANTED-89\x89," + lines[9].split(b",", 1)[1],
        13: b"PLANTED-LATIN," + lines[13].split(b",", 1)[1].replace(b"bus", b"b\xe9s").replace(b"train", b"tr\xe4in")
            .replace(b"ferry", b"f\xe9rry").replace(b"light_rail", b"l\xefght_rail"),
        20: b"PLANTED-SHORT\x89,bus",
    }
    for line, text in bad.items():
        lines[line - 1] = text
    path = raw / f"trips_{BYTES}.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, sorted(bad)


@pytest.mark.slow
def test_a_bad_day_is_left_out_and_bad_bytes_are_rejected_by_row_never_printed(tmp_path, home):
    data = tmp_path / "data"
    write_day(data / "raw", GOOD, tiny_day(GOOD))
    write_day(data / "raw", BAD, tiny_day(BAD, seed=1).drop(columns="tap_off_stop"))  # a malformed extra day
    _, rejected_lines = bad_bytes_day(data / "raw")
    held = release(data)  # the bad day holds its week: named, nothing released
    assert held.returncode == 0, held.stderr[-2000:]
    assert f"not ingested: {BAD}: {data / 'raw' / f'trips_{BAD}.parquet'}: missing required column 'tap_off_stop'" \
        in held.stdout and "nothing published yet" in held.stdout
    printed = release(data, days=(GOOD, BYTES))  # the operator releases the week without it

    # Every good day is published; the bad one is named, here, in the roll-up and in the statement.
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert published_dates(data) == {"20160725", "20160727"}
    assert "20160726" in statement(data)["data"]["left_out_dates"]
    assert "20160726" in (data / "published" / LATEST / "PRIVACY.md").read_text(encoding="utf-8")
    with dg.DagsterInstance.get() as instance:
        rollup = instance.get_latest_materialization_event(dg.AssetKey("published_release")).asset_materialization
        assert BAD in rollup.metadata["days_left_out"].value and rollup.metadata["days_pending"].value == {}
        assert rollup.metadata["dates_in_release"].value == rollup.metadata["dates_written"].value == 2  # both new
        (ingest,) = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("ingested_trips"), asset_partitions=[BYTES]), limit=1).records
    meta = ingest.asset_materialization.metadata
    assert (meta["rows_read"].value, meta["rows_rejected"].value) == (1_500, 4)
    assert meta["rows_accepted"].value + meta["rows_rejected"].value == meta["rows_read"].value

    # The rows with NUL, 0x89 and Latin-1 bytes are rejected, each with its line and reason, all in one pass.
    rejected = pd.read_parquet(data / "private" / "rejected_trips" / f"{BYTES}.parquet")
    assert rejected["line"].tolist() == rejected_lines
    assert rejected["reason"].tolist()[1:] == ["not valid UTF-8 text"] * 3
    assert f"rejected rows: 4 (file, line, field and reason in {data / 'private' / 'rejected_trips'}" in printed.stdout
    assert f"not ingested: {BAD}" in printed.stdout

    # Nothing printed or logged came from a raw row, and no internal class name or traceback was printed.
    logs = "".join(p.read_text(errors="replace") for p in (data / "private" / "logs").iterdir())
    for marker in MARKERS:
        assert marker not in printed.stdout + printed.stderr + held.stdout + held.stderr + logs
    for out in (printed, held):
        assert "dagster._core" not in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr


def test_a_corrupt_sample_record_stops_the_release_in_one_line_naming_the_file_and_the_fix(tmp_path, home):
    (tmp_path / "raw").mkdir(mode=0o700)
    record = tmp_path / "raw" / "SYNTHETIC_SAMPLE.json"
    record.write_text("{not json", encoding="utf-8")
    run = release(tmp_path, "--sample", prelude=SMALL_SAMPLE)
    said = run.stderr.strip().splitlines()
    assert run.returncode != 0 and "Traceback" not in run.stderr and len(said) == 1, run.stderr
    assert said[0].startswith(f"{record}: the sample's record is not readable; delete it") and "make release" in said[0]
