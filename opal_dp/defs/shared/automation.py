"""Automation: each raw day is ingested as it arrives, each week is released once all its days are ingested
(conditions declared on the assets), and the release is published weekly (``weekly.weekly_publication``).

One switch, ``OPAL_DP_AUTOMATION=1`` in the environment of the daemon (``make daemon``, ``deploy/``), starts the
two sensors (``raw_file_sensor``, ``opal_dp_automation``) and the schedule ``weekly_publication``; without it they
wait to be switched on in the UI (Automation). The instance remembers a switch made in the UI, which then wins over the
default. ``$OPAL_DP_SENSOR_INTERVAL`` (seconds, default 60) is how often each of them looks.

- ``raw_file_sensor`` records each new or replaced raw file as a new version of the external asset
  ``raw_trip_files`` (a runless materialisation of the day's partition whose data version is the file's name,
  size and modification time). It launches nothing. A file whose day this instance already ingested from exactly
  these bytes (from the UI or the command line, before the sensor was switched on) is not recorded again.
- The private day stages are ``DAY``: a day whose raw file is new or replaced is ingested, whatever else its week
  holds. The release assets of a week are ``PERIOD``: a week is released once every one of its seven days is
  ingested (none missing: a failed day is missing), and released again when one of them is ingested again (a
  correction, charged anew or refused at the caps). Neither is Dagster's ``eager()``, which for time partitions
  looks at the latest day or week only: an agency catching up on past weeks needs every one of them. Dagster's
  conditions see no update at their first evaluation, so that first evaluation (the automation sensor's first tick on
  this instance; not a restart, a switch off and on, or a changed condition) also ingests the backlog: each day not
  ingested whose raw file is recorded. A week whose days were all ingested before that tick is released by hand.
- ``opal_dp_automation`` evaluates these conditions over ``jobs.THE_RELEASE`` only (never the opt-in synthetic
  assets or the on-demand reports); it emits backfills, the same as a UI launch, and a backfill of week
  partitions is one run per week (``partitions``), so a refused week fails its own run and no other.
- The roll-up (ledger summary, audit, reports, publish) carries no condition: the schedule ``weekly_publication``
  launches it as one ``rollup`` run once a week, on the agency's clock.

Privacy parameters are deployment configuration (the ``privacy_budget`` resource), and publishing builds the
statement from the ledger, so whatever path released a draw, the publication states what the ledger holds.
"""

import json

import dagster as dg

from opal_dp import settings
from opal_dp.defs.shared.jobs import THE_RELEASE
from opal_dp.defs.shared.partitions import service_dates
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.day_records import raw_stamp, read_record
from opal_dp.prep.ingest import scan_raw_files

RAW_FILES = dg.AssetKey("raw_trip_files")
INGESTED_TRIPS = "ingested_trips"  # the day stage whose materialisation says a day is ingested
_READY = (~dg.AutomationCondition.any_deps_missing() & ~dg.AutomationCondition.any_deps_in_progress()
          & ~dg.AutomationCondition.in_progress())
# Dagster's conditions see no update on their first evaluation (``newly_updated`` is empty then, and
# ``since_last_handled`` resets on it): a day the raw-file sensor records just before automation's first tick (the two
# sensors race when the daemon starts), or a file already there when automation is first switched on, would never be
# ingested. The first evaluation of a day stage therefore also takes every day not ingested whose raw file is
# recorded: the backlog, once. It asks whether ``ingested_trips`` is missing, not the stage itself: a day stage added
# later is missing on every day at its own first evaluation, and the day stages run as one multi-asset, so its own
# ``missing()`` would ingest every day again and release every week again. Weeks get no such rule (a scan of every
# (week, mode) since the first date costs that first evaluation 40-50 s): a week whose days were all ingested before
# it is released by hand.
_UPDATED = dg.AutomationCondition.any_deps_updated().since_last_handled()
_BACKLOG = dg.AutomationCondition.initial_evaluation() & dg.AutomationCondition.asset_matches(
    INGESTED_TRIPS, dg.AutomationCondition.missing())
