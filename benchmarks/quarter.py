"""``python -m benchmarks.quarter``: a quarter (13 weeks, about 180 M trips), or a year (``--weeks 52``), through the
same pipeline, week by week, as the agency runs it: one ``run_release`` per week (that week's private stages and
releases, then the roll-up, which publishes that week's dates and rebuilds the statement and page), each week in a
process of its own as in production, on one persistent Dagster instance and one ledger; then, with nothing else
running, the floor of each week's files (``benchmarks.floor``).

The parent measures each week's wall time and samples the RSS of the process alone and with its per-day workers
(``benchmarks.memory``); the child writes each week's start and end, the time of each job's runs and of the
publish step (``published_release``), the bytes written under ``published/`` that week (new files whole, files
appended to by what they grew, rewritten files whole) and the published folder's size. Flat cost means none of
them grows with the weeks already published. Raw files: ``--raw`` (``python -m opal_dp.simulate --days 91``), or
``--scale``: generated for the weeks asked, at that scale (1.0: about 14 M trips a week), into ``<out>/raw``.
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
from opal_dp.simulate.trips import generate_days

FIRST_DAY, SEED = date(2016, 7, 25), 20160725
PUBLISH_STEP = "published_release"
PAGE = os.sysconf("SC_PAGE_SIZE")
THROUGHPUT_PERSON_CAP = {"person_cap_epsilon": 1e6, "person_cap_delta": 0.5}
"""A person cap that never binds (``benchmarks.pipeline``). The weekly runs here use the default release
instead: each week at its share of the default person cap, which a year of weekly releases fits by construction
(a cap of 1e6 makes that share's noise calibration overflow)."""

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


def generate_raw(out: Path, weeks: int, scale: float) -> Path:
    """``weeks`` weeks of synthetic raw files from 2016-07-25 at ``scale``, one day at a time."""
    raw = out / "raw"
    days = [FIRST_DAY + timedelta(days=n) for n in range(WEEK * weeks)]
    for _ in generate_days(days, raw, seed=SEED, scale=scale):
        pass
    return raw


def process_rss_bytes(pid: int) -> int:
    """The resident set size of ``pid`` alone (0 once it has exited)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def run_quarter(raw_dir: Path, out: Path, weeks: int) -> dict:
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(out / "dagster_home", ignore_errors=True)
    data.mkdir(parents=True)
    (data / "raw").symlink_to(raw_dir.resolve(), target_is_directory=True)
    progress = out / "weeks.jsonl"
    progress.unlink(missing_ok=True)
    samples: list[tuple[float, int, int]] = []
    env = {**os.environ, settings.DATA_DIR_ENV: str(data)}
    status, largest = 0, 0
    with open(out / "pipeline.log", "wb") as log:
        for number in range(1, weeks + 1):
            child = subprocess.Popen([sys.executable, "-m", "benchmarks.quarter", "--child", str(data), str(progress),
                                      str(weeks), str(number)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
            stop = threading.Event()

            def sample(child=child, stop=stop) -> None:
                while not stop.wait(0.1):
                    samples.append((time.time(), tree_rss_bytes(child.pid), process_rss_bytes(child.pid)))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            _, status, usage = os.wait4(child.pid, 0)
            stop.set()
            sampler.join()
            largest = max(largest, usage.ru_maxrss * 1024)
            if status:
                break
    shutil.rmtree(data / "private", ignore_errors=True)
    done = [json.loads(line) for line in progress.read_text().splitlines()] if progress.exists() else []
    for week in done:
        inside = [(tree, own) for t, tree, own in samples if week["started"] <= t <= week["ended"]]
        week["peak_rss_bytes"] = max((tree for tree, _ in inside), default=0)
        week["peak_rss_process_bytes"] = max((own for _, own in inside), default=0)
    return {"weeks": done, "exit_code": os.waitstatus_to_exitcode(status),
            "peak_rss_bytes": max(max((rss for _, rss, _ in samples), default=0), largest),
            "peak_rss_single_process_bytes": largest,
            "trips": sum(w["trips"] for w in done), "wall_s": sum(w["wall_s"] for w in done)}


def floor_by_week(raw_dir: Path, weeks: int) -> list[float]:
    """The floor (``benchmarks.floor``: read, bin, count, noise; nothing written) of each week's raw files."""
    files = raw_files(raw_dir)
    return [run_floor([files[day] for day in week]).seconds for week in weeks_of(sorted(files), weeks)]


def _child(data: Path, progress: Path, weeks: int, number: int) -> None:
    """Week ``number`` of ``weeks``: ``run_release`` over its dates on the persistent instance; one JSON line. A
    process of its own each week, as the agency's weekly run is: nothing is warm from the weeks before."""
    import dagster as dg

    from opal_dp.cli import run_release

    days = sorted(raw_files(data / "raw"))
    home = data.parent / "dagster_home"
    home.mkdir(exist_ok=True)
    published = data / "published"
    week = weeks_of(days, weeks)[number - 1]
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        files = published_files(published)
        started = time.time()
        results = run_release(instance, dates=week).runs  # the default: a year of weeks fits its person cap
        ended = time.time()
        after = published_files(published)
        records = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("ingested_trips"), asset_partitions=week), limit=len(week)).records
        trips = sum(r.asset_materialization.metadata["rows_accepted"].value for r in records)
        with open(progress, "a") as handle:
            handle.write(json.dumps({"week": number, "first": week[0], "last": week[-1], "trips": trips,
                                     "runs": sum(len(r) for r in results.values()), "started": started,
                                     "ended": ended, "wall_s": ended - started,
                                     "job_s": {job: sum(_run_seconds(instance, r.run_id) for r in runs)
                                               for job, runs in results.items()},
                                     "publish_s": sum(_step_seconds(instance, r.run_id, PUBLISH_STEP)
                                                      for r in results.get("rollup", [])),
                                     "bytes_written": bytes_written(files, after),
                                     "published_bytes": sum(size for size, _, _ in after.values())}) + "\n")
        print(f"week {number} ({week[0]}..{week[-1]}): {ended - started:.1f} s, {trips:,} trips", flush=True)


