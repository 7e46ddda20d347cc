"""The hierarchical release with exact totals (``core.hierarchy``): exact sums and one row per item for any input
and any noise (hypothesis), the sensitivity bound against brute force, the threshold from the noise scale, the
noise scale of each level (statistical, false failure <= 1e-6), and the measurement audit catching the planted
bugs (a domain taken from the data, a level left out of the charge)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.audit.hierarchy import audit_measurement, tail_share
from opal_dp.core import PrivacyCost, SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian, tail_upper_bound
from opal_dp.core.hierarchy import (
    first_per_row,
    HierarchyBudget,
    Measurement,
    Tree,
    fit,
    level_l2_squared,
    listing_threshold,
    measure,
    round_exact,
    weighted_projection,
)
from opal_dp_tests.core.helpers import ALPHA

BUDGET = HierarchyBudget(0.5, (0.1, 0.3, 0.6), max_items=4, max_per_cell=1)


def release(tree, counts, budget, tau, bits):
    return fit(tree, measure(tree, counts, budget, DiscreteGaussian(bits)), budget.sigmas, tau)


@st.composite
def trees_and_counts(draw):
    middle = draw(st.integers(1, 6))
    children = draw(st.lists(st.integers(1, 5), min_size=middle, max_size=middle))
    parent = np.repeat(np.arange(middle), children)
    counts = np.array(draw(st.lists(st.integers(0, 60), min_size=len(parent), max_size=len(parent))), np.int64)
    return Tree((np.zeros(middle, np.int64), parent)), counts


def check_exact(tree: Tree, fitted) -> None:
    assert fitted.total >= 0 and (fitted.counts[1] >= 0).all() and (fitted.listed >= 0).all()
    assert (fitted.remainder >= 0).all()
    assert fitted.counts[1].sum() == fitted.total
    below = np.bincount(tree.parents[1], weights=fitted.listed, minlength=tree.sizes[1]).astype(np.int64)
    assert np.array_equal(below + fitted.remainder, fitted.counts[1])


@settings(max_examples=150, deadline=None)
@given(trees_and_counts(), st.integers(0, 2**32), st.integers(1, 40))
def test_every_level_sums_exactly_to_its_parent(case, seed, tau):
    tree, counts = case
    check_exact(tree, release(tree, counts, BUDGET, tau, SeededBits(seed)))


@settings(max_examples=150, deadline=None)
@given(trees_and_counts(), st.lists(st.integers(-10**4, 10**4), min_size=50, max_size=50), st.integers(1, 40))
def test_any_measurement_fits_to_exact_sums(case, noise, tau):
    """Exactness does not depend on the noise being small: arbitrary (even absurd) measurements still fit."""
    tree, _ = case
    values = itertools.cycle(noise)
    measured = Measurement(tuple(np.array([next(values) for _ in range(n)], np.int64) for n in tree.sizes))
    check_exact(tree, fit(tree, measured, BUDGET.sigmas, tau))


@settings(max_examples=150, deadline=None)
@given(trees_and_counts(), st.integers(0, 2**32), st.integers(1, 40))
def test_every_item_is_in_exactly_one_row_per_level(case, seed, tau):
    """At the finest level a cell is its own row when listed (count > 0), else it is in its parent's remainder:
    never both, never neither. Coarser levels list every cell once."""
    tree, counts = case
    fitted = release(tree, counts, BUDGET, tau, SeededBits(seed))
    own_row = fitted.listed > 0
    in_remainder = ~own_row  # the remainder row of its parent stands for every cell not listed
    assert np.array_equal(own_row.astype(int) + in_remainder.astype(int), np.ones(tree.sizes[2], int))
    # a remainder row only ever holds cells that are not listed: its count equals the parent minus listed cells
    listed_sum = np.bincount(tree.parents[1], weights=fitted.listed, minlength=tree.sizes[1])
    assert np.array_equal(fitted.remainder, fitted.counts[1] - listed_sum)


@st.composite
def deep_trees_and_counts(draw):
    """Trees of 2 to 5 levels (the root and 1 to 4 below it), every cell with at least one child."""
    parents, size = [], 1
    for _ in range(draw(st.integers(1, 4))):
        children = draw(st.lists(st.integers(1, 3), min_size=size, max_size=size))
        parents.append(np.repeat(np.arange(size), children))
        size = len(parents[-1])
    counts = np.array(draw(st.lists(st.integers(0, 60), min_size=size, max_size=size)), np.int64)
    return Tree(tuple(parents)), counts


@settings(max_examples=150, deadline=None)
@given(deep_trees_and_counts(), st.integers(0, 2**32), st.integers(1, 40))
def test_a_tree_of_any_depth_sums_exactly_level_by_level_with_every_item_in_one_row(case, seed, tau):
    """The same fit on 2 to 5 levels: each level's integer counts sum exactly to its parent's, the finest level's
    listed cells plus each parent's remainder to that parent, and the levels' true counts to the total."""
    tree, counts = case
    budget = HierarchyBudget(0.5, (1 / len(tree.sizes),) * len(tree.sizes), max_items=4, max_per_cell=1)
    truth = tree.level_counts(counts)
    assert [len(t) for t in truth] == list(tree.sizes) and all(t.sum() == counts.sum() for t in truth)
    fitted = release(tree, counts, budget, tau, SeededBits(seed))
    assert len(fitted.counts) == len(tree.sizes) - 1 and fitted.counts[0].tolist() == [fitted.total]
    for level in range(1, len(fitted.counts)):
        above = np.bincount(tree.parents[level - 1], weights=fitted.counts[level], minlength=tree.sizes[level - 1])
        assert (fitted.counts[level] >= 0).all() and np.array_equal(above.astype(np.int64), fitted.counts[level - 1])
    listed = np.bincount(tree.parents[-1], weights=fitted.listed, minlength=tree.sizes[-2]).astype(np.int64)
    assert (fitted.listed >= 0).all() and (fitted.remainder >= 0).all()
    assert np.array_equal(listed + fitted.remainder, fitted.counts[-1])


def test_the_levels_of_a_budget_are_those_of_its_tree():
    tree = Tree((np.zeros(2, np.int64), np.array([0, 0, 1]), np.array([0, 1, 1, 2])))
    four = HierarchyBudget(0.5, (0.1, 0.2, 0.3, 0.4), max_items=4, max_per_cell=1)
    assert four.l2_squared == level_l2_squared(4, 1, 4) == (16, 16, 16, 4)
    assert [len(v) for v in measure(tree, np.zeros(4, np.int64), four).levels] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="the tree has 4 levels and the budget 3"):
        measure(tree, np.zeros(4, np.int64), BUDGET)
    with pytest.raises(ValueError, match="one measurement and one sigma per level"):
        fit(tree, Measurement(tuple(tree.level_counts(np.zeros(4, np.int64)))), BUDGET.sigmas, 5)
    with pytest.raises(ValueError, match="at least 2 levels"):
        level_l2_squared(4, 1, 1)
    with pytest.raises(ValueError, match="every level-3 cell's parent must be a level-2 cell"):
        Tree((np.zeros(2, np.int64), np.array([0, 0, 1]), np.array([0, 3])))


def test_without_noise_large_cells_are_exact_and_small_ones_go_to_the_remainder():
    tree = Tree((np.zeros(2, np.int64), np.array([0, 0, 0, 1, 1])))
    counts = np.array([500, 3, 0, 80, 2])
    measured = Measurement(tuple(tree.level_counts(counts)))
    fitted = fit(tree, measured, BUDGET.sigmas, tau=10)
    assert fitted.total == 585 and fitted.counts[1].tolist() == [503, 82]
    assert fitted.listed.tolist() == [500, 0, 0, 80, 0] and fitted.remainder.tolist() == [3, 2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=12), st.integers(0, 500))
def test_rounding_keeps_the_sum_and_stays_within_one(values, target):
    x = np.array(values)
    group = np.zeros(len(x), np.int64)
    out = round_exact(x, group, np.array([target]))
    assert out.sum() == target and (out >= 0).all()
    scaled = x * target / x.sum() if x.sum() > 0 else np.full(len(x), target / len(x))
    assert (np.abs(out - scaled) < 1 + 1e-9).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=10), st.lists(st.floats(0.5, 20), min_size=10,
                                                                          max_size=10), st.integers(0, 300))
def test_projection_is_the_nearest_non_negative_point_with_the_sum(y, var, target):
    y, var = np.array(y), np.array(var[: len(y)])
    x = weighted_projection(y, var, np.zeros(len(y), np.int64), np.array([target]))
    assert (x >= 0).all() and math.isclose(x.sum(), target, abs_tol=1e-6)
    # KKT: x = max(0, y + var * lam) for one lam
    positive = x > 1e-9
    if positive.any():
        lam = (x[positive] - y[positive]) / var[positive]
        assert np.allclose(lam, lam[0], atol=1e-6)
        assert (y[~positive] + var[~positive] * lam[0] <= 1e-6).all()


@pytest.mark.parametrize("m,c", [(1, 1), (3, 1), (4, 1), (4, 2), (5, 2), (4, 4), (3, 5)])
def test_l2_bounds_are_the_brute_force_maximum(m, c):
    """Over every way of placing at most m items in 3 cells with at most c per cell (finest) or any (coarse)."""
    finest = max(sum(v * v for v in d) for d in itertools.product(range(min(c, m) + 1), repeat=m) if sum(d) <= m)
    coarse = max(sum(v * v for v in d) for d in itertools.product(range(m + 1), repeat=3) if sum(d) <= m)
    assert level_l2_squared(m, c, 3) == (coarse, coarse, finest)


def test_the_budget_costs_the_sum_of_its_levels_and_each_sigma_meets_its_rho():
    assert BUDGET.cost() == PrivacyCost.zcdp(0.5, 0.0)
    for rho, l2, sigma in zip(BUDGET.level_rho, BUDGET.l2_squared, BUDGET.sigmas):
        assert l2 / (2 * sigma**2) <= rho and l2 / (2 * math.nextafter(sigma, 0) ** 2) > rho


def test_the_threshold_follows_the_noise_scale_and_the_domain():
    for sigma, cells in ((2.6, 160_000), (5.0, 1000), (1.0, 10)):
        tau = listing_threshold(sigma, cells, 1.0)
        assert cells * tail_upper_bound(sigma, tau) <= 1.0
        assert tau == 1 or cells * tail_upper_bound(sigma, tau - 1) > 1.0
    assert listing_threshold(5.2, 160_000, 1.0) > listing_threshold(2.6, 160_000, 1.0)


def test_a_tree_rejects_a_cell_without_a_parent():
    below = "^every level-2 cell's parent must be a level-1 cell$"
    root = "^a tree has a root and at least one level below it, whose cells' parent is the root$"
    for parents, reason in (((np.zeros(2, np.int64), np.array([0, 2])), below),
                            ((np.zeros(2, np.int64), np.array([0, -1])), below),
                            ((np.array([0, 1]), np.array([0, 1])), root), ((), root)):
        with pytest.raises(ValueError, match=reason):
            Tree(parents)


def test_level_counts_are_integer_sums_also_for_an_empty_last_cell():
    """A level-1 cell with no finest cells (the last one here) counts 0, and every level holds integers whatever the
    input's type. Kills the count without ``minlength`` (the last cell lost) and the levels left as floats; a count
    vector of the wrong length is refused, naming the length needed."""
    tree = Tree(([0.0, 0.0, 0.0], [0.0, 0.0, 1.0]))
    assert all(p.dtype == np.int64 for p in tree.parents)
    levels = tree.level_counts([1.0, 2.0, 3.0])
    assert [level.tolist() for level in levels] == [[6], [3, 3, 0], [1, 2, 3]]
    assert all(level.dtype == np.int64 for level in levels)
    with pytest.raises(ValueError, match=r"^need one count per finest cell \(3\), got shape \(4,\)$"):
        tree.level_counts([1, 2, 3, 4])


def _noise_shares(measure_fn, runs: int, seed: int) -> list[tuple[float, float, int]]:
    tree = Tree((np.zeros(50, np.int64), np.repeat(np.arange(50), 40)))
    noise = DiscreteGaussian(SeededBits(seed))
    samples = [[], [], []]
    for _ in range(runs):
        for level, values in enumerate(measure_fn(tree, np.zeros(tree.sizes[2], np.int64), BUDGET, noise).levels):
            samples[level].append(values)
    out = []
    for s, sigma in zip(samples, BUDGET.sigmas):
        z = np.concatenate(s)
        k = max(1, round(sigma))
        out.append((float((np.abs(z) >= k).mean()), tail_share(sigma, k), z.size))
    return out


def within_hoeffding(share: float, expected: float, n: int, tests: int) -> bool:
    """|share - expected| within Hoeffding's bound at ALPHA/tests: together the tests fail with prob <= ALPHA."""
    return abs(share - expected) <= math.sqrt(math.log(2 * tests / ALPHA) / (2 * n))


