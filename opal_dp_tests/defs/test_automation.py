"""Sensor and schedule ticks produce the right run requests."""

from __future__ import annotations

import os
from datetime import date, datetime
from zoneinfo import ZoneInfo

import dagster as dg
import pytest

from opal_dp.definitions import defs
from opal_dp.defs.automation import (
    RANGE_END,
    RANGE_START,
    last_complete_week,
    raw_file_sensor,
    release_request,
    weekly_request,
)
from opal_dp.defs.partitions import contiguous_ranges
from opal_dp.settings import DATA_DIR_ENV
from opal_dp_tests.conftest import write_csv


@pytest.fixture
def raw(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    (tmp_path / "raw").mkdir()
    return tmp_path / "raw"


def test_last_complete_week_is_monday_to_sunday_before_today():
    assert last_complete_week(date(2016, 8, 15)) == [f"2016-08-{d:02d}" for d in range(8, 15)]
    assert last_complete_week(date(2016, 8, 14)) == [f"2016-08-{d:02d}" for d in range(1, 8)]


def test_raw_file_sensor_requests_new_and_replaced_days_once(raw):
    instance = dg.DagsterInstance.ephemeral()
    write_csv(raw, "2016-07-25", [])
    write_csv(raw, "2016-07-26", [])
    result = raw_file_sensor(dg.build_sensor_context(instance=instance, definitions=defs()))
    assert [r.partition_key for r in result.run_requests] == ["2016-07-25", "2016-07-26"]
    assert result.dynamic_partitions_requests[0].partition_keys == ["2016-07-25", "2016-07-26"]
    instance.add_dynamic_partitions("service_date", ["2016-07-25", "2016-07-26"])
    again = raw_file_sensor(dg.build_sensor_context(instance=instance, cursor=result.cursor, definitions=defs()))
    assert again.run_requests == [] and again.dynamic_partitions_requests == []
    path = write_csv(raw, "2016-07-26", [{"card_id": 1}])
    os.utime(path, ns=(1, 1))
    replaced = raw_file_sensor(dg.build_sensor_context(instance=instance, cursor=again.cursor, definitions=defs()))
    assert [r.partition_key for r in replaced.run_requests] == ["2016-07-26"]
    assert replaced.dynamic_partitions_requests == []


def test_finished_private_stages_release_their_dates_in_one_run(released):
    instance, results = released
    run = instance.get_run_by_id(results["private_stages"][0].run_id)
    (request,) = release_request(instance, run)
    assert request.tags[RANGE_START] == "2016-07-25|bus"
    assert request.tags[RANGE_END] == "2016-07-30|train"


def test_weekly_schedule_releases_the_last_complete_week(released):
    instance, _ = released
    monday = datetime(2016, 8, 1, 6, tzinfo=ZoneInfo("Australia/Sydney"))
    (request,) = weekly_request(instance, monday)
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2016-07-25|bus", "2016-07-30|train")
    later = datetime(2016, 8, 8, 6, tzinfo=ZoneInfo("Australia/Sydney"))
    skipped = weekly_request(instance, later)
    assert isinstance(skipped, dg.SkipReason)


def test_contiguous_ranges_never_cover_a_key_that_was_not_asked_for():
    order = ["2016-07-25", "2016-07-27", "2016-07-26", "2016-07-28"]  # registration order, not calendar
    assert contiguous_ranges(order, ["2016-07-25", "2016-07-26"]) == [("2016-07-25", "2016-07-25"),
                                                                      ("2016-07-26", "2016-07-26")]
    assert contiguous_ranges(order, order[1:]) == [("2016-07-27", "2016-07-28")]
    assert contiguous_ranges(order, []) == []
