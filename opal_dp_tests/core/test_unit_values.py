"""The ledger's records carry a ``PrivacyUnit``, whatever they were made from, and the ledger writes the unit's value:
the table rows, the draws' paths and every message read as before."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.units import PrivacyUnit
from opal_dp_tests.core import test_ledger as base


def test_a_unit_is_written_as_its_value() -> None:
    for unit in PrivacyUnit:
        assert str(unit) == f"{unit}" == unit.value
        assert json.dumps({unit: [unit]}) == json.dumps({unit.value: [unit.value]})


@pytest.mark.parametrize("unit", ["trip", "card_day", "card_period"])
def test_every_record_read_back_carries_the_unit_and_the_rows_hold_its_value(tmp_path: Path, unit: str) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = PrivacyLedger(path, base.CAPS)
    asked = base.request(unit=unit)
    assert asked.unit is PrivacyUnit(unit)  # a caller's string, converted when the request is made
    (decision,) = base.release(ledger, asked)
    chosen = PrivacyUnit(unit)
    assert decision.charge.unit is chosen and decision.draw.release_ref.startswith(f"releases/{unit}/tap_on_time/")
    assert [c.unit for c in ledger.charges(chosen)] == [chosen] and ledger.cap(chosen).unit is chosen
    assert {c.unit for c in ledger.cap_history(chosen)} == {chosen}
    assert [(s.unit, s.scope) for s in ledger.summary(scopes={(chosen, asked.scope)})] == [(chosen, asked.scope)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT unit FROM charges").fetchall() == [(unit,)]
        assert {row[0] for row in conn.execute("SELECT unit FROM caps")} == {u.value for u in PrivacyUnit}


def test_an_unknown_unit_is_refused_when_the_request_is_made() -> None:
    with pytest.raises(ValueError, match="'person' is not a valid PrivacyUnit"):
        replace(base.request(), unit="person")