DAY = ((_UPDATED | _BACKLOG) & _READY).with_label("ingest_on_arrival")
PERIOD = (_UPDATED & _READY).with_label("release_complete_week")
SENSOR_INTERVAL = settings.sensor_interval_from_env()
SWITCH = dg.DefaultSensorStatus.RUNNING if settings.automation_from_env() else dg.DefaultSensorStatus.STOPPED

raw_trip_files = dg.AssetSpec(
    RAW_FILES,
    partitions_def=service_dates,
    group_name="ingest",
    description="The raw day files under raw/ (private input, observed by raw_file_sensor; never read by the UI).",
    kinds={"file"},
    tags={"data_class": "microdata"},
)


@dg.sensor(minimum_interval_seconds=SENSOR_INTERVAL, default_status=SWITCH,
           description="Looks for new or replaced raw day files under raw/ and records each as a new version of "
                       "raw_trip_files for its service date; the day's ingest follows by automation. A file of a date "
                       "before $OPAL_DP_FIRST_DATE or of a day not yet over is skipped, and says so.")
def raw_file_sensor(context: dg.SensorEvaluationContext, storage: OpalStorage) -> dg.SensorResult:
    """Record every new or replaced raw file as a new version of ``raw_trip_files``; the assets' automation
    conditions do the rest. A replaced file re-runs the day, then its week: if the week was released, the release is
    a correction, which the ledger charges anew or refuses at the caps."""
    seen = json.loads(context.cursor) if context.cursor else {}
    found, unusable = scan_raw_files(storage.raw_dir) if storage.raw_dir.exists() else ({}, {})
    days = set(service_dates.get_partition_keys())
    current, skipped = {}, []
    for day, paths in found.items():
        if day not in days:
            skipped.append(day)
            continue
        st = [path.stat() for path in paths]
        current[day] = ";".join(f"{p.name}:{s.st_mtime_ns}:{s.st_size}" for p, s in zip(paths, st))
    for day in sorted(skipped):
        context.log.warning(f"raw file of {day} skipped: not a service date of this deployment "
                            f"({settings.FIRST_DATE_ENV} to yesterday)")
    for name, why in sorted(unusable.items()):
        context.log.warning(f"ignored: {why}")
    changed = _not_yet_ingested(context.instance, storage, found,
                                sorted(day for day, stamp in current.items() if seen.get(day) != stamp))
    return dg.SensorResult(
        asset_events=[dg.AssetMaterialization(RAW_FILES, partition=day, tags={"dagster/data_version": current[day]},
                                              metadata={"files": current[day].split(":")[0]})
                      for day in changed],
        cursor=json.dumps(current, sort_keys=True),
    )


def _not_yet_ingested(instance: dg.DagsterInstance, storage: OpalStorage, found: dict, days: list[str]) -> list[str]:
    """Of ``days`` (files the sensor has not recorded yet), those not already ingested from exactly these bytes: a
    sensor switched on after days were ingested from the UI or the command line (its cursor empty) records only the
    days whose file is new or replaced since, so that its first tick does not ingest and release everything again.
    Already ingested means both: the day's record names this very file (name, size, modification time) and this
    instance holds the day's ``ingested_trips`` materialisation (else automation would see the day missing)."""
    ingested = instance.get_materialized_partitions(dg.AssetKey(INGESTED_TRIPS)) if days else set()
    return [day for day in days if not (day in ingested and len(found[day]) == 1 and _record_reads(storage, day,
                                                                                                    found[day][0]))]


def _record_reads(storage: OpalStorage, day: str, path) -> bool:
    record = read_record(storage.private_dir, day)
    return record is not None and record.ingested and record.raw == raw_stamp(path)


opal_dp_automation = dg.AutomationConditionSensorDefinition(
    "opal_dp_automation",
    target=THE_RELEASE,
    minimum_interval_seconds=SENSOR_INTERVAL,
    default_status=SWITCH,
    description="Evaluates the assets' automation conditions; emits backfills, as a launch from the UI does.",
)
