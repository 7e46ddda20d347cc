"""The default budget of a card-level release: the largest budget per ledger scope (a calendar week for
``card_period``, a service date for ``card_day``) that the person cap allows in every scope of the horizon.

The person account (``core.ledger``) refuses a charge that takes any window of ``horizon_days`` consecutive
service dates past the person cap, and a card_period charge covers its whole week; a window of h days touches
at most ``scopes_touching(h, unit)`` scopes (365 days: 53 weeks, or 365 dates). The share is therefore the largest
nominal per-scope epsilon E such that that many releases -- each the six marginals at E (split 1,1,1,1,2,2 as in
2016) and ``cap_delta / (2 * scopes)``, plus what the other enabled products charge the scope (``release.products``:
the OD trees, the hierarchical OD release with the daily totals, the synthetic trips) -- composed by the ledger's own
accountant (``core.accounting``) stay within the cap. The costs are those the plans charge (``build_plan``, each
product's own cost function), so the ledger charges exactly what was planned, and a release every week of the year
is never refused. The search result is rounded down to three significant digits (a smaller budget only costs less).
Everything here is public: the cap, the horizon and the plan, never the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyCost, PrivacyUnit
from opal_dp.core.accounting import compose, within
from opal_dp.network import load_stops
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import WEEK_DAYS, Periods

REL_TOL = 1e-3  # the result is rounded down to 3 significant digits anyway
SMALLEST = 2.0**-64  # a share below this fraction of the cap is no budget: the bisection stops


def weeks_touching(horizon_days: int) -> int:
    """The most calendar weeks a window of ``horizon_days`` consecutive dates can touch."""
    if horizon_days < 1:
        raise ValueError(f"a horizon has at least one day, got {horizon_days}")
    return -(-(horizon_days - 1) // WEEK_DAYS) + 1


def scopes_touching(horizon_days: int, unit: PrivacyUnit) -> int:
    """The most ledger scopes of a card-level ``unit`` a window of ``horizon_days`` dates can touch: weeks for
    ``card_period``, dates for ``card_day``."""
    return weeks_touching(horizon_days) if unit is PrivacyUnit.CARD_PERIOD else horizon_days


def split(total_epsilon: float, total_delta: float) -> tuple[dict[str, float], dict[str, float]]:
    """The default per-marginal shares (1,1,1,1,2,2) scaled to ``total_epsilon``; delta split evenly."""
    weight = math.fsum(m.default_epsilon for m in MARGINALS)
    return ({m.name: total_epsilon * m.default_epsilon / weight for m in MARGINALS},
            {m.name: total_delta / len(MARGINALS) for m in MARGINALS})


def one_stop_per_mode() -> pd.DataFrame:
    """The smallest public domain a plan builds on: the marginals' costs depend on no domain."""
    return load_stops().groupby("mode", observed=True).head(1)


def scope_costs(epsilon: float, delta: float, mechanism: Mechanism, design: Design,
                unit: PrivacyUnit = PrivacyUnit.CARD_PERIOD, others: tuple[PrivacyCost, ...] = (),
                stops: pd.DataFrame | None = None) -> list[PrivacyCost]:
    """What one release of a scope of ``unit`` charges one card: the six marginals at nominal (``epsilon``,
    ``delta``) and ``others`` (the other products' charges to the scope, ``release.products.product_costs``). The
    marginals' costs depend neither on the bounds nor on the public domains, so the plan is built with the tightest
    bounds and one stop per mode (``stops``, else ``one_stop_per_mode()``)."""
    eps, dlt = split(epsilon, delta)
    plan = build_plan(unit, eps, dlt, mechanism=mechanism, design=design,
                      bounds=ContributionBounds(max_trips_per_card_day=1, max_days_per_card=1), periods=Periods(),
                      stops=one_stop_per_mode() if stops is None else stops)
    return [m.cost() for m in plan.mechanisms.values()] + list(others)


def scope_delta(cap_delta: float, scopes: int) -> float:
    """The nominal delta of one scope: half of the cap's delta to the scopes' own delta (threshold events,
    conversion), half left to the composition across scopes."""
    return cap_delta / (2 * scopes)


