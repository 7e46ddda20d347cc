"""``python -m opal_dp.cli``: release the raw days end to end (``release``), administer the privacy ledger
(``ledger show``, ``ledger raise-cap``), or prepare a Dagster home (``dagster-home``).

``release`` makes the runs of ``opal_dp.defs.shared.jobs.run_plan``, the same runs a UI backfill of every asset makes:
one for the daily private stages, one per mode for the (date, mode) release, one for the roll-up. It prints a
progress bar per run and a short summary; the full event log goes to ``private/logs/`` (``--verbose`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from opal_dp import settings
from opal_dp.core import PrivacyUnit
from opal_dp.core.accounting import LIBRARY as ACCOUNTING_LIBRARY
from opal_dp.defs.shared.jobs import run_plan
from opal_dp.defs.shared.logs import STEP_LISTENERS
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, contiguous_ranges, service_dates
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_backends import open_backend
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.locations import DataLocation, normalise_data_dir
from opal_dp.parallel import import_in_background, start_in_background
from opal_dp.permissions import ExposedDataError, check_folders, make_dirs, private_umask, reserve_private
from opal_dp.prep.failed_days import failed_days
from opal_dp.prep.ingest import scan_raw_files
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.publish import latest_release, read_index
from opal_dp.release.statement.build import stated_design

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


class ReleaseRuns(dict):
    """The successful runs by job name, and ``failed_days``: service date -> why its raw file could not be used
    (that day was left out; the others were released)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_days: dict[str, str] = {}


def run_release(
    instance: dg.DagsterInstance,
    dates: list[str] | None = None,
    budget: Mapping[str, object] | None = None,
    data_dir: str | Path | None = None,
    log_file: Path | None = None,
    progress: bool = False,
    synthetic: bool = False,
    distributed: bool = False,
) -> ReleaseRuns:
    """Register the service dates (default: of every raw file) and materialise everything over them.

    ``budget``: configuration of the ``privacy_budget`` resource for every run (privacy unit, bounds, ...);
    ``data_dir``: the data directory (default: ``$OPAL_DP_DATA_DIR`` or ``./data``, read once); ``log_file``:
    where the runs' events go instead of the console; ``progress``: a progress bar per run on stderr.
    ``synthetic``: then also the ``synthetic`` job (synthetic card-day trips, ``defs.synthetic``).
    ``distributed``: run each job with its configured executor (the Celery workers of ``deploy/``, on a
    persistent ``instance``) instead of in this process.
    The runs of ``jobs.run_plan``, as a UI backfill makes them, over contiguous ranges of the requested days
    (normally one), so a day that was not asked for is never touched. A day whose raw file cannot be used fails
    its ``private_stages`` run, which names it; the days of that run are then run again without it, and the
    release and roll-up go ahead over the days that were ingested (the failed day stays registered: the roll-up
    lists it as pending). Any other failed run stops the release (``SystemExit`` with the run's message).
    """
    from opal_dp.definitions import defs as load_defs

    if not distributed:
        start_in_background()  # the per-day workers start while the definitions load
    defs = load_defs()
    import_in_background(*ACCOUNTING_LIBRARY)  # while this process waits on the day pass
    storage = OpalStorage(data_dir=normalise_data_dir(data_dir) if data_dir else settings.data_dir_from_env(),
                          ledger_url=settings.ledger_url_from_env())
    days = sorted(dates or scan_raw_files(storage.raw_dir)[0])
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
    runs = ReleaseRuns()

    def run(job: str, span: tuple[str, str] | None) -> dg.ExecuteInProcessResult | dg.JobExecutionResult:
        tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
        job_def = defs.resolve_job_def(job)
        with _progress_bar(job, span, len(job_def.graph.node_dict), enabled=progress):
            if distributed:
                result = dg.execute_job(dg.build_reconstructable_job(__name__, job_by_name.__name__, (job,)),
                                        instance=instance, tags=tags, run_config=run_config, raise_on_error=False)
            else:
                result = job_def.execute_in_process(instance=instance, tags=tags, run_config=run_config,
                                                    raise_on_error=False)
        if result.success:
            runs.setdefault(job, []).append(result)
        return result

    ingested = []
    for span in contiguous_ranges(all_days, days):
        span_days = all_days[all_days.index(span[0]):all_days.index(span[1]) + 1]
        result = run("private_stages", span)
        if not result.success:
            failed = {d: why for d, why in failed_days(storage.private_dir).items() if d in span_days}
            if not failed:  # not a bad raw file: nothing to leave out
                raise SystemExit(failure_message("private_stages", result))
            runs.failed_days |= failed
            span_days = [d for d in span_days if d not in failed]
            for rest in contiguous_ranges(all_days, span_days):
                retry = run("private_stages", rest)
                if not retry.success:
                    raise SystemExit(failure_message("private_stages", retry))
        ingested += span_days
    if not ingested:
        raise SystemExit("no day could be ingested:\n" + "\n".join(f"{d}: {why}" for d, why in runs.failed_days.items()))
    for job, span in run_plan(contiguous_ranges(all_days, ingested)) + ([("synthetic", None)] if synthetic else []):
        if job != "private_stages":
            result = run(job, span)
            if not result.success:
                raise SystemExit(failure_message(job, result))
    return runs


