"""The weekly publication: a schedule on the agency's clock, ``$OPAL_DP_PUBLISH_CRON`` (default Mondays 06:00) in
``$OPAL_DP_TIMEZONE`` (default Australia/Sydney), that launches one ``rollup`` run (ledger summary, audit, internal
reports, publish) at each tick where something was released since the last publication. The UI shows its next
tick; ``OPAL_DP_AUTOMATION=1`` switches it on with the sensors.

The roll-up carries no automation condition, so that a week's publication is one run in which the audit gates the
publication (a failed audit skips ``published_release``). A roll-up never waits for a late or failed day: it
publishes the weeks whose releases are complete in the ledger and lists the others as pending; a week still being
released when it runs is published at the next tick (the ledger's writers share one pool, so the roll-up's ledger
steps wait for a running release's).

Gating across runs: Dagster's blocking checks hold back only the steps of their own run, and the releases run
before the roll-up. A release evaluates its blocking checks inside its step before storing anything (a failure
stores nothing of that run), and ``published_release`` checks again exactly what it publishes.
"""

from __future__ import annotations

import dagster as dg
from dagster._utils.schedules import is_valid_cron_schedule

from opal_dp import settings
from opal_dp.defs.shared.automation import SWITCH
from opal_dp.defs.shared.jobs import rollup_job

PUBLISH_CRON, TIMEZONE = settings.publish_schedule_from_env()
if not is_valid_cron_schedule(PUBLISH_CRON):
    raise ValueError(f"{settings.PUBLISH_CRON_ENV} must be a cron schedule such as "
                     f"{settings.DEFAULT_PUBLISH_CRON!r}, got {PUBLISH_CRON!r}")
RELEASED, PUBLISHED = dg.AssetKey("release_draws"), dg.AssetKey("published_release")
SCHEDULE_STATUS = dg.DefaultScheduleStatus(SWITCH.value)


def _last_materialised(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    event = instance.get_latest_materialization_event(key)
    return event.timestamp if event else None


@dg.schedule(
    job=rollup_job,
    cron_schedule=PUBLISH_CRON,
    execution_timezone=TIMEZONE,
    default_status=SCHEDULE_STATUS,
    description=f"The weekly publication ({PUBLISH_CRON} in {TIMEZONE}: $OPAL_DP_PUBLISH_CRON, $OPAL_DP_TIMEZONE): one "
                "rollup run (ledger summary, privacy audit, internal reports, publish) when something was released "
                "since the last publication; otherwise the tick is skipped, saying so.",
)
def weekly_publication(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    released = _last_materialised(context.instance, RELEASED)
    published = _last_materialised(context.instance, PUBLISHED)
    if released is None or (published is not None and published >= released):
        return dg.SkipReason("nothing released since the last publication")
    tick = context.scheduled_execution_time
    return dg.RunRequest(run_key=f"weekly-publication-{tick.isoformat()}", tags={"opal_dp/publish_tick": tick.isoformat()})
