"""BuildNoisyPrefixTree (Chen et al., KDD 2012, Procedure 1): a noisy hybrid-granularity prefix tree of sequences.

Input: ``n`` sequences over a public alphabet of ``|L|`` symbols, each at most ``h`` long (``(n, h)`` int array,
``-1`` padded), and a public two-level taxonomy: every symbol belongs to one *generalised* symbol (``Taxonomy``),
the symbols of one generalised symbol being one range of ids.

Level ``i`` (``1..h``) of the tree is built from the released nodes of level ``i - 1`` (the virtual root for
``i = 1``) in two sub-levels:

1. generalised: for each released parent ``v`` and each of the ``|G|`` generalised symbols ``g``, the noisy number
   ``c(u) = |tr(u)| + Z``, ``Z ~`` discrete Laplace of scale ``1/eps_1``, of sequences with prefix
   ``prefix(v) + g``; ``u`` is kept iff ``c(u) >= theta_g``;
2. non-generalised: for each kept ``u`` and each symbol ``s`` of ``g``, ``c(w) = |tr(w)| + Z'``, scale ``1/eps_2``;
   ``w`` (prefix ``prefix(v) + s``) is released iff ``c(w) >= theta_ng``.

Budget (the paper's split): ``eps_bar = eps/h`` per level, ``eps_1 = 2 eps_bar/f``, ``eps_2 = (f - 2) eps_bar/f``
with ``f = |L|/|G|`` the taxonomy's mean fan-out (``f > 2``). The plain (single-granularity) tree, the baseline,
skips sub-level 1 and gives ``eps_2 = eps_bar``. Thresholds are public: the paper's ``4 sqrt(2)/eps_1`` and
``2 sqrt(2)/eps_2`` (two and four noise standard deviations, rounded up to integers), raised where needed so
that an expanded node gets at most ``FALSE_CHILDREN`` expected false (empty) children per sub-level: with
``|L|`` = 161k trip symbols the paper's thresholds would let the false nodes multiply from level to level.

Privacy (pure ``eps``-DP; neighbours differ by one whole sequence, added or removed). Conceptually every
sub-level measures the counts of *all* children of every released node, empty ones included; which nodes are
released, and the next level's questions, are functions of those noisy counts (post-processing). A sequence
lies in exactly one node of each sub-level (its prefix of that length) or, if shorter, in none, so each
sub-level's count vector has L1 sensitivity 1 and discrete Laplace of scale ``1/eps_k`` makes it ``eps_k``-DP
(every scale is rounded up, never down). Nodes of one sub-level hold disjoint sets of sequences (parallel
composition); the ``2h`` sub-levels compose sequentially and adaptively: ``h (eps_1 + eps_2) = eps``. The empty
children are never enumerated: ``core.sparse_noise.sparse_threshold_cells`` draws exactly which of them pass
and their noisy counts (Theorem 4.1: a Binomial number, uniformly placed, values from the noise conditioned on
passing), the same law as noising each; the non-empty ones are noised one by one. The noise is the exact
discrete Laplace from ``core.noise`` over the OS CSPRNG. Nothing but released nodes leaves this module.

Work is ``O(h n log n)`` (``np.unique`` per sub-level) plus ``O(expected passing empty children)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from opal_dp.core.bits import BitSource
from opal_dp.core.noise import MAX_SCALE, laplace_scale
from opal_dp.core.sparse_noise import LaplaceNoise, sparse_threshold_cells

FALSE_CHILDREN = 0.2
"""Expected false children per expanded node and sub-level that the thresholds allow at most."""
TREE_COLUMNS = ("level", "parent", "symbol", "noisy")


@dataclass(frozen=True)
class NoisyTree:
    """The released (non-generalised) nodes, one array entry per node, by level, then parent, then symbol:
    ``level`` (1..h), ``parent`` (index of the parent node, -1 under the root), ``symbol``, ``noisy`` count."""

    level: np.ndarray
    parent: np.ndarray
    symbol: np.ndarray
    noisy: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in TREE_COLUMNS}


@dataclass(frozen=True)
class Taxonomy:
    """``first[g]``, ``size[g]``: the symbols ``first[g] .. first[g] + size[g] - 1`` generalise to ``g``."""

    first: np.ndarray
    size: np.ndarray

    def __post_init__(self) -> None:
        first, size = np.asarray(self.first, np.int64), np.asarray(self.size, np.int64)
        if len(first) == 0 or (size < 1).any() or first[0] != 0 or (first[1:] != np.cumsum(size)[:-1]).any():
            raise ValueError("a taxonomy's generalised symbols must cover the symbols 0..|L|-1 in consecutive ranges")
        object.__setattr__(self, "first", first)
        object.__setattr__(self, "size", size)

    @classmethod
    def flat(cls, symbols: int) -> Taxonomy:
        """One generalised symbol holding every symbol: the plain tree's taxonomy."""
        return cls(np.zeros(1, np.int64), np.array([symbols], np.int64))

    @property
    def symbols(self) -> int:
        return int(self.size.sum())

    @property
    def generalised(self) -> int:
        return len(self.size)

    @property
    def fan_out(self) -> float:
        return self.symbols / self.generalised

    def of(self, symbol: np.ndarray) -> np.ndarray:
        """The generalised symbol of each of ``symbol`` (ids ``0 .. symbols - 1``; others are an error)."""
        symbol = np.asarray(symbol)
        if symbol.size and (symbol.min() < 0 or symbol.max() >= len(self._group_of)):
            raise ValueError("a symbol is outside the taxonomy's alphabet")
        return self._group_of[symbol]

    @cached_property
    def _group_of(self) -> np.ndarray:
        """Symbol id -> its generalised symbol (the ranges are consecutive from 0: a table, not a search)."""
        return np.repeat(np.arange(self.generalised, dtype=np.int64), self.size)


