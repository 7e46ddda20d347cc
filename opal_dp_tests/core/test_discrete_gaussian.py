"""The exact discrete Gaussian sampler and its tail bounds."""

from __future__ import annotations

import math
from functools import lru_cache
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import (
    MAX_SIGMA,
    DiscreteGaussian,
    _acceptance,
    error_bound,
    min_released_count,
    release_probability,
    tail_upper_bound,
)
from opal_dp.core.noise import floor_exp_neg
from opal_dp_tests.core.helpers import ALPHA, UINT64_MAX, ScriptedBits


@lru_cache(maxsize=16)
def _exact_pmf(sigma: float) -> tuple[int, np.ndarray]:
    """(k0, pmf over k0..-k0) at 60 digits, independent of the module under test."""
    s2 = Fraction(sigma) ** 2
    k0 = math.ceil(40 * sigma) + 10
    with localcontext() as ctx:
        ctx.prec = 60
        two_s2 = 2 * Decimal(s2.numerator) / Decimal(s2.denominator)
        weight = [(-(Decimal(k * k) / two_s2)).exp() for k in range(-k0, k0 + 1)]
        total = sum(weight)
        return -k0, np.array([float(w / total) for w in weight])


def exact_pmf(sigma: float, z: np.ndarray) -> np.ndarray:
    k0, pmf = _exact_pmf(float(sigma))
    index = np.asarray(z) - k0
    inside = (index >= 0) & (index < len(pmf))
    return np.where(inside, pmf[np.clip(index, 0, len(pmf) - 1)], 0.0)


def chi_square_pvalue(draws: np.ndarray, sigma: float, min_expected: float = 20.0) -> float:
    """Goodness of fit to the exact pmf: one bin per integer with expected count >= min_expected, plus the
    two tails."""
    n = draws.size
    a = 0
    while n * exact_pmf(sigma, np.array([a + 1]))[0] >= min_expected:
        a += 1
    inner = exact_pmf(sigma, np.arange(-a, a + 1))
    tail = (1 - inner.sum()) / 2
    expected = n * np.concatenate(([tail], inner, [tail]))
    observed = np.bincount(np.clip(draws, -a - 1, a + 1) + a + 1, minlength=2 * a + 3)
    if tail * n < min_expected:  # tails too thin to test on their own: fold them into the edge bins
        expected = n * inner
        observed = np.bincount(np.clip(draws, -a, a) + a, minlength=2 * a + 1)
        expected[0], expected[-1] = expected[0] + n * tail, expected[-1] + n * tail
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("sigma", [0.3, 0.7, 1.0, 2.5, 10.0, 60.0])
def test_draws_follow_the_exact_pmf(sigma):
    """Chi-square at 2*10^6 draws; fails falsely with probability 1e-6."""
    draws = DiscreteGaussian(SeededBits(int(sigma * 1000))).sample(sigma, 2_000_000)
    assert draws.dtype == np.int64
    assert chi_square_pvalue(draws, sigma) > ALPHA


@pytest.mark.parametrize("sigma", [1.0, 10.0])
def test_mean_and_variance(sigma):
    n = 2_000_000
    draws = DiscreteGaussian(SeededBits(5)).sample(sigma, n)
    z = np.arange(-math.ceil(40 * sigma) - 10, math.ceil(40 * sigma) + 11)
    var = float((exact_pmf(sigma, z) * z.astype(float) ** 2).sum())
    z_crit = stats.norm.isf(ALPHA / 4)
    assert abs(draws.mean()) <= z_crit * math.sqrt(var / n)
    fourth = float((exact_pmf(sigma, z) * z.astype(float) ** 4).sum())
    assert abs(draws.astype(float).var() - var) <= z_crit * math.sqrt((fourth - var**2) / n) + 4 * var / n


def test_secure_by_default_and_seeded_is_reproducible():
    assert DiscreteGaussian().seeded is False
    a, b = DiscreteGaussian(SeededBits(3)), DiscreteGaussian(SeededBits(3))
    assert a.seeded and np.array_equal(a.sample(4.0, 1000), b.sample(4.0, 1000))
    assert DiscreteGaussian().sample(4.0, 0).shape == (0,)


@pytest.mark.parametrize("sigma", [0, -1.0, math.nan, math.inf, MAX_SIGMA * 2, "1", True])
def test_rejects_bad_sigma(sigma):
    with pytest.raises(ValueError):
        DiscreteGaussian().sample(sigma, 3)



def test_sigma_up_to_max_sigma_and_no_further():
    """Kills the mutant ``0 < sigma < MAX_SIGMA`` (the largest sigma the proposal allows refused) and documents the
    other side: one float above ``MAX_SIGMA`` is refused."""
    assert DiscreteGaussian(SeededBits(8)).sample(MAX_SIGMA, 5).shape == (5,)
    with pytest.raises(ValueError, match="sigma"):
        DiscreteGaussian(SeededBits(8)).sample(math.nextafter(MAX_SIGMA, math.inf), 5)

def test_acceptance_words_are_exact():
    accept = _acceptance(2.5)
    assert accept.t == 3
    for a in (0, 1, 2, 7):
        x = (a - Fraction(25, 4) / 3) ** 2 / (2 * Fraction(25, 4))
        with localcontext() as ctx:
            ctx.prec = 200
            value = (-(Decimal(x.numerator) / Decimal(x.denominator))).exp() * Decimal(2) ** 64
        assert accept.word(a) == int(value) == floor_exp_neg(x, 64)


