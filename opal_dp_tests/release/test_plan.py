"""Direct tests of ``release.marginals.plan``: scopes, recorded bounds, periods, refusals, and that each plan's charges
compose to the configured budget with the unit's sensitivity (written out here, not taken from ``core.units``)."""

from __future__ import annotations

import math

import pytest

from opal_dp.core import ContributionBounds, PrivacyUnit, Sensitivity
from opal_dp.core.accounting import compose
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.options import Mechanism
from opal_dp.release.marginals.plan import FALSE_CELLS_PER_DAY, build_plan
from opal_dp.release.periods import parse_dates
from opal_dp.release.periods import Periods

EPSILON = {m.name: m.default_epsilon for m in MARGINALS}
DELTA = {m.name: 1e-7 for m in MARGINALS}
PERIOD = parse_dates("2016-07-25..2016-07-31")
BOUNDS = ContributionBounds(max_trips_per_card_day=3, max_per_bin=2)


def test_parse_dates_takes_ranges_and_dates_sorted_once():
    assert parse_dates(" 2016-08-01, 2016-07-30..2016-08-01,2016-07-29 ") == (
        "2016-07-29", "2016-07-30", "2016-07-31", "2016-08-01")
    for bad in ("2016-08-01..2016-07-30", "", " , "):
        with pytest.raises(ValueError):
            parse_dates(bad)


@pytest.mark.parametrize("unit, scope", [("trip", "2016-07-26|bus"), ("card_day", "2016-07-26"),
                                         ("card_period", "2016-07-25..2016-07-31")])
def test_each_unit_has_its_ledger_scope(unit, scope):
    plan = build_plan(unit, EPSILON, DELTA, periods=Periods(PERIOD))
    assert plan.scope("2016-07-26", "bus") == scope
    chosen = PrivacyUnit(unit)
    assert plan.relation is chosen.default_relation and plan.mechanism is Mechanism.default_for(chosen)


def test_a_card_period_plan_refuses_a_date_outside_its_period():
    with pytest.raises(ValueError, match="not a date of the card_period period"):
        build_plan("card_period", EPSILON, DELTA, periods=Periods(PERIOD)).scope("2016-08-01", "bus")


def test_recorded_bounds_are_the_units_own():
    assert build_plan("trip", EPSILON, DELTA).bounds_json() == '{"unit": "trip"}'
    assert build_plan("card_day", EPSILON, DELTA, bounds=BOUNDS).bounds_json() == (
        '{"max_per_bin": 2, "max_trips_per_card_day": 3, "unit": "card_day"}')
    assert build_plan("card_period", EPSILON, DELTA, bounds=BOUNDS, periods=Periods(PERIOD)).bounds_json() == (
        '{"max_days_per_card": null, "max_per_bin": 2, "max_trips_per_card_day": 3, "period_days": 7, '
        '"unit": "card_period"}')


@pytest.mark.parametrize("kwargs, message", [
    ({"design": "other"}, "release design"), ({"mechanism": "exponential"}, "mechanism"),
    ({"epsilon": {"tap_on_time": 1.0}}, "exactly the marginals"),
])
def test_bad_plans_are_refused(kwargs, message):
    args = {"unit": "trip", "epsilon": EPSILON, "delta": DELTA, **kwargs}
    with pytest.raises(ValueError, match=message):
        build_plan(args.pop("unit"), args.pop("epsilon"), args.pop("delta"), **args)


# one unit's sensitivity, written out (m = 3 trips a card-day, L = 2 per bin, 7 days)
SENSITIVITY = {
    ("trip", "replace_one"): Sensitivity(l0=2, l1=2, l2_squared=2, linf=1),
    ("card_day", "add_remove"): Sensitivity(l0=3, l1=3, l2_squared=6, linf=2),
    ("card_period", "add_remove"): Sensitivity(l0=21, l1=21, l2_squared=42, linf=2),
    ("card_period", "replace_one"): Sensitivity(l0=42, l1=42, l2_squared=84, linf=2),
}


@pytest.mark.parametrize("unit, relation", sorted(SENSITIVITY))
@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_sbh_plans_spend_exactly_the_budget_at_the_units_sensitivity(unit, relation, mechanism):
    plan = build_plan(unit, EPSILON, DELTA, relation=relation, mechanism=mechanism, bounds=BOUNDS, periods=Periods(PERIOD))
    assert {m.sensitivity for m in plan.mechanisms.values()} == {SENSITIVITY[unit, relation]}
    total_epsilon, total_delta = math.fsum(EPSILON.values()), math.fsum(DELTA.values())
    spent = compose([m.cost() for m in plan.mechanisms.values()], delta_target=total_delta)
    assert spent.epsilon <= total_epsilon and spent.epsilon == pytest.approx(total_epsilon, rel=1e-9)
    assert spent.delta == pytest.approx(total_delta, rel=1e-12)
    if mechanism == "laplace":
        for name, m in plan.mechanisms.items():
            assert (m.epsilon, m.delta, m.scale) == (EPSILON[name], DELTA[name], m.sensitivity.l1 / EPSILON[name])
    else:  # rho in proportion to epsilon_j, half of each delta_j for its threshold events
        rho = {name: m.cost().rho for name, m in plan.mechanisms.items()}
        for name, m in plan.mechanisms.items():
            assert rho[name] / spent.rho == pytest.approx(EPSILON[name] / total_epsilon, rel=1e-12)
            assert m.cost().delta == DELTA[name] / 2


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_public_domain_plan_spends_the_budget_and_takes_the_smallest_tau(mechanism):
    plan = build_plan("trip", EPSILON, DELTA, mechanism=mechanism, design="public_domain")
    total_epsilon, total_delta = math.fsum(EPSILON.values()), math.fsum(DELTA.values())
    costs = [noise.cost(table) for noise in plan.noise.values() for table in pd_design.TABLES]
    spent = compose(costs, delta_target=total_delta)
    assert spent.epsilon == pytest.approx(total_epsilon, rel=1e-9) and spent.epsilon <= total_epsilon * (1 + 1e-12)
    pieces = [(plan.noise[tap], dom.cells) for (_, tap), dom in plan.domains.items()]

    def false_cells(tau: int) -> float:
        return sum(pd_design.expected_false_cells(noise, cells, tau) for noise, cells in pieces)

    assert false_cells(plan.tau) <= FALSE_CELLS_PER_DAY < false_cells(plan.tau - 1)
