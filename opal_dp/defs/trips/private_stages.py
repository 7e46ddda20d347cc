"""Private stages: ingest -> bin -> bound and anonymise -> partition. Thin wrappers over ``opal_dp.prep``.

Everything here is microdata and lives under ``$OPAL_DP_DATA_DIR/private`` only. The card id is kept until
contribution bounding, which is the only step that uses it, and dropped there.
"""


import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core import PrivacyUnit
from opal_dp.defs.shared.automation import BOUNDING, RAW_FILES, STAGE
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, StoredPartitions, stored
from opal_dp.defs.shared.metadata import SINGLE_RUN, column_schema, labels
from opal_dp.defs.shared.partitions import date_and_mode, date_mode, service_dates
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.parallel import map_calls
from opal_dp.prep.bounding import select_card_days
from opal_dp.prep.day_files import DayFailure, bin_day, bound_day_file, split_day, try_ingest_day
from opal_dp.prep.failed_days import clear_failure, record_failure
from opal_dp.release.periods import name
from opal_dp.prep.schemas import (
    BinnedTrips,
    CardBinnedTrips,
    CardDays,
    IngestedTrips,
    PartitionTrips,
    RejectedTrips,
)

PRIVATE = "private_parquet"
CARD_DAYS, OVER_BOUND = "card_days", "trips_over_bound"


@dg.multi_asset(
    outs={
        "ingested_trips": dg.AssetOut(
            group_name="ingest",
            io_manager_key=PRIVATE,
            automation_condition=STAGE,
            **labels("microdata", "parquet"),
            description="Raw trips of one service day that meet the input contract, typed.",
            metadata=column_schema(IngestedTrips),
        ),
        "rejected_trips": dg.AssetOut(
            group_name="ingest",
            io_manager_key=PRIVATE,
            automation_condition=STAGE,
            **labels("microdata", "parquet"),
            description="Raw rows that broke the contract: file, line, field, reason and raw values.",
            metadata=column_schema(RejectedTrips),
        ),
    },
    deps=[RAW_FILES],
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
)
def ingest(context: dg.AssetExecutionContext, reference: ReferenceNetwork, storage: OpalStorage):
    """Read each day's raw file; rows read = accepted + rejected, per file, always (recorded per day). Days run
    in worker processes, each storing its own partitions (``prep.day_files``). Every day is tried: a file that
    cannot be used fails the step naming each such day and why (recorded for the roll-up and the summary, so that
    a rerun over the other days can release them), never quoting a raw value."""
    stops, days = reference.stops(), list(context.partition_keys)
    accepted, rejected = stored(storage, "ingested_trips", days), stored(storage, "rejected_trips", days)
    calls = [(storage.raw_dir, day, stops, accepted[day], rejected[day]) for day in days]
    failed = {}
    for day, result in zip(days, map_calls(try_ingest_day, calls)):
        if isinstance(result, DayFailure):
            failed[day] = result.reason
            record_failure(storage.private_dir, day, result.reason)
            continue
        clear_failure(storage.private_dir, day)
        context.add_asset_metadata({
            "file": result.source_file,
            "rows_read": result.rows_read,
            "rows_accepted": result.rows_accepted,
            "rows_rejected": result.rows_rejected,
            "ignored_columns": ", ".join(result.ignored_columns),
            "dagster/row_count": result.rows_accepted,
        }, asset_key="ingested_trips", partition_key=day)
        context.add_asset_metadata({
            "dagster/row_count": result.rows_rejected,
            "reasons": dg.MetadataValue.json(result.reasons),
        }, asset_key="rejected_trips", partition_key=day)
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(days)} days could not be ingested (the others can be run without "
                        "them):\n" + "\n".join(f"{day}: {why}" for day, why in failed.items()),
            metadata={"failed_days": dg.MetadataValue.json(failed)},
        )
    yield dg.Output(accepted, "ingested_trips")
    yield dg.Output(rejected, "rejected_trips")


@dg.multi_asset(
    outs={
        "binned_trips": dg.AssetOut(
            group_name="bin",
            io_manager_key=PRIVATE,
            automation_condition=STAGE,
            **labels("microdata", "parquet"),
            description="15-minute windows; bus stops collapsed to postcodes; missing tap-off as -1. Still carries "
                        "the card id, for contribution bounding only (private microdata).",
            metadata=column_schema(CardBinnedTrips),
        ),
        CARD_DAYS: dg.AssetOut(
            group_name="bin",
            io_manager_key=PRIVATE,
            automation_condition=STAGE,
            **labels("microdata", "parquet"),
            description="The card ids that travelled on the day (private): only the card_period day cap reads them.",
            metadata=column_schema(CardDays),
        ),
    },
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
)
def binned_trips(context: dg.AssetExecutionContext, ingested_trips: PartitionFrames, reference: ReferenceNetwork,
                 storage: OpalStorage):
    """Coarsen each day's trips to the published bins (seed §4.1 steps 2-3), a day per worker process."""
    stops, days = reference.stops(), list(context.partition_keys)
    binned, cards = stored(storage, "binned_trips", days), stored(storage, CARD_DAYS, days)
    calls = [(ingested_trips.path(day), stops, binned[day], cards[day]) for day in days]
    for day, (trips, card_count) in zip(days, map_calls(bin_day, calls)):
        context.add_asset_metadata({"dagster/row_count": trips}, asset_key="binned_trips", partition_key=day)
        context.add_asset_metadata({"dagster/row_count": card_count}, asset_key=CARD_DAYS, partition_key=day)
    yield dg.Output(binned, "binned_trips")
    yield dg.Output(cards, CARD_DAYS)


