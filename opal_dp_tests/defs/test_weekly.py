"""The weekly publication: a schedule on the agency's clock (its next tick in the configured time zone, shown by the
UI) that launches one rollup run at a tick only when something was released since the last publication."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
from dagster._utils.schedules import is_valid_cron_schedule, schedule_execution_time_iterator

from opal_dp import settings
from opal_dp.definitions import defs
from opal_dp.defs.shared.weekly import PUBLISHED, RELEASED, weekly_publication
from opal_dp_tests.browser.dagster_dev import REPO_ROOT

TICK = datetime(2016, 8, 1, 6, tzinfo=ZoneInfo("Australia/Sydney"))


def tick(instance: dg.DagsterInstance):
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=TICK)
    return weekly_publication(context)


def released(instance: dg.DagsterInstance, week: str = "2016-07-25") -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(RELEASED, partition=f"bus|{week}"))


def test_the_weekly_publication_ticks_on_mondays_at_six_in_the_agency_s_time_zone():
    schedule = defs().resolve_schedule_def("weekly_publication")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("0 6 * * 1", "Australia/Sydney")
    after = datetime(2026, 11, 28, 12, tzinfo=timezone.utc)  # a Saturday
    upcoming = next(schedule_execution_time_iterator(after.timestamp(), schedule.cron_schedule,
                                                     schedule.execution_timezone))  # the UI's "next tick"
    assert upcoming.isoformat() == "2026-11-30T06:00:00+11:00"  # Monday 06:00 Sydney summer time
    assert upcoming.astimezone(timezone.utc).isoformat() == "2026-11-29T19:00:00+00:00"


def test_a_tick_launches_one_rollup_only_when_something_was_released_since_the_last_publication():
    with dg.instance_for_test() as instance:
        _ticks(instance)


def _ticks(instance: dg.DagsterInstance) -> None:
    nothing = tick(instance)
    assert isinstance(nothing, dg.SkipReason) and "nothing released" in nothing.skip_message
    released(instance)
    request = tick(instance)
    assert isinstance(request, dg.RunRequest) and request.run_key == f"weekly-publication-{TICK.isoformat()}"
    instance.report_runless_asset_event(dg.AssetMaterialization(PUBLISHED))
    again = tick(instance)
    assert isinstance(again, dg.SkipReason) and "nothing released" in again.skip_message


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
    (settings.AUDIT_RUNS_ENV, "20000", settings.audit_runs_from_env),
    (settings.AUDIT_RUNS_ENV, "1e6", settings.audit_runs_from_env),
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
