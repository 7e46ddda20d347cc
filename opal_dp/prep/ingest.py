"""Read one raw daily trip file, enforce the input contract, and keep every rejected row with a reason.

Contract: one file per service day, ``trips_YYYY-MM-DD.{csv,csv.gz,parquet}``, one row per trip with
the columns of ``RAW_COLUMNS``. File-level problems (unreadable, missing column, a header that is not UTF-8)
raise ``RawInputError`` naming the file (and the column). Row-level problems (a value or a whole line that is
not UTF-8 text, a line that does not split into the header's fields, a value that breaks the contract) send the
row to the rejected table with its file, line and the field at fault, so that rows read = accepted + rejected,
always. No message quotes a raw value (it may be a card id): raw values stay in the private rejected table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from opal_dp.network import MODES
from opal_dp.prep import raw_columns
from opal_dp.prep.raw_columns import NAT
from opal_dp.prep.raw_read import NOT_UTF8, RawInputError, SetAside, read_raw
from opal_dp.prep.schemas import IngestedTrips, RejectedTrips

RAW_COLUMNS = ("card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop")
RAW_FILE = re.compile(r"^trips_(?P<date>\d{4}-\d{2}-\d{2})\.(?P<format>csv|csv\.gz|parquet)$")
# Longest plausible single trip per mode (intercity trains are the longest); longer is a data error.
MAX_DURATION = {
    "bus": pd.Timedelta(hours=4),
    "ferry": pd.Timedelta(hours=3),
    "light_rail": pd.Timedelta(hours=2),
    "train": pd.Timedelta(hours=5),
}


@dataclass(frozen=True)
class IngestResult:
    source_file: str
    accepted: pd.DataFrame
    rejected: pd.DataFrame
    ignored_columns: list[str] = field(default_factory=list)

    @property
    def rows_read(self) -> int:
        return len(self.accepted) + len(self.rejected)


def scan_raw_files(raw_dir: Path) -> tuple[dict[str, list[Path]], dict[str, str]]:
    """Service date (ISO string) -> its raw files (normally one), and file name -> why it names no service date."""
    days: dict[str, list[Path]] = {}
    unusable: dict[str, str] = {}
    for path in sorted(raw_dir.glob("trips_*")):
        match = RAW_FILE.match(path.name)
        if not match:
            continue
        try:
            _parse_date(match["date"], path)
        except RawInputError as err:
            unusable[path.name] = str(err)
            continue
        days.setdefault(match["date"], []).append(path)
    return days, unusable


def raw_files(raw_dir: Path) -> dict[str, Path]:
    """Service date (ISO string) -> raw file. Two files for one day is an error, not a guess."""
    days, unusable = scan_raw_files(raw_dir)
    if unusable:
        raise RawInputError(next(iter(unusable.values())))
    return {day: _only_file(raw_dir, day, paths) for day, paths in days.items()}


def raw_file_for(raw_dir: Path, service_date: str) -> Path:
    """The one raw file of ``service_date``; other days' files do not matter."""
    return _only_file(raw_dir, service_date, scan_raw_files(raw_dir)[0].get(service_date, []))


def _only_file(raw_dir: Path, service_date: str, paths: list[Path]) -> Path:
    if not paths:
        raise RawInputError(f"{raw_dir}: no raw file trips_{service_date}.(csv|csv.gz|parquet)")
    if len(paths) > 1:
        raise RawInputError(f"{paths[1]}: a second raw file for service date {service_date} (also {paths[0]})")
    return paths[0]


