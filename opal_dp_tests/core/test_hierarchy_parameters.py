"""The public parameters of the hierarchical release (``core.hierarchy``) that the mutation runs found unguarded:
the listing threshold at the edges of its domain, and the parameters recorded with every draw. Each test names the
mutants (``mutmut show NAME``) it kills."""

from __future__ import annotations

import math

import pytest

from opal_dp.core.discrete_gaussian import tail_upper_bound
from opal_dp.core.hierarchy import HierarchyBudget, listing_threshold


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
    (0.5, (0.0, 0.4, 0.6), 1.0, r"^shares must be 3 positive numbers summing to 1, got \(0.0, 0.4, 0.6\)$"),
    (0.5, (0.4, 0.6), 1.0, r"^shares must be 3 positive numbers summing to 1, got \(0.4, 0.6\)$"),
    (0.5, (0.1, 0.3, 0.6), 0.0, "^false_cells must be > 0, got 0.0$"),
])
def test_a_budget_without_noise_on_a_level_or_without_a_threshold_is_refused(rho, shares, false_cells, message):
    """rho infinite (sigma 0: no noise), a level with no share of rho, two levels for three, or no false cell
    allowed (no finite threshold) is refused, with its reason. Kills ``xǁHierarchyBudgetǁ__post_init____mutmut_2``
    (``or``: rho inf accepted), ``_4`` (rho 0), ``_7``, ``_8``, ``_11`` (a zero share, or two shares, accepted),
    ``_22`` (false_cells 0) and ``_6``, ``_20``, ``_24`` (the reasons dropped)."""
    with pytest.raises(ValueError, match=message):
        HierarchyBudget(rho, shares, max_items=4, max_per_cell=2, false_cells=false_cells)
