"""The privacy_budget resource and the ledger command: the cap cannot be talked out of the ledger by configuration,
only raised by the recorded command; a reset must be acknowledged."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from opal_dp import settings
from opal_dp.cli import main
from opal_dp.core.ledger_records import LedgerResetRefused
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.DATA_DIR_ENV, str(tmp_path))
    return tmp_path


def test_a_configured_cap_is_used_only_when_the_ledger_is_created(data_dir):
    trip = {"privacy_unit": "trip"}
    assert PrivacyBudget(cap_epsilon=4.0, **trip).ledger(default_storage()).cap("trip").epsilon == 4.0
    with pytest.raises(dg.Failure, match="raise-cap"):
        PrivacyBudget(cap_epsilon=40.0, **trip).ledger(default_storage())  # a later configuration cannot lift it
    assert PrivacyBudget(**trip).ledger(default_storage()).cap("trip").epsilon == 4.0


def test_the_cli_raises_a_cap_with_its_reason_and_shows_the_history(data_dir, capsys):
    PrivacyBudget().ledger(default_storage())
    main(["ledger", "raise-cap", "--unit", "card_day", "--epsilon", "16", "--delta", "1.5e-6", "--reason", "second draw"])
    main(["ledger", "show"])
    out = capsys.readouterr().out
    assert "raised to (epsilon=16" in out and "cap card_day: raise" in out and "second draw" in out
    assert PrivacyBudget(privacy_unit="card_day").ledger(default_storage()).cap("card_day").epsilon == 16.0
    with pytest.raises(Exception, match="must raise"):
        main(["ledger", "raise-cap", "--unit", "card_day", "--epsilon", "8", "--delta", "1e-6", "--reason", "lower"])


def test_the_person_cap_is_set_at_creation_and_raised_only_by_the_cli(data_dir, capsys):
    ledger = PrivacyBudget(person_cap_epsilon=10.0, person_horizon_days=30).ledger(default_storage())
    assert (ledger.person_cap().epsilon, ledger.person_cap().horizon_days) == (10.0, 30)
    with pytest.raises(dg.Failure, match="person_cap_epsilon = 40.0 but the ledger holds 10.0"):
        PrivacyBudget(person_cap_epsilon=40.0).ledger(default_storage())
    main(["ledger", "raise-cap", "--person", "--epsilon", "12", "--delta", "1e-6", "--reason", "board"])
    main(["ledger", "show"])
    out = capsys.readouterr().out
    assert "person cap over 30 days raised to (epsilon=12" in out and "person cap over 30 days: raise" in out
    assert PrivacyBudget().ledger(default_storage()).person_cap().epsilon == 12.0


def test_a_ledger_reset_beside_published_releases_needs_an_acknowledgement(data_dir):
    release = data_dir / "published" / "r1"
    release.mkdir(parents=True)
    (release / "privacy.json").write_text(json.dumps({"ledger": {"id": "ab" * 16, "draws": [1, 2]}}))
    with pytest.raises(LedgerResetRefused):
        PrivacyBudget().ledger(default_storage())
    ledger = PrivacyBudget(acknowledge_ledger_reset="restored from an old backup").ledger(default_storage())
    assert ledger.resets()[0]["reason"] == "restored from an old backup"


def test_unit_settings_are_validated():
    for bad in ({"privacy_unit": "person"}, {"mechanism": "uniform"}, {"max_trips_per_card_day": 0},
                {"synthetic_epsilon": 0.0}, {"synthetic_delta": 1.0}, {"relation": "swap"}):
        with pytest.raises(Exception):
            PrivacyBudget(**bad)
    assert PrivacyBudget(privacy_unit="card_period").plan().scope("2016-07-27", "bus") == "2016-07-25..2016-07-31"
