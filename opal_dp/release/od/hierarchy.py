"""The hierarchical OD release per (date, mode): the mode's total, district x district, location x location, with
exact totals (``core.hierarchy``), charged to the ledger under the protocol of ``release.charged``.

Domain, from the public stop list only (``OdDomain``): per mode, the origins are the mode's location labels
(postcode for bus, stop name otherwise, as in the marginals and the prefix tree's alphabet), the destinations the
same plus ``-1`` (no tap-off); a location's district is its postcode's first three digits and ``x`` (``prep.sequences.
district_of``; ``-1`` its own district). Level 1 is every (origin district, destination district) pair of the
mode, level 2 every (origin, destination) pair. No cell comes from the data: a trip outside the domain is an error.

Input: the date's stored card-day sequences (``prep.sequences``: every trip of one card-day, in tap-on order,
truncated to the public ``od_height`` trips), the prefix tree's input, bounded once more: a card-day keeps at most
``max_per_cell`` (``od_hierarchy_max_per_pair``) trips of one (mode, origin, destination), the first in tap-on order
(a rule on the card-day's own trips, so the bounds below hold for any neighbour). So one card-day holds at most
``m = od_height`` trips over all modes and at most ``max_per_cell`` in a location pair: the sensitivities of
``core.hierarchy.level_l2_squared``.

Totals: the same charge measures the date's trips per (mode, tap) (``core.totals``: every card-day counts at most
``TOTALS_PER_MODE`` trips of a mode, each cell measured, never suppressed), stored with the levels as level 3 (cell 0
tap-on, 1 tap-off) and published as ``totals.csv``: daily totals without the thresholds' bias, the page's trend.

Ledger: one request per (date, mode), all of a date's modes under one charge (parts of one histogram per level over
(mode, cell): ``core.hierarchy``; the totals likewise), cost ``HierarchyPlan.cost()`` (the sum of the three levels'
rho and the totals', delta 0).
Scope as the prefix tree's (``release.od.engine``): the date under ``trip`` and ``card_day``, the period (one
charge per date) under ``card_period``; every card-level charge is also on the person account. The stored draw
is the measurement (every cell of every level, noisy); the published rows are its fit (post-processing), so a
stored draw gives the same rows whenever it is read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core import PrivacyLedger, PrivacyUnit
from opal_dp.core.bits import BitSource
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import (Fitted, HierarchyBudget, Measurement, Tree, first_per_row, fit, listing_threshold,
                                     measure)
from opal_dp.core.input_version import stand_ins
from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.totals import TOTALS_PER_MODE, TotalsBudget, card_day_totals, date_cost, measure_totals
from opal_dp.core.ledger_records import Charge, Draw, Request
from opal_dp.network import MODES, per_stop_list
from opal_dp.prep.binning import stop_labels
from opal_dp.prep.schemas import UNKNOWN_LABEL
from opal_dp.prep.sequences import PAD, TripAlphabet, district_of, from_frame, trip_alphabet
from opal_dp.private_files import read_parquet, write_parquet_exclusive
from opal_dp.release.charged import Pending, release_charged
from opal_dp.release.periods import Periods
from opal_dp.release.od.placement import OdPlacement

OD_HIERARCHY = "od_hierarchy"
ALL = "all"
OTHER = "other"
LEVEL_NAMES = ("mode", "district", "location")
TOTALS_LEVEL = 3  # the stored measurement's level of the totals: cell 0 tap-on, 1 tap-off
SHARES = (0.1, 0.3, 0.6)
"""rho shares of the mode totals, the district pairs and the location pairs: the location pairs are what an OD user
reads cell by cell and hold the most cells; a mode total is one number (at the default rho its sigma, 12.6, is
under 1% of any mode's daily total)."""
FALSE_CELLS = 1.0
"""Expected empty location pairs listed per date, over every mode (the listing threshold follows)."""
ROW_COLUMNS = ["date", "mode", "level", "origin_district", "destination_district", "origin", "destination", "count"]


@dataclass(frozen=True)
class ModeDomain:
    """One mode's public cells: ``origins`` x ``destinations`` (finest, cell ``o * len(destinations) + d``), their
    districts, and the district pairs (level 1, cell ``a * len(destination_districts) + b``)."""

    mode: str
    origins: tuple[str, ...]
    destinations: tuple[str, ...]
    origin_district: np.ndarray  # per origin: index into origin_districts
    destination_district: np.ndarray  # per destination: index into destination_districts
    origin_districts: tuple[str, ...]
    destination_districts: tuple[str, ...]

    @cached_property
    def tree(self) -> Tree:
        pairs = len(self.origin_districts) * len(self.destination_districts)
        parent = (self.origin_district[:, None] * len(self.destination_districts)
                  + self.destination_district[None, :]).ravel()
        return Tree((np.zeros(pairs, dtype=np.int64), parent))

    @property
    def cells(self) -> int:
        return len(self.origins) * len(self.destinations)


def _mode_domain(mode: str, labels: pd.DataFrame) -> ModeDomain:
    mine = labels[labels["mode"] == mode].drop_duplicates("loc").sort_values("loc")
    origins = tuple(mine["loc"])
    destinations = (*origins, UNKNOWN_LABEL) if UNKNOWN_LABEL not in origins else origins
    districts = dict(zip(mine["loc"], mine["district"]))
    districts[UNKNOWN_LABEL] = UNKNOWN_LABEL
    o_names = tuple(sorted({districts[o] for o in origins}))
    d_names = tuple(sorted({districts[d] for d in destinations}))
    return ModeDomain(mode, origins, destinations,
                      np.array([o_names.index(districts[o]) for o in origins], dtype=np.int64),
                      np.array([d_names.index(districts[d]) for d in destinations], dtype=np.int64), o_names, d_names)


@dataclass(frozen=True)
class OdDomain:
    """Every mode's ``ModeDomain``, and where each symbol of the prefix tree's alphabet lies in them."""

    modes: Mapping[str, ModeDomain]
    symbol_mode: np.ndarray  # symbol id -> index into MODES
    symbol_cell: np.ndarray  # symbol id -> finest cell of its mode
    symbol_off: np.ndarray  # symbol id -> whether its tap-off is recorded (destination not ``-1``)

    @classmethod
    def from_stops(cls, stops: pd.DataFrame, alphabet: TripAlphabet) -> OdDomain:
        labels = pd.DataFrame({"mode": stops["mode"].astype(str).to_numpy(), "loc": stop_labels(stops).to_numpy(),
                               "district": [district_of(p) for p in stops["postcode"]]})
        modes = {m: _mode_domain(m, labels) for m in MODES if (labels["mode"] == m).any()}
        symbols = alphabet.symbols
        mode_index = np.array([MODES.index(m) for m in symbols["mode"]], dtype=np.int64)
        cell = np.full(len(symbols), -1, dtype=np.int64)
        for m, dom in modes.items():
            rows = np.flatnonzero(symbols["mode"].to_numpy() == m)
            o = pd.Index(dom.origins).get_indexer(symbols["origin"].to_numpy()[rows])
            d = pd.Index(dom.destinations).get_indexer(symbols["destination"].to_numpy()[rows])
            if (o < 0).any() or (d < 0).any():
                raise ValueError(f"the OD alphabet has a {m} trip outside the stop list's locations")
            cell[rows] = o * len(dom.destinations) + d
        return cls(modes, mode_index, cell, (symbols["destination"] != UNKNOWN_LABEL).to_numpy())

    @property
    def cells(self) -> int:
        """Finest cells over every mode: the domain the listing threshold guards."""
        return sum(d.cells for d in self.modes.values())

    def digest(self) -> str:
        text = json.dumps({m: [d.origins, d.destinations, d.origin_district.tolist(), d.destination_district.tolist()]
                           for m, d in self.modes.items()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def _checked(self, sequences: np.ndarray) -> np.ndarray:
        """Card-days x slots of symbol ids of the public OD alphabet or ``PAD``, else refused."""
        sequences = np.asarray(sequences)
        if sequences.size and (sequences.min() < PAD or sequences.max() >= len(self.symbol_cell)):
            raise ValueError("a sequence holds a symbol outside the public OD alphabet")
        return sequences

    def counts(self, sequences: np.ndarray, max_per_cell: int) -> dict[str, np.ndarray]:
        """Per mode, the finest cells' counts of the sequences' trips, each card-day keeping at most
        ``max_per_cell`` trips of one symbol (the first, in tap-on order)."""
        sequences = self._checked(sequences)
        kept = sequences[first_per_row(sequences, max_per_cell, PAD)]
        per_symbol = np.bincount(kept, minlength=len(self.symbol_cell))
        out = {}
        for m, dom in self.modes.items():
            mine = self.symbol_mode == MODES.index(m)
            out[m] = np.bincount(self.symbol_cell[mine], weights=per_symbol[mine], minlength=dom.cells).astype(np.int64)
        return out


    def totals(self, sequences: np.ndarray, max_per_mode: int) -> dict[str, np.ndarray]:
        """Per mode, its ``[tap-on, tap-off]`` trips of the sequences, each card-day counting at most
        ``max_per_mode`` trips of one mode (the first, in tap-on order; ``core.totals``)."""
        sequences = self._checked(sequences)  # PAD (-1) reads the last entry of these look-ups: no mode, no tap-off
        modes = np.append(self.symbol_mode, -1).astype(np.int8)[sequences]
        off = np.append(self.symbol_off, False)[sequences]
        counts = card_day_totals(modes, off, max_per_mode, len(MODES))
        return {m: counts[MODES.index(m)] for m in self.modes}


@per_stop_list
def od_domain(stops: pd.DataFrame) -> OdDomain:
    """``OdDomain.from_stops`` with the stop list's alphabet, built once per stop list in a process (shared:
    read-only)."""
    return OdDomain.from_stops(stops, trip_alphabet(stops))


def tau_for(domain: OdDomain, budget: HierarchyBudget) -> int:
    """The public listing threshold: at most ``budget.false_cells`` expected false listings over every mode's
    finest cells of a date (``core.hierarchy.listing_threshold``)."""
    return listing_threshold(budget.sigmas[2], domain.cells, budget.false_cells)


def measurement_frame(measured: Measurement, totals: np.ndarray) -> pd.DataFrame:
    """Storage form of a measurement and the totals (level ``TOTALS_LEVEL``): ``level, cell, noisy``."""
    values = [*measured.levels, np.asarray(totals, dtype=np.int64)]
    return pd.DataFrame({"level": np.concatenate([np.full(len(v), i, dtype=np.int8) for i, v in enumerate(values)]),
                         "cell": np.concatenate([np.arange(len(v), dtype=np.int64) for v in values]),
                         "noisy": np.concatenate(values).astype(np.int64)})


def totals_of(frame: pd.DataFrame) -> np.ndarray:
    """The stored noisy ``[tap-on, tap-off]`` totals of a measurement frame, checked to hold both cells."""
    part = frame[frame["level"] == TOTALS_LEVEL]
    if not np.array_equal(part["cell"].to_numpy(), np.arange(2)):
        raise ValueError("a stored measurement does not hold the totals' two cells")
    return part["noisy"].to_numpy(np.int64)


def measurement_of(frame: pd.DataFrame, tree: Tree) -> Measurement:
    """A stored measurement back, checked to hold every cell of ``tree``'s public domain, in order."""
    levels = []
    for level, size in enumerate(tree.sizes):
        part = frame[frame["level"] == level]
        if not np.array_equal(part["cell"].to_numpy(), np.arange(size)):
            raise ValueError(f"a stored measurement does not cover level {level}'s public domain")
        levels.append(part["noisy"].to_numpy(np.int64))
    return Measurement(tuple(levels))


def rows(dom: ModeDomain, fitted: Fitted, day: str) -> pd.DataFrame:
    """The published rows of one (date, mode), zero counts left out: the mode total, each district pair, each
    listed location pair and one ``origin = destination = other`` remainder per district pair."""
    n_dd = len(dom.destination_districts)
    o_dist = np.array(dom.origin_districts, dtype=object)
    d_dist = np.array(dom.destination_districts, dtype=object)
    pair = np.arange(len(fitted.counts[1]))
    a, b = np.divmod(pair, n_dd)
    cells = np.flatnonzero(fitted.listed)
    o, d = np.divmod(cells, len(dom.destinations))
    rest = np.flatnonzero(fitted.remainder)
    ra, rb = np.divmod(rest, n_dd)
    keep = fitted.counts[1] > 0
    parts = [
        (["mode"], [ALL], [ALL], [ALL], [ALL], [fitted.total]),
        (["district"] * int(keep.sum()), o_dist[a[keep]], d_dist[b[keep]], [ALL] * int(keep.sum()),
         [ALL] * int(keep.sum()), fitted.counts[1][keep]),
        (["location"] * len(cells), o_dist[dom.origin_district[o]], d_dist[dom.destination_district[d]],
         np.array(dom.origins, dtype=object)[o], np.array(dom.destinations, dtype=object)[d], fitted.listed[cells]),
        (["location"] * len(rest), o_dist[ra], d_dist[rb], [OTHER] * len(rest), [OTHER] * len(rest),
         fitted.remainder[rest]),
    ]
    columns = [np.concatenate([np.asarray(p[k], dtype=object) for p in parts]) for k in range(5)]
    count = np.concatenate([np.asarray(p[5], dtype=np.int64) for p in parts])
    frame = pd.DataFrame({"date": day, "mode": dom.mode, **dict(zip(ROW_COLUMNS[2:7], columns)), "count": count})
    return frame[(frame["count"] > 0) | (frame["level"] == "mode")].reset_index(drop=True)


@dataclass(frozen=True)
class HierarchyPlan(OdPlacement):
    """Unit, scope and cost of the hierarchy under the release's ``unit`` (module docstring; scopes as the
    prefix tree's, ``release.od.placement``)."""

    NAME = OD_HIERARCHY
    unit: PrivacyUnit
    budget: HierarchyBudget
    domain: OdDomain
    totals: TotalsBudget
    periods: Periods = field(default_factory=Periods)  # card_period: which dates form one period

    @cached_property
    def tau(self) -> int:
        return tau_for(self.domain, self.budget)

    def cost(self) -> PrivacyCost:
        return date_cost(self.budget.cost(), self.totals)

    def mechanism(self) -> str:
        return json.dumps({**self.budget.describe(), "tau": self.tau, "domain_sha256": self.domain.digest(),
                           "totals": self.totals.describe()}, sort_keys=True)

    def bounds(self) -> str:
        return json.dumps({"unit": PrivacyUnit.CARD_DAY.value, "max_trips": self.budget.max_items,
                           "max_per_cell": self.budget.max_per_cell}, sort_keys=True)


def hierarchy_budgets(settings) -> tuple[HierarchyBudget, TotalsBudget]:
    """One date's parameters from the release's ``PrivacySettings``: ``od_hierarchy_budget`` (rho) for the levels, at
    most ``od_height`` trips per card-day (the stored sequences' length) and ``od_hierarchy_max_per_pair`` of them in
    one location pair (default 2: an out-and-back trip within one bus postcode is twice the same pair, and a bound of
    1 would cut the busiest such pairs, e.g. inside 2000, by a third; ``benchmarks.od_compare`` measures both); and
    ``od_totals_budget`` (rho) for the daily totals, ``TOTALS_PER_MODE`` trips of a mode per card-day."""
    budget = HierarchyBudget(settings.od_hierarchy_budget, SHARES, settings.od_height,
                             min(settings.od_hierarchy_max_per_pair, settings.od_height), FALSE_CELLS)
    totals = TotalsBudget(settings.od_totals_budget, settings.od_height, min(TOTALS_PER_MODE, settings.od_height))
    return budget, totals


def hierarchy_plan(settings, domain: OdDomain) -> HierarchyPlan:
    """The plan from the release's ``PrivacySettings`` (``hierarchy_budgets``)."""
    budget, totals = hierarchy_budgets(settings)
    return HierarchyPlan(settings.unit, budget, domain, totals, settings.periods)


@dataclass(frozen=True)
class HierarchyDraw:
    rows: pd.DataFrame  # ``ROW_COLUMNS`` of one (date, mode)
    draw: Draw
    charge: Charge
    decision: str


def release_od_hierarchy(sequences: Mapping[str, Path], plan: HierarchyPlan, ledger: PrivacyLedger, root: Path,
                         run_id: str, fingerprint_key: bytes, fresh: bool = False,
                         input_versions: Mapping[str, str] | None = None, bits: BitSource | None = None
                         ) -> Iterator[tuple[str, str, HierarchyDraw]]:
    """The hierarchy of every (date, mode) of the dates' stored card-day sequences (``{date: path}``), each asked
    of the ledger before any noise is drawn. Yields ``(date, mode, HierarchyDraw)``. ``input_versions``: per
    date, as in ``release.marginals.engine.release_partitions``; ``bits``: tests only (production: OS CSPRNG)."""
    stored = {day: from_frame(read_parquet(path)) for day, path in sequences.items()}
    counts = {day: plan.domain.counts(s, plan.budget.max_per_cell) for day, s in stored.items()}
    totals = {day: plan.domain.totals(s, plan.totals.max_per_mode) for day, s in stored.items()}
    parts = {f"{day}|{mode}": (day, mode) for day in counts for mode in plan.domain.modes}
    prints = {part: hmac.new(fingerprint_key, counts[day][mode].tobytes() + totals[day][mode].tobytes(),
                             hashlib.sha256).hexdigest() for part, (day, mode) in parts.items()}
    versions = (stand_ins({p: plan.scope(d) for p, (d, _) in parts.items()}, prints) if input_versions is None
                else {p: input_versions[d] for p, (d, _) in parts.items()})
    requests = [Request(plan.ledger_unit, plan.scope(day), part, day, plan.marginal(day), "add_remove",
                        plan.cost(), plan.mechanism(), plan.bounds(), prints[part], versions[part])
                for part, (day, mode) in parts.items()]
    noise = DiscreteGaussian(bits)

    def serve(pending: Sequence[Pending]) -> list[pd.DataFrame]:
        out = []
        for p in pending:
            day, mode = parts[p.request.part]
            if p.stored:
                out.append(read_parquet(p.path))
                continue
            measured = measure(plan.domain.modes[mode].tree, counts[day][mode], plan.budget, noise)
            noisy_totals = measure_totals(totals[day][mode], plan.totals, noise)
            out.append(write_parquet_exclusive(measurement_frame(measured, noisy_totals), p.path))
        return out

    for served in release_charged(requests, serve, ledger, root, run_id, fresh):
        day, mode = parts[served.request.part]
        dom = plan.domain.modes[mode]
        fitted = fit(dom.tree, measurement_of(served.value, dom.tree), plan.budget.sigmas, plan.tau)
        yield day, mode, HierarchyDraw(rows(dom, fitted, day), served.draw, served.charge, served.decision)


def sum_problems(frame: pd.DataFrame) -> list[str]:
    """What breaks exact totals in released rows: per (date, mode), one mode row, which the district rows must sum
    to, and each district pair listed once, which its location rows (remainder included) must sum to."""
    keys, pair = ["date", "mode"], ["origin_district", "destination_district"]
    level, counts = frame["level"], frame[keys + pair + ["count"]]
    totals = counts[level == "mode"].groupby(keys, observed=True)["count"].agg(["size", "sum"])
    districts = counts[level == "district"]
    district_sums = districts.groupby(keys, observed=True)["count"].sum()
    by_pair = pd.concat([districts.groupby(keys + pair, observed=True)["count"].sum().rename("district"),
                         counts[level == "location"].groupby(keys + pair, observed=True)["count"].sum()
                         .rename("location")], axis=1).fillna(0)
    unequal = by_pair.index[by_pair["district"] != by_pair["location"]]
    twice = districts.loc[districts.duplicated(keys + pair), keys + pair].drop_duplicates()
    pairs: dict[tuple, list[str]] = {}
    for what, found in (("is listed twice", twice.itertuples(index=False, name=None)),
                        ("its location rows do not sum to its district row", unequal)):
        for day, mode, origin, destination in found:
            pairs.setdefault((day, mode), []).append(f"{day} {mode} {(origin, destination)}: {what}")
    problems = []
    for day, mode in sorted(set(counts[keys].itertuples(index=False, name=None))):
        size, total = totals.loc[(day, mode)] if (day, mode) in totals.index else (0, 0)
        if size != 1 or int(total) != int(district_sums.get((day, mode), 0)):
            problems.append(f"{day} {mode}: the district rows do not sum to the mode total")
        problems += sorted(pairs.get((day, mode), []))
    return problems


def domain_problems(frame: pd.DataFrame, domain: OdDomain) -> list[str]:
    """Released rows whose labels are not of the public domain: a mode, district pair or location pair the stop
    list does not give, a location pair under another district pair than its own (``all`` and ``other`` only where
    the level puts them)."""
    problems = []
    for mode, part in frame.groupby("mode", sort=True):
        dom = domain.modes.get(mode)
        if dom is None:
            problems.append(f"{mode}: not a mode of the stop list")
            continue
        district = part["level"] != "mode"
        bad = district & ~(part["origin_district"].isin(dom.origin_districts)
                           & part["destination_district"].isin(dom.destination_districts))
        location = part["level"] == "location"
        listed = location & (part["origin"] != OTHER)
        home = dict(zip(dom.origins, np.array(dom.origin_districts)[dom.origin_district]))
        away = dict(zip(dom.destinations, np.array(dom.destination_districts)[dom.destination_district]))
        bad |= listed & ~((part["origin"].map(home) == part["origin_district"])
                          & (part["destination"].map(away) == part["destination_district"]))
        bad |= location & ~listed & (part["destination"] != OTHER)
        bad |= ~location & ((part["origin"] != ALL) | (part["destination"] != ALL))
        bad |= ~part["level"].isin(LEVEL_NAMES)
        if bad.any():
            problems.append(f"{mode}: {int(bad.sum())} rows outside the public domain")
    return problems
