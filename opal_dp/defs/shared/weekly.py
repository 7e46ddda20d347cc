"""The weekly publication: one ``rollup`` run (ledger summary, audit, internal reports, publish) per tick of
``$OPAL_DP_PUBLISH_CRON`` (default Mondays 06:00) in ``$OPAL_DP_PUBLISH_TIMEZONE`` (default UTC).

``weekly_rollup`` is a sensor on that cron rather than a schedule, and the roll-up assets carry no automation
condition, so that the week's publication is one run in which the audit gates the publication (a failed audit
skips ``published_release``): after the tick it waits until no run or backfill is in progress (so a day being
released is not left half out), and it launches nothing when nothing was released since the last publication.
At most one roll-up per tick; a week with no new day publishes nothing, and then the first day released after
the tick is published when its release ends. A roll-up never waits for a late or failed day: it publishes the
partitions whose releases are complete in the ledger and lists the others as pending.

Gating across runs: Dagster's blocking checks hold back only the steps of their own run, and the releases run
before the roll-up. A release evaluates its blocking checks inside its step before storing anything (a failure
stores nothing of that run), and ``published_release`` checks again exactly what it publishes.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg
from dagster._utils.schedules import get_latest_completed_cron_tick, get_next_cron_tick, is_valid_cron_schedule

from opal_dp import settings
from opal_dp.defs.shared.automation import SENSOR_INTERVAL, SWITCH
from opal_dp.defs.shared.jobs import rollup_job

PUBLISH_CRON, PUBLISH_TIMEZONE = settings.publish_schedule_from_env()
if not is_valid_cron_schedule(PUBLISH_CRON):
    raise ValueError(f"{settings.PUBLISH_CRON_ENV} must be a cron schedule such as "
                     f"{settings.DEFAULT_PUBLISH_CRON!r}, got {PUBLISH_CRON!r}")
RELEASED, PUBLISHED = dg.AssetKey("release_draws"), dg.AssetKey("published_release")
ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _last_materialised(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    event = instance.get_latest_materialization_event(key)
    return event.timestamp if event else None


def _in_progress(instance: dg.DagsterInstance) -> str | None:
    from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus

    runs = instance.get_run_records(dg.RunsFilter(statuses=ACTIVE), limit=1)
    if runs:
        return f"run {runs[0].dagster_run.run_id}"
    backfills = instance.get_backfills(filters=BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED]), limit=1)
    return f"backfill {backfills[0].backfill_id}" if backfills else None


@dg.sensor(
    job=rollup_job,
    minimum_interval_seconds=SENSOR_INTERVAL,
    default_status=SWITCH,
    description=f"The weekly publication ({PUBLISH_CRON}, {PUBLISH_TIMEZONE}): one rollup run after the tick, once "
                "nothing is in progress and something was released since the last publication.",
)
def weekly_rollup(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    now = datetime.now(timezone.utc)
    tick = get_latest_completed_cron_tick(PUBLISH_CRON, now, PUBLISH_TIMEZONE)
    upcoming = get_next_cron_tick(PUBLISH_CRON, now, PUBLISH_TIMEZONE)
    if context.cursor is None:  # switched on: the first roll-up follows the next tick
        context.update_cursor(str(tick.timestamp()))
        return dg.SkipReason(f"switched on: first roll-up after {upcoming.isoformat()}")
    if float(context.cursor) >= tick.timestamp():
        return dg.SkipReason(f"waiting for the next tick, {upcoming.isoformat()}")
    busy = _in_progress(context.instance)
    if busy:
        return dg.SkipReason(f"roll-up due since {tick.isoformat()}, waiting for {busy} to end")
    released, published = _last_materialised(context.instance, RELEASED), _last_materialised(context.instance, PUBLISHED)
    if released is None or (published is not None and published >= released):
        return dg.SkipReason("nothing released since the last publication")
    context.update_cursor(str(tick.timestamp()))
    return dg.RunRequest(run_key=f"weekly-rollup-{tick.isoformat()}", tags={"opal_dp/publish_tick": tick.isoformat()})
