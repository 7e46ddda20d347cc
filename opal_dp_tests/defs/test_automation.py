"""Automation declared on the assets: the raw-file sensor only records file versions; each raw day is ingested when
its file is there, each week is released once all its days are ingested, whichever path launched the first runs;
and a bad day holds its own week only, while the weeks around it, later ones included, are released."""

from __future__ import annotations

import json
import os
from datetime import date, timedelta

import dagster as dg
import pytest
from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests_with_backfill_policies
from dagster._core.definitions.events import AssetKeyPartitionKey

from opal_dp.definitions import defs
from opal_dp.defs.shared.automation import RAW_FILES, raw_file_sensor
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.jobs import run_plan
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, period_and_mode, period_mode
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.network import MODES
from opal_dp.release.statement.runs import draws_of, partition_keys
from opal_dp_tests.conftest import write_csv
from opal_dp_tests.fuzz.raw import tiny_day, write_day

ROLLUP_ASSETS = {"privacy_ledger", "privacy_audit", "utility_report", "disclosure_risk", "published_release"}
WEEKS = [[(date(2016, 7, 25) + timedelta(days=7 * w + d)).isoformat() for d in range(7)] for w in range(3)]


@pytest.fixture
def storage(tmp_path) -> OpalStorage:
    (tmp_path / "raw").mkdir()
    return OpalStorage(data_dir=str(tmp_path))


def sensor_tick(instance, storage, cursor=None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs(),
                                      resources={"storage": storage})
    return raw_file_sensor(context)


def test_raw_file_sensor_records_versions_but_launches_nothing(storage):
    instance = dg.DagsterInstance.ephemeral()
    write_csv(storage.raw_dir, "2016-07-25", [])
    write_csv(storage.raw_dir, "2016-07-26", [])
    write_csv(storage.raw_dir, "2016-07-24", [])  # before $OPAL_DP_FIRST_DATE: no service date of this deployment
    result = sensor_tick(instance, storage)
    assert result.run_requests == [] and result.dynamic_partitions_requests == []
    assert [(e.asset_key, e.partition) for e in result.asset_events] == [(RAW_FILES, "2016-07-25"),
                                                                         (RAW_FILES, "2016-07-26")]
    again = sensor_tick(instance, storage, result.cursor)
    assert again.asset_events == []
    path = write_csv(storage.raw_dir, "2016-07-26", [{"card_id": 1}])
    os.utime(path, ns=(1, 1))
    replaced = sensor_tick(instance, storage, again.cursor)
    assert [e.partition for e in replaced.asset_events] == ["2016-07-26"]  # a new version: the day re-runs
    assert replaced.run_requests == []


def test_a_sensor_switched_on_after_days_were_ingested_records_only_new_or_replaced_files(storage):
    """Days ingested from the UI or the command line before the raw-file sensor's first tick (empty cursor) are not
    recorded again as new files, which would ingest and release them all again; a day not yet ingested and a file
    replaced since its day was ingested are."""
    instance = dg.DagsterInstance.ephemeral()
    deliver(storage, WEEKS[0][:3])
    config = {"resources": {"storage": {"config": {"data_dir": storage.data_dir}}}}
    assert defs().resolve_job_def("private_stages").execute_in_process(
        instance=instance, run_config=config, tags={RANGE_START: WEEKS[0][0], RANGE_END: WEEKS[0][2]}).success
    deliver(storage, WEEKS[0][3:4])
    replaced = write_day(storage.raw_dir, WEEKS[0][1], tiny_day(WEEKS[0][1], trips=1_200, seed=9))
    os.utime(replaced, ns=(1, 1))
    first = sensor_tick(instance, storage)
    assert [e.partition for e in first.asset_events] == [WEEKS[0][1], WEEKS[0][3]]
    assert set(json.loads(first.cursor)) == set(WEEKS[0][:4])  # every file is remembered, recorded or not
    elsewhere = dg.DagsterInstance.ephemeral()  # an instance that never saw the days ingested: it records them all
    assert [e.partition for e in sensor_tick(elsewhere, storage).asset_events] == WEEKS[0][:4]


