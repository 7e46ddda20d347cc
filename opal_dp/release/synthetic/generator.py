"""Synthetic card-day trips from the DP outputs alone: post-processing, so it costs no privacy.

Inputs: a ``SyntheticRelease`` (the noisy per-archetype counts and marginals, plus the public sigma of
each query) and the public reference network. Nothing else: no private table, no card id, no count that
was not released. Per date:

1. Clean the noisy counts (post-processing): a cell below ``THRESHOLD_SIGMAS`` sigma of its query is set
   to 0 (most empty cells of a public domain then stay empty), negatives likewise.
2. Cards: per calendar week, ``travel_days[days]`` cards travel on exactly the dates of the bit mask ``days``
   (dates outside the release dropped), each under a fresh card id that it keeps for the whole week (62-bit, OS
   CSPRNG, so it cannot be a function of any private id). On each date, each card travelling that day gets one
   card-day whose (archetype, trips, returns) is drawn from ``counts`` of that date.
3. Each trip of a card-day of archetype ``a``: (mode, hour, tap-on district) from ``time_origin[a]``, then
   the tap-off district from ``od[a, mode, tap-on district]`` (falling back to all archetypes, then to
   "no tap-off", where a row of the released table is empty after cleaning). A card-day with ``returns``
   comes back: its last trip takes the first trip's mode, starts where the first ended (where it started if
   the first has no tap-off) and ends in the district where the first began.
4. Rows of the raw input contract: tap-on second uniform in its hour, a card-day's tap-ons strictly
   increasing; tap-on and tap-off stop uniform among the reference stops of that mode in that district;
   duration from the straight-line distance at a public mode speed plus boarding time, within ingest's
   maximum per mode; no tap-off where the district is "none".
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from opal_dp.network import MODES
from opal_dp.permissions import make_dirs, reserve_private
from opal_dp.prep.ingest import MAX_DURATION, RAW_COLUMNS
from opal_dp.prep.raw_columns import SYNTHETIC_ID_LOW
from opal_dp.release.synthetic.archetypes import POSTCODES_PER_DISTRICT
from opal_dp.release.synthetic.queries import COUNT, DAY_QUERIES, WEEK_QUERY, SyntheticRelease, week_of

THRESHOLD_SIGMAS = 2.0
SPEED_KMH = {"bus": 18.0, "ferry": 22.0, "light_rail": 15.0, "train": 45.0}
BOARD_MIN = {"bus": 3.0, "ferry": 6.0, "light_rail": 2.0, "train": 4.0}
PARQUET, CSV = "synthetic_trips.parquet", "synthetic_trips.csv"
_ID_LOW = SYNTHETIC_ID_LOW  # synthetic ids in [2**61, 2**62): a range ingest rejects, so never a real card's
DAY_S = 86_400


def cleaned(frame: pd.DataFrame, sigma: float) -> np.ndarray:
    """A released table's counts with cells below ``THRESHOLD_SIGMAS * sigma`` (and negatives) set to 0."""
    counts = frame[COUNT].to_numpy(np.int64)
    return np.where(counts >= THRESHOLD_SIGMAS * sigma, counts, 0)


