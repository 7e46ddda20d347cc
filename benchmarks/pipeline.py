"""One repeat of the real pipeline: ``opal_dp.cli.run_release`` (the documented backfill) in a fresh
subprocess, on an ephemeral DagsterInstance and a fresh ``OPAL_DP_DATA_DIR`` whose ``raw/`` links to
the cached fortnight (a reused data directory would let the ledger return the stored release).

The parent measures the subprocess's wall time, its CPU time and largest single process (``os.wait4``,
not mixed with any other child), and the peak of the RSS summed over the subprocess and its per-day worker
processes (``benchmarks.memory``). The child (``python -m benchmarks.pipeline DATA_DIR RESULT_JSON``)
times ``run_release`` and reads each run's and each step's start and end from the runs' event logs: the per-job
seconds, and with its own time stamps the repeat's profile (``benchmarks.profile``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

# In the child: its first line after the standard library (benchmarks.profile: the end of interpreter start).
MODULE_STARTED = time.time()

from benchmarks import profile
from benchmarks.dagster_floor import dagster_floor_run
from benchmarks.memory import TreeRssSampler
from opal_dp import settings
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.ingest import scan_raw_files
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.periods import missing_week_days
from opal_dp.release.options import Design
from opal_dp.release.settings import DEFAULT_DELTA
from opal_dp.release.published_folder import LATEST

REPO = Path(__file__).resolve().parent.parent  # where ``python -m benchmarks.pipeline`` resolves
STORAGE = OpalStorage.resolved()  # the child's data directory (set by the parent)


def run_pipeline(
    raw_dir: Path, run_dir: Path, memory_limit_bytes: int, unit: str = "trip", design: str = "sbh",
    dagster_floor: bool = False,
) -> dict:
    """Run the pipeline once over ``raw_dir`` under privacy ``unit`` and release ``design`` (and, with
    ``dagster_floor``, its run plan through the Dagster-only floor); private intermediates are removed afterwards, the
    published release is kept under ``run_dir/data/published``. The child's address space is capped
    at ``memory_limit_bytes`` so that a runaway step fails the repeat (MemoryError) instead of
    calling the kernel's OOM killer onto a shared machine."""
    data = run_dir / "data"
    shutil.rmtree(run_dir, ignore_errors=True)
    data.mkdir(parents=True)
    (data / "raw").symlink_to(raw_dir.resolve(), target_is_directory=True)
    result_file = run_dir / "child.json"
    log = run_dir / "pipeline.log"
    env = {**os.environ, settings.DATA_DIR_ENV: str(data)}
    started, spawned = time.perf_counter(), time.time()
    with open(log, "wb") as out:  # Dagster's event log: kept beside the result, not printed
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.pipeline", str(data), str(result_file), unit,
                                  design, "dagster_floor" if dagster_floor else ""],
                                 stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes,) * 2))
        with TreeRssSampler(child.pid) as sampler:
            _, status, usage = os.wait4(child.pid, 0)
    wall, exited = time.perf_counter() - started, time.time()
    child.returncode = os.waitstatus_to_exitcode(status)
    shutil.rmtree(data / "private", ignore_errors=True)  # GBs of microdata at full scale
    if not result_file.exists():  # killed or crashed before it could report
        raise RuntimeError(f"pipeline subprocess died with exit code {child.returncode} "
                           f"(peak RSS {usage.ru_maxrss / 2**20:.1f} GiB); see {log}")
    measured = json.loads(result_file.read_text())
    if measured["error"]:
        measured["error"] += f" (peak RSS {usage.ru_maxrss / 2**20:.1f} GiB; see {log})"
    plan = measured.pop("plan")
    floor = dagster_floor_run(plan, run_dir, env) if plan else None
    return {
        "wall_s": wall,
        # the process and its per-day workers together; the largest single process as wait4 reports it (KiB)
        "peak_rss_bytes": max(sampler.peak_bytes, usage.ru_maxrss * 1024),
        "peak_rss_single_process_bytes": usage.ru_maxrss * 1024,
        "cpu_user_s": usage.ru_utime,
        "cpu_system_s": usage.ru_stime,
        "startup_s": wall - measured["run_release_s"],
        "profile": profile.phases({**measured.pop("stamps"), "spawned": spawned, "exited": exited},
                                  measured.pop("intervals")),
        **measured,
        "dagster_floor": floor,
        "published_dir": str(data / "published" / LATEST),
    }


