"""Internal evaluation of OD releases against the truth, per level (never published: it reads the true counts).

Every method is put in one form, per (date, mode): its mode ``total``, its district-pair counts (``middle``), its
location-pair counts (``finest``, 0 where a pair is not listed) and what it publishes in remainder rows per district
pair (``remainder``; 0 for a method without them). Measures, over the days of a run:

- ``listed_share``: true trips in the location pairs the method lists (count > 0), over all true trips;
- ``accounted_share``: the method's published location-level counts (listed plus remainder) over all true trips;
- ``median``/``p90`` relative error ``|released - true| / true`` on location pairs with true count >= 200 and
  >= 50 (an unlisted pair counts as released 0);
- ``weighted_relative_error``: ``sum |released - true| / sum true`` over every location pair;
- ``max_abs_error`` per level (mode totals, district pairs, location pairs);
- ``false_cells_per_day``: listed location pairs whose true count is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from opal_dp.core.bits import BitSource
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import HierarchyBudget, Tree, fit, measure
from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.network import MODES
from opal_dp.release.od.generate import consistent_tree
from opal_dp.release.od.hierarchy import OdDomain


@dataclass(frozen=True)
class LevelCounts:
    """One method's (or the truth's) counts of one (date, mode), in the hierarchy's cell order."""

    total: int
    middle: np.ndarray
    finest: np.ndarray
    remainder: np.ndarray

    @classmethod
    def from_finest(cls, tree: Tree, finest: np.ndarray) -> LevelCounts:
        """A method that publishes location pairs only: its coarser levels are their sums, no remainder."""
        total, middle, finest = tree.level_counts(finest)
        return cls(int(total[0]), middle, finest, np.zeros_like(middle))


THRESHOLDS = (200, 50)


def truth_counts(domain: OdDomain, sequences: np.ndarray) -> list[LevelCounts]:
    """Per mode, the true counts of every trip of the sequences (no per-pair bound)."""
    true = domain.counts(sequences, sequences.shape[1])
    return [LevelCounts.from_finest(dom.tree, true[mode]) for mode, dom in domain.modes.items()]


def hierarchy_counts(domain: OdDomain, sequences: np.ndarray, budget: HierarchyBudget, tau: int,
                     bits: BitSource | None = None) -> list[LevelCounts]:
    """Per mode, the hierarchy drawn in memory (nothing charged) from the per-pair-bounded sequences."""
    noise = DiscreteGaussian(bits)
    bounded = domain.counts(sequences, budget.max_per_cell)
    out = []
    for mode, dom in domain.modes.items():
        f = fit(dom.tree, measure(dom.tree, bounded[mode], budget, noise), budget.sigmas, tau)
        out.append(LevelCounts(f.total, f.counts[1], f.listed, f.remainder))
    return out


def tree_counts(domain: OdDomain, sequences: np.ndarray, taxonomy: Taxonomy, epsilon: float,
                bits: BitSource | None = None) -> list[LevelCounts]:
    """Per mode, today's ``od.csv`` counts from a prefix tree drawn in memory (nothing charged)."""
    tree = consistent_tree(build_noisy_prefix_tree(sequences, taxonomy, TreeBudget(epsilon, sequences.shape[1]),
                                                   bits))
    nodes = tree[tree["level"] > 0]
    per_symbol = np.bincount(nodes["symbol"], weights=nodes["count"], minlength=len(domain.symbol_cell))
    out = []
    for mode, dom in domain.modes.items():
        mine = domain.symbol_mode == MODES.index(mode)
        counts = np.bincount(domain.symbol_cell[mine], weights=per_symbol[mine], minlength=dom.cells)
        out.append(LevelCounts.from_finest(dom.tree, counts.astype(np.int64)))
    return out


def evaluate(truth: Sequence[LevelCounts], released: Sequence[LevelCounts], days: int) -> dict:
    """The measures of the module docstring over matching ``truth``/``released`` (one pair per date and mode)."""
    true_f = np.concatenate([t.finest for t in truth]).astype(np.float64)
    rel_f = np.concatenate([r.finest for r in released]).astype(np.float64)
    trips = true_f.sum()
    out = {
        "listed_share": float(true_f[rel_f > 0].sum() / trips),
        "accounted_share": float(sum(r.finest.sum() + r.remainder.sum() for r in released) / trips),
        "weighted_relative_error": float(np.abs(rel_f - true_f).sum() / trips),
        "false_cells_per_day": float(((rel_f > 0) & (true_f == 0)).sum() / days),
        "max_abs_error": {
            "mode": float(max(abs(r.total - t.total) for r, t in zip(released, truth))),
            "district": float(max(np.abs(r.middle - t.middle).max(initial=0) for r, t in zip(released, truth))),
            "location": float(np.abs(rel_f - true_f).max(initial=0)),
        },
    }
    for at_least in THRESHOLDS:
        big = true_f >= at_least
        error = np.abs(rel_f[big] - true_f[big]) / true_f[big]
        out[f"cells_{at_least}"] = int(big.sum())
        out[f"median_{at_least}"] = float(np.median(error)) if big.any() else float("nan")
        out[f"p90_{at_least}"] = float(np.quantile(error, 0.9)) if big.any() else float("nan")
    return out


def scatter_points(truth: Sequence[LevelCounts], released: Sequence[LevelCounts]) -> Mapping[str, tuple]:
    """(true, released) per level, for the true-vs-released plot."""
    return {
        "mode": (np.array([t.total for t in truth]), np.array([r.total for r in released])),
        "district": (np.concatenate([t.middle for t in truth]), np.concatenate([r.middle for r in released])),
        "location": (np.concatenate([t.finest for t in truth]), np.concatenate([r.finest for r in released])),
    }


def true_vs_released_plot(points: Mapping[str, Mapping[str, tuple]]) -> bytes:
    """PNG: one panel per level, released against true count (log-log), one colour per method."""
    from opal_dp.reports.plots import true_vs_released

    return true_vs_released(points, "Internal, not DP: OD releases against the truth, per level")
