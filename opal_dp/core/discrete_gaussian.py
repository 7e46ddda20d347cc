"""Exact, vectorised discrete Gaussian sampler and the tail bounds its thresholds need.

``N_Z(0, sigma²)``: ``P(Z = z) ∝ exp(-z²/(2 sigma²))`` on the integers, with ``sigma²`` the exact rational
square of the float ``sigma``.

Sampling (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy", Algorithm 3):
``t = floor(sigma) + 1``; draw ``Y`` from the discrete Laplace of parameter ``t`` (our exact sampler, same
bits); accept with probability ``p(|Y|) = exp(-(|Y| - sigma²/t)² / (2 sigma²))``, else retry. Accepted ``Y``
are distributed exactly as ``N_Z(0, sigma²)`` (their Theorem). The accept decision is exact: a uniform word
``U`` stands for the real ``R = (U + R')/2**64`` and is compared with ``T = floor(p * 2**64)``, computed
exactly (``noise.floor_exp_neg``); ``U < T`` accepts, ``U > T`` rejects, and ``U == T`` (probability
``2**-64``) is settled by comparing further words with the next 64-bit digits of ``p``. ``p`` is irrational
(``exp`` of a non-zero rational), so the comparison always ends. Exactness rests only on the bits.
"""

from __future__ import annotations

import math
import threading
from fractions import Fraction
from functools import lru_cache

import numpy as np

from opal_dp.core.accuracy import error_bound_of_sum
from opal_dp.core.bits import BitSource, SecureBits
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace, floor_exp_neg

MAX_SIGMA = MAX_SCALE - 1
"""Largest accepted sigma (the discrete Laplace proposal of parameter floor(sigma) + 1 must be accepted)."""
_WORD = 64
_MASK = (1 << _WORD) - 1


def _check_sigma(sigma: float) -> float:
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.integer, np.floating)):
        raise ValueError(f"sigma must be a real number, got {sigma!r}")
    sigma = float(sigma)
    if not (math.isfinite(sigma) and 0 < sigma <= MAX_SIGMA):
        raise ValueError(f"sigma must be finite with 0 < sigma <= {MAX_SIGMA}, got {sigma!r}")
    return sigma


class _Acceptance:
    """Exact acceptance probabilities ``p(a) = exp(-(a - sigma²/t)² / (2 sigma²))`` for one sigma."""

    def __init__(self, sigma: float) -> None:
        self.sigma2 = Fraction(sigma) ** 2  # Fraction(float) is exact
        self.t = math.floor(sigma) + 1
        self._words = np.zeros(0, dtype=np.uint64)  # _words[a] = floor(p(a) * 2**64) where _known[a]
        self._known = np.zeros(0, dtype=bool)
        self._lock = threading.Lock()  # one instance per sigma is shared by the process: no thread sees a word half-made

    def exponent(self, a: int) -> Fraction:
        return (a - self.sigma2 / self.t) ** 2 / (2 * self.sigma2)

    def word(self, a: int) -> int:
        """``floor(p(a) * 2**64)``."""
        return int(self.words(np.array([a], dtype=np.int64))[0])

    def words(self, magnitude: np.ndarray) -> np.ndarray:
        """``floor(p(a) * 2**64)`` for each ``a`` of ``magnitude`` (non-negative integers), each computed once."""
        top = int(magnitude.max(initial=0))
        with self._lock:
            if top >= self._words.size:
                grown = top + 1 - self._words.size
                self._words = np.concatenate([self._words, np.zeros(grown, dtype=np.uint64)])
                self._known = np.concatenate([self._known, np.zeros(grown, dtype=bool)])
            missing = magnitude[~self._known[magnitude]]
            if missing.size:
                for a in np.unique(missing).tolist():
                    self._words[a] = floor_exp_neg(self.exponent(a), _WORD)
                    self._known[a] = True
            return self._words[magnitude]

    def digit(self, a: int, j: int) -> int:
        """The ``j``-th 64-bit word (``j >= 2``) of the binary expansion of ``p(a)``."""
        return floor_exp_neg(self.exponent(a), _WORD * j) & _MASK


@lru_cache(maxsize=64)
def _acceptance(sigma: float) -> _Acceptance:
    return _Acceptance(sigma)


