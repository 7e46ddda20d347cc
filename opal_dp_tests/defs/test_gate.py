"""The blocking checks gate: a release that fails one is never stored, so nothing downstream can publish it;
each partition's metadata is its own (not the run's totals)."""

from __future__ import annotations

import dataclasses
import json

import dagster as dg
import pandas as pd
import pytest

import opal_dp.defs.marginals.release as release_defs
from opal_dp.cli import run_release
from opal_dp.definitions import defs
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals.checks import DESIGN_CHECKS
from opal_dp.release.marginals.tables import COUNT, MARGINALS
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, TRIP
from opal_dp_tests.fuzz.raw import tiny_day, write_day

BAD_KEY = f"{DAYS[0].isoformat()}|train"


@pytest.fixture
def storage(tmp_path) -> OpalStorage:
    storage = OpalStorage(data_dir=str(tmp_path))
    for day in DAYS:
        write_day(storage.raw_dir, day.isoformat(), tiny_day(day.isoformat(), trips=1_500))
    return storage


def latest_metadata(instance: dg.DagsterInstance, asset: str) -> dict[str, dict]:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey.from_user_string(asset)),
                                              limit=1_000, ascending=True).records
    return {r.partition_key: r.asset_materialization.metadata for r in records}


@pytest.mark.slow
def test_a_release_failing_a_blocking_check_is_not_stored_and_never_published(storage, monkeypatch):
    real = release_defs.release_partitions

    def planted(*args, **kwargs):  # a bug in the engine: one released count below the threshold
        released = real(*args, **kwargs)
        if BAD_KEY in released:
            result = released[BAD_KEY]["tap_on_loc"]
            frame = result.frame.copy()
            frame.loc[frame.index[0], COUNT] = 1
            released[BAD_KEY]["tap_on_loc"] = dataclasses.replace(result, frame=frame)
        return released

    monkeypatch.setattr(release_defs, "release_partitions", planted)
    instance = dg.DagsterInstance.ephemeral()
    result = run_release(instance, data_dir=storage.root, budget=TRIP, without=other_days(d.isoformat() for d in DAYS))
    (why,) = result.refused.values()  # the week is refused, as one thing; nothing else failed
    assert "blocking checks failed; no release asset was stored" in why and f"{BAD_KEY} tap_on_loc:" in why
    (failed,) = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
    assert failed.job_name == "release" and (failed.tags[RANGE_START], failed.tags[RANGE_END]) == (
        "bus|2016-07-25", "train|2016-07-25")
    for marginal in MARGINALS:  # the whole run is refused: no piece of the week is stored, whatever its mode
        assert not instance.get_materialized_partitions(dg.AssetKey(["release", marginal.name]))
        assert not list(storage.private_dir.joinpath("release", marginal.name).rglob("*.parquet"))
    evaluations = [e.dagster_event.event_specific_data for e in instance.all_logs(failed.run_id)
                   if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
                   and e.dagster_event.event_specific_data.asset_key == dg.AssetKey(["release", "tap_on_loc"])]
    outcome = {(e.check_name, e.partition): e.passed for e in evaluations}  # each property of each partition
    bad = f"{BAD_KEY.split('|')[1]}|2016-07-25"
    assert outcome == {(name, f"{mode}|2016-07-25"): not (name == "counts_above_threshold" and f"{mode}|2016-07-25" == bad)
                       for name in DESIGN_CHECKS["sbh"] for mode in ("bus", "ferry", "light_rail", "train")}
    (failing,) = [e for e in evaluations if not e.passed]
    assert failing.metadata["failures"].value == 1 and f"{BAD_KEY} tap_on_loc:" in failing.metadata["first_failures"].value
    failure = next(e for e in instance.all_logs(failed.run_id) if e.dagster_event and e.dagster_event.is_step_failure)
    assert f"{BAD_KEY} tap_on_loc:" in failure.dagster_event.step_failure_data.error.message
    assert "rollup" not in result.runs and not storage.published_dir.exists()  # nothing released: nothing to publish


@pytest.mark.slow
def test_per_partition_metadata_is_each_partitions_own(storage):
    instance = dg.DagsterInstance.ephemeral()
    run_release(instance, data_dir=storage.root, budget=TRIP, without=other_days(d.isoformat() for d in DAYS))
    meta = latest_metadata(instance, "release/tap_on_time_loc")
    assert sorted(meta) == [f"{mode}|2016-07-25" for mode in ("bus", "ferry", "light_rail", "train")]
    for key, values in meta.items():  # a (week, mode)'s figures are those of its (date, mode) pieces
        mode = key.split("|")[0]
        stored = [pd.read_parquet(storage.private_dir.joinpath("release", "tap_on_time_loc", d.isoformat(),
                                                               f"{mode}.parquet")) for d in DAYS]
        assert values["dagster/row_count"].value == sum(map(len, stored)) and values["dates"].value == 2
        assert values["blocking_checks"].value == "all passed"
    assert len({v["dagster/row_count"].value for v in meta.values()}) > 1  # not one run-wide figure copied
    ingest = latest_metadata(instance, "ingested_trips")
    assert {k: v["rows_read"].value for k, v in ingest.items()} == {d.isoformat(): 1_500 for d in DAYS}
