"""The hierarchical OD release that makes ``od.csv``: per date, every mode's total, district pairs and location pairs
with exact totals, charged to the ledger before any noise is drawn. A thin wrapper over ``release.od.hierarchy``,
released with its week (job ``release_od``) and published by ``published_release``; empty when
``releases_od_hierarchy`` is off (nothing charged)."""

import json

import dagster as dg
import pandas as pd

from opal_dp.core import LedgerError
from opal_dp.defs.shared.automation import PERIOD
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames
from opal_dp.defs.shared.metadata import LEDGER_POOL, WEEK_A_RUN, labels
from opal_dp.defs.shared.partitions import release_periods
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.weeks import period_inputs
from opal_dp.release.od.hierarchy import (
    ROW_COLUMNS,
    domain_problems,
    hierarchy_plan,
    od_domain,
    release_od_hierarchy,
    sum_problems,
)

CHECKS = {
    "od_hierarchy_sums_exact": "Per date and mode, the district rows sum exactly to the mode total and each district "
                               "pair's location rows (its remainder row included) to the district row.",
    "od_hierarchy_in_public_domain": "Every row's mode, district pair and location pair come from the reference stop "
                                     "list, each location pair under its own districts.",
}


@dg.asset(
    group_name="od_hierarchy",
    io_manager_key="private_parquet",
    partitions_def=release_periods,
    backfill_policy=WEEK_A_RUN,
    automation_condition=PERIOD,
    pool=LEDGER_POOL,
    check_specs=[dg.AssetCheckSpec(name, asset="od_hierarchy", blocking=True, description=text)
                 for name, text in CHECKS.items()],
    **labels("dp", "parquet"),
)
def od_hierarchy(context: dg.AssetExecutionContext, trip_sequences: PartitionFrames, privacy_budget: PrivacyBudget,
                 reference: ReferenceNetwork, storage: OpalStorage):
    """The hierarchical OD rows of each date (``date, mode, level, origin_district, destination_district, origin,
    destination, count`` plus the ledger ``draw_id`` of each (date, mode)), at ``od_hierarchy_budget`` (rho) per
    date."""
    stops = reference.stops()
    domain = od_domain(stops)
    plan = hierarchy_plan(privacy_budget, domain)
    inputs = period_inputs(context, privacy_budget, reference, storage)
    days = [day for found in inputs.values() for day in found.days]
    parts: dict[str, list[pd.DataFrame]] = {day: [] for day in days}
    if not privacy_budget.releases_od_hierarchy:
        days = []
    versions = {d: v for found in inputs.values() for d, v in found.scope_versions(plan.ledger_unit).items()}
    try:
        for day, _, drawn in release_od_hierarchy(
                {day: trip_sequences.path(day) for day in days}, plan, privacy_budget.ledger(storage),
                storage.private_dir, context.run.run_id, privacy_budget.key(storage, "fingerprint"),
                privacy_budget.fresh_draw, versions):
            parts[day].append(drawn.rows.assign(draw_id=drawn.draw.id))
    except LedgerError as err:
        raise dg.Failure(description=str(err)) from err
    out = {day: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*ROW_COLUMNS, "draw_id"])
           for day, frames in parts.items()}
    for week, found in inputs.items():
        context.add_asset_metadata({"dagster/row_count": sum(len(out[d]) for d in found.days), "rho a date":
                                    plan.budget.rho, "tau": plan.tau, "dates": len(found.days),
                                    "ledger_scope": f"{plan.ledger_unit.value} {plan.scope(found.days[0])}",
                                    "days_left_out": ", ".join(found.without) or "none"}, partition_key=week)
    problems = {"od_hierarchy_sums_exact": [p for f in out.values() for p in sum_problems(f)],
                "od_hierarchy_in_public_domain": [p for f in out.values() for p in domain_problems(f, domain)]}
    yield dg.Output(out, metadata={"parameters": dg.MetadataValue.json(json.loads(plan.mechanism()))})
    for name, found in problems.items():
        yield dg.AssetCheckResult(check_name=name, passed=not found, metadata={"failures": len(found),
                                                                                "first": "; ".join(found[:3])})

