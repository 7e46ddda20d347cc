"""``python -m opal_dp.cli``: release the raw days end to end (``release``), administer the privacy ledger
(``ledger show``, ``ledger raise-cap``), or prepare a Dagster home (``dagster-home``).

``release`` makes the runs of ``opal_dp.defs.shared.jobs.run_plan``, the same runs a UI backfill of every asset makes:
one for the daily private stages, one per mode for the (date, mode) release, one for the roll-up. It prints a
progress bar per run and a short summary; the full event log goes to ``private/logs/`` (``--verbose`` shows it).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import warnings
from collections import Counter
from collections.abc import Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from opal_dp import settings
from opal_dp.core import PrivacyUnit
from opal_dp.defs.shared.jobs import run_plan
from opal_dp.defs.shared.logs import STEP_LISTENERS
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, contiguous_ranges, service_dates
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_backends import open_backend
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.locations import DataLocation, normalise_data_dir
from opal_dp.permissions import ExposedDataError, check_folders, make_dirs, private_umask, reserve_private
from opal_dp.prep.ingest import raw_files
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.publish import LATEST, latest_release

BUDGET = "privacy_budget"
DAGSTER_YAML = """\
# Written by opal_dp: no telemetry (a privacy product phones nobody), and one run at a time on the ledger.
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""
STAGE_NAMES = {"private_stages": "private stages", "release": "release", "rollup": "roll-up", "synthetic": "synthetic"}


def run_release(
    instance: dg.DagsterInstance,
    dates: list[str] | None = None,
    budget: Mapping[str, object] | None = None,
    data_dir: str | Path | None = None,
    log_file: Path | None = None,
    progress: bool = False,
    synthetic: bool = False,
    distributed: bool = False,
) -> dict[str, list[dg.ExecuteInProcessResult | dg.JobExecutionResult]]:
    """Register the service dates (default: of every raw file) and materialise everything over them.

    ``budget``: configuration of the ``privacy_budget`` resource for every run (privacy unit, bounds, ...);
    ``data_dir``: the data directory (default: ``$OPAL_DP_DATA_DIR`` or ``./data``, read once); ``log_file``:
    where the runs' events go instead of the console; ``progress``: a progress bar per run on stderr.
    ``synthetic``: then also the ``synthetic`` job (synthetic card-day trips, ``defs.synthetic``).
    ``distributed``: run each job with its configured executor (the Celery workers of ``deploy/``, on a
    persistent ``instance``) instead of in this process.
    The runs of ``jobs.run_plan``, as a UI backfill makes them, over contiguous ranges of the requested days
    (normally one), so a day that was not asked for is never touched. Returns the successful runs by job name.
    """
    from opal_dp.definitions import defs as load_defs

    defs = load_defs()
    storage = OpalStorage(data_dir=normalise_data_dir(data_dir) if data_dir else settings.data_dir_from_env(),
                          ledger_url=settings.ledger_url_from_env())
    days = sorted(dates or raw_files(storage.raw_dir))
    if not days:
        raise SystemExit(f"no raw files in {storage.raw_dir}")
    instance.add_dynamic_partitions(
        service_dates.name, [d for d in days if not instance.has_dynamic_partition(service_dates.name, d)]
    )
    all_days = service_dates.get_partition_keys(dynamic_partitions_store=instance)
    run_config: dict = {"resources": {"storage": {"config": {"data_dir": storage.data_dir, "ledger_url": storage.ledger_url}},
                                      **({BUDGET: {"config": dict(budget)}} if budget else {})}}
    if log_file is not None:
        run_config["loggers"] = {"event_log_file": {"config": {"path": str(log_file)}},
                                 **({"step_progress": {}} if progress else {})}
    results: dict[str, list[dg.ExecuteInProcessResult]] = {}
    for job, span in run_plan(contiguous_ranges(all_days, days)) + ([("synthetic", None)] if synthetic else []):
        tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
        job_def = defs.resolve_job_def(job)
        with _progress_bar(job, span, len(job_def.graph.node_dict), enabled=progress):
            if distributed:
                result = dg.execute_job(dg.build_reconstructable_job(__name__, job_by_name.__name__, (job,)),
                                        instance=instance, tags=tags, run_config=run_config, raise_on_error=False)
            else:
                result = job_def.execute_in_process(instance=instance, tags=tags, run_config=run_config,
                                                    raise_on_error=False)
        if not result.success:
            errors = [e.step_failure_data.error.message.strip() for e in result.all_events if e.is_step_failure]
            raise SystemExit(f"run {result.run_id} of job {job} failed:\n" + "\n".join(errors))
        results.setdefault(job, []).append(result)
    return results


