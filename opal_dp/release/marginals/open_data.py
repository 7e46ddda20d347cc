"""The open-data tables of the 2016 release (``time-loc.csv``, ``time.csv``, ``loc.csv``): released marginals as
published rows, their canonical order, and the validation of one published table.

Rows are ``mode,date,tap,time,loc,count`` (``bus,20160730,on,2:30,2000,415``), ordered by date, mode, tap (on before
off), time window and location label: a function of the released bins only, never of the order the data came in.
A public-domain release also has the remainder rows ``time = T, loc = other`` and ``time = other, loc = L`` in
``time-loc.csv``; an SBH release has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from opal_dp.network import MODES
from opal_dp.prep.binning import window_label
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.release.marginals.public_domain import OTHER, OTHER_WINDOW
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, Marginal
from opal_dp.release.published_format import DATE, PublishedFormatError
from opal_dp.release.statement.build import open_data_partition

COLUMNS = ["mode", "date", "tap", "time", "loc", "count"]
TABLES = ("time-loc", "time", "loc")
TABLE_NOTES = {  # published table -> what a row counts (the page's file list)
    "time-loc": "trips per mode, date, tap, 15-minute window and location",
    "time": "trips per mode, date, tap and 15-minute window (loc is -)",
    "loc": "trips per mode, date, tap and location (time is -)",
}
TAPS = ("on", "off")
AGGREGATED = "-"
WINDOW_LABELS = [window_label(w) for w in range(UNKNOWN, WINDOWS_PER_DAY)]
TIME_ORDER = [AGGREGATED, *WINDOW_LABELS, OTHER]  # categories of the time column, in sort order
COUNT_TEXT = re.compile(r"[1-9]\d*")


def to_open_data(releases: Mapping[str, Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """{marginal: {partition key: released frame}} -> {"time-loc"|"time"|"loc": published table}."""
    names = sorted(m.name for m in MARGINALS)
    if sorted(releases) != names:
        raise ValueError(f"releases must hold exactly the marginals {names}, got {sorted(releases)}")
    keys = {name: sorted(map(str, parts)) for name, parts in releases.items()}
    if len({tuple(k) for k in keys.values()}) > 1:
        raise ValueError("every marginal must cover the same (date, mode) partitions")
    dates = sorted({open_data_partition(key)[0] for key in keys[names[0]]})
    pieces: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    for marginal in MARGINALS:
        for key, frame in releases[marginal.name].items():
            pieces[marginal.table].append(_rows(marginal, str(key), frame, dates))
    return {table: _canonical(parts) for table, parts in pieces.items()}


def _rows(marginal: Marginal, key: str, frame: pd.DataFrame, dates: list[str]) -> pd.DataFrame:
    """One released frame in published form, as categoricals; ``-`` in the aggregated-over column."""
    day, mode = open_data_partition(key)
    n = len(frame)

    def constant(value: str, categories: list[str]) -> pd.Categorical:
        return pd.Categorical.from_codes(np.full(n, categories.index(value)), categories=categories)

    if marginal.by_time:
        window = frame[TIME].to_numpy("int64")
        other = window == OTHER_WINDOW  # a remainder row (public-domain design; validated on publishing)
        if n and ((window[~other] < UNKNOWN).any() or window.max() >= WINDOWS_PER_DAY):
            raise ValueError(f"{marginal.name} {key}: time_window outside [{UNKNOWN}, {WINDOWS_PER_DAY})")
        time = pd.Categorical.from_codes(np.where(other, len(TIME_ORDER) - 1, window - UNKNOWN + 1),
                                         categories=TIME_ORDER)
    else:
        time = constant(AGGREGATED, TIME_ORDER)
    return pd.DataFrame(
        {
            "mode": constant(mode, list(MODES)),
            "date": constant(day, dates),
            "tap": constant(marginal.tap, list(TAPS)),
            "time": time,
            "loc": pd.Categorical(frame[LOC]) if marginal.by_loc else constant(AGGREGATED, [AGGREGATED]),
            "count": frame[COUNT].to_numpy("int64"),
        }
    )


def _canonical(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate published pieces and put their rows in published order; bins must be unique."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "count" else object) for c in COLUMNS})
    loc = union_categoricals([part["loc"] for part in parts], sort_categories=True)
    table = pd.concat([part.drop(columns="loc") for part in parts], ignore_index=True).assign(loc=loc)[COLUMNS]
    order, repeated = row_order(table)
    if repeated:
        raise ValueError("released bins are not unique: a (mode, date, tap, time, loc) appears twice")
    return table.iloc[order].reset_index(drop=True)


def row_order(table: pd.DataFrame) -> tuple[np.ndarray, bool]:
    """Row positions in published order (date, mode, tap on/off, time window, location label), and
    whether any (mode, date, tap, time, loc) appears twice."""
    codes = [
        _categorical(table["date"]),
        _categorical(table["mode"], list(MODES)),
        _categorical(table["tap"], list(TAPS)),
        _categorical(table["time"], TIME_ORDER),
        _categorical(table["loc"]),
    ]
    key = np.ravel_multi_index([c.codes for c in codes], [max(len(c.categories), 1) for c in codes])
    order = np.argsort(key, kind="stable")
    return order, bool((np.diff(key[order]) == 0).any())


def _categorical(column: pd.Series, categories: list[str] | None = None) -> pd.Categorical:
    """``column`` as a categorical in the order of ``categories`` (default: its distinct values, sorted)."""
    return pd.Categorical(column, categories=sorted(column.unique()) if categories is None else categories)


def validate_table(path: Path, table: str, partitions: set[tuple[str, str]], remainders: bool = False) -> None:
    """``remainders``: the release's design has remainder rows (``other``), in ``time-loc.csv`` only."""
    def fail(what: str, bad: pd.Series | np.ndarray) -> None:
        if bad.any():
            raise PublishedFormatError(f"{path}: {what}, e.g. row {int(np.flatnonzero(bad)[0]) + 2}")

    with open(path, encoding="utf-8", newline="") as handle:
        header = handle.readline()
    if header != ",".join(COLUMNS) + "\n":
        raise PublishedFormatError(f"{path}: header must be {','.join(COLUMNS)!r}, got {header!r}")
    rows = pd.read_csv(path, dtype="category", keep_default_na=False, na_filter=False)
    by_time, by_loc = table != "loc", table != "time"
    remainders = remainders and by_time and by_loc
    other_time = (rows["time"] == OTHER) if remainders else np.zeros(len(rows), dtype=bool)
    other_loc = (rows["loc"] == OTHER) if remainders else np.zeros(len(rows), dtype=bool)
    fail("mode not one of " + "/".join(MODES), ~rows["mode"].isin(MODES))
    fail("date is not a valid YYYYMMDD", ~_each_distinct(rows["date"], _is_date))
    fail("(date, mode) is not a partition listed in privacy.json",
         ~pd.MultiIndex.from_arrays([rows["date"], rows["mode"]]).isin(list(partitions)))
    fail("tap not on/off", ~rows["tap"].isin(TAPS))
    fail("time must be H:MM at a 15-minute start or -1" if by_time else "time must be '-' (aggregated)",
         ~(rows["time"].isin(WINDOW_LABELS) | other_time) if by_time else rows["time"] != AGGREGATED)
    fail("loc must be a label or -1" if by_loc else "loc must be '-' (aggregated)",
         rows["loc"].isin([AGGREGATED, ""]) if by_loc else rows["loc"] != AGGREGATED)
    fail("a remainder row has time = other and loc = other", other_time & other_loc)
    fail(f"loc = {OTHER} is a remainder row, which only a public-domain release's time-loc.csv has",
         (rows["loc"] == OTHER) & ~other_loc)
    unknown_time, unknown_loc = rows["time"] == UNKNOWN_LABEL, rows["loc"] == UNKNOWN_LABEL
    fail("unknown (-1) appears on a tap-on row", (unknown_time | unknown_loc) & (rows["tap"] == "on"))
    if by_time and by_loc:  # a remainder row of the unknown cell pairs -1 with other
        fail("time and loc must be unknown (-1) together", (unknown_time != unknown_loc) & ~other_time & ~other_loc)
    fail("count is not a positive integer", ~_each_distinct(rows["count"], COUNT_TEXT.fullmatch))
    order, repeated = row_order(rows)
    if repeated:
        raise PublishedFormatError(f"{path}: duplicate bin, a (mode, date, tap, time, loc) appears twice")
    fail("rows are not in canonical order", order != np.arange(len(rows)))


def _each_distinct(column: pd.Series, predicate: Callable[[str], object]) -> np.ndarray:
    """``predicate`` per row of a categorical column, evaluated once per distinct value."""
    verdicts = np.array([bool(predicate(value)) for value in column.cat.categories], dtype=bool)
    return verdicts[column.cat.codes.to_numpy()]


def _is_date(text: str) -> bool:
    if not DATE.fullmatch(text):
        return False
    try:
        datetime.strptime(text, "%Y%m%d")
    except ValueError:
        return False
    return True
