"""OD release, DP stage: the noisy prefix tree of each date's card-day sequences (DP, charged to the ledger, made
consistent; the sequences are private, written by the one pass per day of ``defs.trips.private_stages``). Thin
wrappers over ``release.od.engine`` and ``release.od.generate``; publishing is in ``defs.marginals.publish`` (one
atomic publication)."""

import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core import LedgerError
from opal_dp.defs.shared.automation import PERIOD
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames
from opal_dp.defs.shared.metadata import LEDGER_POOL, WEEK_A_RUN, labels
from opal_dp.defs.shared.partitions import release_periods
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.weeks import period_inputs
from opal_dp.prep.sequences import trip_alphabet
from opal_dp.release.od.generate import consistent_tree, inconsistent_parents
from opal_dp.release.od.engine import release_od_days
from opal_dp.release.periods import week_of

PRIVATE = "private_parquet"
OD_TREE_COLUMNS = ("level", "parent", "symbol", "count", "terminal", "draw_id")
TREE_CHECKS = {
    "od_parents_equal_children": "After inference every node's count equals the sum of its children's counts plus "
                                 "the sequences that end there, exactly, and no count is negative.",
    "od_in_public_domain": "Every node's symbol is a (mode, origin, destination) of the public alphabet built from "
                           "the reference stop list.",
}


@dg.asset(
    group_name="od",
    io_manager_key=PRIVATE,
    partitions_def=release_periods,
    backfill_policy=WEEK_A_RUN,
    automation_condition=PERIOD,
    pool=LEDGER_POOL,
    check_specs=[dg.AssetCheckSpec(name, asset="od_prefix_tree", blocking=True, description=text)
                 for name, text in TREE_CHECKS.items()],
    **labels("dp", "parquet"),
)
def od_prefix_tree(context: dg.AssetExecutionContext, trip_sequences: PartitionFrames, privacy_budget: PrivacyBudget,
                   reference: ReferenceNetwork, storage: OpalStorage, workers: PerDayWorkers):
    """The noisy hybrid-granularity prefix tree of each date's card-day sequences, charged to the ledger before
    any noise is drawn, then made consistent (``level, parent, symbol, count, terminal``, plus the ledger
    ``draw_id``). Empty when ``od_release`` is off (nothing charged). A date per worker process (``workers``)."""
    alphabet = trip_alphabet(reference.stops())
    plan = privacy_budget.od_plan(alphabet.groups)
    out, bad = {}, {name: 0 for name in TREE_CHECKS}
    inputs = period_inputs(context, privacy_budget, reference, storage)
    days = [day for found in inputs.values() for day in found.days]
    try:
        if privacy_budget.releases_od:
            versions = {d: v for found in inputs.values() for d, v in found.scope_versions(plan.ledger_unit).items()}
            drawn_days = release_od_days({day: trip_sequences.path(day) for day in days}, plan,
                                         privacy_budget.ledger(storage), storage.private_dir, context.run.run_id,
                                         privacy_budget.key(storage, "fingerprint"), privacy_budget.fresh_draw,
                                         versions, workers.count)
        else:
            drawn_days = ((day, None) for day in days)
        for day, drawn in drawn_days:
            if drawn is None:
                out[day] = pd.DataFrame({c: np.zeros(0, np.int64) for c in OD_TREE_COLUMNS})
                continue
            tree = consistent_tree(drawn.tree).assign(draw_id=drawn.draw.id)
            bad["od_parents_equal_children"] += inconsistent_parents(tree)
            symbol = tree["symbol"][tree["level"] > 0]
            bad["od_in_public_domain"] += int(((symbol < 0) | (symbol >= alphabet.size)).sum())
            out[day] = tree
            context.add_asset_metadata({f"{day} draw": f"{drawn.draw.id} ({drawn.decision}, "
                                                       f"{plan.ledger_unit.value} scope {plan.scope(day)})"},
                                       partition_key=week_of(day))
    except LedgerError as err:
        raise dg.Failure(description=str(err)) from err
    for week, found in inputs.items():
        context.add_asset_metadata({"dates": len(found.days), "epsilon a date": plan.budget.epsilon, "delta": 0.0,
                                    "privacy_unit": "card_day", "days_left_out": ", ".join(found.without) or "none"},
                                   partition_key=week)
    yield dg.Output(out, metadata={"parameters": dg.MetadataValue.json(plan.budget.describe(plan.taxonomy))})
    for name, count in bad.items():
        yield dg.AssetCheckResult(check_name=name, passed=count == 0, metadata={"failures": count})
