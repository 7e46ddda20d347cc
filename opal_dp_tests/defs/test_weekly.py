"""The weekly roll-up sensor: one rollup run after each tick, only once something was released since the last
publication and nothing is in progress."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest
from dagster._utils.schedules import is_valid_cron_schedule

from opal_dp import settings
from opal_dp.definitions import defs
from opal_dp.defs.shared.weekly import PUBLISHED, RELEASED, weekly_rollup
from opal_dp_tests.browser.dagster_dev import REPO_ROOT

LAST_WEEK = "0"  # a cursor before every tick: the roll-up is due


def tick(instance: dg.DagsterInstance, cursor: str | None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs())
    return weekly_rollup(context), context.cursor


def released(instance: dg.DagsterInstance, week: str = "2016-07-25") -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(RELEASED, partition=f"bus|{week}"))


def test_switched_on_it_waits_for_the_next_tick():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    result, cursor = tick(instance, None)
    assert isinstance(result, dg.SkipReason) and "first roll-up after" in result.skip_message
    again, _ = tick(instance, cursor)  # the tick it started at does not count
    assert isinstance(again, dg.SkipReason) and "next tick" in again.skip_message


def test_after_a_tick_it_launches_one_rollup_when_something_was_released():
    instance = dg.DagsterInstance.ephemeral()
    nothing, cursor = tick(instance, LAST_WEEK)
    assert isinstance(nothing, dg.SkipReason) and "nothing released" in nothing.skip_message
    assert cursor == LAST_WEEK  # still due: the first release after the tick is published when it ends
    released(instance)
    request, cursor = tick(instance, cursor)
    assert isinstance(request, dg.RunRequest) and request.run_key.startswith("weekly-rollup-")
    once, _ = tick(instance, cursor)
    assert isinstance(once, dg.SkipReason) and "next tick" in once.skip_message


def test_a_publication_newer_than_every_release_launches_nothing():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    instance.report_runless_asset_event(dg.AssetMaterialization(PUBLISHED))
    result, _ = tick(instance, LAST_WEEK)
    assert isinstance(result, dg.SkipReason) and "nothing released" in result.skip_message


def test_it_waits_while_a_run_is_in_progress():
    instance = dg.DagsterInstance.ephemeral()
    released(instance)
    job = defs().resolve_job_def("rollup")
    run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    result, cursor = tick(instance, LAST_WEEK)
    assert isinstance(result, dg.SkipReason) and run.run_id in result.skip_message and cursor == LAST_WEEK
    instance.report_run_canceled(run)
    assert isinstance(tick(instance, cursor)[0], dg.RunRequest)


def test_the_service_files_switch_automation_on_with_valid_settings(monkeypatch):
    """deploy/systemd: the environment file's settings parse (switch on, a valid cron and zone, an interval), and
    both units read it and run Dagster under umask 077 from the checkout's venv."""
    folder = REPO_ROOT / "deploy" / "systemd"
    lines = (folder / "opal-dp.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert settings.automation_from_env() and settings.sensor_interval_from_env() >= 1
    cron, zone = settings.publish_schedule_from_env()
    assert is_valid_cron_schedule(cron) and zone == "Australia/Sydney"
    assert settings.DATA_DIR_ENV in env and "DAGSTER_HOME" in env and settings.first_date_from_env() == "2016-07-25"
    for unit, command in (("daemon", "dagster-daemon run -w workspace.yaml"),
                          ("webserver", "dagster-webserver -w workspace.yaml -h 127.0.0.1")):
        text = (folder / f"opal-dp-{unit}.service").read_text()
        assert "EnvironmentFile=/etc/opal_dp/opal_dp.env" in text and "UMask=0077" in text
        assert f"ExecStart=/opt/opal_dp/.venv/bin/{command}" in text and "KillSignal=SIGINT" in text


@pytest.mark.parametrize(("name", "value", "read"), [
    (settings.AUTOMATION_ENV, "on", settings.automation_from_env),
    (settings.SENSOR_INTERVAL_ENV, "0", settings.sensor_interval_from_env),
    (settings.TIMEZONE_ENV, "Sydney", settings.publish_schedule_from_env),
    (settings.FIRST_DATE_ENV, "2016-07-26", settings.first_date_from_env),
    (settings.FIRST_DATE_ENV, "July 2016", settings.first_date_from_env),
])
def test_a_bad_setting_is_refused_by_name(monkeypatch, name, value, read):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        read()


def test_a_bad_publication_cron_stops_the_code_location_loading():
    env = {**os.environ, settings.PUBLISH_CRON_ENV: "every monday", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", "from opal_dp.definitions import defs; defs()"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and settings.PUBLISH_CRON_ENV in done.stderr