def _measure_release(unit: str = "trip", design: str = "sbh", dagster_floor: str = "") -> dict:
    """In the child: run the release under ``unit`` and ``design`` and collect run/step durations from the instance, also
    those of the runs that completed before a failed one (``error`` then says which); with ``dagster_floor``
    (``"dagster_floor"``), also its run plan, for the Dagster-only floor (``benchmarks.dagster_floor``)."""
    import dagster as dg

    from benchmarks.dagster_floor import release_plan

    from opal_dp.cli import run_release
    from opal_dp.release.settings import PrivacySettings
    from benchmarks.quarter import THROUGHPUT_PERSON_CAP

    stamps = {"module_started": MODULE_STARTED, "imported": time.time()}
    budget = {"privacy_unit": unit} | ({"release_design": design} if Design.parse(design) is not Design.SBH else {})
    budget |= THROUGHPUT_PERSON_CAP
    if unit != "trip":  # the card units at the 2016 budgets: their share of a cap that never binds would overflow
        budget |= {"epsilon": {m.name: m.default_epsilon for m in MARGINALS},
                   "delta": {m.name: DEFAULT_DELTA for m in MARGINALS}}
    if budget["privacy_unit"] == PrivacySettings().privacy_unit and Design.parse(design) is Design.SBH:
        budget = {}  # the default release, as `make release` runs it: each week at its share of the person cap
    with dg.DagsterInstance.ephemeral() as instance:
        started = time.perf_counter()
        stamps["release_started"] = time.time()
        try:
            # a dataset of part of a week (the smoke test's day) releases it without the week's other days
            days = scan_raw_files(STORAGE.raw_dir)[0]
            released = run_release(instance, budget=budget, without=missing_week_days(days))
            results = released.runs
            error = "; ".join(f"week {week} refused: {why}" for week, why in released.refused.items()) or None
        except SystemExit as failed:  # run_release's report of a failed run
            results, error = {}, str(failed)
        total = time.perf_counter() - started
        stamps["release_ended"] = time.time()
        intervals = profile.run_intervals(instance, [run.run_id for run in instance.get_runs()])
        checks = [e for r in results.get("release", []) for e in r.get_asset_check_evaluations()]
        rows_accepted = _rows_accepted(instance)
        plan = release_plan(instance) if dagster_floor and not error else None
        events = sum(len(instance.all_logs(run.run_id)) for run in instance.get_runs()) if plan else None
    published = STORAGE.published_dir / LATEST
    return {
        "error": error,
        "run_release_s": total,
        "stamps": stamps,
        "intervals": intervals,
        "runs": profile.per_job(intervals),
        "rows_accepted": rows_accepted,
        "blocking_checks_passed": all(e.passed for e in checks if e.check_name != "plausible_totals") and bool(checks),
        "ledger": _ledger_summary(budget),
        "plan": plan,
        "events": events,
        "published_files": {p.name: _lines(p) - 1 for p in sorted(published.iterdir()) if p.suffix == ".csv"}
        if published.exists() else {},
    }


def _rows_accepted(instance) -> int | None:
    """Trips that passed ingest, summed over the days' ingest metadata (the floor's rows should match)."""
    import dagster as dg

    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("ingested_trips")),
                                              limit=10_000, ascending=True).records
    latest = {r.partition_key: r.asset_materialization.metadata["rows_accepted"].value for r in records}
    return sum(latest.values()) if latest else None


def _ledger_summary(budget: dict) -> dict:
    """Draws and charges in the ledger: one draw per (partition, marginal) and one charge per (scope,
    marginal) is what a clean release leaves; and what one unit pays per scope at most."""
    from opal_dp.release.settings import PrivacySettings

    if not (STORAGE.private_dir / "ledger.sqlite").exists():
        return {}
    ledger = PrivacySettings(**budget).ledger(STORAGE)
    draws, charges = ledger.draws(), {c.id: c for c in ledger.charges()}
    pairs = [(d.part, charges[d.charge_id].marginal) for d in draws]
    scopes = ledger.summary()
    return {"draws": len(pairs), "distinct_partition_marginal": len(set(pairs)), "charges": len(charges),
            "scopes": len(scopes), "complete": sum(d.status == "complete" for d in draws),
            "max_epsilon_per_unit": max((s.guarantee.epsilon for s in scopes), default=0.0),
            "max_delta_per_unit": max((s.guarantee.delta for s in scopes), default=0.0)}


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


if __name__ == "__main__":
    data_dir, result_path = map(Path, sys.argv[1:3])
    if STORAGE.data_dir != str(data_dir.absolute()):
        raise SystemExit(f"{settings.DATA_DIR_ENV} must be {data_dir}, got {STORAGE.data_dir}")
    measured = _measure_release(*sys.argv[3:6])
    result_path.write_text(json.dumps(measured, indent=2) + "\n")
    sys.exit(1 if measured["error"] else 0)
