"""Direct tests of ``core.accounting`` through its public functions: cost validation, basic composition, zCDP
composition and its conversion, checked against the Canonne-Kamath-Steinke bound computed here independently."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core.accounting import MONOTONE_BEYOND, PrivacyCost, compose, within, zcdp_epsilon, zcdp_rho_for


def cks_delta(epsilon: float, rho: float) -> float:
    """CKS 2020 (Prop. 12): a rho-zCDP mechanism is (epsilon, delta)-DP for
    delta = inf_{a > 1} exp((a-1)(a rho - epsilon)) / (a-1) * (1 - 1/a)^a, minimised on a fine log grid."""
    a = np.exp(np.linspace(math.log(1 + 1e-9), math.log(1e5), 200_001))
    log_delta = (a - 1) * (a * rho - epsilon) - np.log(a - 1) + a * np.log1p(-1 / a)
    return float(np.exp(log_delta.min()))


@pytest.mark.parametrize("kwargs, reason", [
    ({"measure": "pure", "epsilon": 1.0, "rho": 0.0, "delta": 0.0}, "measure must be approx_dp or zcdp, got 'pure'"),
    ({"measure": "approx_dp", "epsilon": -1.0, "rho": 0.0, "delta": 0.0}, "epsilon must be a finite number >= 0, got -1.0"),
    ({"measure": "approx_dp", "epsilon": math.nan, "rho": 0.0, "delta": 0.0}, "epsilon must be a finite number >= 0, got nan"),
    ({"measure": "approx_dp", "epsilon": math.inf, "rho": 0.0, "delta": 0.0}, "epsilon must be a finite number >= 0, got inf"),
    ({"measure": "approx_dp", "epsilon": True, "rho": 0.0, "delta": 0.0}, "epsilon must be a finite number >= 0, got True"),
    ({"measure": "approx_dp", "epsilon": 1.0, "rho": 0.0, "delta": 1.0}, "delta must be < 1, got 1.0"),
    ({"measure": "approx_dp", "epsilon": 0.0, "rho": 0.0, "delta": 0.1}, "an approx_dp cost has epsilon > 0 and rho = 0"),
    ({"measure": "approx_dp", "epsilon": 1.0, "rho": 0.5, "delta": 0.0}, "an approx_dp cost has epsilon > 0 and rho = 0"),
    ({"measure": "zcdp", "epsilon": 1.0, "rho": 0.5, "delta": 0.0}, "a zcdp cost has rho > 0 and epsilon = 0"),
    ({"measure": "zcdp", "epsilon": 0.0, "rho": 0.0, "delta": 0.0}, "a zcdp cost has rho > 0 and epsilon = 0"),
])
def test_invalid_costs_are_refused_with_their_reason(kwargs, reason):
    with pytest.raises(ValueError, match=f"^{re.escape(reason)}$"):
        PrivacyCost(**kwargs)


def test_nothing_composed_costs_nothing():
    g = compose([])
    assert (g.epsilon, g.delta, g.rho, g.composition) == (0.0, 0.0, None, "nothing released")
    assert within([], 0.0, 0.0)


def test_approx_dp_costs_add_up():
    costs = [PrivacyCost.approx_dp(e, d) for e, d in ((1.0, 1e-7), (0.5, 2e-7), (2.0, 0.0), (0.1, 1e-9))]
    g = compose(costs)
    assert g.epsilon == pytest.approx(3.6, rel=1e-15) and g.delta == pytest.approx(3.01e-7, rel=1e-12)
    assert g.rho is None and g.composition == "basic composition"
    # with a delta target the accountant may find a tighter route (RDP, PLD), never a looser one
    assert compose(costs, delta_target=0.5).epsilon <= g.epsilon


def test_zcdp_needs_a_delta_target():
    with pytest.raises(ValueError, match=r"^composing zCDP needs a delta_target in \(0, 1\), got None$"):
        compose([PrivacyCost.zcdp(0.1, 0.0)])
    for target in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^delta_target must lie in \(0, 1\), got {target}$"):
            compose([PrivacyCost.zcdp(0.1, 0.0)], delta_target=target)


@pytest.mark.parametrize("rhos, deltas, target", [
    ((0.1,), (0.0,), 1e-6), ((0.02, 0.03, 0.05), (1e-8, 1e-8, 2e-8), 1e-6), ((1.0, 1.0), (0.0, 0.0), 1e-9),
])
def test_zcdp_rho_adds_up_and_converts_at_the_remaining_delta(rhos, deltas, target):
    g = compose([PrivacyCost.zcdp(r, d) for r, d in zip(rhos, deltas)], delta_target=target)
    rho, remaining = sum(rhos), target - sum(deltas)
    assert g.rho == pytest.approx(rho, rel=1e-15) and g.delta == target
    assert cks_delta(g.epsilon, rho) == pytest.approx(remaining, rel=1e-6)  # the tight epsilon at that delta
    assert g.epsilon < rho + 2 * math.sqrt(rho * math.log(1 / remaining))  # better than Bun-Steinke's bound


def test_pure_dp_parts_are_never_worse_than_entering_zcdp_as_epsilon_squared_over_two():
    """An epsilon-DP part is (epsilon^2/2)-zCDP: that route is one of the accountant's, so the composition is at
    most what it gives (the accountant takes the tightest valid route, ``core.accounting``)."""
    mixed = compose([PrivacyCost.approx_dp(1.0, 1e-8), PrivacyCost.zcdp(0.25, 1e-8)], delta_target=1e-6)
    same = compose([PrivacyCost.zcdp(0.75, 2e-8)], delta_target=1e-6)
    assert mixed.epsilon <= same.epsilon * (1 + 1e-12) and mixed.delta <= 1e-6


def test_threshold_deltas_that_use_up_the_target_give_infinite_epsilon():
    g = compose([PrivacyCost.zcdp(0.1, 5e-7), PrivacyCost.zcdp(0.1, 5e-7)], delta_target=1e-6)
    assert g.epsilon == math.inf


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-7), (8.0, 6e-7), (0.1, 1e-5)])
def test_rho_for_is_the_largest_rho_within_epsilon(epsilon, delta):
    rho = zcdp_rho_for(epsilon, delta)
    assert zcdp_epsilon(rho, delta) <= epsilon
    assert zcdp_epsilon(rho * (1 + 1e-9), delta) > epsilon
    assert cks_delta(epsilon, rho) == pytest.approx(delta, rel=1e-5)


def test_rho_for_refuses_an_epsilon_that_no_rho_reaches():
    """At epsilon 0 the search has nowhere to go: it must refuse rather than return rho 0 (a mechanism of infinite
    noise). Kills the mutants that move the ``lo == 0`` check or drop its reason."""
    with pytest.raises(ValueError, match="no rho > 0 reaches epsilon 0.0 at delta 1e-06"):
        zcdp_rho_for(0.0, 1e-6)


@pytest.mark.parametrize("rho, delta", [(0.0, 1e-6), (-1.0, 1e-6), (0.1, 0.0), (0.1, 1.0)])
def test_conversion_refuses_bad_arguments(rho, delta):
    with pytest.raises(ValueError, match=f"need rho > 0 and 0 < delta < 1, got rho={rho!r}, delta={delta!r}"):
        zcdp_epsilon(rho, delta)


def test_within_holds_both_coordinates_of_the_cap():
    """``within`` is the ledger's cap check. Each coordinate binds on its own: on the fast path (every piece
    approx_dp, plain sums) and through ``compose`` (a zCDP piece), an epsilon far below the cap does not excuse a
    delta above it, and equality with the cap fits. Kills the mutants that drop the delta comparison of either
    path, or move the cap on either coordinate."""
    pure = [PrivacyCost.approx_dp(1.0, 1e-7)] * 2
    assert within(pure, 2.0, 2e-7) and within(pure, 100.0, 2e-7)
    assert not within(pure, 100.0, 1.9e-7) and not within(pure, 1.99, 2e-7)
    mixed = [PrivacyCost.approx_dp(1.0, 1e-7), PrivacyCost.zcdp(0.01, 1e-7)]
    assert within(mixed, 100.0, 3e-7)
    assert not within(mixed, 100.0, 2e-7)  # the pieces' own deltas use the whole target: epsilon is infinite
    assert not within(mixed, compose(mixed, 3e-7).epsilon * 0.999, 3e-7)
    assert within(mixed, compose(mixed, 3e-7).epsilon, 3e-7)  # equality fits through compose too
    assert within([], 1e-9, 1e-12)


def _plain_bisection(epsilon: float, delta: float) -> float:
    """The search as it was: OpenDP asked at every midpoint."""
    lo, hi = 0.0, epsilon
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if zcdp_epsilon(mid, delta) <= epsilon else (lo, mid)
    return lo


@settings(max_examples=25, deadline=None)
@given(epsilon=st.floats(0.01, 40.0), delta_exponent=st.floats(-12.0, -3.0))
def test_rho_for_gives_exactly_what_asking_openDP_at_every_step_gives(epsilon, delta_exponent):
    delta = 10.0 ** delta_exponent
    zcdp_rho_for.cache_clear()
    assert zcdp_rho_for(epsilon, delta) == _plain_bisection(epsilon, delta)


@pytest.mark.parametrize("epsilon, delta", [(2.0, 1e-8), (0.3, 4e-9), (5.0, 1e-7), (20.0, 1e-6)])
def test_openDP_conversion_is_monotone_beyond_the_replay_margin(epsilon, delta):
    """``MONOTONE_BEYOND``: around the boundary, points 1e-14 apart (a tenth of the margin) never decrease; adjacent
    floats sometimes do, which is why the search asks OpenDP there."""
    rho = zcdp_rho_for(epsilon, delta)
    values = [zcdp_epsilon(rho * (1 + k * MONOTONE_BEYOND / 10), delta) for k in range(-150, 150)]
    assert all(a <= b for a, b in zip(values, values[1:]))
