"""The private stages of one service day, file to file: each reads its input partition, calls the prep function
and writes its output partitions itself, returning only a small summary. This is what lets a step run its days
in worker processes (``opal_dp.parallel``) and hold no day's trips in the caller: memory is bounded by the days
in flight, not by the days in the run.

Paths are ``PartitionStore`` paths under the private folder; everything written here is private microdata.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
from pandera.errors import SchemaError, SchemaErrors

from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.prep.binning import bin_trips, card_days_of, split_by_mode
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.ingest import RawInputError, ingest_file, raw_file_for
from opal_dp.prep.sequences import TripAlphabet, card_day_sequences, to_frame
from opal_dp.private_files import write_parquet_atomic


@dataclass(frozen=True)
class IngestSummary:
    source_file: str
    rows_read: int
    rows_accepted: int
    rows_rejected: int
    ignored_columns: list[str]
    reasons: dict[str, int]


def ingest_day(raw_file: Path, stops: pd.DataFrame, accepted: Path, rejected: Path) -> IngestSummary:
    """``ingest_file`` of one raw file; accepted and rejected rows stored. Rows read = accepted + rejected."""
    result = ingest_file(raw_file, stops)
    _store(result.accepted, accepted)
    _store(result.rejected, rejected)
    return IngestSummary(result.source_file, result.rows_read, len(result.accepted), len(result.rejected),
                         result.ignored_columns, result.rejected["reason"].value_counts().to_dict())


@dataclass(frozen=True)
class DayFailure:
    """Why a day's raw file could not be used (file and column or line; never a raw value)."""

    reason: str


def try_ingest_day(raw_dir: Path, day: str, stops: pd.DataFrame, accepted: Path,
                   rejected: Path) -> IngestSummary | DayFailure:
    """``ingest_day`` of the day's one raw file, or why it could not be used: a bad file fails its day only, and
    every day of a run is tried."""
    try:
        raw_file = raw_file_for(raw_dir, day)
    except RawInputError as err:
        return DayFailure(str(err))
    try:
        return ingest_day(raw_file, stops, accepted, rejected)
    except RawInputError as err:
        return DayFailure(str(err))
    except (SchemaError, SchemaErrors) as err:  # their message lists failing values: not repeated here
        return DayFailure(f"{raw_file}: the rows read do not meet the {type(err).__name__} schema checks")


def bin_day(ingested: Path, stops: pd.DataFrame, binned: Path, cards: Path) -> tuple[int, int]:
    """Binned trips (still with card id) and the day's distinct cards stored; returns (trips, cards)."""
    trips = bin_trips(pd.read_parquet(ingested), stops)
    card_days = card_days_of(trips)
    _store(trips, binned)
    _store(card_days, cards)
    return len(trips), len(card_days)


@dataclass(frozen=True)
class BoundSummary:
    kept: int
    over_bound: int
    share_dropped: float


def bound_day_file(binned: Path, day: str, unit: PrivacyUnit, bounds: ContributionBounds, key: bytes,
                   kept_cards: np.ndarray | None, kept: Path, over_bound: Path) -> BoundSummary:
    """``bound_day`` of one day's binned trips; the kept and over-the-bound trips stored without card id."""
    result = bound_day(pd.read_parquet(binned), date.fromisoformat(day), unit, bounds, key, kept_cards)
    _store(result.kept, kept)
    _store(result.over_bound, over_bound)
    return BoundSummary(len(result.kept), len(result.over_bound), result.share_dropped)


def sequences_day(binned: Path, alphabet: TripAlphabet, height: int, out: Path) -> int:
    """The day's card-day sequences (``card_day_sequences``) stored; returns how many card-days."""
    sequences = card_day_sequences(pd.read_parquet(binned), alphabet, height)
    _store(to_frame(sequences), out)
    return len(sequences)


def split_day(bounded: Path, mode: str, out: Path) -> int:
    """One (date, mode) partition of a day's bounded trips stored; returns its trips."""
    part = split_by_mode(pd.read_parquet(bounded, filters=[("mode", "==", mode)]), mode)
    _store(part, out)
    return len(part)


def _store(frame: pd.DataFrame, path: Path) -> None:
    write_parquet_atomic(frame, path, durable=False)
