"""Private stages: ingest -> bin -> bound and anonymise (and the card-day sequences), one pass per day -> partition.
Thin wrappers over ``opal_dp.prep``.

Everything here is microdata and lives under ``$OPAL_DP_DATA_DIR/private`` only. The card id is kept until
contribution bounding, which is the only step that uses it, and dropped there (the card-day sequences use it to
group a card's trips of the day, and do not keep it).

The per-day assets stay separate in the lineage (``ingested_trips`` ... ``trip_sequences``) but are materialised by
one step, ``private_day_stages``: a worker process reads a day's raw file once and writes every one of them from
memory (``prep.day_files.day_pass``). Under a card_period day cap the cards' kept days are chosen over each whole
period once all its days are binned, so bounding is a second pass over the stored binned days.
"""


import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core import PrivacyUnit
from opal_dp.defs.shared.automation import BOUNDING, RAW_FILES, STAGE
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, StoredPartitions, stored
from opal_dp.defs.shared.metadata import SINGLE_RUN, column_schema, dates_read_once, labels
from opal_dp.defs.shared.partitions import date_and_mode, date_mode, service_dates
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.parallel import map_calls
from opal_dp.prep.bounding import select_card_days
from opal_dp.prep.day_files import Bounding, BoundSummary, DayFailure, DayPaths, bound_day_file, day_pass, split_day
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
INGESTED, REJECTED, BINNED, BOUNDED, SEQUENCES = "ingested_trips", "rejected_trips", "binned_trips", "bounded_trips", \
    "trip_sequences"


def _spec(key: str, group: str, deps: list, description: str, automation=STAGE, **metadata) -> dg.AssetSpec:
    return dg.AssetSpec(key, deps=deps, group_name=group, description=description, automation_condition=automation,
                        partitions_def=service_dates, metadata=metadata, **labels("microdata", "parquet"),
                        ).with_io_manager_key(PRIVATE)


def _day_specs() -> list[dg.AssetSpec]:
    """The per-day private assets (a function: a module-level list of specs would be loaded as assets too)."""
    return [
        _spec(INGESTED, "ingest", [RAW_FILES], "Raw trips of one service day that meet the input contract, typed.",
              **column_schema(IngestedTrips)),
        _spec(REJECTED, "ingest", [RAW_FILES], "Raw rows that broke the contract: file, line, field, reason and raw "
              "values.", **column_schema(RejectedTrips)),
        _spec(BINNED, "bin", [INGESTED], "15-minute windows; bus stops collapsed to postcodes; missing tap-off as -1. "
              "Still carries the card id, for contribution bounding only (private microdata).",
              **column_schema(CardBinnedTrips)),
        _spec(CARD_DAYS, "bin", [INGESTED], "The card ids that travelled on the day (private): only the card_period "
              "day cap reads them.", **column_schema(CardDays)),
        # card_days with the default (same-day) mapping: an all-partitions mapping between two assets of one step
        # makes Dagster's backfills refuse the step; the day cap reads the period's other days from storage.
        *(_spec(key, "bound", [BINNED, CARD_DAYS], text, automation=BOUNDING, **column_schema(BinnedTrips))
          for key, text in (
            (BOUNDED, "Bounded and anonymised: each card's contribution cut to the privacy unit's public bounds, then "
                      "the card id dropped and the rows put in a CSPRNG-random order (private microdata)."),
            (OVER_BOUND, "Trips removed by contribution bounding, without card id (private; internal utility report "
                         "only). Rows in = bounded + over the bound."))),
        _spec(SEQUENCES, "od", [BINNED], "Each card-day's trips as symbol ids in tap-on order, truncated to "
              "``od_height`` (private microdata; built from the stage that still has card ids, which is used for "
              "grouping only and not kept)."),
    ]


