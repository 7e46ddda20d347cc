"""Automation: new or replaced raw days are released as they arrive (conditions declared on the assets), and the
release is published weekly (``weekly.weekly_rollup``).

One switch, ``OPAL_DP_AUTOMATION=1`` in the environment of the daemon (``make daemon``, ``deploy/``), starts the
three sensors (``raw_file_sensor``, ``opal_dp_automation``, ``weekly_rollup``); without it they wait to be
switched on in the UI (Automation). The instance remembers a switch made in the UI, which then wins over the
default. ``$OPAL_DP_SENSOR_INTERVAL`` (seconds, default 60) is how often each of them looks.

- ``raw_file_sensor`` only registers service dates and records each raw file's version (a runless
  materialisation of the external asset ``raw_trip_files`` whose data version is the file's name, size and
  modification time). It launches nothing.
- Every private stage and every release asset is ``eager``: a new date (a missing partition) or a newer upstream
  (a replaced raw file) is materialised once nothing upstream is missing or in progress. ``bounded_trips``
  ignores ``card_days`` (read only by the card_period day cap, which checks the period is complete itself), so
  one new day does not re-bound every other day.
- ``opal_dp_automation`` evaluates these conditions over ``jobs.THE_RELEASE`` only (never the opt-in synthetic
  assets or the on-demand reports); it emits backfills, the same as a UI launch, so automation, the UI and
  ``make release`` share one plan (``jobs.run_plan``).
- The roll-up (ledger summary, audit, reports, publish) carries no condition: ``weekly_rollup`` launches it as
  one ``rollup`` run once a week.

Privacy parameters are deployment configuration (the ``privacy_budget`` resource), and publishing builds the
statement from the ledger, so whatever path released a draw, the publication states what the ledger holds.
"""

import json

import dagster as dg

from opal_dp import settings
from opal_dp.defs.shared.jobs import THE_RELEASE
from opal_dp.defs.shared.partitions import service_dates
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.ingest import raw_files

RAW_FILES = dg.AssetKey("raw_trip_files")
STAGE = dg.AutomationCondition.eager()
BOUNDING = STAGE.ignore(dg.AssetSelection.assets("card_days"))
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


@dg.sensor(minimum_interval_seconds=SENSOR_INTERVAL, default_status=SWITCH)
def raw_file_sensor(context: dg.SensorEvaluationContext, storage: OpalStorage) -> dg.SensorResult:
    """Register the service date of every new raw day file, and record every new or replaced file as a new
    version of ``raw_trip_files``; the assets' automation conditions do the rest. A replaced file re-runs the day; if its trips
    changed, the release is a new one and the ledger charges it (or refuses it, at the cap)."""
    seen = json.loads(context.cursor) if context.cursor else {}
    files = raw_files(storage.raw_dir)
    current = {day: f"{path.name}:{path.stat().st_mtime_ns}:{path.stat().st_size}" for day, path in files.items()}
    changed = sorted(day for day, stamp in current.items() if seen.get(day) != stamp)
    known = set(service_dates.get_partition_keys(dynamic_partitions_store=context.instance))
    new = sorted(set(changed) - known)
    return dg.SensorResult(
        dynamic_partitions_requests=[service_dates.build_add_request(new)] if new else [],
        asset_events=[dg.AssetMaterialization(RAW_FILES, partition=day, tags={"dagster/data_version": current[day]},
                                              metadata={"file": files[day].name})
                      for day in changed],
        cursor=json.dumps(current, sort_keys=True),
    )


opal_dp_automation = dg.AutomationConditionSensorDefinition(
    "opal_dp_automation",
    target=THE_RELEASE,
    minimum_interval_seconds=SENSOR_INTERVAL,
    default_status=SWITCH,
    description="Evaluates the assets' automation conditions; emits backfills, as a launch from the UI does.",
)
