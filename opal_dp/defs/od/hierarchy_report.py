"""Internal report (never published): the hierarchical OD release and today's prefix-tree ``od.csv`` against the
truth, per level, on the first materialised day (``reports.od_hierarchy_evaluation``; drawn in memory, nothing
charged); and the daily totals of ``totals.csv`` (``core.totals``) against the day's trips per mode and tap: the
page's "trips per day" must be within 5% on every mode-day of 1,000 trips or more."""

import base64

import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core.totals import TAPS, measure_totals

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import labels
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.prep.sequences import from_frame, trip_alphabet
from opal_dp.release.od.hierarchy import hierarchy_plan, od_domain
from opal_dp.reports.od_hierarchy_evaluation import (
    evaluate,
    hierarchy_counts,
    scatter_points,
    tree_counts,
    true_vs_released_plot,
    truth_counts,
)


@dg.asset(
    group_name="report",
    io_manager_key="private_parquet",
    description="Internal, NOT differentially private: the hierarchical OD release (od_hierarchy_rho) and the prefix "
                "tree's od.csv counts (od_epsilon) against the true trips of the first materialised day, per level: "
                "share of trips listed and accounted, relative errors on busy pairs, max abs error per level, false "
                "pairs. Drawn in memory, nothing charged. Never published.",
    **labels("internal", "parquet"),
)
def od_hierarchy_evaluation(trip_sequences: PartitionFrames, privacy_budget: PrivacyBudget,
                            reference: ReferenceNetwork) -> dg.Output[pd.DataFrame]:
    days = materialised(trip_sequences)
    if not days:
        raise dg.Failure(description="no trip_sequences materialised yet")
    stops = reference.stops()
    alphabet = trip_alphabet(stops)
    domain = od_domain(stops)
    plan = hierarchy_plan(privacy_budget, domain)
    sequences = from_frame(trip_sequences[days[0]])
    truth = truth_counts(domain, sequences)
    released = {"hierarchy": hierarchy_counts(domain, sequences, plan.budget, plan.tau),
                "tree": tree_counts(domain, sequences, privacy_budget.od_plan(alphabet.groups).taxonomy,
                                    privacy_budget.od_budget)}
    rows = []
    for method, counts in released.items():
        figures = evaluate(truth, counts, days=1)
        errors = figures.pop("max_abs_error")
        rows.append({"method": method, **figures, **{f"max_abs_error_{k}": v for k, v in errors.items()}})
    table = pd.DataFrame(rows)
    plot = true_vs_released_plot({m: scatter_points(truth, c) for m, c in released.items()})
    totals = _totals_check(domain, sequences, plan.totals)
    worst = float(totals["relative_error"].max()) if len(totals) else 0.0
    return dg.Output(table, metadata={
        "day": days[0],
        "totals_check (internal, not DP)": dg.MetadataValue.md(totals.to_markdown(index=False, floatfmt=".4g")),
        "totals_max_relative_error": dg.MetadataValue.float(worst),
        "totals_within_5_percent": worst <= 0.05,
        "evaluation (internal, not DP)": dg.MetadataValue.md(table.to_markdown(index=False, floatfmt=".4g")),
        "plot": dg.MetadataValue.md(f"![od](data:image/png;base64,{base64.b64encode(plot).decode()})"),
    })


def _totals_check(domain, sequences, budget) -> pd.DataFrame:
    """One in-memory draw of the day's totals against its trips (every trip of the stored sequences), per mode and
    tap with 1,000 trips or more: the relative error the page's daily trend would show."""
    counted = domain.totals(sequences, budget.max_per_mode)
    every = domain.totals(sequences, budget.max_items)
    rows = []
    for mode, truth in every.items():
        noisy = np.maximum(measure_totals(counted[mode], budget), 0)
        rows += [{"mode": mode, "tap": tap, "trips": int(t), "total": int(n), "relative_error": abs(int(n) - int(t)) / t}
                 for tap, t, n in zip(TAPS, truth, noisy) if t >= 1_000]
    return pd.DataFrame(rows, columns=["mode", "tap", "trips", "total", "relative_error"])
