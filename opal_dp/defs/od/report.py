"""Internal report (never published): the OD prefix tree evaluated as in the seed's §5, against the truth."""

import base64

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import labels
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.prep.sequences import from_frame, trip_alphabet
from opal_dp.reports.od_evaluation import evaluate, evaluation_plot

QUERIES = 2_000  # per (epsilon, tree, query length); the benchmark runs the paper's 40,000


@dg.asset(
    group_name="report",
    io_manager_key="private_parquet",
    description="Internal, NOT differentially private: count-query relative error (sanity bound 0.1% of |D|) and "
                "top-k trip chains of the hybrid and the plain noisy prefix tree, epsilon 0.5-1.5, on the first "
                "materialised day's card-day sequences. Trees drawn in memory, nothing charged. Never published.",
    **labels("internal", "parquet"),
)
def od_evaluation(trip_sequences: PartitionFrames, privacy_budget: PrivacyBudget,
                  reference: ReferenceNetwork) -> dg.Output[pd.DataFrame]:
    """Seed §5.1 and §5.2 on one day (``reports.od_evaluation``)."""
    days = materialised(trip_sequences)
    if not days:
        raise dg.Failure(description="no trip_sequences materialised yet")
    alphabet = trip_alphabet(reference.stops())
    plan = privacy_budget.od_plan(alphabet.groups)
    table = evaluate(from_frame(trip_sequences[days[0]]), plan.taxonomy, heights=(privacy_budget.od_height,),
                     queries=QUERIES, k=20)
    plot = evaluation_plot(table)
    return dg.Output(table, metadata={
        "day": days[0],
        "evaluation (internal, not DP)": dg.MetadataValue.md(table.to_markdown(index=False, floatfmt=".4g")),
        "plot": dg.MetadataValue.md(f"![od](data:image/png;base64,{base64.b64encode(plot).decode()})"),
    })