def job_by_name(name: str) -> dg.JobDefinition:
    """The job, rebuilt from the definitions wherever a step runs (``dg.build_reconstructable_job``)."""
    from opal_dp.definitions import defs as load_defs

    return load_defs().resolve_job_def(name)


@contextmanager
def _progress_bar(job: str, span: tuple[str, str] | None, steps: int, enabled: bool):
    """A tqdm bar over the run's steps, advanced by the step_progress logger."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    what = STAGE_NAMES[job] + (f" {span[0].split('|')[-1]}" if job == "release" else "")
    bar = tqdm(total=steps, desc=f"{what:<20}", unit="step", file=sys.stderr, leave=True,
               bar_format="{desc} {bar:20} {n_fmt}/{total_fmt} steps  {elapsed}")

    def listener(event: str, step: str | None) -> None:
        if event in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            bar.update(1)

    STEP_LISTENERS.append(listener)
    try:
        yield
    finally:
        STEP_LISTENERS.remove(listener)
        bar.close()


def budget_config(args: argparse.Namespace, days: list[str]) -> dict[str, object]:
    """The ``privacy_budget`` configuration the command line asks for (only what it sets)."""
    config: dict[str, object] = {"privacy_unit": args.privacy_unit}
    for name in ("mechanism", "release_design", "relation", "max_trips_per_card_day", "max_per_bin", "max_days_per_card",
                 "acknowledge_ledger_reset"):
        value = getattr(args, name)
        if value is not None:
            config[name] = value
    if PrivacyUnit(args.privacy_unit) is PrivacyUnit.CARD_PERIOD:
        config["period"] = args.period or ",".join(days)
    return config


def ensure_dagster_home(path: Path) -> Path:
    """A Dagster home at ``path`` with opal_dp's ``dagster.yaml`` (telemetry off), created if missing; private
    (0700: its event log holds non-DP figures)."""
    yaml = make_dirs(path) / "dagster.yaml"
    if not reserve_private(yaml).read_text().strip():
        yaml.write_text(DAGSTER_YAML)
    return path


def summary(results: dict[str, list[dg.ExecuteInProcessResult]], storage: DataLocation) -> list[str]:
    """The lines a person needs after a release: what was released, under what guarantee, and where."""
    folder = latest_release(storage.published_dir)
    statement = json.loads((folder / "privacy.json").read_text(encoding="utf-8"))
    trips = sum(int(e.materialization.metadata["rows_accepted"].value)
                for r in results["private_stages"] for e in r.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("ingested_trips") and "rows_accepted" in e.materialization.metadata)
    with open(folder / "time-loc.csv", encoding="utf-8", newline="") as rows:
        kinds = Counter(OTHER in (row["time"], row["loc"]) for row in csv.DictReader(rows))
    remainders = f" and {kinds[True]:,} remainder rows" if kinds[True] else ""
    g, unit = statement["guarantee"], statement["privacy_unit"]
    partitions = statement["partitions"]["keys"]
    days = len({k["date"] for k in partitions})
    return [
        f"released {len(partitions)} partitions ({days} days x modes), {trips:,} trips read, "
        f"{kinds[False]:,} cells listed in time-loc.csv{remainders}",
        f"protected: {unit['protects']} at (epsilon = {g['epsilon']:.4g}, delta = {g['delta']:.3g}) per {g['per']}",
        f"release: {storage.published_dir / LATEST} -> {folder.name} (index.html for the public; PRIVACY.md explains the guarantee)",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m opal_dp.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    release = sub.add_parser("release", help="prepare the sample if needed, then run the pipeline end to end")
    release.add_argument("--no-sample", action="store_true", help="do not generate the bundled sample")
    release.add_argument("--data-dir", help="data directory, a path or a URI (default: $OPAL_DP_DATA_DIR or ./data)")
    release.add_argument("--verbose", action="store_true", help="print Dagster's event log too")
    release.add_argument("--workers", type=int, metavar="N",
                         help="processes for the per-day work (default: $OPAL_DP_WORKERS or the machine's CPUs; "
                              "1 runs it in this process)")
    release.add_argument("--strict", action="store_true",
                         help="refuse to run if group or others can read the raw or private folder or the Dagster "
                              "home (default: warn; also $OPAL_DP_STRICT_PERMISSIONS=1)")
    release.add_argument("--privacy-unit", choices=[u.value for u in PrivacyUnit], default=PrivacyUnit.TRIP.value,
                         help="whom the release protects (default: trip, the 2016 release)")
    release.add_argument("--mechanism", choices=[m.value for m in Mechanism], help="default: laplace; gaussian for card_period")
    release.add_argument("--design", dest="release_design", choices=[d.value for d in Design],
                         help="release design: sbh (default, the 2016 design) or public_domain (noise on every "
                              "public cell, consistent tables with remainder rows)")
    release.add_argument("--relation", choices=["replace_one", "add_remove"],
                         help="default: replace_one for trip, add_remove for card units")
    release.add_argument("--max-trips-per-card-day", type=int)
    release.add_argument("--max-per-bin", type=int)
    release.add_argument("--max-days-per-card", type=int)
    release.add_argument("--period", help="card_period: its dates, e.g. 2016-07-25..2016-08-14 (default: the raw days)")
    release.add_argument("--synthetic", action="store_true",
                         help="also publish synthetic card-day trips (card_period DP, charged to the period; "
                              "budget: privacy_budget.synthetic_epsilon/_delta) under published/synthetic/")
    release.add_argument("--acknowledge-ledger-reset", metavar="REASON",
                         help="use a new or replaced ledger although releases were already published (recorded)")
    ledger = sub.add_parser("ledger", help="inspect the privacy ledger or raise a cap")
    ledger.add_argument("--data-dir", help="data directory, a path or a URI (default: $OPAL_DP_DATA_DIR or ./data)")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True)
    ledger_sub.add_parser("show", help="caps, cap history and what each scope costs")
    raise_cap = ledger_sub.add_parser("raise-cap", help="raise a unit's cap per scope, or the person cap over the "
                                                        "horizon (recorded, with the reason)")
    which = raise_cap.add_mutually_exclusive_group(required=True)
    which.add_argument("--unit", choices=[u.value for u in PrivacyUnit])
    which.add_argument("--person", action="store_true",
                       help="the person cap: one card's loss over any horizon of service dates, every product")
    raise_cap.add_argument("--epsilon", required=True, type=float)
    raise_cap.add_argument("--delta", required=True, type=float)
    raise_cap.add_argument("--reason", required=True)
    home = sub.add_parser("dagster-home", help="create a Dagster home with telemetry off")
    home.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    if args.command == "release":
        with private_umask():  # what Dagster writes (its home, event log) is private too
            _release(args)
    elif args.command == "ledger":
        _ledger(args)
    else:
        print(ensure_dagster_home(args.path))


def _location(args: argparse.Namespace) -> DataLocation:
    """The data location the command line asks for: a URI is kept as given, a local path made absolute."""
    data_dir = normalise_data_dir(args.data_dir) if args.data_dir else settings.data_dir_from_env()
    return DataLocation(data_dir=data_dir, ledger_url=settings.ledger_url_from_env())


def _release(args: argparse.Namespace) -> None:
    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)
    storage = _location(args)
    if args.workers is not None:
        if args.workers < 1:
            raise SystemExit(f"--workers must be at least 1, got {args.workers}")
        os.environ[settings.WORKERS_ENV] = str(args.workers)  # read by opal_dp.parallel in this process
    try:
        check_folders([storage.raw_dir, storage.private_dir, *filter(None, [os.environ.get("DAGSTER_HOME")])],
                      strict=args.strict or settings.strict_permissions_from_env())
    except (ExposedDataError, ValueError) as err:  # ValueError: a bad $OPAL_DP_STRICT_PERMISSIONS
        raise SystemExit(str(err)) from None
    if not args.no_sample:
        from opal_dp.simulate.sample import ensure_sample

        ensure_sample(storage.raw_dir)
    days = sorted(raw_files(storage.raw_dir))
    os.environ.setdefault("DAGSTER_HOME", str(ensure_dagster_home(storage.dagster_home)))
    log_file = storage.logs_dir / f"release-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.log"
    make_dirs(log_file.parent)
    print(f"releasing {len(days)} days under unit {args.privacy_unit}, design {args.release_design or Design.SBH} from {storage.raw_dir}; full log: {log_file}")
    with dg.DagsterInstance.get() as instance:
        results = run_release(instance, budget=budget_config(args, days), data_dir=storage.data_dir,
                              log_file=None if args.verbose else log_file, progress=not args.verbose,
                              synthetic=args.synthetic)
    print("\n".join(summary(results, storage)))
    if args.synthetic:
        statement = json.loads((storage.published_dir / "synthetic" / "latest" / "privacy.json").read_text())
        g = statement["guarantee"]
        print(f"synthetic trips: {storage.published_dir / 'synthetic' / 'latest'} at (epsilon = {g['epsilon']:.4g}, "
              f"delta = {g['delta']:.3g}) per {g['per']}")


def _ledger(args: argparse.Namespace) -> None:
    """The ledger as it is: reading it never creates one, nor records a cap."""
    location = _location(args).ledger_location
    if not open_backend(location).exists():
        raise SystemExit(f"no privacy ledger at {location}: nothing has been released from this data folder")
    ledger = PrivacyLedger(location, {})
    if args.ledger_command == "raise-cap" and args.person:
        person = ledger.raise_person_cap(args.epsilon, args.delta, args.reason)
        print(f"person cap over {person.horizon_days} days raised to (epsilon={person.epsilon:g}, "
              f"delta={person.delta:g}) at {person.set_at}: {person.reason}")
        return
    if args.ledger_command == "raise-cap":
        cap = ledger.raise_cap(args.unit, args.epsilon, args.delta, args.reason)
        print(f"cap for {cap.unit} raised to (epsilon={cap.epsilon:g}, delta={cap.delta:g}) at {cap.set_at}: {cap.reason}")
        return
    print(f"ledger {ledger.ledger_id} at {ledger.location}")
    for unit in PrivacyUnit:
        for cap in ledger.cap_history(unit):
            print(f"  cap {unit.value}: {cap.action} {cap.set_at} epsilon={cap.epsilon:g} delta={cap.delta:g} ({cap.reason})")
    for person in ledger.person_cap_history():
        print(f"  person cap over {person.horizon_days} days: {person.action} {person.set_at} "
              f"epsilon={person.epsilon:g} delta={person.delta:g} ({person.reason})")
    for row in ledger.summary():
        g = row.guarantee
        print(f"  {row.unit} {row.scope}: epsilon={g.epsilon:.6g} delta={g.delta:.3g} charges={row.charges} "
              f"draws={row.draws} pending={row.pending}")


if __name__ == "__main__":
    main()