def ingest_file(path: Path, stops: pd.DataFrame) -> IngestResult:
    """Validate every row of ``path`` against the contract; see the module docstring."""
    match = RAW_FILE.match(path.name)
    if not match:
        raise RawInputError(f"{path}: file name must be trips_YYYY-MM-DD.(csv|csv.gz|parquet)")
    service_date = _parse_date(match["date"], path)
    raw = read_raw(path, match["format"])
    table = raw.table
    missing = [c for c in RAW_COLUMNS if c not in table.column_names]
    if missing:
        raise RawInputError(
            f"{path}: missing required column {missing[0]!r}"
            + (f" (and {missing[1:]})" if len(missing) > 1 else "")
            + f"; the file has {len(table.column_names)} columns, "
            + f"{sum(c in RAW_COLUMNS for c in table.column_names)} of them the contract's (other names are not "
            + "repeated: without its header line a file's first row would be shown)"
        )
    ignored = [c for c in table.column_names if c not in RAW_COLUMNS]
    table = table.select(list(RAW_COLUMNS))
    columns = _typed(table)
    first, labels = _row_faults(columns, service_date, stops)
    encoding = raw.not_utf8 != ""
    bad = (first != SOUND) | encoding
    index = np.flatnonzero(bad)
    fault = np.array([field for field, _ in labels], dtype=object)[first[index]]
    reason = np.array([why for _, why in labels], dtype=object)[first[index]]
    not_text = encoding[index]
    fault[not_text], reason[not_text] = raw.not_utf8[index][not_text], NOT_UTF8
    rejected = pd.concat(
        [_rejected(table, raw.lines, index, fault, reason, path), _set_aside(raw.set_aside, path)], ignore_index=True
    ).sort_values("line", ignore_index=True)
    return IngestResult(
        source_file=str(path),
        accepted=IngestedTrips.validate(_accepted(columns, ~bad), inplace=True),
        rejected=RejectedTrips.validate(rejected, inplace=True),
        ignored_columns=ignored,
    )


def _parse_date(text: str, path: Path) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise RawInputError(f"{path}: {text!r} in the file name is not a calendar date") from None


@dataclass(frozen=True)
class _Column:
    values: np.ndarray
    present: np.ndarray
    valid: np.ndarray


def _typed(table: pa.Table) -> dict[str, _Column]:
    return {
        "card_id": _Column(*raw_columns.integers(table["card_id"])),
        "mode": _Column(*raw_columns.categories(table["mode"], MODES)),
        "tap_on_time": _Column(*raw_columns.timestamps(table["tap_on_time"])),
        "tap_on_stop": _Column(*raw_columns.integers(table["tap_on_stop"])),
        "tap_off_time": _Column(*raw_columns.timestamps(table["tap_off_time"])),
        "tap_off_stop": _Column(*raw_columns.integers(table["tap_off_stop"])),
    }


SOUND = 0


def _row_faults(columns: dict[str, _Column], service_date: date, stops: pd.DataFrame
                ) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """The first fault of every row, as an index into the (field, reason) list returned with it; ``SOUND`` (its
    entry is ("", "")) where the row has none. Vectorised: one small integer per row, no text per row."""
    card, mode = columns["card_id"], columns["mode"]
    on, on_stop = columns["tap_on_time"], columns["tap_on_stop"]
    off, off_stop = columns["tap_off_time"], columns["tap_off_stop"]
    day_start = np.datetime64(service_date, "ns").astype(np.int64)
    day_end = day_start + np.timedelta64(1, "D").astype("timedelta64[ns]").astype(np.int64)
    stop_mode = _stop_mode_lookup(stops)
    max_duration = np.array([MAX_DURATION[m].value for m in MODES] + [0], dtype=np.int64)[mode.values]
    duration = off.values - on.values
    checks = [  # (fault, field, reason): the first that applies wins
        (~card.present, "card_id", "card_id is missing"),
        (~card.valid | (card.values <= 0), "card_id", "card_id is not a positive integer"),
        (card.values >= raw_columns.SYNTHETIC_ID_LOW, "card_id", "card_id is in the range reserved for synthetic cards"),
        (~mode.present, "mode", "mode is missing"),
        (~mode.valid, "mode", "unknown mode (expected one of " + ", ".join(MODES) + ")"),
        (~on.present, "tap_on_time", "tap_on_time is missing"),
        (~on.valid, "tap_on_time", "tap_on_time is not a timestamp"),
        ((on.values < day_start) | (on.values >= day_end), "tap_on_time",
         f"tap-on is not on the file's service date {service_date.isoformat()}"),
        (~on_stop.present, "tap_on_stop", "tap_on_stop is missing"),
        (~_of_mode(on_stop, mode, stop_mode), "tap_on_stop",
         "tap_on_stop is not a stop of this mode in the reference network"),
        (off.present != off_stop.present, "tap_off_time", "tap_off_time and tap_off_stop must both be present or both empty"),
        (off.present & ~off.valid, "tap_off_time", "tap_off_time is not a timestamp"),
        (off_stop.present & ~_of_mode(off_stop, mode, stop_mode), "tap_off_stop",
         "tap_off_stop is not a stop of this mode in the reference network"),
        (off.valid & (duration < 0), "tap_off_time", "tap-off is before tap-on"),
        (off.valid & (duration > max_duration), "tap_off_time",
         "trip longer than the maximum plausible duration for its mode"),
    ]
    first = np.full(len(card.values), SOUND, dtype=np.uint8)
    for number in range(len(checks), 0, -1):
        first[checks[number - 1][0]] = number
    duplicate = _duplicates([card.values, mode.values, on.values, on_stop.values], first == SOUND)
    first[duplicate] = len(checks) + 1
    labels = [("", ""), *((column, why) for _, column, why in checks),
              ("card_id", "duplicate of an earlier row (same card, mode, tap-on time and stop)")]
    return first, labels


