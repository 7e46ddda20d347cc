"""Audit of the person account: an independent check of what a ledger let through, run on the real ledger and on
planted bugs ("an OD tree not charged to the person", "a second period not composed", "a join across input
versions"); the real ledger passes and each bug is caught."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from opal_dp.core import ledger as ledger_module
from opal_dp.core.accounting import PrivacyCost, compose
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import PersonBudgetExceeded
from opal_dp_tests.core.test_ledger import request

WIDE = {"trip": (100.0, 1e-3), "card_day": (100.0, 1e-3), "card_period": (100.0, 1e-3)}
CAP = (10.0, 1e-6)


def violations(ledger: PrivacyLedger, log: list) -> list[str]:
    """Every horizon window, enumerated day by day from the ledger's charges, whose card-level charges compose past
    the person cap; and every draw whose charge holds another input version than the request's."""
    cap = ledger.person_cap()
    charges = [c for c in ledger.charges() if c.unit in ("card_day", "card_period")]
    found = []
    if charges:
        first = date.fromisoformat(min(c.first_date for c in charges)) - timedelta(days=cap.horizon_days - 1)
        last = date.fromisoformat(max(c.last_date for c in charges))
        for n in range((last - first).days + 1):
            start = first + timedelta(days=n)
            end = (start + timedelta(days=cap.horizon_days - 1)).isoformat()
            inside = [c.cost for c in charges if c.last_date >= start.isoformat() and c.first_date <= end]
            spent = compose(inside, delta_target=cap.delta) if inside else None
            if spent and (spent.epsilon > cap.epsilon * (1 + 1e-9) or spent.delta > cap.delta * (1 + 1e-9)):
                found.append(f"window {start}..{end}: {spent.epsilon}")
    found += [f"draw {d.draw.id} ({r.input_version}) under charge of {d.charge.input_version}"
              for r, d in log if d.charge.input_version != r.input_version]
    return found


def day(n: int) -> str:
    return (date(2016, 7, 25) + timedelta(days=n)).isoformat()


def od_trees(ledger, log) -> None:
    for n in range(12):  # one tree per date at epsilon 1: the 11th passes a cap of 10
        ask(ledger, log, request("od", unit="card_day", day=day(n), mode="all", cost=PrivacyCost.approx_dp(1.0, 0.0)))


def two_periods(ledger, log) -> None:
    for first in (0, 14):
        ask(ledger, log, request("synthetic:od", unit="card_period", day=day(first), scope=f"{day(first)}..{day(first + 13)}",
                                 cost=PrivacyCost.approx_dp(6.0, 0.0)))


def replaced_raw_file(ledger, log) -> None:
    ask(ledger, log, request(unit="card_day", mode="bus", input_version="raw-A"))
    ask(ledger, log, request(unit="card_day", mode="train", input_version="raw-B", fingerprint="other"))


def ask(ledger, log, r) -> None:
    try:
        (decision,) = ledger.begin_many([r], run_id=f"run-{len(log)}")
    except PersonBudgetExceeded:
        return
    ledger.complete_many([decision.draw.id], run_id=f"run-{len(log)}")
    log.append((r, decision))


class OdTreeNotChargedToThePerson(PrivacyLedger):
    def _check_person(self, conn, r, first, last):
        if r.marginal != "od":
            super()._check_person(conn, r, first, last)


class SecondPeriodNotComposed(PrivacyLedger):
    def _windows(self, conn, first, last):
        return [(w, [c for c in members if c.unit != "card_period" or (c.first_date, c.last_date) == (first, last)])
                for w, members in super()._windows(conn, first, last)]


@pytest.mark.parametrize("scenario", [od_trees, two_periods, replaced_raw_file])
def test_the_real_ledger_passes_the_audit(tmp_path, scenario) -> None:
    ledger, log = PrivacyLedger(tmp_path / "l.sqlite", WIDE, person_cap=CAP), []
    scenario(ledger, log)
    assert log and violations(ledger, log) == []


@pytest.mark.parametrize("bug, scenario", [("od", od_trees), ("period", two_periods), ("join", replaced_raw_file)])
def test_each_planted_person_level_bug_is_caught(tmp_path, monkeypatch, bug, scenario) -> None:
    factory = {"od": OdTreeNotChargedToThePerson, "period": SecondPeriodNotComposed, "join": PrivacyLedger}[bug]
    if bug == "join":  # the version no longer decides joins
        monkeypatch.setattr(ledger_module, "_SAME_RELEASE",
                            ledger_module._SAME_RELEASE.replace("input_version = ?", "? IS NOT NULL"))
    ledger, log = factory(tmp_path / "l.sqlite", WIDE, person_cap=CAP), []
    scenario(ledger, log)
    assert violations(ledger, log)