def published_files(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``root`` -> (bytes, inode, mtime in ns)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_ino, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def bytes_written(before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]]) -> int:
    """Bytes a week wrote under published/: new or replaced files whole, files appended to by what they grew."""
    total = 0
    for name, (size, inode, mtime) in after.items():
        old = before.get(name)
        if old is None or old[1] != inode or (old[2] != mtime and size < old[0]):
            total += size
        elif old[2] != mtime:
            total += size - old[0]
    return total


def _run_seconds(instance, run_id: str) -> float:
    stats = instance.get_run_stats(run_id)
    return (stats.end_time or 0.0) - (stats.start_time or 0.0)


def _step_seconds(instance, run_id: str, step: str) -> float:
    return sum((s.end_time or 0.0) - (s.start_time or 0.0) for s in instance.get_run_step_stats(run_id, [step]))


def _report(result: dict) -> str:
    lines = ["| week | dates | trips | wall s | private_stages s | release s | rollup s | publish s | floor s | "
             "peak RSS GB process | peak RSS GB process + workers | MB written | published MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in result["weeks"]:
        jobs = w["job_s"]
        lines.append(f"| {w['week']} | {w['first']}..{w['last']} | {w['trips']:,} | {w['wall_s']:.1f} | "
                     f"{jobs.get('private_stages', 0):.1f} | {jobs.get('release', 0):.1f} | {jobs.get('rollup', 0):.1f} | "
                     f"{w['publish_s']:.2f} | {w['floor_s']:.2f} | {w['peak_rss_process_bytes'] / 1e9:.2f} | "
                     f"{w['peak_rss_bytes'] / 1e9:.2f} | {w['bytes_written'] / 1e6:.2f} | {w['published_bytes'] / 1e6:.1f} |")
    if len(result["weeks"]) >= 2:
        second, last = result["weeks"][1], result["weeks"][-1]
        ratios = {what: last[key] / second[key] if second[key] else float("nan") for what, key in (
            ("publish step", "publish_s"), ("weekly run", "wall_s"), ("peak RSS", "peak_rss_bytes"),
            ("bytes written", "bytes_written"))}
        lines.append(f"\nweek {last['week']} / week 2: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    lines.append(f"\n{result['trips']:,} trips in {len(result['weeks'])} weeks, {result['wall_s']:.0f} s in all; "
                 f"peak RSS {result['peak_rss_bytes'] / 1e9:.2f} GB (largest single process "
                 f"{result['peak_rss_single_process_bytes'] / 1e9:.2f} GB); exit code {result['exit_code']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(Path(argv[1]), Path(argv[2]), int(argv[3]), int(argv[4]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quarter", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--raw", type=Path, help="folder of daily raw files (at least --weeks weeks from its first)")
    source.add_argument("--scale", type=float, help="generate the weeks' raw files at this scale into <out>/raw "
                                                    "(1.0: about 14 M trips a week)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "quarter")
    parser.add_argument("--weeks", type=int, default=13, help="weekly runs (default %(default)s; 52: a year)")
    args = parser.parse_args(argv)
    raw = args.raw or generate_raw(args.out, args.weeks, args.scale)
    result = run_quarter(raw, args.out, args.weeks)
    result["scale"] = args.scale
    for week, floor in zip(result["weeks"], floor_by_week(raw, args.weeks)):  # after the pipeline: no contention
        week["floor_s"] = floor
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(_report(result))
    return 0 if result["exit_code"] == 0 and len(result["weeks"]) == args.weeks else 1


if __name__ == "__main__":
    sys.exit(main())
