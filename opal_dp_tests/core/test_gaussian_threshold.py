"""The thresholded discrete Gaussian: parameters, OpenDP's privacy map as an oracle, and planted bugs.

OpenDP 0.16's ``make_gaussian_threshold`` releases a key when ``noisy >= threshold`` (as we do), and its map
gives the same rho. Its delta, however, is the *continuous* Gaussian tail ``P(N(0, sigma²) > threshold - linf)``,
while a discrete Gaussian key of count ``linf`` is released with probability ``P(Z >= threshold - linf)``, larger:
at sigma = 10, threshold 40, count 1 the measured release rate is 5.9e-5 (exact 5.867e-5) where the map says
4.81e-5 (checked below, like opendp/opendp#2922 for the Laplace). Our threshold bounds the exact discrete tail,
so we compare with OpenDP both at our threshold (where OpenDP must report at most our delta) and at
threshold - 1 (where OpenDP's continuous tail exceeds the exact discrete one and brackets it from above).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import ContributionBounds, PrivacyCost, PrivacyUnit, Relation, SeededBits, Sensitivity
from opal_dp.core.discrete_gaussian import MAX_SIGMA, DiscreteGaussian, error_bound, release_probability
from opal_dp.core.gaussian_threshold import GaussianThresholdHistogram, sigma_for
from opal_dp.release.marginals.plan import build_plan
from opal_dp_tests.core.helpers import binomial_interval
from opal_dp_tests.core.test_opendp_oracle import NOMINAL, PERIOD
from opal_dp.release.periods import Periods

dp.enable_features("contrib")
SPACE = (dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64)),
         dp.l02inf_distance(dp.absolute_distance(T=dp.i64)))


def opendp_map(mech: GaussianThresholdHistogram, threshold: int) -> tuple[float, float]:
    s = mech.sensitivity
    meas = dp.m.make_gaussian_threshold(*SPACE, scale=mech.sigma, threshold=threshold)
    return meas.map((s.l0, math.ceil(math.sqrt(s.l2_squared)), s.linf))


def exact_delta(mech: GaussianThresholdHistogram) -> float:
    s = mech.sensitivity
    return s.l0 * release_probability(s.linf, mech.sigma, mech.min_released_count)


@pytest.mark.parametrize("unit", list(PrivacyUnit))
@pytest.mark.parametrize("relation", list(Relation))
@pytest.mark.parametrize("bounds", [ContributionBounds(), ContributionBounds(3, 1, 10), ContributionBounds(4, 2)])
def test_every_unit_with_the_gaussian_within_opendp_accounting(unit, relation, bounds):
    """(unit, gaussian): rho equals OpenDP's (L2 = sqrt(L0) * Linf, as OpenDP bounds it, when that is the
    sensitivity); delta covers the exact discrete tail and OpenDP's map at our threshold."""
    plan = build_plan(unit, *NOMINAL, relation=relation, mechanism="gaussian", bounds=bounds, periods=Periods(PERIOD))
    for mech in plan.mechanisms.values():
        rho, delta = opendp_map(mech, mech.min_released_count)
        s = mech.sensitivity
        ours = s.l2_squared / (2 * mech.sigma**2)
        assert ours <= mech.rho * (1 + 1e-12)
        assert rho == pytest.approx(min(s.l0 * s.linf**2, math.ceil(math.sqrt(s.l2_squared)) ** 2) / (2 * mech.sigma**2))
        assert delta <= mech.delta and exact_delta(mech) <= mech.delta
        assert opendp_map(mech, mech.min_released_count - 1)[1] >= exact_delta(mech)


def test_opendp_gaussian_threshold_understates_delta():
    """sigma 2, threshold 5, count 1: released at rate P(Z >= 4) = 0.0385 (exact, measured); the map says
    P(N(0, 4) > 4) = 0.02275. (At sigma 10, threshold 40: 5.87e-5 against 4.81e-5.)"""
    meas = dp.m.make_gaussian_threshold(*SPACE, scale=2.0, threshold=5)
    n = 100_000
    released = len(meas({i: 1 for i in range(n)}))
    lo, hi = binomial_interval(released, n)
    exact = release_probability(1, 2.0, 5)
    assert lo <= exact <= hi and exact == pytest.approx(0.038488, rel=1e-4)
    reported = meas.map((1, 1, 1))[1]
    assert reported == pytest.approx(0.022750, rel=1e-4) and reported < lo
    assert release_probability(1, 10.0, 40) == pytest.approx(5.867e-5, rel=1e-3)
    assert dp.m.make_gaussian_threshold(*SPACE, scale=10.0, threshold=40).map((1, 1, 1))[1] == pytest.approx(
        4.8096e-5, rel=1e-3)


