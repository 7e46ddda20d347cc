"""Privacy ledger: scopes and charges, caps as state, reset detection, concurrency, crash safety, invariants."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from opal_dp.core.accounting import PrivacyCost, compose
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import (BudgetExceeded, Decision, InputVersionMismatch, LedgerError, LedgerResetRefused,
                                         Request)
from opal_dp.core.ledger_schema import SCHEMA_VERSION
from opal_dp.core.ledger_reads import _by_ids
from opal_dp.core.ledger_backends import open_backend

REPO_ROOT = Path(__file__).resolve().parents[2]
DELTA = 1 / 8_000_000
MARGINALS = {  # name -> epsilon; six of them fit the default cap exactly once
    "tap_on_time": 1.0,
    "tap_on_loc": 1.0,
    "tap_off_time": 1.0,
    "tap_off_loc": 1.0,
    "tap_on_time_loc": 2.0,
    "tap_off_time_loc": 2.0,
}
CAPS = {"trip": (8.0, 6 * DELTA), "card_day": (8.0, 6 * DELTA), "card_period": (8.0, 1e-6)}
FP = "a3f5c0ffee" * 4


def request(marginal: str = "tap_on_time", unit: str = "trip", day: str = "2016-07-25", mode: str = "bus",
            **kw) -> Request:
    scope = {"trip": f"{day}|{mode}", "card_day": day, "card_period": "2016-07-25..2016-08-14"}[unit]
    cost = PrivacyCost.approx_dp(MARGINALS.get(marginal, 1.0), DELTA)
    base = Request(unit, scope, f"{day}|{mode}", day, marginal, "replace_one" if unit == "trip" else "add_remove",
                   cost, f'{{"name": "sbh", "{marginal}": 1}}', '{"unit": "%s"}' % unit, FP, "raw-v1")
    return replace(base, **kw)


def begin(ledger: PrivacyLedger, *requests: Request, run_id: str = "run-1", fresh: bool = False) -> list[Decision]:
    return ledger.begin_many(list(requests) or [request()], run_id=run_id, fresh=fresh)


def release(ledger: PrivacyLedger, *requests: Request, run_id: str = "run-1", fresh: bool = False) -> list[Decision]:
    decisions = begin(ledger, *requests, run_id=run_id, fresh=fresh)
    ledger.complete_many([d.draw.id for d in decisions if d.kind != "reuse"], run_id=run_id)
    return decisions


def all_marginals(**kw) -> list[Request]:
    return [request(name, **kw) for name in MARGINALS]


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path: Path):
    """A factory of fresh, empty ledger locations on each backend (the same tests run on both)."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres").new_url
    names = iter(range(1_000_000))
    return lambda: str(tmp_path / "private" / f"ledger{next(names)}.sqlite")


@pytest.fixture
def ledger(where) -> PrivacyLedger:
    return PrivacyLedger(where(), CAPS)


# -- storage -----------------------------------------------------------------------------


def test_creates_versioned_wal_database_with_an_id(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ledger.sqlite"
    first = PrivacyLedger(path, CAPS)
    assert PrivacyLedger(path, CAPS).ledger_id == first.ledger_id and len(first.ledger_id) == 32
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert PrivacyLedger(tmp_path / "other.sqlite", CAPS).ledger_id != first.ledger_id


@pytest.mark.parametrize("version", [99, 2, 1])
def test_refuses_other_schema_versions(tmp_path: Path, version: int) -> None:
    """The whole refusal, with its advice (kills the advice reworded)."""
    path = tmp_path / "ledger.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    refusal = (f"ledger {path} has schema version {version}; this code reads version {SCHEMA_VERSION}. An older ledger "
               "cannot be carried forward: keep it as the record of the releases it made, move it aside, and start a "
               "new ledger with an acknowledged reset.")
    with pytest.raises(LedgerError, match=f"^{re.escape(refusal)}$"):
        PrivacyLedger(path, CAPS)


def test_a_new_ledger_records_each_cap_and_why(tmp_path: Path) -> None:
    """The cap history's first entries, which the statement and `ledger show` print (kills their reasons
    reworded)."""
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", CAPS)
    (cap,) = ledger.cap_history("card_day")
    assert (cap.epsilon, cap.delta, cap.action, cap.reason) == (8.0, 6 * DELTA, "create",
                                                                "cap at ledger creation (first use of the unit)")
    (person,) = ledger.person_cap_history()
    assert (person.action, person.reason) == ("create", "person cap at ledger creation")


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"scope": ""}, "scope must be a non-empty string"),
        ({"part": " "}, "part must be a non-empty string"),
        ({"marginal": ""}, "marginal must be a non-empty string"),
        ({"mechanism": ""}, "mechanism must be a non-empty string"),
        ({"fingerprint": ""}, "fingerprint must be a non-empty string"),
        ({"cost": (1.0, DELTA)}, "cost must be a PrivacyCost"),
    ],
)
def test_begin_validates_requests(ledger: PrivacyLedger, override: dict, match: str) -> None:
    with pytest.raises(LedgerError, match=match):
        begin(ledger, request(**override))
    assert ledger.charges() == [] and ledger.draws() == []


@pytest.mark.parametrize("unit", ["trip", "card_day"])
def test_a_part_of_another_date_than_its_scope_is_refused(ledger: PrivacyLedger, unit: str) -> None:
    """The person account reads a charge's dates from its scope: a part of 2016-07-26 joining (or opening) a charge of
    2016-07-25's scope would spend a day the account never sees, so it is refused with nothing recorded."""
    release(ledger, request(unit=unit))
    stray = replace(request(unit=unit, day="2016-07-26"), scope=request(unit=unit).scope)
    with pytest.raises(LedgerError, match=rf"a {unit} part is charged to its own date's scope, got part "
                                          r"'2016-07-26\|bus' of '2016-07-26' for scope"):
        begin(ledger, stray)
    assert len(ledger.charges()) == 1 and len(ledger.draws()) == 1


