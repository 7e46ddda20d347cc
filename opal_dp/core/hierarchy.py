"""A hierarchical count release with exact totals: noise on every cell of every level of a public tree of cells,
a top-down weighted least-squares fit, integer rounding that keeps every sum exact, and the finest level's small
cells folded into one remainder per parent.

Setting. A public tree of cells with three levels: one root (level 0), its children (level 1), theirs (level 2,
the finest); ``Tree.parents[l][j]`` is the level-``l`` parent of level-``l + 1`` cell ``j``. The input is the true
count of every finest cell; a coarser cell counts the items of the finest cells below it.

Sensitivity (``level_l2_squared``). One privacy unit holds at most ``m`` items (``max_items``), at most ``c``
(``max_per_cell``) of them in one finest cell. Under add/remove the unit changes a level's count vector by a
vector ``d >= 0`` with ``sum d <= m``; at the finest level also ``d_j <= c``. ``sum d_j²`` is largest when the
items are piled up as much as allowed: ``floor(m/c) c² + (m mod c)²`` at the finest level, ``m²`` at the coarser
ones (all ``m`` items in one coarse cell). The several trees of a ledger scope (one per mode) are pieces of one
histogram per level, and a unit's items over all of them are still at most ``m``: the same bounds hold for the
scope's whole level, so the trees are one measurement per level (independent noise per cell, one charge).

Privacy (``Measurement``). Level ``l`` is measured once: every cell of its public domain, empty ones included,
plus independent discrete Gaussian noise ``N_Z(0, sigma_l²)`` (``core.discrete_gaussian``, exact, OS CSPRNG),
``sigma_l`` the smallest float with ``l2_squared_l / (2 sigma_l²) <= rho_l`` (``gaussian_threshold.sigma_for``).
For an integer shift the discrete Gaussian's Rényi divergence of order alpha is exactly ``alpha d²/(2 sigma²)``
(Canonne, Kamath & Steinke 2020, Prop. 5), independent cells add up, so level ``l`` is ``rho_l``-zCDP and the
levels together ``sum rho_l`` (Bun & Steinke 2016, Lemma 1.7), with delta 0: no cell is left out of the
measurement, so no event depends on which cells are occupied. Everything after the measurement reads only the
noisy counts and public parameters (post-processing, ``fit``).

Fit (post-processing, ``fit``): least squares, not the Chebyshev (L-infinity) fit of InfTDA. The noise is
Gaussian with known, level-dependent variances, so the weighted least-squares estimate is the maximum-likelihood
one and spreads a parent's residual over its children in proportion to their variances; a Chebyshev fit spreads
it evenly and minimises the worst cell, which is not what an OD user reads (most cells are small and a few are
large). Steps:

1. bottom-up (Hay et al. 2010): a cell's estimate combines its own measurement with the sum of its children's
   estimates, by inverse variance;
2. top-down: the root is rounded to an integer ``>= 0``; the children of each parent are projected onto
   ``{x >= 0, sum x = parent}`` in the variance-weighted norm (``weighted_projection``), then rounded by largest
   remainders (``round_exact``): integers ``>= 0`` whose sum is exactly the parent's;
3. finest level: a cell is *listed* when its noisy measurement reaches the public threshold ``tau``
   (``listing_threshold``: the smallest integer with at most ``false_cells`` expected empty cells passing, from
   the noise scale and the domain size); the other cells of a parent form one *remainder* node whose measurement
   is their summed measurements (variance: their number times ``sigma²``). Listed cells and the remainder are
   fitted and rounded as in step 2, so a parent's listed cells plus its remainder equal it exactly. A listed cell
   rounded to 0 joins the remainder (count 0 added to it).

Result: each level sums exactly to the level above; every finest cell is either listed (its own row) or in its
parent's remainder, never both, so every item is in exactly one row per level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.discrete_gaussian import MAX_SIGMA, DiscreteGaussian, tail_upper_bound
from opal_dp.core.gaussian_threshold import sigma_for

LEVELS = 3


@dataclass(frozen=True)
class Tree:
    """A public three-level tree of cells: ``parents[0][j]`` is the root (0) of level-1 cell ``j``,
    ``parents[1][k]`` the level-1 cell of finest cell ``k``."""

    parents: tuple[np.ndarray, np.ndarray]

    def __post_init__(self) -> None:
        first, second = (np.asarray(p, dtype=np.int64) for p in self.parents)
        if (first != 0).any() or ((second < 0) | (second >= len(first))).any():
            raise ValueError("every level-1 cell's parent must be the root, every finest cell's a level-1 cell")
        object.__setattr__(self, "parents", (first, second))

    @property
    def sizes(self) -> tuple[int, int, int]:
        return 1, len(self.parents[0]), len(self.parents[1])

    def level_counts(self, finest: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The true counts of the three levels from those of the finest cells; ``finest`` of shape
        ``(..., cells)`` holds independent inputs (the audit's runs), each level then of shape ``(..., size)``."""
        finest = np.asarray(finest, dtype=np.int64)
        if finest.shape[-1:] != (self.sizes[2],):
            raise ValueError(f"need one count per finest cell ({self.sizes[2]}), got shape {finest.shape}")
        batch = finest.reshape(-1, self.sizes[2])
        offsets = np.arange(len(batch))[:, None] * self.sizes[1] + self.parents[1]
        middle = np.bincount(offsets.ravel(), weights=batch.ravel(), minlength=batch.shape[0] * self.sizes[1])
        middle = middle.astype(np.int64).reshape(*finest.shape[:-1], self.sizes[1])
        return middle.sum(axis=-1, keepdims=True), middle, finest