def test_a_tie_is_settled_by_the_next_digits():
    """Y = 0 from the Laplace proposal (two geometric draws of 0), then U equal to p(0)'s first word: the next
    word decides: just below p's second digit accepts (output 0)."""
    sigma = 2.5
    accept = _acceptance(sigma)
    d2 = accept.digit(0, 2)
    assert 0 < d2 < UINT64_MAX
    bits = ScriptedBits([UINT64_MAX, UINT64_MAX, accept.word(0), d2 - 1])  # G1 = G2 = 0: Y = 0; tie; accept
    assert DiscreteGaussian(bits).sample(sigma, 1).tolist() == [0] and bits.remaining == 0



@pytest.mark.parametrize("third", ["below", "above"])
def test_a_second_tie_moves_on_to_the_third_digit(third):
    """U equal to p(0)'s first word, then the next word equal to its second digit: the third word decides against the
    third digit (just below accepts; just above rejects, and a new proposal is drawn: Y = 0, U = 0 accepts). Kills the
    ``_below`` mutants that step to another digit after a tie (``j = 1``, ``j -= 1``, ``j += 2``): one of the two
    scripts then ends at the wrong word."""
    sigma = 2.5
    accept = _acceptance(sigma)
    d2, d3 = accept.digit(0, 2), accept.digit(0, 3)
    assert 0 < d3 < UINT64_MAX
    words = [UINT64_MAX, UINT64_MAX, accept.word(0), d2] + ([d3 - 1] if third == "below" else
                                                          [d3 + 1, UINT64_MAX, UINT64_MAX, 0])
    bits = ScriptedBits(words)
    assert DiscreteGaussian(bits).sample(sigma, 1).tolist() == [0] and bits.remaining == 0

@settings(max_examples=200, deadline=None)
@given(sigma=st.floats(0.5, 300.0), l0=st.integers(1, 200), linf=st.integers(1, 4), delta=st.floats(1e-14, 0.1))
def test_threshold_bounds_the_exact_tail(sigma, l0, linf, delta):
    """l0 * P(Z >= m - linf) <= delta for the exact discrete tail; one less would not pass the rigorous bound."""
    m = min_released_count(sigma, l0, linf, delta)
    assert m > linf
    exact = release_probability(linf, sigma, m)
    assert l0 * exact <= delta * (1 + 1e-6)
    assert l0 * tail_upper_bound(sigma, m - linf) <= delta
    assert m - linf == 1 or l0 * tail_upper_bound(sigma, m - linf - 1) > delta


@pytest.mark.parametrize("sigma", [0.8, 3.0, 10.0, 47.5])
def test_tail_bound_is_an_upper_bound_and_tight(sigma):
    for t in range(1, math.ceil(8 * sigma)):
        exact = release_probability(0, sigma, t)
        if exact < 1e-250:
            break
        bound = tail_upper_bound(sigma, t)
        assert exact <= bound
        if sigma >= 10 and t - 0.5 >= sigma:
            assert bound <= exact * 1.1  # the midpoint bound loses little where card_period thresholds lie



_PI_100 = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706")


def _normal_tail(x: float) -> Decimal:
    """``Q(x) = P(N(0, 1) >= x)`` at 100 digits for ``0 <= x <= 8``: ``erfc`` by its Taylor series (the terms reach
    ``e**32 ~ 1e14``, so 100 digits keep over 80 after the cancellation)."""
    with localcontext() as ctx:
        ctx.prec = 100
        y = Decimal(x) / Decimal(2).sqrt()
        term, total, n = y, y, 0
        while abs(term) > Decimal(10) ** -95:
            n += 1
            term = -term * y * y / n
            total += term / (2 * n + 1)
        erf = 2 / _PI_100.sqrt() * total
        return (1 - erf) / 2


@pytest.mark.parametrize("sigma", [0.8, 3.0, 10.0, 47.5])
def test_tail_bound_covers_the_float_error_of_erfc(sigma):
    """The tail bound is ``Q`` inflated by a relative 1e-9 that covers ``math.erfc``'s float error. Kills the
    mutant that drops the inflation: the bound then equals ``Q`` only to a few ulp, either side, and the threshold
    built on it could be one too low."""
    for t in range(1, math.ceil(8 * sigma)):
        shift = 0.5 if t - 0.5 >= sigma else 1.0
        exact = _normal_tail((t - shift) / sigma)
        assert Decimal(tail_upper_bound(sigma, t)) >= exact * (1 + Decimal("5e-10"))

def test_release_probability_and_error_bound_match_the_pmf():
    sigma = 6.2
    z = np.arange(-300, 301)
    pmf = exact_pmf(sigma, z)
    for n, m in [(0, 10), (5, 12), (40, 30), (1, 1)]:
        assert release_probability(n, sigma, m) == pytest.approx(pmf[z >= m - n].sum(), rel=1e-9, abs=1e-300)
    e = error_bound(sigma, 0.95)
    assert pmf[np.abs(z) <= e].sum() >= 0.95 > pmf[np.abs(z) <= e - 1].sum()
    assert error_bound(sigma) == e  # the default confidence is 0.95
    assert release_probability(10_000, sigma, 12) == 1.0  # a count far above the threshold is always released
    assert release_probability(0, sigma, 10_000) == 0.0  # and one far below it never
