"""Where an OD product's charges go in the ledger, whatever its mechanism (the prefix tree, the hierarchy).

Every OD product protects the card-day, so it is charged to a card-level scope: the date (``card_day`` scope)
under the ``trip`` and ``card_day`` units (under ``trip`` the marginals make no card-day claim, so the OD product
is charged to the date's ``card_day`` scope of its own), and the period under ``card_period``, one charge per date
(``<name> <date>``: each date's release is its own mechanism). ``release.od.engine`` gives the composition
argument.
"""

from __future__ import annotations

from opal_dp.core import PrivacyUnit
from opal_dp.release.periods import Periods


def dates_per_scope(unit: PrivacyUnit, periods: Periods) -> int:
    """How many dates' OD charges one ledger scope of ``unit`` receives: none for a trip scope, one for a date
    (``card_day``), one per date of the period (``card_period``)."""
    if unit is PrivacyUnit.TRIP:
        return 0
    return periods.days if unit is PrivacyUnit.CARD_PERIOD else 1


class OdPlacement:
    """Mixin for an OD plan with fields ``unit`` (the release's unit) and ``periods`` (card_period: which dates form
    one period, ``release.periods``), and the class attribute ``NAME`` (the ledger's marginal name)."""

    NAME: str
    unit: PrivacyUnit
    periods: Periods

    @property
    def ledger_unit(self) -> PrivacyUnit:
        return PrivacyUnit.CARD_PERIOD if self.unit is PrivacyUnit.CARD_PERIOD else PrivacyUnit.CARD_DAY

    def scope(self, day: str) -> str:
        return self.periods.name_of(day) if self.unit is PrivacyUnit.CARD_PERIOD else day

    def marginal(self, day: str) -> str:
        return f"{self.NAME} {day}" if self.unit is PrivacyUnit.CARD_PERIOD else self.NAME
