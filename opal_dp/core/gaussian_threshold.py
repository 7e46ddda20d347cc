"""Thresholded discrete Gaussian histogram: the card_period mechanism, accounted in zero-concentrated DP."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from opal_dp.core import discrete_gaussian as dg
from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.sbh import _is_real, checked_counts
from opal_dp.core.sensitivity import Sensitivity


def sigma_for(rho: float, l2_squared: int) -> float:
    """The smallest float sigma with ``l2_squared / (2 sigma²) <= rho``, checked in exact rationals.

    The correctly rounded quotient and root are within one float of the exact root: on the smallest such float or
    one below it, never above, so raising it until the exact check holds ends on the smallest one. (Were the
    estimate ever above, sigma would be a float too large: more noise, never less.)"""

    def within(sigma: float) -> bool:
        return Fraction(l2_squared) / (2 * Fraction(sigma) ** 2) <= Fraction(rho)

    sigma = math.sqrt(l2_squared / (2 * rho))
    while not within(sigma):
        sigma = math.nextafter(sigma, math.inf)
    return sigma


class GaussianThresholdHistogram:
    """``a = count + Z`` (discrete Gaussian, ``sigma = sqrt(l2_squared / (2 rho))``), released iff
    ``a >= min_released_count``, the smallest integer m with ``l0 * P(Z >= m - linf) <= delta``.

    Privacy (delta-approximate rho-zCDP for neighbours within the sensitivity):
    (i) bins present in both neighbours move by integers ``d_b`` with ``sum d_b² <= l2_squared``. For the
        discrete Gaussian and an integer shift d, the Rényi divergence of order alpha is exactly
        ``alpha d² / (2 sigma²)`` (Canonne, Kamath & Steinke 2020, Prop. 5); independent bins add up
        (tensorisation), so these bins are ``l2_squared / (2 sigma²) <= rho``-zCDP. Thresholding is
        post-processing.
    (ii) a bin present in one neighbour only has count ``c <= linf`` and is released with probability at
        most ``P(Z >= m - linf) <= delta / l0`` (``discrete_gaussian.tail_upper_bound``, rigorous); at most
        l0 such bins: with probability at least ``1 - delta`` none is released and the output is that of
        (i): delta-approximate rho-zCDP (Bun & Steinke 2016, Def. 1.5), as OpenDP's ``make_gaussian_threshold``.
    Noise is drawn in input order and is independent of the counts; the output order is the input order.
    """

    name = "gaussian_threshold_histogram"

    def __init__(self, rho: float, delta: float, sensitivity: Sensitivity, noise: dg.DiscreteGaussian | None = None):
        if not (_is_real(rho) and math.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be finite and > 0, got {rho!r}")
        if not (_is_real(delta) and 0 < delta < 1):
            raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
        if not isinstance(sensitivity, Sensitivity):
            raise ValueError(f"sensitivity must be a Sensitivity, got {sensitivity!r}")
        self.rho, self.delta, self.sensitivity = float(rho), float(delta), sensitivity
        self.sigma = sigma_for(self.rho, sensitivity.l2_squared)
        if self.sigma > dg.MAX_SIGMA:
            raise ValueError(f"rho too small for l2_squared = {sensitivity.l2_squared}: sigma {self.sigma} exceeds "
                             f"{dg.MAX_SIGMA}")
        self.scale = self.sigma
        self.min_released_count = dg.min_released_count(self.sigma, sensitivity.l0, sensitivity.linf, self.delta)
        self.threshold = float(self.min_released_count)
        self._noise = dg.DiscreteGaussian() if noise is None else noise

    def release(self, counts: np.ndarray) -> np.ndarray:
        """Noisy int64 counts in input order, 0 where suppressed. ``counts``: 1-D ints, all > 0."""
        counts = checked_counts(counts)
        noisy = counts + self._noise.sample(self.sigma, counts.size)
        return np.where(noisy >= self.min_released_count, noisy, 0)

    def cost(self) -> PrivacyCost:
        return PrivacyCost.zcdp(self.rho, self.delta)

    def release_probability(self, n: int) -> float:
        return dg.release_probability(n, self.sigma, self.min_released_count)

    def error_bound(self, confidence: float = 0.95) -> int:
        return dg.error_bound(self.sigma, confidence)

    def describe(self) -> dict:
        return {
            "mechanism": self.name,
            "noise": "discrete_gaussian",
            "rho": self.rho,
            "delta": self.delta,
            "sigma": self.sigma,
            "scale": self.sigma,
            "threshold": self.threshold,
            "min_released_count": self.min_released_count,
            "sensitivity": self.sensitivity.describe(),
            "cost": self.cost().describe(),
            "seeded": self._noise.seeded,
        }
