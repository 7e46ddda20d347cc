"""The daily totals (``core.totals``): the sensitivity bound is the worst change one card-day makes (checked against
every card-day of small bounds), the per-mode rule counts a card-day's first trips of a mode only, sigma is the
smallest that keeps rho, every cell gets noise of that scale, and bad parameters are refused by name."""

from __future__ import annotations

import itertools
import math

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.totals import TotalsBudget, card_day_totals, date_cost, measure_totals, totals_l2_squared

ALPHA = 1e-6
MODES = 3
dp.enable_features("contrib")


def worst_change(max_items: int, max_per_mode: int) -> int:
    """Brute force: the largest sum of squares one card-day adds to the (mode, tap) totals, over every card-day of
    up to ``max_items`` trips in ``MODES`` modes, each trip with or without a tap-off."""
    worst = 0
    for n in range(1, max_items + 1):
        for modes in itertools.product(range(MODES), repeat=n):
            for off in itertools.product((False, True), repeat=n):
                counts = card_day_totals(np.array([modes]), np.array([off]), max_per_mode, MODES)
                worst = max(worst, int((counts**2).sum()))
    return worst


@pytest.mark.parametrize("max_items,max_per_mode", [(1, 1), (2, 1), (3, 2), (4, 2), (4, 3), (5, 2), (5, 3), (4, 4)])
def test_the_sensitivity_is_the_worst_change_of_one_card_day(max_items, max_per_mode):
    assert totals_l2_squared(max_items, max_per_mode) == worst_change(max_items, max_per_mode)


def test_a_card_day_counts_its_first_trips_of_a_mode_only():
    modes = np.array([[0, 0, 0, 1], [2, 0, -1, -1], [-1, -1, -1, -1]])
    off = np.array([[True, False, True, True], [True, True, False, False], [False, False, False, False]])
    counts = card_day_totals(modes, off, 2, MODES)
    assert counts.tolist() == [[3, 2], [1, 1], [1, 1]]  # mode 0: two of the first card-day (the third dropped), one
    assert counts.dtype == np.int64
    assert card_day_totals(modes, off, 4, MODES).tolist() == [[4, 3], [1, 1], [1, 1]]
    assert card_day_totals(modes, off.astype(int), 2, MODES).tolist() == counts.tolist()  # a 0/1 tap-off flag
    assert card_day_totals(np.zeros((0, 4), dtype=int), np.zeros((0, 4), dtype=bool), 2, MODES).tolist() == [[0, 0]] * 3
    with pytest.raises(ValueError, match="card-days x slots"):
        card_day_totals(modes.ravel(), off.ravel(), 2, MODES)
    for bad in (MODES, -2):  # a mode index past the domain, or below the empty slot's -1
        with pytest.raises(ValueError, match="mode indices below"):
            card_day_totals(np.where(modes == 1, bad, modes), off, 2, MODES)


