"""The hierarchy release design of the marginals (``Design.HIERARCHY``): each tap of a (date, mode) partition is one
time x location tree (``time_loc_hierarchy``), measured once and fitted, and its three 2016 tables are derived from
the fit (``time_loc_tables``).

Budget. As the public-domain design: the largest total rho whose conversion at ``sum delta_j`` stays within
``sum epsilon_j`` (no threshold events: every cell of the public domain is measured), split between the taps in
proportion to their marginals' epsilon. A tap's rho is split over its levels by ``SHARES``; its trees over the
scope's dates are one measurement per level of sensitivity ``period_budget(..., taps=1)``.

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
        """An upper bound on P(a 15-minute cell of true count ``n`` is listed): its noisy count reaches the finest
        threshold (``tail_upper_bound``); 1 for the tables of totals, whose every positive count is published."""
        if self.table != "time-loc":
            return 1.0
        tau = self.tap_plan.taus[-1] - n
        return 1.0 if tau <= 0 else min(1.0, tail_upper_bound(self.tap_plan.budget.sigmas[-1], tau))

    def describe(self) -> dict:
        budget = self.tap_plan.budget
        return {"mechanism": self.name, "design": "hierarchy", "table": self.table, "tap": self.tap_plan.tap,
                "noise": "discrete_gaussian", "levels": list(LEVELS), "charged_levels": list(TABLE_LEVELS[self.table]),
                "rho": self.cost().rho, "delta": 0.0, "hierarchy": budget.describe(),
                "taus": list(self.tap_plan.taus), "threshold": float(self.tap_plan.taus[-1]),
                "min_released_count": 1, "domain_digest": self.tap_plan.digest, "cost": self.cost().describe(),
                "seeded": bool(self.tap_plan.noise.seeded)}


def hierarchy_taps(unit: PrivacyUnit, relation: Relation, bounds: ContributionBounds, period_days: int,
                   rho: Mapping[str, float], domains: Mapping[tuple[str, str], TapDomain],
                   noise: DiscreteGaussian) -> dict[str, TapHierarchy]:
    """Each tap's parameters (module docstring): ``rho`` per tap; the scope's dates (``period_days`` under
    ``card_period``, else one) set the groups and the public sizes of the thresholds."""
    if unit is PrivacyUnit.TRIP:
        raise ValueError("the hierarchy design measures cards: choose privacy_unit card_day or card_period")
    dates = period_days if unit is PrivacyUnit.CARD_PERIOD else 1
    out = {}
    for tap in TAPS:
        mine = {mode: d for (mode, t), d in domains.items() if t == tap}
        budget = period_budget(rho[tap], bounds, bounds.days(dates), taps=1, units_changed=relation.units_changed)
        sizes = np.sum([d.tree(LEVELS).sizes[1:] for d in mine.values()], axis=0) * dates
        out[tap] = TapHierarchy(tap, budget, listing_taus(budget, [int(s) for s in sizes]), mine, noise)
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
