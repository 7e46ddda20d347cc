"""Automation: a new raw day file starts its private stages; finished private stages start the release
of that day's (date, mode) partitions; a finished release starts the roll-up (ledger, publish).
A weekly schedule releases the last complete week (Monday to Sunday) of the days that exist.

Every request covers its partitions with one run (a partition range + single-run backfill policies).
"""

import json
from datetime import date, datetime, timedelta

import dagster as dg

from opal_dp import settings
from opal_dp.defs.jobs import private_stages_job, release_job, rollup_job
from opal_dp.defs.partitions import RANGE_END, RANGE_START, contiguous_ranges, date_mode, service_dates
from opal_dp.prep.ingest import raw_files

SYDNEY = "Australia/Sydney"


def release_ranges(instance: dg.DagsterInstance, dates: set[str]) -> list[tuple[str, str]]:
    """The (date, mode) keys of ``dates`` as the fewest ranges of contiguous keys (one run each)."""
    keys = date_mode.get_partition_keys(dynamic_partitions_store=instance)
    return contiguous_ranges(keys, [k for k in keys if k.keys_by_dimension["date"] in dates])


def range_requests(run_key: str, ranges: list[tuple[str, str]]) -> list[dg.RunRequest]:
    return [
        dg.RunRequest(run_key=f"{run_key}:{first}:{last}", tags={RANGE_START: first, RANGE_END: last})
        for first, last in ranges
    ]


def run_dates(instance: dg.DagsterInstance, tags: dict[str, str]) -> set[str]:
    """Service dates a finished private-stages run covered (single partition or range)."""
    if "dagster/partition" in tags:
        return {tags["dagster/partition"]}
    known = service_dates.get_partition_keys(dynamic_partitions_store=instance)
    if RANGE_START in tags and tags[RANGE_START] in known and tags[RANGE_END] in known:
        return set(known[known.index(tags[RANGE_START]) : known.index(tags[RANGE_END]) + 1])
    return set()


def last_complete_week(today: date) -> list[str]:
    """Monday..Sunday of the latest week that ended before ``today``."""
    monday = today - timedelta(days=today.weekday() + 7)
    return [(monday + timedelta(days=i)).isoformat() for i in range(7)]


@dg.sensor(job=private_stages_job, minimum_interval_seconds=60)
def raw_file_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """A new (or replaced) raw day file: register its service date and run its private stages.

    A replaced file re-runs the day; if its trips changed, the release is a new one and the ledger
    charges it (or refuses it, at the cap) - corrected data is never released silently.
    """
    seen = json.loads(context.cursor) if context.cursor else {}
    files = raw_files(settings.raw_dir())
    current = {day: f"{path.name}:{path.stat().st_mtime_ns}:{path.stat().st_size}" for day, path in files.items()}
    changed = sorted(day for day, stamp in current.items() if seen.get(day) != stamp)
    known = set(service_dates.get_partition_keys(dynamic_partitions_store=context.instance))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"{day}:{current[day]}", partition_key=day) for day in changed],
        dynamic_partitions_requests=[service_dates.build_add_request(sorted(set(changed) - known))]
        if set(changed) - known
        else [],
        cursor=json.dumps(current, sort_keys=True),
    )


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[private_stages_job],
    request_job=release_job,
)
def release_after_private_stages(context: dg.RunStatusSensorContext):
    """Release the (date, mode) partitions of the days a successful private-stages run produced."""
    return release_request(context.instance, context.dagster_run)


def release_request(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[dg.RunRequest] | dg.SkipReason:
    ranges = release_ranges(instance, run_dates(instance, run.tags))
    if not ranges:
        return dg.SkipReason("the finished run covered no known service date")
    return range_requests(f"release:{run.run_id}", ranges)


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[release_job],
    request_job=rollup_job,
)
def rollup_after_release(context: dg.RunStatusSensorContext):
    """After a successful release: summarise the ledger and publish."""
    return dg.RunRequest(run_key=f"rollup:{context.dagster_run.run_id}")


@dg.schedule(job=release_job, cron_schedule="0 6 * * 1", execution_timezone=SYDNEY)
def weekly_release(context: dg.ScheduleEvaluationContext):
    """Every Monday 06:00 Sydney time: release last week's (date, mode) partitions, in one run."""
    return weekly_request(context.instance, context.scheduled_execution_time)


def weekly_request(instance: dg.DagsterInstance, when: datetime) -> list[dg.RunRequest] | dg.SkipReason:
    week = last_complete_week(when.date())
    ranges = release_ranges(instance, set(week))
    if not ranges:
        return dg.SkipReason(f"no service dates registered for the week {week[0]}..{week[-1]}")
    return range_requests(f"weekly:{week[0]}", ranges)
