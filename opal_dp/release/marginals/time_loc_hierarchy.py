"""The time x location release of a period as one hierarchy per (date, mode, tap) with exact sums
(``core.hierarchy``), by default: the mode's day, station-day, station-hour, 15-minute window x station.

Domain, from the public stop list and the day's windows only (``TapDomain``): per mode, the stations are the mode's
location labels (postcode for bus, stop name otherwise, as in the 2016 files), a station's district its postcode's
first three digits and ``x`` (``prep.sequences.district_of``, as in the OD hierarchy), the hours 0..23 and the
15-minute windows 0..95 of the service day. A level is one of the ``RESOLUTIONS`` (``TapDomain.key``), each
level's cells nested in the level above's; tap-off adds one unknown cell at every level below the root (no
tap-off: window -1, location ``-1``). No cell comes from the data: a trip outside the domain is an error.

Sensitivity. The input is the period's bounded trips (``prep.bounding``): one card holds at most ``a =
max_trips_per_card_day`` trips on each of at most ``D`` days, and of one card-day at most ``L = per_bin`` in one bin
of each of the six 2016 marginals, the mode part of every bin: at most ``L`` in a (mode, tap, window), in a (mode,
tap, location) and in a (mode, tap, window, location). So one card-day's trips put at most ``a`` items into the
tap-on trees of its date (over every mode) and ``a`` into the tap-off trees, and into one cell at most ``a`` of a
mode-day or district-day, ``min(a, 4 L)`` of a district-hour (an hour is four windows), ``min(a, L)`` of a
station-day or station-hour, ``L`` of a (window, station) (``cell_cap``). The trees of one (date, tap) over every
mode are one group of the hierarchy's sensitivity (``core.hierarchy``, "Sensitivity"): ``2 D`` groups, every level
of every tree of the period measured once, one charge. The unknown tap-off cell is a window and a location bin of
its own, so at most ``L`` per card-day.

Privacy: the measurement of ``core.hierarchy`` (discrete Gaussian on every cell of every level, exact, OS CSPRNG,
``rho``-zCDP, delta 0); the fit and the listing read only the noisy counts, public parameters and, when given, the
day's published totals (``totals_pins``: another product's charged release). Listing: a cell
of a level below the root has a row of its own when its noisy measurement reaches the level's public threshold
(``listing_taus``: at most ``FALSE_CELLS`` expected empty cells listed over the level's cells of the period); the
others of one parent are one remainder row, so each level adds up exactly to the one above (``TreeRelease.rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import (Fitted, HierarchyBudget, Measurement, Pins, Tree, fit, listing_threshold,
                                    measure)
from opal_dp.core.units import ContributionBounds
from opal_dp.network import MODES, per_stop_list
from opal_dp.prep.binning import stop_labels
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOW_MINUTES, WINDOWS_PER_DAY
from opal_dp.prep.sequences import district_of
from opal_dp.release.marginals.tables import TAPS

WINDOWS_PER_HOUR = 60 // WINDOW_MINUTES
HOURS = WINDOWS_PER_DAY // WINDOWS_PER_HOUR
RESOLUTIONS = ("mode_day", "district_day", "district_hour", "station_day", "station_hour", "window_station")
"""Every resolution of a service day's time x location cells of one (mode, tap): a level of a hierarchy, or a
planner's query class (``benchmarks.workload``). A station is a location label (postcode for bus)."""
LEVELS = ("mode_day", "station_day", "station_hour", "window_station")
"""The levels, root first (``benchmarks.workload`` argues them from a planner's queries)."""
SHARES = (0.02, 0.25, 0.28, 0.45)
"""rho shares of the levels (``benchmarks.workload``)."""
FALSE_CELLS = 0.001
"""Expected empty cells listed per level and period, over every date, mode and tap (``benchmarks.workload``: a
threshold near 6 sigma lists the 15-minute cells at the 2016 threshold's error, with more of them)."""


def cell_cap(resolution: str, max_trips_per_card_day: int, per_bin: int) -> int:
    """The most trips of one card-day in one cell of ``resolution`` (module docstring, "Sensitivity")."""
    a, by_location = max_trips_per_card_day, min(max_trips_per_card_day, per_bin)
    return {"mode_day": a, "district_day": a, "district_hour": min(a, WINDOWS_PER_HOUR * per_bin),
            "station_day": by_location, "station_hour": by_location, "window_station": per_bin}[resolution]