def _scale(epsilon: float) -> float:
    """The smallest float ``>= 1/epsilon`` (a larger scale never weakens the guarantee)."""
    scale = laplace_scale(1, epsilon)
    if scale > MAX_SCALE:
        raise ValueError(f"noise scale {scale:.1f} exceeds the sampler's MAX_SCALE {MAX_SCALE}: "
                         "raise epsilon, or lower the height or the fan-out")
    return scale


def _threshold(scale: float, sds: float, cells: int) -> int:
    """The smallest integer ``>= sds * sqrt(2) * scale`` with ``cells * P(Z >= theta) <= FALSE_CHILDREN``."""
    q = math.exp(-1 / scale)
    by_tail = math.log(FALSE_CHILDREN * (1 + q) / cells) / math.log(q)  # q**t/(1+q) = FALSE_CHILDREN/cells
    return max(1, math.ceil(sds * math.sqrt(2) * scale), math.ceil(by_tail))


@dataclass(frozen=True)
class TreeBudget:
    """Epsilon, height and granularity of one tree, and the public scales and thresholds they give."""

    epsilon: float
    height: int
    hybrid: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {self.epsilon!r}")
        if isinstance(self.height, bool) or not isinstance(self.height, int) or self.height < 1:
            raise ValueError(f"height must be an integer >= 1, got {self.height!r}")

    def level_epsilon(self) -> float:
        return self.epsilon / self.height

    def split(self, taxonomy: Taxonomy) -> tuple[float, float]:
        """(eps_1, eps_2) per level; eps_1 = 0 for the plain tree."""
        eps_bar = self.level_epsilon()
        if not self.hybrid:
            return 0.0, eps_bar
        f = taxonomy.fan_out
        if f <= 2:
            raise ValueError(f"the hybrid split needs a mean fan-out f > 2, got {f:.2f}")
        return 2 * eps_bar / f, (f - 2) * eps_bar / f

    def calibrate(self, taxonomy: Taxonomy) -> dict:
        """Public parameters: scales and thresholds of both sub-levels."""
        eps_1, eps_2 = self.split(taxonomy)
        scale_2 = _scale(eps_2)
        out = {"epsilon": self.epsilon, "height": self.height, "hybrid": self.hybrid,
               "fan_out": taxonomy.fan_out, "epsilon_generalised": eps_1, "epsilon_location": eps_2,
               "scale_location": scale_2}
        if self.hybrid:
            scale_1 = _scale(eps_1)
            out |= {"scale_generalised": scale_1,
                    "theta_generalised": _threshold(scale_1, 4, taxonomy.generalised),
                    "theta_location": _threshold(scale_2, 2, int(taxonomy.size.max()))}
        else:
            out |= {"theta_location": _threshold(scale_2, 2, taxonomy.symbols)}
        return out

    def describe(self, taxonomy: Taxonomy) -> dict:
        return asdict(self) | self.calibrate(taxonomy)


