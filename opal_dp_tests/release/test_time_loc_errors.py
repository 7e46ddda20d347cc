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


@pytest.mark.parametrize("mode, tap, root_sd", [("bus", "on", None), ("train", "off", None), ("bus", "on", 30.0),
                                                ("train", "off", 30.0)])  # five stations; three and the unknown cell
def test_the_closed_form_is_the_error_of_the_real_fit(mode, tap, root_sd):
    """Measured roots, or roots pinned to published totals (``totals_pins``)."""
    closed, station, hour = _errors(mode, tap, root_sd)
    assert _consistent(station, closed.station_day) and _consistent(hour, closed.hour)
    # what a reader would assume without the fit: the levels' own noise, summed over the hour's stations
    sigmas = period_budget(0.05, ContributionBounds(4, 1), 1, taps=1).sigmas
    assert not _consistent(hour, sigmas[2] * math.sqrt(len(time_loc_domains(STOPS)[mode, tap].locations)))


def test_the_closed_form_grows_with_the_stations_and_shrinks_below_the_levels_noise():
    sigmas = (400.0, 58.0, 55.0, 43.0)
    small, large = fit_error(sigmas, 5, 0), fit_error(sigmas, 500, 1)
    assert small.station_day < sigmas[1] and large.station_day < sigmas[1]
    assert small.hour < large.hour < 55.0 * math.sqrt(500)
    with pytest.raises(ValueError, match="four default levels"):
        fit_error(sigmas[:3], 5, 0)
