"""The OD products as the registry sees them (``release.products``): whether each is on under the settings, what
it charges one ledger scope, one date's charge (the function its plan charges with) per date the scope receives
(``placement.dates_per_scope``), and what it publishes: both publish into the one set of OD files
(``publish.OD_FILES``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opal_dp.core import PrivacyCost, PrivacyUnit
from opal_dp.core.totals import date_cost
from opal_dp.release.od.engine import tree_budget, tree_date_cost
from opal_dp.release.od.hierarchy import hierarchy_budgets
from opal_dp.release.od.placement import dates_per_scope
from opal_dp.release.od.publish import OD_FILES, OdFiles


@dataclass(frozen=True)
class OdProduct:
    name: str
    enabled: Callable[..., bool]  # (settings) -> on?
    date_charge: Callable[..., PrivacyCost]  # (settings) -> what one date's release charges a card
    publication: OdFiles = OD_FILES

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]:
        if not self.enabled(settings):
            return []
        return [self.date_charge(settings)] * dates_per_scope(unit, settings.periods)


def _hierarchy_charge(settings) -> PrivacyCost:
    budget, totals = hierarchy_budgets(settings)
    return date_cost(budget.cost(), totals)  # as ``HierarchyPlan.cost``: the levels and the daily totals


OD_TREE = OdProduct("od_tree", lambda s: s.releases_od, lambda s: tree_date_cost(tree_budget(s)))
"""The noisy prefix trees of trip sequences (``release.od.engine``), when ``releases_od``."""
OD_HIERARCHY = OdProduct("od_hierarchy", lambda s: s.releases_od_hierarchy, _hierarchy_charge)
"""The hierarchical OD flows and the daily totals (``release.od.hierarchy``), when ``releases_od_hierarchy``."""
