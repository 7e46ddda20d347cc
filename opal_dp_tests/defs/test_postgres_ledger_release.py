"""The release end to end with the privacy ledger on PostgreSQL (``OPAL_DP_LEDGER_URL``)."""

from __future__ import annotations

import dagster as dg
import pytest

from opal_dp.cli import run_release
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.locations import LEDGER_FILE
from opal_dp.settings import DATA_DIR_ENV, LEDGER_URL_ENV
from opal_dp.simulate.trips import generate_days
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, SCALE

pytestmark = pytest.mark.slow


def test_release_charges_a_postgres_ledger_once_per_partition_and_marginal(postgres, tmp_path, monkeypatch):
    list(generate_days(DAYS, tmp_path / "raw", seed=7, scale=SCALE))
    url = postgres.new_url()
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(LEDGER_URL_ENV, url)
    run_release(dg.DagsterInstance.ephemeral(), budget={"privacy_unit": "trip"}, without=other_days(d.isoformat() for d in DAYS))
    storage = default_storage()
    assert storage.ledger_url == url and not (storage.private_dir / LEDGER_FILE).exists()
    ledger = PrivacyBudget(privacy_unit="trip").ledger(storage)
    pairs = [(c.scope, c.marginal) for c in ledger.charges()]
    assert len(pairs) == len(set(pairs)) == 8 * 6 + 2  # six marginals per (date, mode), one OD tree per date
    assert sum(marginal == "od" for _, marginal in pairs) == 2
    assert all(d.status == "complete" for d in ledger.draws()) and len(ledger.draws()) == 50
