"""``python -m opal_dp.cli release``: run the whole pipeline over every raw day, in three runs.

One run per partitioning scheme (daily private stages, (date, mode) release, roll-up), each over the
full range of partitions thanks to single-run backfill policies: no process per partition.
"""

from __future__ import annotations

import argparse

import dagster as dg

from opal_dp import settings
from opal_dp.defs.partitions import RANGE_END, RANGE_START, contiguous_ranges, date_mode, service_dates
from opal_dp.prep.ingest import raw_files


def run_release(
    instance: dg.DagsterInstance, dates: list[str] | None = None
) -> dict[str, list[dg.ExecuteInProcessResult]]:
    """Register the service dates (default: of every raw file) and materialise everything over them.

    One run per job and contiguous range of the requested partitions (normally exactly one), so a
    day that was not asked for is never touched. Returns the successful runs by job name.
    """
    from opal_dp.definitions import defs as load_defs

    defs = load_defs()
    days = sorted(dates or raw_files(settings.raw_dir()))
    if not days:
        raise SystemExit(f"no raw files in {settings.raw_dir()}")
    instance.add_dynamic_partitions(
        service_dates.name, [d for d in days if not instance.has_dynamic_partition(service_dates.name, d)]
    )
    all_days = service_dates.get_partition_keys(dynamic_partitions_store=instance)
    all_keys = date_mode.get_partition_keys(dynamic_partitions_store=instance)
    wanted_keys = [k for k in all_keys if k.keys_by_dimension["date"] in days]
    plan = [
        ("private_stages", contiguous_ranges(all_days, days)),
        ("release", contiguous_ranges(all_keys, wanted_keys)),
        ("rollup", [None]),
    ]
    results: dict[str, list[dg.ExecuteInProcessResult]] = {}
    for job, ranges in plan:
        for span in ranges:
            tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
            result = defs.resolve_job_def(job).execute_in_process(instance=instance, tags=tags, raise_on_error=False)
            if not result.success:
                errors = [e.step_failure_data.error.message.strip() for e in result.all_events if e.is_step_failure]
                raise SystemExit(f"run {result.run_id} of job {job} failed:\n" + "\n".join(errors))
            results.setdefault(job, []).append(result)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m opal_dp.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    release = sub.add_parser("release", help="prepare the sample if needed, then run the pipeline end to end")
    release.add_argument("--no-sample", action="store_true", help="do not generate the bundled sample")
    args = parser.parse_args(argv)
    if args.command == "release":
        if not args.no_sample:
            from opal_dp.synth.sample import ensure_sample

            ensure_sample(settings.raw_dir())
        with dg.DagsterInstance.get() as instance:
            run_release(instance)
        latest = settings.published_dir() / "latest"
        print(f"release published: {latest} -> {latest.resolve().name}")
        print(f"files: {', '.join(sorted(p.name for p in latest.iterdir()))}")


if __name__ == "__main__":
    main()