def failure_message(job: str, result: dg.ExecuteInProcessResult | dg.JobExecutionResult) -> str:
    """What failed in a run, for a person: each failed step's own description (a ``dg.Failure``), else the step
    and the kind of error; never Dagster's class path or a traceback (the run's log has them)."""
    lines = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            described = data.user_failure_data and data.user_failure_data.description
            lines.append(described.strip() if described else f"step {event.step_key}: {data.error.cls_name} "
                                                               "(the run's event log has the details)")
    return f"run {result.run_id} of job {job} failed:\n" + "\n".join(lines)


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


def budget_config(args: argparse.Namespace) -> dict[str, object]:
    """The ``privacy_budget`` configuration the command line asks for (only what it sets)."""
    config: dict[str, object] = {"privacy_unit": args.privacy_unit}
    for name in ("mechanism", "release_design", "relation", "max_trips_per_card_day", "max_per_bin", "max_days_per_card",
                 "period", "acknowledge_ledger_reset"):
        value = getattr(args, name)
        if value is not None:
            config[name] = value
    return config


def ensure_dagster_home(path: Path) -> Path:
    """A Dagster home at ``path`` with opal_dp's ``dagster.yaml`` (telemetry off), created if missing; private
    (0700: its event log holds non-DP figures)."""
    yaml = make_dirs(path) / "dagster.yaml"
    if not reserve_private(yaml).read_text().strip():
        yaml.write_text(DAGSTER_YAML)
    return path