class DiscreteGaussian:
    """Sampler of ``P(Z = z) ∝ exp(-z²/(2 sigma²))`` on the integers, exact given uniform ``bits``."""

    def __init__(self, bits: BitSource | None = None) -> None:
        self._bits = SecureBits() if bits is None else bits
        self._laplace = DiscreteLaplace(self._bits)

    @property
    def seeded(self) -> bool:
        return self._bits.seeded

    def sample(self, sigma: float, size: int) -> np.ndarray:
        """``size`` iid draws (``int64``) of ``N_Z(0, sigma²)``."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be a non-negative integer, got {size!r}")
        accept = _acceptance(_check_sigma(sigma))
        out = np.empty(int(size), dtype=np.int64)
        pending = np.arange(int(size))
        while pending.size:
            y = self._laplace.sample(accept.t, pending.size)
            magnitude = np.abs(y)
            threshold = accept.words(magnitude)
            u = self._bits.words(pending.size)
            ok = u < threshold
            ties = u == threshold  # probability 2**-64 a draw
            if np.count_nonzero(ties):
                for i in np.flatnonzero(ties):
                    ok[i] = self._below(accept, int(magnitude[i]))
            out[pending[ok]] = y[ok]
            pending = pending[~ok]
        return out

    def _below(self, accept: _Acceptance, a: int) -> bool:
        """Given ``U == floor(p(a) * 2**64)``: draw words of ``R'`` until they differ from ``p(a)``'s next words."""
        j = 2
        while True:
            w = int(self._bits.words(1)[0])
            d = accept.digit(a, j)
            if w != d:
                return w < d
            j += 1


# -- tails: rigorous bounds for thresholds, float figures for statements ------------------------


def tail_upper_bound(sigma: float, t: int) -> float:
    """An upper bound on ``P(Z >= t)`` for ``Z ~ N_Z(0, sigma²)`` and an integer ``t >= 1``.

    The normaliser ``sum_k exp(-k²/2sigma²)`` is at least ``sqrt(2 pi) sigma`` (Poisson summation: the
    correction terms are all positive). ``f(x) = exp(-x²/2sigma²)`` decreases for ``x >= 0``, so
    ``f(k) <= integral of f over [k-1, k]``; where f is also convex (``x >= sigma``) the midpoint rule gives
    the tighter ``f(k) <= integral over [k - 1/2, k + 1/2]``. Hence ``P(Z >= t) <= Q((t - 1/2)/sigma)`` for
    ``t - 1/2 >= sigma``, else ``Q((t - 1)/sigma)``, with Q the standard normal upper tail, evaluated with
    ``math.erfc`` and inflated by a relative 1e-9 that covers its float error.
    """
    shift = 0.5 if t - 0.5 >= sigma else 1.0
    return 0.5 * math.erfc((t - shift) / (sigma * math.sqrt(2))) * (1 + 1e-9)


def min_released_count(sigma: float, l0: int, linf: int, delta: float) -> int:
    """The smallest integer ``m > linf`` with ``l0 * P(Z >= m - linf) <= delta`` (by ``tail_upper_bound``)."""
    t = max(1, math.floor(sigma * math.sqrt(2 * math.log(l0 / delta))) - 2)
    while l0 * tail_upper_bound(sigma, t) > delta:
        t += 1
    while t > 1 and l0 * tail_upper_bound(sigma, t - 1) <= delta:
        t -= 1
    return linf + t


@lru_cache(maxsize=64)
def pmf(sigma: float) -> tuple[int, np.ndarray]:
    """(k0, pmf over k0, k0 + 1, ..., -k0): the mass beyond 40 sigma + 10 is below 1e-300."""
    k0 = math.ceil(40 * sigma) + 10
    z = np.arange(-k0, k0 + 1)
    weights = np.exp(-(z.astype(float) ** 2) / (2 * sigma * sigma))
    return -k0, weights / weights.sum()


def release_probability(true_count: int, sigma: float, min_released_count: int) -> float:
    """``P(true_count + Z >= min_released_count)`` in float64 (for statements, not for privacy)."""
    k0, mass = pmf(float(sigma))
    first = int(min_released_count) - int(true_count) - k0  # index of the smallest noise value that releases
    if first <= 0:
        return 1.0
    return float(mass[first:].sum())  # 0.0 beyond the support


def error_bound(sigma: float, confidence: float = 0.95) -> int:
    """Smallest integer ``e >= 0`` with ``P(|Z| <= e) >= confidence`` (float64)."""
    return error_bound_of_sum(pmf(float(sigma))[1], 1, confidence)
