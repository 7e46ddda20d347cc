"""Which executor one machine should use: the release's four jobs over one week of raw days, each launched as the UI
and the daemon launch a run (a reconstructable job on a persistent instance, the executor its definitions give,
``OPAL_DP_EXECUTOR``), from a fresh data folder and Dagster home. One call is one release; time it from outside:

    python -m opal_dp.simulate --scale 0.001 --days 7 --out RAW
    farm-bench -n 3 --timeout 1800 -- env OPAL_DP_EXECUTOR=in_process python -m benchmarks.executors --raw RAW \\
        --vs 'env OPAL_DP_EXECUTOR=multiprocess python -m benchmarks.executors --raw RAW'

It prints the executor each job ran under, so that a wrong setting cannot pass for a figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from opal_dp.settings import DATA_DIR_ENV


def release_week(raw: Path, work: Path) -> list[tuple[str, str]]:
    """The four jobs over the week of ``raw`` (its seven day files), in a data folder and a Dagster home under
    ``work``; (job, executor) per run. Raises if a run fails."""
    from opal_dp.cli import ensure_dagster_home

    data = work / "data"
    shutil.copytree(raw, data / "raw")
    os.environ[DATA_DIR_ENV] = str(data)
    os.environ["DAGSTER_HOME"] = str(ensure_dagster_home(work / "home"))
    import dagster as dg

    from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, period_range
    from opal_dp.runs import job_by_name

    days = sorted(p.name.split("_")[1].split(".")[0] for p in raw.glob("trips_*"))
    plan = [("private_stages", (days[0], days[-1])), ("release", period_range([days[0]])),
            ("release_od", (days[0], days[0])), ("rollup", None)]
    ran = []
    with dg.DagsterInstance.get() as instance:
        for job, span in plan:
            tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
            result = dg.execute_job(dg.build_reconstructable_job("opal_dp.runs", "job_by_name", (job,)),
                                    instance=instance, tags=tags)
            if not result.success:
                raise SystemExit(f"{job} failed")
            ran.append((job, job_by_name(job).executor_def.name))
    return ran


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.executors", description=__doc__.split("\n")[0])
    parser.add_argument("--raw", type=Path, required=True, help="folder of one week's raw day files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opal-executors-") as work:
        for job, executor in release_week(args.raw.resolve(), Path(work)):
            print(job, executor, flush=True)


if __name__ == "__main__":
    main()