@dg.multi_asset(
    outs={
        "bounded_trips": dg.AssetOut(
            group_name="bound",
            io_manager_key=PRIVATE,
            automation_condition=BOUNDING,
            **labels("microdata", "parquet"),
            description="Bounded and anonymised: each card's contribution cut to the privacy unit's public bounds, "
                        "then the card id dropped and the rows put in a CSPRNG-random order (private microdata).",
            metadata=column_schema(BinnedTrips),
        ),
        OVER_BOUND: dg.AssetOut(
            group_name="bound",
            io_manager_key=PRIVATE,
            automation_condition=BOUNDING,
            **labels("microdata", "parquet"),
            description="Trips removed by contribution bounding, without card id (private; internal utility "
                        "report only). Rows in = bounded + over the bound.",
            metadata=column_schema(BinnedTrips),
        ),
    },
    ins={"binned_trips": dg.AssetIn(), CARD_DAYS: dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
    partitions_def=service_dates,
    backfill_policy=SINGLE_RUN,
)
def bounded_trips(
    context: dg.AssetExecutionContext,
    binned_trips: PartitionFrames,
    card_days: PartitionFrames,
    privacy_budget: PrivacyBudget,
    storage: OpalStorage,
):
    """Bound every card's contribution (``opal_dp.prep.bounding``), then drop the card id.

    The share of trips dropped is internal, non-DP metadata.
    """
    unit, bounds, key = privacy_budget.unit, privacy_budget.bounds, privacy_budget.key(storage, "bounding")
    days = list(context.partition_keys)
    kept_days = _card_period_days(privacy_budget, card_days, days, key) if unit is PrivacyUnit.CARD_PERIOD else None
    kept, over = stored(storage, "bounded_trips", days), stored(storage, OVER_BOUND, days)
    calls = [(binned_trips.path(day), day, unit, bounds, key,
              None if kept_days is None else kept_days.get(day, np.zeros(0, np.int64)), kept[day], over[day])
             for day in days]
    for day, result in zip(days, map_calls(bound_day_file, calls)):
        context.add_asset_metadata({"dagster/row_count": result.kept, "trips_over_bound (internal, not DP)":
                                    result.over_bound, "share_dropped_by_bounding (internal, not DP)":
                                    result.share_dropped}, asset_key="bounded_trips", partition_key=day)
        context.add_asset_metadata({"dagster/row_count": result.over_bound}, asset_key=OVER_BOUND,
                                   partition_key=day)
    metadata = {  # the same for every partition of the run
        "privacy_unit": unit.value,
        "contribution_bounds": dg.MetadataValue.json(bounds.describe() if unit.bounds_cards else {}),
    }
    yield dg.Output(kept, "bounded_trips", metadata=metadata)
    yield dg.Output(over, OVER_BOUND)


def _card_period_days(privacy_budget: PrivacyBudget, card_days: PartitionFrames, days: list[str],
                      key: bytes) -> dict | None:
    """With a day cap: per date, the sorted ids of the cards for which it is one of their kept days in its period
    (each period of the run's dates chosen over all of its days)."""
    try:
        periods = privacy_budget.periods.group(days)
    except ValueError as err:  # a date outside an explicit period
        raise dg.Failure(description=str(err)) from err
    if privacy_budget.max_days_per_card is None:
        return None
    kept: dict[str, np.ndarray] = {}
    for period in periods:
        missing = [d for d in period if d not in card_days]
        if missing:
            raise dg.Failure(description=f"the card_period day cap needs every day of the period {name(period)}; "
                                         f"not ingested yet: {missing}")
        chosen = select_card_days(pd.concat([card_days[d].assign(date=d) for d in period], ignore_index=True),
                                  privacy_budget.max_days_per_card, key)
        kept |= {d: np.sort(group["card_id"].to_numpy(np.int64)) for d, group in chosen.groupby("date", sort=False)}
    return kept


@dg.asset(
    group_name="partition",
    io_manager_key=PRIVATE,
    partitions_def=date_mode,
    backfill_policy=SINGLE_RUN,
    metadata=column_schema(PartitionTrips),
    automation_condition=STAGE,
    **labels("microdata", "parquet"),
)
def trip_partitions(
    context: dg.AssetExecutionContext, bounded_trips: PartitionFrames, storage: OpalStorage
) -> dg.Output[StoredPartitions]:
    """(date, mode) partitions of the bounded trips: the pieces the release draws and the ledger charges. One
    call per partition, in worker processes, each reading only its mode's rows of its day."""
    keys = list(map(str, context.partition_keys))
    parts = stored(storage, "trip_partitions", keys)
    calls = [(bounded_trips.path(date_and_mode(key)[0]), date_and_mode(key)[1], parts[key]) for key in keys]
    for key, rows in zip(keys, map_calls(split_day, calls)):
        context.add_asset_metadata({"dagster/row_count": rows}, partition_key=key)
    return dg.Output(parts)