def test_begin_validates_unit_run_and_fresh(ledger: PrivacyLedger) -> None:
    with pytest.raises(ValueError):
        begin(ledger, replace(request(), unit="person"))
    with pytest.raises(LedgerError, match="run_id"):
        begin(ledger, run_id="")
    with pytest.raises(LedgerError, match="fresh must be a bool"):
        begin(ledger, fresh=1)


@pytest.mark.parametrize("kw, refusal", [
    ({"initial_caps": {"trip": (0.0, 1e-6)}}, "cap epsilon must be a finite number > 0, got 0.0"),
    ({"initial_caps": {"trip": (8.0, 1.0)}}, "cap delta must be < 1, got 1.0"),
    ({"initial_caps": {"trip": (True, 1e-6)}}, "cap epsilon must be a finite number > 0, got True"),
    ({"initial_caps": {"trip": ("8", 1e-6)}}, "cap epsilon must be a finite number > 0, got '8'"),
    ({"initial_caps": {"trip": (math.inf, 1e-6)}}, "cap epsilon must be a finite number > 0, got inf"),
    ({"initial_caps": {"trip": (8.0, math.nan)}}, "cap delta must be a finite number > 0, got nan"),
    ({"person_cap": (0.0, 1e-6)}, "person cap epsilon must be a finite number > 0, got 0.0"),
    ({"person_cap": (4.0, 1.0)}, "person cap delta must be < 1, got 1.0"),
    ({"horizon_days": 0}, "horizon_days must be an integer >= 1, got 0"),
    ({"horizon_days": True}, "horizon_days must be an integer >= 1, got True"),
    ({"published": {"": [1]}}, "published ledger id must be a non-empty string, got ''"),
    ({"acknowledge_reset": " "}, "acknowledge_reset must be a non-empty string, got ' '"),
])
def test_validates_the_constructors_arguments_by_name(tmp_path: Path, kw: dict, refusal: str) -> None:
    """A cap is a finite positive number, not a bool or a string (kills the ``_positive`` mutants that let a bool
    through, or fail on a string with a ``TypeError``); every refusal names the argument it refuses, exactly (kills
    the names mislabelled), and nothing is created."""
    with pytest.raises(LedgerError, match=f"^{re.escape(refusal)}$"):
        PrivacyLedger(tmp_path / "l.sqlite", **{"initial_caps": CAPS, **kw})
    assert not (tmp_path / "l.sqlite").exists()


def test_the_refusal_of_a_reset_names_the_missing_ledger_and_what_stands_on_it(tmp_path: Path) -> None:
    """The whole refusal, with the path and both ledger ids (kills another separator and reworded advice)."""
    path = tmp_path / "gone.sqlite"
    refusal = (f"no privacy ledger at {path}, but 2 ledger(s) ({'a' * 32}, {'b' * 32}) stand behind releases already "
               "published: starting a new ledger would reset their budget. Restore the ledger, or acknowledge the "
               "reset explicitly (privacy_budget.acknowledge_ledger_reset / --acknowledge-ledger-reset) with a reason.")
    with pytest.raises(LedgerResetRefused, match=f"^{re.escape(refusal)}$"):
        PrivacyLedger(path, CAPS, published={"b" * 32: [1], "a" * 32: [2]})


def test_a_unit_without_a_cap_is_refused_by_name(tmp_path: Path) -> None:
    """Nothing is released for a unit the ledger has no cap for (kills the check inverted and its reason dropped)."""
    ledger = PrivacyLedger(tmp_path / "l.sqlite", {"trip": CAPS["trip"]})
    with pytest.raises(LedgerError, match="^the ledger has no cap for unit 'card_day'$"):
        begin(ledger, request(unit="card_day"))
    assert ledger.charges() == []


def test_a_horizon_of_one_day_is_accepted(tmp_path: Path) -> None:
    """The smallest horizon is a day (kills ``<= 1`` and ``< 2``)."""
    PrivacyLedger(tmp_path / "l.sqlite", CAPS, horizon_days=1)


# -- caps ----------------------------------------------------------------------------------


def test_six_marginals_fit_the_trip_cap_exactly_once_and_the_refusal_names_no_fingerprint(ledger) -> None:
    release(ledger, *all_marginals())
    spend = ledger.spend("trip", "2016-07-25|bus")
    assert (spend.epsilon, spend.delta) == pytest.approx((8.0, 6 * DELTA), rel=1e-12)
    for kw in ({"fingerprint": "b" * 40, "input_version": "raw-v2"}, {}):  # a seventh: new raw version, or fresh
        with pytest.raises(BudgetExceeded) as info:
            begin(ledger, request(**kw), run_id="run-2", fresh=not kw)
        assert len(ledger.charges()) == 6
    message = str(info.value)
    for needle in ("trip scope '2016-07-25|bus'", "tap_off_time_loc: approx_dp ε=2.0", "run run-1",
                   "(8.0, 7.5e-07)", "against the cap (8.0, 7.5e-07)", "raise-cap", "every fresh draw"):
        assert needle in message
    assert FP not in message and FP[:12] not in message and "b" * 12 not in message and "ρ=" not in message
    assert info.value.scope == "2016-07-25|bus" and info.value.requested == PrivacyCost.approx_dp(1.0, DELTA)



def test_the_cap_tolerance_absorbs_float_rounding_only(ledger: PrivacyLedger) -> None:
    """After the six marginals fill the cap (8.0, 6 x 1/8e6, which floats round), one more charge of epsilon 1e-5
    (1.25e-6 of the cap) or of delta 1e-12 is refused. Kills a cap check whose tolerance is wider than float
    rounding (``REL_TOL`` of 1e-3 let both through)."""
    release(ledger, *all_marginals())
    for cost in (PrivacyCost.approx_dp(1e-5, 0.0), PrivacyCost.approx_dp(1e-12, 1e-12)):
        with pytest.raises(BudgetExceeded):
            begin(ledger, request("tap_on_time_tiny", cost=cost), run_id="run-2")
    assert len(ledger.charges()) == 6


