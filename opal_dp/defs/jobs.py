"""Jobs, one per partitioning scheme (Dagster runs one scheme per job): daily private stages,
the per-(date, mode) release, and the unpartitioned roll-up (ledger, publish)."""


import dagster as dg

private_stages_job = dg.define_asset_job(
    "private_stages",
    selection=dg.AssetSelection.groups("ingest", "bin", "bound"),
    description="Ingest, bin, bound and anonymise the trips of the selected service days.",
)

release_job = dg.define_asset_job(
    "release",
    selection=dg.AssetSelection.groups("partition", "release") - dg.AssetSelection.assets("privacy_ledger"),
    description="Partition by (date, mode) and release the six DP marginals under the configured privacy unit.",
)

rollup_job = dg.define_asset_job(
    "rollup",
    selection=dg.AssetSelection.assets("privacy_ledger") | dg.AssetSelection.groups("publish", "report")
    - dg.AssetSelection.assets("unit_comparison"),
    description="Summarise the privacy ledger, publish the release, and report utility internally.",
)

compare_units_job = dg.define_asset_job(
    "compare_units",
    selection=dg.AssetSelection.assets("unit_comparison"),
    description="Internal report: trip, card_day and card_period on the same data (not DP, never published).",
)
