"""Stability-Based Histogram (SBH, Algorithm 1 of the Opal 2016 release) with discrete Laplace noise,
generalised from one trip to any bounded contribution (L0, L1, L-infinity)."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from numbers import Real

import numpy as np

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace, laplace_scale
from opal_dp.core.sensitivity import Sensitivity


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _tail_within(scale: float, t: int, delta: float, k: int) -> bool:
    """Rigorously whether ``k * P(Z >= t) = k * q**t/(1+q) <= delta`` (``t >= 0``).

    Directed rounding at 40 digits; ``Decimal.exp`` is correctly rounded, so multiplying by
    ``1 -+ 10**-39`` brackets it. An undecidably close call counts as failure.
    """
    with localcontext() as ctx:
        ctx.prec = 40
        rel = Decimal(10) ** (1 - ctx.prec)
        ctx.rounding = ROUND_CEILING
        inv_hi = 1 / Decimal(scale)
        ctx.rounding = ROUND_FLOOR
        t_lo = Decimal(t) / Decimal(scale)
        den_lo = 1 + (-inv_hi).exp() * (1 - rel)
        ctx.rounding = ROUND_CEILING
        tail_hi = (-t_lo).exp() * (1 + rel) / den_lo * k
        return tail_hi <= Decimal(delta)


def release_probability(true_count: int, scale: float, min_released_count: int) -> float:
    """``P(true_count + Z >= min_released_count)`` for discrete Laplace ``Z``, closed form in float64.

    With ``q = exp(-1/scale)`` and integer ``t``: ``P(Z >= t) = q**t/(1+q)`` for ``t >= 0`` and
    ``1 - q**(1-t)/(1+q)`` for ``t <= 0`` (symmetry).
    """
    t = int(min_released_count) - int(true_count)
    q = math.exp(-1 / scale)
    if t >= 0:
        return math.exp(-t / scale) / (1 + q)
    return 1 - math.exp(-(1 - t) / scale) / (1 + q)


def error_bound(scale: float, confidence: float = 0.95) -> int:
    """Smallest integer ``e >= 0`` with ``P(|Z| <= e) >= confidence``, closed form in float64.

    ``P(|Z| > e) = 2 q**(e+1)/(1+q)``, so ``e = ceil(scale * ln(2/((1-confidence)(1+q)))) - 1``.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    q = math.exp(-1 / scale)
    return max(0, math.ceil(scale * math.log(2 / ((1 - confidence) * (1 + q)))) - 1)


def pmf(scale: float) -> tuple[int, np.ndarray]:
    """(k0, P(Z = z) for z = k0, k0 + 1, ..., -k0), ``k0 = -(ceil(40 scale) + 10)``: the mass left out,
    ``2 q**(1 - k0)/(1 + q)``, is below 1e-17 (float64, for statements and charts)."""
    k = math.ceil(40 * scale) + 10
    q = math.exp(-1 / scale)
    return -k, (1 - q) / (1 + q) * np.exp(-np.abs(np.arange(-k, k + 1)) / scale)