def level_l2_squared(max_items: int, max_per_cell: int) -> tuple[int, int, int]:
    """``sum d²`` bounds of one unit's change to levels 0, 1, 2 (module docstring, "Sensitivity")."""
    for name, value in (("max_items", max_items), ("max_per_cell", max_per_cell)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    per_cell = min(max_per_cell, max_items)
    finest = (max_items // per_cell) * per_cell**2 + (max_items % per_cell) ** 2
    return max_items**2, max_items**2, finest


@dataclass(frozen=True)
class HierarchyBudget:
    """The public parameters of one release: total ``rho`` split over the levels by ``shares``, the unit's
    contribution bounds, and the expected number of false listed cells allowed over the scope's finest domain."""

    rho: float
    shares: tuple[float, float, float]
    max_items: int
    max_per_cell: int
    false_cells: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise ValueError(f"rho must be finite and > 0, got {self.rho!r}")
        if len(self.shares) != LEVELS or min(self.shares) <= 0 or not math.isclose(sum(self.shares), 1.0):
            raise ValueError(f"shares must be {LEVELS} positive numbers summing to 1, got {self.shares!r}")
        if not self.false_cells > 0:
            raise ValueError(f"false_cells must be > 0, got {self.false_cells!r}")
        level_l2_squared(self.max_items, self.max_per_cell)

    @property
    def level_rho(self) -> tuple[float, ...]:
        return tuple(self.rho * s for s in self.shares)

    @property
    def l2_squared(self) -> tuple[int, int, int]:
        return level_l2_squared(self.max_items, self.max_per_cell)

    @property
    def sigmas(self) -> tuple[float, ...]:
        out = tuple(sigma_for(r, s) for r, s in zip(self.level_rho, self.l2_squared))
        if max(out) > MAX_SIGMA:
            raise ValueError(f"rho {self.rho} is too small for these bounds: sigma {max(out):.0f} > {MAX_SIGMA}")
        return out

    def cost(self) -> PrivacyCost:
        """What the three measurements cost one unit together: the zCDP sum of the levels' rho, delta 0."""
        return PrivacyCost.zcdp(math.fsum(self.level_rho), 0.0)

    def describe(self) -> dict:
        return {"mechanism": "hierarchical_discrete_gaussian", "rho": self.rho, "shares": list(self.shares),
                "level_rho": list(self.level_rho), "l2_squared": list(self.l2_squared), "sigma": list(self.sigmas),
                "max_items": self.max_items, "max_per_cell": self.max_per_cell, "false_cells": self.false_cells}


def listing_threshold(sigma: float, cells: int, false_cells: float) -> int:
    """The smallest integer ``tau >= 1`` with ``cells * P(Z >= tau) <= false_cells``, ``Z ~ N_Z(0, sigma²)``
    (``tail_upper_bound``: rigorous, so the expected false listings are at most ``false_cells``)."""
    if cells < 1:
        raise ValueError(f"cells must be >= 1, got {cells!r}")
    tau = max(1, math.floor(sigma * math.sqrt(2 * math.log(max(cells / false_cells, 1.0)))) - 2)
    while cells * tail_upper_bound(sigma, tau) > false_cells:
        tau += 1
    while tau > 1 and cells * tail_upper_bound(sigma, tau - 1) <= false_cells:
        tau -= 1
    return tau


@dataclass(frozen=True)
class Measurement:
    """The noisy counts of every cell of the three levels (the only values ``fit`` reads)."""

    levels: tuple[np.ndarray, np.ndarray, np.ndarray]


def measure(tree: Tree, finest: np.ndarray, budget: HierarchyBudget, noise: DiscreteGaussian | None = None
            ) -> Measurement:
    """Every cell of every level plus its level's discrete Gaussian noise, zeros included (module docstring).
    ``finest`` of shape ``(..., cells)``: independent inputs measured at once, each with fresh noise."""
    noise = DiscreteGaussian() if noise is None else noise
    truth = tree.level_counts(finest)
    return Measurement(tuple(t + noise.sample(s, t.size).reshape(t.shape) for t, s in zip(truth, budget.sigmas)))


def weighted_projection(y: np.ndarray, var: np.ndarray, group: np.ndarray, target: np.ndarray,
                        iterations: int = 100) -> np.ndarray:
    """Per group ``g``: the ``x >= 0`` with ``sum x = target[g]`` nearest ``y`` in ``sum (x - y)²/var``:
    ``x = max(0, y + var * lam_g)``, ``lam_g`` found by bisection (``sum x`` is non-decreasing in ``lam``)."""
    groups = len(target)
    target = np.asarray(target, dtype=np.float64)
    lo = np.full(groups, np.inf)
    np.minimum.at(lo, group, -y / var)  # every x is 0 at lam = lo
    hi = np.full(groups, -np.inf)
    np.maximum.at(hi, group, (target[group] - y) / var)  # some x reaches the target at lam = hi
    lo, hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), np.maximum(hi, lo), 0.0)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        total = np.bincount(group, weights=np.maximum(0.0, y + var * mid[group]), minlength=groups)
        below = total < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.maximum(0.0, y + var * hi[group])


