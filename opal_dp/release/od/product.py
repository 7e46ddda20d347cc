"""The OD products as the registry sees them (``release.products``): whether each is on under the settings, what
it charges one ledger scope, one date's charge (the function its plan charges with) per date the scope receives
(``placement.dates_per_scope``), the hierarchy's empirical audit of its ledger charges, and what it publishes: both
publish into the one set of OD files (``publish.OD_FILES``), read, gated and stated date by date as one part
(``dated.OD_DATED``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from opal_dp.audit.hierarchy import audit_charges
from opal_dp.core import PrivacyCost, PrivacyLedger, PrivacyUnit
from opal_dp.core.totals import date_cost
from opal_dp.release.od.dated import OD_DATED, OdDated
from opal_dp.release.od.engine import tree_budget, tree_date_cost
from opal_dp.release.od.hierarchy import OD_HIERARCHY as HIERARCHY_CHARGE, hierarchy_budgets, hierarchy_plan, od_domain
from opal_dp.release.od.placement import dates_per_scope
from opal_dp.release.od.publish import OD_FILES, OdFiles


@dataclass(frozen=True)
class OdProduct:
    name: str
    enabled: Callable[..., bool]  # (settings) -> on?
    date_charge: Callable[..., PrivacyCost]  # (settings) -> what one date's release charges a card
    publication: OdFiles = OD_FILES
    dated: OdDated = OD_DATED
    charges_audit: Callable[..., tuple[bool, dict]] | None = None  # (settings, ledger, stops, alpha)

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]:
        if not self.enabled(settings):
            return []
        return [self.date_charge(settings)] * dates_per_scope(unit, settings.periods)

    def audit(self, settings) -> Callable[[PrivacyLedger, pd.DataFrame, float], tuple[bool, dict]] | None:
        if self.charges_audit is None or not self.enabled(settings):
            return None
        return lambda ledger, stops, alpha: self.charges_audit(settings, ledger, stops, alpha)


def _hierarchy_charge(settings) -> PrivacyCost:
    budget, totals = hierarchy_budgets(settings)
    return date_cost(budget.cost(), totals)  # as ``HierarchyPlan.cost``: the levels and the daily totals


def _hierarchy_audit(settings, ledger: PrivacyLedger, stops: pd.DataFrame, alpha: float) -> tuple[bool, dict]:
    """The hierarchy's measurement per level against every hierarchy charge the ledger holds (``audit.hierarchy``),
    at false-alarm probability ``alpha``: whether all pass, and the figures of each."""
    plan = hierarchy_plan(settings, od_domain(stops))
    charges = [c for c in ledger.charges() if c.marginal.split(" ")[0] == HIERARCHY_CHARGE]
    reports = audit_charges(charges, plan.budget, alpha=alpha, fallback_totals=plan.totals)
    return all(r.passed for r in reports.values()), {"od_hierarchy_audit": {
        name: {"charged_rho": r.charged_rho, "rho_lower_bound": r.rho_lower,
               "rho_lower_bound_per_level": list(r.level_rho_lower), "silent_cells": r.silent_cells,
               "missing_cells": r.missing_cells, "passed": r.passed} for name, r in reports.items()}}


OD_TREE = OdProduct("od_tree", lambda s: s.releases_od, lambda s: tree_date_cost(tree_budget(s)))
"""The noisy prefix trees of trip sequences (``release.od.engine``), when ``releases_od``."""
OD_HIERARCHY = OdProduct("od_hierarchy", lambda s: s.releases_od_hierarchy, _hierarchy_charge,
                         charges_audit=_hierarchy_audit)
"""The hierarchical OD flows and the daily totals (``release.od.hierarchy``), when ``releases_od_hierarchy``."""