def test_a_scope_filled_to_the_cap_up_to_float_rounding_fits(where) -> None:
    """Charges of 0.1 and 0.2 fill a cap of 0.3, which their float sum exceeds by one ulp: the second fits.
    Kills the ``_check_cap`` mutant that drops ``REL_TOL`` (the other tests' sums are exact in floats)."""
    ledger = PrivacyLedger(where(), {"trip": (0.3, 1e-6)})
    release(ledger, request(cost=PrivacyCost.approx_dp(0.1, 0.0)))
    assert begin(ledger, request("tap_on_loc", cost=PrivacyCost.approx_dp(0.2, 0.0)))[0].kind == "charge"


def test_a_refusal_states_the_scope_spend_before_and_after(ledger: PrivacyLedger) -> None:
    """The refusal carries what the scope holds (each charge on its own line), that spend, and what the request would
    take it to; an empty scope says it holds nothing. Kills the ``_check_cap`` mutants that compose the spend of no
    scope, leave the request out of the spend after it, drop the spend or the cap from the error, run the charge
    lines together, or change the empty scope's line."""
    release(ledger, *all_marginals())
    with pytest.raises(BudgetExceeded) as info:
        begin(ledger, request(cost=PrivacyCost.approx_dp(0.5, 0.0)), fresh=True, run_id="run-2")
    held = ledger.spend("trip", "2016-07-25|bus")
    after = compose([c.cost for c in ledger.charges()] + [PrivacyCost.approx_dp(0.5, 0.0)], delta_target=6 * DELTA)
    assert info.value.spent == held and held.epsilon == pytest.approx(8.0) and info.value.cap == (8.0, 6 * DELTA)
    message = str(info.value)
    assert f"for (ε, δ) = ({held.epsilon!r}, {held.delta!r})" in message
    assert f"would take it to ({after.epsilon!r}, {after.delta!r})" in message and after.epsilon > 8.0
    assert all(f"\n  - {name}: approx_dp" in message for name in MARGINALS)
    with pytest.raises(BudgetExceeded, match="it already holds\n  \\(nothing\\)\n"):  # an empty scope says so
        begin(ledger, request(day="2016-07-26", cost=PrivacyCost.approx_dp(9.0, 0.0)), run_id="run-2")

def test_budget_is_refused_before_any_noise_is_drawn(where) -> None:
    ledger = PrivacyLedger(where(), {"trip": (1.5, 1e-6)})
    draws: list[str] = []
    for marginal in ("tap_on_time", "tap_on_loc"):
        try:
            (decision,) = begin(ledger, request(marginal))
        except BudgetExceeded:
            continue
        draws.append(marginal)  # stands for drawing noise: only after begin returned
        ledger.complete_many([decision.draw.id], run_id="run-1")
    assert draws == ["tap_on_time"] and [c.marginal for c in ledger.charges()] == ["tap_on_time"]


def test_all_or_nothing(where) -> None:
    """One request over the cap refuses the whole batch: nothing is recorded."""
    ledger = PrivacyLedger(where(), {"trip": (3.0, 1e-6)})
    with pytest.raises(BudgetExceeded):
        begin(ledger, *all_marginals())
    assert ledger.charges() == [] and ledger.draws() == []


def test_delta_cap_is_enforced_too(where) -> None:
    ledger = PrivacyLedger(where(), {"trip": (100.0, 2e-7)})
    begin(ledger, request(cost=PrivacyCost.approx_dp(1, 1e-7)), request("tap_on_loc", cost=PrivacyCost.approx_dp(1, 1e-7)))
    with pytest.raises(BudgetExceeded):
        begin(ledger, request("tap_off_time", cost=PrivacyCost.approx_dp(1, 1e-9)))


def test_times_are_utc_and_a_bad_scope_or_date_is_refused_with_its_reason(tmp_path: Path) -> None:
    """Kills a record time taken without a time zone (local, no offset), the refusal of an empty scope without the
    name of what it refuses, and the refusal of a date that is not ISO without its reason."""
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", CAPS)
    release(ledger)
    (charge,) = ledger.charges()
    assert datetime.fromisoformat(charge.created_at).utcoffset() == timedelta(0)
    with pytest.raises(LedgerError, match=r"^scope must be a non-empty string, got ''$"):
        ledger.charges(scope="")
    with pytest.raises(LedgerError, match=r"^expected an ISO service date, got '25/07/2016'$"):
        begin(ledger, request(day="25/07/2016"))


def test_scopes_have_separate_budgets(ledger: PrivacyLedger) -> None:
    release(ledger, *all_marginals())
    release(ledger, *all_marginals(mode="train"))
    assert ledger.spend("trip", "2016-07-25|train") == ledger.spend("trip", "2016-07-25|bus")
    assert ledger.spend("trip", "2016-07-26|bus").epsilon == 0.0
    with pytest.raises(LedgerError, match="^scope must be a non-empty string, got ''$"):
        ledger.spend("trip", "")


def test_targeted_reads_return_exactly_what_the_full_reads_hold_for_those_ids_and_scopes(ledger: PrivacyLedger) -> None:
    """The publish gate reads a date's charges and scopes by id and pair, so its cost stays flat as the history grows:
    the answer must be the full read's, restricted (more than one chunk of ids, an id that does not exist, none)."""
    for day in ("2016-07-25", "2016-07-26", "2016-07-27"):
        for mode in ("bus", "train"):
            release(ledger, *all_marginals(day=day, mode=mode))
    everything = ledger.charges()
    some = [c.id for c in everything[::3]]
    assert ledger.charges(ids=[*some, *some, 10_000]) == [c for c in everything if c.id in some]
    assert ledger.charges(ids=range(1, 1200)) == everything and ledger.charges(ids=[]) == []
    assert ledger.charges("trip", "2016-07-26|bus", ids=some) == [
        c for c in everything if c.id in some and c.scope == "2016-07-26|bus"]
    pairs = {("trip", "2016-07-25|train"), ("trip", "2016-07-27|bus"), ("trip", "2017-01-01|bus")}
    assert ledger.summary(scopes=pairs) == [s for s in ledger.summary() if (s.unit, s.scope) in pairs]
    assert [s.scope for s in ledger.summary(scopes=pairs)] == ["2016-07-25|train", "2016-07-27|bus"]
    assert ledger.summary(scopes=set()) == []


