"""The weekly roll-up sensor: one rollup run after each tick, only once something was released since the last
publication and nothing is in progress."""

from __future__ import annotations

import dagster as dg

from opal_dp.definitions import defs
from opal_dp.defs.shared.weekly import PUBLISHED, RELEASED, weekly_rollup

LAST_WEEK = "0"  # a cursor before every tick: the roll-up is due


def tick(instance: dg.DagsterInstance, cursor: str | None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs())
    return weekly_rollup(context), context.cursor


def released(instance: dg.DagsterInstance, day: str = "2016-07-25") -> None:
    instance.add_dynamic_partitions("service_date", [day])
    instance.report_runless_asset_event(dg.AssetMaterialization(RELEASED, partition=f"{day}|bus"))


def test_switched_on_it_waits_for_the_next_tick():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    result, cursor = tick(instance, None)
    assert isinstance(result, dg.SkipReason) and "first roll-up after" in result.skip_message
    again, _ = tick(instance, cursor)  # the tick it started at does not count
    assert isinstance(again, dg.SkipReason) and "next tick" in again.skip_message


def test_after_a_tick_it_launches_one_rollup_when_something_was_released():
    instance = dg.DagsterInstance.ephemeral()
    nothing, cursor = tick(instance, LAST_WEEK)
    assert isinstance(nothing, dg.SkipReason) and "nothing released" in nothing.skip_message
    assert cursor == LAST_WEEK  # still due: the first release after the tick is published when it ends
    released(instance)
    request, cursor = tick(instance, cursor)
    assert isinstance(request, dg.RunRequest) and request.run_key.startswith("weekly-rollup-")
    once, _ = tick(instance, cursor)
    assert isinstance(once, dg.SkipReason) and "next tick" in once.skip_message


def test_a_publication_newer_than_every_release_launches_nothing():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    instance.report_runless_asset_event(dg.AssetMaterialization(PUBLISHED))
    result, _ = tick(instance, LAST_WEEK)
    assert isinstance(result, dg.SkipReason) and "nothing released" in result.skip_message


def test_it_waits_while_a_run_is_in_progress():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    job = defs().resolve_job_def("rollup")
    run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    result, cursor = tick(instance, LAST_WEEK)
    assert isinstance(result, dg.SkipReason) and run.run_id in result.skip_message and cursor == LAST_WEEK
    instance.report_run_canceled(run)
    assert isinstance(tick(instance, cursor)[0], dg.RunRequest)
