"""Error bounds of sums of noise draws (the release page's error bars)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from opal_dp.core import discrete_gaussian, sbh
from opal_dp.core.accuracy import KEPT_SDS, SumErrorBounds, error_bound_of_sum, fast_length


def smallest_bound(mass: np.ndarray, confidence: float) -> int:
    """By brute force over a centred pmf."""
    z = np.arange(len(mass)) - len(mass) // 2
    return next(e for e in range(len(mass)) if mass[np.abs(z) <= e].sum() >= confidence)


@pytest.mark.parametrize("scale", [0.5, 2.0, 7.3])
@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999])
def test_one_draw_is_the_closed_form_bound(scale, confidence):
    assert error_bound_of_sum(sbh.pmf(scale)[1], 1, confidence) == sbh.error_bound(scale, confidence)


@pytest.mark.parametrize(("scale", "n"), [(1.0, 2), (2.0, 3), (2.0, 14), (4.5, 5)])
def test_sums_match_direct_convolution(scale, n):
    one = sbh.pmf(scale)[1]
    total = one
    for _ in range(n - 1):
        total = np.convolve(total, one)
    assert error_bound_of_sum(one, n, 0.95) == smallest_bound(total, 0.95)


def whole_support_bound(mass: np.ndarray, n: int, confidence: float) -> int:
    """The n-fold convolution by one FFT over the sum's whole support (nothing truncated)."""
    size = n * (len(mass) - 1) + 1
    total = np.clip(np.fft.irfft(np.fft.rfft(mass, size) ** n, size), 0, None)
    return smallest_bound(total, confidence)


@pytest.mark.parametrize(("noise", "scale"), [(discrete_gaussian, 43.0), (sbh, 3.5), (sbh, 20.0)])
def test_long_sums_match_the_whole_support_convolution(noise, scale):
    """A year of daily counts (364 draws): the step-by-step sum, kept within KEPT_SDS standard deviations, gives the
    bound of the untruncated convolution; asking out of order reuses the steps taken."""
    one = noise.pmf(scale)[1]
    bounds = SumErrorBounds(one, 0.95)
    assert [bounds(n) for n in (364, 2, 100)] == [whole_support_bound(one, n, 0.95) for n in (364, 2, 100)]


def test_a_sum_of_gaussians_is_nearly_a_wider_gaussian():
    one = discrete_gaussian.pmf(3.0)[1]
    assert abs(error_bound_of_sum(one, 4, 0.95) - discrete_gaussian.error_bound(6.0, 0.95)) <= 1


def test_bounds_grow_with_the_number_of_draws():
    one = sbh.pmf(2.0)[1]
    bounds = [error_bound_of_sum(one, n) for n in range(1, 20)]
    assert bounds == sorted(bounds) and bounds[0] == 6 < bounds[-1] < 19 * 6


@pytest.mark.parametrize(("pmf", "n", "confidence", "message"),
                         [(np.ones(3) / 3, 0, 0.95, "n must be a positive integer"),
                          (np.ones(3) / 3, 1.5, 0.95, "n must be a positive integer"),
                          (np.ones(3) / 3, True, 0.95, "n must be a positive integer"),
                          (np.ones(3) / 3, 2, 1.0, r"confidence must be in \(0, 1\)"),
                          (np.ones(3) / 3, 2, 0.0, r"confidence must be in \(0, 1\)"),
                          (np.ones(4) / 4, 1, 0.95, "pmf must be a 1-D array of odd length")])
def test_bad_input_is_refused(pmf, n, confidence, message):
    with pytest.raises(ValueError, match=message):
        error_bound_of_sum(pmf, n, confidence)


def test_a_sum_is_kept_within_kept_sds_of_its_standard_deviation():
    """The truncation the docstring states: after n draws the sum spans KEPT_SDS * sd * sqrt(n) on each side, sd
    that of one draw (a wrong sd keeps too little, which can only widen a bound, or too much, which is slow)."""
    one = discrete_gaussian.pmf(43.0)[1]
    z = np.arange(len(one)) - len(one) // 2
    bounds = SumErrorBounds(one)
    bounds(100)
    assert len(bounds._sum) == 2 * math.ceil(KEPT_SDS * math.sqrt(one @ (z * z)) * 10) + 1 < 100 * (len(one) - 1)


def test_fast_lengths_are_scipys_without_importing_scipy():
    """The FFT lengths are scipy's ``next_fast_len(n, real=True)`` (so the bounds are what they were with it), and a
    process that draws the bounds no longer imports scipy for them."""
    from scipy.fft import next_fast_len

    assert [fast_length(n) for n in range(1, 20_001)] == [next_fast_len(n, real=True) for n in range(1, 20_001)]
    assert all(fast_length(n) == next_fast_len(n, real=True) for n in (2**20 + 1, 3**11 + 7, 5**8 - 1, 10**7 + 19))
    with pytest.raises(ValueError, match="positive"):
        fast_length(0)
    code = ("import sys, numpy as np; from opal_dp.core.accuracy import SumErrorBounds; "
            "SumErrorBounds(np.array([0.25, 0.5, 0.25]))(30); print(any(m.startswith('scipy') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