def test_a_scope_summary_counts_its_own_charges_draws_and_pending_draws(ledger: PrivacyLedger) -> None:
    """The ledger report and the statement state each scope's counts, cap and last charge: kills a summary that ignores
    its unit, counts no pending draw (a case-changed status literal), or drops the cap, a count or the time."""
    release(ledger, request("tap_on_time"), request("tap_on_loc"))
    begin(ledger, request("tap_off_time"), run_id="run-2")  # charged, drawn, not yet stored
    release(ledger, request("tap_on_time", unit="card_day"))
    trip = {(x.unit, x.scope): x for x in ledger.summary()}["trip", "2016-07-25|bus"]
    assert (trip.charges, trip.draws, trip.pending) == (3, 3, 1)
    assert trip.cap == ledger.cap("trip") and trip.guarantee == ledger.spend("trip", "2016-07-25|bus")
    assert trip.last_charge_at == max(c.created_at for c in ledger.charges("trip", "2016-07-25|bus"))
    assert [(x.unit, x.scope) for x in ledger.summary("card_day")] == [("card_day", "2016-07-25")]
    assert ledger.summary("trip", scopes={("card_day", "2016-07-25")}) == []


@given(st.lists(st.integers(0, 1600), max_size=1400))
@example(list(range(1234, 0, -1)) * 2)
def test_ids_are_read_once_each_in_sorted_chunks_within_the_parameter_limit(ids: list[int]) -> None:
    """Kills a chunk that overlaps the next (an id read twice, so a draw counted twice), drops its last id, exceeds
    500 parameters, or has as many placeholders as ids only by chance."""
    chunks: list[tuple] = []

    def read(chunk: tuple, marks: str) -> list:
        assert marks.split(", ") == ["?"] * len(chunk) and 0 < len(chunk) <= 500
        chunks.append(chunk)
        return list(chunk)

    assert _by_ids(ids, read) == sorted(set(ids))
    assert all(len(chunk) == 500 for chunk in chunks[:-1])


def test_the_cap_is_ledger_state_fixed_at_creation(where) -> None:
    """Opening the ledger again with another cap (as a changed configuration would) changes nothing."""
    path = where()
    PrivacyLedger(path, {"trip": (8.0, 6 * DELTA)})
    ledger = PrivacyLedger(path, {"trip": (1000.0, 0.5), "card_day": (2.0, 1e-7)})
    assert (ledger.cap("trip").epsilon, ledger.cap("trip").action) == (8.0, "create")
    assert ledger.cap("card_day").epsilon == 2.0  # a unit first seen gets its cap recorded then
    release(ledger, *all_marginals())
    with pytest.raises(BudgetExceeded):
        begin(ledger, request(), fresh=True)


def test_raising_the_cap_is_an_explicit_recorded_command(ledger: PrivacyLedger) -> None:
    release(ledger, *all_marginals())
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_cap("trip", 7.0, 1e-6, "lower it")
    with pytest.raises(LedgerError, match="reason"):
        ledger.raise_cap("trip", 16.0, 1e-6, "")
    cap = ledger.raise_cap("trip", 16.0, 12 * DELTA, "second fortnight draw approved by the privacy officer")
    assert (cap.epsilon, cap.action) == (16.0, "raise")
    assert [c.action for c in ledger.cap_history("trip")] == ["create", "raise"]
    assert ledger.cap_history("trip")[0].epsilon == 8.0  # the cap earlier statements named stays on record
    assert begin(ledger, request(), fresh=True, run_id="run-2")[0].kind == "charge"



@pytest.mark.parametrize(("epsilon", "delta", "reason", "match"), [
    (0.0, 12 * DELTA, "ok", "^epsilon must be a finite number > 0"),
    (16.0, 0.0, "ok", "^delta must be a finite number > 0"),
    (16.0, 1.0, "ok", "^delta must be < 1"),
    (16.0, 12 * DELTA, " ", "^reason must be a non-empty string"),
])
def test_a_raised_cap_is_checked_like_a_created_one(ledger: PrivacyLedger, epsilon, delta, reason, match) -> None:
    """Kills the ``raise_cap`` mutants that drop ``below_one`` from the delta check (a delta cap of 1: no delta cap
    at all) and those that mislabel the refused coordinate or the reason. Nothing is recorded."""
    with pytest.raises(LedgerError, match=match):
        ledger.raise_cap("trip", epsilon, delta, reason)
    assert [c.action for c in ledger.cap_history("trip")] == ["create"]


def test_a_cap_raise_may_raise_either_coordinate_alone_and_never_lower_one(ledger: PrivacyLedger) -> None:
    """Kills the ``raise_cap`` mutants ``epsilon <= current`` and ``delta <= current`` (a raise of one coordinate
    refused) and ``... or delta < current and (same cap)`` (a lowered delta, or the same cap, recorded as a raise)."""
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_cap("trip", 16.0, DELTA, "more epsilon, less delta")
    with pytest.raises(LedgerError, match="must raise"):
        ledger.raise_cap("trip", 8.0, 6 * DELTA, "the same cap again")
    assert ledger.raise_cap("trip", 8.0, 7 * DELTA, "delta only").delta == 7 * DELTA
    assert ledger.raise_cap("trip", 9.0, 7 * DELTA, "epsilon only").epsilon == 9.0
    assert [(c.epsilon, c.delta) for c in ledger.cap_history("trip")] == [(8.0, 6 * DELTA), (8.0, 7 * DELTA),
                                                                           (9.0, 7 * DELTA)]


