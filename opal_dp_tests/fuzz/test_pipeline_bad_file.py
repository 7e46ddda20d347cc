"""End to end: nothing from a bad raw file, or from a day that is not asked for, reaches a release; a bad day holds
its week until the file is fixed or the operator releases the week without it."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from opal_dp import settings
from opal_dp.cli import run_release
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.marginals.open_data import TABLES
from opal_dp.release.published_folder import LATEST, validate_published
from opal_dp_tests.fuzz.raw import tiny_day, write_day

ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
TRIP = {"privacy_unit": "trip"}  # a few days of one week, released without the others: trip level
GOOD, BAD, WRONG_DATES, UNASKED = "2016-07-25", "2016-07-26", "2016-07-27", "2016-07-29"
WEEK = [f"2016-07-{d}" for d in range(25, 32)]


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(settings.DATA_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.mark.slow
def test_a_bad_file_fails_its_day_only_naming_the_file_and_never_reaches_a_release(data_dir):
    raw = default_storage().raw_dir
    write_day(raw, GOOD, tiny_day(GOOD))
    bad = write_day(raw, BAD, tiny_day(BAD, seed=1))
    bad.write_bytes(bad.read_bytes()[:-100])  # truncated Parquet
    rest = [d for d in WEEK if d not in (GOOD, BAD)]
    with dg.DagsterInstance.ephemeral() as instance:
        held = run_release(instance, budget=TRIP, without=rest)  # the bad day holds its week: nothing released
        assert list(held.failed_days) == [BAD] and f"{bad.name}: cannot be read as parquet" in held.failed_days[BAD]
        assert list(held.waiting.values()) == [{BAD: f"its raw file could not be used: {held.failed_days[BAD]}"}]
        (failed,) = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
        assert failed.job_name == "private_stages"  # the run over both days, which materialised GOOD
        assert instance.get_materialized_partitions(dg.AssetKey("bounded_trips")) == {GOOD}
        assert not default_storage().published_dir.exists() and days_with_bins(data_dir) == set()
        runs = run_release(instance, budget=TRIP, without=[*rest, BAD])  # the operator names the bad day
        assert "private_stages" not in runs.runs  # GOOD is not ingested again, BAD is not retried unchanged
        published = instance.get_latest_materialization_event(dg.AssetKey("published_release")).asset_materialization
        assert published.metadata["days_pending"].value == {}
        assert sorted(published.metadata["days_left_out"].value) == sorted([*rest, BAD])
    assert days_with_bins(data_dir) == {GOOD}
    validate_published(default_storage().published_dir / LATEST)

    # A good file of a day not asked for stays in raw/ unread; the bad one is still not read.
    write_day(raw, UNASKED, tiny_day(UNASKED, seed=3))
    with dg.DagsterInstance.ephemeral() as instance:
        run_release(instance, dates=[GOOD], budget=TRIP, without=[*rest, BAD])
        assert instance.get_materialized_partitions(dg.AssetKey("ingested_trips")) == set()  # nothing new
    validate_published(default_storage().published_dir / LATEST)
    assert days_with_bins(data_dir) == {GOOD}


@pytest.mark.slow
def test_a_release_where_no_day_can_be_ingested_stops_naming_each(data_dir):
    raw = default_storage().raw_dir
    for day in (GOOD, BAD):
        write_day(raw, day, tiny_day(day).drop(columns="tap_off_stop"))
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(SystemExit) as stopped:
        run_release(instance, budget=TRIP)
    message = str(stopped.value)
    assert message.startswith("no day could be ingested") and message.count("missing required column 'tap_off_stop'") == 2
    assert "dagster._core" not in message and "Traceback" not in message
    assert not default_storage().published_dir.exists()


@pytest.mark.slow
def test_a_day_whose_taps_are_all_on_another_date_releases_nothing(data_dir):
    write_day(default_storage().raw_dir, GOOD, tiny_day(GOOD))
    write_day(default_storage().raw_dir, WRONG_DATES, tiny_day("2016-07-28", seed=2))
    with dg.DagsterInstance.ephemeral() as instance:
        run_release(instance, budget=TRIP, without=[d for d in WEEK if d not in (GOOD, WRONG_DATES)])
        (wrong,) = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("ingested_trips"), asset_partitions=[WRONG_DATES]), limit=1).records
    meta = wrong.asset_materialization.metadata
    assert meta["rows_read"].value == 2_000 and meta["rows_accepted"].value == 0
    assert days_with_bins(data_dir) == {GOOD}


def days_with_bins(root: Path) -> set[str]:
    """Service dates with at least one released bin of the marginals, in the private store or a published table: their
    bins are released only where trips were counted. The OD prefix tree's files are not read: the tree measures every
    child of a released node, empty ones included, and lets ``core.prefix_tree.FALSE_CHILDREN`` expected false
    children through (a tree of no trips releases a node of noise about once in 80), so a date of no trips may show
    one without any trip of it having been read."""
    stored = [*(root / "private" / "release").rglob("*.parquet"), *(root / "private" / "releases").rglob("*.parquet")]
    found = {part for p in stored if len(pd.read_parquet(p)) for part in p.parts if ISO_DATE.fullmatch(part)}
    for csv in (c for t in TABLES for c in (root / "published").rglob(f"{t}.csv")):
        found |= {f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in pd.read_csv(csv, dtype=str)["date"].unique()}
    return found
