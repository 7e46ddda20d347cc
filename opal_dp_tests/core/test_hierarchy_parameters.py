"""The public parameters of the hierarchical release (``core.hierarchy``) that the mutation runs found unguarded:
the listing threshold at the edges of its domain, and the parameters recorded with every draw. Each test names the
mutants (``mutmut show NAME``) it kills."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian, tail_upper_bound
from opal_dp.core.hierarchy import HierarchyBudget, Tree, level_l2_squared, listing_threshold, measure
from opal_dp_tests.core.test_os_randomness import run_with

TREE = Tree((np.zeros(4, np.int64), np.repeat(np.arange(4), 5)))  # 1 + 4 + 20 cells
BUDGET = HierarchyBudget(0.5, (0.1, 0.3, 0.6), max_items=4, max_per_cell=2)


def test_a_one_cell_domain_has_a_threshold_and_an_empty_one_is_refused():
    """Kills ``x_listing_threshold__mutmut_1`` and ``_2`` (a one-cell domain refused) and ``_3`` (the refusal
    without its reason)."""
    tau = listing_threshold(2.0, 1, 1e-3)
    assert tail_upper_bound(2.0, tau) <= 1e-3 < tail_upper_bound(2.0, tau - 1)
    with pytest.raises(ValueError, match="^cells must be >= 1, got 0$"):
        listing_threshold(2.0, 0, 1.0)


@pytest.mark.parametrize("sigma, cells, false_cells", [(3.0, 1, 1.0), (3.0, 3, 5.0), (10.0, 1, 0.6)])
def test_where_threshold_one_keeps_the_false_cells_within_the_allowance_it_is_chosen(sigma, cells, false_cells):
    """``P(Z >= 1) <= 1/2``, so where ``cells / 2 <= false_cells`` the smallest threshold, 1, is chosen. Kills
    ``x_listing_threshold__mutmut_14`` (``2 / log(..)``: a division by zero where ``cells <= false_cells``), ``_34``
    (the walk down goes on below 1) and ``_35`` (the walk down stops at 2: with sigma 10 the search starts at 8)."""
    assert cells * tail_upper_bound(sigma, 1) <= false_cells
    assert listing_threshold(sigma, cells, false_cells) == 1


def test_the_recorded_parameters_are_the_budgets_own():
    """The ledger records ``describe()`` with every draw (the release's mechanism string) and the statement reads
    it back: every name and value must be the budget's. Kills ``xǁHierarchyBudgetǁdescribe__mutmut_1`` to ``_24``
    (a name or value renamed, dropped or replaced by None)."""
    budget = HierarchyBudget(0.5, (0.1, 0.3, 0.6), max_items=4, max_per_cell=2, false_cells=0.5)
    sigmas = [math.sqrt(16 / (2 * 0.05)), math.sqrt(16 / (2 * 0.15)), math.sqrt(8 / (2 * 0.3))]
    described = budget.describe()
    assert described == {"mechanism": "hierarchical_discrete_gaussian", "rho": 0.5, "shares": [0.1, 0.3, 0.6],
                         "level_rho": [0.5 * 0.1, 0.5 * 0.3, 0.5 * 0.6], "l2_squared": [16, 16, 8],
                         "sigma": list(budget.sigmas), "max_items": 4, "max_per_cell": 2, "false_cells": 0.5}
    assert described["sigma"] == pytest.approx(sigmas, rel=1e-15)


@pytest.mark.parametrize("sigma, cells", [(5.0, 10), (20.0, 1000), (100.0, 10)])
def test_the_threshold_is_the_smallest_even_where_the_search_starts_above_it(sigma, cells):
    """For a wide noise the search starts above the answer (its start ignores the tail's ``1/t`` factor) and walks
    down: the result must still be the smallest threshold with at most one expected false cell. Kills
    ``x_listing_threshold__mutmut_42`` (the walk down one short), ``_44`` (straight down to 1), ``_45`` (the walk
    goes up: no end) and ``_46`` (down by two, past the smallest)."""
    tau = listing_threshold(sigma, cells, 1.0)
    assert cells * tail_upper_bound(sigma, tau) <= 1.0 < cells * tail_upper_bound(sigma, tau - 1)


@pytest.mark.parametrize("rho, shares, false_cells, message", [
    (math.inf, (0.1, 0.3, 0.6), 1.0, "^rho must be finite and > 0, got inf$"),
    (0.0, (0.1, 0.3, 0.6), 1.0, "^rho must be finite and > 0, got 0.0$"),
    (0.5, (0.0, 0.4, 0.6), 1.0, r"^shares must be 2 or more positive numbers summing to 1, got \(0.0, 0.4, 0.6\)$"),
    (0.5, (1.0,), 1.0, r"^shares must be 2 or more positive numbers summing to 1, got \(1.0,\)$"),
    (0.5, (0.1, 0.3, 0.6), 0.0, "^false_cells must be > 0, got 0.0$"),
])
def test_a_budget_without_noise_on_a_level_or_without_a_threshold_is_refused(rho, shares, false_cells, message):
    """rho infinite (sigma 0: no noise), a level with no share of rho, one level only, or no false cell
    allowed (no finite threshold) is refused, with its reason. Kills ``xǁHierarchyBudgetǁ__post_init____mutmut_2``
    (``or``: rho inf accepted), ``_4`` (rho 0), ``_7``, ``_8``, ``_11`` (a zero share, or one share, accepted),
    ``_22`` (false_cells 0) and ``_6``, ``_20``, ``_24`` (the reasons dropped)."""
    with pytest.raises(ValueError, match=message):
        HierarchyBudget(rho, shares, max_items=4, max_per_cell=2, false_cells=false_cells)


@pytest.mark.parametrize("max_items, max_per_cell, message", [
    (2.5, 1, "^max_items must be an integer >= 1, got 2.5$"),
    (4, True, "^max_per_cell must be an integer >= 1, got True$"),
    (0, 1, "^max_items must be an integer >= 1, got 0$"),
])
def test_contribution_bounds_that_are_not_counts_are_refused_by_name(max_items, max_per_cell, message):
    """The sensitivity formula counts items: a float or a bool bound is refused, naming the bound. Kills
    ``x_level_l2_squared__mutmut_1`` to ``_4`` (the bound misnamed) and ``_5``, ``_6`` (a float or bool accepted:
    ``and`` for ``or``)."""
    with pytest.raises(ValueError, match=message):
        level_l2_squared(max_items, max_per_cell, 3)


def test_the_measurement_draws_from_the_os_and_only_from_the_source_it_is_given(monkeypatch):
    """Without a source, the measurement's noise follows ``os.urandom`` (the same stream gives the same
    measurement, another stream another one); with a seeded source, it follows that source alone (two
    measurements with one seed are equal: a fresh OS source would make them differ, with probability at least
    1 - 0.11^20 over the 20 finest cells of sigma 3.65). Kills ``x_measure__mutmut_2`` (no source when none is given),
    ``_3``, ``_4`` (the given source ignored)."""
    zeros = np.zeros(TREE.sizes[2], np.int64)

    def levels(noise=None):
        return [v.tolist() for v in measure(TREE, zeros, BUDGET, noise).levels]

    one, taken = run_with(monkeypatch, 1, levels)
    assert taken > 0 and one == run_with(monkeypatch, 1, levels)[0] != run_with(monkeypatch, 2, levels)[0]
    monkeypatch.undo()
    assert levels(DiscreteGaussian(SeededBits(5))) == levels(DiscreteGaussian(SeededBits(5)))


def test_the_finest_sensitivity_counts_a_partial_last_cell_by_its_square():
    """Five items, at most three in a cell: one full cell and one of two, ``3² + 2² = 13`` (a larger figure
    over-noises, a smaller one under-noises). Kills ``x_level_l2_squared__mutmut_24`` (``(m mod c)³``: only a
    remainder of 2 or more shows it)."""
    assert level_l2_squared(5, 3, 3) == (25, 25, 13)
    assert level_l2_squared(7, 2, 3) == (49, 49, 3 * 4 + 1)


def test_coarse_caps_and_groups_bound_each_level_by_its_own_pile_up():
    """A level whose cells hold at most ``k`` of a unit's items piles them ``k`` at a time; ``g`` disjoint groups
    of trees, each with its own ``m`` items, add their bounds (a smaller figure under-noises)."""
    assert level_l2_squared(4, 1, 4, coarse_caps=(4, 4, 1)) == (16, 16, 4, 4)
    assert level_l2_squared(5, 1, 3, coarse_caps=(5, 2)) == (25, 4 + 4 + 1, 5)
    assert level_l2_squared(4, 1, 4, coarse_caps=(4, 4, 1), groups=14) == (224, 224, 56, 56)
    assert level_l2_squared(5, 3, 3, groups=1) == level_l2_squared(5, 3, 3)  # the defaults: every coarse cap m
    budget = HierarchyBudget(0.5, (0.2, 0.8), max_items=4, max_per_cell=1, coarse_caps=(4,), groups=3)
    assert budget.l2_squared == (48, 12) and budget.describe()["groups"] == 3 and budget.describe()["coarse_caps"] == [4]
    assert "groups" not in BUDGET.describe() and "coarse_caps" not in BUDGET.describe()
    for bad, message in ((dict(coarse_caps=(4,)), "one cap per level above the finest"),
                         (dict(coarse_caps=(0, 1)), "coarse_caps must be an integer >= 1"),
                         (dict(groups=0), "groups must be an integer >= 1")):
        with pytest.raises(ValueError, match=message):
            level_l2_squared(4, 1, 3, **bad)
