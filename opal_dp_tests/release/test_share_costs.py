"""``release.share.scope_costs`` charges what the release plan of the chosen mechanism charges (the mutation run
found the mechanism unguarded: every test used the default). Each test names the mutants it kills."""

from __future__ import annotations

import pytest

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.share import split, scope_costs, weeks_touching


@pytest.mark.parametrize("mechanism, design", [(m, d) for d in Design for m in Mechanism
                                               if not (d is Design.HIERARCHY and m.pure)])  # a Gaussian design
def test_a_weeks_costs_are_those_of_the_plan_of_its_mechanism_and_design(mechanism, design):
    """A Laplace week costs (epsilon, delta) per marginal, a Gaussian one rho, and the design moves the costs too:
    the share searched for one release must be composed from that release's costs. Kills
    ``x_week_costs__mutmut_11``, ``_19`` (the plan built with the default mechanism whatever was asked) and ``_20``
    (with the default design)."""
    eps, dlt = split(1.0, 1e-8)
    plan = build_plan(PrivacyUnit.CARD_PERIOD, eps, dlt, mechanism=mechanism, design=design,
                      bounds=ContributionBounds(max_trips_per_card_day=3, max_days_per_card=2))
    expected = [m.cost() for m in plan.mechanisms.values()]
    assert scope_costs(1.0, 1e-8, mechanism, design) == expected
    assert {c.measure for c in expected} == {"approx_dp" if mechanism is Mechanism.LAPLACE else "zcdp"}


def test_a_horizon_without_days_is_refused_with_its_reason():
    """Kills ``x_weeks_touching__mutmut_3`` (the reason dropped)."""
    with pytest.raises(ValueError, match="^a horizon has at least one day, got 0$"):
        weeks_touching(0)
