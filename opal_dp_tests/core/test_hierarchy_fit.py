"""The hierarchy's fit (``core.hierarchy.fit`` and ``round_exact``, post-processing): the estimate is the weighted
least-squares one of the module docstring, checked against a generic solver; a parent's residual goes to its
listed cells and its remainder in proportion to their variances; a cell at exactly the threshold is listed; and
the rounding rules at their edges. Inputs are fixed numbers: nothing here is random."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core.hierarchy import Measurement, Tree, fit, round_exact, weighted_projection

CHILDREN = [1, 2, 3, 5]  # a level-1 cell with one child, and larger ones
SIGMAS = (60.0, 25.0, 10.0)  # the root the noisiest: its estimate leans on the levels below
PARENT = np.repeat(np.arange(len(CHILDREN)), CHILDREN)
TREE = Tree((np.zeros(len(CHILDREN), np.int64), PARENT))
TRUE = np.array([900, 400, 1300, 700, 650, 820, 300, 450, 380, 520, 610])
# measurements that disagree across levels by several sigmas, so that any change of weights moves the fit
Y2 = TRUE + np.array([12, -9, 15, -20, 8, 11, -14, 6, -7, 18, -10])
Y1 = np.bincount(PARENT, weights=TRUE).astype(np.int64) + np.array([90, -60, 75, -110])
Y0 = np.array([TRUE.sum() + 170])


def weighted_least_squares(y0, y1, y2, sigmas):
    """The finest cells minimising sum over every measured cell of (measured - implied)² / sigma², solved as one
    linear least-squares problem (no tree structure used)."""
    rows = np.vstack([np.ones((1, len(y2))), (PARENT[None, :] == np.arange(len(CHILDREN))[:, None]).astype(float),
                      np.eye(len(y2))])
    weight = np.sqrt(np.r_[np.full(1, sigmas[0] ** -2), np.full(len(y1), sigmas[1] ** -2),
                           np.full(len(y2), sigmas[2] ** -2)])
    cells, *_ = np.linalg.lstsq(rows * weight[:, None], np.r_[y0, y1, y2] * weight, rcond=None)
    return cells


def test_the_fit_is_the_weighted_least_squares_estimate():
    """Every cell listed: the fit's three levels are the least-squares estimate rounded (the root within 1/2, each
    level below within its own rounding plus its parent's), integer arrays, and no remainder where every cell
    is listed. Kills, in ``fit``, variances that are not
    sigma² or a children's sum whose variance is not their number times sigma² (also for a cell of one child), a
    level-1 cell that keeps its own measurement, and in ``_combine`` a wrong combined variance: each moves
    some estimate by tens."""
    fitted = fit(TREE, Measurement((Y0, Y1, Y2)), SIGMAS, tau=int(Y2.min()))
    cells = weighted_least_squares(Y0, Y1, Y2, SIGMAS)
    assert abs(fitted.total - cells.sum()) <= 0.5
    assert np.abs(fitted.counts[1] - np.bincount(PARENT, weights=cells)).max() < 1.5
    assert np.abs(fitted.listed - cells).max() < 2.5
    assert fitted.remainder.tolist() == [0] * len(CHILDREN)
    assert fitted.listed.dtype == fitted.remainder.dtype == fitted.counts[1].dtype == np.int64  # counts, not floats


def test_the_residual_goes_to_listed_cells_and_remainder_by_variance():
    """A parent with two listed cells and three unlisted ones (one remainder node of variance 3 sigma²): of the
    residual between the fitted parent and the measured children, each listed cell takes 1/5 and the remainder
    3/5. Kills a remainder variance of 3 / sigma² (the remainder would take almost nothing)."""
    tree = Tree((np.zeros(1, np.int64), np.zeros(5, np.int64)))
    y2 = np.array([400, 300, 6, 4, 5])
    measured = Measurement((np.array([1015]), np.array([1015]), y2))
    fitted = fit(tree, measured, SIGMAS, tau=50)
    residual = fitted.counts[1][0] - y2.sum()
    assert residual > 100  # the parent's measurements pull it well above the children's sum
    assert np.abs(fitted.listed[:2] - (y2[:2] + residual / 5)).max() < 1
    assert fitted.listed[2:].tolist() == [0, 0, 0]
    assert abs(fitted.remainder[0] - (y2[2:].sum() + 3 * residual / 5)) < 1


def test_a_cell_measured_at_exactly_the_threshold_is_listed():
    """``listing_threshold`` bounds the chance that an empty cell's measurement *reaches* tau: a cell at tau is
    listed (kills ``>`` for ``>=``)."""
    tree = Tree((np.zeros(1, np.int64), np.zeros(2, np.int64)))
    fitted = fit(tree, Measurement((np.array([53]), np.array([53]), np.array([50, 3]))), SIGMAS, tau=50)
    assert fitted.listed.tolist() == [50, 0] and fitted.remainder.tolist() == [3]


def test_measurements_below_zero_fit_to_zero_everywhere():
    """A root estimate below zero is released as 0, and so is every cell (kills a floor of 1)."""
    measured = Measurement((np.array([-40]), -np.array([10, 20, 5, 30]), -np.full(len(PARENT), 3)))
    fitted = fit(TREE, measured, SIGMAS, tau=5)
    assert fitted.total == 0
    assert not fitted.counts[1].any() and not fitted.listed.any() and not fitted.remainder.any()


def test_a_level_1_cell_without_finest_cells_is_refused():
    """Its count is 0 by construction and step 2 would have no cell to give a share of the root to."""
    tree = Tree((np.zeros(3, np.int64), np.array([0, 0, 1])))
    measured = Measurement((np.array([30]), np.array([10, 10, 10]), np.array([5, 5, 10])))
    with pytest.raises(ValueError, match="^every level-1 cell needs at least one level-2 cell$"):
        fit(tree, measured, SIGMAS, tau=5)


def test_rounding_accepts_empty_groups_with_nothing_to_hold():
    """Trailing groups without cells and with target 0 are fine (kills a size count that stops at the last
    occupied group, and a refusal of target 0)."""
    assert round_exact(np.array([1.0, 2.0]), np.array([0, 1]), np.array([1, 2, 0, 0])).tolist() == [1, 2]


def test_rounding_refuses_a_positive_target_without_cells():
    """Even a target of 1 (kills ``> 1``), with its reason."""
    with pytest.raises(ValueError, match="^a positive target has no cell to go to$"):
        round_exact(np.array([1.0]), np.array([0]), np.array([1, 1]))


def test_rounding_is_proportional_also_for_a_mass_below_one():
    """Only a group whose values are all 0 is spread evenly (kills ``mass <= 1``)."""
    assert round_exact(np.array([0.1, 0.9]), np.zeros(2, np.int64), np.array([10])).tolist() == [1, 9]


def test_an_even_spread_gives_the_extra_units_to_the_first_cells():
    """Ties by position (kills an even share computed as target times size, which ends with the extra on the
    last cells)."""
    group = np.zeros(3, np.int64)
    assert round_exact(np.zeros(3), group, np.array([5])).tolist() == [2, 2, 1]
    assert round_exact(np.zeros(3), group, np.array([7])).tolist() == [3, 2, 2]


def test_the_projection_accepts_a_group_without_cells():
    """A trailing group without cells and with target 0 leaves the others' projection as it is (kills a total per
    group counted only up to the last occupied group)."""
    x = weighted_projection(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 1.0]), np.array([0, 0, 1]),
                            np.array([7, 4, 0]))
    assert np.allclose(x, [2.0, 5.0, 4.0])  # group 0's residual 4 split 1 : 3 by variance; group 1 takes its 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 1e6)), min_size=1, max_size=40),
       st.lists(st.integers(0, 10**7), min_size=6, max_size=6))
def test_rounding_is_exact_per_group_for_large_targets(cells, targets):
    """Several groups, values and targets up to millions: each group sums exactly to its target (0 for a group
    without cells), every count within 1 of its scaled value."""
    group = np.array([g for g, _ in cells])
    x = np.array([v for _, v in cells])
    target = np.array([t if (group == g).any() else 0 for g, t in enumerate(targets)])
    out = round_exact(x, group, target)
    assert out.dtype == np.int64 and (out >= 0).all()
    assert np.bincount(group, weights=out, minlength=6).astype(np.int64).tolist() == target.tolist()
    mass = np.bincount(group, weights=x, minlength=6)[group]
    size = np.bincount(group, minlength=6)[group]
    scaled = np.where(mass > 0, x * target[group] / np.where(mass > 0, mass, 1), target[group] / size)
    assert (np.abs(out - scaled) < 1 + 1e-6).all()


def test_rounding_gives_the_extra_unit_to_the_largest_remainder():
    """Not to the first or the smallest cell (kills a sort on ``out + x``): 1.1, 2.7, 4.2 of 8 round to 1, 3, 4."""
    assert round_exact(np.array([1.1, 2.7, 4.2]), np.zeros(3, np.int64), np.array([8])).tolist() == [1, 3, 4]


def test_the_projection_reaches_its_target_with_variances_below_one():
    """The bisection's upper end must let some cell reach the target whatever the variances (kills
    ``(target - y) * var``, too low an end when every variance is below 1)."""
    x = weighted_projection(np.zeros(2), np.full(2, 0.25), np.zeros(2, np.int64), np.array([10]))
    assert np.allclose(x, [5.0, 5.0])