def test_cap_raises_take_the_locks_charges_take(ledger: PrivacyLedger, monkeypatch) -> None:
    """On PostgreSQL a raise and a charge serialise only through a shared lock row, and two charges through their
    scope, card_period date and person rows (``ledger_records._lock_keys``). Kills the mutants that rename or drop
    a lock key of ``raise_cap`` (``cap|unit``), ``raise_person_cap`` (``person``) or ``_lock_keys``."""
    taken: list[list[str]] = []
    real = ledger._backend.lock
    monkeypatch.setattr(ledger._backend, "lock", lambda conn, keys: (taken.append(list(keys)), real(conn, keys))[1])
    ledger.raise_cap("trip", 9.0, 6 * DELTA, "lock check")
    ledger.raise_person_cap(30.0, 1e-6, "lock check")
    begin(ledger, request(unit="card_day"), request(unit="card_period"), request())
    assert taken == [["cap|trip"], ["person"], ["scope|card_day|2016-07-25", "person",
                                                "scope|card_period|2016-07-25..2016-08-14", "date|card_period|2016-07-25",
                                                "person", "scope|trip|2016-07-25|bus"]]

# -- reuse / resume / join / charge ---------------------------------------------------------


def test_rerun_reuses_stored_draws_without_charge(ledger: PrivacyLedger) -> None:
    first = release(ledger, *all_marginals())
    again = begin(ledger, *all_marginals(), run_id="run-2")
    assert [d.kind for d in again] == ["reuse"] * 6
    assert [d.draw.release_ref for d in again] == [d.draw.release_ref for d in first]
    assert len(ledger.charges()) == 6


def test_the_draw_location_is_recorded_with_its_pending_charge(ledger: PrivacyLedger) -> None:
    (first,) = begin(ledger)
    assert first.kind == "charge" and first.draw.status == "pending"
    assert first.draw.release_ref.startswith("releases/trip/tap_on_time/") and first.draw.release_ref.endswith(".parquet")
    (again,) = begin(ledger, run_id="run-2")  # e.g. the first run was killed mid-draw
    assert again == Decision("resume", first.draw, first.charge)  # the same place: a stored draw is found again
    assert len(ledger.charges()) == 1
    ledger.complete_many([again.draw.id], run_id="run-2")
    assert begin(ledger, run_id="run-3")[0].kind == "reuse"
    refs = [d.release_ref for d in ledger.draws()]
    assert len(refs) == len(set(refs))


def test_completion_is_first_wins_and_never_twice_by_one_run(ledger: PrivacyLedger) -> None:
    (a,) = begin(ledger, run_id="run-a")
    (b,) = begin(ledger, run_id="run-b")
    assert (a.kind, b.kind) == ("charge", "resume") and a.draw.id == b.draw.id
    ledger.complete_many([a.draw.id], run_id="run-a")
    ledger.complete_many([b.draw.id], run_id="run-b")  # b stored nothing new: the one file stands
    (draw,) = ledger.draws()
    assert (draw.status, draw.completed_by) == ("complete", "run-a")
    with pytest.raises(LedgerError, match="already completed by run run-a"):
        ledger.complete_many([a.draw.id], run_id="run-a")
    with pytest.raises(LedgerError, match="no draw with id 42"):
        ledger.complete_many([42], run_id="run-a")


def test_begin_many_reuses_by_default_and_names_a_bad_run_id(ledger: PrivacyLedger) -> None:
    """Called as the release steps call it (no ``fresh``), a stored draw of the same release is reused, never charged
    again (kills a default of ``fresh=True``: every rerun would charge anew); a run id that is not a name is refused,
    naming the argument."""
    release(ledger)
    (again,) = ledger.begin_many([request()], run_id="run-2")
    assert again.kind == "reuse" and len(ledger.charges()) == 1
    with pytest.raises(LedgerError, match="^run_id must be a non-empty string, got ''$"):
        ledger.begin_many([request()], run_id="")


def test_a_draw_another_run_completed_does_not_stop_the_rest_of_the_list(ledger: PrivacyLedger) -> None:
    """Run b resumes two draws, one of which run a completes first: b's completion skips that one and still marks the
    other stored (kills ``break`` for ``continue``: the second draw would stay pending, and a later run would draw its
    noise again). A run id that is not a name is refused, naming the argument."""
    first, second = request("tap_on_time"), request("tap_off_time")
    a = begin(ledger, first, second, run_id="run-a")
    b = begin(ledger, first, second, run_id="run-b")
    assert [d.kind for d in b] == ["resume", "resume"]
    ledger.complete_many([a[0].draw.id], run_id="run-a")
    ledger.complete_many([d.draw.id for d in b], run_id="run-b")
    assert sorted((d.status, d.completed_by) for d in ledger.draws()) == [("complete", "run-a"), ("complete", "run-b")]
    with pytest.raises(LedgerError, match="^run_id must be a non-empty string, got ' '$"):
        ledger.complete_many([], run_id=" ")


@pytest.mark.parametrize("draw_id", ["1", True, 1.0])
def test_only_an_int_draw_id_completes_a_draw(ledger: PrivacyLedger, draw_id: object) -> None:
    """A draw is marked stored only by its own id: kills the id check weakened to ``and`` (SQLite would then match the
    string "1" or the float 1.0 to draw 1 and complete it) and the refusal without its reason."""
    (decision,) = begin(ledger)
    assert decision.draw.id == 1
    with pytest.raises(LedgerError, match=r"^draw id must be an int, got "):
        ledger.complete_many([draw_id], run_id="run-1")
    assert [d.status for d in ledger.draws()] == ["pending"]


