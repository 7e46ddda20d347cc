"""Jobs, one per partitioning scheme (Dagster runs one scheme per job), and the run plan every path follows.

"The release" (what ``make release`` builds) is three jobs, run in this order: ``private_stages`` (per day),
``release`` (per day and mode) and ``rollup`` (ledger, audit, reports, publish). Their union is
``THE_RELEASE``, the selection automation may launch; the opt-in ``synthetic`` job, the ``release_od_hierarchy`` job
(the OD hierarchy alone, also in ``private_stages``) and the on-demand internal reports (``compare_units``, ``compare_designs``, ``evaluate_od``) are outside it and run
only when launched.

A backfill of everything launched from the UI, the automation's backfills and ``make release`` make the same
runs: one ``private_stages`` run over all the days (single-run backfill policy), one ``release`` run per mode
over all the days (Dagster splits a date x mode range along its smaller dimension: a multi-partition range is a
box), and one ``rollup``.
"""


import dagster as dg

from opal_dp.network import MODES

private_stages_job = dg.define_asset_job(
    "private_stages",
    selection=dg.AssetSelection.groups("ingest", "bin", "bound", "od", "od_hierarchy")
    - dg.AssetSelection.assets("raw_trip_files"),
    description="The release, 1 of 3 (per service day): ingest, bin, bound and anonymise the trips of the selected "
                "service days; build their card-day sequences and the DP OD prefix tree of each day (charged to the "
                "ledger).",
)

release_job = dg.define_asset_job(
    "release",
    selection=dg.AssetSelection.groups("partition", "release") - dg.AssetSelection.assets("privacy_ledger"),
    description="The release, 2 of 3 (per day and mode): partition by (date, mode) and release the six DP marginals "
                "under the configured privacy unit.",
)

rollup_job = dg.define_asset_job(
    "rollup",
    selection=dg.AssetSelection.assets("privacy_ledger") | dg.AssetSelection.groups("publish", "report")
    - dg.AssetSelection.assets("unit_comparison", "design_comparison", "od_evaluation", "od_hierarchy_evaluation"),
    description="The release, 3 of 3 (the weekly roll-up): summarise the privacy ledger, audit, report internally "
                "and publish the complete partitions.",
)

THE_RELEASE = private_stages_job.selection | release_job.selection | rollup_job.selection
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

synthetic_job = dg.define_asset_job(
    "synthetic",
    selection=dg.AssetSelection.groups("synthetic"),
    description="Opt-in: card-level DP queries of the binned days, synthetic card-day trips generated from them "
                "(post-processing), the card-id check, and their publication with a privacy statement.",
)


evaluate_od_job = dg.define_asset_job(
    "evaluate_od",
    selection=dg.AssetSelection.assets("od_evaluation", "od_hierarchy_evaluation"),
    description="Internal reports: the hybrid and the plain OD prefix trees against the truth, as in the seed's §5, "
                "and the hierarchical OD release against the tree's od.csv, per level (not DP, never published, "
                "nothing charged).",
)


od_hierarchy_job = dg.define_asset_job(
    "release_od_hierarchy",
    selection=dg.AssetSelection.groups("od_hierarchy"),
    description="The hierarchical OD release alone (also part of the private stages): mode totals, district pairs, "
                "location pairs with exact totals of the days with stored card-day sequences, charged to the ledger "
                "(nothing when it is off); published as od.csv by the publish step.",
)


def run_plan(day_ranges: list[tuple[str, str]]) -> list[tuple[str, tuple[str, str] | None]]:
    """(job, partition range or None) for contiguous ranges of service dates: the backfill's runs."""
    return [
        *(("private_stages", span) for span in day_ranges),
        *(("release", (f"{first}|{mode}", f"{last}|{mode}")) for first, last in day_ranges for mode in MODES),
        ("rollup", None),
    ]
