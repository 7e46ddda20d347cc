"""Jobs, one per partitioning scheme (Dagster runs one scheme per job), and the run plan every path follows.

"The release" (what ``make release`` builds) is four jobs, run in this order: ``private_stages`` (per service day,
as raw files arrive), ``release_od`` (per week: the OD tree and the OD hierarchy), ``release`` (per week and mode: the
six marginals) and ``rollup`` (ledger, audit, reports, publish). The OD products are drawn before the marginals, as
when they were built with the private stages, so that a seeded release draws its noise in the same order
(``benchmarks/same_release.py``). Their union is ``THE_RELEASE``, the selection
automation may launch; the opt-in ``synthetic`` jobs and the on-demand internal reports (``compare_units``,
``compare_designs``, ``evaluate_od``) are outside it and run only when launched.

A backfill of everything launched from the UI, the automation's backfills and ``make release`` make the same
runs: one ``private_stages`` run over the new days (single-run backfill policy), one ``release_od`` and one
``release`` run per week (Dagster splits a (week, mode) range along its week dimension; the week assets run one
week a run), and one ``rollup``. A week is the unit of work: it is released, checked and charged in its own runs,
so a week that is refused fails alone.
"""

import dagster as dg

from opal_dp.defs.shared.partitions import period_range

DAY_ASSETS = ("ingested_trips", "rejected_trips", "binned_trips", "card_days", "bounded_trips", "trips_over_bound",
              "trip_sequences")
OD_ASSETS = ("od_prefix_tree", "od_hierarchy")

private_stages_job = dg.define_asset_job(
    "private_stages",
    selection=dg.AssetSelection.assets(*DAY_ASSETS),
    description="The release, 1 of 4 (per service day, as each raw file arrives): ingest, validate, bin and bound the "
                "trips of the selected days, and build their card-day sequences. Nothing is charged: a bad file is "
                "found the day it arrives, and holds its own week only.",
)

release_job = dg.define_asset_job(
    "release",
    selection=dg.AssetSelection.groups("partition", "release") - dg.AssetSelection.assets("privacy_ledger"),
    description="The release, 3 of 4 (per week and mode, one run a week): the week's (date, mode) pieces and the six "
                "DP marginals under the configured privacy unit, charged to the ledger; refused, with nothing "
                "charged, while a day of the week is not ingested.",
)

release_od_job = dg.define_asset_job(
    "release_od",
    selection=dg.AssetSelection.assets(*OD_ASSETS),
    description="The release, 2 of 4 (per week, one run a week): the OD prefix tree and the hierarchical OD release of "
                "each date of the week, charged to the ledger (nothing when they are off).",
)

rollup_job = dg.define_asset_job(
    "rollup",
    selection=dg.AssetSelection.assets("privacy_ledger") | dg.AssetSelection.groups("publish", "report")
    - dg.AssetSelection.assets("unit_comparison", "design_comparison", "planner_workload", "od_evaluation",
                               "od_hierarchy_evaluation"),
    description="The release, 4 of 4 (the weekly roll-up): summarise the privacy ledger, audit, report internally "
                "and publish the released weeks.",
)

THE_RELEASE = private_stages_job.selection | release_job.selection | release_od_job.selection | rollup_job.selection
"""Every asset ``make release`` builds, and nothing opt-in or on demand."""

compare_units_job = dg.define_asset_job(
    "compare_units",
    selection=dg.AssetSelection.assets("unit_comparison"),
    description="Internal report: trip, card_day and card_period on the same data (not DP, never published).",
)

compare_designs_job = dg.define_asset_job(
    "compare_designs",
    selection=dg.AssetSelection.assets("design_comparison"),
    description="Internal report: the sbh and public_domain release designs on the same data, unit and budget, "
                "drawn in memory (not DP, never published, nothing charged to the ledger).",
)

score_workload_job = dg.define_asset_job(
    "score_workload",
    selection=dg.AssetSelection.assets("planner_workload"),
    description="Internal report: a planner's queries answered from the latest released week's files and scored "
                "against the truth (not DP, never published, nothing charged to the ledger).",
)

synthetic_job = dg.define_asset_job(
    "synthetic",
    selection=dg.AssetSelection.assets("synthetic_release"),
    description="Opt-in (per week): the card-level DP queries of the week's binned days, charged to its card_period "
                "scope.",
)

synthetic_publish_job = dg.define_asset_job(
    "synthetic_publish",
    selection=dg.AssetSelection.groups("synthetic") - dg.AssetSelection.assets("synthetic_release"),
    description="Opt-in: synthetic card-day trips generated from the released weeks' queries (post-processing), the "
                "card-id check, and their publication with a privacy statement.",
)

evaluate_od_job = dg.define_asset_job(
    "evaluate_od",
    selection=dg.AssetSelection.assets("od_evaluation", "od_hierarchy_evaluation"),
    description="Internal reports: the hybrid and the plain OD prefix trees against the truth, as in the seed's §5, "
                "and the hierarchical OD release against the tree's od.csv, per level (not DP, never published, "
                "nothing charged).",
)


def run_plan(day_ranges: list[tuple[str, str]], weeks: list[str]) -> list[tuple[str, tuple[str, str] | None]]:
    """(job, partition range or None): the ingest of contiguous ranges of service dates, then each week's release
    in runs of its own (its OD products, then its marginals), then the roll-up."""
    return [
        *(("private_stages", span) for span in day_ranges),
        *(run for week in weeks for run in (("release_od", (week, week)), ("release", period_range([week])))),
        ("rollup", None),
    ]
