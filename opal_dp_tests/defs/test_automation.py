"""Automation declared on the assets: the raw-file sensor only registers days and records file versions;
eager conditions carry a new day to its release, whichever path launched the first runs; the weekly roll-up
publishes the complete partitions and lists a failed day as pending."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

from opal_dp.cli import run_release
from opal_dp.definitions import defs
from opal_dp.defs.shared.automation import RAW_FILES, raw_file_sensor
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.jobs import run_plan
from opal_dp.defs.shared.partitions import (
    RANGE_END,
    RANGE_START,
    contiguous_ranges,
    date_and_mode,
    date_mode,
    service_dates,
)
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.network import MODES
from opal_dp.release.statement.runs import draws_of, partition_keys
from opal_dp_tests.conftest import write_csv
from opal_dp_tests.defs.conftest import DAYS, TRIP
from opal_dp_tests.fuzz.raw import tiny_day, write_day

ROLLUP_ASSETS = {"privacy_ledger", "privacy_audit", "utility_report", "disclosure_risk", "published_release"}


@pytest.fixture
def storage(tmp_path) -> OpalStorage:
    (tmp_path / "raw").mkdir()
    return OpalStorage(data_dir=str(tmp_path))


def sensor_tick(instance, storage, cursor=None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs(),
                                      resources={"storage": storage})
    return raw_file_sensor(context)


def test_raw_file_sensor_registers_days_and_records_versions_but_launches_nothing(storage):
    instance = dg.DagsterInstance.ephemeral()
    write_csv(storage.raw_dir, "2016-07-25", [])
    write_csv(storage.raw_dir, "2016-07-26", [])
    result = sensor_tick(instance, storage)
    assert result.run_requests == []
    assert result.dynamic_partitions_requests[0].partition_keys == ["2016-07-25", "2016-07-26"]
    assert [(e.asset_key, e.partition) for e in result.asset_events] == [(RAW_FILES, "2016-07-25"),
                                                                         (RAW_FILES, "2016-07-26")]
    instance.add_dynamic_partitions("service_date", ["2016-07-25", "2016-07-26"])
    again = sensor_tick(instance, storage, result.cursor)
    assert again.asset_events == [] and again.dynamic_partitions_requests == []
    path = write_csv(storage.raw_dir, "2016-07-26", [{"card_id": 1}])
    os.utime(path, ns=(1, 1))
    replaced = sensor_tick(instance, storage, again.cursor)
    assert [e.partition for e in replaced.asset_events] == ["2016-07-26"]  # a new version: the day re-runs
    assert replaced.dynamic_partitions_requests == [] and replaced.run_requests == []


def test_the_cli_makes_the_runs_of_a_ui_backfill():
    """One private-stages run over the days, one release run per mode over the days (a date x mode range is a
    box, so Dagster splits it along modes, as the UI does), one roll-up."""
    plan = run_plan([("2016-07-25", "2016-08-14")])
    assert plan[0] == ("private_stages", ("2016-07-25", "2016-08-14")) and plan[-1] == ("rollup", None)
    assert [span for job, span in plan if job == "release"] == [
        (f"2016-07-25|{m}", f"2016-08-14|{m}") for m in MODES]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("service_date", ["2016-07-25", "2016-07-26", "2016-07-27"])
    box = date_mode.get_partition_keys_in_range(dg.PartitionKeyRange("2016-07-25|ferry", "2016-07-27|ferry"),
                                                dynamic_partitions_store=instance)
    assert sorted(map(str, box)) == [f"2016-07-2{d}|ferry" for d in (5, 6, 7)]


def test_a_partition_key_splits_into_date_and_mode_as_dagster_parses_it():
    """``date_and_mode`` reads keys directly (a roll-up splits every key of the history): it must agree with Dagster's
    own parse of every key it hands over, and refuse what is not a date x mode key."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("service_date", ["2016-07-25", "2016-12-31"])
    keys = date_mode.get_partition_keys(dynamic_partitions_store=instance)
    assert len(keys) == 2 * len(MODES)
    for key in keys:
        parsed = date_mode.get_partition_key_from_str(str(key)).keys_by_dimension
        assert date_and_mode(key) == date_and_mode(str(key)) == (parsed["date"], parsed["mode"])
    for bad in ("2016-07-25", "2016-07-25|tram", "|bus", "2016-07-25|bus|x", "bus|2016-07-25"):
        with pytest.raises(ValueError, match="date x mode|<date>"):
            date_and_mode(bad)


def apply_sensor_result(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """What the daemon does with a sensor result: register the partitions, record the observations."""
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    for event in result.asset_events:
        instance.report_runless_asset_event(event)


def automate(definitions: dg.Definitions, instance: dg.DagsterInstance, cursor=None, rounds: int = 6):
    """Play the automation daemon: evaluate the conditions, run what they request (per partitions definition,
    as ranges, with the implicit asset job: a launch from the asset graph), until nothing more is requested."""
    ran = []
    for _ in range(rounds):
        result = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=cursor)
        cursor = result.cursor
        requested = {key: result.get_requested_partitions(key) for key in definitions.resolve_all_asset_keys()
                     if result.get_num_requested(key)}
        if not requested:
            return ran
        by_scheme: dict[object, list] = {}
        for key in requested:
            scheme = definitions.resolve_assets_def(key).partitions_def
            by_scheme.setdefault(scheme, []).append(key)
        for scheme, keys in by_scheme.items():
            job = definitions.resolve_implicit_job_def_def_for_assets(keys)
            spans = _spans(scheme, {p for k in keys for p in requested[k]}, instance)
            for span in spans:
                tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
                result_run = job.execute_in_process(instance=instance, asset_selection=keys, tags=tags,
                                                    raise_on_error=False)
                ran.append((sorted(k.to_user_string() for k in keys), span, result_run.success))
    raise AssertionError(f"automation still requesting after {rounds} rounds: {ran}")


