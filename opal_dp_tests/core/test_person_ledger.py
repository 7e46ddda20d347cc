"""The person account of the ledger: every card-level charge of every product counts against one person's cap
over any horizon window; charges are tied to the input version of their raw files."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opal_dp.core.accounting import PrivacyCost, compose
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import BudgetExceeded, LedgerError, PersonBudgetExceeded
from opal_dp_tests.core.test_ledger import CAPS, begin, release, request, where  # noqa: F401  (fixture)

TREE = PrivacyCost.approx_dp(1.0, 0.0)
WIDE = {"trip": (100.0, 1e-3), "card_day": (100.0, 1e-3), "card_period": (100.0, 1e-3)}


def day(n: int) -> str:
    return (date(2016, 7, 25) + timedelta(days=n)).isoformat()


def tree(n: int, **kw):
    """The OD tree of date ``n`` (card_day scope), as ``release.od.engine`` asks for it."""
    return request("od", unit="card_day", day=day(n), mode="all", cost=TREE, **kw)


def period(first: int, last: int, marginal: str = "synthetic:od", n: int | None = None, **kw):
    return request(marginal, unit="card_period", day=day(first if n is None else n),
                   scope=f"{day(first)}..{day(last)}", **kw)


def test_reviewer_scenario_a_replaced_raw_file_makes_a_new_charge(where) -> None:
    """card_day: bus drawn under C1 from raw version A; the raw file is replaced (version B); train must not join
    C1 for free: it is a new charge, and the date pays twice."""
    ledger = PrivacyLedger(where(), CAPS)
    (bus,) = release(ledger, request(unit="card_day", mode="bus", input_version="raw-A"))
    (train,) = release(ledger, request(unit="card_day", mode="train", input_version="raw-B", fingerprint="other"),
                       run_id="run-2")
    assert (bus.kind, train.kind) == ("charge", "charge") and train.charge.id != bus.charge.id
    assert ledger.spend("card_day", day(0)).epsilon == 2.0
    assert [c.input_version for c in ledger.charges()] == ["raw-A", "raw-B"]
    (same,) = release(ledger, request(unit="card_day", mode="ferry", input_version="raw-B"), run_id="run-3")
    assert same.kind == "join" and same.charge.id == train.charge.id


def test_every_card_level_charge_of_every_product_is_on_the_person_account(where) -> None:
    ledger = PrivacyLedger(where(), WIDE, person_cap=(50.0, 1e-5))
    release(ledger, *[tree(n) for n in range(14)])  # OD trees
    release(ledger, *[request(m, unit="card_day", day=day(3)) for m in ("tap_on_time", "tap_on_loc")])  # marginals
    release(ledger, period(0, 13, cost=PrivacyCost.zcdp(0.5, 0.0)))  # synthetic, card_period
    release(ledger, request(unit="trip", day=day(5)))  # trip: outside the account
    spend = ledger.person_spend(day(0), day(13))
    card_level = [c for c in ledger.charges() if c.unit != "trip"]
    assert sorted(c.id for c in spend.charges) == sorted(c.id for c in card_level)
    assert spend.guarantee == compose([c.cost for c in card_level], delta_target=1e-5)
    assert spend.cap.horizon_days == 365 and (spend.cap.epsilon, spend.cap.delta) == (50.0, 1e-5)
    assert [c.unit for c in ledger.trip_charges(day(0), day(13))] == ["trip"]
    assert ledger.trip_charges(day(6), day(20)) == []
    assert ledger.person_window([day(2), day(9)]) == spend


def test_a_charge_past_the_person_cap_is_refused_before_any_noise_naming_the_window(where) -> None:
    ledger = PrivacyLedger(where(), WIDE, person_cap=(5.0, 1e-6))
    release(ledger, *[tree(n) for n in range(5)])
    before = (ledger.charges(), ledger.draws())
    with pytest.raises(PersonBudgetExceeded) as info:  # one batch: the fitting request is not recorded either
        begin(ledger, request("tap_on_time", unit="card_day", day=day(40), cost=PrivacyCost.approx_dp(0.5, 0.0)),
              tree(6), run_id="run-2")
    assert (ledger.charges(), ledger.draws()) == before
    message = str(info.value)
    assert info.value.window[0] <= day(0) and info.value.window[1] >= day(6)
    for needle in (f"365-day window {info.value.window[0]}..{info.value.window[1]}", "(5.0, 0.0)",
                   "person cap (5.0, 1e-06)", "raise-cap --person", "Nothing was drawn"):
        assert needle in message
    assert isinstance(info.value, BudgetExceeded) and info.value.spent.epsilon == 5.0


def test_windows_slide_over_the_horizon(where) -> None:
    ledger = PrivacyLedger(where(), WIDE, person_cap=(3.0, 1e-6), horizon_days=30)
    release(ledger, request(unit="card_day", day=day(0), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    with pytest.raises(PersonBudgetExceeded):  # day 29 shares the window day 0..29
        begin(ledger, request(unit="card_day", day=day(29), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    release(ledger, request(unit="card_day", day=day(30), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    assert ledger.person_spend(day(0), day(30)).guarantee.epsilon == 2.0



def test_a_window_reaches_the_last_day_of_the_horizon_after_the_charge(where) -> None:
    """Charges released out of date order: day 29 first, then day 0. The window day 0..29 holds both and must
    refuse the second. Kills the ``_windows`` mutants that end a window one day early (``h - 2``) or leave out a
    charge starting on its last day (``first_date < end``): the second charge was then accepted at twice the cap's
    worth of loss in one 30-day window."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(3.0, 1e-6), horizon_days=30)
    release(ledger, request(unit="card_day", day=day(29), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    with pytest.raises(PersonBudgetExceeded) as info:
        begin(ledger, request(unit="card_day", day=day(0), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    assert info.value.window == (day(0), day(29))
    assert ledger.person_spend(day(0), day(0)).window == (day(0), day(29))


def test_every_window_touching_a_charge_is_checked_not_only_the_first(where) -> None:
    """Day 0 costs 1 and day 40 costs 3; a charge of 2 on day 20 fits the window day 0..29 (3) but not day 20..49
    (5 > 4.5): the refusal must come from the later window."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(4.5, 1e-6), horizon_days=30)
    release(ledger, request(unit="card_day", day=day(0), cost=PrivacyCost.approx_dp(1.0, 0.0)),
            request(unit="card_day", day=day(40), cost=PrivacyCost.approx_dp(3.0, 0.0)))
    with pytest.raises(PersonBudgetExceeded) as info:
        begin(ledger, request(unit="card_day", day=day(20), cost=PrivacyCost.approx_dp(2.0, 0.0)))
    assert info.value.window == (day(20), day(49))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(charges=st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0.5, 1.0, 2.0, 3.0])), min_size=1, max_size=14),
       span=st.tuples(st.integers(0, 40), st.integers(0, 12)))
def test_the_windows_agree_with_brute_force_over_every_start_day(tmp_path, charges, span) -> None:
    """Against brute force over every start day of a 10-day horizon: each charge, in turn, is refused exactly when
    some window touching its date would pass the person cap with it, and ``person_spend`` is the worst window's
    composition. Guards the pruning of windows whose charges another window holds (``_windows``)."""
    horizon, cap, made = 10, 6.0, iter(range(1_000_000))

    def ledger(person_epsilon: float) -> PrivacyLedger:
        return PrivacyLedger(str(tmp_path / f"{len(list(tmp_path.iterdir()))}-{next(made)}.sqlite"), WIDE,
                             person_cap=(person_epsilon, 1e-6), horizon_days=horizon)

    def worst(first: int, last: int, held: list[tuple[int, float]]) -> float:
        return max(compose([PrivacyCost.approx_dp(e, 0.0) for d, e in held if s <= d < s + horizon],
                           delta_target=1e-6).epsilon
                   for s in range(first - horizon + 1, last + 1))

    checked, kept = ledger(cap), []
    for n, (d, epsilon) in enumerate(charges):
        refused = worst(d, d, [*kept, (d, epsilon)]) > cap * (1 + 1e-9)
        try:
            release(checked, request(f"m{n}", unit="card_day", day=day(d), cost=PrivacyCost.approx_dp(epsilon, 0.0)))
            kept.append((d, epsilon))
            assert not refused
        except PersonBudgetExceeded:
            assert refused
    wide = ledger(1e6)
    for n, (d, epsilon) in enumerate(charges):
        release(wide, request(f"m{n}", unit="card_day", day=day(d), cost=PrivacyCost.approx_dp(epsilon, 0.0)))
    first, last = span[0], span[0] + span[1]
    assert wide.person_spend(day(first), day(last)).guarantee.epsilon == pytest.approx(worst(first, last, charges),
                                                                                        rel=1e-12)


def test_the_person_delta_cap_holds_however_small(where) -> None:
    """A person cap of delta 1e-12 refuses a charge of delta 1e-10 whatever its epsilon. Kills the ``_check_person``
    mutant whose quick check compares against ``REL_TOL`` (1e-9) instead of the cap's delta and accepts it."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(20.0, 1e-12))
    with pytest.raises(PersonBudgetExceeded):
        begin(ledger, request(unit="card_day", cost=PrivacyCost.approx_dp(0.1, 1e-10)))
    assert ledger.charges() == []


def test_a_window_filled_to_the_cap_up_to_float_rounding_fits(where) -> None:
    """Charges of 0.1 on days 0 and 58 and of 0.2 on day 29 fill both 30-day windows of the day-29 charge to
    ``0.1 + 0.2``, one ulp above a cap of 0.3 in floats: they fit (``REL_TOL``), while the three together, which no
    window holds, do not. Kills the ``_check_person`` mutant that drops the tolerance from the window check."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(0.3, 1e-6), horizon_days=30)
    release(ledger, request(unit="card_day", day=day(0), cost=PrivacyCost.approx_dp(0.1, 0.0)),
            request(unit="card_day", day=day(58), cost=PrivacyCost.approx_dp(0.1, 0.0)))
    assert begin(ledger, request(unit="card_day", day=day(29), cost=PrivacyCost.approx_dp(0.2, 0.0)))[0].kind == "charge"


def test_a_person_refusal_states_the_spend_as_the_ledger_composes_it(where) -> None:
    """Two Gaussian (zCDP) charges of rho 0.02 on one date: the first costs about epsilon 0.90 at the person delta,
    the two together about 1.30, over a person cap of 1. The refusal states both, composed at the cap's delta.
    Kills the ``_check_person`` mutants that compose the spend without the cap's delta (zCDP then cannot be
    stated), state the spend after the charge as nothing, or drop the scope or the request from the error."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(1.0, 1e-6))
    gaussian = PrivacyCost.zcdp(0.02, 0.0)
    release(ledger, request(unit="card_day", cost=gaussian))
    with pytest.raises(PersonBudgetExceeded) as info:
        begin(ledger, request("tap_on_loc", unit="card_day", cost=gaussian))
    before, after = compose([gaussian], delta_target=1e-6), compose([gaussian] * 2, delta_target=1e-6)
    assert info.value.spent == before and before.epsilon < 1.0 < after.epsilon
    assert f"({after.epsilon!r}, {after.delta!r}) against the person cap" in str(info.value)
    assert (info.value.scope, info.value.requested, info.value.cap) == ("2016-07-25", gaussian, (1.0, 1e-6))

def test_a_period_charge_covers_every_date_of_its_period(where) -> None:
    """A second period is composed with the first wherever one window touches both; a period charge reaches
    every window that touches any of its dates."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(3.0, 1e-6), horizon_days=30)
    release(ledger, period(0, 13, cost=PrivacyCost.approx_dp(2.0, 0.0)))
    with pytest.raises(PersonBudgetExceeded):  # window 13..42 holds the period's last date
        begin(ledger, period(42, 55, cost=PrivacyCost.approx_dp(2.0, 0.0)))
    release(ledger, period(43, 56, cost=PrivacyCost.approx_dp(2.0, 0.0)))
    assert [(c.first_date, c.last_date) for c in ledger.charges()] == [(day(0), day(13)), (day(43), day(56))]


def test_the_person_cap_is_ledger_state_raised_only_by_a_recorded_command(where) -> None:
    location = where()
    ledger = PrivacyLedger(location, WIDE, person_cap=(2.0, 1e-6))
    assert PrivacyLedger(location, WIDE, person_cap=(99.0, 1e-3)).person_cap().epsilon == 2.0  # ignored
    release(ledger, tree(0), tree(1))
    with pytest.raises(PersonBudgetExceeded):
        begin(ledger, tree(2))
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_person_cap(1.0, 1e-6, "lower")
    raised = ledger.raise_person_cap(3.0, 1e-6, "board decision 12")
    assert (raised.action, raised.reason, raised.horizon_days) == ("raise", "board decision 12", 365)
    assert [c.action for c in ledger.person_cap_history()] == ["create", "raise"]
    assert begin(ledger, tree(2))[0].kind == "charge"



@pytest.mark.parametrize(("epsilon", "delta", "reason", "match"), [
    (0.0, 1e-6, "ok", "^epsilon must be a finite number > 0"),
    (30.0, 0.0, "ok", "^delta must be a finite number > 0"),
    (30.0, 1.0, "ok", "^delta must be < 1"),
    (30.0, 1e-6, "", "^reason must be a non-empty string"),
])
def test_a_raised_person_cap_is_checked_like_a_created_one(where, epsilon, delta, reason, match) -> None:
    """Kills the ``raise_person_cap`` mutants that drop ``below_one`` from the delta check (a person delta of 1: no
    bound) and those that mislabel the refused coordinate or the reason. Nothing is recorded."""
    ledger = PrivacyLedger(where(), WIDE)
    with pytest.raises(LedgerError, match=match):
        ledger.raise_person_cap(epsilon, delta, reason)
    assert [c.action for c in ledger.person_cap_history()] == ["create"]


def test_a_person_cap_raise_may_raise_either_coordinate_alone_and_never_lower_one(where) -> None:
    """Kills the ``raise_person_cap`` mutants ``epsilon <= current`` (a delta-only raise refused) and ``... or
    delta < current and (same cap)`` (a lowered delta, or the same cap, recorded as a raise)."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(2.0, 1e-6))
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_person_cap(3.0, 1e-7, "more epsilon, less delta")
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_person_cap(2.0, 1e-6, "the same cap again")
    assert ledger.raise_person_cap(2.0, 2e-6, "delta only").delta == 2e-6
    assert ledger.raise_person_cap(3.0, 2e-6, "epsilon only").epsilon == 3.0
    assert [(c.epsilon, c.delta) for c in ledger.person_cap_history()] == [(2.0, 1e-6), (2.0, 2e-6), (3.0, 2e-6)]

def test_a_releases_person_window_spans_its_first_to_its_last_date(where) -> None:
    """``person_window`` is ``person_spend`` from the earliest to the latest of a release's dates, whatever their order:
    charges on days 0, 30, 60 and 90 cost 2, 1, 3 and 2 under a 10-day horizon, so the worst window over days 60..90
    is 3 but over 75..90 only 2, and over 0..60 it is 3 but over 0..15 only 2. Kills the mutants that take the
    second date as the first, or the second or the last but one as the last."""
    ledger = PrivacyLedger(where(), WIDE, person_cap=(10.0, 1e-6), horizon_days=10)
    release(ledger, *(request(unit="card_day", day=day(n), cost=PrivacyCost.approx_dp(e, 0.0))
                      for n, e in ((0, 2.0), (30, 1.0), (60, 3.0), (90, 2.0))))
    for dates in ([day(90), day(60), day(75)], [day(15), day(0), day(60)]):
        spend = ledger.person_window(dates)
        assert spend == ledger.person_spend(min(dates), max(dates)) and spend.guarantee.epsilon == 3.0
    with pytest.raises(LedgerError, match="^person_window needs at least one date$"):
        ledger.person_window([])
    with pytest.raises(LedgerError, match=f"^empty date range {day(5)}..{day(4)}$"):
        ledger.person_spend(day(5), day(4))
