"""``release.periods``: which dates form one card_period scope, a public calendar rule."""

from datetime import date, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opal_dp.core import ContributionBounds
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.periods import Periods, missing_week_days

EPSILON = {m.name: 0.5 for m in MARGINALS}
DELTA = {m.name: 1e-8 for m in MARGINALS}


@given(st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 12, 31)))
def test_every_date_is_in_the_monday_to_sunday_week_that_holds_it(day):
    week = Periods().of(day.isoformat())
    assert len(week) == 7 and date.fromisoformat(week[0]).weekday() == 0
    assert day.isoformat() in week
    assert [date.fromisoformat(d) for d in week] == [date.fromisoformat(week[0]) + timedelta(days=i) for i in range(7)]


@given(st.sets(st.dates(min_value=date(2016, 1, 4), max_value=date(2016, 3, 27)), max_size=20))
def test_the_days_missing_from_their_weeks_complete_each_week_and_nothing_else(days):
    chosen = {d.isoformat() for d in days}
    missing = missing_week_days(chosen)
    assert missing == sorted(missing) and not set(missing) & chosen
    complete = chosen | set(missing)
    assert all(set(Periods().of(d)) <= complete for d in complete)  # whole weeks...
    assert {Periods().of(d)[0] for d in complete} == {Periods().of(d)[0] for d in chosen}  # ...of the chosen days only


def test_the_sample_fortnight_is_two_weeks_and_an_explicit_period_is_one():
    days = [f"2016-07-{d}" for d in range(25, 32)] + [f"2016-08-{d:02d}" for d in range(8, 15)]
    assert [p[0] + ".." + p[-1] for p in Periods.parse("weekly").group(days)] == [
        "2016-07-25..2016-07-31", "2016-08-08..2016-08-14"]
    assert Periods.parse(None) == Periods.parse(" weekly ") == Periods()
    explicit = Periods.parse("2016-07-25..2016-07-31,2016-08-08..2016-08-14")
    assert list(explicit.group(days)) == [explicit.dates] and explicit.days == 14
    with pytest.raises(ValueError, match="not a date of the card_period period"):
        explicit.of("2016-08-01")


def test_every_week_is_calibrated_to_seven_days_whatever_the_data():
    """The sensitivity of a weekly plan is that of 7 days (what the ledger records), so a week with fewer days of
    data is not calibrated to fewer (which would under-noise the cards that travelled every day)."""
    bounds = ContributionBounds(max_trips_per_card_day=2)
    weekly = build_plan("card_period", EPSILON, DELTA, bounds=bounds)
    seven = build_plan("card_period", EPSILON, DELTA, bounds=bounds, periods=Periods.parse("2016-07-25..2016-07-31"))
    assert weekly.bounds_json() == seven.bounds_json() and '"period_days": 7' in weekly.bounds_json()
    assert {n: m.describe() for n, m in weekly.mechanisms.items()} == {n: m.describe() for n, m in seven.mechanisms.items()}
    assert weekly.scope("2016-08-10", "bus") == "2016-08-08..2016-08-14"
