"""Shared test helpers: scripted bits, reference values, and statistical checks at a fixed false-failure rate."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
from scipy import stats

ALPHA = 1e-6
"""False-failure probability allowed for each statistical assertion on seeded randomness (its outcome is then
fixed: it fails on every run or on none)."""
OS_ALPHA = 1e-7
"""For the few assertions whose point is the OS source itself (``SecureBits``, ``os.urandom``): fewer than ten in
the suite, so together they fail a correct build with probability below 1e-6 (QUALITY.md)."""
Z_TWO_SIDED = stats.norm.isf(ALPHA / 2)
UINT64_MAX = 2**64 - 1


class ScriptedBits:
    """Hands out exactly the scripted words, in order; fails if asked for more."""

    seeded = True

    def __init__(self, words: list[int]) -> None:
        self._words = list(words)

    def words(self, n: int) -> np.ndarray:
        assert n <= len(self._words), "scripted words exhausted"
        out, self._words = self._words[:n], self._words[n:]
        return np.array(out, dtype=np.uint64)

    @property
    def remaining(self) -> int:
        return len(self._words)


def reference_floor(scale: float, k: int, bits: int) -> int:
    """``floor(exp(-k/scale) * 2**bits)`` recomputed plainly at 300 digits (independent of noise.py)."""
    with localcontext() as ctx:
        ctx.prec = 300
        v = (-(Decimal(k) / Decimal(scale))).exp() * Decimal(2) ** bits
        f = int(v)
        assert Decimal(1e-200) < v - f < 1 - Decimal(1e-200), "reference not resolved"
    return f


def pmf(scale: float, z: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * np.exp(-np.abs(z) / scale)


def chi_square_pvalue(z: np.ndarray, scale: float, min_expected: float = 20.0) -> float:
    """Goodness of fit of integer draws to the discrete Laplace.

    Bins: ``Z <= -a``, each integer in ``(-a, a)``, ``Z >= a``, with the largest ``a`` such that the
    expected count of ``Z >= a`` (``n q**a/(1+q)``) is at least ``min_expected``.
    """
    n, q = z.size, math.exp(-1 / scale)
    a = 0
    while n * q ** (a + 1) / (1 + q) >= min_expected:
        a += 1
    assert a >= 1, "too few draws for this scale"
    tail = q**a / (1 + q)
    expected = n * np.concatenate(([tail], pmf(scale, np.arange(-a + 1, a)), [tail]))
    observed = np.bincount(np.clip(z, -a, a) + a, minlength=2 * a + 1)
    return float(stats.chisquare(observed, expected).pvalue)


def binomial_interval(successes: int, trials: int) -> tuple[float, float]:
    """Clopper-Pearson interval that misses the true rate with probability at most ALPHA."""
    ci = stats.binomtest(successes, trials).proportion_ci(confidence_level=1 - ALPHA, method="exact")
    return ci.low, ci.high


def trip_sbh(epsilon: float, delta: float, relation=None, noise=None):
    """The 2016 SBH: one trip under ``relation`` (default replace-one)."""
    from opal_dp.core import ContributionBounds, PrivacyUnit, Relation, StabilityHistogram, sensitivity

    relation = Relation.REPLACE_ONE if relation is None else Relation(relation)
    return StabilityHistogram(epsilon, delta, sensitivity(PrivacyUnit.TRIP, relation, ContributionBounds()), noise)
