"""The prefix tree's public thresholds (``core.prefix_tree``) where the mutation runs found them unguarded. Each test
names the mutants (``mutmut show NAME``) it kills."""

from __future__ import annotations

import math

from opal_dp.core.prefix_tree import FALSE_CHILDREN, _threshold


def test_a_threshold_is_the_smallest_integer_meeting_both_rules_down_to_one():
    """With a small scale both rules (``sds`` standard deviations, at most ``FALSE_CHILDREN`` expected false
    children) are met by 1, and 1 it is: a larger one would release fewer true nodes than the calibration states.
    Kills ``x__threshold__mutmut_20`` (a floor of 2)."""
    scale, sds, cells = 0.3, 2, 1
    q = math.exp(-1 / scale)
    assert sds * math.sqrt(2) * scale <= 1 and cells * q / (1 + q) <= FALSE_CHILDREN
    assert _threshold(scale, sds, cells) == 1
