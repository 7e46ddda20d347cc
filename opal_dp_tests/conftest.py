"""Shared fixtures: a tiny public stop network and raw-file writers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from opal_dp.network import MODES
from opal_dp.settings import AUDIT_FALSE_ALARM_ENV, AUDIT_RUNS_ENV, WORKERS_ENV

SUITE_AUDIT_FALSE_ALARM = "1e-9"
"""Every production ``privacy_audit`` the suite runs (roll-ups, in this process or in the subprocesses and workers
it starts, which inherit the environment) fails a correct release with probability at most 1e-9: the suite runs
fewer than 1,000 of them, so together at most 1e-6 (QUALITY.md)."""
os.environ[AUDIT_FALSE_ALARM_ENV] = SUITE_AUDIT_FALSE_ALARM
SUITE_AUDIT_RUNS = "100000"
"""The suite's production audits run 10^5 releases per input, not 10^6 (the least the setting allows): their
false-alarm rate above holds there, and the tests of what an audit detects (planted bugs, the publish gate's leak) set
their own numbers."""
os.environ[AUDIT_RUNS_ENV] = SUITE_AUDIT_RUNS
os.environ[WORKERS_ENV] = "1"
"""The suite's releases do their per-day work in the calling process: ``make test`` already runs a test process per
core, and a per-day pool in each only adds process starts on the same cores (two tiny releases side by side: 35 s with
two workers each, 27 s with one; docs/benchmarks.md). The pool is tested where a test asks for it: ``test_parallel``,
the publish tests, the multiprocess executor's runs and the non-editable install's ``--workers 2``."""
PUBLISH_STEP = "opal_dp.defs.marginals.publish."
SLOW_WEIGHT = 10  # seconds: a slow test without an estimate of its own


def pytest_collection_modifyitems(config, items):
    """The files of the costliest end-to-end (slow) tests first, the order of everything else kept: with xdist's
    ``--no-loadscope-reorder`` (``make test``) the longest files start first and the many short ones fill the end,
    instead of the long ones starting last. A slow test weighs its marker's rough seconds on 2 cores
    (``@pytest.mark.slow(170)``), else ``SLOW_WEIGHT``; only the order depends on it. Under `make mutation` (mutmut names the mutant in
    ``MUTANT_UNDER_TEST``), the publish gate's end-to-end tests run only against mutants of the publish step: they
    reach nearly every function of the core, whose mutants their unit tests cover, and would cost a release per
    mutant."""
    weight: Counter = Counter()
    for item in items:
        if marker := item.get_closest_marker("slow"):
            weight[item.path] += marker.args[0] if marker.args else SLOW_WEIGHT
    items.sort(key=lambda item: -weight[item.path])  # stable: a file's tests stay together and in order
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "." not in mutant or mutant.startswith(PUBLISH_STEP):
        return
    skipped = [item for item in items if "publish_gate" in item.keywords]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = [item for item in items if "publish_gate" not in item.keywords]


def pytest_sessionstart(session):
    """Under `make mutation`, each mutant's tests start with every ``functools`` cache of opal_dp empty. mutmut forks
    its workers from a process that has already run the tests unmutated, so without this a mutant in a function a
    cache calls (``discrete_gaussian._Acceptance``, the tail bounds of ``sparse_noise``, ``noise._table``) would be
    bypassed by the cached, unmutated result and survive whenever its inputs were cached."""
    if "." in os.environ.get("MUTANT_UNDER_TEST", ""):
        clear_opal_dp_caches()


MUTATED_PACKAGES = ("opal_dp.core.", "opal_dp.prep.", "opal_dp.release.")  # not ``parallel``: its cache is a pool


def clear_opal_dp_caches():
    for name, module in list(sys.modules.items()):
        if not name.startswith(MUTATED_PACKAGES) or module is None:
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                value.cache_clear()


def other_days(days) -> list[str]:
    """The days of ``days``' weeks that are not in ``days`` (ISO): what a test of a few days releases their weeks
    without (``release --without``), since a week is released once all its days are in."""
    from opal_dp.release.periods import missing_week_days

    return missing_week_days(str(d) for d in days)


def release_tiny_days(root: Path, days: list[str], budget: dict, **options) -> dict:
    """``run_release`` on an ephemeral instance and the data folder ``root`` over ``days`` of 3,000 tiny trips each
    (``fuzz.raw.tiny_day``), their weeks released without their other days: a test's small, real release."""
    import dagster as dg

    from opal_dp import settings
    from opal_dp.cli import run_release
    from opal_dp_tests.fuzz.raw import tiny_day, write_day

    for i, day in enumerate(days):
        write_day(root / "raw", day, tiny_day(day, trips=3_000, seed=i))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.DATA_DIR_ENV, str(root))
        return run_release(dg.DagsterInstance.ephemeral(), budget=budget, without=other_days(days), **options)


TINY_STOPS = [
    # stop_id, mode, name, postcode
    (1, "bus", "George St near Market St", 2000),
    (2, "bus", "Elizabeth St", 2000),
    (3, "bus", "Oxford St", 2010),
    (10, "train", "Central", 2000),
    (11, "train", "Town Hall", 2000),
    (12, "train", "Parramatta", 2150),
    (20, "ferry", "Circular Quay", 2000),
    (21, "ferry", "Manly", 2095),
    (30, "light_rail", "Central Chalmers Street", 2000),
    (31, "light_rail", "Dulwich Hill", 2203),
]


@pytest.fixture(scope="session", autouse=True)
def throwaway_dagster_home(tmp_path_factory):
    """Each test process's own Dagster home, with opal_dp's ``dagster.yaml`` (telemetry off): ``make test`` exports
    the project's (the one ``make release`` and the UI use), and a release run by a test would otherwise record its
    runs there, in a home made without that file. Tests that need a home of their own still set one."""
    from opal_dp.cli import ensure_dagster_home

    home = ensure_dagster_home(tmp_path_factory.mktemp("dagster_home"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        yield home


@pytest.fixture
def umask_022():
    """The usual umask of a shared host, under which opal_dp must still write private data privately."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def stops() -> pd.DataFrame:
    frame = pd.DataFrame(TINY_STOPS, columns=["stop_id", "mode", "name", "postcode"])
    return frame.assign(
        stop_id=frame["stop_id"].astype("int32"),
        mode=pd.Categorical(frame["mode"], categories=list(MODES)),
        postcode=frame["postcode"].astype("int16"),
        lat=-33.88,
        lon=151.2,
    )


def write_csv(folder: Path, day: str, rows: list[dict], header: str | None = None) -> Path:
    """A raw CSV day file; ``rows`` are dicts of the raw columns (missing keys -> empty)."""
    columns = ["card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]
    path = folder / f"trips_{day}.csv"
    lines = [header or ",".join(columns)]
    lines += [",".join(str(row.get(c, "")) for c in columns) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on localhost for this test session (``opal_dp_tests.services``)."""
    from opal_dp_tests.services import PostgresServer

    pytest.importorskip("psycopg2", reason="the PostgreSQL tests need psycopg2 (the `cluster` extra)")
    try:
        server = PostgresServer()
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) else exc
        pytest.skip(f"cannot start a PostgreSQL server: {detail}")
    yield server
    server.stop()
