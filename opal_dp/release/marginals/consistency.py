"""Consistency by construction (post-processing of noisy measurements, no privacy cost).

``least_squares``: the weighted least-squares estimate of a time x location table from a noisy joint and its
two noisy one-way marginals (Hay et al. 2010 for a tree; here the two-way table with both margins). With
measurements ``y_ij = x_ij + e`` (variance ``a``), ``r_i = x_i. + e`` (``b``), ``c_j = x_.j + e`` (``c``), the
minimiser of ``sum (y - x)²/a + sum (r - x_i.)²/b + sum (c - x_.j)²/c`` satisfies, with ``P_i = (x_i. - r_i)/b``
and ``Q_j = (x_.j - c_j)/c`` (setting the gradient to zero),

    ``x_ij = y_ij - a (P_i + Q_j)``.

Summing over ``j`` (``J`` columns) and over ``i`` (``I`` rows):

    ``P_i = (y_i. - r_i - a Q.)/(b + aJ)``,  ``Q_j = (y_.j - c_j - a P.)/(c + aI)``,

and summing those once more gives two equations for ``P.``, ``Q.``:
``(b + aJ) P. + aI Q. = Y - R``, ``aJ P. + (c + aI) Q. = Y - C`` (``Y, R, C`` the three grand totals), whose
determinant ``bc + abI + acJ`` is positive. The estimate depends on the joint only through its row sums, column
sums and the cells themselves; its one-way marginals ``r_i + b P_i`` and ``c_j + c Q_j`` are the row and column
sums of the estimated joint exactly (up to float rounding). Being the least-squares solution of a full-rank
linear model, it is unbiased.

``round_with_remainders``: non-negative integers that keep every sum exact, with the cells below the
publication threshold ``tau`` gathered in remainders (``release-format.md``):

1. the one-way counts are the least-squares one-way estimates, rounded: ``N = max(0, round(total))`` is split
   over the rows in proportion to ``max(r_i, 0)`` and over the columns in proportion to ``max(c_j, 0)`` by
   largest remainder, so both are non-negative integers summing to ``N``;
2. a cell is listed if its estimate rounds (half up) to at least ``tau``; it is published as that integer
   (step 3 may lower it, never below ``tau``);
3. where a row's listed cells sum to more than its one-way count, its smallest listed cells are de-listed while
   each is at most the excess; what excess is left (less than any listed cell) is taken off its largest listed
   cell if that stays >= ``tau``, else its smallest is de-listed too. Then likewise for the columns. Both moves
   only lower listed cells, so the rows stay within their counts and one pass each suffices;
4. each remainder is its one-way count minus its listed cells (>= 0). Then, exactly: row ``i`` = its listed
   cells + its row remainder, column ``j`` likewise, and sum of rows = sum of columns = listed + remainders = ``N``.

Why step 3 rather than clipping negative remainders: a small cell is listed when its noise pushed it past
``tau``, so listed cells are biased upward (winner's curse) and can exceed their line's estimate; raising the
one-way count to cover them would bias every one-way count upward. The smallest listed cells are the likeliest
winners; a large cell only absorbs a leftover smaller than any listed cell, so its line's noise does not
de-list it. The published one-way counts stay the rounded least-squares estimates, biased only by the clipping
of negative one-way estimates. All of it is post-processing of the noisy measurements: no privacy cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A consistent real-valued table: ``rows == joint.sum(1)`` and ``cols == joint.sum(0)``."""

    joint: np.ndarray
    rows: np.ndarray
    cols: np.ndarray


@dataclass(frozen=True)
class Rounded:
    """Non-negative integers: listed cells (0 where unlisted), remainders, and the one-way counts."""

    listed: np.ndarray  # bool (I, J)
    cells: np.ndarray  # int64 (I, J)
    row_other: np.ndarray  # int64 (I,): the unlisted cells of each row (loc = other)
    col_other: np.ndarray  # int64 (J,): the unlisted cells of each column (time = other)
    rows: np.ndarray  # int64 (I,) = cells.sum(1) + row_other
    cols: np.ndarray  # int64 (J,) = cells.sum(0) + col_other


