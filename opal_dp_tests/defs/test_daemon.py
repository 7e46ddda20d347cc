"""The weekly operation end to end, with the real ``dagster-daemon`` process: automation switched on as the README
says (``OPAL_DP_AUTOMATION=1``), a new week of raw days dropped into ``raw/`` is released under the default
(one card over the calendar week, a week released once all its days are there) and published with no other
action.

Only the intervals are shortened for the test: sensors every 2 s, the backfill daemon's pass every 2 s instead of
Dagster's fixed 30 s (a release of a week is two backfills, each waiting up to two passes: about 100 s of the test
was idle), the queued runs launched every second instead of every 5 s (a launch waited 5-12 s, and a release
finishing just after a publication tick waits a minute for the next), and a publication tick every minute instead
of weekly (so the publication follows within a minute of the release). Runs go through the daemon's own machinery (queued run coordinator, backfills, run launcher), under one
machine's default executor (the steps in the run's process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest

from opal_dp import settings
from opal_dp.cli import ensure_dagster_home
from opal_dp.defs.shared.instance import dagster_yaml, instance_settings
from opal_dp.permissions import make_dirs
from opal_dp.simulate.trips import generate_days
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.browser.dagster_dev import REPO_ROOT, stop_group

WEEK = [date(2016, 7, 25) + timedelta(days=i) for i in range(7)]  # Monday to Sunday
PUBLISH_TIMEOUT_S = 600
DAEMONS = {"SENSOR", "ASSET", "BACKFILL", "QUEUED_RUN_COORDINATOR"}
BACKFILL_PASS_S = 2
# ``dagster-daemon run`` with the backfill daemon's pass shortened: Dagster reads the interval, a module constant it
# offers no setting for, from ``dagster._daemon.controller`` at the start of the loop; an upgrade that renames it fails here
DAEMON_MAIN = (
    "import sys, dagster._daemon.controller as controller\n"
    "assert isinstance(controller.DEFAULT_DAEMON_INTERVAL_SECONDS, int), 'Dagster moved the daemon interval'\n"
    f"controller.DEFAULT_DAEMON_INTERVAL_SECONDS = {BACKFILL_PASS_S}\n"
    "from dagster._daemon.cli import main\n"
    "sys.exit(main())\n"
)


def start_daemon(home: Path, data_dir: Path, log: Path) -> subprocess.Popen:
    """``dagster-daemon run`` as ``make daemon`` starts it (umask 077), in its own process group."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        settings.DATA_DIR_ENV: str(data_dir),
        settings.AUTOMATION_ENV: "1",
        settings.SENSOR_INTERVAL_ENV: "2",
        settings.PUBLISH_CRON_ENV: "* * * * *",
        "OPAL_DP_EXECUTOR": "",
        settings.WORKERS_ENV: "1",
        "PYTHONUNBUFFERED": "1",
    }

    def child() -> None:
        os.umask(0o077)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background pytest may hand SIGINT down ignored

    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", DAEMON_MAIN, "run", "-w", "workspace.yaml"],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=child,
        )


def wait_for(what: str, found, proc: subprocess.Popen, log: Path, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dagster-daemon exited ({proc.returncode}) while waiting for {what}:\n"
                                 + log.read_text(errors="replace")[-4000:])
        value = found()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"no {what} after {timeout_s:.0f} s; daemon log:\n" + log.read_text(errors="replace")[-6000:])


def published_week(data_dir: Path, latest: Path, week: set[str]) -> dict | None:
    """The ``latest.json`` pointer once the release it names holds every date of the week."""
    if not latest.exists():
        return None
    pointer = json.loads(latest.read_text())
    statement = json.loads((data_dir / "published" / pointer["folder"] / "privacy.json").read_text())
    return pointer if {k["date"] for k in partition_keys(statement)} == week else None


def settled_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun] | None:
    """Every run, when none is queued, starting or running (else None)."""
    runs = instance.get_runs()
    return None if any(run.status not in FINISHED for run in runs) else runs


FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


@pytest.mark.slow(170)
def test_with_the_daemon_running_a_new_raw_week_is_released_and_published_by_itself(tmp_path):
    data_dir = tmp_path / "data"
    raw = make_dirs(data_dir / "raw")
    home = make_dirs(tmp_path / "dagster_home")
    (home / "dagster.yaml").write_text(dagster_yaml(instance_settings(home) | {"run_coordinator": {
        "module": "dagster", "class": "QueuedRunCoordinator", "config": {"dequeue_interval_seconds": 1}}}))
    home = ensure_dagster_home(home)  # its own dagster.yaml, kept
    incoming = make_dirs(tmp_path / "incoming")
    delivered = list(generate_days(WEEK, incoming, seed=11, scale=0.002))
    week = {d.strftime("%Y%m%d") for d in WEEK}
    log = tmp_path / "daemon.log"
    latest = data_dir / "published" / "latest.json"
    with dg.DagsterInstance.from_config(str(home)) as instance:  # its storage exists before the daemon starts
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        proc = start_daemon(home, data_dir, log)
        try:
            wait_for("daemon heartbeats", lambda: DAEMONS <= set(instance.get_daemon_heartbeats()), proc, log, 120)
            for path, _ in delivered:  # the delivery: whole files appear in raw/
                os.replace(path, raw / path.name)
            pointer = wait_for("publication of the week", lambda: published_week(data_dir, latest, week),
                               proc, log, PUBLISH_TIMEOUT_S)
            # the publication is visible before its run records its end, and the minute's publication tick keeps
            # starting roll-ups: the runs are read at a moment none is in flight
            runs = wait_for("a moment with no run in flight", lambda: settled_runs(instance), proc, log, 300)
            materialised = {key.to_user_string() for key in instance.get_asset_keys()
                            if instance.get_latest_materialization_event(key)}
        finally:
            stop_group(proc)  # the daemon, its code server and any run
    statement = json.loads((data_dir / "published" / pointer["folder"] / "privacy.json").read_text())
    assert statement["privacy_unit"]["unit"] == "card_period" and statement["person"]["bounded"]
    assert [s["scope"] for s in statement["guarantee"]["scopes"]] == [f"{WEEK[0]}..{WEEK[-1]}"]
    assert all(rows > 0 for _, rows in delivered) and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs), [
        (run.job_name, run.status) for run in runs]
    assert all(run.tags.get("dagster/sensor_name") or run.tags.get("dagster/backfill")
               or run.tags.get("dagster/schedule_name") == "weekly_publication"
               for run in runs), "every run was started by a sensor, the automation's backfills or the weekly schedule"
    assert [run.job_name for run in runs].count("rollup") >= 1, "roll-up runs: ledger, audit, reports, publish"
    assert {"release_draws", "privacy_audit", "published_release"} <= materialised
    assert not materialised & {"synthetic_release", "synthetic_trips", "unit_comparison", "design_comparison",
                               "planner_workload", "od_evaluation"}, "automation never builds opt-in or on-demand assets"