def test_each_level_has_the_noise_scale_of_its_budget():
    """P(|Z| >= round(sigma_l)) per level against the exact discrete Gaussian value, Hoeffding at 1e-6/3 per
    level (false failure <= 1e-6 in all): 5,000 runs, so 5,000 level-0 draws (tolerance 0.04), 250,000 level-1
    and 10^7 level-2 draws."""
    for share, expected, n in _noise_shares(measure, 5_000, seed=7):
        assert within_hoeffding(share, expected, n, 3), (share, expected)


def test_the_noise_scale_check_catches_one_sigma_for_every_level():
    def finest_sigma_everywhere(tree, finest, budget, noise):
        truth = tree.level_counts(finest)
        return Measurement(tuple(t + noise.sample(budget.sigmas[2], t.size) for t in truth))

    shares = _noise_shares(finest_sigma_everywhere, 5_000, seed=8)
    assert not all(within_hoeffding(s, e, n, 3) for s, e, n in shares)


@pytest.mark.slow
def test_the_audit_passes_the_real_measurement_against_its_charge():
    noise = DiscreteGaussian(SeededBits(11))
    report = audit_measurement(lambda t, c, b: measure(t, c, b, noise), BUDGET, BUDGET.cost())
    assert report.passed, report
    assert report.rho_lower > 0.9 * BUDGET.rho  # the audit has power: most of the real loss shows
    assert report.false_alarm_bound <= 2 * ALPHA