def test_days_recorded_before_automations_first_evaluation_are_ingested_once(storage):
    """The daemon's two sensors race: a delivery the raw-file sensor records before the automation sensor's first
    evaluation (or files already there when automation is first switched on) is ingested by that first evaluation,
    and not requested again by the next one. A day already ingested is not, although its other day stages are
    missing (as a day stage added later is on every day, at its own first evaluation)."""
    instance = dg.DagsterInstance.ephemeral()
    deliver(storage, WEEKS[0][:3])
    apply_sensor_result(instance, sensor_tick(instance, storage))
    ingest = dg.AssetKey("ingested_trips")
    instance.report_runless_asset_event(dg.AssetMaterialization(ingest, partition=WEEKS[0][0]))
    first = dg.evaluate_automation_conditions(defs=defs(), instance=instance)
    assert first.get_requested_partitions(ingest) == set(WEEKS[0][1:3])
    assert not first.get_num_requested(dg.AssetKey("release_draws"))  # the week is not complete
    again = dg.evaluate_automation_conditions(defs=defs(), instance=instance, cursor=first.cursor)
    assert not again.get_num_requested(ingest)


def test_the_cli_and_a_ui_backfill_release_one_week_a_run_every_mode_in_it():
    """The run plan: one ingest run over the days, then a release and an OD release run per week, then the roll-up;
    a backfill of (week, mode) partitions over several weeks is split by Dagster along the week, the same runs."""
    plan = run_plan([("2016-07-25", "2016-08-14")], ["2016-07-25", "2016-08-08"])
    assert plan[0] == ("private_stages", ("2016-07-25", "2016-08-14")) and plan[-1] == ("rollup", None)
    assert [span for job, span in plan if job == "release"] == [
        (f"{MODES[0]}|{w}", f"{MODES[-1]}|{w}") for w in ("2016-07-25", "2016-08-08")]
    assert [span for job, span in plan if job == "release_od"] == [(w, w) for w in ("2016-07-25", "2016-08-08")]
    graph = defs().resolve_asset_graph()
    requested = [AssetKeyPartitionKey(dg.AssetKey(["release", "tap_on_time"]), f"{mode}|{week}")
                 for week in ("2016-07-25", "2016-08-01", "2016-08-08") for mode in MODES]
    runs = build_run_requests_with_backfill_policies(requested, graph, dg.DagsterInstance.ephemeral())
    spans = sorted((r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
                   for r in runs)
    assert spans == [(f"{MODES[0]}|{w}", f"{MODES[-1]}|{w}") for w in ("2016-07-25", "2016-08-01", "2016-08-08")]


def test_a_partition_key_splits_into_week_and_mode_as_dagster_parses_it():
    """``period_and_mode`` reads keys directly (a roll-up splits every key of the history): it must agree with
    Dagster's own parse of every key it hands over, and refuse what is not a (week, mode) key."""
    keys = period_mode.get_partition_keys()[:2 * len(MODES)]
    for key in keys:
        parsed = period_mode.get_partition_key_from_str(str(key)).keys_by_dimension
        assert period_and_mode(key) == period_and_mode(str(key)) == (parsed["period"], parsed["mode"])
    for bad in ("2016-07-25", "tram|2016-07-25", "bus|", "2016-07-25|bus"):
        with pytest.raises(ValueError, match="<mode>|<week>"):
            period_and_mode(bad)


def apply_sensor_result(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """What the daemon does with the raw-file sensor's result: record the observations."""
    for event in result.asset_events:
        instance.report_runless_asset_event(event)


def automate(definitions: dg.Definitions, instance: dg.DagsterInstance, cursor=None, rounds: int = 8):
    """Play the automation daemon: evaluate the conditions, and run what they request as the daemon makes the runs
    (Dagster's own split of requested partitions by backfill policy: a day range, one run a week), with the implicit
    asset job (a launch from the asset graph), until nothing more is requested. Returns the runs and the cursor."""
    ran = []
    graph = definitions.resolve_asset_graph()
    for _ in range(rounds):
        result = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=cursor)
        cursor = result.cursor
        requested = [AssetKeyPartitionKey(key, partition)
                     for key in definitions.resolve_all_asset_keys() if result.get_num_requested(key)
                     for partition in result.get_requested_partitions(key)]
        if not requested:
            return ran, cursor
        for request in build_run_requests_with_backfill_policies(requested, graph, instance):
            keys = list(request.asset_selection)
            job = definitions.resolve_implicit_job_def_def_for_assets(keys)
            done = job.execute_in_process(instance=instance, asset_selection=keys, tags=request.tags,
                                          raise_on_error=False)
            span = (request.tags.get("dagster/asset_partition_range_start"),
                    request.tags.get("dagster/asset_partition_range_end"))
            ran.append((sorted(k.to_user_string() for k in keys), span, done.success))
    raise AssertionError(f"automation still requesting after {rounds} rounds: {ran}")


def deliver(storage: OpalStorage, days: list[str], seed: int = 0) -> None:
    for i, day in enumerate(days):
        write_day(storage.raw_dir, day, tiny_day(day, trips=1_200, seed=seed + i))


def weeks_released(ran) -> set[str]:
    return {period_and_mode(span[0])[0] for keys, span, ok in ran if ok and "release_draws" in keys}


@pytest.mark.slow
def test_automation_releases_whole_weeks_and_a_bad_day_holds_its_own_week_only(tmp_path):
    """The acceptance sequence, as the daemon runs it: two weeks arrive, one day of the second truncated. The first
    week is released (one run, every mode), the second is not and nothing is charged to it; a third week arriving
    later is released although the bad day is still bad; the fixed file releases the second week. The deployment's
    privacy_budget (not the default) is what every run charges, and the weekly roll-up publishes it."""
    storage = OpalStorage(data_dir=str(tmp_path))
    budget = PrivacyBudget(privacy_unit="card_period", person_cap_epsilon=40.0)
    base = defs()
    definitions = dg.Definitions(
        assets=base.assets, asset_checks=base.asset_checks, jobs=base.jobs, sensors=base.sensors,
        loggers=base.loggers, resources={**base.resources, "storage": storage, "privacy_budget": budget})
    instance = dg.DagsterInstance.ephemeral()
    ledger = lambda: budget.ledger(storage)  # noqa: E731
    bad = WEEKS[1][2]
    deliver(storage, WEEKS[0] + WEEKS[1])
    (storage.raw_dir / f"trips_{bad}.parquet").write_bytes(b"PAR1 truncated")  # unreadable: fails its day
    first = dg.evaluate_automation_conditions(defs=definitions, instance=instance)  # the daemon is running...
    apply_sensor_result(instance, tick := sensor_tick(instance, storage))  # ...when the raw-file sensor sees the days
    ran, cursor = automate(definitions, instance, first.cursor)
    assert weeks_released(ran) == {WEEKS[0][0]}, ran
    ingest = [r for r in ran if "ingested_trips" in r[0]]
    assert len(ingest) == 1 and not ingest[0][2]  # one ingest run: it fails naming the bad day...
    assert instance.get_materialized_partitions(dg.AssetKey("bounded_trips")) == set(WEEKS[0] + WEEKS[1]) - {bad}
    assert not [c for c in ledger().charges() if c.scope.startswith(WEEKS[1][0])]  # ...whose week is not charged
    assert not {k for keys, _, _ in ran for k in keys} & ROLLUP_ASSETS  # the roll-up is weekly
    deliver(storage, WEEKS[2], seed=50)  # a third week arrives; the bad day is still bad
    apply_sensor_result(instance, tick := sensor_tick(instance, storage, tick.cursor))
    ran, cursor = automate(definitions, instance, cursor)
    assert weeks_released(ran) == {WEEKS[2][0]}, ran
    write_day(storage.raw_dir, bad, tiny_day(bad, trips=1_200, seed=99))  # the fixed file, in its place
    apply_sensor_result(instance, sensor_tick(instance, storage, tick.cursor))
    ran, cursor = automate(definitions, instance, cursor)
    assert weeks_released(ran) == {WEEKS[1][0]} and all(ok for *_, ok in ran), ran
    rollup = definitions.resolve_job_def("rollup").execute_in_process(instance=instance)  # as weekly_rollup launches it
    assert rollup.success
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    assert {k["date"] for k in partition_keys(statement)} == {d.replace("-", "") for w in WEEKS for d in w}
    assert sorted(s["scope"] for s in statement["guarantee"]["scopes"]) == [f"{w[0]}..{w[-1]}" for w in WEEKS]
    charges = ledger().charges()
    assert {c.scope for c in charges} == {f"{w[0]}..{w[-1]}" for w in WEEKS}
    assert sorted(draws_of(statement["ledger"]["draws"]) + draws_of(statement["od"]["draws"])) == sorted(
        d.id for d in ledger().draws())
