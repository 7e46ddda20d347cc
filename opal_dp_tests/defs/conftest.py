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