@pytest.mark.slow
def test_the_audit_catches_a_level_left_out_of_the_charge():
    noise = DiscreteGaussian(SeededBits(12))
    uncharged = PrivacyCost.zcdp(sum(BUDGET.level_rho[1:]), 0.0)  # the mode totals drawn but not charged
    report = audit_measurement(lambda t, c, b: measure(t, c, b, noise), BUDGET, uncharged)
    assert not report.passed and report.rho_lower > uncharged.rho


def test_the_audit_catches_a_domain_taken_from_the_data():
    noise = DiscreteGaussian(SeededBits(13))

    def occupied_cells_only(tree, finest, budget):
        truth = tree.level_counts(finest)
        return Measurement(tuple(np.where(t > 0, t + noise.sample(s, t.size).reshape(t.shape), 0) for t, s in zip(truth,
                                                                                                 budget.sigmas)))

    report = audit_measurement(occupied_cells_only, BUDGET, BUDGET.cost(), runs=200)
    assert not report.passed and report.silent_cells == 7


def test_a_batch_of_inputs_has_the_level_counts_of_each_input():
    """The audit measures its runs as one batch: each row's levels must be that row's own counts."""
    tree = Tree((np.zeros(3, np.int64), np.array([0, 2, 2, 1, 0])))
    batch = np.random.default_rng(4).integers(0, 9, size=(6, 5))
    levels = tree.level_counts(batch)
    for row, counts in enumerate(batch):
        assert all((got[row] == want).all() for got, want in zip(levels, tree.level_counts(counts)))
    assert [level.shape for level in measure(tree, batch, BUDGET).levels] == [(6, 1), (6, 3), (6, 5)]


