"""Exact sampling of the empty cells of a public domain that pass a threshold, without drawing their noise.

Setting (Montreal prefix tree, Theorem 4.1; Cormode et al. 2012): ``k`` cells with true count 0 each get iid
integer noise ``Z``; naive enumeration draws ``Z_1..Z_k`` and keeps ``S = {i : Z_i >= t}`` with the values
``Z_S``. ``threshold_cells`` instead

1. decides for each cell an exact Bernoulli(``p``), ``p = P(Z >= t)``: one uniform word ``U`` per cell stands
   for ``R = (U + R')/2**64`` and is compared with ``floor(p * 2**64)``; a tie (probability ``2**-64``) is
   settled by further words against further binary digits of ``p``. Those digits are exact: ``p`` is enclosed
   by interval arithmetic (``decimal``, directed rounding, series tails bounded) and the precision raised until
   the floor is certain. ``p`` is irrational for the discrete Laplace (``q**t/(1 + q)`` with ``q = exp(-1/b)``
   transcendental), so that always ends; for the discrete Gaussian it ends unless ``p`` has a finite binary
   expansion, and an error is raised rather than a guess made;
2. draws each kept cell's value from ``Z | Z >= t`` exactly (Laplace: ``t + G``, memorylessness; Gaussian:
   rejection from ``t + G`` with an exact accept step, see ``GaussianNoise.draw_at_least``).

Proof of equality in law. For a set ``A`` and values ``z_A >= t``, naive enumeration gives
``P(S = A, Z_A = z_A) = prod_{i in A} P(Z = z_i) * (1 - p)**(k - |A|)
= p**|A| (1 - p)**(k - |A|) * prod_{i in A} P(Z = z_i | Z >= t)``. Step 1 gives ``P(S = A) = p**|A|
(1 - p)**(k - |A|)`` (independent exact Bernoulli trials: a Binomial(k, p) number of cells, uniformly chosen),
and step 2 the product of the conditionals, independently. The two laws are equal; exactness rests only on the
bits being independent uniform words.

Cost: one word and one comparison per empty cell (naive: two table-searched geometrics per Laplace draw; a
rejection loop of Laplace proposals and accept words per Gaussian draw), plus ``O(k p)`` conditional draws. What it does not give is the values of the cells below ``t``: an estimator
that needs them (least squares through row and column sums, whose joint law depends on every cell) must draw
every cell, with ``law.draw``.

``sparse_threshold_cells`` gives the same law at a cost of ``O(k p)`` instead of ``O(k)``, for domains far larger
than the number of cells expected to pass (the prefix tree's empty children, ``core.prefix_tree``): the positions
of the successes of ``k`` iid Bernoulli(``p``) trials are found by skipping, the number of failures before each
success being iid with ``P(N >= n) = a**n``, ``a = 1 - p``. One uniform ``R`` gives ``N = #{j >= 1 : R < a**j} =
floor(ln R / ln a)`` (``P(N >= n) = P(R < a**n) = a**n``). That floor is read in floating point where ``ln R/ln a``
lies more than a relative ``1e-12`` from an integer (``R``'s own interval ``[U, U + 1)/2**64`` included; libm's
``log`` errs by a few ulp, ~1e-16, so the floor is certain), else decided exactly (``_exact_failures``: interval
arithmetic on ``a**n`` and further words of ``R``). Given the positions, the values are drawn as above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from typing import Protocol

import numpy as np

from opal_dp.core.bits import BitSource, SecureBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian, _check_sigma
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace, _check_scale, floor_exp_neg

_WORD = 64
_MASK = (1 << _WORD) - 1
_MAX_PREC = 20_000
Bounds = Callable[[int], tuple[Decimal, Decimal]]


class ThresholdNoise(Protocol):
    """An integer noise law ``Z`` with what ``threshold_cells`` needs."""

    bits: BitSource

    def draw(self, size: int) -> np.ndarray:
        """``size`` iid draws of ``Z``."""
        ...

    def tail_digit(self, t: int, j: int) -> int:
        """The ``j``-th 64-bit word (``j >= 1``) of the binary expansion of ``P(Z >= t)``."""
        ...

    def tail_bounds(self, t: int, prec: int) -> tuple[Decimal, Decimal]:
        """Rigorous bounds ``lo <= P(Z >= t) <= hi`` at ``prec`` significant digits."""
        ...

    def draw_at_least(self, t: int, size: int) -> np.ndarray:
        """``size`` iid draws of ``Z | Z >= t``."""
        ...


def _check_threshold(t: int) -> int:
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
        raise ValueError(f"threshold t must be an integer >= 1, got {t!r}")
    return int(t)


def _exp_neg_bounds(x: Fraction, prec: int) -> tuple[Decimal, Decimal]:
    """``lo <= exp(-x) <= hi`` for a rational ``x >= 0`` (``Decimal.exp`` errs by at most half an ulp)."""
    with localcontext() as ctx:
        ctx.prec = prec
        rel = Decimal(10) ** (1 - prec)
        ctx.rounding = ROUND_CEILING
        x_hi = Decimal(x.numerator) / Decimal(x.denominator)
        ctx.rounding = ROUND_FLOOR
        x_lo = Decimal(x.numerator) / Decimal(x.denominator)
        lo = (-x_hi).exp() * (1 - rel)
        ctx.rounding = ROUND_CEILING
        hi = (-x_lo).exp() * (1 + rel)
    return lo, hi


def _floor_word(bounds: Bounds, j: int) -> int:
    """``floor(p * 2**(64 j)) mod 2**64`` for ``p`` enclosed by ``bounds(prec)``; precision raised until certain."""
    prec = 40 + _WORD * j // 3
    while prec <= _MAX_PREC:
        lo, hi = bounds(prec)
        with localcontext() as ctx:
            ctx.prec = prec + 30
            ctx.rounding = ROUND_FLOOR
            f_lo = int(lo * Decimal(2) ** (_WORD * j))
            ctx.rounding = ROUND_CEILING
            f_hi = int(hi * Decimal(2) ** (_WORD * j))  # int() truncates: both are >= 0
        if f_lo == f_hi:
            return f_lo & _MASK
        prec *= 2
    raise ArithmeticError("tail probability not resolved: it may have a finite binary expansion")


def _bernoulli(bits: BitSource, keys: np.ndarray, digit: Callable[[int, int], int]) -> np.ndarray:
    """Independent exact Bernoulli(``p(key)``) per key; ``digit(key, j)``: the ``j``-th word of ``p(key)`` in (0, 1)."""
    values, inverse = np.unique(keys, return_inverse=True)
    first = np.array([digit(int(v), 1) for v in values], dtype=np.uint64)
    threshold = first[inverse]
    u = bits.words(len(keys))
    out = u < threshold
    for i in np.flatnonzero(u == threshold):  # R' decides: compare further words with further digits
        j = 2
        while True:
            w, d = int(bits.words(1)[0]), digit(int(keys[i]), j)
            if w != d:
                out[i] = w < d
                break
            j += 1
    return out


class LaplaceNoise:
    """Discrete Laplace ``P(Z = z) ∝ exp(-|z|/scale)``; ``P(Z >= t) = q**t/(1 + q)`` for ``t >= 1``."""

    def __init__(self, scale: float, bits: BitSource | None = None) -> None:
        self.scale = _check_scale(scale)
        self.bits = SecureBits() if bits is None else bits
        self._sampler = DiscreteLaplace(self.bits)

    def draw(self, size: int) -> np.ndarray:
        return self._sampler.sample(self.scale, size)

    def tail_bounds(self, t: int, prec: int) -> tuple[Decimal, Decimal]:
        return _laplace_tail_bounds(self.scale, _check_threshold(t), prec)

    def tail_digit(self, t: int, j: int) -> int:
        return _laplace_digit(self.scale, _check_threshold(t), j)

    def draw_at_least(self, t: int, size: int) -> np.ndarray:
        """``P(Z = z | Z >= t) ∝ q**z`` for ``z >= t >= 1``: ``t + G`` with ``P(G >= k) = q**k``."""
        return _check_threshold(t) + self._sampler.geometric(self.scale, size)


class GaussianNoise:
    """Discrete Gaussian ``P(Z = z) ∝ f(z) = exp(-z²/(2 sigma²))``."""

    def __init__(self, sigma: float, bits: BitSource | None = None) -> None:
        self.sigma = _check_sigma(sigma)
        self.bits = SecureBits() if bits is None else bits
        self._s2 = Fraction(self.sigma) ** 2
        self._sampler = DiscreteGaussian(self.bits)
        self._laplace = DiscreteLaplace(self.bits)

    def draw(self, size: int) -> np.ndarray:
        return self._sampler.sample(self.sigma, size)

    def tail_bounds(self, t: int, prec: int) -> tuple[Decimal, Decimal]:
        return _gaussian_tail_bounds(self.sigma, _check_threshold(t), prec)

    def tail_digit(self, t: int, j: int) -> int:
        return _gaussian_digit(self.sigma, _check_threshold(t), j)

    def draw_at_least(self, t: int, size: int) -> np.ndarray:
        """Rejection: propose ``z = t + G``, ``P(G = g) ∝ exp(-g/s)``, ``s >= sigma²/t`` (so ``1/s <= t/sigma²``),
        accept with ``f(z)/f(t) * exp(g/s) = exp(-e(g))``, ``e(g) = g(2t + g)/(2 sigma²) - g/s >= g²/(2 sigma²)``
        (``<= 1``). Accepted ``z`` have law ``∝ f(z)`` on ``z >= t``; the accept step is exact like the
        sampler's own (``floor_exp_neg`` digits of ``exp(-e)``), and ``g = 0`` is always accepted."""
        t = _check_threshold(t)
        scale = float(self._s2 / t)
        if Fraction(scale) < self._s2 / t:
            scale = math.nextafter(scale, math.inf)
        if scale > MAX_SCALE:
            raise ValueError(f"sigma²/t = {scale} exceeds the geometric sampler's MAX_SCALE {MAX_SCALE}")
        inv = 1 / Fraction(scale)

        def digit(g: int, j: int) -> int:
            return floor_exp_neg(Fraction(g * (2 * t + g)) / (2 * self._s2) - g * inv, _WORD * j) & _MASK

        out = np.empty(int(size), dtype=np.int64)
        pending = np.arange(int(size))
        while pending.size:
            g = self._laplace.geometric(scale, pending.size)
            ok = g == 0
            ok[~ok] = _bernoulli(self.bits, g[~ok], digit)
            out[pending[ok]] = t + g[ok]
            pending = pending[~ok]
        return out


