"""A release plan: the privacy unit, its contribution bounds, the neighbouring relation and one calibrated
mechanism per marginal, plus how (date, mode) partitions map to ledger scopes.

One plan composes a unit, a bounding, a mechanism family and an accountant; nothing else in the pipeline
depends on which were chosen.

Budget. The configuration gives a nominal (epsilon_j, delta_j) per marginal; one full release of a scope
costs the unit (sum epsilon_j, sum delta_j):
- ``laplace`` (SBH): marginal j is (epsilon_j, delta_j)-DP; basic composition adds them up.
- ``gaussian`` (thresholded discrete Gaussian, zCDP): half of each delta_j goes to marginal j's threshold
  events; the total rho is the largest whose OpenDP conversion at the other half (sum delta_j / 2) stays
  within sum epsilon_j, split between the marginals in proportion to epsilon_j. Composed by the ledger's
  accountant the six charges give exactly (sum epsilon_j, sum delta_j) for the scope; composition over many
  partitions of a period is where zCDP is worth it (rho adds up, the conversion is paid once).

Design. ``sbh`` (the 2016 design above) or ``public_domain`` (``release.marginals.public_domain``): noise on every cell of
the public domain, the three tables of a tap measured together and made consistent. Its Laplace charges are pure
epsilon_j-DP (delta 0); its Gaussian takes the largest total rho whose conversion at sum delta_j stays within
sum epsilon_j (no threshold events to pay for), split in proportion to epsilon_j. Its publication threshold tau
is the smallest with at most ``FALSE_CELLS_PER_DAY`` expected false cells per day over the public domains.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from opal_dp.core import (
    ContributionBounds,
    DiscreteLaplace,
    HistogramMechanism,
    PrivacyUnit,
    Relation,
    StabilityHistogram,
    sensitivity,
)
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import GaussianThresholdHistogram
from opal_dp.network import MODES, load_stops
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.hierarchy_design import TapHierarchy, hierarchy_taps, level_measurements, tap_rho
from opal_dp.release.marginals.time_loc_hierarchy import time_loc_domains
from opal_dp.release.marginals.tables import MARGINALS, TAPS
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import Periods

FALSE_CELLS_PER_DAY = 5.0


@dataclass(frozen=True)
class ReleasePlan:
    unit: PrivacyUnit
    relation: Relation
    bounds: ContributionBounds
    periods: Periods | None  # card_period: which dates form one period (``release.periods``); else None
    mechanism: Mechanism
    mechanisms: Mapping[str, HistogramMechanism | pd_design.DomainMeasurement]
    design: Design = Design.SBH
    noise: Mapping[str, pd_design.DesignNoise] = field(default_factory=dict)  # public_domain: by tap
    domains: Mapping[tuple[str, str], pd_design.Domain] = field(default_factory=dict)  # public_domain: (mode, tap)
    tau: int | None = None  # public_domain: the publication threshold
    hierarchy: Mapping[str, TapHierarchy] = field(default_factory=dict)  # hierarchy: by tap

    def scope(self, day: str, mode: str) -> str:
        """The ledger scope of the (date, mode) partition for this unit."""
        if self.unit is PrivacyUnit.TRIP:
            return f"{day}|{mode}"
        if self.unit is PrivacyUnit.CARD_DAY:
            return day
        return self.periods.name_of(day)

    def bounds_json(self) -> str:
        """The public contribution bounds as recorded with every ledger charge."""
        if self.unit is PrivacyUnit.TRIP:
            return json.dumps({"unit": self.unit.value}, sort_keys=True)
        bounds = self.bounds.describe()
        if self.unit is PrivacyUnit.CARD_PERIOD:
            bounds["period_days"] = self.periods.days
        else:
            del bounds["max_days_per_card"]
        return json.dumps({"unit": self.unit.value, **bounds}, sort_keys=True)


def build_plan(
    unit: PrivacyUnit | str,
    epsilon: Mapping[str, float],
    delta: Mapping[str, float],
    *,
    relation: Relation | str | None = None,
    mechanism: Mechanism | str | None = None,
    bounds: ContributionBounds = ContributionBounds(),
    periods: Periods | None = None,
    laplace: DiscreteLaplace | None = None,
    gaussian: DiscreteGaussian | None = None,
    design: Design | str = Design.SBH,
    stops: pd.DataFrame | None = None,
    root_sd: float | None = None,
) -> ReleasePlan:
    """The plan for ``unit`` at the nominal per-marginal budget (module docstring). ``stops``: the public stop
    list the public-domain design takes its domains from (default: the shipped reference list); ``root_sd``: under
    the hierarchy design, the noise of the published daily totals its trees are pinned to (None: not pinned)."""
    design = Design.parse(design)
    unit = PrivacyUnit(unit)
    relation = unit.default_relation if relation is None else Relation(relation)
    mechanism = Mechanism.default_for(unit) if mechanism is None else Mechanism.parse(mechanism)
    periods = (periods or Periods()) if unit is PrivacyUnit.CARD_PERIOD else None
    names = [m.name for m in MARGINALS]
    if sorted(epsilon) != sorted(names) or sorted(delta) != sorted(names):
        raise ValueError(f"epsilon and delta must give exactly the marginals {names}")
    sens = sensitivity(unit, relation, bounds, periods.days if periods else None)
    if design is Design.PUBLIC_DOMAIN:
        return _public_domain_plan(unit, relation, bounds, periods, mechanism, sens, epsilon, delta,
                                   load_stops() if stops is None else stops)
    if design is Design.HIERARCHY:
        return _hierarchy_plan(unit, relation, bounds, periods, mechanism, epsilon, delta,
                               load_stops() if stops is None else stops, gaussian or DiscreteGaussian(), root_sd)
    if mechanism.pure:
        noise = laplace or DiscreteLaplace()
        mechanisms = {name: StabilityHistogram(epsilon[name], delta[name], sens, noise) for name in names}
    else:
        noise = gaussian or DiscreteGaussian()
        total_epsilon = math.fsum(epsilon.values())
        rho = zcdp_rho_for(total_epsilon, math.fsum(delta.values()) / 2)
        mechanisms = {
            name: GaussianThresholdHistogram(rho * epsilon[name] / total_epsilon, delta[name] / 2, sens, noise)
            for name in names
        }
    return ReleasePlan(unit, relation, bounds, periods, mechanism, mechanisms)


def _public_domain_plan(
    unit: PrivacyUnit, relation: Relation, bounds: ContributionBounds, periods: Periods | None, mechanism: Mechanism,
    sens, epsilon: Mapping[str, float], delta: Mapping[str, float], stops: pd.DataFrame,
) -> ReleasePlan:
    """The public-domain design's plan (module docstring): one ``DesignNoise`` per tap, one tau for all."""
    if mechanism.pure:
        budget = dict(epsilon)
    else:
        total_epsilon = math.fsum(epsilon.values())
        rho = zcdp_rho_for(total_epsilon, math.fsum(delta.values()))
        budget = {name: rho * epsilon[name] / total_epsilon for name in epsilon}
    by_tap = {m.tap: {} for m in MARGINALS}
    for m in MARGINALS:
        by_tap[m.tap][m.table] = m.name
    noise = {tap: pd_design.calibrate(mechanism, sens, {table: budget[name] for table, name in tables.items()})
             for tap, tables in by_tap.items()}
    domains = {(mode, tap): pd_design.domain(stops, mode, tap) for mode in MODES for tap in TAPS
               if (stops["mode"] == mode).any()}
    pieces = [(noise[tap], dom.cells) for (_, tap), dom in domains.items()]
    tau = pd_design.min_tau_over(pieces, FALSE_CELLS_PER_DAY)
    false_cells = math.fsum(pd_design.expected_false_cells(n, cells, tau) for n, cells in pieces)
    digest = hashlib.sha256(json.dumps({f"{m}|{t}": d.locations for (m, t), d in sorted(domains.items())},
                                       sort_keys=True).encode()).hexdigest()
    mechanisms = {name: pd_design.DomainMeasurement(table, noise[tap], tau, false_cells, digest)
                  for tap, tables in by_tap.items() for table, name in tables.items()}
    return ReleasePlan(unit, relation, bounds, periods, mechanism, {m.name: mechanisms[m.name] for m in MARGINALS},
                       Design.PUBLIC_DOMAIN, noise, domains, tau)


def _hierarchy_plan(
    unit: PrivacyUnit, relation: Relation, bounds: ContributionBounds, periods: Periods | None, mechanism: Mechanism,
    epsilon: Mapping[str, float], delta: Mapping[str, float], stops: pd.DataFrame, noise: DiscreteGaussian,
    root_sd: float | None,
) -> ReleasePlan:
    """The hierarchy design's plan (``release.marginals.hierarchy_design``): the discrete Gaussian only."""
    if mechanism.pure:
        raise ValueError("the hierarchy design measures with the discrete Gaussian (zCDP): choose mechanism gaussian")
    rho = zcdp_rho_for(math.fsum(epsilon.values()), math.fsum(delta.values()))
    trees = time_loc_domains(stops)
    taps = hierarchy_taps(unit, relation, bounds, periods.days if periods else 1, tap_rho(rho, epsilon), trees,
                          noise, root_sd)
    domains = {(mode, tap): pd_design.Domain(mode, tap, dom.locations) for (mode, tap), dom in trees.items()}
    return ReleasePlan(unit, relation, bounds, periods, mechanism, level_measurements(taps), Design.HIERARCHY,
                       domains=domains, hierarchy=taps)
