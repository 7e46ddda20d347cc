"""Privacy units: whom a release protects, how far one unit's contribution is bounded, and over which
ledger scope its privacy loss accumulates.

- ``trip``: one trip (the 2016 release). Scope: the (date, mode) partition; partitions are disjoint
  sets of trips, so they compose in parallel.
- ``card_day``: every trip of one card on one service day, whatever the mode. Scope: the date. A
  card-day can span all four modes, so the four (date, mode) partitions of a date are not disjoint
  for it; instead the mode is treated as part of the bin: the histograms of the four partitions of a
  date are pieces of one histogram over (mode, time, location), whose sensitivity to one card-day is
  bounded below, and one noise draw of that histogram is charged once per date. Dates compose in
  parallel (a card-day lies in one date).
- ``card_period``: every trip of one card in the release period. Scope: the period; every (date,
  mode) partition of it is a piece of one histogram over (date, mode, time, location).

Contribution bounds (public configuration, enforced by ``opal_dp.prep.bounding`` before the card id
is dropped): at most ``m = max_trips_per_card_day`` trips per card-day; at most ``b = max_per_bin``
trips of one card-day in any bin of any marginal; for ``card_period`` at most ``D`` days per card,
``D = max_days_per_card`` or the number of days of the period.

Sensitivity of one marginal's scope histogram to one unit under add/remove (``r = 1``) or
replace-one (``r = 2``: the removed unit's bins and the added unit's bins):

- one card-day adds at most ``m`` trips (``l1 = m``) to at most ``m`` bins (``l0 = m``), at most
  ``L = min(b, m)`` to one bin (``linf = L``), so ``sum d_b**2 <= linf * l1 = L*m``;
- a card over the period: ``D`` card-days in distinct bins (the date is part of the bin):
  ``l0 = l1 = D*m``, ``l2_squared = D*m*L``, ``linf = L``;
- replace-one doubles ``l0``, ``l1`` and ``l2_squared``; ``linf`` stays ``L`` (in a shared bin one
  contribution leaves and the other arrives, so the bin moves by at most ``L``);
- a trip: ``l0 = l1 = l2_squared = r``, ``linf = 1``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from opal_dp.core.mechanism import Relation
from opal_dp.core.sensitivity import Sensitivity


class PrivacyUnit(StrEnum):
    """Its value is what is written (ledger, statements, paths): ``str()`` and f-strings give it, as ``json`` does."""

    TRIP = "trip"
    CARD_DAY = "card_day"
    CARD_PERIOD = "card_period"

    @property
    def bounds_cards(self) -> bool:
        """Whether the card id is needed to bound contributions before it is dropped."""
        return self is not PrivacyUnit.TRIP

    @property
    def default_relation(self) -> Relation:
        """Replace-one reproduces the 2016 trip release; card units follow OpenDP, Tumult, PipelineDP
        and the DeID2 synthesizer: one card's data added or removed."""
        return Relation.REPLACE_ONE if self is PrivacyUnit.TRIP else Relation.ADD_REMOVE

    @property
    def protects(self) -> str:
        return {
            PrivacyUnit.TRIP: "one trip",
            PrivacyUnit.CARD_DAY: "all trips of one card on one service day, in every mode",
            PrivacyUnit.CARD_PERIOD: "all trips of one card over one period (a calendar week by default)",
        }[self]

    @property
    def scope_kind(self) -> str:
        """What one ledger scope is for this unit."""
        return {PrivacyUnit.TRIP: "(date, mode) partition", PrivacyUnit.CARD_DAY: "service date",
                PrivacyUnit.CARD_PERIOD: "release period"}[self]


@dataclass(frozen=True)
class ContributionBounds:
    """Public bounds on one card's contribution (ignored by the trip unit)."""

    max_trips_per_card_day: int = 4
    max_per_bin: int = 1
    max_days_per_card: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_trips_per_card_day", "max_per_bin"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        days = self.max_days_per_card
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 1):
            raise ValueError(f"max_days_per_card must be None or an integer >= 1, got {days!r}")

    @property
    def per_bin(self) -> int:
        """The effective per-bin bound ``min(max_per_bin, max_trips_per_card_day)``."""
        return min(self.max_per_bin, self.max_trips_per_card_day)

    def days(self, period_days: int) -> int:
        """Days of one card that can count in a period of ``period_days`` days."""
        return period_days if self.max_days_per_card is None else min(self.max_days_per_card, period_days)

    def describe(self) -> dict:
        return asdict(self)


def sensitivity(
    unit: PrivacyUnit, relation: Relation, bounds: ContributionBounds, period_days: int | None = None
) -> Sensitivity:
    """Sensitivity of one marginal's scope histogram to one ``unit`` (module docstring)."""
    relation = Relation(relation)
    r = relation.units_changed
    if unit is PrivacyUnit.TRIP:
        return Sensitivity(l0=r, l1=r, l2_squared=r, linf=1)
    days = 1
    if unit is PrivacyUnit.CARD_PERIOD:
        if period_days is None or period_days < 1:
            raise ValueError(f"card_period needs the number of days of the period, got {period_days!r}")
        days = bounds.days(period_days)
    m, per_bin = bounds.max_trips_per_card_day, bounds.per_bin
    return Sensitivity(l0=r * days * m, l1=r * days * m, l2_squared=r * days * m * per_bin, linf=per_bin)