def summary(results: ReleaseRuns, storage: DataLocation) -> list[str]:
    """The lines a person needs after a release: what was released, from what data, under what guarantee, what
    was left out and why, and where everything is."""
    folder = latest_release(storage.published_dir)
    statement = json.loads((folder / "privacy.json").read_text(encoding="utf-8"))
    ingested = [e.materialization.metadata for r in results["private_stages"] for e in r.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("ingested_trips") and "rows_accepted" in e.materialization.metadata]
    trips = sum(int(m["rows_accepted"].value) for m in ingested)
    rejected = sum(int(m["rows_rejected"].value) for m in ingested)
    index = read_index(folder)  # rows per date: no CSV read back
    listed = sum(entry["files"]["time-loc.csv"]["rows"] for entry in index["dates"].values())
    cells = "cells and remainder rows" if stated_design(statement).consistent else "cells"
    g, unit, data = statement["guarantee"], statement["privacy_unit"], statement["data"]
    partitions, days = statement["partitions"]["count"], statement["partitions"]["dates"]
    lines = [
        f"released {partitions} partitions ({days} days x modes), {trips:,} trips read, "
        f"{listed:,} {cells} listed in time-loc.csv",
    ]
    if data["synthetic_sample"]:
        lines.append(f"data: the bundled SYNTHETIC sample (generated trips, not real travel) for "
                     f"{len(data['synthetic_sample_dates'])} of {days} days; privacy.json and PRIVACY.md say so")
    if rejected:
        lines.append(f"rejected rows: {rejected:,} (file, line, field and reason in "
                     f"{storage.private_dir / 'rejected_trips'}, private; counts per reason on ingested_trips)")
    lines += [f"not released: {day}: {why}" for day, why in sorted(results.failed_days.items())]
    failed = {d.replace("-", "") for d in results.failed_days}
    pending = [d for d in data["pending_dates"] if d not in failed]
    if pending:
        lines.append(f"pending (registered, not released): {', '.join(pending)}")
    person = statement["person"]
    if person["bounded"]:
        cap, spent = person["cap"], person["spent"]
        whole = (f"one person over any {person['horizon_days']} days: (epsilon = {spent['epsilon']:.4g}, delta = "
                 f"{spent['delta']:.3g}) spent of the cap (epsilon = {cap['epsilon']:g}, delta = {cap['delta']:g})")
    else:
        whole = "no person-level bound (a card's trips are not bounded)"
    return lines + [
        f"protected: {unit['protects']} at (epsilon = {g['epsilon']:.4g}, delta = {g['delta']:.3g}) per {g['per']}; "
        + whole,
        f"release: {folder} -> {index['release_id']} (index.html for the public; PRIVACY.md explains the guarantee; "
        "index.json lists the dates, each under dates/)",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m opal_dp.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    release = sub.add_parser("release", help="run the pipeline end to end over the raw days")
    release.add_argument("--sample", action="store_true",
                         help="generate the bundled synthetic sample (a fortnight of generated trips, not real travel) "
                              "if the raw folder holds no real raw file, creating the data directory if needed; the "
                              "release then says it is synthetic. Never adds a file next to real raw files")
    release.add_argument("--data-dir",
                         help="data directory holding raw/, a path or a URI (default: $OPAL_DP_DATA_DIR or ./data); "
                              "it must exist unless --sample")
    release.add_argument("--verbose", action="store_true", help="print Dagster's event log too")
    release.add_argument("--workers", type=int, metavar="N",
                         help="processes for the per-day work (default: $OPAL_DP_WORKERS or the machine's CPUs; "
                              "1 runs it in this process)")
    release.add_argument("--strict-days", action="store_true",
                         help="exit with an error if any day's raw file could not be used (default: release the other "
                              "days, list the failed ones and exit 0)")
    release.add_argument("--strict", action="store_true",
                         help="refuse to run if group or others can read the raw or private folder or the Dagster "
                              "home (default: warn; also $OPAL_DP_STRICT_PERMISSIONS=1)")
    release.add_argument("--privacy-unit", choices=[u.value for u in PrivacyUnit], default=PrivacyUnit.CARD_PERIOD.value,
                         help="whom the release protects (default: card_period, one card over each calendar week, at "
                              "the weekly share of the person cap; trip reproduces the 2016 release, which has no "
                              "person-level bound)")
    release.add_argument("--mechanism", choices=[m.value for m in Mechanism], help="default: laplace; gaussian for card_period")
    release.add_argument("--design", dest="release_design", choices=[d.value for d in Design],
                         help="release design: sbh (default, the 2016 design) or public_domain (noise on every "
                              "public cell, consistent tables with remainder rows)")
    release.add_argument("--relation", choices=["replace_one", "add_remove"],
                         help="default: replace_one for trip, add_remove for card units")
    release.add_argument("--max-trips-per-card-day", type=int)
    release.add_argument("--max-per-bin", type=int)
    release.add_argument("--max-days-per-card", type=int)
    release.add_argument("--period", help="card_period: weekly (default: each calendar week, Monday to Sunday, is one "
                                           "period) or the dates of one period, e.g. 2016-07-25..2016-08-14")
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
    if not args.sample and not storage.root.exists():
        raise SystemExit(f"data directory {storage.root} does not exist: give the folder whose raw/ holds the day "
                         "files (--data-dir or $OPAL_DP_DATA_DIR), or --sample to generate the synthetic sample there")
    try:
        check_folders([storage.raw_dir, storage.private_dir, *filter(None, [os.environ.get("DAGSTER_HOME")])],
                      strict=args.strict or settings.strict_permissions_from_env())
    except (ExposedDataError, ValueError) as err:  # ValueError: a bad $OPAL_DP_STRICT_PERMISSIONS
        raise SystemExit(str(err)) from None
    if args.sample:
        _sample(storage)
    found, unusable = scan_raw_files(storage.raw_dir) if storage.raw_dir.exists() else ({}, {})
    for why in unusable.values():
        print(f"warning: ignored: {why}", file=sys.stderr)
    days = sorted(found)
    if not days:
        raise SystemExit(f"no raw files in {storage.raw_dir}: put one file per service day there "
                         "(trips_YYYY-MM-DD.csv, .csv.gz or .parquet), or give --sample for the synthetic sample")
    os.environ.setdefault("DAGSTER_HOME", str(ensure_dagster_home(storage.dagster_home)))
    log_file = storage.logs_dir / f"release-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.log"
    make_dirs(log_file.parent)
    print(f"releasing {len(days)} days under unit {args.privacy_unit}, design {args.release_design or Design.SBH} from {storage.raw_dir}; full log: {log_file}")
    with dg.DagsterInstance.get() as instance:
        results = run_release(instance, budget=budget_config(args), data_dir=storage.data_dir,
                              log_file=None if args.verbose else log_file, progress=not args.verbose,
                              synthetic=args.synthetic)
    print("\n".join(summary(results, storage)))
    if args.synthetic:
        statement = json.loads((storage.published_dir / "synthetic" / "latest" / "privacy.json").read_text())
        g = statement["guarantee"]
        print(f"synthetic trips: {storage.published_dir / 'synthetic' / 'latest'} at (epsilon = {g['epsilon']:.4g}, "
              f"delta = {g['delta']:.3g}) per {g['per']}")
    if results.failed_days and args.strict_days:
        raise SystemExit(f"--strict-days: {len(results.failed_days)} days could not be used (listed above)")


def _sample(storage: DataLocation) -> None:
    """The bundled synthetic sample in an empty raw folder (or one holding only the sample); never beside real files."""
    from opal_dp.simulate.sample import RealDataPresent, ensure_sample

    try:
        ensure_sample(storage.raw_dir)
    except RealDataPresent as err:
        print(f"--sample: nothing generated: {err}", file=sys.stderr)


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
