"""Vectorised synthetic Opal trips, generated and written one service day at a time.

A :class:`Population` (derived from ``seed`` and ``scale`` only) fixes stop popularity
and a pool of commuter cards, each with a home and a work stop. A day (its own
Generator from ``(seed, date)``, so independent of the other days generated) draws:

- commuter pairs: home -> work in the morning, work -> home later (weekends: fewer, later);
- single trips by occasional cards, timed by an hourly profile (AM/PM peaks on weekdays);
- destinations near a mode-typical trip length, durations from distance and mode speed,
  a few percent of missing tap-offs, and the Manly ferry's fixed 30-minute auto tap-off.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from opal_dp.network import MODES, load_stops
from opal_dp.permissions import make_dirs, reserve_private

FORMATS = ("parquet", "csv", "csv.gz")
COLUMNS = ("card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop")
DEFAULT_SEED = 20160725
DAY_S = 86_400
MANLY_TAP_OFF_S = 30 * 60

# Trips per day at scale 1.0, Monday..Sunday (about 28 M a fortnight).
DAY_VOLUME = np.array([2.35e6] * 5 + [1.25e6, 1.05e6])
# Per-mode parameters, in MODES order: bus, ferry, light_rail, train.
MODE_SHARE = np.array([0.47, 0.035, 0.025, 0.47])
_DURATION_MIN = np.array([[5, 60], [10, 45], [3, 30], [5, 90]])
_BOARD_MIN = np.array([3.0, 6.0, 2.0, 4.0])
_SPEED_KMH = np.array([18.0, 22.0, 15.0, 45.0])
_TRIP_KM = np.array([4.0, 5.0, 2.0, 14.0])  # median target trip length
_ZIPF = np.array([0.8, 1.2, 0.8, 1.1])  # exponent of the work/destination popularity
_NO_TAP_OFF = np.array([0.045, 0.02, 0.04, 0.025])
_CANDIDATES = (32, 8, 8, 12)  # destination candidates per trip; the one nearest the target length wins
# Named hubs lead each mode's popularity ranking; the rest rank by distance to Town Hall.
_HUBS = {
    "train": ("Central", "Town Hall", "Wynyard", "Parramatta", "North Sydney", "Circular Quay",
              "Chatswood", "Martin Place", "Redfern", "Strathfield", "Bondi Junction", "Burwood"),
    "ferry": ("Circular Quay", "Manly", "Darling Harbour", "Taronga Zoo", "Balmain East",
              "Neutral Bay", "Parramatta", "Mosman Bay", "Watsons Bay", "Milsons Point"),
    "light_rail": ("Central", "The Star", "Convention", "Paddy's Markets", "Dulwich Hill", "Glebe"),
}
_CBD = (-33.8732, 151.2067)
_FERRY = MODES.index("ferry")
_MANLY_ROUTE_SHARE = 0.35  # of ferry journeys: Circular Quay <-> Manly, the busiest route

# Commuters: share of trips in pairs, daily participation, outbound time and dwell (minutes).
_COMMUTER_SHARE = {False: 0.65, True: 0.30}  # keyed by is_weekend
_PARTICIPATION = 0.85
_OUT_MIN = {False: (7 * 60 + 45, 50.0), True: (11 * 60, 110.0)}
_DWELL_MIN = {False: (9 * 60, 60.0), True: (4 * 60, 90.0)}
_JITTER_MIN = 7.0
_OCCASIONAL_POOL = 2.5e6  # occasional cards at scale 1.0
# Hourly tap-on profile of single trips (relative weights, hours 0..23).
_HOURLY = {
    False: np.array([0.3, 0.15, 0.1, 0.1, 0.3, 1.2, 3.0, 6.5, 8.0, 5.0, 4.2, 4.3,
                     4.6, 4.6, 5.0, 6.5, 7.5, 7.8, 5.5, 3.6, 2.6, 2.0, 1.6, 1.2]),
    True: np.array([0.6, 0.35, 0.2, 0.15, 0.2, 0.5, 1.0, 2.0, 3.5, 5.0, 6.2, 6.8,
                    7.0, 6.9, 6.6, 6.2, 5.8, 5.2, 4.4, 3.4, 2.7, 2.2, 1.8, 1.4]),
}
# Card numbers: a bijection of the card index onto 16-digit Opal-like numbers.
_CARD_BASE, _CARD_SPACE, _CARD_MULT = 3085_2200_0000_0000, 10**10, 6_364_136_223


def _km(lat_a, lon_a, lat_b, lon_b) -> np.ndarray:
    """Approximate distance in km (equirectangular, fine at Sydney's 34 S)."""
    return np.hypot((lat_a - lat_b) * 110.6, (lon_a - lon_b) * 92.4)


@dataclass(frozen=True)
class _ModeStops:
    """One mode's stops (row indices into the network) and popularity CDFs."""

    rows: np.ndarray
    candidates: int
    work_cdf: np.ndarray
    home_cdf: np.ndarray
    any_cdf: np.ndarray


@dataclass(frozen=True)
class _Commuters:
    """A mode's commuter pool: card index, home/work stop rows, standardised timing."""

    card: np.ndarray
    home: np.ndarray
    work: np.ndarray
    out_z: np.ndarray
    dwell_z: np.ndarray


@dataclass(frozen=True)
class _Geo:
    """Stop ids and coordinates by network row."""

    stop_id: np.ndarray
    lat: np.ndarray
    lon: np.ndarray

    def km(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Distance between stop rows ``a`` and ``b``."""
        return _km(self.lat[a], self.lon[a], self.lat[b], self.lon[b])


@dataclass(frozen=True)
class Population:
    """Everything shared by all days of one ``(seed, scale)``: stops, popularity, cards."""

    seed: int
    scale: float
    geo: _Geo
    modes: tuple[_ModeStops, ...]
    commuters: tuple[_Commuters, ...]
    manly: tuple[int, int]  # network rows of the Circular Quay and Manly wharves
    occasional: tuple[int, int]  # (first card index, pool size)


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return cdf


def _draw(rng: np.random.Generator, ms: _ModeStops, cdf: np.ndarray, size) -> np.ndarray:
    """Stop rows of ``ms`` drawn with the probabilities encoded by ``cdf``."""
    return ms.rows[np.searchsorted(cdf, rng.random(size), side="right")]


def card_numbers(index: np.ndarray, seed: int) -> np.ndarray:
    """Map card indices (< 1e10) to distinct 16-digit card numbers, scrambled by ``seed``."""
    offset = seed % _CARD_SPACE
    return _CARD_BASE + (index.astype(np.int64) * _CARD_MULT + offset) % _CARD_SPACE


def _mode_stops(stops: pd.DataFrame, mode: int, rng: np.random.Generator) -> _ModeStops:
    """Popularity: Zipf over hubs first, then distance to the CBD (noisy); homes: flatter, random."""
    rows = np.flatnonzero(stops["mode"].to_numpy() == MODES[mode])
    sub = stops.iloc[rows]
    cbd_km = _km(sub["lat"].to_numpy(), sub["lon"].to_numpy(), *_CBD)
    hubs = _HUBS.get(MODES[mode], ())
    hub_rank = sub["name"].map({name: i for i, name in enumerate(hubs)}).to_numpy(dtype=float, na_value=np.nan)
    key = np.where(np.isnan(hub_rank), len(hubs) + (cbd_km + 0.5) * rng.lognormal(0.0, 0.6, len(rows)), hub_rank)
    rank = np.empty(len(rows))
    rank[np.argsort(key)] = np.arange(1, len(rows) + 1)
    work = rank ** -_ZIPF[mode]
    home = rng.lognormal(0.0, 0.8, len(rows))
    return _ModeStops(rows, _CANDIDATES[mode], _cdf(work), _cdf(home), _cdf(work / work.sum() + home / home.sum()))


def _pick_near(geo: _Geo, rng, ms: _ModeStops, cdf, origin: np.ndarray, target_km: np.ndarray) -> np.ndarray:
    """Per origin, the candidate stop (≠ origin) whose distance is nearest ``target_km``."""
    cand = _draw(rng, ms, cdf, (len(origin), ms.candidates))
    score = np.abs(geo.km(origin[:, None], cand) - target_km[:, None])
    score[cand == origin[:, None]] = np.inf
    best = cand[np.arange(len(origin)), score.argmin(axis=1)]
    while (same := best == origin).any():
        best[same] = _draw(rng, ms, cdf, int(same.sum()))
    return best


def _manly_route(rng: np.random.Generator, cq_manly: tuple[int, int], origin: np.ndarray, dest: np.ndarray) -> None:
    """Put a share of ferry journeys (either direction) on the Circular Quay <-> Manly route, in place."""
    on = np.flatnonzero(rng.random(len(origin)) < _MANLY_ROUTE_SHARE)
    inbound = rng.random(len(on)) < 0.5
    origin[on] = np.where(inbound, cq_manly[1], cq_manly[0])
    dest[on] = np.where(inbound, cq_manly[0], cq_manly[1])


def build_population(seed: int, scale: float, stops: pd.DataFrame | None = None) -> Population:
    """Stop popularity and the commuter pool for ``(seed, scale)``; shared by every day."""
    stops = load_stops() if stops is None else stops
    rng = np.random.default_rng([seed, 0])
    geo = _Geo(stops["stop_id"].to_numpy(np.int32), stops["lat"].to_numpy(), stops["lon"].to_numpy())
    modes = tuple(_mode_stops(stops, m, rng) for m in range(len(MODES)))
    ferry = stops["mode"].to_numpy() == "ferry"
    cq, manly = (int(np.flatnonzero(ferry & (stops["name"].to_numpy() == n))[0]) for n in ("Circular Quay", "Manly"))
    pools = np.ceil(scale * DAY_VOLUME[0] * MODE_SHARE * _COMMUTER_SHARE[False] / 2 / _PARTICIPATION).astype(int)
    first = np.concatenate([[0], np.cumsum(pools)])
    commuters = []
    for i, (ms, n) in enumerate(zip(modes, pools)):
        work = _draw(rng, ms, ms.work_cdf, n)
        home = _pick_near(geo, rng, ms, ms.home_cdf, work, _TRIP_KM[i] * rng.lognormal(0.0, 0.6, n))
        if i == _FERRY:
            _manly_route(rng, (cq, manly), home, work)
        z = np.clip(rng.standard_normal((2, n)), -2.5, 2.5)
        commuters.append(_Commuters(np.arange(first[i], first[i + 1]), home, work, z[0], z[1]))
    occasional = (int(first[-1]), max(1, int(scale * _OCCASIONAL_POOL)))
    return Population(seed, scale, geo, modes, tuple(commuters), (cq, manly), occasional)


def _duration_s(geo: _Geo, rng, mode: int, origin: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """Ride time from distance and mode speed; out-of-range ones are redrawn uniformly in range."""
    minutes = _BOARD_MIN[mode] + geo.km(origin, dest) / _SPEED_KMH[mode] * 60 * rng.lognormal(0.0, 0.2, len(origin))
    lo, hi = _DURATION_MIN[mode]
    minutes = np.where((minutes < lo) | (minutes > hi), rng.uniform(lo, hi, len(minutes)), minutes)
    return np.round(minutes * 60).astype(np.int64)


def _mode_trips(pop: Population, rng: np.random.Generator, mode: int, n: int, weekend: bool):
    """``n`` trips of one mode: (card index, origin, dest, tap-on second, duration seconds)."""
    ms, com = pop.modes[mode], pop.commuters[mode]
    pairs = min(int(n * _COMMUTER_SHARE[weekend] / 2), len(com.card))
    who = rng.choice(len(com.card), pairs, replace=False)
    out_mean, out_sd = _OUT_MIN[weekend]
    dwell_mean, dwell_sd = _DWELL_MIN[weekend]
    out_on = (out_mean + out_sd * com.out_z[who] + rng.normal(0, _JITTER_MIN, pairs)) * 60
    out_dur = _duration_s(pop.geo, rng, mode, com.home[who], com.work[who])
    out_off = out_on + out_dur
    dwell = np.maximum(15.0, dwell_mean + dwell_sd * com.dwell_z[who] + rng.normal(0, _JITTER_MIN, pairs))
    back_on = out_off + dwell * 60
    late = back_on >= DAY_S
    back_on[late] = out_off[late] + rng.random(late.sum()) * (DAY_S - 1 - out_off[late])
    back_dur = _duration_s(pop.geo, rng, mode, com.work[who], com.home[who])

    singles = n - 2 * pairs
    hourly = _HOURLY[weekend]
    single_on = (rng.choice(24, singles, p=hourly / hourly.sum()) + rng.random(singles)) * 3600
    origin = _draw(rng, ms, ms.any_cdf, singles)
    dest = _pick_near(pop.geo, rng, ms, ms.work_cdf, origin, _TRIP_KM[mode] * rng.lognormal(0.0, 0.7, singles))
    if mode == _FERRY:
        _manly_route(rng, pop.manly, origin, dest)
    occ_first, occ_pool = pop.occasional
    return (
        np.concatenate([com.card[who], com.card[who], occ_first + rng.integers(0, occ_pool, singles)]),
        np.concatenate([com.home[who], com.work[who], origin]),
        np.concatenate([com.work[who], com.home[who], dest]),
        np.concatenate([out_on, back_on, single_on]).astype(np.int64),
        np.concatenate([out_dur, back_dur, _duration_s(pop.geo, rng, mode, origin, dest)]),
    )


def generate_day(pop: Population, day: date) -> pd.DataFrame:
    """All trips tapped on during service day ``day``, sorted by tap-on time (raw file schema)."""
    rng = np.random.default_rng([pop.seed, day.toordinal()])
    weekend = day.weekday() >= 5
    counts = rng.poisson(pop.scale * DAY_VOLUME[day.weekday()] * MODE_SHARE)
    parts = [_mode_trips(pop, rng, m, int(n), weekend) for m, n in enumerate(counts)]
    card, origin, dest, on_s, dur_s = (np.concatenate(cols) for cols in zip(*parts))
    mode = np.repeat(np.arange(len(MODES), dtype=np.int8), [len(p[0]) for p in parts])

    manly = (np.minimum(origin, dest) == min(pop.manly)) & (np.maximum(origin, dest) == max(pop.manly))
    dur_s[manly] = MANLY_TAP_OFF_S
    missing = (rng.random(len(mode)) < _NO_TAP_OFF[mode]) & ~manly

    order = np.argsort(on_s, kind="stable")
    start = np.datetime64(day, "s")
    tap_on = start + on_s[order].astype("timedelta64[s]")
    tap_off = (tap_on + dur_s[order].astype("timedelta64[s]")).astype("datetime64[us]")
    tap_off[missing[order]] = np.datetime64("NaT")
    return pd.DataFrame(
        {
            "card_id": card_numbers(card[order], pop.seed),
            "mode": np.array(MODES, dtype=object)[mode[order]],
            "tap_on_time": tap_on.astype("datetime64[us]"),
            "tap_on_stop": pop.geo.stop_id[origin[order]],
            "tap_off_time": tap_off,
            "tap_off_stop": pd.arrays.IntegerArray(pop.geo.stop_id[dest[order]], missing[order]),
        }
    )


def day_path(out_dir: Path, day: date, fmt: str = "parquet") -> Path:
    """``out_dir / trips_YYYY-MM-DD.<fmt>``."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    return out_dir / f"trips_{day.isoformat()}.{fmt}"


def write_day(trips: pd.DataFrame, path: Path) -> Path:
    """Write one day's trips atomically; the format follows the suffix (parquet, csv, csv.gz)."""
    make_dirs(path.parent)
    tmp = reserve_private(path.with_name(f".{path.name}.tmp"))
    if path.name.endswith(".parquet"):
        trips.to_parquet(tmp, index=False, compression="zstd")
    else:
        table = pa.Table.from_pandas(trips, preserve_index=False)
        for col in ("tap_on_time", "tap_off_time"):
            table = table.set_column(table.schema.get_field_index(col), col, table[col].cast(pa.timestamp("s")))
        compression = "gzip" if path.name.endswith(".gz") else None
        with pa.CompressedOutputStream(tmp, compression) if compression else pa.OSFile(str(tmp), "wb") as sink:
            sink.write((",".join(COLUMNS) + "\n").encode())
            pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
    os.replace(tmp, path)
    return path


def generate_days(
    dates: Iterable[date], out_dir: Path, *, seed: int, scale: float, fmt: str = "parquet",
    stops: pd.DataFrame | None = None,
) -> Iterator[tuple[Path, int]]:
    """Generate and write each day in turn (bounded memory); yield ``(path, rows)`` per day."""
    pop = build_population(seed, scale, stops)
    for day in dates:
        trips = generate_day(pop, day)
        yield write_day(trips, day_path(out_dir, day, fmt)), len(trips)