def test_fresh_draw_is_a_new_charge_and_supersedes(where) -> None:
    ledger = PrivacyLedger(where(), {"trip": (2.0, 1e-6)})
    (d1,) = release(ledger)
    (d2,) = begin(ledger, run_id="run-2", fresh=True)
    assert d2.kind == "charge" and d2.charge.id != d1.charge.id
    assert begin(ledger, run_id="run-3")[0].draw.id == d1.draw.id  # the fresh draw is not stored yet
    ledger.complete_many([d2.draw.id], run_id="run-2")
    assert begin(ledger, run_id="run-3")[0].draw.id == d2.draw.id
    assert ledger.spend("trip", "2016-07-25|bus").epsilon == 2.0
    with pytest.raises(BudgetExceeded):
        begin(ledger, run_id="run-4", fresh=True)


def test_a_new_input_version_is_charged(where) -> None:
    ledger = PrivacyLedger(where(), {"trip": (2.0, 1e-6)})
    release(ledger)
    assert begin(ledger, request(fingerprint="corrected-raw-data", input_version="raw-v2"))[0].kind == "charge"
    with pytest.raises(BudgetExceeded):
        begin(ledger, request(fingerprint="corrected-again", input_version="raw-v3"))


def test_reuse_is_decided_by_the_input_version_and_one_version_must_give_one_input(where) -> None:
    """A stored draw is reused for the same raw version whatever the counts' fingerprint would say about a
    change; a different input under the same version is an integrity failure, not a silent new charge."""
    ledger = PrivacyLedger(where(), {"trip": (8.0, 1e-6)})
    release(ledger)
    reason = ("input version 'raw-v1' was already released from a different mechanism input (another bounding key, "
              "code or configuration?). Nothing was drawn. Release it with a fresh draw (privacy_budget.fresh_draw), "
              "which is charged anew.")
    with pytest.raises(InputVersionMismatch, match=re.escape(reason) + "$"):
        begin(ledger, request(fingerprint="other-input"), run_id="run-2")
    assert begin(ledger, request(), run_id="run-2")[0].kind == "reuse"
    assert len(ledger.charges()) == 1


def test_card_day_modes_of_a_date_join_one_charge_per_marginal(where) -> None:
    """The four (date, mode) partitions of a date are pieces of one histogram: one charge per marginal. (Two
    dates of SBH at delta 7.5e-7 each need a person delta above the default 1e-6.)"""
    ledger = PrivacyLedger(where(), CAPS, person_cap=(20.0, 1e-5))
    modes = ("bus", "ferry", "light_rail", "train")
    decisions = release(ledger, *[r for mode in modes for r in all_marginals(unit="card_day", mode=mode)])
    assert [d.kind for d in decisions[:6]] == ["charge"] * 6 and {d.kind for d in decisions[6:]} == {"join"}
    assert len(ledger.charges("card_day")) == 6 and len(ledger.draws()) == 24
    assert ledger.spend("card_day", "2016-07-25").epsilon == 8.0
    # a later run releasing one more part of the same histogram joins too; redrawing one is charged
    assert begin(ledger, request(unit="card_day", mode="bus"), run_id="run-2")[0].kind == "reuse"
    with pytest.raises(BudgetExceeded):
        begin(ledger, request(unit="card_day", mode="bus"), run_id="run-2", fresh=True)
    release(ledger, *all_marginals(unit="card_day", day="2016-07-26"))
    assert ledger.spend("card_day", "2016-07-26").epsilon == 8.0  # dates compose in parallel


def test_a_fresh_redraw_of_many_parts_costs_one_charge(where) -> None:
    ledger = PrivacyLedger(where(), {"card_day": (2.0, 1e-6)})
    parts = [request(unit="card_day", mode=m) for m in ("bus", "train")]
    release(ledger, *parts)
    redraw = release(ledger, *parts, run_id="run-2", fresh=True)
    assert [d.kind for d in redraw] == ["charge", "join"]
    assert ledger.spend("card_day", "2016-07-25").epsilon == 2.0


def test_card_periods_cannot_overlap(ledger: PrivacyLedger) -> None:
    release(ledger, request(unit="card_period"))
    with pytest.raises(LedgerError, match="periods must not overlap"):
        begin(ledger, request(unit="card_period", scope="2016-07-20..2016-07-31"))
    assert begin(ledger, request(unit="card_period", day="2016-09-01", scope="2016-09-01..2016-09-14"))[0].kind == "charge"



@pytest.mark.parametrize("scope", ["2016-07-25..2016-08-14", "2016-09-02..2016-09-15", "2016-09-01"])
def test_a_card_period_part_must_lie_in_its_scope(ledger: PrivacyLedger, scope: str) -> None:
    """A card_period charge covers its scope's dates on the person account, so a part dated outside them (or a scope
    that names no period) would be charged where its card's days are not. Kills the ``_covered`` mutants that accept
    it (``not sep and ...``) or drop the message; nothing is recorded."""
    with pytest.raises(LedgerError, match="card_period scope must be 'first..last'"):
        begin(ledger, request(unit="card_period", day="2016-09-01", scope=scope))
    assert ledger.charges() == []

def test_zcdp_charges_compose_in_zcdp_and_convert_with_opendp(where) -> None:
    """Six Gaussian charges of rho/6 each: the scope costs what OpenDP's conversion of rho gives at the cap's
    delta minus the threshold deltas, and a seventh is refused."""
    ledger = PrivacyLedger(where(), {"card_period": (8.0, 7.5e-7)})
    costs = [PrivacyCost.zcdp(0.99 / 6, 3.75e-7 / 6)] * 6
    release(ledger, *[request(n, unit="card_period", cost=c) for n, c in zip(MARGINALS, costs)])
    spend = ledger.spend("card_period", "2016-07-25..2016-08-14")
    assert spend == compose(costs, 7.5e-7)
    assert spend.rho == pytest.approx(0.99) and 7.9 < spend.epsilon <= 8.0 and spend.delta == 7.5e-7
    with pytest.raises(BudgetExceeded):
        begin(ledger, request(unit="card_period", cost=PrivacyCost.zcdp(0.01, 1e-9)), fresh=True)


