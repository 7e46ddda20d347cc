"""The hierarchy release design of the marginals (``Design.HIERARCHY``): each tap of a (date, mode) partition is one
time x location tree (``time_loc_hierarchy``), measured once and fitted, and its three 2016 tables are derived from
the fit (``time_loc_tables``).

Budget. As the public-domain design: the largest total rho whose conversion at ``sum delta_j`` stays within
``sum epsilon_j`` (no threshold events: every cell of the public domain is measured), split between the taps in
proportion to their marginals' epsilon. A tap's rho is split over its levels by ``SHARES``; its trees over the
scope's dates are one measurement per level of sensitivity ``period_budget(..., taps=1)``.

Totals. With the OD hierarchy on, each tree is pinned to the day's published totals (``totals.csv``:
``time_loc_hierarchy.totals_pins``), read from ``od_hierarchy``'s draws: post-processing of a charged release, so the
files add up to ``totals.csv``; the root's own measurement (``SHARES[0]``, 2% of the tap's rho) is then unused.

Ledger. A tap is three charges, one per published table, each the rho of the levels that table is read from:
``time`` the mode's day, ``loc`` the station-day, ``time-loc`` the station-hour and the 15-minute cells. Their sum is
the tap's measurement. A tap is drawn and stored whole (``engine._serve_taps``), as under the public-domain design.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.discrete_gaussian import DiscreteGaussian, tail_upper_bound
from opal_dp.core.hierarchy import HierarchyBudget
from opal_dp.core.mechanism import Relation
from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.tables import MARGINALS, TAPS
from opal_dp.release.marginals.time_loc_hierarchy import LEVELS, TapDomain, TreeRelease, listing_taus, period_budget
from opal_dp.release.marginals.time_loc_tables import open_data_blocks

TABLE_LEVELS = {"time": ("mode_day",), "loc": ("station_day",), "time-loc": ("station_hour", "window_station")}
"""The levels whose measurement each published table is charged for (module docstring)."""


@dataclass(frozen=True)
class TapHierarchy:
    """One tap's public parameters: its trees' budget and listing thresholds over the scope's public sizes."""

    tap: str
    budget: HierarchyBudget
    taus: tuple[int, ...]
    domains: Mapping[str, TapDomain]  # mode -> the tap's domain
    noise: DiscreteGaussian  # production: the OS CSPRNG
    dates: int  # of a scope: the thresholds' public sizes
    root_sd: float | None = None  # the published daily totals' noise, when the trees are pinned to them

    @property
    def digest(self) -> str:
        """SHA-256 of the tap's public domains: a changed stop list is another mechanism."""
        text = json.dumps({m: [d.locations, d.districts, d.location_district.tolist()]
                           for m, d in sorted(self.domains.items())}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class LevelMeasurement:
    """One published table of a tap under the hierarchy design, as the ledger charges and records it: the rho of its
    levels (``TABLE_LEVELS``). Like ``public_domain.DomainMeasurement``, it does not draw on its own."""

    name = "time_loc_hierarchy"
    table: str
    tap_plan: TapHierarchy

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(LEVELS.index(level) for level in TABLE_LEVELS[self.table])

    def cost(self) -> PrivacyCost:
        return PrivacyCost.zcdp(math.fsum(self.tap_plan.budget.level_rho[i] for i in self.levels), 0.0)

    def release_probability(self, n: int) -> float:
        """P(a cell of true count ``n`` is published), as ``DomainMeasurement.release_probability``: its noisy count
        reaching the finest threshold for a 15-minute cell, 1 for a total; the noise of the table's finest level,
        before the fit (approximate; ``tail_upper_bound`` where a tail is needed)."""
        sigma = self.tap_plan.budget.sigmas[self.levels[-1]]
        t = (self.tap_plan.taus[-1] if self.table == "time-loc" else 1) - n
        return min(1.0, tail_upper_bound(sigma, t)) if t >= 1 else 1 - min(1.0, tail_upper_bound(sigma, 1 - t))

    def describe(self) -> dict:
        """What the ledger records; ``min_released_count``: the noisy count a 15-minute cell needs to be listed (1 for
        the tables of totals), so that statements read every design alike."""
        budget, finest = self.tap_plan.budget, self.levels[-1]
        listed_from = self.tap_plan.taus[-1] if self.table == "time-loc" else 1
        caps = (*(budget.coarse_caps or ()), budget.max_per_cell)
        return {"mechanism": self.name, "design": "hierarchy", "table": self.table, "tap": self.tap_plan.tap,
                "noise": "discrete_gaussian", "levels": list(LEVELS), "charged_levels": list(TABLE_LEVELS[self.table]),
                "rho": self.cost().rho, "delta": 0.0, "hierarchy": budget.describe(),
                "scale": budget.sigmas[finest],  # the noise of its finest level (sigma)
                "sensitivity": {"l0": budget.groups * budget.max_items, "l1": budget.groups * budget.max_items,
                                "l2_squared": budget.l2_squared[finest], "linf": caps[finest]},  # of its finest level
                "taus": list(self.tap_plan.taus), "threshold": float(listed_from), "min_released_count": listed_from,
                "tau": self.tap_plan.taus[-1],
                "expected_false_cells_per_day": len(TAPS) * budget.false_cells / self.tap_plan.dates,
                "stations": {m: len(d.locations) for m, d in sorted(self.tap_plan.domains.items())},
                "root": "totals.csv" if self.tap_plan.root_sd is not None else "measured",
                "root_sd": self.tap_plan.root_sd,
                "domain_digest": self.tap_plan.digest, "cost": self.cost().describe(),
                "seeded": bool(self.tap_plan.noise.seeded)}


def hierarchy_taps(unit: PrivacyUnit, relation: Relation, bounds: ContributionBounds, period_days: int,
                   rho: Mapping[str, float], domains: Mapping[tuple[str, str], TapDomain],
                   noise: DiscreteGaussian, root_sd: float | None = None) -> dict[str, TapHierarchy]:
    """Each tap's parameters (module docstring): ``rho`` per tap; the scope's dates (``period_days`` under
    ``card_period``, else one) set the groups and the public sizes of the thresholds; ``root_sd``: the noise of the
    published daily totals the trees are pinned to (None: not pinned)."""
    if unit is PrivacyUnit.TRIP:
        raise ValueError("the hierarchy design measures cards: choose privacy_unit card_day or card_period")
    dates = period_days if unit is PrivacyUnit.CARD_PERIOD else 1
    out = {}
    for tap in TAPS:
        mine = {mode: d for (mode, t), d in domains.items() if t == tap}
        budget = period_budget(rho[tap], bounds, bounds.days(dates), taps=1, units_changed=relation.units_changed)
        sizes = np.sum([d.tree(LEVELS).sizes[1:] for d in mine.values()], axis=0) * dates
        out[tap] = TapHierarchy(tap, budget, listing_taus(budget, [int(s) for s in sizes]), mine, noise, dates,
                                root_sd)
    return out


def level_measurements(taps: Mapping[str, TapHierarchy]) -> dict[str, LevelMeasurement]:
    """Each marginal's charge: its tap's table."""
    return {m.name: LevelMeasurement(m.table, taps[m.tap]) for m in MARGINALS}


def tap_rho(total_rho: float, epsilon: Mapping[str, float]) -> dict[str, float]:
    """The total rho split between the taps in proportion to their marginals' epsilon."""
    total = math.fsum(epsilon.values())
    return {tap: total_rho * math.fsum(epsilon[m.name] for m in MARGINALS if m.tap == tap) / total for tap in TAPS}


def frames_of(released: TreeRelease, labels: pd.Index) -> dict[str, pd.DataFrame]:
    """A tree release's three tables in the engine's form (the public-domain design's ``released_frames``)."""
    dom = released.domain
    return pd_design.released_frames(pd_design.Domain(dom.mode, dom.tap, dom.locations), open_data_blocks(released),
                                     labels)


def audit_taps(taps: Mapping[str, TapHierarchy], mechanisms: Mapping[str, LevelMeasurement], alpha: float,
               runs: int = 100_000) -> tuple[bool, dict]:
    """Each tap's measurement audited against the sum of its three tables' charges (``audit.hierarchy``, at
    ``alpha / 2`` a tap): on a public tree of one station with the tap's levels and budget, so that every level's
    noise is sampled ``runs`` times on an all-zero input. Whether both pass, and the figures."""
    from opal_dp.audit.hierarchy import audit_measurement
    from opal_dp.core.hierarchy import measure

    figures, passed = {}, True
    for tap, plan in sorted(taps.items()):
        charged = PrivacyCost.zcdp(math.fsum(m.cost().rho for m in mechanisms.values() if m.tap_plan.tap == tap), 0.0)
        tree = TapDomain("audit", tap, ("station",), ("district",), np.zeros(1, dtype=np.int64)).tree(LEVELS)
        report = audit_measurement(lambda t, f, b, noise=plan.noise: measure(t, f, b, noise), plan.budget, charged,
                                   tree, runs=runs, alpha=alpha / len(taps))
        passed &= report.passed
        figures[f"tap_{tap}"] = {"charged_rho": report.charged_rho, "rho_lower_bound": report.rho_lower,
                                 "rho_lower_bound_per_level": list(report.level_rho_lower),
                                 "silent_cells": report.silent_cells, "missing_cells": report.missing_cells,
                                 "passed": report.passed}
    return passed, figures


def levels_path(joint: Path) -> Path:
    """Where a tap's coarser rows are stored: beside its ``time-loc`` draw (``engine._serve_taps``)."""
    return joint.with_name(joint.name + ".levels.parquet")
