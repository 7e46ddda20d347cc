"""The prefix tree's public thresholds (``core.prefix_tree``) where the mutation runs found them unguarded. Each test
names the mutants (``mutmut show NAME``) it kills."""

from __future__ import annotations

import math

import pytest

from opal_dp.core.prefix_tree import FALSE_CHILDREN, TreeBudget, _threshold


def test_a_threshold_is_the_smallest_integer_meeting_both_rules_down_to_one():
    """With a small scale both rules (``sds`` standard deviations, at most ``FALSE_CHILDREN`` expected false
    children) are met by 1, and 1 it is: a larger one would release fewer true nodes than the calibration states.
    Kills ``x__threshold__mutmut_20`` (a floor of 2)."""
    scale, sds, cells = 0.3, 2, 1
    q = math.exp(-1 / scale)
    assert sds * math.sqrt(2) * scale <= 1 and cells * q / (1 + q) <= FALSE_CHILDREN
    assert _threshold(scale, sds, cells) == 1


@pytest.mark.parametrize("epsilon, height, message", [
    (math.inf, 4, "^epsilon must be finite and > 0, got inf$"),
    (0.0, 4, "^epsilon must be finite and > 0, got 0.0$"),
    (1.0, 2.0, "^height must be an integer >= 1, got 2.0$"),
    (1.0, True, "^height must be an integer >= 1, got True$"),
])
def test_a_tree_budget_without_noise_or_with_a_height_that_is_not_a_count_is_refused(epsilon, height, message):
    """An infinite epsilon (scale 0: no noise), epsilon 0, or a height that is not an integer count (the budget
    split per level divides by it) is refused with its reason. Kills ``xǁTreeBudgetǁ__post_init____mutmut_2``
    (``or``: epsilon inf accepted), ``_4`` (epsilon 0), ``_7``, ``_8`` (a float or bool height) and ``_6``, ``_12``
    (the reasons dropped)."""
    with pytest.raises(ValueError, match=message):
        TreeBudget(epsilon, height)