def bisection(fits: Callable[[float], bool], top: float, guess: float | None = None) -> tuple[float, float]:
    """The bisection of [0, ``top``] until its width is ``REL_TOL`` of its top, each midpoint asked ``fits``
    (monotone: true below some boundary, false above): its last (lo, hi). With ``guess`` (an estimate of that
    boundary) the midpoints are compared with the guess instead, and ``fits`` is asked at the two ends reached: when
    lo fits (or no midpoint did) and hi does not (or every midpoint did), every midpoint was answered as ``fits``
    answers it -- one answered yes is at most lo, one answered no at least hi -- so the ends are those of asking
    ``fits`` at every step; else that bisection answers. Two questions instead of about fifteen (with the guess's
    own six margins: the default share 0.61 s -> 0.36 s in a fresh process)."""
    ask = fits if guess is None else (lambda epsilon: epsilon <= guess)
    lo, hi = 0.0, top
    while hi - lo > REL_TOL * hi and hi > top * SMALLEST:  # below, nothing fits (``share_epsilon`` refuses lo 0)
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ask(mid) else (lo, mid)
    if guess is not None and not ((lo == 0.0 or fits(lo)) and (hi == top or not fits(hi))):
        return bisection(fits, top)
    return lo, hi


def boundary_estimate(margin: Callable[[float], float], start: float, steps: int = 8) -> float | None:
    """Where ``margin`` (increasing, continuous: the composed epsilon less the cap) crosses 0, by the secant from
    ``start`` and twice it, to a relative 1e-6; None where it does not settle (``bisection`` then asks at every
    step). Only a guide: ``bisection`` checks what it gives."""
    try:
        a, b = start, 2 * start
        f_a, f_b = margin(a), margin(b)
        for _ in range(steps):
            if not (math.isfinite(f_a) and math.isfinite(f_b)) or f_a == f_b:
                return None
            a, b, f_a = b, b - f_b * (b - a) / (f_b - f_a), f_b
            if not b > 0:
                return None
            if abs(b - a) <= 1e-6 * b:
                return b
            f_b = margin(b)
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    return None


@lru_cache(maxsize=64)
def share_epsilon(cap_epsilon: float, cap_delta: float, scopes: int, mechanism: Mechanism, design: Design,
                  unit: PrivacyUnit = PrivacyUnit.CARD_PERIOD, others: tuple[PrivacyCost, ...] = ()) -> float:
    """The largest nominal per-scope epsilon (module docstring) whose ``scopes`` releases of a scope of ``unit``, with
    ``others`` in each, fit the cap, rounded down to three significant digits; refuses a cap ``others`` alone
    exhaust."""
    delta, stops = scope_delta(cap_delta, scopes), one_stop_per_mode()  # the stop list read once, not at each step

    def costs(epsilon: float) -> list[PrivacyCost]:
        return scope_costs(epsilon, delta, mechanism, design, unit, others, stops) * scopes

    def fits(epsilon: float) -> bool:
        return within(costs(epsilon), cap_epsilon, cap_delta)

    if others and not within(list(others) * scopes, cap_epsilon, cap_delta):
        raise ValueError(f"the other products alone ({len(others)} charges a scope of {unit.value}, "
                         f"{scopes} scopes) exceed the person cap ({cap_epsilon}, {cap_delta}): lower their budgets "
                         "or turn them off")
    guide = None if mechanism.pure else boundary_estimate(  # Laplace: within's basic sums beat composing
        lambda epsilon: compose(costs(epsilon), cap_delta).epsilon - cap_epsilon, cap_epsilon / scopes)
    lo, _ = bisection(fits, cap_epsilon, guide)
    if lo <= 0:
        raise ValueError(f"no budget fits the person cap ({cap_epsilon}, {cap_delta}) over {scopes} scopes")
    quantum = 10.0 ** (math.floor(math.log10(lo)) - 2)
    rounded = round(math.floor(lo / quantum) * quantum, 12)
    while not fits(rounded):  # checked as rounded: one quantum lower fits (less budget costs less)
        rounded = round(rounded - quantum, 12)
    return rounded