def round_exact(x: np.ndarray, group: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Integers ``>= 0`` summing exactly to ``target[g]`` in each group, each within 1 of ``x`` scaled to that
    sum (largest remainders; ties by position). A group whose ``x`` are all 0 gets its target spread evenly.

    The floors of the scaled values fall short of their group's target by the sum of their fractional parts: at
    least 0 and less than the group's size (float error in the scaling moves a floor only for a value within
    ``target * cells * 2^-52`` of an integer, which keeps the shortfall in ``[0, size]``). One unit more for that
    many cells, largest remainders first, makes each sum exact (the publish gate checks the sums again)."""
    target = np.asarray(target, dtype=np.int64)
    groups = len(target)
    size = np.bincount(group, minlength=groups)
    if ((target > 0) & (size == 0)).any():
        raise ValueError("a positive target has no cell to go to")
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    mass = np.bincount(group, weights=x, minlength=groups)
    even = mass[group] <= 0
    x = np.where(even, target[group] / np.maximum(size[group], 1), x * target[group] / np.where(even, 1, mass[group]))
    out = np.floor(x).astype(np.int64)
    short = target - np.bincount(group, weights=out, minlength=groups).astype(np.int64)
    order = np.lexsort((np.arange(len(x)), out - x, group))  # by group, largest remainder first, then position
    rank = np.empty(len(x), dtype=np.int64)
    rank[order] = np.arange(len(x)) - np.repeat(np.r_[0, np.cumsum(size)[:-1]], size)
    return out + (rank < short[group])


@dataclass(frozen=True)
class Fitted:
    """The released hierarchy: ``total``, the level-1 ``counts``, and at the finest level the ``listed`` cells'
    counts (0 where not listed) and one ``remainder`` per level-1 cell. Every sum is exact."""

    total: int
    middle: np.ndarray
    listed: np.ndarray
    remainder: np.ndarray


def _combine(own: np.ndarray, own_var: float | np.ndarray, below: np.ndarray, below_var: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance combination of two unbiased estimates; returns (estimate, variance)."""
    weight = below_var / (own_var + below_var)
    return weight * own + (1 - weight) * below, own_var * below_var / (own_var + below_var)


def fit(tree: Tree, measured: Measurement, sigmas: tuple[float, ...], tau: int) -> Fitted:
    """The consistent integer hierarchy from the measurements alone (module docstring, "Fit")."""
    y0, y1, y2 = (np.asarray(v, dtype=np.float64) for v in measured.levels)
    v0, v1, v2 = (s * s for s in sigmas)
    up = tree.parents[1]
    children = np.bincount(up, minlength=tree.sizes[1])
    if (children == 0).any():  # its true count is 0 by construction, and step 2 would have no cell to give it to
        raise ValueError("every level-1 cell needs at least one finest cell")
    z1, var1 = _combine(y1, v1, np.bincount(up, weights=y2, minlength=tree.sizes[1]), children * v2)
    z0, _ = _combine(y0, v0, np.array([z1.sum()]), np.array([var1.sum()]))
    total = max(0, int(np.rint(z0[0])))
    root = np.zeros(tree.sizes[1], dtype=np.int64)
    middle = round_exact(weighted_projection(z1, var1, root, np.array([total])), root, np.array([total]))
    listed = y2 >= tau
    rest = np.bincount(up[~listed], weights=y2[~listed], minlength=tree.sizes[1])
    rest_n = np.bincount(up[~listed], minlength=tree.sizes[1])
    # nodes: the listed cells, then one remainder node per level-1 cell that has unlisted cells
    has_rest = np.flatnonzero(rest_n > 0)
    group = np.r_[up[listed], has_rest]
    values = np.r_[y2[listed], rest[has_rest]]
    var = np.r_[np.full(int(listed.sum()), v2), rest_n[has_rest] * v2]
    counts = round_exact(weighted_projection(values, var, group, middle), group, middle)
    cells = np.zeros(tree.sizes[2], dtype=np.int64)
    cells[listed] = counts[: int(listed.sum())]
    remainder = np.zeros(tree.sizes[1], dtype=np.int64)
    remainder[has_rest] = counts[int(listed.sum()):]
    return Fitted(total, middle, cells, remainder)