def _absent(present: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Positions of the ``ranks``-th absent points of a line whose present points are ``present`` (sorted)."""
    c = present - np.arange(len(present))
    return ranks + np.searchsorted(c, ranks, side="right")


def _measure(keys: np.ndarray, line: int, law: LaplaceNoise, theta: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy counts of every point of ``0..line-1`` (``keys``: one per sequence), kept where ``>= theta``:
    (kept points ascending, their noisy counts). Empty points through the exact sparse sampler."""
    present, counts = np.unique(keys, return_counts=True)
    noisy = counts + law.draw(len(present))
    ranks, values = sparse_threshold_cells(law, line - len(present), theta)
    points = np.concatenate([present[noisy >= theta], _absent(present, ranks)])
    values = np.concatenate([noisy[noisy >= theta], values])
    order = np.argsort(points, kind="stable")
    return points[order], values[order]


def build_noisy_prefix_tree(
    sequences: np.ndarray, taxonomy: Taxonomy, budget: TreeBudget, bits: BitSource | None = None
) -> NoisyTree:
    """The noisy hybrid-granularity (or, with ``budget.hybrid = False``, plain) prefix tree of ``sequences``; noise
    from ``bits``, or from the OS source when it is None (each law's own ``SecureBits``)."""
    sequences = np.asarray(sequences)
    if sequences.ndim != 2 or sequences.shape[1] < budget.height:
        raise ValueError(f"sequences must be an (n, h >= {budget.height}) array, got shape {sequences.shape}")
    if sequences.size and (sequences.max() >= taxonomy.symbols or sequences.min() < -1):
        raise ValueError("a sequence symbol is outside the taxonomy's alphabet")
    params = budget.calibrate(taxonomy)
    taxonomy = taxonomy if budget.hybrid else Taxonomy.flat(taxonomy.symbols)
    law_2 = LaplaceNoise(params["scale_location"], bits)
    law_1 = LaplaceNoise(params["scale_generalised"], bits) if budget.hybrid else None
    node = np.zeros(len(sequences), dtype=np.int64)  # each sequence's node at the previous level (-1: gone)
    parents = 1  # released nodes at the previous level (the root)
    first_row, rows = -1, 0  # row of the previous level's first node (-1: the root); rows so far
    levels = []
    for i in range(budget.height):
        symbol = sequences[:, i].astype(np.int64)
        alive = (node >= 0) & (symbol >= 0)
        gen = taxonomy.of(symbol[alive])
        if budget.hybrid:
            g_points, _ = _measure(node[alive] * taxonomy.generalised + gen, parents * taxonomy.generalised, law_1,
                                   params["theta_generalised"])
        else:
            g_points = np.arange(parents, dtype=np.int64)  # the one generalised symbol of every parent
        g_parent, g_sym = np.divmod(g_points, taxonomy.generalised)
        starts = np.concatenate([[0], np.cumsum(taxonomy.size[g_sym])])  # each kept u's range on the line
        u = np.searchsorted(g_points, node[alive] * taxonomy.generalised + gen)
        found = u < len(g_points)
        found[found] = g_points[u[found]] == node[alive][found] * taxonomy.generalised + gen[found]
        line_keys = starts[u[found]] + symbol[alive][found] - taxonomy.first[gen[found]]
        points, noisy = _measure(line_keys, int(starts[-1]), law_2, params["theta_location"])
        owner = np.searchsorted(starts, points, side="right") - 1
        levels.append((np.full(len(points), i + 1, dtype=np.int64),
                       g_parent[owner] + first_row,  # the root's children: 0 + -1
                       taxonomy.first[g_sym[owner]] + points - starts[owner], noisy.astype(np.int64)))
        new = np.full(len(sequences), -1, dtype=np.int64)
        where = np.flatnonzero(alive)[found]
        at = np.searchsorted(points, line_keys)
        hit = at < len(points)
        hit[hit] = points[at[hit]] == line_keys[hit]
        new[where[hit]] = at[hit]
        node, first_row, rows, parents = new, rows, rows + len(points), len(points)
        if not parents:
            break
    return NoisyTree(*(np.concatenate(parts) for parts in zip(*levels)))
