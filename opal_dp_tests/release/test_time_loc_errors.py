"""The hierarchy's fit error in closed form (``time_loc_errors``) against the real measurement and fit, sampled."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import Measurement, fit, measure
from opal_dp.core.units import ContributionBounds
from opal_dp.release.marginals.time_loc_errors import FitError, fit_error
from opal_dp.prep.schemas import WINDOWS_PER_DAY
from opal_dp.release.marginals.time_loc_hierarchy import (LEVELS, WINDOWS_PER_HOUR, period_budget, time_loc_domains,
                                                          totals_pins)
from opal_dp_tests.release.test_time_loc_hierarchy import STOPS

ALPHA = 1e-6
TREES = 1000
BUSY = 10_000  # trips in every (window, station) cell: no estimate is raised to 0


def _errors(mode: str, tap: str, root_sd: float | None = None) -> tuple[FitError, np.ndarray, np.ndarray]:
    """The closed form, and per independent tree (measured at once, fitted one by one; with ``root_sd``, pinned to
    daily totals of that noise) the error of station 0's day and of hour 7's total."""
    dom = time_loc_domains(STOPS)[mode, tap]
    budget = period_budget(0.05, ContributionBounds(4, 1), 1, taps=1)
    tree, n = dom.tree(LEVELS), len(dom.locations)
    noise = DiscreteGaussian(SeededBits(11))
    measured = measure(tree, np.full((TREES, dom.cells), BUSY, dtype=np.int64), budget, noise)
    known = WINDOWS_PER_DAY * n * BUSY  # trips with a known location; tap-off's unknown cell holds BUSY more
    totals = (np.c_[noise.sample(root_sd, TREES), noise.sample(root_sd, TREES)] + [known + BUSY * dom.unknown, known]
              if root_sd is not None else None)
    fitted = [fit(tree, Measurement(tuple(level[i] for level in measured.levels)), budget.sigmas, 0,
                  None if totals is None else totals_pins(dom, tuple(int(t) for t in totals[i]))).counts
              for i in range(TREES)]
    station = np.array([counts[1][0] for counts in fitted]) - WINDOWS_PER_DAY * BUSY
    hour = np.array([counts[2][7 * n: 8 * n].sum() for counts in fitted]) - WINDOWS_PER_HOUR * n * BUSY
    return fit_error(budget.sigmas, n, dom.unknown, root_sd), station, hour


def _consistent(errors: np.ndarray, sd: float) -> bool:
    """Whether the sample's variance is that of a centred normal of ``sd`` (chi-square, two-sided, p = ALPHA)."""
    n = len(errors)
    statistic = float(np.sum(errors.astype(np.float64) ** 2)) / sd**2
    return stats.chi2.ppf(ALPHA / 2, n) <= statistic <= stats.chi2.ppf(1 - ALPHA / 2, n)


@pytest.mark.parametrize("mode, tap, root_sd", [("bus", "on", None), ("train", "off", 30.0)])
def test_the_closed_form_is_the_error_of_the_real_fit(mode, tap, root_sd):
    """Sampled, with the real measurement's noise: a measured root (five stations), and a root pinned to published
    totals (``totals_pins``: three stations and the unknown cell)."""
    closed, station, hour = _errors(mode, tap, root_sd)
    assert _consistent(station, closed.station_day) and _consistent(hour, closed.hour)
    # what a reader would assume without the fit: the levels' own noise, summed over the hour's stations
    sigmas = period_budget(0.05, ContributionBounds(4, 1), 1, taps=1).sigmas
    assert not _consistent(hour, sigmas[2] * math.sqrt(len(time_loc_domains(STOPS)[mode, tap].locations)))


@pytest.mark.parametrize("tap, pinned", [("on", False), ("off", False), ("on", True), ("off", True)])
def test_the_closed_form_is_exactly_the_real_fits_linear_error(tap, pinned):
    """Exact, not sampled: the real fit's error is linear in each measured count (and pinned total) where nothing is
    raised to 0; each one's coefficient, found by moving it alone, times its level's sigma, summed in squares, is the
    closed form's variance (train: three stations, and tap-off's unknown cell)."""
    dom = time_loc_domains(STOPS)["train", tap]
    budget = period_budget(0.05, ContributionBounds(4, 1), 1, taps=1)
    tree, n, base, step, root_sd = dom.tree(LEVELS), len(dom.locations), 10**7, 10**6, 30.0
    truth = [level.astype(np.float64) for level in tree.level_counts(np.full(dom.cells, base, dtype=np.int64))]
    totals = (int(truth[0][0]), WINDOWS_PER_DAY * n * base)

    def figures(levels, pins) -> np.ndarray:
        counts = fit(tree, Measurement(tuple(levels)), budget.sigmas, 0, pins).counts
        return np.array([counts[1][0], counts[2][7 * n: 8 * n].sum()], dtype=np.float64)

    at_truth = figures(truth, totals_pins(dom, totals) if pinned else None)
    variance = np.zeros(2)
    for level, sigma in enumerate(budget.sigmas):
        for cell in range(tree.sizes[level]):
            moved = [v.copy() for v in truth]
            moved[level][cell] += step
            coefficient = (figures(moved, totals_pins(dom, totals) if pinned else None) - at_truth) / step
            variance += (coefficient * sigma) ** 2
    for which in range(2 if pinned else 0):  # the published totals' own noise
        moved = list(totals)
        moved[which] += step
        variance += ((figures(truth, totals_pins(dom, tuple(moved))) - at_truth) / step * root_sd) ** 2
    closed = fit_error(budget.sigmas, n, dom.unknown, root_sd if pinned else None)
    assert np.sqrt(variance) == pytest.approx([closed.station_day, closed.hour], rel=1e-4)


def test_the_closed_form_grows_with_the_stations_and_shrinks_below_the_levels_noise():
    sigmas = (400.0, 58.0, 55.0, 43.0)
    small, large = fit_error(sigmas, 5, 0), fit_error(sigmas, 500, 1)
    assert small.station_day < sigmas[1] and large.station_day < sigmas[1]
    assert small.hour < large.hour < 55.0 * math.sqrt(500)
    with pytest.raises(ValueError, match="four default levels"):
        fit_error(sigmas[:3], 5, 0)
