"""The deployment profile of ``deploy/`` on localhost (``make cluster-test``): a Dagster instance on PostgreSQL,
the privacy ledger on PostgreSQL, a Redis broker and two Celery workers run the full release of the bundled
sample (its first week, the release period, at 1/20 of its scale: the test is about where each step runs, not about
volume), and it must hold what the single-machine release holds: every check passes, one charge per partition and marginal, the
published files are valid."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from opal_dp.defs.marginals.release import CHECK_SPECS
from opal_dp.release.marginals.checks import DESIGN_CHECKS
from opal_dp.defs.shared.executor import BACKEND_ENV, BROKER_ENV, EXECUTOR_ENV
from opal_dp.network import MODES
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.published_folder import latest_release, validate_published
from opal_dp.settings import DATA_DIR_ENV, LEDGER_URL_ENV
from opal_dp.simulate.sample import SAMPLE_DATES, ensure_sample
from opal_dp_tests.conftest import other_days

DAYS = SAMPLE_DATES[:2]  # one release period, released without its other days: every job runs once

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = REPO_ROOT / "deploy"
WORKERS = 2

pytestmark = pytest.mark.slow(70)


@pytest.fixture
def redis():
    from opal_dp_tests.services import RedisServer

    pytest.importorskip("dagster_celery", reason="the cluster test needs the `cluster` extra")
    try:
        server = RedisServer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture
def cluster(postgres, redis, tmp_path, monkeypatch):
    """The deploy/ profile on localhost, as environment variables, with the Celery workers running."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    env = {
        "DAGSTER_HOME": str(home),
        "DAGSTER_POSTGRES_URL": postgres.new_database().replace("postgresql://", "postgresql+psycopg2://", 1),
        LEDGER_URL_ENV: postgres.new_url(),
        EXECUTOR_ENV: "celery",
        BROKER_ENV: f"{redis.url}/0",
        BACKEND_ENV: f"{redis.url}/1",
        DATA_DIR_ENV: str(tmp_path / "data"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # the venv's celery
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with dg.DagsterInstance.get():  # the instance's tables, made once: two workers starting together both made them
        pass
    cli = Path(sys.executable).parent / "dagster-celery"
    workers, logs = [], []
    try:
        for i in range(WORKERS):
            logs.append(tmp_path / f"worker-{i}.log")
            workers.append(subprocess.Popen(
                [str(cli), "worker", "start", "-A", "dagster_celery.app", "-y", str(DEPLOY / "celery.yaml"),
                 "--name", f"opal-{i}", "--", "--concurrency=1"],
                cwd=REPO_ROOT, stdout=open(logs[-1], "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            ))
        deadline = time.monotonic() + 180
        while not all(" ready." in log.read_text(errors="replace") for log in logs):
            dead = [log for log, worker in zip(logs, workers) if worker.poll() is not None]
            assert not dead and time.monotonic() < deadline, f"a Celery worker did not start: {(dead or logs)[0].read_text()}"
            time.sleep(1)
        yield
    finally:
        for worker in workers:  # each worker is the leader of its own process group (start_new_session)
            with contextlib.suppress(ProcessLookupError):  # a worker that failed to start is gone already
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


def test_full_release_of_the_sample_through_two_celery_workers(cluster, monkeypatch):
    from opal_dp.cli import run_release
    from opal_dp.simulate import sample
    from opal_dp.release.periods import week_of
    from opal_dp.defs.shared.budget import PrivacyBudget
    from opal_dp.defs.shared.storage import default_storage

    storage = default_storage()
    monkeypatch.setattr(sample, "SAMPLE_SCALE", sample.SAMPLE_SCALE / 20)
    monkeypatch.setattr(sample, "SAMPLE_DATES", DAYS)
    ensure_sample(storage.raw_dir)
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        results = run_release(instance, distributed=True, budget={"privacy_unit": "trip"},
                              without=other_days(d.isoformat() for d in DAYS))
        weeks = len({week_of(d.isoformat()) for d in DAYS})
        assert [len(runs) for runs in results.runs.values()] == [1, weeks, weeks, 1]  # one ingest run over the days
        evaluations = [e for run in results["release"] for e in run.get_asset_check_evaluations()]
        sbh = [s for s in CHECK_SPECS if s.name in DESIGN_CHECKS["sbh"]]  # one evaluation per check and partition
        assert {(e.asset_check_key, e.partition) for e in evaluations if e.blocking} == {
            (s.key, f"{mode}|{week_of(d.isoformat())}") for s in sbh for mode in MODES for d in DAYS}
        assert all(e.passed for e in evaluations if e.blocking)
        steps = {e.step_key for runs in results.runs.values() for run in runs for e in run.all_events
                 if e.is_step_success}
        on_workers = {e.step_key: e.event_specific_data.metadata["Celery worker"].value
                      for runs in results.runs.values() for run in runs for e in run.all_events
                      if e.event_type_value == "ENGINE_EVENT" and "Celery worker" in e.event_specific_data.metadata}
    assert steps and set(on_workers) == steps, "every step must run on a Celery worker"
    assert {w.split("@")[0] for w in on_workers.values()} == {f"opal-{i}" for i in range(WORKERS)}
    ledger = PrivacyBudget(privacy_unit="trip").ledger(storage)
    pairs = [(c.scope, c.marginal) for c in ledger.charges()]
    partitions = len(DAYS) * len(MODES)
    charges = partitions * len(MARGINALS) + len(DAYS)  # six marginals per (date, mode), one OD tree per date
    assert len(pairs) == len(set(pairs)) == charges
    assert sum(marginal == "od" for _, marginal in pairs) == len(DAYS)
    assert all(d.status == "complete" for d in ledger.draws()) and len(ledger.draws()) == charges
    validate_published(latest_release(storage.published_dir))
