"""A week's release is calibrated only on days cut with its own settings, versioned by the bytes its days were built
from, and a correction of a released week is charged anew or refused by name, never blocking another week.

The outside review's case: lower ``od_height`` from 6 to 4 and release past dates from the UI. The card-day
sequences were stored at height 6, the charge would say height 4: the hierarchy's counts would be calibrated for four
trips a card-day over six. Likewise tighter contribution bounds over days bounded with looser ones."""

from __future__ import annotations

import json
from datetime import date, timedelta

import dagster as dg
import pytest

from opal_dp.cli import run_release
from opal_dp.core.input_version import file_version
from opal_dp.core.units import PrivacyUnit
from opal_dp.definitions import defs
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, period_range
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.network import load_stops
from opal_dp.prep.day_records import read_record
from opal_dp.release.period_input import period_input
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.fuzz.raw import tiny_day, write_day

WEEKS = [[(date(2016, 7, 25) + timedelta(days=7 * w + d)).isoformat() for d in range(7)] for w in range(2)]
CUT = {"od_height": 6, "max_trips_per_card_day": 4}
pytestmark = pytest.mark.slow


def run(instance, storage: OpalStorage, job: str, span, budget: dict, **more_tags: str):
    tags = {RANGE_START: span[0], RANGE_END: span[1], **more_tags}
    config = {"resources": {"storage": {"config": {"data_dir": storage.data_dir}}, "privacy_budget": {"config": budget}}}
    return defs().resolve_job_def(job).execute_in_process(instance=instance, tags=tags, run_config=config,
                                                          raise_on_error=False)


def failure(result) -> str:
    return "\n".join(e.step_failure_data.user_failure_data.description for e in result.all_events
                     if e.is_step_failure and e.step_failure_data.user_failure_data)


@pytest.fixture
def ingested(tmp_path):
    """One week ingested (not released) with od_height 6 and at most 4 trips a card-day."""
    storage = OpalStorage(data_dir=str(tmp_path))
    for i, day in enumerate(WEEKS[0]):
        write_day(storage.raw_dir, day, tiny_day(day, trips=700, seed=i))
    instance = dg.DagsterInstance.ephemeral()
    assert run(instance, storage, "private_stages", (WEEKS[0][0], WEEKS[0][-1]), CUT).success
    return instance, storage


@pytest.mark.parametrize(("job", "changed", "said"), [
    ("release_od", {"od_height": 4}, "sequences of height 6"),
    ("release", {"max_trips_per_card_day": 2}, "at most 4 trips a card-day"),
])
def test_a_release_on_other_settings_than_its_days_were_cut_with_is_refused_before_any_charge(ingested, job, changed,
                                                                                             said):
    instance, storage = ingested
    week = WEEKS[0][0]
    span = period_range([week]) if job == "release" else (week, week)
    result = run(instance, storage, job, span, {**CUT, **changed})
    assert not result.success
    message = failure(result)
    assert f"the week {WEEKS[0][0]}..{WEEKS[0][-1]} is not released (nothing charged)" in message
    lines = {line.strip().split(":")[0]: line for line in message.splitlines() if line.startswith("  ")}
    assert all("ingested with other settings (" in lines[day] and said in lines[day] for day in WEEKS[0])
    assert not (storage.private_dir / "ledger.sqlite").exists()  # nothing was charged: the ledger never opened
    assert run(instance, storage, job, span, CUT).success  # the settings the days were cut with release them


def test_a_range_run_with_its_first_partition_s_tags_is_refused_before_anything_is_charged(ingested):
    """A backfill of the release job from its Partitions page (Dagster 1.13's job backfill) tags each range run with
    its first (week, mode) as well, and Dagster then hands the steps that one partition: it would release bus alone
    and succeed. The run fails, naming the way that works, with the ledger never opened; the same range without the
    stray tags releases every mode."""
    instance, storage = ingested
    week = WEEKS[0][0]
    first = {"dagster/partition/mode": "bus", "dagster/partition/period": week}
    result = run(instance, storage, "release", period_range([week]), CUT, **first)
    assert not result.success
    assert (f"this run covers bus|{week} to train|{week}, but Dagster hands its steps bus|{week} only"
            in failure(result)) and "Release the weeks from the asset graph" in failure(result)
    assert not (storage.private_dir / "ledger.sqlite").exists()  # nothing was charged: the ledger never opened
    one = run(instance, storage, "release", (f"bus|{week}", f"bus|{week}"), CUT, **first)  # a range of one: as tagged
    assert one.success
    whole = run(instance, storage, "release", period_range([week]), CUT)
    assert whole.success and {str(e.partition) for e in whole.all_events if e.is_step_materialization} >= {
        f"{mode}|{week}" for mode in ("bus", "ferry", "light_rail", "train")}