@given(st.lists(st.lists(st.integers(-1, MODES - 1), min_size=4, max_size=4), min_size=1, max_size=30),
       st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_the_totals_count_each_kept_trip_once_and_never_more_than_the_bound(rows, max_per_mode):
    modes = np.array(rows)
    off = (modes % 2) == 0
    counts = card_day_totals(modes, off, max_per_mode, MODES)
    for m in range(MODES):
        kept = sum(min(int((row == m).sum()), max_per_mode) for row in modes)
        assert counts[m, 0] == kept and 0 <= counts[m, 1] <= kept
    assert (counts[:, 1] <= counts[:, 0]).all()


def test_sigma_is_the_smallest_that_keeps_rho_and_the_budget_describes_itself():
    budget = TotalsBudget(0.004, 4, 2)
    assert budget.l2_squared == 16 and budget.l2_squared / (2 * budget.sigma**2) <= 0.004
    assert budget.l2_squared / (2 * math.nextafter(budget.sigma, 0) ** 2) > 0.004
    assert budget.cost().rho == 0.004 and budget.cost().delta == 0.0
    assert budget.describe() == {"mechanism": "discrete_gaussian_totals", "rho": 0.004, "l2_squared": 16,
                                 "sigma": budget.sigma, "max_items": 4, "max_per_mode": 2, "error_bound_95": 88}
    # 88: P(|Z| <= 88) >= 0.95 at sigma 44.72, and not at 87
    assert stats.norm.cdf(88.5 / budget.sigma) - stats.norm.cdf(-88.5 / budget.sigma) >= 0.95
    assert stats.norm.cdf(87.5 / budget.sigma) - stats.norm.cdf(-87.5 / budget.sigma) < 0.95


@pytest.mark.parametrize("rho,items,per_mode,name", [(0.0, 4, 2, "rho"), (math.inf, 4, 2, "rho"), (-1.0, 4, 2, "rho"),
                                                      (0.1, 0, 2, "max_items"), (0.1, 4, 0, "max_per_mode"),
                                                      (0.1, 2.0, 1, "max_items"), (0.1, True, 1, "max_items"),
                                                      (0.1, 4, 1.0, "max_per_mode")])
def test_bad_parameters_are_refused_by_name(rho, items, per_mode, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        TotalsBudget(rho, items, per_mode)


def test_a_date_charges_the_levels_and_the_totals_measured_with_them():
    """zCDP composition adds rho: the hierarchy's date charge is its levels' rho plus the totals' (kills a charge
    that leaves the totals out or subtracts them), and the levels' alone when no totals are measured."""
    levels = PrivacyCost.zcdp(0.25, 0.0)
    assert date_cost(levels, TotalsBudget(0.125, 4, 2)) == PrivacyCost.zcdp(0.375, 0.0)
    assert date_cost(levels, None) == levels


def test_the_noise_comes_from_the_source_given_and_the_os_otherwise():
    budget, truth = TotalsBudget(0.004, 4, 2), np.full((50, 2), 1000)
    first, again = (measure_totals(truth, budget, DiscreteGaussian(SeededBits(3))) for _ in range(2))
    assert (first == again).all() and (first != truth).any()  # the given (seeded) source, nothing else
    production = measure_totals(truth, budget)  # no source: the OS CSPRNG
    assert production.shape == truth.shape and not (production == first).all()


def test_every_cell_gets_noise_of_the_calibrated_scale():
    """Zeros included: 200,000 cells of an all-zero input, each with noise of sigma 44.7: the sample's variance is
    that of N(0, sigma²) (chi-square interval at ALPHA), its mean 0 (z at ALPHA), and no cell is left noiseless
    beyond what P(Z = 0) allows."""
    budget = TotalsBudget(0.004, 4, 2)
    noisy = measure_totals(np.zeros((100_000, 2), dtype=np.int64), budget, DiscreteGaussian(SeededBits(7)))
    n = noisy.size
    variance = float(noisy.astype(float).var(ddof=1))
    low, high = (stats.chi2.ppf(q, n - 1) / (n - 1) * budget.sigma**2 for q in (ALPHA / 2, 1 - ALPHA / 2))
    assert low <= variance <= high
    assert abs(float(noisy.mean())) <= stats.norm.isf(ALPHA / 2) * budget.sigma / math.sqrt(n)
    zeros = int((noisy == 0).sum())
    assert zeros <= stats.binom.isf(ALPHA, n, 1.2 / (budget.sigma * math.sqrt(2 * math.pi)))


@pytest.mark.parametrize("rho,items,per_mode", [(0.004, 4, 2), (0.5, 3, 2), (0.01, 5, 3), (1.0, 1, 1)])
def test_the_totals_rho_is_confirmed_by_opendp(rho, items, per_mode):
    """OpenDP's discrete Gaussian (``make_gaussian`` on integer vectors, L2 distance) at our sigma: its zCDP map at
    the totals' L2 sensitivity is the charged rho (map at d = 1, 2, 3 rescaled: L2² need not be a square)."""
    budget = TotalsBudget(rho, items, per_mode)
    meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64),
                              scale=budget.sigma)
    for d in (1, 2, 3):
        assert meas.map(d) * budget.l2_squared / d**2 == pytest.approx(rho, rel=1e-9)
