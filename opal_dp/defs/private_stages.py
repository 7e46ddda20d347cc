"""Private stages: ingest -> anonymise -> bin -> partition. Thin wrappers over ``opal_dp.prep``.

Everything here is microdata and lives under ``$OPAL_DP_DATA_DIR/private`` only.
"""


import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.metadata import SINGLE_RUN, column_schema, partition_table
from opal_dp.defs.partitions import date_and_mode, date_mode, service_dates
from opal_dp.defs.resources import ReferenceNetwork
from opal_dp.prep.anonymise import anonymise
from opal_dp.prep.binning import bin_trips, split_by_mode
from opal_dp.prep.ingest import RawInputError, ingest_file, raw_file_for
from opal_dp.prep.schemas import (
    AnonymisedTrips,
    BinnedTrips,
    IngestedTrips,
    PartitionTrips,
    RejectedTrips,
)

PRIVATE = "private_parquet"


@dg.multi_asset(
    outs={
        "ingested_trips": dg.AssetOut(
            group_name="ingest",
            io_manager_key=PRIVATE,
            description="Raw trips of one service day that meet the input contract, typed.",
            metadata=column_schema(IngestedTrips),
        ),
        "rejected_trips": dg.AssetOut(
            group_name="ingest",
            io_manager_key=PRIVATE,
            description="Raw rows that broke the contract: file, line, field, reason and raw values.",
            metadata=column_schema(RejectedTrips),
        ),
    },
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
)
def ingest(context: dg.AssetExecutionContext, reference: ReferenceNetwork):
    """Read each day's raw file; rows read = accepted + rejected, per file, always."""
    stops = reference.stops()
    accepted, rejected, report = {}, {}, []
    for day in context.partition_keys:
        try:
            result = ingest_file(raw_file_for(settings.raw_dir(), day), stops)
        except RawInputError as err:
            raise dg.Failure(description=str(err)) from err
        accepted[day], rejected[day] = result.accepted, result.rejected
        report.append(
            {
                "date": day,
                "file": result.source_file,
                "rows_read": result.rows_read,
                "rows_accepted": len(result.accepted),
                "rows_rejected": len(result.rejected),
                "ignored_columns": ", ".join(result.ignored_columns),
            }
        )
    totals = {k: sum(r[k] for r in report) for k in ("rows_read", "rows_accepted", "rows_rejected")}
    yield dg.Output(accepted, "ingested_trips", metadata={**totals, "by_day": partition_table(report)})
    reasons = pd.concat(rejected.values())["reason"].value_counts() if report else pd.Series(dtype=int)
    yield dg.Output(
        rejected,
        "rejected_trips",
        metadata={"rows_rejected": totals["rows_rejected"], "reasons": dg.MetadataValue.json(reasons.to_dict())},
    )


@dg.asset(
    group_name="anonymise",
    io_manager_key=PRIVATE,
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
    metadata=column_schema(AnonymisedTrips),
)
def anonymised_trips(
    context: dg.AssetExecutionContext, ingested_trips: PartitionFrames
) -> dict[str, pd.DataFrame]:
    """Trips without card ids (the only unique identifier) and without their raw row order."""
    return {day: anonymise(ingested_trips[day]) for day in context.partition_keys}


@dg.asset(
    group_name="bin",
    io_manager_key=PRIVATE,
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
    metadata=column_schema(BinnedTrips),
)
def binned_trips(
    context: dg.AssetExecutionContext, anonymised_trips: PartitionFrames, reference: ReferenceNetwork
) -> dict[str, pd.DataFrame]:
    """15-minute windows; bus stops collapsed to postcodes; missing tap-off as -1."""
    stops = reference.stops()
    return {day: bin_trips(anonymised_trips[day], stops) for day in context.partition_keys}


@dg.asset(
    group_name="partition",
    io_manager_key=PRIVATE,
    partitions_def=date_mode,
    backfill_policy=SINGLE_RUN,
    metadata=column_schema(PartitionTrips),
)
def trip_partitions(
    context: dg.AssetExecutionContext, binned_trips: PartitionFrames
) -> dg.Output[dict[str, pd.DataFrame]]:
    """Disjoint (date, mode) partitions: one trip is in exactly one, so budgets compose in parallel."""
    parts, report, by_day = {}, [], {}
    for key in map(str, context.partition_keys):
        day, mode = date_and_mode(key)
        if day not in by_day:
            by_day = {day: binned_trips[day]}  # keys are date-major: one day in memory at a time
        parts[key] = split_by_mode(by_day[day], mode)
        report.append({"partition": key, "trips": len(parts[key])})
    return dg.Output(parts, metadata={"partitions": len(parts), "by_partition": partition_table(report)})