@dg.multi_asset(specs=_day_specs(), partitions_def=service_dates, backfill_policy=SINGLE_RUN)
def private_day_stages(context: dg.AssetExecutionContext, reference: ReferenceNetwork, privacy_budget: PrivacyBudget,
                       storage: OpalStorage):
    """Every private asset of each day from one read of its raw file, a day per worker process, each storing its
    own partitions (``prep.day_files.day_pass``); rows read = accepted + rejected, per file, always (recorded per
    day). Every day is tried: a file that cannot be used fails the step naming each such day and why (recorded
    for the roll-up and the summary, so that a rerun over the other days can release them), never quoting a raw
    value. The share of trips dropped by bounding is internal, non-DP metadata."""
    stops, days = reference.stops(), list(context.partition_keys)
    unit, bounds, key = privacy_budget.unit, privacy_budget.bounds, privacy_budget.key(storage, "bounding")
    periods = _periods(privacy_budget, days) if unit is PrivacyUnit.CARD_PERIOD else None
    day_cap = periods is not None and privacy_budget.max_days_per_card is not None
    out = {spec.key.path[-1]: stored(storage, spec.key.path[-1], days) for spec in context.assets_def.specs}
    paths = {day: DayPaths(out[INGESTED][day], out[REJECTED][day], out[BINNED][day], out[CARD_DAYS][day],
                           out[SEQUENCES][day], out[BOUNDED][day], out[OVER_BOUND][day]) for day in days}
    bounding = None if day_cap else Bounding(unit, bounds, key)
    calls = [(storage.raw_dir, day, stops, privacy_budget.od_height, bounding, paths[day]) for day in days]
    failed = {}
    with dates_read_once(context):
        for day, result in zip(days, map_calls(day_pass, calls)):
            if isinstance(result, DayFailure):
                failed[day] = result.reason
                record_failure(storage.private_dir, day, result.reason)
                continue
            clear_failure(storage.private_dir, day)
            _record_day(context, day, result)
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(days)} days could not be ingested (the others can be run without "
                        "them):\n" + "\n".join(f"{day}: {why}" for day, why in failed.items()),
            metadata={"failed_days": dg.MetadataValue.json(failed)},
        )
    if day_cap:
        card_days = PartitionFrames.of_paths(stored(storage, CARD_DAYS, sorted({d for period in periods for d in period})))
        kept_days = _card_period_days(privacy_budget.max_days_per_card, periods, card_days, key)
        calls = [(paths[day].binned, day, unit, bounds, key, kept_days.get(day, np.zeros(0, np.int64)),
                  paths[day].kept, paths[day].over_bound) for day in days]
        for day, result in zip(days, map_calls(bound_day_file, calls)):
            _record_bound(context, day, result)
    missing = [f"{asset} {day}" for asset, places in out.items() for day, path in places.items() if not path.exists()]
    if missing:
        raise RuntimeError(f"partitions not stored: {missing}")
    bounded_metadata = {  # the same for every partition of the run
        "privacy_unit": unit.value,
        "contribution_bounds": dg.MetadataValue.json(bounds.describe() if unit.bounds_cards else {}),
    }
    for spec in context.assets_def.specs:
        yield dg.MaterializeResult(asset_key=spec.key,
                                   metadata=bounded_metadata if spec.key.path == [BOUNDED] else None)


def _record_day(context: dg.AssetExecutionContext, day: str, result) -> None:
    """The day's figures, in each of its partitions' materialisations (no event of their own)."""
    ingest = result.ingest
    context.add_asset_metadata({
        "file": ingest.source_file,
        "rows_read": ingest.rows_read,
        "rows_accepted": ingest.rows_accepted,
        "rows_rejected": ingest.rows_rejected,
        "ignored_columns": ", ".join(ingest.ignored_columns),
        "dagster/row_count": ingest.rows_accepted,
    }, asset_key=INGESTED, partition_key=day)
    context.add_asset_metadata({"dagster/row_count": ingest.rows_rejected, "reasons": dg.MetadataValue.json(
        ingest.reasons)}, asset_key=REJECTED, partition_key=day)
    context.add_asset_metadata({"dagster/row_count": result.binned}, asset_key=BINNED, partition_key=day)
    context.add_asset_metadata({"dagster/row_count": result.cards}, asset_key=CARD_DAYS, partition_key=day)
    context.add_asset_metadata({"dagster/row_count": result.sequences}, asset_key=SEQUENCES, partition_key=day)
    if result.bound is not None:
        _record_bound(context, day, result.bound)


def _record_bound(context: dg.AssetExecutionContext, day: str, result: BoundSummary) -> None:
    context.add_asset_metadata({"dagster/row_count": result.kept, "trips_over_bound (internal, not DP)":
                                result.over_bound, "share_dropped_by_bounding (internal, not DP)":
                                result.share_dropped}, asset_key=BOUNDED, partition_key=day)
    context.add_asset_metadata({"dagster/row_count": result.over_bound}, asset_key=OVER_BOUND, partition_key=day)


def _periods(privacy_budget: PrivacyBudget, days: list[str]) -> dict[tuple[str, ...], list[str]]:
    try:
        return privacy_budget.periods.group(days)
    except ValueError as err:  # a date outside an explicit period
        raise dg.Failure(description=str(err)) from err


def _card_period_days(max_days: int, periods: dict, card_days: PartitionFrames, key: bytes) -> dict[str, np.ndarray]:
    """Per date, the sorted ids of the cards for which it is one of their kept days in its period (each period of
    the run's dates chosen over all of its days)."""
    kept: dict[str, np.ndarray] = {}
    for period in periods:
        missing = [d for d in period if d not in card_days]
        if missing:
            raise dg.Failure(description=f"the card_period day cap needs every day of the period {name(period)}; "
                                         f"not ingested yet: {missing}")
        chosen = select_card_days(pd.concat([card_days[d].assign(date=d) for d in period], ignore_index=True),
                                  max_days, key)
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
    with dates_read_once(context):
        for key, rows in zip(keys, map_calls(split_day, calls)):
            context.add_asset_metadata({"dagster/row_count": rows}, partition_key=key)
    return dg.Output(parts)
