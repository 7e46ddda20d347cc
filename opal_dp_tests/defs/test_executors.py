"""Runs launched as the UI launches them finish: each job of the release over several partitions with Dagster's
multiprocess executor (``OPAL_DP_EXECUTOR=multiprocess``; one machine's default is in-process), every step in a
process of its own. A step that starts the per-day process pool
(``opal_dp.parallel``) must shut it down as its process exits: ``multiprocessing`` joins a process's children before
the pool's own exit hook runs, so without that the step's process waited on its idle workers forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from opal_dp.cli import ensure_dagster_home
from opal_dp.settings import DATA_DIR_ENV, WORKERS_ENV
from opal_dp_tests.browser.dagster_dev import REPO_ROOT
from opal_dp_tests.conftest import other_days
from opal_dp_tests.fuzz.raw import tiny_day, write_day

DAYS = ["2016-07-25", "2016-07-26"]  # their week is released without its other days (the tag the CLI sets)
RUNS = textwrap.dedent("""
    import sys
    import dagster as dg
    from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, period_range
    from opal_dp.defs.shared.tags import WITHOUT_TAG
    from opal_dp.runs import job_by_name

    if __name__ == "__main__":
        week, without = sys.argv[1], sys.argv[3]
        plan = [("private_stages", (week, sys.argv[2])), ("release", period_range([week])), ("release_od", (week, week)),
                ("rollup", None)]
        with dg.DagsterInstance.get() as instance:
            for job, span in plan:
                assert job_by_name(job).executor_def.name == "multiprocess"
                tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
                if job in ("release", "release_od"):
                    tags[WITHOUT_TAG] = without
                result = dg.execute_job(dg.build_reconstructable_job("opal_dp.runs", "job_by_name", (job,)),
                                        instance=instance, tags=tags)
                print(job, result.success, flush=True)
                assert result.success, job
""")


@pytest.mark.slow(130)
def test_each_job_of_the_release_finishes_under_the_multiprocess_executor(tmp_path):
    data, home = tmp_path / "data", ensure_dagster_home(tmp_path / "home")
    for i, day in enumerate(DAYS):
        write_day(data / "raw", day, tiny_day(day, trips=600, seed=i))
    script = tmp_path / "runs.py"
    script.write_text(RUNS)
    env = {**os.environ, "DAGSTER_HOME": str(home), DATA_DIR_ENV: str(data), WORKERS_ENV: "2",
           "OPAL_DP_EXECUTOR": "multiprocess"}
    try:
        done = subprocess.run([sys.executable, str(script), DAYS[0], DAYS[-1], ",".join(other_days(DAYS))],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"a run did not finish: {hung.stdout}") from None
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.split() == ["private_stages", "True", "release", "True", "release_od", "True", "rollup", "True"]
    assert (data / "published" / "latest" / "privacy.json").exists()
