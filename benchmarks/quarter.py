"""``python -m benchmarks.quarter``: a quarter (13 weeks, about 180 M trips) through the same pipeline, week by
week, as the agency runs it: one ``run_release`` per week (that week's private stages and releases, then the
roll-up that republishes every date so far), in one process, on one persistent Dagster instance and one ledger;
then, with nothing else running, the floor of each week's files (``benchmarks.floor``).

The parent measures each week's wall time and samples the RSS of the process and its per-day workers
(``benchmarks.memory``); the child writes each week's start and end, so each week gets its own peak. Bounded
memory means the per-week peak does not grow with the weeks already processed. Raw files: ``python -m
opal_dp.simulate --days 91`` (the benchmark's fortnight is its first 14 days).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path

from benchmarks.floor import run_floor
from benchmarks.memory import tree_rss_bytes
from opal_dp import settings
from opal_dp.prep.ingest import raw_files

REPO = Path(__file__).resolve().parent.parent
WEEK = 7


def weeks_of(days: list[str], count: int) -> list[list[str]]:
    """The first ``count`` runs of 7 consecutive service dates; a missing date is an error, not a shorter week."""
    start = date.fromisoformat(days[0])
    weeks = [[(start + timedelta(days=WEEK * w + d)).isoformat() for d in range(WEEK)] for w in range(count)]
    missing = sorted({d for week in weeks for d in week} - set(days))
    if missing:
        raise SystemExit(f"raw files missing for {len(missing)} dates, first {missing[0]}")
    return weeks


def run_quarter(raw_dir: Path, out: Path, weeks: int) -> dict:
    data = out / "data"
    shutil.rmtree(out, ignore_errors=True)
    data.mkdir(parents=True)
    (data / "raw").symlink_to(raw_dir.resolve(), target_is_directory=True)
    progress = out / "weeks.jsonl"
    samples: list[tuple[float, int]] = []
    env = {**os.environ, settings.DATA_DIR_ENV: str(data)}
    with open(out / "pipeline.log", "wb") as log:
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.quarter", "--child", str(data), str(progress),
                                  str(weeks)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                samples.append((time.time(), tree_rss_bytes(child.pid)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        stop.set()
        sampler.join()
    shutil.rmtree(data / "private", ignore_errors=True)
    done = [json.loads(line) for line in progress.read_text().splitlines()] if progress.exists() else []
    for week in done:
        inside = [rss for t, rss in samples if week["started"] <= t <= week["ended"]]
        week["peak_rss_bytes"] = max(inside, default=0)
    return {"weeks": done, "exit_code": os.waitstatus_to_exitcode(status),
            "peak_rss_bytes": max(max((rss for _, rss in samples), default=0), usage.ru_maxrss * 1024),
            "peak_rss_single_process_bytes": usage.ru_maxrss * 1024,
            "trips": sum(w["trips"] for w in done), "wall_s": sum(w["wall_s"] for w in done)}


def floor_by_week(raw_dir: Path, weeks: int) -> list[float]:
    """The floor (``benchmarks.floor``: read, bin, count, noise; nothing written) of each week's raw files."""
    files = raw_files(raw_dir)
    return [run_floor([files[day] for day in week]).seconds for week in weeks_of(sorted(files), weeks)]


def _child(data: Path, progress: Path, weeks: int) -> None:
    """Each week in turn: ``run_release`` over its dates on a persistent instance; one JSON line per week."""
    import dagster as dg

    from opal_dp.cli import run_release

    days = sorted(raw_files(data / "raw"))
    home = data.parent / "dagster_home"
    home.mkdir(exist_ok=True)
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        for number, week in enumerate(weeks_of(days, weeks), start=1):
            started = time.time()
            results = run_release(instance, dates=week)
            ended = time.time()
            records = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("ingested_trips"), asset_partitions=week), limit=len(week)).records
            trips = sum(r.asset_materialization.metadata["rows_accepted"].value for r in records)
            with open(progress, "a") as handle:
                handle.write(json.dumps({"week": number, "first": week[0], "last": week[-1], "trips": trips,
                                         "runs": sum(len(r) for r in results.values()), "started": started,
                                         "ended": ended, "wall_s": ended - started}) + "\n")
            print(f"week {number} ({week[0]}..{week[-1]}): {ended - started:.1f} s, {trips:,} trips", flush=True)


def _report(result: dict) -> str:
    lines = ["| week | dates | trips | wall s | s / M trips | floor s | wall / floor | peak RSS GB (process + workers) |",
             "|---|---|---|---|---|---|---|---|"]
    for w in result["weeks"]:
        lines.append(f"| {w['week']} | {w['first']}..{w['last']} | {w['trips']:,} | {w['wall_s']:.1f} | "
                     f"{w['wall_s'] / (w['trips'] / 1e6):.2f} | {w['floor_s']:.2f} | {w['wall_s'] / w['floor_s']:.1f}x | "
                     f"{w['peak_rss_bytes'] / 1e9:.2f} |")
    lines.append(f"\n{result['trips']:,} trips in {len(result['weeks'])} weeks, {result['wall_s']:.0f} s in all; "
                 f"peak RSS {result['peak_rss_bytes'] / 1e9:.2f} GB (largest single process "
                 f"{result['peak_rss_single_process_bytes'] / 1e9:.2f} GB); exit code {result['exit_code']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(Path(argv[1]), Path(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quarter", description=__doc__.split("\n\n")[0])
    parser.add_argument("--raw", type=Path, required=True, help="folder of daily raw files (at least 13 weeks)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "quarter")
    parser.add_argument("--weeks", type=int, default=13)
    args = parser.parse_args(argv)
    result = run_quarter(args.raw, args.out, args.weeks)
    for week, floor in zip(result["weeks"], floor_by_week(args.raw, args.weeks)):  # after the pipeline: no contention
        week["floor_s"] = floor
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(_report(result))
    return 0 if result["exit_code"] == 0 and len(result["weeks"]) == args.weeks else 1


if __name__ == "__main__":
    sys.exit(main())