class _Stops:
    """Reference stops grouped by (mode, district), for uniform draws; public."""

    def __init__(self, stops: pd.DataFrame, district_names: tuple[str, ...]) -> None:
        first = np.array([int(n.split("-")[0]) // POSTCODES_PER_DISTRICT for n in district_names[:-1]])
        district = np.searchsorted(first, stops["postcode"].to_numpy(np.int64) // POSTCODES_PER_DISTRICT)
        mode = np.array([MODES.index(m) for m in stops["mode"].astype(str)])
        key = mode * len(district_names) + district
        order = np.lexsort((stops["stop_id"].to_numpy(), key))
        self.ids = stops["stop_id"].to_numpy(np.int64)[order]
        self.lat = np.radians(stops["lat"].to_numpy()[order])
        self.lon = np.radians(stops["lon"].to_numpy()[order])
        n_keys = len(MODES) * len(district_names)
        self.start = np.searchsorted(key[order], np.arange(n_keys))
        self.size = np.searchsorted(key[order], np.arange(n_keys), side="right") - self.start
        self.n_districts = len(district_names)

    def draw(self, mode: np.ndarray, district: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Row (into ``ids``) of a uniform stop of each (mode, district)."""
        key = mode * self.n_districts + district
        if (self.size[key] == 0).any():
            raise ValueError("a (mode, district) without a reference stop: the release's domain is not this network's")
        return self.start[key] + (rng.random(len(key)) * self.size[key]).astype(np.int64)


def _card_ids(n: int, rng_bytes) -> np.ndarray:
    """``n`` distinct fresh synthetic card ids (module docstring)."""
    while True:
        ids = (np.frombuffer(rng_bytes(8 * n), dtype=np.uint64) % np.uint64(_ID_LOW) + np.uint64(_ID_LOW)).astype(np.int64)
        if len(np.unique(ids)) == n:  # a repeat among 2**61: redraw them all
            return ids


def week_cards(release: SyntheticRelease, week: str, id_bytes=os.urandom) -> pd.DataFrame:
    """The synthetic cards of one week: ``card_id`` and ``days`` (bit mask, Monday = bit 0), from the cleaned
    ``travel_days`` counts of ``release`` alone. A cell with a date outside the release is 0 in truth (public):
    it is dropped."""
    table = release.travel_days[week]
    released = np.bitwise_or.reduce([1 << date.fromisoformat(d).weekday() for d in release.dates if week_of(d) == week])
    mask = table["days"].to_numpy(np.int64)
    n = np.where(mask & ~released, 0, cleaned(table, release.sigma[WEEK_QUERY]))
    days = np.repeat(mask, n)
    return pd.DataFrame({"card_id": _card_ids(len(days), id_bytes), "days": days})


def generate_day(
    release: SyntheticRelease, day: str, cards: np.ndarray, stops: pd.DataFrame, rng: np.random.Generator
) -> pd.DataFrame:
    """One date's synthetic trips (raw input contract columns) for the synthetic ``cards`` travelling on it (one
    card-day each), from ``release`` and ``stops`` alone."""
    tables = release.noisy[day]
    counts_cells, to_cells, od_cells = (tables[q].drop(columns=COUNT) for q in DAY_QUERIES)
    weights = cleaned(tables["counts"], release.sigma["counts"]).astype(float)
    if weights.sum() == 0:  # nothing released for this date: its card-days are dropped
        cards = cards[:0]
        weights = np.ones(len(weights))
    cell = rng.choice(len(counts_cells), size=len(cards), p=weights / weights.sum())
    card_arch, card_trips, card_returns = (counts_cells[c].to_numpy()[cell] for c in ("archetype", "trips", "returns"))
    ids = np.asarray(cards, dtype=np.int64)
    trip_card = np.repeat(np.arange(len(card_arch)), card_trips)
    arch = card_arch[trip_card]

    to_row = _conditional(to_cells, cleaned(tables["time_origin"], release.sigma["time_origin"]),
                          pd.DataFrame({"archetype": arch}), rng)
    to_row = np.where(to_row < 0, _conditional(to_cells, np.ones(len(to_cells)), pd.DataFrame({"archetype": arch}),
                                               rng), to_row)
    mode, hour, on = (to_cells[c].to_numpy()[to_row] for c in ("mode", "hour", "on_district"))
    od_row = _conditional(od_cells, cleaned(tables["od"], release.sigma["od"]),
                          pd.DataFrame({"archetype": arch, "mode": mode, "on_district": on}), rng)
    none = release.district_names.index("none")
    off = np.where(od_row < 0, none, od_cells["off_district"].to_numpy()[np.maximum(od_row, 0)])

    on_s = hour * 3600 + rng.integers(0, 3600, len(hour))
    order = np.lexsort((on_s, trip_card))
    trip_card, mode, on, off, on_s = trip_card[order], mode[order], on[order], off[order], on_s[order]
    on_s = _strictly_increasing(on_s, trip_card)
    _return_home(trip_card, card_returns, mode, on, off, none)

    net = _Stops(stops, release.district_names)
    on_row = net.draw(mode, on, rng)
    has_off = off != none
    off_row = np.zeros(len(off), dtype=np.int64)
    off_row[has_off] = net.draw(mode[has_off], off[has_off], rng)
    duration_s = _duration_s(net, mode, on_row, off_row, rng)
    start = np.datetime64(day, "s")
    tap_on = start + on_s.astype("timedelta64[s]")
    tap_off = np.where(has_off, tap_on + duration_s.astype("timedelta64[s]"), np.datetime64("NaT"))
    return pd.DataFrame({
        "card_id": ids[trip_card],
        "mode": pd.Categorical.from_codes(mode, categories=list(MODES)),
        "tap_on_time": tap_on.astype("datetime64[ns]"),
        "tap_on_stop": net.ids[on_row].astype(np.int32),
        "tap_off_time": tap_off.astype("datetime64[ns]"),
        "tap_off_stop": pd.arrays.IntegerArray(net.ids[off_row].astype(np.int32), ~has_off),
    })[list(RAW_COLUMNS)]


def _return_home(card: np.ndarray, returns: np.ndarray, mode: np.ndarray, on: np.ndarray, off: np.ndarray,
                 none: int) -> None:
    """In place (rows sorted by card, then time): the last trip of every returning card-day goes back to where its
    first began, on the first trip's mode (module docstring, step 3). The first trip's districts are stops of
    its mode, so the last trip's are too."""
    starts = np.flatnonzero(np.r_[True, card[1:] != card[:-1]]) if len(card) else np.zeros(0, np.int64)
    last = np.r_[starts[1:], len(card)] - 1
    back = (returns[card[starts]] == 1) & (last > starts)
    first, last = starts[back], last[back]
    mode[last] = mode[first]
    on[last] = np.where(off[first] == none, on[first], off[first])
    off[last] = on[first]


def _conditional(cells: pd.DataFrame, weights: np.ndarray, given: pd.DataFrame, rng: np.random.Generator
                 ) -> np.ndarray:
    """For every row of ``given``, a cell (row of ``cells``) drawn with probability proportional to ``weights``
    among the cells that agree with it on ``given``'s columns; where those weights are all 0, among the cells
    that agree on every column but the archetype, weighted by their sum over all archetypes; -1 where that
    is empty too."""
    weights = np.asarray(weights, dtype=float)
    keys = list(given.columns)
    rest = [c for c in cells.columns if c != "archetype"]
    pooled = pd.Series(weights).groupby([cells[c].to_numpy() for c in rest]).transform("sum").to_numpy()
    cells_of = cells.groupby(keys, sort=False).indices
    out = np.full(len(given), -1, dtype=np.int64)
    for key, idx in given.groupby(keys, sort=False).indices.items():
        rows = cells_of.get(key)  # both grouped by the same column list: the same key form
        if rows is None:
            continue
        w = weights[rows] if weights[rows].sum() > 0 else pooled[rows]
        if w.sum() > 0:
            out[idx] = rows[rng.choice(len(rows), size=len(idx), p=w / w.sum())]
    return out


def _strictly_increasing(seconds: np.ndarray, card: np.ndarray) -> np.ndarray:
    """Within each card (rows sorted by card, then time), make tap-on seconds strictly increasing and keep them
    inside the service day. A card has at most m trips, so m - 1 vectorised passes each way settle every chain."""
    seconds = seconds.copy()
    same = np.flatnonzero(card[1:] == card[:-1]) + 1  # rows with an earlier row of the same card
    longest = 1 + (int(np.diff(np.flatnonzero(np.r_[True, card[1:] != card[:-1], True])).max()) if len(card) else 0)
    for _ in range(longest):
        seconds[same] = np.maximum(seconds[same], seconds[same - 1] + 1)
    seconds[-1:] = np.minimum(seconds[-1:], DAY_S - 1)
    for _ in range(longest):
        seconds[same - 1] = np.minimum(seconds[same - 1], seconds[same] - 1)
        seconds = np.minimum(seconds, DAY_S - 1)
    return seconds


def _duration_s(net: _Stops, mode: np.ndarray, on: np.ndarray, off: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Straight-line distance at the mode's public speed, plus boarding time; within ingest's maximum."""
    dlat, dlon = net.lat[off] - net.lat[on], net.lon[off] - net.lon[on]
    a = np.sin(dlat / 2) ** 2 + np.cos(net.lat[on]) * np.cos(net.lat[off]) * np.sin(dlon / 2) ** 2
    km = 2 * 6371.0 * np.arcsin(np.sqrt(np.clip(a, 0, 1)))
    speed = np.array([SPEED_KMH[m] for m in MODES])[mode]
    board = np.array([BOARD_MIN[m] for m in MODES])[mode]
    minutes = board + 60 * km / speed * rng.uniform(1.0, 1.4, len(mode))
    cap = np.array([MAX_DURATION[m].total_seconds() for m in MODES])[mode] - 60
    return np.minimum(np.round(minutes * 60), cap).astype(np.int64)


def generate(release: SyntheticRelease, stops: pd.DataFrame, rng: np.random.Generator | None = None,
             id_bytes=os.urandom) -> Iterator[tuple[str, pd.DataFrame]]:
    """(date, synthetic trips) for every date of ``release``, one date in memory at a time; each week's cards
    (``week_cards``) keep their ids on every date of the week they travel on."""
    rng = rng or np.random.default_rng()
    cards: dict[str, pd.DataFrame] = {}
    for day in release.dates:
        week = week_of(day)
        if week not in cards:
            cards = {week: week_cards(release, week, id_bytes)}  # one week in memory at a time
        bit = 1 << date.fromisoformat(day).weekday()
        travelling = cards[week]["card_id"].to_numpy()[(cards[week]["days"].to_numpy() & bit) != 0]
        yield day, generate_day(release, day, travelling, stops, rng)


def write_synthetic(days: Iterator[tuple[str, pd.DataFrame]], folder: Path) -> dict[str, int]:
    """Write ``synthetic_trips.parquet`` and ``.csv`` (raw input contract, dates in order) under ``folder``;
    returns rows per date."""
    make_dirs(folder)
    rows, parquet, csv = {}, None, None
    try:
        for day, frame in days:
            table = pa.Table.from_pandas(frame, preserve_index=False)
            for name in ("tap_on_time", "tap_off_time"):  # whole seconds: shorter files, same values
                table = table.set_column(table.schema.get_field_index(name), name, table[name].cast(pa.timestamp("s")))
            if parquet is None:
                parquet = pq.ParquetWriter(reserve_private(folder / PARQUET), table.schema,
                                           use_dictionary=["mode", "tap_on_stop", "tap_off_stop"])
                csv = pa_csv.CSVWriter(reserve_private(folder / CSV), table.schema)
            parquet.write_table(table)
            csv.write_table(table)
            rows[day] = len(frame)
    finally:
        for writer in (parquet, csv):
            if writer is not None:
                writer.close()
    return rows
