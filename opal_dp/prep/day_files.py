"""The private stages of one service day, file to file: a worker process reads the day's raw file once and writes
every private partition of the day from memory (``day_pass``), returning only a small summary. This is what lets a
step run its days in worker processes (``opal_dp.parallel``) and hold no day's trips in the caller: memory is
bounded by the days in flight, not by the days in the run.

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
from opal_dp.prep.binning import bin_trips, card_codes, split_by_mode
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.ingest import IngestResult, RawInputError, ingest_file, raw_file_for
from opal_dp.prep.sequences import card_day_sequences, to_frame, trip_alphabet
from opal_dp.private_files import read_parquet_group, write_parquet_atomic


@dataclass(frozen=True)
class IngestSummary:
    source_file: str
    rows_read: int
    rows_accepted: int
    rows_rejected: int
    ignored_columns: list[str]
    reasons: dict[str, int]


def _ingest_summary(result: IngestResult) -> IngestSummary:
    return IngestSummary(result.source_file, result.rows_read, len(result.accepted), len(result.rejected),
                         result.ignored_columns, result.rejected["reason"].value_counts().to_dict())


@dataclass(frozen=True)
class DayFailure:
    """Why a day's raw file could not be used (file and column or line; never a raw value)."""

    reason: str


def _ingest_or_failure(raw_dir: Path, day: str, stops: pd.DataFrame) -> IngestResult | DayFailure:
    """``ingest_file`` of the day's one raw file, or why it could not be used: a bad file fails its day only, and
    every day of a run is tried."""
    try:
        raw_file = raw_file_for(raw_dir, day)
    except RawInputError as err:
        return DayFailure(str(err))
    try:
        return ingest_file(raw_file, stops)
    except RawInputError as err:
        return DayFailure(str(err))
    except (SchemaError, SchemaErrors) as err:  # their message lists failing values: not repeated here
        return DayFailure(f"{raw_file}: the rows read do not meet the {type(err).__name__} schema checks")


@dataclass(frozen=True)
class DayPaths:
    """Where each private partition of one day is stored."""

    accepted: Path
    rejected: Path
    binned: Path
    cards: Path
    sequences: Path
    kept: Path
    over_bound: Path


@dataclass(frozen=True)
class Bounding:
    """The privacy unit's contribution bounds and the bounding key (``bound_day``)."""

    unit: PrivacyUnit
    bounds: ContributionBounds
    key: bytes


@dataclass(frozen=True)
class DaySummary:
    ingest: IngestSummary
    binned: int
    cards: int
    sequences: int
    bound: BoundSummary | None


def day_pass(raw_dir: Path, day: str, stops: pd.DataFrame, height: int, bounding: Bounding | None,
             paths: DayPaths) -> DaySummary | DayFailure:
    """One read of the day's raw file; from memory: the accepted and rejected rows (``ingest_file``), the binned
    trips and the day's cards (``bin_trips``), the card-day sequences (``card_day_sequences``) and, given
    ``bounding``, the bounded and over-the-bound trips without card id (``bound_day``), each stored. Without
    ``bounding`` (a card_period day cap, chosen over the whole period once every day is binned) the step bounds
    later with ``bound_day_file``. A bad raw file returns why (``DayFailure``) and stores nothing. The OD alphabet
    comes from ``stops`` in the worker (``trip_alphabet``: built once per worker process, not once per day)."""
    result = _ingest_or_failure(raw_dir, day, stops)
    if isinstance(result, DayFailure):
        return result
    _store(result.accepted, paths.accepted)
    _store(result.rejected, paths.rejected)
    summary = _ingest_summary(result)
    binned = bin_trips(result.accepted, stops)
    del result  # the raw and accepted rows are no longer needed: at most two day-sized frames at a time
    codes, cards = card_codes(binned)
    _store(binned, paths.binned)
    _store(cards, paths.cards)
    sequences = card_day_sequences(binned, trip_alphabet(stops), height, codes)
    _store(to_frame(sequences), paths.sequences)
    bound = None
    if bounding is not None:
        bound = _bound_and_store(binned, day, bounding.unit, bounding.bounds, bounding.key, None,
                                 paths.kept, paths.over_bound)
    return DaySummary(summary, len(binned), len(cards), len(sequences), bound)


@dataclass(frozen=True)
class BoundSummary:
    kept: int
    over_bound: int
    share_dropped: float


def bound_day_file(binned: Path, day: str, unit: PrivacyUnit, bounds: ContributionBounds, key: bytes,
                   kept_cards: np.ndarray | None, kept: Path, over_bound: Path) -> BoundSummary:
    """``bound_day`` of one day's stored binned trips; the kept and over-the-bound trips stored without card id."""
    return _bound_and_store(pd.read_parquet(binned), day, unit, bounds, key, kept_cards, kept, over_bound)


def _bound_and_store(binned: pd.DataFrame, day: str, unit: PrivacyUnit, bounds: ContributionBounds, key: bytes,
                     kept_cards: np.ndarray | None, kept: Path, over_bound: Path) -> BoundSummary:
    result = bound_day(binned, date.fromisoformat(day), unit, bounds, key, kept_cards)
    _store(result.kept, kept, grouped_by="mode")  # each mode's rows read alone by ``split_day``
    _store(result.over_bound, over_bound)
    return BoundSummary(len(result.kept), len(result.over_bound), result.share_dropped)


def split_day(bounded: Path, mode: str, out: Path) -> int:
    """One (date, mode) partition of a day's bounded trips stored; returns its trips."""
    part = split_by_mode(read_parquet_group(bounded, "mode", mode), mode)
    _store(part, out)
    return len(part)


def _store(frame: pd.DataFrame, path: Path, grouped_by: str | None = None) -> None:
    write_parquet_atomic(frame, path, durable=False, grouped_by=grouped_by)