# -- reset detection -------------------------------------------------------------------------


def test_a_missing_ledger_beside_published_releases_is_a_refused_reset(where) -> None:
    path = where()
    with pytest.raises(LedgerResetRefused, match="would reset"):
        PrivacyLedger(path, CAPS, published={"cafe" * 8: {1, 2}})
    assert not open_backend(path).exists()
    ledger = PrivacyLedger(path, CAPS, published={"cafe" * 8: {1, 2}}, acknowledge_reset="disk lost, budget restarted")
    (reset,) = ledger.resets()
    assert set(reset) == {"acknowledged_at", "reason", "ledger_ids", "missing_draws"}  # as the statement prints them
    assert reset["reason"] == "disk lost, budget restarted" and reset["ledger_ids"] == ["cafe" * 8]
    assert reset["missing_draws"] == 0 and reset["acknowledged_at"][:2] == "20"
    assert PrivacyLedger(path, CAPS, published={"cafe" * 8: {1, 2}}).resets() == [reset]  # acknowledged once
    refusal = (f"the privacy ledger {ledger.location} does not account for what was published: releases published "
               f"under other ledger(s) {'beef' * 8}, {'dead' * 8}. Using it would reset the budget of those releases. "
               "Restore the right ledger, or acknowledge the reset explicitly with a reason.")
    with pytest.raises(LedgerResetRefused, match=f"^{re.escape(refusal)}$"):
        PrivacyLedger(path, CAPS, published={"dead" * 8: {1}, "beef" * 8: {2}})  # each named, in order


def test_an_emptied_or_replaced_ledger_is_a_refused_reset(where) -> None:
    path = where()
    ledger = PrivacyLedger(path, CAPS)
    draws = {d.draw.id for d in release(ledger, *all_marginals())}
    published = {ledger.ledger_id: draws}
    PrivacyLedger(path, CAPS, published=published)  # accounts for everything: fine
    with open_backend(path).connect() as conn:  # autocommit
        conn.execute("DELETE FROM draws")
    with pytest.raises(LedgerResetRefused, match="6 draws cited by published releases are gone"):
        PrivacyLedger(path, CAPS, published=published)
    new = where()
    PrivacyLedger(new, CAPS)  # a ledger put in place of the one that made the releases
    with pytest.raises(LedgerResetRefused, match="other ledger"):
        PrivacyLedger(new, CAPS, published=published)


# -- concurrency (separate processes) ----------------------------------------------------


def _race_worker(path: str, run_id: str, barrier, results) -> None:
    ledger = PrivacyLedger(path, CAPS)
    (decision,) = begin(ledger, run_id=run_id)
    barrier.wait()  # everyone has decided; now race to complete
    ledger.complete_many([decision.draw.id], run_id=run_id)
    results.put((decision.kind, decision.draw.id, decision.draw.release_ref))


def _charge_worker(path: str, run_id: str, barrier, results) -> None:
    ledger = PrivacyLedger(path, {"trip": (3.0, 1e-6)})
    barrier.wait()
    try:
        results.put(begin(ledger, request(fingerprint=run_id, input_version=run_id), run_id=run_id)[0].kind)
    except BudgetExceeded:
        results.put("refused")


