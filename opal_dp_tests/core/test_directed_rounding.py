"""Noise scales are rounded up, checked in exact rationals: the SBH and public-domain Laplace scale ``l1/epsilon``
and the public-domain Gaussian sigma (``sigma_for``), as the prefix tree and the thresholded Gaussian already do."""

from __future__ import annotations

from fractions import Fraction

import pytest

from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.core.noise import laplace_scale
from opal_dp.core.sbh import StabilityHistogram
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.release.marginals import public_domain

PAIRS = [(l1, eps) for l1 in (1, 2, 3, 4, 6, 7, 12, 28) for eps in (0.1, 0.3, 0.7, 0.9, 1.1, 1.3, 1.7, 2.9, 0.45, 0.5, 0.25)]
"""Pairs whose l1/epsilon a float rounds, and (epsilon 0.5, 0.25) pairs where it is exact: the scale is then l1/epsilon
itself, not the next float (kills the mutant ``Fraction(scale) <= exact`` of ``laplace_scale``)."""


def test_laplace_scale_is_the_smallest_float_at_least_l1_over_epsilon() -> None:
    import math

    for l1, eps in PAIRS:
        scale = laplace_scale(l1, eps)
        assert Fraction(scale) >= Fraction(l1) / Fraction(eps) > Fraction(math.nextafter(scale, 0.0))


def test_sbh_scale_is_rounded_up() -> None:
    below = [(l1, eps) for l1, eps in PAIRS
             if Fraction(StabilityHistogram(eps, 1e-6, Sensitivity(l1, l1, l1, 1)).scale) < Fraction(l1) / Fraction(eps)]
    assert below == []


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_public_domain_noise_is_rounded_up(mechanism: str) -> None:
    for l1, value in PAIRS:
        sens = Sensitivity(l1, l1, l1, 1)
        noise = public_domain.calibrate(mechanism, sens, {t: value for t in public_domain.TABLES})
        for table in public_domain.TABLES:
            got = noise.parameters[table]
            if mechanism == "laplace":
                assert Fraction(got) >= Fraction(l1) / Fraction(value)
            else:
                assert got == sigma_for(value, sens.l2_squared)
                assert Fraction(sens.l2_squared) / (2 * Fraction(got) ** 2) <= Fraction(value)
