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

from opal_dp.core.input_version import file_identity, file_version
from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.prep.binning import bin_trips, card_codes, split_by_mode
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.day_records import FAILED, INGESTED, DayCut, DayRecord, raw_stamp, write_record
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


@dataclass(frozen=True)
class Read:
    """A day's raw file as ingested: the rows, and the version and stamp of exactly the bytes they came from."""

    result: IngestResult
    version: str
    raw: tuple[str, int, int]


def _ingest_or_failure(raw_dir: Path, day: str, stops: pd.DataFrame, key: bytes) -> Read | DayFailure:
    """``ingest_file`` of the day's one raw file with its input version (``core.input_version``, under the
    fingerprint ``key``), or why it could not be used: a bad file fails its day only, and every day of a run is
    tried. The file's identity (inode, size, modification and change times) is the same before the version and after
    the rows are read, or the day is refused: the version is that of the bytes ingested."""
    try:
        raw_file = raw_file_for(raw_dir, day)
    except RawInputError as err:
        return DayFailure(str(err))
    try:
        before = file_identity(raw_file)
        version = file_version(raw_file, key)
        result = ingest_file(raw_file, stops)
    except RawInputError as err:
        return DayFailure(str(err))
    except (SchemaError, SchemaErrors) as err:  # their message lists failing values: not repeated here
        return DayFailure(f"{raw_file}: the rows read do not meet the {type(err).__name__} schema checks")
    if file_identity(raw_file) != before:
        return DayFailure(f"{raw_file}: the file changed while it was read; it is read again on the next run")
    return Read(result, version, raw_stamp(raw_file))


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
    bound: BoundSummary


def day_pass(raw_dir: Path, day: str, stops: pd.DataFrame, bounding: Bounding, cut: DayCut, key: bytes,
             paths: DayPaths, private_dir: Path) -> DaySummary | DayFailure:
    """One read of the day's raw file; from memory: the accepted and rejected rows (``ingest_file``), the binned
    trips and the day's cards (``bin_trips``), the card-day sequences of height ``cut.od_height``
    (``card_day_sequences``) and the bounded and over-the-bound trips without card id (``bound_day``: the
    per-card-day bounds; a card_period day cap is applied by the week's release), each stored, then the day's record
    (``prep.day_records``: the input version of the bytes read under the fingerprint ``key``, and ``cut``). A bad
    raw file returns why (``DayFailure``), stores nothing but its record, and leaves the day's earlier files
    unused (its record says failed). The OD alphabet comes from ``stops`` in the worker (``trip_alphabet``: built
    once per worker process, not once per day)."""
    read = _ingest_or_failure(raw_dir, day, stops, key)
    if isinstance(read, DayFailure):
        raw = raw_file_stamp(raw_dir, day)
        write_record(private_dir, DayRecord(day, FAILED, raw, reason=read.reason))
        return read
    result = read.result
    _store(result.accepted, paths.accepted)
    _store(result.rejected, paths.rejected)
    summary = _ingest_summary(result)
    binned = bin_trips(result.accepted, stops)
    del result  # the raw and accepted rows are no longer needed: at most two day-sized frames at a time
    codes, cards = card_codes(binned)
    _store(binned, paths.binned)
    _store(cards, paths.cards)
    sequences = card_day_sequences(binned, trip_alphabet(stops), cut.od_height, codes)
    _store(to_frame(sequences), paths.sequences)
    bound = _bound_and_store(binned, day, bounding, paths.kept, paths.over_bound, codes)
    write_record(private_dir, DayRecord(day, INGESTED, read.raw, input_version=read.version, cut=cut,
                                        rows=(summary.rows_read, summary.rows_accepted, summary.rows_rejected)))
    return DaySummary(summary, len(binned), len(cards), len(sequences), bound)


def raw_file_stamp(raw_dir: Path, day: str) -> tuple[str, int, int] | None:
    """The stamp of the day's one raw file, if there is exactly one."""
    try:
        return raw_stamp(raw_file_for(raw_dir, day))
    except (RawInputError, OSError):
        return None


@dataclass(frozen=True)
class BoundSummary:
    kept: int
    over_bound: int
    share_dropped: float


def _bound_and_store(binned: pd.DataFrame, day: str, bounding: Bounding, kept: Path, over_bound: Path,
                     card_codes: np.ndarray) -> BoundSummary:
    result = bound_day(binned, date.fromisoformat(day), bounding.unit, bounding.bounds, bounding.key,
                       card_codes=card_codes)
    _store(result.kept, kept, grouped_by="mode")  # each mode's rows read alone by ``split_day``
    _store(result.over_bound, over_bound)
    return BoundSummary(len(result.kept), len(result.over_bound), result.share_dropped)


@dataclass(frozen=True)
class DayCap:
    """A card_period day cap applied to one day of its week: the day's binned trips (with card ids) are bounded
    again keeping only ``kept_cards`` (the sorted ids of the cards for which this is one of their kept days)."""

    binned: Path
    unit: PrivacyUnit
    bounds: ContributionBounds
    key: bytes
    kept_cards: np.ndarray


def split_day(bounded: Path, day: str, outs: dict[str, Path], cap: DayCap | None = None) -> dict[str, int]:
    """The day's (date, mode) pieces of a week's release, each of ``outs`` (mode -> path) stored; returns the trips
    of each. Without ``cap`` each mode's rows are read alone from the day's bounded trips; with it the day is bounded
    again from its binned trips under the cap (``bound_day``: per card, so it keeps exactly the day's bounded trips of
    the kept cards)."""
    if cap is None:
        parts = {mode: split_by_mode(read_parquet_group(bounded, "mode", mode), mode) for mode in outs}
    else:
        kept = bound_day(pd.read_parquet(cap.binned), date.fromisoformat(day), cap.unit, cap.bounds, cap.key,
                         cap.kept_cards).kept
        parts = {mode: split_by_mode(kept, mode) for mode in outs}
    for mode, part in parts.items():
        _store(part, outs[mode])
    return {mode: len(part) for mode, part in parts.items()}


def _store(frame: pd.DataFrame, path: Path, grouped_by: str | None = None) -> None:
    write_parquet_atomic(frame, path, durable=False, grouped_by=grouped_by)
