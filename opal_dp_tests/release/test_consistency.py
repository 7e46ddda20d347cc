"""Weighted least squares over a two-way table with both margins, and the rounding that keeps sums exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from opal_dp.core import DiscreteLaplace, SeededBits
from opal_dp.release.marginals.consistency import Estimate, largest_remainder, least_squares, round_with_remainders
from opal_dp_tests.core.helpers import ALPHA

TRUTH = np.array([[0, 3, 40, 7, 0], [12, 0, 0, 1, 90], [5, 5, 5, 5, 5], [0, 0, 0, 0, 200]])
SCALES = (1.0, 2.0, 1.5)  # discrete Laplace scales of the joint, the rows, the columns


def _dl_variance(scale: float) -> float:
    q = math.exp(-1 / scale)
    return 2 * q / (1 - q) ** 2


def _dense_solution(y, r, c, a, b, v):
    """The same minimiser by a plain weighted lstsq over the stacked design (reference)."""
    n_rows, n_cols = y.shape
    eye = np.eye(n_rows * n_cols)
    row_sum = np.kron(np.eye(n_rows), np.ones((1, n_cols)))
    col_sum = np.kron(np.ones((1, n_rows)), np.eye(n_cols))
    design = np.vstack([eye / math.sqrt(a), row_sum / math.sqrt(b), col_sum / math.sqrt(v)])
    target = np.concatenate([y.ravel() / math.sqrt(a), r / math.sqrt(b), c / math.sqrt(v)])
    return np.linalg.lstsq(design, target, rcond=None)[0].reshape(n_rows, n_cols)


shapes = st.tuples(st.integers(1, 4), st.integers(1, 5))
values = st.floats(-500, 500, allow_nan=False)
variances = st.floats(0.05, 50)


@settings(max_examples=60, deadline=None)
@given(shapes.flatmap(lambda s: st.tuples(
    hnp.arrays(float, s, elements=values), hnp.arrays(float, s[0], elements=values),
    hnp.arrays(float, s[1], elements=values))), variances, variances, variances)
def test_closed_form_is_the_least_squares_solution_and_consistent(data, a, b, v):
    y, r, c = data
    est = least_squares(y, r, c, a, b, v)
    scale = 1 + np.abs(y).sum() + np.abs(r).sum() + np.abs(c).sum()
    np.testing.assert_allclose(est.joint, _dense_solution(y, r, c, a, b, v), atol=1e-7 * scale)
    np.testing.assert_allclose(est.rows, est.joint.sum(axis=1), atol=1e-9 * scale)
    np.testing.assert_allclose(est.cols, est.joint.sum(axis=0), atol=1e-9 * scale)


def test_consistent_measurements_are_returned_unchanged():
    est = least_squares(TRUTH, TRUTH.sum(axis=1), TRUTH.sum(axis=0), 1.0, 3.0, 0.5)
    np.testing.assert_allclose(est.joint, TRUTH, atol=1e-9)


def _bias_z(truth: np.ndarray, reps: int = 20_000) -> np.ndarray:
    """|z| of the mean error of every estimate (cells, rows, cols) over ``reps`` noisy measurements of ``TRUTH``."""
    noise = DiscreteLaplace(SeededBits(17))
    a, b, v = (_dl_variance(s) for s in SCALES)
    n_rows, n_cols = TRUTH.shape
    y = TRUTH + noise.sample(SCALES[0], reps * TRUTH.size).reshape(reps, n_rows, n_cols)
    r = TRUTH.sum(axis=1) + noise.sample(SCALES[1], reps * n_rows).reshape(reps, n_rows)
    c = TRUTH.sum(axis=0) + noise.sample(SCALES[2], reps * n_cols).reshape(reps, n_cols)
    errors = []
    for k in range(reps):
        est = least_squares(y[k], r[k], c[k], a, b, v)
        errors.append(np.concatenate([
            (est.joint - truth).ravel(), est.rows - truth.sum(axis=1), est.cols - truth.sum(axis=0)]))
    e = np.array(errors)
    return np.abs(e.mean(axis=0)) / (e.std(axis=0, ddof=1) / math.sqrt(reps))


def test_estimates_are_unbiased():
    z = _bias_z(TRUTH)
    crit = stats.norm.isf(ALPHA / (2 * z.size))  # Bonferroni over every estimate: false failure <= ALPHA
    assert z.max() < crit


def test_the_bias_test_sees_a_one_count_error():
    shifted = TRUTH.copy()
    shifted[1, 4] += 1  # as if the estimator were off by one trip in one cell
    z = _bias_z(shifted)
    assert z.max() > stats.norm.isf(ALPHA / (2 * z.size))


def test_least_squares_improves_on_each_measurement():
    """Each one-way estimate has a smaller variance than its own measurement (exact, from the linear map)."""
    a, b, v = 1.0, 2.0, 2.0
    n_rows, n_cols = 3, 4
    basis = []  # the estimator is linear: its variance is sum over inputs of (coefficient² x variance)
    for kind, size, var in (("y", n_rows * n_cols, a), ("r", n_rows, b), ("c", n_cols, v)):
        for k in range(size):
            y, r, c = np.zeros((n_rows, n_cols)), np.zeros(n_rows), np.zeros(n_cols)
            {"y": y.reshape(-1), "r": r, "c": c}[kind][k] = 1
            est = least_squares(y, r, c, a, b, v)
            basis.append((np.concatenate([est.joint.ravel(), est.rows, est.cols]), var))
    variance = sum(coef**2 * var for coef, var in basis)
    assert (variance[: n_rows * n_cols] < a).all()
    assert (variance[n_rows * n_cols: n_rows * n_cols + n_rows] < b).all()
    assert (variance[-n_cols:] < v).all()


@pytest.mark.parametrize("bad", [dict(var_joint=0.0), dict(var_rows=-1.0), dict(var_cols=float("inf")),
                                 dict(var_joint=True)])
def test_bad_variances_are_refused(bad):
    kwargs = dict(var_joint=1.0, var_rows=1.0, var_cols=1.0) | bad
    with pytest.raises(ValueError):
        least_squares(TRUTH, TRUTH.sum(axis=1), TRUTH.sum(axis=0), **kwargs)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError):
        least_squares(TRUTH, TRUTH.sum(axis=0), TRUTH.sum(axis=1), 1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        least_squares(np.array([[np.nan]]), np.zeros(1), np.zeros(1), 1.0, 1.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(shapes.flatmap(lambda s: st.tuples(
    hnp.arrays(float, s, elements=st.floats(-30, 300, allow_nan=False)), hnp.arrays(float, s[0], elements=values),
    hnp.arrays(float, s[1], elements=values))), st.integers(1, 60))
def test_rounding_keeps_every_sum_exact(data, tau):
    est = least_squares(*data, 1.0, 2.0, 2.0)
    out = round_with_remainders(est, tau)
    assert (out.cells[out.listed] >= tau).all() and (out.cells[~out.listed] == 0).all()
    assert (out.row_other >= 0).all() and (out.col_other >= 0).all()
    assert (out.rows == out.cells.sum(axis=1) + out.row_other).all()
    assert (out.cols == out.cells.sum(axis=0) + out.col_other).all()
    assert out.rows.sum() == out.cols.sum() == out.cells.sum() + out.row_other.sum()
    assert out.row_other.sum() == out.col_other.sum()
    assert all(x.dtype == np.int64 for x in (out.cells, out.row_other, out.col_other, out.rows, out.cols))


def test_rounding_lists_large_cells_and_gathers_the_rest():
    est = Estimate(joint=np.array([[50.4, 2.6], [1.0, 3.2]]), rows=np.array([53.0, 4.2]), cols=np.array([51.4, 5.8]))
    out = round_with_remainders(est, 10)
    assert out.listed.tolist() == [[True, False], [False, False]] and out.cells[0, 0] == 50
    # one-way counts: N = round(57.2) = 57 split by largest remainder over rows and over columns
    assert out.rows.tolist() == [53, 4] and out.cols.tolist() == [51, 6]
    assert out.row_other.tolist() == [3, 4] and out.col_other.tolist() == [1, 6]


def test_rounding_fits_the_listed_cells_of_a_line_within_its_estimate():
    est = Estimate(joint=np.array([[30.0, 12.0], [0.0, -5.0]]), rows=np.array([42.0, -5.0]),
                   cols=np.array([30.0, 7.0]))
    out = round_with_remainders(est, 10)
    # N = 37; rows: max(r, 0) = (42, 0) -> (37, 0). Row 0's excess 5 is below every listed cell: taken off the
    # largest (30 -> 25). Column 1's excess 12 - 7 = 5 would leave 7 < tau: its cell is de-listed.
    assert out.rows.tolist() == [37, 0] and out.cols.tolist() == [30, 7]
    assert out.listed.tolist() == [[True, False], [False, False]] and out.cells[0, 0] == 25
    assert out.row_other.tolist() == [12, 0] and out.col_other.tolist() == [5, 7]


def test_winners_curse_does_not_bias_the_one_way_counts():
    """A diagonal of large cells among empty ones: empty cells listed by their noise (winner's curse) sum to
    more than their line's unlisted estimate. The published one-way counts still sum to the rounded total, so
    their mean error is that of the total (Gaussian, sd ``sigma n``) over ``n``, plus rounding: a random draw
    fails the bound with probability ALPHA. The old rule (publish at least the listed cells, clipping negative
    remainders) gives at least the listed cells, whose mean error on this seeded draw is far past the bound.
    The large cells stay listed, off by at most their line's noise."""
    n, sigma, tau = 50, 4.0, 5
    truth = np.diag(np.full(n, 1000.0))
    joint = truth + np.random.default_rng(7).normal(0, sigma, truth.shape)
    out = round_with_remainders(Estimate(joint, joint.sum(axis=1), joint.sum(axis=0)), tau)
    assert out.listed.diagonal().all() and (np.abs(out.cells.diagonal() - 1000) < 6 * sigma * math.sqrt(n)).all()
    bound = (0.5 + stats.norm.isf(ALPHA / 2) * sigma * n) / n
    assert abs((out.rows - truth.sum(axis=1)).mean()) <= bound
    assert abs((out.cols - truth.sum(axis=0)).mean()) <= bound
    rounded = np.floor(joint + 0.5)
    old_floor = np.where(rounded >= tau, rounded, 0)
    assert (old_floor.sum(axis=1) - truth.sum(axis=1)).mean() > 1.5 * bound
    assert (old_floor.sum(axis=0) - truth.sum(axis=0)).mean() > 1.5 * bound


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(float, st.integers(1, 30), elements=st.floats(0, 1e6)), st.integers(0, 10**6))
def test_largest_remainder_sums_to_the_total(weights, total):
    if total > 0 and weights.sum() <= 0:
        with pytest.raises(ValueError):
            largest_remainder(weights, total)
        return
    out = largest_remainder(weights, total)
    assert out.sum() == total and (out >= 0).all()
    if total > 0:
        assert (np.abs(out - total * weights / weights.sum()) < 1 + 1e-6).all()


def test_bad_tau_is_refused():
    est = least_squares(TRUTH, TRUTH.sum(axis=1), TRUTH.sum(axis=0), 1.0, 1.0, 1.0)
    for tau in (0, 1.5, True):
        with pytest.raises(ValueError):
            round_with_remainders(est, tau)