def _stop_mode_lookup(stops: pd.DataFrame) -> np.ndarray:
    """stop_id -> index of its mode in MODES (-1: no such stop)."""
    ids = stops["stop_id"].to_numpy(np.int64)
    lookup = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int8)
    lookup[ids] = [MODES.index(m) for m in stops["mode"].astype(str)]
    return lookup


def _of_mode(stop: _Column, mode: _Column, lookup: np.ndarray) -> np.ndarray:
    inside = stop.valid & (stop.values >= 0) & (stop.values < len(lookup))
    found = np.full(len(stop.values), -2, dtype=np.int64)
    found[inside] = lookup[stop.values[inside]]
    return inside & (found == mode.values)


def _duplicates(keys: list[np.ndarray], sound: np.ndarray) -> np.ndarray:
    """True for every sound row equal, on the key columns, to an earlier sound row.

    A 64-bit mix of the keys finds the few rows that can be duplicates; pandas settles them exactly.
    """
    rows = np.flatnonzero(sound)
    mixed = np.zeros(len(rows), dtype=np.uint64)
    for i, key in enumerate(keys):
        mixed = (mixed ^ key[rows].astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15 + 2 * i)
    ordered = np.sort(mixed)  # a sort of values, several times faster than an argsort
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])  # few: duplicates and rare collisions
    maybe = rows[np.isin(mixed, repeated)] if len(repeated) else rows[:0]
    duplicate = np.zeros(len(sound), dtype=bool)
    if len(maybe):
        frame = pd.DataFrame({f"k{i}": key[maybe] for i, key in enumerate(keys)})
        duplicate[maybe[frame.duplicated().to_numpy()]] = True
    return duplicate


def _accepted(columns: dict[str, _Column], keep: np.ndarray) -> pd.DataFrame:
    off = columns["tap_off_time"].values[keep]
    has_off = columns["tap_off_time"].valid[keep]
    return pd.DataFrame(
        {
            "card_id": columns["card_id"].values[keep],
            "mode": pd.Categorical.from_codes(columns["mode"].values[keep], categories=list(MODES)),
            "tap_on_time": columns["tap_on_time"].values[keep].view("datetime64[ns]"),
            "tap_on_stop": columns["tap_on_stop"].values[keep].astype(np.int32),
            "tap_off_time": np.where(has_off, off, NAT).view("datetime64[ns]"),
            "tap_off_stop": pd.arrays.IntegerArray(
                columns["tap_off_stop"].values[keep].astype(np.int32), ~has_off
            ),
        },
        copy=False,  # fresh arrays: neither copied nor consolidated into 2-D blocks (0.24 s of a 2 M-trip day)
    )


def _rejected(
    table: pa.Table, lines: np.ndarray, index: np.ndarray, fault: np.ndarray, reason: np.ndarray, path: Path
) -> pd.DataFrame:
    """The rows at ``index`` (ascending) as read, with their line, field and reason."""
    rows = table.take(pa.array(index, type=pa.int64()))
    return pd.DataFrame(
        {
            "source_file": pd.Series([str(path)] * len(index), dtype=object),
            "line": lines[index],
            "field": fault.astype(str),
            "reason": reason.astype(str),
            **{c: _as_text(rows[c]) for c in RAW_COLUMNS},
            "raw_line": pd.Series([None] * len(index), dtype=object),
        }
    )


def _set_aside(lines: list[SetAside], path: Path) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "source_file": pd.Series([str(path)] * len(lines), dtype=object),
            "line": np.array([a.line for a in lines], dtype=np.int64),
            "field": pd.Series(["(line)"] * len(lines), dtype=object),
            "reason": pd.Series([a.reason for a in lines], dtype=object),
            **{c: pd.Series([None] * len(lines), dtype=object) for c in RAW_COLUMNS},
            "raw_line": pd.Series([a.text for a in lines], dtype=object),
        }
    )


def _as_text(column: pa.ChunkedArray) -> np.ndarray:
    values = column.to_pylist()
    return np.array([None if v is None else str(v) for v in values], dtype=object)
