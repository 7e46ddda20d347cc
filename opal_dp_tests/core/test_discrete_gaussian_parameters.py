"""Survivors of the mutation run in ``core.discrete_gaussian``: the refusals of a bad size or sigma, and the tail
bound's rule (the documented formula, on both sides of its switch). Each test names the mutants it kills."""

from __future__ import annotations

import math

import pytest

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian, tail_upper_bound


@pytest.mark.parametrize("size", [2.5, True, -1])
def test_a_size_that_is_not_a_count_is_refused_with_its_reason(size):
    """Kills ``xǁDiscreteGaussianǁsample__mutmut_1``, ``_2`` (a float or bool size accepted: ``and`` for ``or``)
    and ``_6`` (the reason dropped)."""
    with pytest.raises(ValueError, match=f"^size must be a non-negative integer, got {size!r}$"):
        DiscreteGaussian(SeededBits(1)).sample(3.0, size)


def test_a_sigma_that_is_not_a_number_is_refused_with_its_reason():
    """Kills ``x__check_sigma__mutmut_3`` (the reason dropped)."""
    with pytest.raises(ValueError, match="^sigma must be a real number, got 'three'$"):
        DiscreteGaussian(SeededBits(1)).sample("three", 1)


@pytest.mark.parametrize("sigma, t, shift", [(2.5, 3, 0.5), (2.0, 3, 0.5), (3.0, 3, 1.0), (3.0, 1, 1.0)])
def test_the_tail_bound_is_the_documented_one_on_both_sides_of_its_switch(sigma, t, shift):
    """``Q((t - 1/2)/sigma)`` where ``t - 1/2 >= sigma`` (equality included: the midpoint rule needs convexity
    from ``sigma`` on), else ``Q((t - 1)/sigma)``, times ``1 + 1e-9``. A looser bound raises every threshold built
    on it. Kills ``x_tail_upper_bound__mutmut_6`` (the switch one later), ``_7`` (equality on the loose side) and
    ``_8`` (``Q((t - 2)/sigma)`` on the loose side)."""
    expected = 0.5 * math.erfc((t - shift) / (sigma * math.sqrt(2))) * (1 + 1e-9)
    assert tail_upper_bound(sigma, t) == pytest.approx(expected, rel=1e-12)
