"""GeneratePrivateRelease (Chen et al., KDD 2012, §4.2) and the OD release derived from it.

Input: the released nodes of ``core.prefix_tree.build_noisy_prefix_tree`` (noisy counts only: everything here is
post-processing and costs no privacy). Steps:

1. Intermediate estimates (Theorem 4.3, Hay et al.): along each root-to-leaf path ``<c(v_1) .. c(v_p)>``, leaf
   first, a node counts at most its parent, so the least-squares estimate is the non-decreasing isotonic
   regression ``I_m = min_{j >= m} max_{i <= j} mean[i, j]``.
2. Consolidation: a node lies on one path per leaf below it; its estimate is the mean of those paths' values.
3. Top-down (Theorem 4.2's constraints): ``c(v) = e(v) + min(0, (c(w) - sum_{u in children(w)} e(u)) /
   |children(w)|)``: children are lowered, never raised, until they fit under their parent ``w``.
4. Integers, top-down: a level-1 node keeps ``max(0, round(c))``; the children of a parent with count ``n`` get
   their non-negative estimates, scaled down to sum at most ``n`` and rounded (floored where rounding would
   exceed ``n``). A node's ``terminal`` count, the sequences that end there, is ``n - sum(children)``: every
   parent equals the sum of its children plus its terminal count, exactly. Nodes with count 0 are dropped. The
   root (row 0, level 0, symbol -1) counts the sequences of the tree: the sum of level 1, terminal 0.

From the consistent tree: ``od.csv`` (``date, mode, origin, destination, count``: for each trip symbol, the sum of
the counts of every node labelled with it, i.e. the trips among the first ``h`` of each card-day), and the
sanitized sequences (each node's prefix, ``terminal`` times), of which the ``k`` most frequent are published.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opal_dp.core.prefix_tree import NoisyTree

def _ancestors(parent: np.ndarray, rows: np.ndarray, depth: int) -> np.ndarray:
    """``(len(rows), depth)``: each row's path upwards, itself first."""
    out = np.empty((len(rows), depth), dtype=np.int64)
    out[:, 0] = rows
    for k in range(1, depth):
        out[:, k] = parent[out[:, k - 1]]
    return out


def _isotonic(values: np.ndarray) -> np.ndarray:
    """Row-wise least-squares non-decreasing fit: ``I_m = min_{j >= m} max_{i <= j} mean[i, j]`` (Theorem 4.3)."""
    n, d = values.shape
    csum = np.concatenate([np.zeros((n, 1)), np.cumsum(values, axis=1)], axis=1)
    best = np.empty((n, d))
    for j in range(d):
        means = (csum[:, j + 1 : j + 2] - csum[:, : j + 1]) / (j + 1 - np.arange(j + 1))  # mean[i, j], i <= j
        best[:, j] = means.max(axis=1)
    return np.minimum.accumulate(best[:, ::-1], axis=1)[:, ::-1]