def _run_processes(target, path: str, n: int) -> list:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(str(path), f"run-{i}", barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_processes_racing_on_one_draw_share_it(where) -> None:
    path = where()
    PrivacyLedger(path, CAPS)
    out = _run_processes(_race_worker, path, 4)
    assert sorted(kind for kind, _, _ in out) == ["charge", "resume", "resume", "resume"]
    assert len({(i, ref) for _, i, ref in out}) == 1  # one draw, one place
    ledger = PrivacyLedger(path, CAPS)
    assert len(ledger.charges()) == 1 and ledger.draws()[0].status == "complete"


def test_processes_racing_to_charge_never_exceed_cap(where) -> None:
    """On PostgreSQL, the scope's row lock is what serialises them (on SQLite, the database lock)."""
    path = where()
    out = _run_processes(_charge_worker, path, 5)
    assert sorted(out) == ["charge"] * 3 + ["refused"] * 2
    assert PrivacyLedger(path, CAPS).spend("trip", "2016-07-25|bus").epsilon == 3.0


# -- crash safety ------------------------------------------------------------------------

_CRASH_SCRIPT = """
import os, signal, sqlite3, sys
from pathlib import Path
from opal_dp.core.ledger import PrivacyLedger
from opal_dp_tests.core.test_ledger import CAPS, request

mode, path = sys.argv[1], Path(sys.argv[2])
ledger = PrivacyLedger(path, CAPS)
armed = False
real_connect = sqlite3.connect

def connect(*args, **kwargs):
    conn = real_connect(*args, **kwargs)
    def trace(sql):
        if armed and sql == "COMMIT":  # statement about to run: the transaction is open
            os.kill(os.getpid(), signal.SIGKILL)
    conn.set_trace_callback(trace)
    return conn

sqlite3.connect = connect
r = request("tap_on_loc")
if mode == "begin-mid-transaction":
    armed = True
    ledger.begin_many([r], run_id="crash")
elif mode == "begin-after-commit":
    ledger.begin_many([r], run_id="crash")
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == "complete-mid-transaction":
    (d,) = ledger.begin_many([r], run_id="crash")
    armed = True
    ledger.complete_many([d.draw.id], run_id="crash")
sys.exit(3)  # not reached unless the kill point was missed
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("begin-mid-transaction", []), ("begin-after-commit", ["pending"]), ("complete-mid-transaction", ["pending"])],
)
def test_killed_process_leaves_no_half_written_charge(tmp_path: Path, mode: str, expected: list[str]) -> None:
    path = tmp_path / "l.sqlite"
    release(PrivacyLedger(path, CAPS))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_SCRIPT, mode, str(path)], env=env)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    ledger = PrivacyLedger(path, CAPS)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    crashed = [d for d in ledger.draws() if d.run_id == "crash"]
    assert [d.status for d in crashed] == expected
    assert len(ledger.charges()) == 1 + len(crashed)
    (redo,) = begin(ledger, request("tap_on_loc"), run_id="retry")
    assert redo.kind == ("resume" if crashed else "charge")
    assert ledger.spend("trip", "2016-07-25|bus").epsilon == 2.0  # charged exactly once either way


# -- invariants (property test) ----------------------------------------------------------

_REQUESTS = [  # few, so keys repeat: two units, two scopes, two parts per card_day scope
    request("m1", cost=PrivacyCost.approx_dp(0.7, 1e-7)),
    request("m1", cost=PrivacyCost.approx_dp(0.7, 1e-7), fingerprint="f2", input_version="v2"),
    request("m2", cost=PrivacyCost.approx_dp(2.5, 3e-7), mode="train"),
    request("m1", unit="card_day", cost=PrivacyCost.approx_dp(1.5, 1e-7)),
    request("m1", unit="card_day", mode="train", cost=PrivacyCost.approx_dp(1.5, 1e-7)),
    request("m1", unit="card_day", mode="train", cost=PrivacyCost.approx_dp(1.5, 1e-7), fingerprint="f2",
            input_version="v2"),
    request("m2", unit="card_day", cost=PrivacyCost.approx_dp(0.5, 2e-7)),
]
_begin_op = st.tuples(st.just("begin"), st.sampled_from(range(len(_REQUESTS))), st.sampled_from([False] * 3 + [True]))
_complete_op = st.tuples(st.just("complete"), st.integers(-1, 2))  # this many draws back from the newest
PROPERTY_CAPS = {"trip": (4.0, 6 * DELTA), "card_day": (4.0, 6 * DELTA)}


_OPS = st.lists(st.one_of(_begin_op, _complete_op), max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPS)
def test_ledger_matches_model_and_never_exceeds_cap(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_against_model(Path(tmp) / "l.sqlite", ops)


@settings(max_examples=40, deadline=None,  # each example is a fresh schema on the server: fewer of them
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_postgres_ledger_matches_model_and_never_exceeds_cap(postgres, ops: list[tuple]) -> None:
    check_against_model(postgres.new_url(), ops)


def check_against_model(location: str | Path, ops: list[tuple]) -> None:
    """An in-memory model predicts every decision; each scope's spend is the sum of its charges and stays
    under the cap; a charge never holds two draws of one part; reuse, resume, joins and refusals cost nothing."""
    charges: list[dict] = []  # id = index + 1
    draws: list[dict] = []

    def key(r: Request) -> tuple:
        return (r.unit, r.scope, r.marginal, r.relation, r.mechanism, r.bounds, r.cost, r.input_version)

    def spent(unit: str, scope: str) -> tuple[float, float]:
        mine = [c for c in charges if c["key"][:2] == (unit, scope)]
        return math.fsum(c["key"][6].epsilon for c in mine), math.fsum(c["key"][6].delta for c in mine)

    ledger = PrivacyLedger(location, PROPERTY_CAPS)
    for n, op in enumerate(ops):
        run = f"r{n % 2 + 1}"
        if op[0] == "begin":
            r, fresh = _REQUESTS[op[1]], op[2]
            same = [d for d in draws if d["part"] == r.part and charges[d["charge"] - 1]["key"] == key(r)]
            done = [d for d in same if d["status"] == "complete"]
            open_ = [c for c in charges if c["key"] == key(r)
                     and not any(d["charge"] == c["id"] and d["part"] == r.part for d in draws)]
            was = spent(r.unit, r.scope)
            cap = PROPERTY_CAPS[r.unit]
            fits = was[0] + r.cost.epsilon <= cap[0] * (1 + 1e-9) and was[1] + r.cost.delta <= cap[1] * (1 + 1e-9)
            if not fresh and done:
                expected = ("reuse", done[-1]["id"])
            elif not fresh and same:
                expected = ("resume", same[0]["id"])
            elif open_ or fits:
                if not open_:
                    charges.append({"id": len(charges) + 1, "key": key(r)})
                charge = open_[-1]["id"] if open_ else len(charges)
                draws.append({"id": len(draws) + 1, "charge": charge, "part": r.part, "fp": r.fingerprint,
                              "status": "pending", "by": None})
                expected = ("join" if open_ else "charge", len(draws))
            else:
                expected = ("refused", None)
            try:
                (d,) = ledger.begin_many([r], run_id=run, fresh=fresh)
                assert (d.kind, d.draw.id) == expected
            except BudgetExceeded:
                assert expected == ("refused", None)
        else:
            draw_id = max(len(draws) - op[1], 1)
            target = draws[draw_id - 1] if 1 <= draw_id <= len(draws) else None
            try:
                ledger.complete_many([draw_id], run_id=run)
            except LedgerError:
                assert target is None or target["by"] == run
            else:
                assert target is not None and target["by"] != run
                if target["status"] == "pending":
                    target.update(status="complete", by=run)
        assert [(d.id, d.charge_id, d.part, d.status, d.completed_by) for d in ledger.draws()] == [
            (d["id"], d["charge"], d["part"], d["status"], d["by"]) for d in draws]
        pairs = [(d.charge_id, d.part) for d in ledger.draws()]
        assert len(pairs) == len(set(pairs))
        for unit, scope in {(c["key"][0], c["key"][1]) for c in charges}:
            spend = ledger.spend(unit, scope)
            assert (spend.epsilon, spend.delta) == pytest.approx(spent(unit, scope), rel=1e-12)
            assert spend.epsilon <= PROPERTY_CAPS[unit][0] * (1 + 1e-9)
        json.dumps([c.cost.describe() for c in ledger.charges()])
