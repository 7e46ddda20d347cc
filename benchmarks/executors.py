"""Which executor and event log one machine should use: the release's four jobs over one week of raw days, each
launched as the UI and the daemon launch a run (a reconstructable job on a persistent instance, the executor its
definitions give, ``OPAL_DP_EXECUTOR``), from a fresh data folder and Dagster home whose event log is opal_dp's
(``defs.shared.event_log``, the default) or Dagster's own (``--event-log dagster``). One call is one release; time
it from outside:

    python -m opal_dp.simulate --scale 0.001 --days 7 --out RAW
    farm-bench -n 3 --timeout 1800 --vs 'env OPAL_DP_EXECUTOR=multiprocess python -m benchmarks.executors --raw RAW' \\
        -- env OPAL_DP_EXECUTOR=in_process python -m benchmarks.executors --raw RAW
    farm-bench -n 5 --timeout 1800 --vs 'python -m benchmarks.executors --raw RAW --event-log dagster' \\
        -- python -m benchmarks.executors --raw RAW

It prints the executor each job ran under and the event log's class, so that a wrong setting cannot pass for a figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from opal_dp.settings import DATA_DIR_ENV


def release_week(raw: Path, work: Path, event_log: str = "opal_dp") -> tuple[list[tuple[str, str]], str]:
    """The four jobs over the week of ``raw`` (its seven day files), in a data folder and a Dagster home under
    ``work`` with ``event_log``'s storage; (job, executor) per run and the event log's class. Raises if a run
    fails."""
    from opal_dp.defs.shared.instance import dagster_yaml, instance_settings

    data, home = work / "data", work / "home"
    shutil.copytree(raw, data / "raw")
    settings = instance_settings(home)
    if event_log == "dagster":
        del settings["event_log_storage"]
    home.mkdir(mode=0o700)
    (home / "dagster.yaml").write_text(dagster_yaml(settings))
    os.environ[DATA_DIR_ENV] = str(data)
    os.environ["DAGSTER_HOME"] = str(home)
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
        return ran, type(instance.event_log_storage).__name__


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.executors", description=__doc__.split("\n")[0])
    parser.add_argument("--raw", type=Path, required=True, help="folder of one week's raw day files")
    parser.add_argument("--event-log", choices=("opal_dp", "dagster"), default="opal_dp",
                        help="the event log storage: opal_dp's kept connections (default) or Dagster's own")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opal-executors-") as work:
        ran, storage = release_week(args.raw.resolve(), Path(work), args.event_log)
        for job, executor in ran:
            print(job, executor, flush=True)
        print("event log:", storage)


if __name__ == "__main__":
    main()
