"""``$OPAL_DP_AUDIT_FALSE_ALARM``: the privacy audit's false-alarm probability, 1e-6 unless lowered, never raised."""

from __future__ import annotations

import pytest

from opal_dp.settings import AUDIT_FALSE_ALARM_ENV, audit_false_alarm_from_env


def test_default_is_one_in_a_million(monkeypatch):
    monkeypatch.delenv(AUDIT_FALSE_ALARM_ENV, raising=False)
    assert audit_false_alarm_from_env() == 1e-6


@pytest.mark.parametrize("text, value", [("1e-9", 1e-9), (" 1e-12 ", 1e-12), ("0.000001", 1e-6)])
def test_a_lower_false_alarm_is_taken(monkeypatch, text, value):
    monkeypatch.setenv(AUDIT_FALSE_ALARM_ENV, text)
    assert audit_false_alarm_from_env() == value


@pytest.mark.parametrize("text", ["1e-5", "0", "1e-13", "-1e-7", "nan", "often"])
def test_values_outside_the_range_are_refused(monkeypatch, text):
    monkeypatch.setenv(AUDIT_FALSE_ALARM_ENV, text)
    with pytest.raises(ValueError, match=AUDIT_FALSE_ALARM_ENV):
        audit_false_alarm_from_env()


def test_the_suite_runs_its_audits_at_a_lower_false_alarm():
    assert audit_false_alarm_from_env() == 1e-9
