"""Internal evaluation of the OD prefix tree as in the seed's §5 (never published: it compares with the truth).

- Count queries (Definition 3.4, "passenger counting"): ``Q(D)`` = the number of sequences that contain every
  symbol of ``Q``, order ignored. Queries are drawn as the paper draws them: length uniform in ``[1, max_len]``,
  symbols uniform over the whole public universe (without replacement). Relative error
  ``|Q(D~) - Q(D)| / max(Q(D), s)``, sanity bound ``s = 0.1% of |D|``. ``D`` is the card-day sequences truncated at
  the evaluation's largest height; ``D~`` the sanitized sequences of the consistent tree.
- Top-k frequent sequential patterns: here contiguous sub-sequences of length >= 2 (trip chains), support =
  sequences containing them; true positives ``|F_k(D) & F_k(D~)|``, false positives ``k - TP``.
- The same against the plain (single-granularity) tree, the baseline.

Nothing here is charged or released: trees are drawn in memory and thrown away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.release.od.generate import consistent_tree, sequences_of
from opal_dp.reports.plots import figure, png

if TYPE_CHECKING:
    from scipy import sparse

EPSILONS = (0.5, 0.75, 1.0, 1.25, 1.5)
SANITY = 0.001


def random_queries(universe: int, count: int, max_len: int, rng: np.random.Generator) -> list[np.ndarray]:
    lengths = rng.integers(1, max_len + 1, size=count)
    return [rng.choice(universe, size=int(n), replace=False) for n in lengths]


def _incidence(sequences: np.ndarray, universe: int) -> sparse.csc_matrix:
    rows = np.repeat(np.arange(len(sequences)), sequences.shape[1])
    cols = sequences.ravel()
    keep = cols >= 0
    pairs = np.unique(rows[keep].astype(np.int64) * universe + cols[keep])
    r, c = np.divmod(pairs, universe)
    from scipy import sparse  # here, not at import: every process loading the code would pay scipy's 0.1 s

    return sparse.csc_matrix((np.ones(len(r), dtype=np.int8), (r, c)), shape=(len(sequences), universe))


def answer_queries(sequences: np.ndarray, weights: np.ndarray, queries: Sequence[np.ndarray], universe: int) -> np.ndarray:
    """``Q(D)`` per query over ``sequences`` (``-1`` padded) each counted ``weights`` times."""
    m = _incidence(sequences, universe)
    out = np.zeros(len(queries))
    for i, query in enumerate(queries):
        rows = m.indices[m.indptr[query[0]]:m.indptr[query[0] + 1]]
        for q in query[1:]:
            if not rows.size:
                break
            rows = np.intersect1d(rows, m.indices[m.indptr[q]:m.indptr[q + 1]], assume_unique=True)
        out[i] = weights[rows].sum()
    return out


def top_patterns(sequences: np.ndarray, weights: np.ndarray, k: int) -> set[tuple[int, ...]]:
    """The ``k`` contiguous sub-sequences of length >= 2 with the largest support (ties by pattern)."""
    support: dict[tuple[int, ...], float] = {}
    h = sequences.shape[1]
    for length in range(2, h + 1):
        for start in range(h - length + 1):
            window = sequences[:, start:start + length]
            ok = (window >= 0).all(axis=1)
            if not ok.any():
                continue
            # one count per sequence: the same pattern twice in a sequence counts once
            rows = np.flatnonzero(ok)
            keys = np.unique(np.column_stack([rows, window[ok]]), axis=0)
            pats, inverse = np.unique(keys[:, 1:], axis=0, return_inverse=True)
            totals = np.bincount(inverse.ravel(), weights=weights[keys[:, 0]])
            for pat, total in zip(map(tuple, pats.tolist()), totals):
                support[pat] = support.get(pat, 0.0) + total
    ranked = sorted(support.items(), key=lambda kv: (-kv[1], kv[0]))
    return {pattern for pattern, _ in ranked[:k]}


def evaluate(sequences: np.ndarray, taxonomy: Taxonomy, *, epsilons: Sequence[float] = EPSILONS,
             heights: Sequence[int] = (4,), queries: int = 40_000, k: int = 100, seed: int = 0,
             bits=None) -> pd.DataFrame:
    """One row per (epsilon, height, tree, max query length): average relative error, and top-k TP/FP."""
    rng = np.random.default_rng(seed)
    truth_seqs = sequences[:, :max(heights)]
    ones = np.ones(len(truth_seqs))
    sanity = SANITY * len(truth_seqs)
    rows = []
    for height in heights:
        max_lens = sorted({max(1, i * height // 4) for i in range(1, 5)})
        batches = {n: random_queries(taxonomy.symbols, queries, n, rng) for n in max_lens}
        truths = {n: answer_queries(truth_seqs, ones, qs, taxonomy.symbols) for n, qs in batches.items()}
        true_top = top_patterns(truth_seqs, ones, k)
        for epsilon in epsilons:
            for hybrid in (True, False):
                tree = build_noisy_prefix_tree(sequences[:, :height], taxonomy, TreeBudget(epsilon, height, hybrid),
                                               bits)
                seqs, counts = sequences_of(consistent_tree(tree))
                found = top_patterns(seqs, counts.astype(float), k) if len(seqs) else set()
                for n, qs in batches.items():
                    est = answer_queries(seqs, counts.astype(float), qs, taxonomy.symbols) if len(seqs) else 0
                    error = np.abs(est - truths[n]) / np.maximum(truths[n], sanity)
                    rows.append({"epsilon": epsilon, "height": height, "tree": "hybrid" if hybrid else "plain",
                                 "max_query_length": n, "queries": len(qs),
                                 "average_relative_error": float(error.mean()),
                                 "top_k": k, "true_positives": len(found & true_top),
                                 "false_positives": k - len(found & true_top)})
    return pd.DataFrame(rows)


def evaluation_plot(table: pd.DataFrame) -> bytes:
    """PNG: average relative error against epsilon, hybrid vs plain, one panel per height."""
    heights = sorted(table["height"].unique())
    fig, axes = figure(len(heights), (4.5 * len(heights), 3.2), squeeze=False)
    for ax, height in zip(axes[0], heights):
        part = table[table["height"] == height]
        top = part["max_query_length"].max()
        for (tree, n), group in part.groupby(["tree", "max_query_length"]):
            if n in (1, top):
                ax.plot(group["epsilon"], group["average_relative_error"], marker="o",
                        linestyle="-" if tree == "hybrid" else "--", label=f"{tree}, |Q| <= {n}")
        ax.set_title(f"h = {height}")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("average relative error")
        ax.legend(fontsize=7)
    return png(fig, "Internal, not DP: OD prefix tree count queries (seed §5.1)")
