"""Stability-Based Histogram (SBH, Algorithm 1 of the Opal 2016 release) with discrete Laplace noise."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from numbers import Real

import numpy as np

from opal_dp.core.mechanism import Relation
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace


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


class StabilityHistogram:
    """SBH: ``a = count + Z`` (discrete Laplace, ``scale = k/epsilon``), released iff ``a >= threshold``.

    ``k = relation.bins_touched`` (2 for replace-one, 1 for add/remove), ``threshold =
    1 + scale*ln(k/delta)``; ``a`` is an integer, so ``a >= threshold`` iff ``a >= min_released_count
    = ceil(threshold)``. Only bins present in the data (count > 0) are passed in, so no new bins.

    Privacy ((epsilon, delta)-DP under ``relation``; neighbours differ in at most k bins, each by 1):
    (i) a bin with count > 0 in both neighbours: discrete Laplace with scale k/epsilon on a
        sensitivity-1 integer count is (epsilon/k, 0)-DP; thresholding is post-processing.
    (ii) a bin with count 1 in D and absent in D': it is released only if ``Z >= m - 1``
        (``m = min_released_count``). As ``m - 1 >= scale*ln(k/delta)`` and ``P(Z >= t*scale) =
        q**ceil(t*scale)/(1+q) <= exp(-t)`` (the document's Eq. (1) holds for the discrete Laplace
        too), this is at most delta/k: (0, delta/k). Because ``threshold`` is a float, the
        constructor verifies ``q**(m-1)/(1+q) <= delta/k`` itself with rigorous decimal bounds
        (ValueError otherwise).
    (iii) composing over the k touched bins gives (epsilon, delta); all other bins are identically
        distributed.
    Noise is drawn in input order and is independent of the counts; the output order is the
    input order, so the caller must order bins independently of the data (the release engine
    sorts them canonically; §3.3.1 of the document).
    """

    name = "stability_based_histogram"

    def __init__(
        self,
        epsilon: float,
        delta: float,
        relation: Relation = Relation.REPLACE_ONE,
        noise: DiscreteLaplace | None = None,
    ) -> None:
        if not (_is_real(epsilon) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
        if not (_is_real(delta) and 0 < delta < 1):
            raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.relation = Relation(relation)
        k = self.relation.bins_touched
        self.scale = k / self.epsilon
        if self.scale > MAX_SCALE:
            raise ValueError(f"epsilon too small: scale {self.scale} exceeds {MAX_SCALE}")
        self.threshold = 1 + self.scale * math.log(k / self.delta)
        self.min_released_count = math.ceil(self.threshold)
        if not _tail_within(self.scale, self.min_released_count - 1, self.delta, k):
            raise ValueError("float rounding of the threshold breaks the delta bound; adjust epsilon or delta")
        self._noise = DiscreteLaplace() if noise is None else noise

    def release(self, counts: np.ndarray) -> np.ndarray:
        """Noisy int64 counts in input order, 0 where suppressed. ``counts``: 1-D ints, all > 0."""
        counts = np.asarray(counts)
        if counts.ndim != 1 or counts.dtype.kind not in "iu" or not np.can_cast(counts.dtype, np.int64):
            raise ValueError(f"counts must be a 1-D integer array castable to int64, got {counts.dtype} "
                             f"with shape {counts.shape}")
        if counts.size and counts.min() <= 0:
            raise ValueError("counts must all be > 0: only bins present in the data may be released")
        noisy = counts.astype(np.int64) + self._noise.sample(self.scale, counts.size)
        return np.where(noisy >= self.min_released_count, noisy, 0)

    def release_probability(self, n: int) -> float:
        """Closed-form ``P(n + Z >= min_released_count)`` (see the module function)."""
        return release_probability(n, self.scale, self.min_released_count)

    def error_bound(self, confidence: float = 0.95) -> int:
        """Smallest integer ``e`` with ``P(|Z| <= e) >= confidence`` (see the module function)."""
        return error_bound(self.scale, confidence)

    def describe(self) -> dict:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relation": self.relation.value,
            "noise": "discrete_laplace",
            "scale": self.scale,
            "threshold": self.threshold,
            "min_released_count": self.min_released_count,
            "seeded": self._noise.seeded,
        }
