"""Automation, declared on the assets: new or replaced raw days flow through to a new publication.

- ``raw_file_sensor`` only registers service dates and records each raw file's version (a runless
  materialisation of the external asset ``raw_trip_files`` whose data version is the file's name, size and
  modification time). It launches nothing.
- Every stage below is ``eager``: a new date (a missing partition) or a newer upstream (a replaced raw file)
  is materialised once nothing upstream is missing or in progress. ``bounded_trips`` ignores ``card_days``
  (read only by the card_period day cap, which checks the period is complete itself), so one new day does not
  re-bound every other day.
- The roll-up (ledger summary, audit, reports, publish) is eager but does not wait for missing partitions:
  it runs after any release and publishes exactly the partitions whose releases are complete in the ledger,
  listing the others as pending; a late day never blocks or fails it.
- ``opal_dp_automation`` evaluates these conditions (start it in the UI: Automation); it emits backfills,
  the same as a UI launch, so automation, the UI and ``make release`` share one plan (``jobs.RUN_PLAN``).

Privacy parameters are deployment configuration (the ``privacy_budget`` resource), and publishing builds the
statement from the ledger, so whatever path released a draw, the publication states what the ledger holds.
"""

import json

import dagster as dg

from opal_dp.defs.shared.partitions import service_dates
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.ingest import raw_files

RAW_FILES = dg.AssetKey("raw_trip_files")
STAGE = dg.AutomationCondition.eager()
BOUNDING = STAGE.ignore(dg.AssetSelection.assets("card_days"))
ROLLUP = STAGE.without(next(o for o in STAGE.operands if o.get_label() is None and "any_deps_missing" in repr(o)))
ROLLUP = ROLLUP.with_label("after any release; never waits for a late day")
PUBLISH = ROLLUP.ignore(dg.AssetSelection.assets("od_prefix_tree"))
"""The publication follows the marginal releases. The OD trees are built in the ``private_stages`` run that
leads to those releases, so a new tree alone must not start a publication before the releases it joins (there
would be nothing to publish yet); the next publication after a release carries every complete tree."""

raw_trip_files = dg.AssetSpec(
    RAW_FILES,
    partitions_def=service_dates,
    group_name="ingest",
    description="The raw day files under raw/ (private input, observed by raw_file_sensor; never read by the UI).",
    kinds={"file"},
    tags={"data_class": "microdata"},
)


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
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
    target=dg.AssetSelection.all() - dg.AssetSelection.assets("unit_comparison", "design_comparison"),
    minimum_interval_seconds=60,
    description="Evaluates the assets' automation conditions; emits backfills, as a launch from the UI does.",
)