@settings(max_examples=500, deadline=None)
@given(st.floats(1e-6, 100.0), st.integers(1, 10**6))
def test_sigma_is_the_smallest_float_that_keeps_rho_for_any_parameters(rho, l2):
    """The rounding argument of ``sigma_for``'s docstring, checked in exact rationals on arbitrary parameters: the
    float below the answer breaks rho (kills an answer raised or left a float too high), the answer keeps it."""
    sigma = sigma_for(rho, l2)
    assert Fraction(l2) / (2 * Fraction(sigma) ** 2) <= Fraction(rho)
    assert Fraction(l2) / (2 * Fraction(math.nextafter(sigma, 0)) ** 2) > Fraction(rho)


def test_sigma_is_the_smallest_that_keeps_rho():
    for rho, l2 in [(0.25, 56), (0.123, 4), (1.0, 1), (0.01, 3)]:
        sigma = sigma_for(rho, l2)
        assert Fraction(l2) / (2 * Fraction(sigma) ** 2) <= Fraction(rho)
        assert Fraction(l2) / (2 * Fraction(math.nextafter(sigma, 0)) ** 2) > Fraction(rho)
    # exact cases: l2 / (2 sigma²) == rho holds with equality, and that sigma is the one (not the next float)
    assert (sigma_for(1.0, 2), sigma_for(0.5, 4), sigma_for(0.125, 16)) == (1.0, 2.0, 8.0)


def test_describe_and_cost():
    mech = GaussianThresholdHistogram(0.25, 1e-7, Sensitivity(56, 56, 56, 1), DiscreteGaussian(SeededBits(1)))
    d = mech.describe()
    assert d["mechanism"] == "gaussian_threshold_histogram" and d["noise"] == "discrete_gaussian"
    assert d["sigma"] == d["scale"] == mech.sigma and d["seeded"] is True
    assert mech.cost() == PrivacyCost.zcdp(0.25, 1e-7)
    assert GaussianThresholdHistogram(0.25, 1e-7, Sensitivity(56, 56, 56, 1)).describe()["seeded"] is False
    assert mech.scale == mech.sigma and mech.threshold == float(mech.min_released_count)
    assert mech.error_bound() == error_bound(mech.sigma, 0.95) and mech.error_bound(0.99) == error_bound(mech.sigma, 0.99)
    assert mech.error_bound(0.99) > mech.error_bound()
    assert d == {  # the ledger records exactly this: every key is read back by the statement and the checks
        "mechanism": "gaussian_threshold_histogram", "noise": "discrete_gaussian", "rho": 0.25, "delta": 1e-7,
        "sigma": mech.sigma, "scale": mech.sigma, "threshold": float(mech.min_released_count),
        "min_released_count": mech.min_released_count, "sensitivity": {"l0": 56, "l1": 56, "l2_squared": 56, "linf": 1},
        "cost": {"measure": "zcdp", "epsilon": 0.0, "rho": 0.25, "delta": 1e-7}, "seeded": True,
    }


@pytest.mark.parametrize("rho", [0, 0.0, -0.5, math.inf, -math.inf, math.nan, True, "0.5"])
def test_a_rho_that_is_not_finite_and_positive_is_refused(rho):
    """Mutation testing: rho = inf would give sigma = 0 (no noise), rho = 0 an infinite sigma."""
    with pytest.raises(ValueError, match="rho must be finite and > 0"):
        GaussianThresholdHistogram(rho, 1e-7, Sensitivity(4, 4, 4, 1))


