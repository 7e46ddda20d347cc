"""A small synthetic fortnight slice released end to end once per test session, as the 2016 trip-level
reproduction (``privacy_unit: trip``): two days of one week, released without its other days
(``release --without``; ``defs/test_default_release.py`` covers the default, whole weeks)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import dagster as dg
import pytest

from opal_dp.settings import DATA_DIR_ENV
from opal_dp.simulate.trips import generate_days
from opal_dp_tests.conftest import other_days

DAYS = [date(2016, 7, 25), date(2016, 7, 30)]  # a weekday and a Saturday of one week
SCALE = 0.01
TRIP = {"privacy_unit": "trip"}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("opal-data")
    list(generate_days(DAYS, root / "raw", seed=7, scale=SCALE))
    return root


@pytest.fixture(scope="session")
def released(data_dir):
    """(instance, results of the three runs) after ``run_release`` over the synthetic days."""
    from opal_dp.cli import run_release

    previous = os.environ.get(DATA_DIR_ENV)
    os.environ[DATA_DIR_ENV] = str(data_dir)
    instance = dg.DagsterInstance.ephemeral()
    try:
        yield instance, run_release(instance, budget=TRIP, without=other_days(d.isoformat() for d in DAYS))
    finally:
        if previous is None:
            os.environ.pop(DATA_DIR_ENV)
        else:
            os.environ[DATA_DIR_ENV] = previous


def run_report_job(instance: dg.DagsterInstance, job: str):
    """Run an on-demand internal report's job on the session's release and assert it succeeded without charging the
    ledger or touching ``published/``; return (its result, the storage)."""
    from opal_dp.definitions import defs
    from opal_dp.defs.shared.budget import PrivacyBudget
    from opal_dp.defs.shared.storage import default_storage

    def snapshot(root: Path) -> list:
        return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())

    storage = default_storage()
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    before = (ledger.charges(), ledger.draws(), snapshot(storage.published_dir))
    result = defs().resolve_job_def(job).execute_in_process(
        instance=instance, run_config={"resources": {"storage": {"config": {"data_dir": storage.data_dir}},
                                                     "privacy_budget": {"config": TRIP}}})
    assert result.success
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    assert (ledger.charges(), ledger.draws(), snapshot(storage.published_dir)) == before
    return result, storage
