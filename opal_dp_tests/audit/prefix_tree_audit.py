"""Empirical privacy audit of the noisy prefix tree: sampled trees of two neighbouring sequence databases.

Neighbours: ``D`` and ``D' = D + one sequence`` (add/remove of one card-day). The released tree is reduced to one
number, the sum of its released noisy counts (nodes not released count 0): a post-processing, so a correct
``epsilon``-DP builder keeps ``P[T(D) in S] <= e^epsilon P[T(D') in S]`` for every event ``S``, in both orders.

Procedure, as ``audit.privacy_loss``: ``runs`` trees of each input select candidate events (the tails
``T >= c`` and ``T <= c`` whose empirical log-ratio is largest, in both orders); ``runs`` fresh trees of each
input measure them, with exact Clopper-Pearson bounds at ``alpha / (2 * candidates)`` each (Bonferroni), so a
correct builder is flagged with probability at most ``alpha``. ``epsilon_lower = max ln(LCB P(S) / UCB Q(S))``
is a ``1 - alpha`` lower confidence bound on the builder's epsilon; the audit flags when it exceeds
``epsilon``. A builder that ignores the per-level split (``epsilon`` per level instead of ``epsilon/h``) loses
about ``h`` times ``epsilon`` on a chain of ``h`` nodes, and is caught.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from opal_dp.audit.bounds import clopper_pearson
from opal_dp.core.bits import BitSource, SecureBits, SeededBits
from opal_dp.core.prefix_tree import NoisyTree

Builder = Callable[[np.ndarray, BitSource], NoisyTree]
CANDIDATES = 8


@dataclass(frozen=True)
class TreeAudit:
    epsilon: float
    epsilon_lower: float
    runs: int
    alpha: float

    @property
    def flagged(self) -> bool:
        return self.epsilon_lower > self.epsilon


def _totals(build: Builder, data: np.ndarray, runs: int, bits: BitSource) -> np.ndarray:
    return np.array([int(build(data, bits).noisy.sum()) for _ in range(runs)], dtype=np.int64)


def _candidates(p: np.ndarray, q: np.ndarray) -> list[tuple[str, int]]:
    """Tails of ``T`` where the empirical ``P`` most exceeds ``Q`` (ratio with add-one smoothing)."""
    values = np.unique(np.concatenate([p, q]))
    scored = []
    for side in (">=", "<="):
        ps = np.array([(p >= v).mean() if side == ">=" else (p <= v).mean() for v in values])
        qs = np.array([(q >= v).mean() if side == ">=" else (q <= v).mean() for v in values])
        ratio = np.log((ps * len(p) + 1) / (qs * len(q) + 1))
        ratio[ps * len(p) < 30] = -np.inf  # too rare to measure
        scored += [(float(r), side, int(v)) for r, v in zip(ratio, values)]
    scored.sort(reverse=True)
    return [(side, v) for _, side, v in scored[:CANDIDATES]]


def audit_tree(build: Builder, data: np.ndarray, neighbour: np.ndarray, epsilon: float, *, runs: int,
               alpha: float = 1e-6, seed: int | None = None) -> TreeAudit:
    """Audit ``build`` on the neighbours ``data`` and ``neighbour`` (module docstring)."""
    bits = SecureBits() if seed is None else SeededBits(seed)
    select = {k: _totals(build, d, runs, bits) for k, d in (("d", data), ("n", neighbour))}
    events = [(first, second, side, v) for first, second in (("d", "n"), ("n", "d"))
              for side, v in _candidates(select[first], select[second])]
    measure = {k: _totals(build, d, runs, bits) for k, d in (("d", data), ("n", neighbour))}
    level = alpha / (2 * len(events))
    best = -math.inf
    for first, second, side, v in events:
        hits = [int((measure[k] >= v).sum() if side == ">=" else (measure[k] <= v).sum()) for k in (first, second)]
        lower, _ = clopper_pearson(np.array([hits[0]]), runs, level)
        _, upper = clopper_pearson(np.array([hits[1]]), runs, level)
        if lower[0] > 0:
            best = max(best, math.log(lower[0] / upper[0]))
    return TreeAudit(epsilon, best, runs, alpha)
