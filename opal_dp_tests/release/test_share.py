"""``release.share``: the default weekly budget is the largest that a release every week of the horizon keeps
within the person cap, as the ledger itself composes it."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from opal_dp.core import PrivacyCost, PrivacyLedger, PrivacyUnit
from opal_dp.core.accounting import compose, within
from opal_dp.core.ledger_records import DEFAULT_HORIZON_DAYS, DEFAULT_PERSON_CAP, PersonBudgetExceeded
from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import Periods
from opal_dp.release.settings import WEEKLY_OD_HIERARCHY_RHO, WEEKLY_OD_TOTALS_RHO, PrivacySettings
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.share import bisection, boundary_estimate, scope_costs, scope_delta, share_epsilon, weeks_touching
from opal_dp_tests.core.test_ledger import release, request

MONDAY = date(2016, 7, 25)


@given(st.integers(1, 800), st.integers(0, 6))
@settings(max_examples=200, deadline=None)
def test_a_window_touches_at_most_weeks_touching_weeks_and_some_window_all_of_them(horizon, offset):
    first = MONDAY + timedelta(days=offset)
    touched = {Periods().of((first + timedelta(days=i)).isoformat()) for i in range(horizon)}
    assert len(touched) <= weeks_touching(horizon)
    worst = MONDAY - timedelta(days=1)  # a window starting on a Sunday touches the most weeks
    assert len({Periods().of((worst + timedelta(days=i)).isoformat()) for i in range(horizon)}) == weeks_touching(horizon)


@given(st.floats(0.01, 100.0), st.floats(0.0, 1.0), st.one_of(st.none(), st.floats(-1.0, 200.0)))
@example(3.0, 0.5, 1.5)  # a guess on the boundary, inside: two questions
@settings(max_examples=300, deadline=None)
def test_a_guided_bisection_ends_where_asking_at_every_step_ends(top, at, guess):
    """Whatever the guess (none, right, wrong, outside), the ends are those of the plain bisection of a monotone
    ``fits``; a guess near the boundary asks ``fits`` twice at most."""
    boundary = top * at
    asked = []

    def fits(epsilon: float) -> bool:
        asked.append(epsilon)
        return epsilon <= boundary

    plain = bisection(fits, top)
    asked.clear()
    assert bisection(fits, top, guess) == plain
    if guess is not None and guess == boundary:
        assert len(asked) <= 2


def test_the_boundary_estimate_finds_a_crossing_and_gives_up_on_none():
    assert boundary_estimate(lambda e: e * e - 2.0, 0.5) == pytest.approx(2 ** 0.5, rel=1e-6)
    assert boundary_estimate(lambda e: 1.0, 0.5) is None  # flat: no crossing
    assert boundary_estimate(lambda e: float("inf"), 0.5) is None


def test_the_weekly_share_fits_and_is_the_largest_to_three_digits():
    """Kills a share computed for 52 weeks (a 365-day window touches 53) or rounded up."""
    cap, weeks = DEFAULT_PERSON_CAP, weeks_touching(DEFAULT_HORIZON_DAYS)
    assert weeks == 53
    share = share_epsilon(*cap, weeks, Mechanism.GAUSSIAN, Design.SBH)
    delta = scope_delta(cap[1], weeks)
    fits = lambda e: within(scope_costs(e, delta, Mechanism.GAUSSIAN, Design.SBH) * weeks, *cap)  # noqa: E731
    assert fits(share) and not fits(share + 0.02)
    assert not within(scope_costs(share, delta, Mechanism.GAUSSIAN, Design.SBH) * (weeks + 1), *cap)
    assert 2.0 < share < 3.0  # about Google EIE's epsilon 2 per user-week, from an annual cap of 20


def test_the_weekly_share_leaves_room_for_the_od_hierarchy_and_no_more():
    """Kills a share that leaves the hierarchy's seven charges a week out (the ledger would then refuse the last
    weeks of a year), or a hierarchy that declares them once a week instead of once a date."""
    cap, weeks = DEFAULT_PERSON_CAP, 53
    others = tuple(OD_HIERARCHY.costs(PrivacySettings(), PrivacyUnit.CARD_PERIOD))
    assert [c.rho for c in others] == pytest.approx([WEEKLY_OD_HIERARCHY_RHO + WEEKLY_OD_TOTALS_RHO] * 7)
    share = share_epsilon(*cap, weeks, Mechanism.GAUSSIAN, Design.SBH, others=others)
    delta = scope_delta(cap[1], weeks)
    costs = lambda e: scope_costs(e, delta, Mechanism.GAUSSIAN, Design.SBH, others=others)  # noqa: E731
    assert costs(share)[-7:] == list(others)
    assert within(costs(share) * weeks, *cap) and not within(costs(share + 0.02) * weeks, *cap)
    assert share < share_epsilon(*cap, weeks, Mechanism.GAUSSIAN, Design.SBH) - 0.3


def test_the_default_settings_release_a_week_at_the_share():
    settings = PrivacySettings()
    assert settings.unit is PrivacyUnit.CARD_PERIOD and settings.periods.weekly and not settings.releases_od
    assert settings.releases_od_hierarchy and settings.od_hierarchy_budget == WEEKLY_OD_HIERARCHY_RHO
    epsilon, delta = settings.budget()
    assert settings.od_totals_budget == WEEKLY_OD_TOTALS_RHO  # charged with the hierarchy's levels, a date
    hierarchy = PrivacyCost.zcdp(WEEKLY_OD_HIERARCHY_RHO + WEEKLY_OD_TOTALS_RHO, 0.0)  # a date's levels and totals
    share = share_epsilon(*DEFAULT_PERSON_CAP, 53, Mechanism.GAUSSIAN, Design.SBH, others=(hierarchy,) * 7)
    assert sum(epsilon.values()) == pytest.approx(share) and sum(delta.values()) == pytest.approx(1e-6 / 106)
    without = PrivacySettings(od_hierarchy_release=False)
    assert sum(without.budget()[0].values()) == share_epsilon(*DEFAULT_PERSON_CAP, 53, Mechanism.GAUSSIAN, Design.SBH)
    with_od = PrivacySettings(od_release=True)
    assert with_od.od_budget == 0.05 and sum(with_od.budget()[0].values()) < sum(epsilon.values())
    trip = PrivacySettings(privacy_unit="trip")
    assert sum(trip.budget()[0].values()) == 8.0 and trip.releases_od and trip.od_budget == 1.0
    assert not trip.releases_od_hierarchy and trip.od_hierarchy_budget == 0.5


@pytest.mark.slow
def test_a_year_of_default_weekly_releases_fits_the_ledger_and_one_more_is_refused(tmp_path):
    """53 weeks of the default plan's charges (the six marginals and the OD hierarchy of each date) on a real ledger
    with the default person cap: all accepted, and a second release of the last week (fresh noise, a new charge)
    refused before any draw."""
    default = PrivacySettings()
    costs = [m.cost() for m in default.plan().mechanisms.values()] + OD_HIERARCHY.costs(default, PrivacyUnit.CARD_PERIOD)
    ledger = PrivacyLedger(str(tmp_path / "ledger.sqlite"), {"card_period": (100.0, 1e-3)})
    weeks = []
    for w in range(53):
        week = Periods().of((MONDAY - timedelta(days=1) + timedelta(weeks=w)).isoformat())  # from a Sunday's week
        weeks.append(week)
        release(ledger, *[request(f"m{i}", unit="card_period", day=week[0], scope=f"{week[0]}..{week[-1]}", cost=c,
                                  input_version=f"w{w}") for i, c in enumerate(costs)])
    spent = ledger.person_spend(weeks[0][-1], weeks[-1][0])
    assert spent.guarantee.epsilon <= DEFAULT_PERSON_CAP[0] and len(spent.charges) == 53 * len(costs)
    assert spent.guarantee.epsilon == pytest.approx(compose(costs * 53, delta_target=1e-6).epsilon)
    last = weeks[-1]
    with pytest.raises(PersonBudgetExceeded, match="person budget exceeded"):
        release(ledger, *[request(f"m{i}", unit="card_period", day=last[0], scope=f"{last[0]}..{last[-1]}", cost=c,
                                  input_version="w52-corrected") for i, c in enumerate(costs)], run_id="again")
    assert len(ledger.draws_on(last)) == len(costs)  # nothing drawn for the refused release


def test_an_opted_in_hierarchy_fits_the_default_cap_of_a_date_and_would_not_without_its_room():
    """Under ``card_day`` the marginals' (epsilon, delta) charges take the cap's whole delta, so the hierarchy's rho
    needs a delta of its own in the default cap (kills a cap that only adds its epsilon)."""
    from opal_dp.release.settings import DEFAULT_DELTA

    sixteen = {"epsilon": {m.name: m.default_epsilon for m in MARGINALS},
               "delta": {m.name: DEFAULT_DELTA for m in MARGINALS}, "od_release": True, "od_hierarchy_rho": 0.5,
               "mechanism": "laplace"}  # SBH calibrated to the card-day
    settings = PrivacySettings(privacy_unit="card_day", od_hierarchy_release=True, **sixteen)
    date = [m.cost() for m in settings.plan().mechanisms.values()] + [PrivacyCost.approx_dp(settings.od_budget, 0.0)]
    assert OD_TREE.costs(settings, PrivacyUnit.CARD_DAY) == date[-1:]
    hierarchy = OD_HIERARCHY.costs(settings, PrivacyUnit.CARD_DAY)
    assert [c.rho for c in hierarchy] == [0.5 + settings.od_totals_budget]  # its levels and the daily totals
    assert OD_HIERARCHY.costs(settings, PrivacyUnit.TRIP) == [] == OD_TREE.costs(settings, PrivacyUnit.TRIP)
    epsilon, delta = settings._default_cap()
    assert within(date + hierarchy, epsilon, delta) and not within(date + hierarchy, epsilon, settings.nominal[1])
    assert not within(date + hierarchy + hierarchy, epsilon, delta)  # a second hierarchy of the date is refused
    off = PrivacySettings(privacy_unit="card_day", od_hierarchy_release=False, **sixteen)
    assert off._default_cap()[1] == settings.nominal[1]  # off: no room