class StabilityHistogram:
    """SBH: ``a = count + Z`` (discrete Laplace, ``scale = l1/epsilon``), released iff ``a >= threshold``.

    Calibrated to a ``Sensitivity`` (l0, l1, linf): ``threshold = linf + scale*ln(l0/delta)``; ``a`` is an
    integer, so ``a >= threshold`` iff ``a >= min_released_count = ceil(threshold)``. Only bins present in
    the data (count > 0) are passed in, so no new bins. For one trip (l0 = l1 = k, linf = 1) this is the
    2016 document's ``1 + (k/epsilon) ln(k/delta)``.

    Privacy ((epsilon, delta)-DP for neighbours within the sensitivity): bins get independent noise, so
    the release composes over bins.
    (i) bins present in both neighbours: the counts move by ``|d_b|`` with ``sum |d_b| <= l1``; discrete
        Laplace of scale ``l1/epsilon`` makes each bin (|d_b| epsilon/l1, 0)-DP, together (epsilon, 0);
        thresholding is post-processing.
    (ii) a bin present in D only has count ``c <= linf`` and is released only if ``Z >= m - c >= m - linf``
        (``m = min_released_count``), with probability at most ``q**(m-linf)/(1+q)``; in D' it is never
        output, so this bin is (0, q**(m-linf)/(1+q))-DP. As ``m - linf >= scale*ln(l0/delta)`` and
        ``P(Z >= t*scale) = q**ceil(t*scale)/(1+q) <= exp(-t)``, that is at most delta/l0, and at most
        l0 bins are such: (0, delta) together. The constructor verifies ``l0 q**(m-linf)/(1+q) <= delta``
        itself with rigorous decimal bounds (ValueError otherwise), since ``threshold`` is a float.
    (iii) basic composition of (i) and (ii): (epsilon, delta); all other bins are identically distributed.
    Noise is drawn in input order and is independent of the counts; the output order is the input
    order, so the caller must order bins independently of the data (the release engine sorts them
    canonically; document §3.3.1).
    """

    name = "stability_based_histogram"

    def __init__(
        self,
        epsilon: float,
        delta: float,
        sensitivity: Sensitivity,
        noise: DiscreteLaplace | None = None,
    ) -> None:
        if not (_is_real(epsilon) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
        if not (_is_real(delta) and 0 < delta < 1):
            raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
        if not isinstance(sensitivity, Sensitivity):
            raise ValueError(f"sensitivity must be a Sensitivity, got {sensitivity!r}")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.sensitivity = sensitivity
        self.scale = laplace_scale(sensitivity.l1, self.epsilon)  # rounded up
        if self.scale > MAX_SCALE:
            raise ValueError(f"epsilon too small for l1 = {sensitivity.l1}: scale {self.scale} exceeds {MAX_SCALE}")
        self.threshold = sensitivity.linf + self.scale * math.log(sensitivity.l0 / self.delta)
        self.min_released_count = math.ceil(self.threshold)
        if not _tail_within(self.scale, self.min_released_count - sensitivity.linf, self.delta, sensitivity.l0):
            raise ValueError("float rounding of the threshold breaks the delta bound; adjust epsilon or delta")
        self._noise = DiscreteLaplace() if noise is None else noise

    def release(self, counts: np.ndarray) -> np.ndarray:
        """Noisy int64 counts in input order, 0 where suppressed. ``counts``: 1-D ints, all > 0."""
        counts = checked_counts(counts)
        noisy = counts + self._noise.sample(self.scale, counts.size)
        return np.where(noisy >= self.min_released_count, noisy, 0)

    def cost(self) -> PrivacyCost:
        return PrivacyCost.approx_dp(self.epsilon, self.delta)

    def release_probability(self, n: int) -> float:
        """Closed-form ``P(n + Z >= min_released_count)`` (see the module function)."""
        return release_probability(n, self.scale, self.min_released_count)

    def error_bound(self, confidence: float = 0.95) -> int:
        """Smallest integer ``e`` with ``P(|Z| <= e) >= confidence`` (see the module function)."""
        return error_bound(self.scale, confidence)

    def describe(self) -> dict:
        return {
            "mechanism": self.name,
            "noise": "discrete_laplace",
            "epsilon": self.epsilon,
            "delta": self.delta,
            "scale": self.scale,
            "threshold": self.threshold,
            "min_released_count": self.min_released_count,
            "sensitivity": self.sensitivity.describe(),
            "cost": self.cost().describe(),
            "seeded": self._noise.seeded,
        }


def checked_counts(counts: np.ndarray) -> np.ndarray:
    """``counts`` as int64 after checking it is a 1-D integer array of present bins (all > 0)."""
    counts = np.asarray(counts)
    if counts.ndim != 1 or counts.dtype.kind not in "iu" or not np.can_cast(counts.dtype, np.int64):
        raise ValueError(f"counts must be a 1-D integer array castable to int64, got {counts.dtype} "
                         f"with shape {counts.shape}")
    if counts.size and counts.min() <= 0:
        raise ValueError("counts must all be > 0: only bins present in the data may be released")
    return counts.astype(np.int64)