@lru_cache(maxsize=256)
def _laplace_tail_bounds(scale: float, t: int, prec: int) -> tuple[Decimal, Decimal]:
    """``P(Z >= t) = q**t/(1 + q)``, ``q = exp(-1/scale)``; each quotient's denominator rounded the other way."""
    inv = 1 / Fraction(scale)
    qt_lo, qt_hi = _exp_neg_bounds(t * inv, prec)
    q_lo, q_hi = _exp_neg_bounds(inv, prec)
    with localcontext() as ctx:
        ctx.prec = prec
        ctx.rounding = ROUND_CEILING
        den_hi = 1 + q_hi
        ctx.rounding = ROUND_FLOOR
        den_lo = 1 + q_lo
        lo = qt_lo / den_hi
        ctx.rounding = ROUND_CEILING
        hi = qt_hi / den_lo
    return lo, hi


@lru_cache(maxsize=256)
def _gaussian_tail_bounds(sigma: float, t: int, prec: int) -> tuple[Decimal, Decimal]:
    """``P(Z >= t) = S_t / (1 + 2 S_1)`` with ``S_a = sum_{z >= a} f(z)``, ``f(z) = exp(-z²/(2 sigma²))``, summed
    to ``M`` with the rest bounded by ``f(M + 1)/(1 - r)``, ``r = exp(-(2M + 3)/(2 sigma²)) >= f(z + 1)/f(z)`` for
    every ``z > M``; sums and quotients rounded outwards."""
    s2 = Fraction(sigma) ** 2
    m = t + math.ceil(sigma * math.sqrt(2 * math.log(10) * (prec + 10))) + 1
    terms = [_exp_neg_bounds(Fraction(z * z) / (2 * s2), prec) for z in range(1, m + 2)]  # terms[k]: z = k + 1
    _, r_hi = _exp_neg_bounds(Fraction(2 * m + 3) / (2 * s2), prec)
    with localcontext() as ctx:
        ctx.prec = prec
        ctx.rounding = ROUND_FLOOR
        gap = 1 - r_hi
        st_lo = sum((lo for lo, _ in terms[t - 1:m]), Decimal(0))
        s1_lo = sum((lo for lo, _ in terms[:t - 1]), Decimal(0)) + st_lo
        den_lo = 1 + 2 * s1_lo
        ctx.rounding = ROUND_CEILING
        st_hi = sum((hi for _, hi in terms[t - 1:m]), Decimal(0)) + terms[m][1] / gap
        s1_hi = sum((hi for _, hi in terms[:t - 1]), Decimal(0)) + st_hi
        den_hi = 1 + 2 * s1_hi
        hi = st_hi / den_lo
        ctx.rounding = ROUND_FLOOR
        lo = st_lo / den_hi
    return lo, hi