@settings(max_examples=150, deadline=None)
@given(trees_and_counts(), st.lists(st.integers(-10**4, 10**4), min_size=50, max_size=50), st.integers(1, 40),
       st.integers(0, 500), st.data())
def test_pinned_counts_stand_and_every_level_still_sums_exactly(case, noise, tau, root, data):
    """A pinned root and a pinned child (another product's published counts) are the fit's counts exactly, whatever
    the measurement; the other children share what the parent leaves them, and the sums stay exact."""
    tree, _ = case
    values = itertools.cycle(noise)
    measured = Measurement(tuple(np.array([next(values) for _ in range(n)], np.int64) for n in tree.sizes))
    child = data.draw(st.integers(0, tree.sizes[1] - 1))
    kept = data.draw(st.integers(0, root if tree.sizes[1] > 1 else 0))  # an only child takes its parent's count
    fitted = fit(tree, measured, BUDGET.sigmas, tau, {0: ([0], [root]), 1: ([child], [root if tree.sizes[1] == 1
                                                                                     else kept])})
    check_exact(tree, fitted)
    assert fitted.total == root and fitted.counts[1][child] == (root if tree.sizes[1] == 1 else kept)


def test_pins_that_cannot_hold_are_refused():
    tree = Tree((np.zeros(2, np.int64), np.array([0, 0, 1])))
    measured = Measurement((np.array([10]), np.array([5, 5]), np.array([2, 3, 5])))
    with pytest.raises(ValueError, match="exceeds its parent"):
        fit(tree, measured, BUDGET.sigmas, 1, {0: ([0], [10]), 1: ([0], [11])})
    with pytest.raises(ValueError, match="above the finest"):
        fit(tree, measured, BUDGET.sigmas, 1, {2: ([0], [1])})


@given(st.integers(0, 20).flatmap(lambda slots: st.lists(st.lists(st.integers(-1, 3), min_size=slots, max_size=slots),
                                                         max_size=12)),
       st.integers(1, 5), st.sampled_from([np.int8, np.int32, np.int64]))
@settings(max_examples=300, deadline=None)
def test_a_unit_keeps_its_first_items_of_a_value_up_to_the_cap_and_no_empty_slot(rows, cap, dtype):
    values = np.array(rows, dtype=dtype).reshape(len(rows), -1 if rows and rows[0] else 0)
    kept = first_per_row(values, cap, -1)
    expected = [[v != -1 and list(row[:j]).count(v) < cap for j, v in enumerate(row)] for row in values.tolist()]
    assert kept.dtype == bool and kept.shape == values.shape and kept.tolist() == expected


def test_first_per_row_counts_past_255_earlier_slots_and_refuses_a_flat_array():
    values = np.zeros((2, 300), dtype=np.int32)
    assert first_per_row(values, 280, -1).sum(axis=1).tolist() == [280, 280]  # an 8-bit count would wrap at 256
    with pytest.raises(ValueError, match="units x slots"):
        first_per_row(values.ravel(), 1, -1)