@pytest.mark.parametrize("delta", [0, 0.0, 1, 1.0, 1.5, -1e-7, math.nan, math.inf, True, "1e-7"])
def test_a_delta_outside_zero_one_is_refused(delta):
    """Mutation testing: delta = 1 gives a threshold that releases absent-looking bins freely; delta = 0 none."""
    with pytest.raises(ValueError, match="delta must satisfy 0 < delta < 1"):
        GaussianThresholdHistogram(0.5, delta, Sensitivity(4, 4, 4, 1))


def test_a_sensitivity_must_be_a_sensitivity():
    with pytest.raises(ValueError, match="sensitivity must be a Sensitivity"):
        GaussianThresholdHistogram(0.5, 1e-7, {"l0": 4, "l1": 4, "l2_squared": 4, "linf": 1})


def test_sigma_up_to_the_samplers_limit_and_no_further():
    """sigma exactly MAX_SIGMA is allowed (rho found by search below); the next smaller rho is refused."""
    rho = 4 / (2 * MAX_SIGMA**2)
    while sigma_for(rho, 4) != MAX_SIGMA:
        rho = math.nextafter(rho, math.inf)
    assert GaussianThresholdHistogram(rho, 1e-7, Sensitivity(4, 4, 4, 1)).sigma == MAX_SIGMA
    with pytest.raises(ValueError, match="rho too small for l2_squared = 4"):
        GaussianThresholdHistogram(math.nextafter(rho / 1.001, 0), 1e-7, Sensitivity(4, 4, 4, 1))


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(1, 10**9), max_size=200), seed=st.integers(0, 2**32))
def test_release_never_shows_a_count_below_the_threshold(counts, seed):
    mech = GaussianThresholdHistogram(0.5, 1e-6, Sensitivity(4, 4, 4, 1), DiscreteGaussian(SeededBits(seed)))
    out = mech.release(np.array(counts, dtype=np.int64))
    assert out.shape == (len(counts),) and np.all((out == 0) | (out >= mech.min_released_count))


def test_count_linf_is_released_at_the_stated_rate():
    """delta = 0.01 so the event is frequent: a bin of count linf shows at rate release_probability(linf) <= delta/l0."""
    mech = GaussianThresholdHistogram(0.5, 0.01, Sensitivity(4, 4, 8, 2), DiscreteGaussian(SeededBits(2)))
    n = 1_000_000
    released = int(np.count_nonzero(mech.release(np.full(n, 2, dtype=np.int64))))
    lo, hi = binomial_interval(released, n)
    assert lo <= mech.release_probability(2) <= hi and mech.release_probability(2) <= 0.01 / 4


# --- planted bugs, shown by exact computation on a concrete neighbouring pair -------------------------------


def gaussian_loss(shift: float, sigma: float) -> float:
    """rho of a discrete Gaussian with integer shift: shift²/(2 sigma²) (CKS 2020, Prop. 5)."""
    return shift**2 / (2 * sigma**2)


def test_sigma_ignoring_linf_overspends_on_a_card_piling_into_one_bin():
    """Bounds m = 3, b = 3: one card can put 3 trips in one bin. The real sigma covers that pile; a sigma computed
    from l0 (as if each bin moved by 1) lets the same card cost three times the stated rho."""
    sens = Sensitivity(3, 3, 9, 3)
    real = GaussianThresholdHistogram(0.2, 1e-6, sens)
    bug_sigma = sigma_for(0.2, sens.l0)
    assert gaussian_loss(3, real.sigma) <= 0.2 < gaussian_loss(3, bug_sigma) == pytest.approx(0.6)


def test_threshold_ignoring_l0_overspends_delta_on_a_card_in_fresh_bins():
    """A card with one trip in each of 4 bins no one else used: with the threshold computed as if it touched one
    bin, the chance one of them shows is about 4x the stated delta."""
    sens = Sensitivity(4, 4, 4, 1)
    real = GaussianThresholdHistogram(0.5, 1e-3, sens)
    from opal_dp.core.discrete_gaussian import min_released_count

    bug_m = min_released_count(real.sigma, 1, 1, 1e-3)
    any_real = 1 - (1 - release_probability(1, real.sigma, real.min_released_count)) ** 4
    any_bug = 1 - (1 - release_probability(1, real.sigma, bug_m)) ** 4
    assert any_real <= 1e-3 < any_bug
