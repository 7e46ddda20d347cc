"""Exact, vectorised discrete Laplace sampler.

``Z = G1 - G2`` with ``G1, G2`` iid geometric, ``P(G >= k) = q**k``, ``q = exp(-1/scale)``; then
``P(Z = z) = (1 - q)/(1 + q) * q**|z|`` exactly, i.e. proportional to ``exp(-|z|/scale)``.

Each geometric is drawn by inversion with no floating point. A uniform word ``U`` stands for the
real ``R = (U + R')/2**64`` (``R'`` the value of the words not yet drawn), so ``R`` is uniform on
[0, 1) and ``G = #{k >= 1 : R < q**k}`` has ``P(G >= k) = q**k``. The table
``T_k = floor(q**k * 2**64)``, ``k = 1..K``, is computed exactly (``decimal``, directed rounding,
precision raised until the floor is certain), and is strictly decreasing for every scale accepted.
Since ``q**k * 2**64`` is irrational, ``U < T_k`` implies ``R < q**k`` and ``U > T_k`` implies
``R > q**k``. ``U == T_k`` (probability at most ``K * 2**-64``) is decided by comparing further
words with the next 64-bit digits of ``q**k``. If ``R < q**K`` then, by memorylessness,
``G = K + `` a fresh geometric, drawn the same way. Exactness thus rests only on ``bits``
delivering independent uniform words.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

import numpy as np

from opal_dp.core.bits import BitSource, SecureBits

MAX_SCALE = 2.0**10
"""Largest accepted scale (the exact table has about ``22.2 * scale`` entries, built once)."""


def laplace_scale(l1: int, epsilon: float) -> float:
    """The smallest float ``>= l1/epsilon``, checked in exact rationals: the Laplace scale of an ``l1``-sensitive
    count vector at ``epsilon``, rounded up (a larger scale never weakens the guarantee)."""
    exact = Fraction(l1) / Fraction(epsilon)
    scale = float(exact)
    if Fraction(scale) < exact:
        scale = math.nextafter(scale, math.inf)
    return scale

_WORD = 64
_MASK = (1 << _WORD) - 1
_UINT64_MAX = np.uint64(_MASK)


def _check_scale(scale: float) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise ValueError(f"scale must be a real number, got {scale!r}")
    scale = float(scale)
    if not (math.isfinite(scale) and 0 < scale <= MAX_SCALE):
        raise ValueError(f"scale must be finite with 0 < scale <= {MAX_SCALE}, got {scale!r}")
    return scale


def _floor_scaled_power(inv_scale: Fraction, k: int, bits: int) -> int:
    """Exactly ``floor(exp(-k * inv_scale) * 2**bits)`` for ``k >= 1``."""
    return floor_exp_neg(k * inv_scale, bits)


CHAIN_GUARD_DIGITS = 12
"""Digits kept beyond ``floor_exp_neg``'s first precision by ``_floor_scaled_powers``: the chain of ``size``
products widens its enclosure by about ``2 * size`` units of the last digit, and ``size <= 22,720``."""


def _floor_scaled_powers(inv_scale: Fraction, size: int, bits: int) -> list[int]:
    """Exactly ``floor(exp(-k * inv_scale) * 2**bits)`` for ``k = 1..size``, as ``_floor_scaled_power`` gives each.

    ``q = exp(-inv_scale)`` is enclosed as in ``floor_exp_neg`` (directed rounding, widened by the relative error of
    the correctly rounded ``Decimal.exp``), then ``q**k`` by products rounded down from the lower bound and up from
    the upper one: each bound stays a bound. Where the two bounds of ``q**k * 2**bits`` have the same floor, that is
    the floor; elsewhere (within about ``10**-40`` of an integer) ``floor_exp_neg`` decides that entry alone. One
    exponential and two products per entry instead of two exponentials."""
    prec = 40 + bits // 3 + CHAIN_GUARD_DIGITS
    down, up = Context(prec=prec, rounding=ROUND_FLOOR), Context(prec=prec, rounding=ROUND_CEILING)
    num, den = Decimal(inv_scale.numerator), Decimal(inv_scale.denominator)
    rel = Decimal(10) ** (1 - prec)
    with localcontext(down):
        q_lo = (-up.divide(num, den)).exp() * (1 - rel)
    with localcontext(up):
        q_hi = (-down.divide(num, den)).exp() * (1 + rel)
    unit = Decimal(2**bits)
    lo, hi, out = unit, unit, []
    for k in range(1, size + 1):
        lo, hi = down.multiply(lo, q_lo), up.multiply(hi, q_hi)
        floor = int(lo)  # lo >= 0: int() is the floor
        out.append(floor if floor == int(hi) else _floor_scaled_power(inv_scale, k, bits))
    return out


def floor_exp_neg(x: Fraction, bits: int) -> int:
    """Exactly ``floor(exp(-x) * 2**bits)`` for a rational ``x > 0``.

    Lower/upper bounds from directed rounding; ``Decimal.exp`` is correctly rounded (error at
    most half an ulp, so relative at most ``10**(1 - prec)``). ``exp(-x)`` is irrational for rational
    ``x != 0`` (Lindemann), so raising the precision eventually puts both bounds in the same unit interval.
    """
    if not x > 0:
        raise ValueError(f"x must be a positive rational, got {x!r}")
    num, den = x.numerator, x.denominator
    prec = 40 + bits // 3
    while True:
        with localcontext() as ctx:
            ctx.prec = prec
            rel = Decimal(10) ** (1 - prec)
            ctx.rounding = ROUND_CEILING
            x_hi = Decimal(num) / Decimal(den)
            ctx.rounding = ROUND_FLOOR
            x_lo = Decimal(num) / Decimal(den)
            lo = (-x_hi).exp() * (1 - rel) * Decimal(2**bits)
            ctx.rounding = ROUND_CEILING
            hi = (-x_lo).exp() * (1 + rel) * Decimal(2**bits)
        if int(lo) == int(hi):  # both >= 0: int() is floor
            return int(lo)
        prec *= 2


GUIDE_BITS = 16
"""The inversion's guide table has one entry per value of a word's top ``GUIDE_BITS`` bits (``_Table.rank``)."""
_GUIDE_SHIFT = np.uint64(_WORD - GUIDE_BITS)


class _Table:
    """Inversion table for one scale: ``K`` and ``T_1..T_K`` stored ascending, and a guide to rank words in it."""

    def __init__(self, scale: float) -> None:
        self.inv_scale = 1 / Fraction(scale)  # Fraction(float) is exact
        self.size = max(1, math.ceil(32 * math.log(2) * scale))  # q**K <= 2**-32 (approx.)
        t = _floor_scaled_powers(self.inv_scale, self.size, _WORD)
        self.ascending = np.array(t[::-1], dtype=np.uint64)  # T_K, ..., T_1
        # below[j] = the largest entry <= U when searchsorted gives j (sentinel: never equals U)
        self.below = np.concatenate(([_UINT64_MAX], self.ascending))
        # guide[b]: the rank shared by every word whose top bits are b, or -1 where an entry falls among them
        starts = np.arange(1 << GUIDE_BITS, dtype=np.uint64) << _GUIDE_SHIFT
        first = np.searchsorted(self.ascending, starts, side="right")
        last = np.searchsorted(self.ascending, starts | (_UINT64_MAX >> np.uint64(GUIDE_BITS)), side="right")
        self.guide = np.where(first == last, first, -1).astype(np.intp)

    def rank(self, u: np.ndarray) -> np.ndarray:
        """``np.searchsorted(ascending, u, side="right")``, exactly: the guide answers every word whose top bits
        hold no entry (the rank is monotone in the word), the search only the others (about ``K / 2**16`` of them)."""
        j = self.guide[u >> _GUIDE_SHIFT]
        unsure = j < 0
        if np.count_nonzero(unsure):
            j[unsure] = np.searchsorted(self.ascending, u[unsure], side="right")
        return j

    def next_digit(self, k: int, j: int) -> int:
        """The ``j``-th 64-bit word (``j >= 2``) of the binary expansion of ``q**k``."""
        return _floor_scaled_power(self.inv_scale, k, _WORD * j) & _MASK


@lru_cache(maxsize=32)
def _table(scale: float) -> _Table:
    return _Table(scale)


class DiscreteLaplace:
    """Sampler of ``P(Z = z) ∝ exp(-|z|/scale)`` on the integers, exact given uniform ``bits``."""

    def __init__(self, bits: BitSource | None = None) -> None:
        self._bits = SecureBits() if bits is None else bits

    @property
    def seeded(self) -> bool:
        return self._bits.seeded

    def sample(self, scale: float, size: int) -> np.ndarray:
        """``size`` iid discrete Laplace draws (``int64``) with parameter ``q = exp(-1/scale)``."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be a non-negative integer, got {size!r}")
        g = self.geometric(scale, 2 * int(size))
        return g[:size] - g[size:]

    def geometric(self, scale: float, size: int) -> np.ndarray:
        """``size`` iid geometric draws (``int64``) with ``P(G >= k) = q**k``, ``q = exp(-1/scale)``, ``k >= 0``."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be a non-negative integer, got {size!r}")
        return self._geometric(_table(_check_scale(scale)), int(size))

    def _geometric(self, table: _Table, n: int) -> np.ndarray:
        u = self._bits.words(n)
        j = table.rank(u)
        g = table.size - j  # #{k : T_k > U}: those k certainly have R < q**k
        ties = table.below[j] == u  # U == T_k: is R < q**k? (probability at most K * 2**-64 a draw)
        if np.count_nonzero(ties):
            for i in np.flatnonzero(ties):
                if self._fraction_below(table, table.size + 1 - int(j[i])):
                    g[i] += 1
        beyond = g == table.size  # R < q**K: add a fresh geometric (memorylessness)
        if redraw := int(np.count_nonzero(beyond)):
            g[beyond] += self._geometric(table, redraw)
        return g

    def _fraction_below(self, table: _Table, k: int) -> bool:
        """Given ``U == T_k``: draw words of ``R'`` until they differ from ``q**k``'s next words."""
        j = 2
        while True:
            w = int(self._bits.words(1)[0])
            d = table.next_digit(k, j)
            if w != d:
                return w < d
            j += 1