@lru_cache(maxsize=256)
def _laplace_digit(scale: float, t: int, j: int) -> int:
    return _floor_word(lambda prec: _laplace_tail_bounds(scale, t, prec), j)


@lru_cache(maxsize=256)
def _gaussian_digit(sigma: float, t: int, j: int) -> int:
    return _floor_word(lambda prec: _gaussian_tail_bounds(sigma, t, prec), j)


def tail_probability(law: ThresholdNoise, t: int) -> float:
    """``P(Z >= t)`` as a float (for statements and expected counts, not for sampling)."""
    lo, hi = law.tail_bounds(_check_threshold(t), 40)
    return float((lo + hi) / 2)


def threshold_cells(law: ThresholdNoise, k: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``0..k-1``, ascending; their noise values) of the ``k`` empty cells whose noise is ``>= t``,
    sampled exactly without drawing the other cells' noise (see the module docstring)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    t = _check_threshold(t)
    passed = _bernoulli(law.bits, np.zeros(int(k), dtype=np.int64), lambda _, j: law.tail_digit(t, j))
    positions = np.flatnonzero(passed)
    return positions, law.draw_at_least(t, positions.size)


def sparse_threshold_cells(law: ThresholdNoise, k: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The same law as ``threshold_cells`` by skipping between passing cells: cost ``O(k p)`` (module docstring)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    t, k = _check_threshold(t), int(k)
    lo, hi = law.tail_bounds(t, 40)
    p = float((lo + hi) / 2)
    log_a = math.log1p(-p)
    found, end = [], -1  # end: position of the last success so far
    while end < k:
        batch = max(16, int(1.2 * (k - end) * p) + 16)
        u = law.bits.words(batch)
        gaps = _failures(law.bits, u, log_a, lambda prec: law.tail_bounds(t, prec), k - end)
        pos = end + np.cumsum(gaps + 1)
        found.append(pos[pos < k])
        end = int(pos[-1])
    positions = np.concatenate(found)  # the loop runs at least once: end starts at -1 < k
    return positions, law.draw_at_least(t, positions.size)


_WORD_SLACK = 2.0**12
"""Widening of a word's interval, in units of 2**-64, that covers its rounding to float64 (at most 2**10)."""


def _failures(bits: BitSource, u: np.ndarray, log_a: float, bounds: Bounds, cap: int) -> np.ndarray:
    """``N = floor(ln R / ln a)`` per word (module docstring), at most ``cap`` (enough to leave the domain)."""
    scale = 2.0**-64
    # float64(u) is within 2**10 of u (u < 2**64), and float64(u) +- 2**12 is exact: an exact enclosure of R
    # that float64 rounding of the word cannot break; the 1e-12 margin then covers only log's and the
    # division's few ulps, which are relative.
    u_float = u.astype(np.float64)
    r_hi = np.minimum((u_float + _WORD_SLACK) * scale, 1.0)
    r_lo = np.maximum(u_float - _WORD_SLACK, 0.5) * scale
    x_lo = np.log(r_hi) / log_a  # R below its interval's top: ln R / ln a above
    x_hi = np.log(r_lo) / log_a
    x_lo, x_hi = x_lo * (1 - 1e-12), x_hi * (1 + 1e-12)
    n = np.floor(x_lo)
    sure = ((np.floor(x_hi) == n) & (u > 0)) | (n >= cap)
    n = np.minimum(n, cap).astype(np.int64)
    for i in np.flatnonzero(~sure):
        n[i] = _exact_failures(bits, int(u[i]), bounds, cap)
    return n


def _exact_failures(bits: BitSource, word: int, bounds: Bounds, cap: int) -> int:
    """``#{j >= 1 : R < a**j}`` (at most ``cap``) for ``R = (word + R')/2**64``, ``a = 1 - p``, exactly: ``p``'s
    enclosure and ``R``'s interval are narrowed (more digits, more words) until the count is certain."""
    words, prec = [word], 40
    while True:
        p_lo, p_hi = bounds(prec)
        with localcontext() as ctx:
            ctx.prec = prec + 20
            slack = Decimal(10) ** (5 - ctx.prec)
            denom = Decimal(2) ** (_WORD * len(words))
            value = sum(w * Decimal(2) ** (_WORD * (len(words) - 1 - i)) for i, w in enumerate(words))
            r_lo, r_hi = value / denom * (1 - slack), (value + 1) / denom * (1 + slack)
            a_lo, a_hi = (1 - p_hi) * (1 - slack), (1 - p_lo) * (1 + slack)

            def below(n: int) -> bool | None:  # R < a**n ?  None: not yet certain
                if n == 0:
                    return True
                if r_hi < (a_lo**n) * (1 - slack):
                    return True
                if r_lo > (a_hi**n) * (1 + slack):
                    return False
                return None

            guess = math.floor(math.log(max(float(r_hi), 1e-300)) / math.log(float(a_hi)))
            n = min(max(guess, 0), cap)
            while True:
                here, nxt = below(n), below(n + 1)
                if here is False:
                    n -= 1
                elif here and nxt and n < cap:
                    n += 1
                elif here and (nxt is False or n >= cap):
                    return n
                else:
                    break
        words.append(int(bits.words(1)[0]))
        prec *= 2
