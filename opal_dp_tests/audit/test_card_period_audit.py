"""The card-level audit of a ``card_period`` plan runs at the plan's sensitivity and sees the whole period.

Kills the mutation "days of a period set to 1" in ``core.units.sensitivity``: the plan's mechanism is then
calibrated to one card-day, and the ``period spread`` scenario (a card on every day of the period) flags it.
Seeded noise: each audit flags a correct mechanism with probability at most alpha = 1e-6 whatever the seed.
"""

from __future__ import annotations

import pytest

from opal_dp.audit.card_level import audit_card_level, audit_mechanism_for, period_pair
from opal_dp.core import ContributionBounds, DiscreteLaplace, PrivacyUnit, SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.periods import parse_dates
from opal_dp.release.periods import Periods

PERIOD = parse_dates("2016-07-25..2016-08-07")  # 14 days
BOUNDS = ContributionBounds(max_trips_per_card_day=4, max_per_bin=1)
RUNS = 2 * 10**5  # the period scenario: RUNS // 10 releases of 56 bins


def noise(kind: str, seed: int):
    return DiscreteLaplace(SeededBits(seed)) if kind == "laplace" else DiscreteGaussian(SeededBits(seed))


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_the_audit_uses_the_sensitivity_of_the_plan_it_audits(kind):
    """The audited mechanism is calibrated like the plan's: card_period, the plan's days, its bounds."""
    plan = build_plan("card_period", {m.name: 0.1 for m in MARGINALS}, {m.name: 1e-8 for m in MARGINALS},
                      mechanism=kind, bounds=BOUNDS, periods=Periods(PERIOD))
    mech, _, _ = audit_mechanism_for(kind, plan.bounds, unit=plan.unit, period_days=plan.periods.days)
    assert {m.sensitivity for m in plan.mechanisms.values()} == {mech.sensitivity}


def test_the_period_scenario_moves_every_kept_day():
    pair = period_pair(BOUNDS, 10, len(PERIOD))
    assert len(pair.d) == 14 * 4 and sum(pair.d) - sum(pair.d_prime) == 14 * 4
    capped = period_pair(ContributionBounds(max_trips_per_card_day=4, max_days_per_card=3), 10, len(PERIOD))
    assert sum(capped.d) - sum(capped.d_prime) == 3 * 4  # the production day cap keeps 3 days


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_the_real_card_period_mechanism_passes_the_period_audit(kind):
    """Kills "days of a period set to 1" (``core.units``): a one-day calibration fails the period spread."""
    mech, epsilon, delta = audit_mechanism_for(kind, BOUNDS, noise(kind, 11), unit=PrivacyUnit.CARD_PERIOD,
                                               period_days=len(PERIOD))
    report = audit_card_level(mech, BOUNDS, epsilon=epsilon, delta=delta, runs=RUNS, period_days=len(PERIOD))
    assert report.passed, report.worst
    assert "period spread" in {e.pair.name for e in report.events}


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_a_mechanism_calibrated_to_one_card_day_fails_the_period_audit(kind):
    """Planted bug: a card_period plan noised for one card-day (what the days-set-to-1 mutation produces)."""
    mech, epsilon, delta = audit_mechanism_for(kind, BOUNDS, noise(kind, 12))  # card_day sensitivity
    report = audit_card_level(mech, BOUNDS, epsilon=epsilon, delta=delta, runs=RUNS, period_days=len(PERIOD))
    assert not report.passed
    assert report.worst.pair.name == "period spread"


@pytest.mark.parametrize("calibrated_to", ["card_period", "card_day"])
def test_with_os_noise_the_period_scenario_drawn_beside_the_day_pairs_still_judges(calibrated_to):
    """The production path: OS noise, the period scenario drawn in a thread beside the day pairs in two worker
    processes. The real mechanism passes and its report holds the period's events; the planted one-card-day
    calibration fails on them (each at most alpha = 1e-6 of being wrong)."""
    period = {"period_days": len(PERIOD)} if calibrated_to == "card_period" else {}
    mech, epsilon, delta = audit_mechanism_for("gaussian", BOUNDS, unit=PrivacyUnit(calibrated_to), **period)
    assert not mech.describe()["seeded"]
    report = audit_card_level(mech, BOUNDS, epsilon=epsilon, delta=delta, runs=RUNS, period_days=len(PERIOD),
                              workers=2)
    assert "period spread" in {e.pair.name for e in report.events}
    if calibrated_to == "card_period":
        assert report.passed, report.worst
    else:
        assert not report.passed and report.worst.pair.name == "period spread"
