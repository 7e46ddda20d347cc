"""Read one raw daily trip file, enforce the input contract, and keep every rejected row with a reason.

Contract: one file per service day, ``trips_YYYY-MM-DD.{csv,csv.gz,parquet}``, one row per trip with
the columns of ``RAW_COLUMNS``. File-level problems (unreadable, missing column) raise
``RawInputError`` naming the file (and the column). Row-level problems send the row to the rejected
table with its file, line and the field at fault, so that rows read = accepted + rejected, always.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opal_dp.network import MODES
from opal_dp.prep.schemas import IngestedTrips, RejectedTrips

RAW_COLUMNS = ("card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop")
RAW_FILE = re.compile(r"^trips_(?P<date>\d{4}-\d{2}-\d{2})\.(?P<format>csv|csv\.gz|parquet)$")
TIME_FORMAT = "ISO8601"
# Longest plausible single trip per mode (intercity trains are the longest); longer is a data error.
MAX_DURATION = {
    "bus": pd.Timedelta(hours=4),
    "ferry": pd.Timedelta(hours=3),
    "light_rail": pd.Timedelta(hours=2),
    "train": pd.Timedelta(hours=5),
}


class RawInputError(ValueError):
    """A raw file as a whole cannot be used (unreadable, missing column, ambiguous day)."""


@dataclass(frozen=True)
class IngestResult:
    source_file: str
    accepted: pd.DataFrame
    rejected: pd.DataFrame
    ignored_columns: list[str] = field(default_factory=list)

    @property
    def rows_read(self) -> int:
        return len(self.accepted) + len(self.rejected)


def raw_files(raw_dir: Path) -> dict[str, Path]:
    """Service date (ISO string) -> raw file. Two files for one day is an error, not a guess."""
    found: dict[str, Path] = {}
    for path in sorted(raw_dir.glob("trips_*")):
        match = RAW_FILE.match(path.name)
        if not match:
            continue
        day = match["date"]
        _parse_date(day, path)
        if day in found:
            raise RawInputError(f"{path}: a second raw file for service date {day} (also {found[day]})")
        found[day] = path
    return found


def raw_file_for(raw_dir: Path, service_date: str) -> Path:
    files = raw_files(raw_dir)
    if service_date not in files:
        raise RawInputError(f"{raw_dir}: no raw file trips_{service_date}.(csv|csv.gz|parquet)")
    return files[service_date]


def ingest_file(path: Path, stops: pd.DataFrame) -> IngestResult:
    """Validate every row of ``path`` against the contract; see the module docstring."""
    match = RAW_FILE.match(path.name)
    if not match:
        raise RawInputError(f"{path}: file name must be trips_YYYY-MM-DD.(csv|csv.gz|parquet)")
    service_date = _parse_date(match["date"], path)
    raw = _read(path, match["format"])
    missing = [c for c in RAW_COLUMNS if c not in raw.columns]
    if missing:
        raise RawInputError(
            f"{path}: missing required column {missing[0]!r}"
            + (f" (and {missing[1:]})" if len(missing) > 1 else "")
            + f"; found columns {list(raw.columns)}"
        )
    ignored = [c for c in raw.columns if c not in RAW_COLUMNS]
    raw = raw[list(RAW_COLUMNS)].reset_index(drop=True)
    typed = _coerce(raw)
    fault, reason = _row_faults(raw, typed, service_date, stops)
    bad = fault != ""
    accepted = typed.loc[~bad].reset_index(drop=True)
    accepted["mode"] = pd.Categorical(accepted["mode"], categories=list(MODES))
    accepted["tap_on_stop"] = accepted["tap_on_stop"].astype("int32")
    rejected = _rejected_rows(raw, bad, fault, reason, path, first_line=2 if match["format"] != "parquet" else 1)
    return IngestResult(
        source_file=str(path),
        accepted=IngestedTrips.validate(accepted),
        rejected=RejectedTrips.validate(rejected),
        ignored_columns=ignored,
    )


def _parse_date(text: str, path: Path) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise RawInputError(f"{path}: {text!r} in the file name is not a calendar date") from None


def _read(path: Path, fmt: str) -> pd.DataFrame:
    try:
        if fmt == "parquet":
            table = pq.read_table(path)
            return table.to_pandas(types_mapper={pa.int32(): pd.Int32Dtype()}.get)
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise RawInputError(f"{path}: file is empty (no header line)") from None
    except UnicodeDecodeError as err:
        raise RawInputError(f"{path}: not valid UTF-8 text ({err.reason} at byte {err.start})") from None
    except (pa.ArrowException, pd.errors.ParserError, OSError) as err:
        raise RawInputError(f"{path}: cannot be read as {fmt}: {err}") from None


def _coerce(raw: pd.DataFrame) -> pd.DataFrame:
    """Typed copy of the contract columns; values that do not parse become missing."""
    return pd.DataFrame(
        {
            "card_id": _integers(raw["card_id"]),
            "mode": raw["mode"].astype("string"),
            "tap_on_time": _timestamps(raw["tap_on_time"]),
            "tap_on_stop": _integers(raw["tap_on_stop"]),
            "tap_off_time": _timestamps(raw["tap_off_time"]),
            "tap_off_stop": _integers(raw["tap_off_stop"]).astype("Int32"),
        }
    )


def _integers(column: pd.Series) -> pd.Series:
    if pd.api.types.is_integer_dtype(column):
        return column.astype("Int64")
    values = pd.to_numeric(column, errors="coerce")
    whole = values.notna() & (values == np.floor(values)) & (values.abs() < 2**62)
    return values.where(whole).astype("Int64")


def _timestamps(column: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(column):
        if getattr(column.dt, "tz", None) is not None:
            return pd.Series(pd.NaT, index=column.index, dtype="datetime64[ns]")
        return column.astype("datetime64[ns]")
    return pd.to_datetime(column.astype("string"), format=TIME_FORMAT, errors="coerce").astype("datetime64[ns]")


def _row_faults(
    raw: pd.DataFrame, typed: pd.DataFrame, service_date: date, stops: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """(field, reason) of the first fault of every row, "" where the row is sound. Vectorised."""
    present = raw.apply(_present)
    mode_ok = typed["mode"].isin(MODES).fillna(False).to_numpy(bool)
    mode = typed["mode"].where(mode_ok, None)
    on_stop_ok = _stop_of_mode(typed["tap_on_stop"], mode, stops)
    off_stop_ok = _stop_of_mode(typed["tap_off_stop"], mode, stops)
    on, off = typed["tap_on_time"], typed["tap_off_time"]
    duration = off - on
    max_duration = mode.map(MAX_DURATION).astype("timedelta64[ns]")
    day_start = pd.Timestamp(service_date)
    has_off_time, has_off_stop = present["tap_off_time"].to_numpy(), present["tap_off_stop"].to_numpy()
    duplicate = typed.duplicated(subset=["card_id", "mode", "tap_on_time", "tap_on_stop"]) & typed[
        ["card_id", "tap_on_time", "tap_on_stop"]
    ].notna().all(axis=1)
    checks = [  # (fault, field, reason): the first that applies wins
        (~present["card_id"], "card_id", "card_id is missing"),
        (typed["card_id"].isna() | (typed["card_id"] <= 0), "card_id", "card_id is not a positive integer"),
        (~present["mode"], "mode", "mode is missing"),
        (~mode_ok, "mode", "unknown mode (expected one of " + ", ".join(MODES) + ")"),
        (~present["tap_on_time"], "tap_on_time", "tap_on_time is missing"),
        (on.isna(), "tap_on_time", "tap_on_time is not a timestamp"),
        ((on < day_start) | (on >= day_start + pd.Timedelta(days=1)), "tap_on_time",
         f"tap-on is not on the file's service date {service_date.isoformat()}"),
        (~present["tap_on_stop"], "tap_on_stop", "tap_on_stop is missing"),
        (~on_stop_ok, "tap_on_stop", "tap_on_stop is not a stop of this mode in the reference network"),
        (has_off_time != has_off_stop, "tap_off_time", "tap_off_time and tap_off_stop must both be present or both empty"),
        (has_off_time & off.isna(), "tap_off_time", "tap_off_time is not a timestamp"),
        (has_off_stop & ~off_stop_ok, "tap_off_stop", "tap_off_stop is not a stop of this mode in the reference network"),
        (duration < pd.Timedelta(0), "tap_off_time", "tap-off is before tap-on"),
        (duration > max_duration, "tap_off_time", "trip longer than the maximum plausible duration for its mode"),
        (duplicate, "card_id", "duplicate of an earlier row (same card, mode, tap-on time and stop)"),
    ]
    fault = np.full(len(raw), "", dtype=object)
    reason = np.full(len(raw), "", dtype=object)
    for mask, column, why in reversed(checks):
        hit = np.asarray(pd.Series(mask).fillna(False), dtype=bool)
        fault[hit], reason[hit] = column, why
    return fault, reason


def _present(column: pd.Series) -> pd.Series:
    """Not null and, for text, not blank."""
    if column.dtype == object or pd.api.types.is_string_dtype(column):
        return (column.astype("string").str.strip() != "").fillna(False).astype(bool)
    return column.notna()


def _stop_of_mode(stop: pd.Series, mode: pd.Series, stops: pd.DataFrame) -> np.ndarray:
    """True where ``stop`` is a reference stop whose mode is the row's mode."""
    lookup = pd.Series(stops["mode"].astype(str).to_numpy(), index=stops["stop_id"].astype("int64"))
    stop_mode = stop.map(lookup)
    return (stop_mode.astype("string") == mode.astype("string")).fillna(False).to_numpy(bool)


def _rejected_rows(
    raw: pd.DataFrame, bad: np.ndarray, fault: np.ndarray, reason: np.ndarray, path: Path, first_line: int
) -> pd.DataFrame:
    rows = raw.loc[bad].astype("string").astype(object).where(raw.loc[bad].notna(), None)
    index = np.flatnonzero(bad)
    return pd.DataFrame(
        {
            "source_file": str(path),
            "line": index.astype("int64") + first_line,
            "field": fault[bad].astype(str),
            "reason": reason[bad].astype(str),
            **{c: rows[c].to_numpy() for c in RAW_COLUMNS},
        }
    )