def test_the_command_line_ingests_days_cut_with_other_settings_again_before_it_releases(ingested):
    instance, storage = ingested
    budget = {"od_height": 4, "max_trips_per_card_day": 2}
    runs = run_release(instance, data_dir=storage.root, budget=budget)
    assert not runs.refused and [len(r) for r in runs.runs.values()] == [1, 1, 1, 1]
    assert all(read_record(storage.private_dir, d).cut.bounds == (2, 1) for d in WEEKS[0])
    assert all(read_record(storage.private_dir, d).cut.od_height == 4 for d in WEEKS[0])
    charges = PrivacyBudget(**budget).ledger(storage).charges()
    assert {json.loads(c.bounds)["max_trips_per_card_day"] for c in charges if c.marginal.startswith("tap_")} == {2}


def test_a_raw_file_replaced_after_its_day_was_ingested_is_not_what_the_release_reads(ingested):
    """The race the review found: the release versioned its charge by the raw file as it was when the release ran,
    while its histograms came from days ingested earlier. It is versioned by the days' records now: the bytes read."""
    instance, storage = ingested
    swapped = WEEKS[0][3]
    before = read_record(storage.private_dir, swapped).input_version
    write_day(storage.raw_dir, swapped, tiny_day(swapped, trips=700, seed=77))  # between the day pass and the release
    key = PrivacyBudget().key(storage, "fingerprint")
    assert file_version(storage.raw_dir / f"trips_{swapped}.parquet", key) != before
    week = WEEKS[0][0]
    assert run(instance, storage, "release", period_range([week]), CUT).success
    assert run(instance, storage, "release_od", (week, week), CUT).success
    expected = period_input(storage.private_dir, week, PrivacyBudget(**CUT).day_cut(load_stops())).scope_versions(
        PrivacyUnit.CARD_PERIOD)
    assert {c.input_version for c in PrivacyBudget(**CUT).ledger(storage).charges()} == set(expected.values())


def test_a_correction_of_a_released_week_is_refused_by_name_and_another_week_goes_ahead(ingested):
    """Replacing a released day's file re-releases its whole week: a new charge, here past the week's cap, so it is
    refused before any noise, naming the week, the caps and the command to go on; a week delivered with it is
    released all the same, and the published files of the corrected week stay as they were."""
    instance, storage = ingested
    run_release(instance, data_dir=storage.root, budget=CUT)
    published = (storage.published_dir / "latest" / "dates").resolve()
    before = {p.name: (p / "time.csv").read_text() for p in published.iterdir()}
    write_day(storage.raw_dir, WEEKS[0][2], tiny_day(WEEKS[0][2], trips=700, seed=55))  # a corrected file
    for i, day in enumerate(WEEKS[1]):
        write_day(storage.raw_dir, day, tiny_day(day, trips=700, seed=20 + i))
    runs = run_release(instance, data_dir=storage.root, budget=CUT)
    (week, why), = runs.refused.items()
    assert week == f"{WEEKS[0][0]}..{WEEKS[0][-1]}" and f"card_period scope '{week}'" in why
    assert "against the cap" in why and "python -m opal_dp.cli ledger raise-cap --unit card_period" in why
    statement = json.loads((storage.published_dir / "latest" / "privacy.json").read_text())
    assert {k["date"] for k in partition_keys(statement)} == {d.replace("-", "") for w in WEEKS for d in w}
    assert {p.name: (p / "time.csv").read_text() for p in published.iterdir() if p.name in before} == before