def _spans(scheme, partitions: set, instance) -> list:
    if scheme is None:
        return [None]
    if scheme == service_dates:
        return contiguous_ranges(service_dates.get_partition_keys(dynamic_partitions_store=instance),
                                 {str(p) for p in partitions})
    days = sorted({str(p).split("|")[0] for p in partitions})
    ranges = contiguous_ranges(service_dates.get_partition_keys(dynamic_partitions_store=instance), days)
    return [span for job, span in run_plan(ranges) if job == "release"]


@pytest.mark.slow
def test_a_launch_from_the_asset_graph_with_a_deployment_epsilon_flows_to_a_publication(tmp_path):
    """The deployment's privacy_budget (not the default) releases; automation follows with the release, the
    weekly roll-up publishes it, and privacy.json states exactly what the ledger charged."""
    storage = OpalStorage(data_dir=str(tmp_path))
    for day in DAYS:
        write_day(storage.raw_dir, day.isoformat(), tiny_day(day.isoformat(), trips=1_500))
    epsilon = {"tap_on_time": 0.5, "tap_on_loc": 0.5, "tap_off_time": 0.5, "tap_off_loc": 0.5,
               "tap_on_time_loc": 3.0, "tap_off_time_loc": 3.0}
    base = defs()
    definitions = dg.Definitions(
        assets=base.assets, asset_checks=base.asset_checks, jobs=base.jobs, sensors=base.sensors,
        loggers=base.loggers,
        resources={**base.resources, "storage": storage, "privacy_budget": PrivacyBudget(privacy_unit="trip", epsilon=epsilon)},
    )
    instance = dg.DagsterInstance.ephemeral()
    first = dg.evaluate_automation_conditions(defs=definitions, instance=instance)  # the daemon is running...
    apply_sensor_result(instance, sensor_tick(instance, storage))  # ...when the raw-file sensor sees the days
    ran = automate(definitions, instance, first.cursor)
    assert all(ok for *_, ok in ran), ran
    automated = {key for keys, _, _ in ran for key in keys}
    assert "release_draws" in automated and not automated & ROLLUP_ASSETS, ran  # the roll-up is weekly
    rollup = definitions.resolve_job_def("rollup").execute_in_process(instance=instance)  # as weekly_rollup launches it
    assert rollup.success
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    ledger = PrivacyBudget(privacy_unit="trip", epsilon=epsilon).ledger(storage)
    charged = {c.marginal: json.loads(c.mechanism)["epsilon"] for c in ledger.charges() if c.unit == "trip"}
    assert charged == epsilon  # the OD trees are charged to card_day scopes
    assert {m["name"]: m["epsilon"] for m in statement["marginals"]} == epsilon
    assert sorted(draws_of(statement["ledger"]["draws"]) + draws_of(statement["od"]["draws"])) == sorted(d.id for d in ledger.draws())


@pytest.mark.slow
def test_a_failed_day_leaves_the_rest_published_and_pending(tmp_path):
    """Register a third day whose raw file breaks ingest: the roll-up still publishes the complete partitions
    and lists the four of the failed day as pending; nothing fails because one day is late."""
    storage = OpalStorage(data_dir=str(tmp_path))
    for day in DAYS:
        write_day(storage.raw_dir, day.isoformat(), tiny_day(day.isoformat(), trips=1_500))
    instance = dg.DagsterInstance.ephemeral()
    run_release(instance, data_dir=storage.root, budget=TRIP)
    bad_day = "2016-07-31"
    write_csv(storage.raw_dir, bad_day, [], header="card_id,mode")  # missing columns: ingest fails
    instance.add_dynamic_partitions("service_date", [bad_day])
    stages = defs().resolve_job_def("private_stages").execute_in_process(
        instance=instance, tags={RANGE_START: bad_day, RANGE_END: bad_day}, raise_on_error=False,
        run_config={"resources": {"storage": {"config": {"data_dir": storage.data_dir}},
                                  "privacy_budget": {"config": TRIP}}})
    assert not stages.success
    rollup = defs().resolve_job_def("rollup").execute_in_process(
        instance=instance, run_config={"resources": {"storage": {"config": {"data_dir": storage.data_dir}},
                                                     "privacy_budget": {"config": TRIP}}})
    assert rollup.success
    published = [e for e in rollup.get_asset_materialization_events() if e.asset_key == dg.AssetKey("published_release")]
    meta = published[0].materialization.metadata
    assert meta["partitions_published"].value == 8
    assert meta["partitions_pending"].value == [f"{bad_day}|{m}" for m in MODES]
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    assert {k["date"] for k in partition_keys(statement)} == {d.strftime("%Y%m%d") for d in DAYS}


def test_contiguous_ranges_never_cover_a_key_that_was_not_asked_for():
    order = ["2016-07-25", "2016-07-27", "2016-07-26", "2016-07-28"]  # registration order, not calendar
    assert contiguous_ranges(order, ["2016-07-25", "2016-07-26"]) == [("2016-07-25", "2016-07-25"),
                                                                      ("2016-07-26", "2016-07-26")]
    assert contiguous_ranges(order, order[1:]) == [("2016-07-27", "2016-07-28")]
    assert contiguous_ranges(order, []) == []
