"""The synthetic trips as the registry sees them (``release.products``): when ``synthetic`` is on, one charge a
week (``queries.synthetic_week_cost``, the function the plan splits over its queries) to the week's card_period
scope, whatever the marginals' unit; nothing to any other scope. It publishes nothing into the shared dated folder:
its rows and statement go to their own folder (``publish.publish_synthetic``)."""

from __future__ import annotations

from dataclasses import dataclass

from opal_dp.core import PrivacyCost, PrivacyUnit
from opal_dp.release.synthetic.queries import synthetic_week_cost


@dataclass(frozen=True)
class SyntheticTrips:
    name: str = "synthetic"
    publication: None = None
    dated: None = None

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]:
        if not settings.synthetic or unit is not PrivacyUnit.CARD_PERIOD:
            return []
        return [synthetic_week_cost(*settings.synthetic_budget)]

    def audit(self, settings) -> None:
        return None  # none at release time: its queries' audit is the suite's (audit/test_synthetic_audit.py)


SYNTHETIC = SyntheticTrips()