def _variance(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


def least_squares(
    joint: np.ndarray, rows: np.ndarray, cols: np.ndarray, var_joint: float, var_rows: float, var_cols: float
) -> Estimate:
    """The weighted least-squares consistent estimate (closed form in the module docstring)."""
    y = np.asarray(joint, dtype=float)
    r = np.asarray(rows, dtype=float)
    c_obs = np.asarray(cols, dtype=float)
    if y.ndim != 2 or r.shape != (y.shape[0],) or c_obs.shape != (y.shape[1],) or y.size == 0:
        raise ValueError(f"need a non-empty (I, J) joint with (I,) rows and (J,) cols, got {y.shape}, {r.shape}, "
                         f"{c_obs.shape}")
    if not (np.isfinite(y).all() and np.isfinite(r).all() and np.isfinite(c_obs).all()):
        raise ValueError("measurements must be finite")
    a, b, c = _variance("var_joint", var_joint), _variance("var_rows", var_rows), _variance("var_cols", var_cols)
    n_rows, n_cols = y.shape
    y_rows, y_cols, total = y.sum(axis=1), y.sum(axis=0), y.sum()
    d_r, d_c = total - r.sum(), total - c_obs.sum()
    det = (b + a * n_cols) * (c + a * n_rows) - a * a * n_rows * n_cols
    p_sum = (d_r * (c + a * n_rows) - a * n_rows * d_c) / det
    q_sum = ((b + a * n_cols) * d_c - a * n_cols * d_r) / det
    p = (y_rows - r - a * q_sum) / (b + a * n_cols)
    q = (y_cols - c_obs - a * p_sum) / (c + a * n_rows)
    x = y - a * (p[:, None] + q[None, :])
    return Estimate(joint=x, rows=r + b * p, cols=c_obs + c * q)


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers summing to ``total``, proportional to the non-negative ``weights`` (Hamilton)."""
    w = np.asarray(weights, dtype=float)
    if total < 0 or (w < 0).any() or not np.isfinite(w).all():
        raise ValueError("need a total >= 0 and finite weights >= 0")
    if total == 0:
        return np.zeros(w.shape, dtype=np.int64)
    if w.sum() <= 0:
        raise ValueError("a positive total needs a positive weight")
    quota = total * w / w.sum()
    out = np.floor(quota).astype(np.int64)
    frac = quota - out
    short = int(total - out.sum())  # in [-len, len] up to float rounding of the quotas
    order = np.argsort(-frac, kind="stable") if short > 0 else np.argsort(frac, kind="stable")
    if short < 0:
        order = order[out[order] > 0]
    out[order[: abs(short)]] += 1 if short > 0 else -1
    return out


def round_with_remainders(estimate: Estimate, tau: int) -> Rounded:
    """Integer counts with listed cells ``>= tau`` and remainders, every sum exact (module docstring)."""
    if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
        raise ValueError(f"tau must be an integer >= 1, got {tau!r}")
    total = max(0, int(np.floor(float(np.sum(estimate.rows)) + 0.5)))
    rows = largest_remainder(np.maximum(estimate.rows, 0), total)
    cols = largest_remainder(np.maximum(estimate.cols, 0), total)
    rounded = np.floor(estimate.joint + 0.5)
    listed = rounded >= tau
    cells = np.where(listed, rounded, 0).astype(np.int64)
    _fit(listed, cells, rows, tau)
    _fit(listed.T, cells.T, cols, tau)
    return Rounded(
        listed=listed, cells=cells, row_other=rows - cells.sum(axis=1), col_other=cols - cells.sum(axis=0),
        rows=rows, cols=cols,
    )


def _fit(listed: np.ndarray, cells: np.ndarray, counts: np.ndarray, tau: int) -> None:
    """In place: bring each row's listed cells within its count (module docstring, step 3)."""
    for i in np.flatnonzero(cells.sum(axis=1) > counts):
        excess = int(cells[i].sum() - counts[i])
        while excess > 0:
            idx = np.flatnonzero(listed[i])
            small, large = idx[np.argmin(cells[i, idx])], idx[np.argmax(cells[i, idx])]
            if cells[i, small] > excess and cells[i, large] - excess >= tau:
                cells[i, large] -= excess
                break
            excess -= int(cells[i, small])
            listed[i, small], cells[i, small] = False, 0
