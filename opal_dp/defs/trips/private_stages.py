"""Private stages: ingest -> bin -> bound and anonymise (and the card-day sequences), one pass per day as soon as
its raw file is there; then the week's (date, mode) pieces, the release's input. Thin wrappers over ``opal_dp.prep``.

Everything here is microdata and lives under ``$OPAL_DP_DATA_DIR/private`` only. The card id is kept until
contribution bounding, which is the only step that uses it, and dropped there (the card-day sequences use it to
group a card's trips of the day, and do not keep it).

The per-day assets stay separate in the lineage (``ingested_trips`` ... ``trip_sequences``) but are materialised by
one step, ``private_day_stages``: a worker process reads a day's raw file once and writes every one of them from
memory (``prep.day_files.day_pass``), then the day's record (``prep.day_records``). A day whose file cannot be used
fails alone: the step materialises every good day of its run, then fails naming the bad ones. Under a card_period
day cap the cards' kept days are chosen over their whole week by the week's ``trip_partitions``.
"""



import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core import PrivacyUnit
from opal_dp.defs.shared.automation import DAY, PERIOD, RAW_FILES
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, StoredPartitions, stored
from opal_dp.defs.shared.metadata import SINGLE_RUN, column_schema, labels
from opal_dp.defs.shared.weeks import period_inputs
from opal_dp.defs.shared.partitions import period_and_mode, period_mode, service_dates
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.parallel import map_calls
from opal_dp.prep.bounding import select_card_days
from opal_dp.prep.day_files import Bounding, DayCap, DayFailure, DayPaths, day_pass, split_day
from opal_dp.release.period_input import PeriodInput
from opal_dp.release.periods import week_of
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


def _spec(key: str, group: str, deps: list, description: str, **metadata) -> dg.AssetSpec:
    return dg.AssetSpec(key, deps=deps, group_name=group, description=description, automation_condition=DAY,
                        partitions_def=service_dates, metadata=metadata, skippable=True,
                        **labels("microdata", "parquet")).with_io_manager_key(PRIVATE)


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
        *(_spec(key, "bound", [BINNED], text, **column_schema(BinnedTrips))
          for key, text in (
            (BOUNDED, "Bounded and anonymised: each card-day's contribution cut to the privacy unit's public bounds, "
                      "then the card id dropped and the rows put in a CSPRNG-random order (private microdata)."),
            (OVER_BOUND, "Trips removed by contribution bounding, without card id (private; internal utility report "
                         "only). Rows in = bounded + over the bound."))),
        _spec(SEQUENCES, "od", [BINNED], "Each card-day's trips as symbol ids in tap-on order, truncated to "
              "``od_height`` (private microdata; built from the stage that still has card ids, which is used for "
              "grouping only and not kept)."),
    ]


@dg.multi_asset(specs=_day_specs(), partitions_def=service_dates, backfill_policy=SINGLE_RUN)
def private_day_stages(context: dg.AssetExecutionContext, reference: ReferenceNetwork, privacy_budget: PrivacyBudget,
                       storage: OpalStorage, workers: PerDayWorkers):
    """Every private asset of each day from one read of its raw file, a day per worker process, each storing its
    own partitions and then the day's record (``prep.day_files.day_pass``); rows read = accepted + rejected, per
    file, always (recorded per day). Every day is tried and every good one is materialised; a file that cannot be
    used fails the step afterwards, naming each such day and why (its record says so, for the week's release and
    the summary), never quoting a raw value. The share of trips dropped by bounding is internal, non-DP metadata."""
    stops, days = reference.stops(), list(context.partition_keys)
    bounding = Bounding(privacy_budget.unit, privacy_budget.bounds, privacy_budget.key(storage, "bounding"))
    cut, fingerprint = privacy_budget.day_cut(stops), privacy_budget.key(storage, "fingerprint")
    out = {spec.key.path[-1]: stored(storage, spec.key.path[-1], days) for spec in context.assets_def.specs}
    paths = {day: DayPaths(out[INGESTED][day], out[REJECTED][day], out[BINNED][day], out[CARD_DAYS][day],
                           out[SEQUENCES][day], out[BOUNDED][day], out[OVER_BOUND][day]) for day in days}
    calls = [(storage.raw_dir, day, stops, bounding, cut, fingerprint, paths[day], storage.private_dir)
             for day in days]
    failed = {}
    for day, result in zip(days, map_calls(day_pass, calls, workers.count)):
        if isinstance(result, DayFailure):
            failed[day] = result.reason
            continue
        for key, metadata in _day_metadata(result, privacy_budget).items():
            context.log_event(dg.AssetMaterialization(key, partition=day, metadata=metadata))
    yield from ()  # no outputs: each good day's partitions are stored already, and materialised above
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(days)} days could not be ingested (the others are):\n"
                        + "\n".join(f"{day}: {why}" for day, why in failed.items()),
            metadata={"failed_days": dg.MetadataValue.json(failed)},
        )


