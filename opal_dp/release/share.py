"""The default budget of a card-level release: the largest budget per ledger scope (a calendar week for
``card_period``, a service date for ``card_day``) that the person cap allows in every scope of the horizon.

The person account (``core.ledger``) refuses a charge that takes any window of ``horizon_days`` consecutive
service dates past the person cap, and a card_period charge covers its whole week; a window of h days touches
at most ``scopes_touching(h, unit)`` scopes (365 days: 53 weeks, or 365 dates). The share is therefore the largest
nominal per-scope epsilon E such that that many releases -- each the six marginals at E (split 1,1,1,1,2,2 as in
2016) and ``cap_delta / (2 * scopes)``, plus one OD tree a date at ``od_epsilon`` and one hierarchical OD release a
date at ``od_hierarchy_rho`` (its levels and the daily totals; each when on) -- composed by the ledger's own
accountant (``core.accounting``) stay within the cap. The costs are those of the release plan itself
(``build_plan``), so the ledger charges exactly what was planned, and a release every week of the year is never
refused. The search result is rounded down to three significant digits (a smaller budget only costs less).
Everything here is public: the cap, the horizon and the plan, never the data.
"""

from __future__ import annotations

import math
from functools import lru_cache

from opal_dp.core import ContributionBounds, PrivacyCost, PrivacyUnit
from opal_dp.core.accounting import within
from opal_dp.network import load_stops
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import WEEK_DAYS, Periods

REL_TOL = 1e-3  # the result is rounded down to 3 significant digits anyway


def weeks_touching(horizon_days: int) -> int:
    """The most calendar weeks a window of ``horizon_days`` consecutive dates can touch."""
    if horizon_days < 1:
        raise ValueError(f"a horizon has at least one day, got {horizon_days}")
    return -(-(horizon_days - 1) // WEEK_DAYS) + 1


def scopes_touching(horizon_days: int, unit: PrivacyUnit) -> int:
    """The most ledger scopes of a card-level ``unit`` a window of ``horizon_days`` dates can touch: weeks for
    ``card_period``, dates for ``card_day``."""
    return weeks_touching(horizon_days) if PrivacyUnit(unit) is PrivacyUnit.CARD_PERIOD else horizon_days


def scope_days(unit: PrivacyUnit) -> int:
    """The service dates of one scope of a card-level ``unit``."""
    return WEEK_DAYS if PrivacyUnit(unit) is PrivacyUnit.CARD_PERIOD else 1


def split(total_epsilon: float, total_delta: float) -> tuple[dict[str, float], dict[str, float]]:
    """The default per-marginal shares (1,1,1,1,2,2) scaled to ``total_epsilon``; delta split evenly."""
    weight = math.fsum(m.default_epsilon for m in MARGINALS)
    return ({m.name: total_epsilon * m.default_epsilon / weight for m in MARGINALS},
            {m.name: total_delta / len(MARGINALS) for m in MARGINALS})


def scope_costs(epsilon: float, delta: float, mechanism: Mechanism, design: Design,
                od_epsilon: float = 0.0, od_hierarchy_rho: float = 0.0,
                unit: PrivacyUnit = PrivacyUnit.CARD_PERIOD, extra: tuple[PrivacyCost, ...] = ()) -> list[PrivacyCost]:
    """What one release of a scope of ``unit`` charges one card: the six marginals at nominal (``epsilon``,
    ``delta``), one OD tree a date (none if ``od_epsilon`` is 0), one hierarchical OD release a date
    (``release.od.hierarchy``, rho-zCDP with delta 0; none if ``od_hierarchy_rho`` is 0) and ``extra`` (the other
    products' charges to the scope: the synthetic trips'). The costs depend neither on the bounds nor on the public
    domains, so the plan is built with the tightest bounds and one stop per mode."""
    eps, dlt = split(epsilon, delta)
    plan = build_plan(unit, eps, dlt, mechanism=mechanism, design=design,
                      bounds=ContributionBounds(max_trips_per_card_day=1, max_days_per_card=1), periods=Periods(),
                      stops=load_stops().groupby("mode", observed=True).head(1))
    return ([m.cost() for m in plan.mechanisms.values()] + od_day_costs(od_epsilon, od_hierarchy_rho) * scope_days(unit)
            + list(extra))


def od_day_costs(od_epsilon: float, od_hierarchy_rho: float) -> list[PrivacyCost]:
    """What the OD releases of one date charge one card: the tree (pure ``od_epsilon``) and the hierarchy
    (``od_hierarchy_rho``-zCDP, delta 0), each only when its budget is positive."""
    return ([PrivacyCost.approx_dp(od_epsilon, 0.0)] if od_epsilon > 0 else []) + (
        [PrivacyCost.zcdp(od_hierarchy_rho, 0.0)] if od_hierarchy_rho > 0 else [])


def scope_delta(cap_delta: float, scopes: int) -> float:
    """The nominal delta of one scope: half of the cap's delta to the scopes' own delta (threshold events,
    conversion), half left to the composition across scopes."""
    return cap_delta / (2 * scopes)


@lru_cache(maxsize=64)
def share_epsilon(cap_epsilon: float, cap_delta: float, scopes: int, mechanism: Mechanism, design: Design,
                  od_epsilon: float = 0.0, od_hierarchy_rho: float = 0.0,
                  unit: PrivacyUnit = PrivacyUnit.CARD_PERIOD, extra: tuple[PrivacyCost, ...] = ()) -> float:
    """The largest nominal per-scope epsilon (module docstring) whose ``scopes`` releases of a scope of ``unit`` fit
    the cap, rounded down to three significant digits; refuses a cap the OD releases alone exhaust."""
    delta = scope_delta(cap_delta, scopes)

    def fits(epsilon: float) -> bool:
        return within(scope_costs(epsilon, delta, mechanism, design, od_epsilon, od_hierarchy_rho, unit, extra) * scopes,
                      cap_epsilon, cap_delta)

    others = od_day_costs(od_epsilon, od_hierarchy_rho) * scope_days(unit) + list(extra)
    if others and not within(others * scopes, cap_epsilon, cap_delta):
        raise ValueError(f"the OD releases alone (tree epsilon {od_epsilon}, hierarchy rho {od_hierarchy_rho} a "
                         f"date, {scopes} scopes of {PrivacyUnit(unit).value}) exceed the person cap ({cap_epsilon}, "
                         f"{cap_delta}): lower them or turn them off")
    lo, hi = 0.0, cap_epsilon
    while hi - lo > REL_TOL * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo <= 0:
        raise ValueError(f"no budget fits the person cap ({cap_epsilon}, {cap_delta}) over {scopes} scopes")
    quantum = 10.0 ** (math.floor(math.log10(lo)) - 2)
    rounded = round(math.floor(lo / quantum) * quantum, 12)
    while not fits(rounded):  # checked as rounded: one quantum lower fits (less budget costs less)
        rounded = round(rounded - quantum, 12)
    return rounded