@dataclass(frozen=True, eq=False)
class TapDomain:
    """One (mode, tap)'s public cells: ``locations`` and their ``districts``; its finest cells ``(window,
    location)``, cell ``window * len(locations) + location``, then the unknown cell for tap-off (module
    docstring)."""

    mode: str
    tap: str
    locations: tuple[str, ...]
    districts: tuple[str, ...]
    location_district: np.ndarray  # per location: index into districts
    _trees: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def unknown(self) -> int:
        return int(self.tap == "off")

    def key(self, resolution: str) -> tuple[np.ndarray, int]:
        """Each known finest cell's cell at ``resolution``, and how many cells it has (the unknown cell not
        included)."""
        n_loc, n_dist = len(self.locations), len(self.districts)
        window = np.repeat(np.arange(WINDOWS_PER_DAY), n_loc)
        loc = np.tile(np.arange(n_loc), WINDOWS_PER_DAY)
        hour, district = window // WINDOWS_PER_HOUR, self.location_district[loc]
        return {"mode_day": (np.zeros_like(loc), 1), "district_day": (district, n_dist),
                "district_hour": (hour * n_dist + district, HOURS * n_dist), "station_day": (loc, n_loc),
                "station_hour": (hour * n_loc + loc, HOURS * n_loc),
                "window_station": (window * n_loc + loc, WINDOWS_PER_DAY * n_loc)}[resolution]

    def tree(self, levels: tuple[str, ...] = LEVELS) -> Tree:
        """The tree of ``levels`` (root ``mode_day``, finest ``window_station``), each level's cells nested in the
        level above's; the unknown cell of tap-off last at every level below the root, child of the one above."""
        if levels not in self._trees:
            self._trees[levels] = self._build(levels)
        return self._trees[levels]

    def _build(self, levels: tuple[str, ...]) -> Tree:
        if levels[0] != "mode_day" or levels[-1] != "window_station" or len(set(levels)) != len(levels):
            raise ValueError(f"levels must run from mode_day to window_station, each once, got {levels}")
        parents = []
        for above, below in zip(levels, levels[1:]):
            (up, up_size), (down, size) = self.key(above), self.key(below)
            parent = np.zeros(size, dtype=np.int64)
            parent[down] = up
            if (parent[down] != up).any():
                raise ValueError(f"{below} cells are not nested in {above} cells")
            tail = [up_size - (above == "mode_day")] * self.unknown  # the unknown cell's parent
            parents.append(np.r_[parent, tail].astype(np.int64))
        return Tree(tuple(parents))

    @property
    def cells(self) -> int:
        return WINDOWS_PER_DAY * len(self.locations) + self.unknown

    def finest_counts(self, windows: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """The finest counts of trips given by their window and location label (the unknown cell: window -1 with
        location ``-1``), each counting 1 or its ``weights``; refuses a trip outside the domain, naming the field,
        never the value."""
        windows, labels = np.asarray(windows, dtype=np.int64), np.asarray(labels, dtype=object)
        loc = pd.Index(self.locations).get_indexer(labels)
        unknown = (windows == UNKNOWN) & (labels == UNKNOWN_LABEL)
        if unknown.any() and not self.unknown:
            raise ValueError(f"a {self.mode} tap-{self.tap} trip has no window: only tap-off may be unknown")
        if (~unknown & ((loc < 0) | (windows < 0) | (windows >= WINDOWS_PER_DAY))).any():
            raise ValueError(f"a {self.mode} tap-{self.tap} trip has a location or window outside the public domain")
        n_loc = len(self.locations)
        cell = np.where(unknown, WINDOWS_PER_DAY * n_loc, windows * n_loc + loc)
        return np.bincount(cell, weights=weights, minlength=self.cells).astype(np.int64)

@per_stop_list
def time_loc_domains(stops: pd.DataFrame) -> dict[tuple[str, str], TapDomain]:
    """Every (mode, tap) domain of the stop list (module docstring), built once per stop list in a process."""
    labels = pd.DataFrame({"mode": stops["mode"].astype(str).to_numpy(), "loc": stop_labels(stops).to_numpy(),
                           "district": [district_of(p) for p in stops["postcode"]]})
    out = {}
    for mode in MODES:
        mine = labels[labels["mode"] == mode].drop_duplicates("loc").sort_values("loc")
        if mine.empty:
            continue
        districts = tuple(sorted(set(mine["district"])))
        index = pd.Index(districts).get_indexer(mine["district"])
        for tap in TAPS:
            out[mode, tap] = TapDomain(mode, tap, tuple(mine["loc"]), districts, index.astype(np.int64))
    return out


def period_budget(rho: float, bounds: ContributionBounds, days: int, levels: tuple[str, ...] = LEVELS,
                  shares: tuple[float, ...] = SHARES, false_cells: float = FALSE_CELLS, taps: int = len(TAPS),
                  units_changed: int = 1) -> HierarchyBudget:
    """The hierarchy's public parameters for a period whose cards count on at most ``days`` days (module docstring,
    "Sensitivity"): ``taps * days`` groups of ``a`` items (one tap's trees alone: ``taps = 1``), each level's cell
    cap (``cell_cap``); replace-one (``units_changed = 2``) doubles them (the removed and the added card's changes
    are both >= 0, so their ``sum d²`` add up at most)."""
    a, per_bin = bounds.max_trips_per_card_day, bounds.per_bin
    caps = tuple(cell_cap(level, a, per_bin) for level in levels)
    return HierarchyBudget(rho, tuple(shares), a, caps[-1], false_cells, coarse_caps=caps[:-1],
                           groups=taps * days * units_changed)


def listing_taus(budget: HierarchyBudget, cells: Sequence[int]) -> tuple[int, ...]:
    """The public threshold of each level below the root: at most ``budget.false_cells`` expected empty cells listed
    over the period's ``cells[l]`` cells of level ``l + 1`` (every date, mode and tap)."""
    return tuple(listing_threshold(sigma, n, budget.false_cells) for sigma, n in zip(budget.sigmas[1:], cells))


@dataclass(frozen=True)
class TreeRelease:
    """One (date, mode, tap) tree: its domain, the noisy measurement, the fit and the levels' listing thresholds
    (below the root)."""

    domain: TapDomain
    levels: tuple[str, ...]
    measured: Measurement
    fitted: Fitted
    taus: tuple[int, ...]

    def rows(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Level ``level``'s (>= 1) published rows: each cell's count where it is listed (its noisy measurement
        reaches the level's threshold and its fitted count is positive; 0 elsewhere), and per cell of the level
        above the sum of its unlisted cells (its remainder row). Listed cells plus remainders add up exactly to the
        level above."""
        tree = self.domain.tree(self.levels)
        if level == len(self.levels) - 1:
            return self.fitted.listed, self.fitted.remainder
        counts = self.fitted.counts[level]
        listed = np.where(self.measured.levels[level] >= self.taus[level - 1], counts, 0)
        return listed, np.bincount(tree.parents[level - 1], weights=counts - listed,
                                   minlength=tree.sizes[level - 1]).astype(np.int64)


def totals_pins(dom: TapDomain, totals: tuple[int, int], levels: tuple[str, ...] = LEVELS) -> Pins:
    """The fit's pins of one (date, mode, tap) tree from the day's published (tap-on, tap-off) totals
    (``totals.csv``, another product's release: post-processing). The root holds every trip of the mode-day: the
    tap-on total; under tap-off the larger of the two, and its unknown cell the difference, so that the recorded
    tap-offs add up to the tap-off total exactly (a noisy tap-off total can exceed the tap-on one)."""
    on, off = totals
    if on < 0 or off < 0:
        raise ValueError("published totals are counts >= 0")
    if not dom.unknown:
        return {0: (np.array([0]), np.array([on]))}
    top = max(on, off)
    unknown = dom.tree(levels).sizes[1] - 1  # last at every level below the root
    return {0: (np.array([0]), np.array([top])), 1: (np.array([unknown]), np.array([top - off]))}


def release_period(dates: Sequence[str], finest: Mapping[tuple[str, str, str], np.ndarray],
                   domains: Mapping[tuple[str, str], TapDomain], budget: HierarchyBudget,
                   levels: tuple[str, ...] = LEVELS, noise: DiscreteGaussian | None = None,
                   totals: Mapping[tuple[str, str], tuple[int, int]] | None = None
                   ) -> dict[tuple[str, str, str], TreeRelease]:
    """Every tree of a period measured at ``budget`` and fitted: one per public (date, mode, tap), the period's
    ``dates`` by every domain, so that which trees are measured, and the thresholds, never depend on the data.
    ``finest``: the true finest counts of the trees with trips (a tree without is measured as empty); a key outside
    the period is refused. ``totals``: the published (tap-on, tap-off) totals of every (date, mode), to which the
    trees are pinned (``totals_pins``). Trees are measured in key order."""
    keys = sorted((day, mode, tap) for day in dates for mode, tap in domains)
    if not set(finest) <= set(keys):
        raise ValueError("finest holds a (date, mode, tap) outside the period's dates and public domains")
    noise = DiscreteGaussian() if noise is None else noise
    sizes = [domains[mode, tap].tree(levels).sizes[1:] for _, mode, tap in keys]
    taus = listing_taus(budget, [sum(level) for level in zip(*sizes)])
    return {(day, mode, tap): release_tree(domains[mode, tap], finest.get((day, mode, tap)), budget, taus, levels,
                                           noise, None if totals is None else totals[day, mode])
            for day, mode, tap in keys}


def release_tree(dom: TapDomain, finest: np.ndarray | None, budget: HierarchyBudget, taus: tuple[int, ...],
                 levels: tuple[str, ...] = LEVELS, noise: DiscreteGaussian | None = None,
                 totals: tuple[int, int] | None = None) -> TreeRelease:
    """One tree measured at ``budget`` (``finest``: its true finest counts, None for a tree without trips) and
    fitted, its cells listed at the public ``taus``; pinned to the day's published ``totals`` when given."""
    tree = dom.tree(levels)
    truth = np.zeros(dom.cells, dtype=np.int64) if finest is None else finest
    measured = measure(tree, truth, budget, DiscreteGaussian() if noise is None else noise)
    pins = None if totals is None else totals_pins(dom, totals, levels)
    return TreeRelease(dom, levels, measured, fit(tree, measured, budget.sigmas, taus[-1], pins), taus)