def _day_metadata(result, privacy_budget: PrivacyBudget) -> dict[str, dict]:
    """The day's figures, per asset of the day."""
    ingest, bound = result.ingest, result.bound
    return {
        INGESTED: {"file": ingest.source_file, "rows_read": ingest.rows_read, "rows_accepted": ingest.rows_accepted,
                   "rows_rejected": ingest.rows_rejected, "ignored_columns": ", ".join(ingest.ignored_columns),
                   "dagster/row_count": ingest.rows_accepted},
        REJECTED: {"dagster/row_count": ingest.rows_rejected, "reasons": dg.MetadataValue.json(ingest.reasons)},
        BINNED: {"dagster/row_count": result.binned},
        CARD_DAYS: {"dagster/row_count": result.cards},
        SEQUENCES: {"dagster/row_count": result.sequences},
        BOUNDED: {"dagster/row_count": bound.kept, "privacy_unit": privacy_budget.unit.value,
                  "contribution_bounds": dg.MetadataValue.json(
                      privacy_budget.bounds.describe() if privacy_budget.unit.bounds_cards else {}),
                  "trips_over_bound (internal, not DP)": bound.over_bound,
                  "share_dropped_by_bounding (internal, not DP)": bound.share_dropped},
        OVER_BOUND: {"dagster/row_count": bound.over_bound},
    }


@dg.asset(
    group_name="partition",
    io_manager_key=PRIVATE,
    partitions_def=period_mode,
    backfill_policy=SINGLE_RUN,
    ins={BOUNDED: dg.AssetIn(), BINNED: dg.AssetIn(), CARD_DAYS: dg.AssetIn()},
    metadata=column_schema(PartitionTrips),
    automation_condition=PERIOD,
    **labels("microdata", "parquet"),
)
def trip_partitions(
    context: dg.AssetExecutionContext, bounded_trips: PartitionFrames, binned_trips: PartitionFrames,
    card_days: PartitionFrames, privacy_budget: PrivacyBudget, reference: ReferenceNetwork, storage: OpalStorage,
    workers: PerDayWorkers,
) -> dg.Output[StoredPartitions]:
    """The week's (date, mode) pieces of its bounded trips: what the release draws from and the ledger charges.
    Refused, before anything is charged, while a day of the week is not ingested with the release's settings
    (``release.period_input``); records which days and which input versions the week's release reads. Under a
    card_period day cap each card keeps at most ``max_days_per_card`` of its days of the week (``select_card_days``,
    chosen over the whole week), each day then bounded again from its binned trips. One call per day, in worker
    processes."""
    inputs = period_inputs(context, privacy_budget, reference, storage)
    modes: dict[str, list[str]] = {}
    for key in map(str, context.partition_keys):
        period, mode = period_and_mode(key)
        modes.setdefault(period, []).append(mode)
    bounds, key = privacy_budget.bounds, privacy_budget.key(storage, "bounding")
    calls, pieces = [], StoredPartitions()
    for period, found in inputs.items():
        kept = _kept_days(found, bounds.max_days_per_card, card_days, key) \
            if privacy_budget.unit is PrivacyUnit.CARD_PERIOD and bounds.max_days_per_card is not None else None
        for day in found.days:
            outs = stored(storage, "trip_partitions", [f"{day}|{mode}" for mode in modes[period]])
            pieces.update(outs)
            cap = None if kept is None else DayCap(binned_trips.path(day), privacy_budget.unit, bounds, key,
                                                   kept.get(day, np.zeros(0, np.int64)))
            calls.append((bounded_trips.path(day), day, {k.split("|")[1]: p for k, p in outs.items()}, cap))
    rows: dict[str, int] = {}
    for (_, day, _, _), counts in zip(calls, map_calls(split_day, calls, workers.count)):
        for mode, count in counts.items():
            rows[f"{mode}|{week_of(day)}"] = rows.get(f"{mode}|{week_of(day)}", 0) + count
    for key in map(str, context.partition_keys):
        period, _ = period_and_mode(key)
        context.add_asset_metadata({"dagster/row_count": rows.get(key, 0), "days": len(inputs[period].days),
                                    "days_left_out": ", ".join(inputs[period].without) or "none"},
                                   partition_key=key)
    return dg.Output(pieces)


def _kept_days(found: PeriodInput, max_days: int, card_days: PartitionFrames, key: bytes) -> dict[str, np.ndarray]:
    """Per date of the week, the sorted ids of the cards for which it is one of their kept days (chosen over the
    days the week's release reads)."""
    chosen = select_card_days(pd.concat([card_days[d].assign(date=d) for d in found.days], ignore_index=True),
                              max_days, key)
    return {d: np.sort(group["card_id"].to_numpy(np.int64)) for d, group in chosen.groupby("date", sort=False)}
