"""The card-level audit: neighbours differ by all of one card's trips, with the real bounding in the path.

It passes the real mechanisms and catches the planted bugs (bounding skipped; L0 ignored in the threshold;
Linf ignored in the Gaussian's scale). Each audit runs 10^6 releases per neighbouring input; a correct
mechanism is flagged with probability at most alpha = 1e-6 whatever the seed.
"""

from __future__ import annotations

import pytest

from opal_dp.audit.card_level import (
    GAUSSIAN_CLAIM,
    audit_card_level,
    audit_mechanism_for,
    neighbouring_histograms,
    real_bounding,
    scenarios,
)
from opal_dp.core import ContributionBounds, DiscreteLaplace, PrivacyUnit, Relation, SeededBits, sensitivity
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import GaussianThresholdHistogram
from opal_dp.core.sbh import StabilityHistogram
from opal_dp_tests.audit.planted import (
    GaussianThresholdIgnoresL0,
    SigmaIgnoresLinf,
    ThresholdIgnoresL0,
    skip_bounding,
)

RUNS = 10**6
BOUNDS = ContributionBounds(max_trips_per_card_day=4, max_per_bin=2)
EPSILON, DELTA = 1.0, 0.01
SENS = sensitivity(PrivacyUnit.CARD_DAY, Relation.ADD_REMOVE, BOUNDS)


def sbh(factory=StabilityHistogram, seed=0):
    return factory(EPSILON, DELTA, SENS, DiscreteLaplace(SeededBits(seed)))


def test_scenarios_are_card_level_neighbours_and_bounding_applies():
    pairs = {s.name: neighbouring_histograms(s, BOUNDS) for s in scenarios(BOUNDS, 26)}
    h = 78
    assert pairs["spread"].d == (h + 1,) * 4 and pairs["spread"].d_prime == (h,) * 4
    assert pairs["pile"].d == (h + 2,) and pairs["pile"].d_prime == (h,)  # 12 trips bounded to b = 2
    assert pairs["fresh bins"].d == (1,) * 4 and pairs["fresh bins"].d_prime == (0,) * 4
    assert pairs["fresh pile"].d == (2,) and pairs["fresh pile"].d_prime == (0,)
    unbounded = neighbouring_histograms(scenarios(BOUNDS, 26)[1], BOUNDS, skip_bounding)
    assert unbounded.d == (h + 12,)
    assert SENS.l0 == 4 and SENS.l1 == 4 and SENS.linf == 2


@pytest.mark.slow
def test_real_sbh_passes_at_card_level():
    report = audit_card_level(sbh(seed=1), BOUNDS, epsilon=EPSILON, delta=DELTA, runs=RUNS)
    assert report.passed, report.worst
    assert report.epsilon_lower <= EPSILON


@pytest.mark.slow
@pytest.mark.parametrize(
    "factory, bounding, caught_on",
    [
        pytest.param(StabilityHistogram, skip_bounding, {"pile"}, id="bounding-skipped"),
        pytest.param(ThresholdIgnoresL0, real_bounding, {"fresh bins"}, id="threshold-ignores-L0"),
    ],
)
def test_planted_card_level_bug_is_caught(factory, bounding, caught_on):
    report = audit_card_level(sbh(factory, seed=2), BOUNDS, epsilon=EPSILON, delta=DELTA, bounding=bounding,
                              runs=RUNS)
    assert not report.passed
    flagged = {e.pair.name for e in report.events if e.violation_lower > DELTA}
    assert caught_on <= flagged, flagged


GAUSS_BOUNDS = ContributionBounds(max_trips_per_card_day=3, max_per_bin=3)  # a card can pile 3 trips into a bin


SPREAD_BOUNDS = ContributionBounds(max_trips_per_card_day=6, max_per_bin=1)  # a card can fill 6 fresh bins


def gaussian(factory=GaussianThresholdHistogram, seed=0, bounds=GAUSS_BOUNDS):
    epsilon, delta = GAUSSIAN_CLAIM
    sens = sensitivity(PrivacyUnit.CARD_DAY, Relation.ADD_REMOVE, bounds)
    return factory(zcdp_rho_for(epsilon, delta / 2), delta / 2, sens, DiscreteGaussian(SeededBits(seed)))


def test_the_audited_gaussian_is_the_production_construction():
    mech, epsilon, delta = audit_mechanism_for("gaussian", GAUSS_BOUNDS)
    assert (epsilon, delta) == GAUSSIAN_CLAIM and mech.describe() | {"seeded": True} == gaussian().describe()


@pytest.mark.slow
@pytest.mark.parametrize("bounds", [GAUSS_BOUNDS, SPREAD_BOUNDS])
def test_real_gaussian_passes_at_card_level(bounds):
    epsilon, delta = GAUSSIAN_CLAIM
    report = audit_card_level(gaussian(seed=1, bounds=bounds), bounds, epsilon=epsilon, delta=delta, runs=RUNS)
    assert report.passed, report.worst


@pytest.mark.slow
@pytest.mark.parametrize(
    "factory, bounding, bounds, caught_on",
    [
        pytest.param(GaussianThresholdHistogram, skip_bounding, GAUSS_BOUNDS, {"pile"}, id="bounding-skipped"),
        pytest.param(SigmaIgnoresLinf, real_bounding, GAUSS_BOUNDS, {"pile"}, id="sigma-ignores-Linf"),
        pytest.param(GaussianThresholdIgnoresL0, real_bounding, SPREAD_BOUNDS, {"fresh bins"},
                     id="threshold-ignores-L0"),
    ],
)
def test_planted_gaussian_bug_is_caught(factory, bounding, bounds, caught_on):
    epsilon, delta = GAUSSIAN_CLAIM
    report = audit_card_level(gaussian(factory, seed=2, bounds=bounds), bounds, epsilon=epsilon, delta=delta,
                              bounding=bounding, runs=RUNS)
    flagged = {e.pair.name for e in report.events if e.violation_lower > delta}
    assert not report.passed and caught_on <= flagged, flagged
