"""A hierarchical count release with exact totals: noise on every cell of every level of a public tree of cells,
a top-down weighted least-squares fit, integer rounding that keeps every sum exact, and the finest level's small
cells folded into one remainder per parent.

Setting. A public tree of cells in ``L >= 2`` levels: one root (level 0), its children (level 1), theirs, down to
the finest (level ``L - 1``); ``Tree.parents[l][j]`` is the level-``l`` parent of level-``l + 1`` cell ``j``. The
OD release uses three (mode, district pairs, location pairs). The input is the true count of every finest cell; a
coarser cell counts the items of the finest cells below it.

Sensitivity (``level_l2_squared``). One privacy unit holds at most ``m`` items (``max_items``), at most ``c``
(``max_per_cell``) of them in one finest cell. Under add/remove the unit changes a level's count vector by a
vector ``d >= 0`` with ``sum d <= m``; at the finest level also ``d_j <= c``. ``sum d_j²`` is largest when the
items are piled up as much as allowed: ``floor(m/c) c² + (m mod c)²`` at the finest level, ``m²`` at every coarser
one (all ``m`` items in one coarse cell). The several trees of a ledger scope (one per mode) are pieces of one
histogram per level, and a unit's items over all of them are still at most ``m``: the same bounds hold for the
scope's whole level, so the trees are one measurement per level (independent noise per cell, one charge).
Two refinements, both public bounds that the contribution bounding enforces: a coarser level may cap one unit's
items in one of its cells below ``m`` (``coarse_caps``: the same pile-up bound with that cap), and a unit's items
may lie in ``groups`` disjoint sets of trees (the dates and taps of a period), at most ``m`` in each: the groups'
``d`` vectors are disjoint, so their ``sum d²`` add up, ``groups`` times one group's bound.

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

1. bottom-up (Hay et al. 2010), from the level above the finest to the root: a cell's estimate combines its own
   measurement with the sum of its children's estimates, by inverse variance;
2. top-down, from the root to the level above the finest: the root is rounded to an integer ``>= 0``; the children
   of each parent are projected onto ``{x >= 0, sum x = parent}`` in the variance-weighted norm
   (``weighted_projection``), then rounded by largest remainders (``round_exact``): integers ``>= 0`` whose sum is
   exactly the parent's;
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

@dataclass(frozen=True)
class Tree:
    """A public tree of cells in levels: ``parents[0][j]`` is the root (0) of level-1 cell ``j``, ``parents[l][k]``
    the level-``l`` cell of level-``l + 1`` cell ``k``; the last level is the finest."""

    parents: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        parents = tuple(np.asarray(p, dtype=np.int64) for p in self.parents)
        if not parents or (parents[0] != 0).any():
            raise ValueError("a tree has a root and at least one level below it, whose cells' parent is the root")
        for level, (above, below) in enumerate(zip(parents, parents[1:]), start=1):
            if ((below < 0) | (below >= len(above))).any():
                raise ValueError(f"every level-{level + 1} cell's parent must be a level-{level} cell")
        object.__setattr__(self, "parents", parents)

    @property
    def sizes(self) -> tuple[int, ...]:
        return 1, *(len(p) for p in self.parents)

    def level_counts(self, finest: np.ndarray) -> tuple[np.ndarray, ...]:
        """The true counts of every level from those of the finest cells; ``finest`` of shape ``(..., cells)`` holds
        independent inputs (the audit's runs), each level then of shape ``(..., size)``."""
        finest = np.asarray(finest, dtype=np.int64)
        if finest.shape[-1:] != (self.sizes[-1],):
            raise ValueError(f"need one count per finest cell ({self.sizes[-1]}), got shape {finest.shape}")
        levels = [finest]
        for size, parent in zip(self.sizes[-2::-1], self.parents[::-1]):
            batch = levels[0].reshape(-1, levels[0].shape[-1])
            offsets = np.arange(len(batch))[:, None] * size + parent
            counts = np.bincount(offsets.ravel(), weights=batch.ravel(), minlength=batch.shape[0] * size)
            levels.insert(0, counts.astype(np.int64).reshape(*finest.shape[:-1], size))
        return tuple(levels)


def pile_up(items: int, cap: int) -> int:
    """The largest ``sum d²`` of ``items`` items with at most ``cap`` in one cell: ``floor(m/c) c² + (m mod c)²``."""
    cap = min(cap, items)
    return (items // cap) * cap**2 + (items % cap) ** 2


def first_per_row(values: np.ndarray, cap: int, empty: int) -> np.ndarray:
    """Which slots of ``values`` (units x slots, in order) a unit keeps when it keeps at most ``cap`` items of one
    value, the first ones, and none equal to ``empty``: the per-cell (or per-mode) cap of the sensitivity bounds, a
    rule on each unit's own items only. Slot by slot against the earlier ones on a column-major copy
    (``slots²/2`` comparisons of one column each), boolean, the shape of ``values``."""
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must be units x slots, got shape {values.shape}")
    columns = list(np.ascontiguousarray(values.T))
    kept = np.empty(values.shape[::-1], dtype=bool)
    for j, column in enumerate(columns):
        before = np.zeros(len(column), dtype=np.int64 if j >= 255 else np.uint8)  # earlier slots of the same value
        for earlier in columns[:j]:
            before += earlier == column
        np.logical_and(column != empty, before < cap, out=kept[j])
    return kept.T


def level_l2_squared(max_items: int, max_per_cell: int, levels: int, coarse_caps: tuple[int, ...] | None = None,
                     groups: int = 1) -> tuple[int, ...]:
    """``sum d²`` bounds of one unit's change to each of ``levels`` levels, the root first (module docstring,
    "Sensitivity"); ``coarse_caps``: the cap of one unit's items in a cell of each level above the finest (default
    ``max_items``); ``groups``: disjoint sets of trees holding at most ``max_items`` each."""
    for name, value in (("max_items", max_items), ("max_per_cell", max_per_cell), ("levels", levels),
                        ("groups", groups), *(("coarse_caps", c) for c in coarse_caps or ())):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if levels < 2:
        raise ValueError(f"a hierarchy has at least 2 levels (a root and the finest cells), got {levels}")
    caps = (max_items,) * (levels - 1) if coarse_caps is None else tuple(coarse_caps)
    if len(caps) != levels - 1:
        raise ValueError(f"coarse_caps needs one cap per level above the finest ({levels - 1}), got {len(caps)}")
    return tuple(groups * pile_up(max_items, c) for c in (*caps, max_per_cell))


@dataclass(frozen=True)
class HierarchyBudget:
    """The public parameters of one release: total ``rho`` split over the levels by ``shares`` (one per level, the
    root first), the unit's contribution bounds, and the expected number of false listed cells allowed over the
    scope's finest domain."""

    rho: float
    shares: tuple[float, ...]
    max_items: int
    max_per_cell: int
    false_cells: float = 1.0
    coarse_caps: tuple[int, ...] | None = None
    groups: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise ValueError(f"rho must be finite and > 0, got {self.rho!r}")
        if len(self.shares) < 2 or min(self.shares) <= 0 or not math.isclose(sum(self.shares), 1.0):
            raise ValueError(f"shares must be 2 or more positive numbers summing to 1, got {self.shares!r}")
        if not self.false_cells > 0:
            raise ValueError(f"false_cells must be > 0, got {self.false_cells!r}")
        self.l2_squared  # validates the bounds

    @property
    def levels(self) -> int:
        return len(self.shares)

    @property
    def level_rho(self) -> tuple[float, ...]:
        return tuple(self.rho * s for s in self.shares)

    @property
    def l2_squared(self) -> tuple[int, ...]:
        return level_l2_squared(self.max_items, self.max_per_cell, self.levels, self.coarse_caps, self.groups)

    @property
    def sigmas(self) -> tuple[float, ...]:
        out = tuple(sigma_for(r, s) for r, s in zip(self.level_rho, self.l2_squared))
        if max(out) > MAX_SIGMA:
            raise ValueError(f"rho {self.rho} is too small for these bounds: sigma {max(out):.0f} > {MAX_SIGMA}")
        return out

    def cost(self) -> PrivacyCost:
        """What the levels' measurements cost one unit together: the zCDP sum of the levels' rho, delta 0."""
        return PrivacyCost.zcdp(math.fsum(self.level_rho), 0.0)

    def describe(self) -> dict:
        """The public parameters (the coarse caps and groups only where they are not the defaults)."""
        out = {"mechanism": "hierarchical_discrete_gaussian", "rho": self.rho, "shares": list(self.shares),
               "level_rho": list(self.level_rho), "l2_squared": list(self.l2_squared), "sigma": list(self.sigmas),
               "max_items": self.max_items, "max_per_cell": self.max_per_cell, "false_cells": self.false_cells}
        if self.coarse_caps is not None:
            out["coarse_caps"] = list(self.coarse_caps)
        if self.groups != 1:
            out["groups"] = self.groups
        return out


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
    """The noisy counts of every cell of every level, the root first (the only values ``fit`` reads)."""

    levels: tuple[np.ndarray, ...]


def measure(tree: Tree, finest: np.ndarray, budget: HierarchyBudget, noise: DiscreteGaussian | None = None
            ) -> Measurement:
    """Every cell of every level plus its level's discrete Gaussian noise, zeros included (module docstring).
    ``finest`` of shape ``(..., cells)``: independent inputs measured at once, each with fresh noise."""
    if len(tree.sizes) != budget.levels:
        raise ValueError(f"the tree has {len(tree.sizes)} levels and the budget {budget.levels}")
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
    """The released hierarchy: the integer ``counts`` of every level above the finest (the root's first, its one
    cell the ``total``), and at the finest level the ``listed`` cells' counts (0 where not listed) and one
    ``remainder`` per cell of the level above. Every sum is exact."""

    counts: tuple[np.ndarray, ...]
    listed: np.ndarray
    remainder: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts[0][0])


def _children(z: np.ndarray, var: np.ndarray, group: np.ndarray, target: np.ndarray,
              pinned: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """One level's integer counts: the pinned cells as given, the others projected and rounded onto what their
    parent leaves them (step 2)."""
    if pinned is None:
        return round_exact(weighted_projection(z, var, group, target), group, target)
    cells, values = np.asarray(pinned[0], dtype=np.int64), np.asarray(pinned[1], dtype=np.int64)
    rest = target - np.bincount(group[cells], weights=values, minlength=len(target)).astype(np.int64)
    if (values < 0).any() or (rest < 0).any():
        raise ValueError("a pinned count is negative or exceeds its parent's")
    free = np.ones(len(z), dtype=bool)
    free[cells] = False
    out = np.zeros(len(z), dtype=np.int64)
    out[cells] = values
    out[free] = round_exact(weighted_projection(z[free], var[free], group[free], rest), group[free], rest)
    return out


def _combine(own: np.ndarray, own_var: float | np.ndarray, below: np.ndarray, below_var: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance combination of two unbiased estimates; returns (estimate, variance)."""
    weight = below_var / (own_var + below_var)
    return weight * own + (1 - weight) * below, own_var * below_var / (own_var + below_var)


Pins = dict[int, tuple[np.ndarray, np.ndarray]]
"""Counts fixed before the fit, per level above the finest: (cells, counts). Each must be public or already
released (another product's published, charged counts): the fit then stays post-processing."""


def fit(tree: Tree, measured: Measurement, sigmas: tuple[float, ...], tau: int, pins: Pins | None = None) -> Fitted:
    """The consistent integer hierarchy from the measurements alone (module docstring, "Fit"); ``pins`` fix some
    counts of the levels above the finest (the root: ``{0: ([0], [n])}``), their siblings then share what their
    parent leaves them."""
    pins = pins or {}
    if any(not 0 <= level < len(tree.sizes) - 1 for level in pins):
        raise ValueError("pins fix counts of the levels above the finest only")
    y = [np.asarray(v, dtype=np.float64) for v in measured.levels]
    v = [s * s for s in sigmas]
    if not len(y) == len(v) == len(tree.sizes):
        raise ValueError(f"a fit needs one measurement and one sigma per level of the tree ({len(tree.sizes)})")
    up, above = tree.parents[-1], tree.sizes[-2]
    for level, parent in enumerate(tree.parents, start=1):
        if (np.bincount(parent, minlength=tree.sizes[level - 1]) == 0).any():
            # its true count is 0 by construction, and step 2 would have no cell to give it to
            raise ValueError(f"every level-{level - 1} cell needs at least one level-{level} cell")
    z, var, estimates = y[-1], np.full(tree.sizes[-1], v[-1]), []
    for level in range(len(y) - 2, -1, -1):  # bottom-up, from the level above the finest
        parent, size = tree.parents[level], tree.sizes[level]
        if level == 0:  # the root: the sums of its children
            below, below_var = np.array([z.sum()]), np.array([var.sum()])
        else:
            below = np.bincount(parent, weights=z, minlength=size)
            below_var = (np.bincount(parent, minlength=size) * v[-1] if level == len(y) - 2
                         else np.bincount(parent, weights=var, minlength=size))  # finest cells: all of variance v
        z, var = _combine(y[level], v[level], below, below_var)
        estimates.insert(0, (z, var))
    root = pins[0][1][0] if 0 in pins else np.rint(estimates[0][0][0])
    counts = [np.array([max(0, int(root))], dtype=np.int64)]
    for level in range(1, len(y) - 1):  # top-down, to the level above the finest
        z, var = estimates[level]
        counts.append(_children(z, var, tree.parents[level - 1], counts[-1], pins.get(level)))
    listed = y[-1] >= tau
    rest = np.bincount(up[~listed], weights=y[-1][~listed], minlength=above)
    rest_n = np.bincount(up[~listed], minlength=above)
    # nodes: the listed cells, then one remainder node per cell above that has unlisted cells
    has_rest = np.flatnonzero(rest_n > 0)
    group = np.r_[up[listed], has_rest]
    values = np.r_[y[-1][listed], rest[has_rest]]
    node_var = np.r_[np.full(int(listed.sum()), v[-1]), rest_n[has_rest] * v[-1]]
    fitted = round_exact(weighted_projection(values, node_var, group, counts[-1]), group, counts[-1])
    cells = np.zeros(tree.sizes[-1], dtype=np.int64)
    cells[listed] = fitted[: int(listed.sum())]
    remainder = np.zeros(above, dtype=np.int64)
    remainder[has_rest] = fitted[int(listed.sum()):]
    return Fitted(tuple(counts), cells, remainder)