def consistent_tree(tree: NoisyTree | pd.DataFrame) -> pd.DataFrame:
    """Noisy tree (``level, parent, symbol, noisy``) -> consistent integer tree (``level, parent, symbol, count,
    terminal``), parent rows renumbered, rows by level (module docstring)."""
    tree = pd.DataFrame(tree.columns()) if isinstance(tree, NoisyTree) else tree
    n = len(tree)
    if n == 0:
        return pd.DataFrame({"level": [0], "parent": [-1], "symbol": [-1], "count": [0], "terminal": [0]})
    parent = tree["parent"].to_numpy(np.int64)
    level = tree["level"].to_numpy(np.int64)
    noisy = tree["noisy"].to_numpy(np.float64)
    has_child = np.zeros(n, dtype=bool)
    has_child[parent[parent >= 0]] = True
    total, times = np.zeros(n), np.zeros(n)
    for depth in np.unique(level):
        leaves = np.flatnonzero(~has_child & (level == depth))
        if not leaves.size:
            continue
        path = _ancestors(parent, leaves, int(depth))
        fitted = _isotonic(noisy[path])
        np.add.at(total, path.ravel(), fitted.ravel())
        np.add.at(times, path.ravel(), 1)
    estimate = total / times  # every node lies on at least one leaf's path
    value = estimate.copy()
    count = np.zeros(n, dtype=np.int64)
    top = level == 1
    count[top] = np.maximum(0, np.rint(value[top])).astype(np.int64)
    for depth in range(2, int(level.max()) + 1):
        rows = np.flatnonzero(level == depth)
        w = parent[rows]
        sums = np.bincount(w, weights=estimate[rows], minlength=n)
        kids = np.bincount(w, minlength=n)
        value[rows] = estimate[rows] + np.minimum(0, (value[w] - sums[w]) / kids[w])
        x = np.maximum(value[rows], 0)
        mass = np.bincount(w, weights=x, minlength=n)[w]
        scaled = np.where(mass > count[w], x * count[w] / np.where(mass > 0, mass, 1), x)
        rounded = np.rint(scaled).astype(np.int64)
        over = np.bincount(w, weights=rounded, minlength=n)[w] > count[w]
        count[rows] = np.where(over, np.floor(scaled), rounded).astype(np.int64)
    keep = count > 0
    new_row = np.cumsum(keep)  # row 0 is the root
    children = np.bincount(parent[parent >= 0], weights=count[parent >= 0], minlength=n).astype(np.int64)
    kept = parent[keep]
    return pd.DataFrame({
        "level": np.r_[0, level[keep]],
        "parent": np.r_[-1, np.where(kept >= 0, new_row[np.maximum(kept, 0)], 0)],
        "symbol": np.r_[-1, tree["symbol"].to_numpy(np.int64)[keep]],
        "count": np.r_[count[top].sum(), count[keep]],
        "terminal": np.r_[0, (count - children)[keep]],
    })


def inconsistent_parents(tree: pd.DataFrame) -> int:
    """Nodes whose count differs from the sum of their children's plus their terminal count (0 if consistent),
    or that have a negative count or terminal count."""
    n = len(tree)
    parent = tree["parent"].to_numpy(np.int64)
    count = tree["count"].to_numpy(np.int64)
    children = np.bincount(parent[parent >= 0], weights=count[parent >= 0], minlength=n).astype(np.int64)
    bad = (count != children + tree["terminal"].to_numpy(np.int64)) | (count < 0) | (tree["terminal"] < 0)
    return int(bad.sum())


def od_counts(tree: pd.DataFrame, symbols: pd.DataFrame, day: str) -> pd.DataFrame:
    """``od.csv`` rows of one date from a consistent tree; ``symbols``: the alphabet's symbol table."""
    totals = tree[tree["level"] > 0].groupby("symbol", sort=True)["count"].sum()
    totals = totals[totals > 0]
    rows = symbols.iloc[totals.index.to_numpy()]
    return pd.DataFrame({"date": day, "mode": rows["mode"].to_numpy(), "origin": rows["origin"].to_numpy(),
                         "destination": rows["destination"].to_numpy(), "count": totals.to_numpy(np.int64)})


def sequences_of(tree: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The sanitized sequences: ``(m, h)`` symbol ids (-1 padded), one row per node that sequences end at, and
    how many end there."""
    ends = np.flatnonzero(tree["terminal"].to_numpy() > 0)
    level = tree["level"].to_numpy(np.int64)
    height = int(level.max()) if len(level) else 1
    parent, symbol = tree["parent"].to_numpy(np.int64), tree["symbol"].to_numpy(np.int64)
    out = np.full((len(ends), height), -1, dtype=np.int64)
    row = ends.copy()
    for _ in range(height):
        live = level[row] > 0
        out[live, level[row[live]] - 1] = symbol[row[live]]
        row[live] = parent[row[live]]
    return out, tree["terminal"].to_numpy(np.int64)[ends]


def top_sequences(tree: pd.DataFrame, labels: np.ndarray, day: str, k: int) -> pd.DataFrame:
    """The ``k`` most frequent sanitized sequences of one date (ties by tree order), trips written as their
    ``labels`` (``TripAlphabet.labels``: ``mode:origin>destination``) and joined by `` | ``."""
    seqs, counts = sequences_of(tree)
    order = np.argsort(-counts, kind="stable")[:k]
    rendered = [" | ".join(labels[s] for s in seq if s >= 0) for seq in seqs[order]]
    return pd.DataFrame({"date": day, "rank": np.arange(1, len(order) + 1), "trips": (seqs[order] >= 0).sum(axis=1),
                         "sequence": rendered, "count": counts[order]})
