"""The benchmark's profile (``benchmarks.profile``): step seconds from a run's event log, and phases that add up to
the end to end, so the next bottleneck is read from a table that accounts for every second."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from benchmarks.profile import PHASES, _covered, markdown, per_job, phases, run_intervals


def test_overlapping_steps_are_counted_once():
    assert _covered([(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (1.5, 2.5)]) == 4.0
    assert _covered([]) == 0.0


@dg.op
def slow_source() -> int:
    time.sleep(0.6)  # far above the sink's 0.1 s plus Dagster's own time on a loaded machine
    return 1


@dg.op
def slow_sink(value: int) -> int:
    time.sleep(0.1)
    return value


@dg.job
def two_steps():
    slow_sink(slow_source())


def test_the_phases_of_a_run_add_up_to_the_end_to_end():
    with dg.DagsterInstance.ephemeral() as instance:
        release_started = time.time()
        for _ in range(2):
            assert two_steps.execute_in_process(instance=instance).success
        release_ended = time.time()
        runs = run_intervals(instance, [run.run_id for run in instance.get_runs()])

    assert [run["job"] for run in runs] == ["two_steps", "two_steps"]
    assert runs[0]["end"] <= runs[1]["start"]
    assert [key for key, _, _ in runs[0]["steps"]] == ["slow_source", "slow_sink"]
    stamps = {"spawned": release_started - 3, "module_started": release_started - 2.5, "imported": release_started - 1,
              "release_started": release_started, "release_ended": release_ended, "exited": release_ended + 0.5}
    profile = phases(stamps, runs)

    (job,) = per_job(runs).values()
    assert job["runs"] == 2 and job["steps"] == pytest.approx(profile["steps"])
    assert job["wall_s"] == pytest.approx(sum(run["end"] - run["start"] for run in runs))
    assert profile["runs"] == 2
    assert profile["events"]["RUN_START"] == 2 and profile["events"]["STEP_SUCCESS"] == 4
    assert sum(run["events"]["STEP_START"] for run in runs) == 4
    assert list(profile["steps"]) == ["slow_source", "slow_sink"]  # slowest first, summed over both runs
    assert profile["steps"]["slow_source"] >= 1.2 and profile["steps"]["slow_sink"] >= 0.2
    assert profile["steps_s"] == pytest.approx(sum(profile["steps"].values()))  # sequential steps: no overlap
    assert (profile["interpreter_start_s"], profile["imports_s"], profile["before_release_s"],
            profile["after_release_s"]) == pytest.approx((0.5, 1.5, 1.0, 0.5))
    assert profile["dagster_in_runs_outside_steps_s"] > 0 and profile["release_outside_runs_s"] > 0
    assert sum(profile[key] for key, _ in PHASES) == pytest.approx(profile["end_to_end_s"])

    table = "\n".join(markdown(profile, floor_s=0.25))
    assert "step `slow_source`" in table and "| floor (same files, same run) | 0.25 |" in table
    assert f"| **end to end** (2 runs) | {profile['end_to_end_s']:.2f} | 100.0% |" in table
    assert f"Dagster events: {sum(profile['events'].values()):,} (" in table and "STEP_SUCCESS 4" in table
