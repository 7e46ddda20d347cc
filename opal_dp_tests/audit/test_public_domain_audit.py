"""The public-domain design's measurements against what the ledger charges for them: the real noise passes
for trip and card-day units, Laplace (pure epsilon-DP) and Gaussian (zCDP), and the audit catches the planted
bugs (empty cells not noised, noise ignoring the unit's sensitivity, the joint measured at the whole budget).
Each audit runs 10^6 outputs per neighbouring input; a correct table is flagged with probability <= 1e-6."""

from __future__ import annotations

import numpy as np
import pytest

from opal_dp.audit.public_domain import audit_table, measurement_pairs, unit_change
from opal_dp.core import ContributionBounds, PrivacyUnit, Relation, SeededBits, sensitivity
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.release.marginals.public_domain import calibrate
from opal_dp_tests.audit.planted import joint_at_whole_budget, noise_ignoring_sensitivity, zeros_not_noised

LAPLACE = {"time-loc": 2.0, "time": 1.0, "loc": 1.0}  # the trip release's epsilon per table
GAUSSIAN = {"time-loc": 0.5, "time": 0.25, "loc": 0.25}  # rho per table
TRIP = ("trip", Relation.REPLACE_ONE)
CARD_DAY = ("card_day", Relation.ADD_REMOVE)


def noise_for(unit, mechanism="laplace", seed=0):
    (name, relation), budget = unit, LAPLACE if mechanism == "laplace" else GAUSSIAN
    return calibrate(mechanism, sensitivity(PrivacyUnit(name), relation, ContributionBounds()), budget,
                     SeededBits(seed))


def test_a_unit_changes_l1_in_at_most_l0_cells_of_at_most_linf():
    assert unit_change(Sensitivity(2, 2, 2, 1), Relation.REPLACE_ONE).tolist() == [1, -1]
    assert unit_change(Sensitivity(4, 4, 4, 1), Relation.ADD_REMOVE).tolist() == [1, 1, 1, 1]
    assert unit_change(Sensitivity(4, 4, 8, 2), Relation.ADD_REMOVE).tolist() == [2, 2]
    assert unit_change(Sensitivity(4, 5, 10, 2), Relation.ADD_REMOVE).tolist() == [2, 2, 1]
    interior, fresh = measurement_pairs(Sensitivity(2, 2, 2, 1), Relation.REPLACE_ONE)
    assert (interior.d, interior.d_prime, fresh.d, fresh.d_prime) == ((51, 50), (50, 51), (1, 0), (0, 1))


@pytest.mark.slow
@pytest.mark.parametrize("unit,mechanism,table", [
    (TRIP, "laplace", "time-loc"), (CARD_DAY, "laplace", "loc"), (CARD_DAY, "gaussian", "time-loc"),
])
def test_the_real_measurements_pass(unit, mechanism, table):
    report = audit_table(noise_for(unit, mechanism, seed=1), table, unit[1])
    assert report.passed, report.worst
    assert report.epsilon_lower > 0.5 * report.epsilon  # the audit has power: the real loss shows


@pytest.mark.slow
@pytest.mark.parametrize("unit", [TRIP, CARD_DAY])
def test_empty_cells_left_without_noise_are_caught(unit):
    report = audit_table(noise_for(unit, seed=2), "time", unit[1], measure=zeros_not_noised)
    assert not report.passed and report.epsilon_lower > 5 * report.epsilon


@pytest.mark.slow
def test_noise_ignoring_the_card_sensitivity_is_caught():
    report = audit_table(noise_ignoring_sensitivity(noise_for(CARD_DAY, seed=3)), "loc", CARD_DAY[1])
    assert not report.passed and report.epsilon_lower > 2 * report.epsilon


@pytest.mark.slow
def test_a_joint_measured_at_the_whole_tap_budget_is_caught():
    report = audit_table(joint_at_whole_budget(noise_for(TRIP, seed=4)), "time-loc", TRIP[1])
    assert not report.passed and report.epsilon_lower > 1.5 * report.epsilon
    assert np.isclose(report.epsilon, LAPLACE["time-loc"]) and report.delta == 0
