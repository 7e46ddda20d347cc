"""``python -m opal_dp.cli``: release what is new among the raw days and publish it (``release``), administer the
privacy ledger (``ledger show``, ``ledger raise-cap``), or prepare a Dagster home (``dagster-home``).

``release`` ingests each new raw day, releases each week whose seven days are ingested (a week is the unit of work:
released, checked and charged as one thing), and publishes; the runs are the code location's own, listed in the UI
(``opal_dp.runs``). It prints a progress bar per run and a short summary; the full event log goes to
``private/logs/`` (``--verbose`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from opal_dp import settings
from opal_dp.core import PrivacyUnit
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_backends import open_backend
from opal_dp.locations import DataLocation
from opal_dp.defs.shared.instance import ensure_dagster_home
from opal_dp.permissions import ExposedDataError, check_folders, make_dirs, private_umask
from opal_dp.prep.day_records import read_records
from opal_dp.prep.ingest import scan_raw_files
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.published_folder import latest_release, read_index
from opal_dp.release.share import split
from opal_dp.release.statement.build import stated_design
from opal_dp.release.statement.person import person_account
from opal_dp.runs import ReleaseRuns, run_release

__all__ = ["main", "run_release", "budget_config", "ensure_dagster_home", "summary"]

def budget_config(args: argparse.Namespace) -> dict[str, object]:
    """The ``privacy_budget`` configuration the command line asks for (only what it sets): ``--budget`` first, then
    each flag over it."""
    config: dict[str, object] = {}
    if args.budget:
        text = Path(args.budget[1:]).read_text(encoding="utf-8") if args.budget.startswith("@") else args.budget
        try:
            config.update(json.loads(text))
        except (json.JSONDecodeError, TypeError, ValueError) as err:
            raise SystemExit(f"--budget: not a JSON object of privacy_budget settings: {err}") from None
    config["privacy_unit"] = args.privacy_unit
    for name in ("mechanism", "release_design", "relation", "max_trips_per_card_day", "max_per_bin", "max_days_per_card",
                 "acknowledge_ledger_reset"):
        value = getattr(args, name)
        if value is not None:
            config[name] = value
    if args.epsilon is not None or args.delta is not None:  # the six marginals' shares of the totals, as in 2016
        epsilon, delta = split(args.epsilon or 1.0, args.delta or 1.0)
        config |= ({"epsilon": epsilon} if args.epsilon is not None else {}) | (
            {"delta": delta} if args.delta is not None else {})
    if args.person_cap is not None:
        epsilon, _, delta = args.person_cap.partition(",")
        try:
            config["person_cap_epsilon"] = float(epsilon)
            if delta:
                config["person_cap_delta"] = float(delta)
        except ValueError:
            raise SystemExit(f"--person-cap must be EPSILON or EPSILON,DELTA, got {args.person_cap!r}") from None
    return config


def summary(results: ReleaseRuns, storage: DataLocation) -> list[str]:
    """The lines a person needs after a release: what was new, what was released, from what data, under what
    guarantee, what waits and why, and where everything is."""
    lines = ["nothing new: every raw day is ingested and every complete week is released and published"] \
        if results.nothing_new else []
    lines += [f"not ingested: {day}: {why}" for day, why in sorted(results.failed_days.items())]
    for week, held in results.waiting.items():
        by_reason: dict[str, list[str]] = {}
        for day, why in held.items():
            by_reason.setdefault(why, []).append(day)
        lines.append(f"waiting (nothing charged): week {week} is released once all its days are ingested; "
                     + "; ".join(f"{', '.join(days)}: {why}" for why, days in by_reason.items()))
    lines += [f"refused: week {week}: {why}" for week, why in results.refused.items()]
    try:
        folder = latest_release(storage.published_dir)
    except FileNotFoundError:
        return lines + ["nothing published yet"]
    statement = json.loads((folder / "privacy.json").read_text(encoding="utf-8"))
    index = read_index(folder)  # rows per date: no CSV read back
    records = read_records(storage.private_dir)
    published = [f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in index["dates"]]
    trips = sum(records[d].rows[1] for d in published if d in records)
    rejected = sum(records[d].rows[2] for d in published if d in records)
    listed = sum(entry["files"]["time-loc.csv"]["rows"] for entry in index["dates"].values())
    cells = "cells and remainder rows" if stated_design(statement).consistent else "cells"
    g, unit, data = statement["guarantee"], statement["privacy_unit"], statement["data"]
    partitions, days = statement["partitions"]["count"], statement["partitions"]["dates"]
    lines.append(f"published {partitions} (date, mode) partitions ({days} days), {trips:,} trips read, {listed:,} "
                 f"{cells} listed in time-loc.csv")
    if data["synthetic_sample"]:
        lines.append(f"data: the bundled SYNTHETIC sample (generated trips, not real travel) for "
                     f"{len(data['synthetic_sample_dates'])} of {days} days; privacy.json and PRIVACY.md say so")
    if rejected:
        lines.append(f"rejected rows: {rejected:,} (file, line, field and reason in "
                     f"{storage.private_dir / 'rejected_trips'}, private; counts per reason on ingested_trips)")
    if data.get("left_out_dates"):
        lines.append(f"left out of their released weeks: {', '.join(data['left_out_dates'])}")
    unset = [name for name in (settings.PUBLISHER_ENV, settings.CONTACT_ENV) if not os.environ.get(name, "").strip()]
    if unset and "rollup" in results:
        lines.append(f"warning: {' and '.join(unset)} not set: the page and its citation say \"not stated\" (set "
                     "them in the environment of the publishing run)")
    person = statement["person"]
    if person["bounded"]:
        cap, spent = person["cap"], person["spent"]
        whole = (f"one person over any {person['horizon_days']} days: epsilon = {spent['epsilon']:.4g} used of "
                 f"{cap['epsilon']:g}, at delta = {cap['delta']:g} (per card)")
    else:
        whole = "no person-level bound (a card's trips are not bounded)"
    return lines + [
        f"protected: {unit['protects']} at (epsilon = {g['epsilon']:.4g}, delta = {g['delta']:.3g}) per {g['per']}; "
        + whole,
        f"release: {folder} -> {index['release_id']} (index.html for the public; PRIVACY.md explains the guarantee; "
        "index.json lists the dates, each under dates/)",
    ]


DESCRIPTION = """Release what is new among the raw trip files and publish it (release), inspect the privacy ledger or
raise a cap (ledger), or prepare a Dagster home (dagster-home). A week is the unit of a release: each raw day is
ingested when its file is there, and a week is released, checked, charged and published once all seven of its days
are ingested."""
DATA_DIR_HELP = ("data directory holding raw/, private/ and published/, a path or a URI (default: $OPAL_DP_DATA_DIR or "
                 "./data); accepted before or after the command")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)  # accepted before or after the subcommand
    common.add_argument("--data-dir", default=argparse.SUPPRESS, help=DATA_DIR_HELP)
    parser = argparse.ArgumentParser(prog="python -m opal_dp.cli", description=DESCRIPTION, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{release,ledger,dagster-home}")
    release = sub.add_parser("release", parents=[common], help="ingest the new raw days, release the complete weeks "
                             "and publish them", description="Ingest each new or replaced raw day, release each week "
                             "whose seven days are ingested, and publish. A week that waits for a day is named with the "
                             "reason and is not charged; with nothing new, says so and launches nothing.")
    release.add_argument("--sample", action="store_true",
                         help="generate the bundled synthetic sample (two weeks of generated trips, not real travel) "
                              "if the raw folder holds no real raw file, creating the data directory if needed; the "
                              "release then says it is synthetic. Never adds a file next to real raw files")
    release.add_argument("--verbose", action="store_true", help="print Dagster's event log too")
    release.add_argument("--workers", type=int, metavar="N",
                         help="processes for the per-day work (default: $OPAL_DP_WORKERS or the machine's CPUs; "
                              "1 runs it in this process)")
    release.add_argument("--without", action="append", default=[], metavar="DATE",
                         help="release the week of DATE without that day (repeatable): its charge then covers the "
                              "days present, still calibrated on the whole week, and the statement lists the day as "
                              "left out. For a day whose file is lost for good; a later file for it is a correction")
    release.add_argument("--strict-days", action="store_true",
                         help="exit with an error if any day's raw file could not be used (default: release the other "
                              "weeks, list the failed days and exit 0)")
    release.add_argument("--strict", action="store_true",
                         help="refuse to run if group or others can read the raw or private folder or the Dagster "
                              "home (default: warn; also $OPAL_DP_STRICT_PERMISSIONS=1)")
    release.add_argument("--privacy-unit", choices=[u.value for u in PrivacyUnit], default=PrivacyUnit.CARD_PERIOD.value,
                         help="whom the release protects (default: card_period, one card over each calendar week, at "
                              "the weekly share of the person cap; card_day: one card on one day, at the daily share; "
                              "trip reproduces the 2016 release, which has no person-level bound)")
    release.add_argument("--person-cap", metavar="EPSILON[,DELTA]",
                         help="the person cap over the horizon (default 20,1e-6 over 365 days) when the ledger is "
                              "created; the card units' default budgets are its share. Later changes: ledger raise-cap")
    release.add_argument("--epsilon", type=float, metavar="E",
                         help="the six marginals' total epsilon per scope, split 1,1,1,1,2,2 as in 2016 (default: the "
                              "share of the person cap for card units, 8 for trip)")
    release.add_argument("--delta", type=float, metavar="D",
                         help="the six marginals' total delta per scope, split evenly (default: the share for card "
                              "units, 6/8,000,000 for trip)")
    release.add_argument("--budget", metavar="JSON",
                         help="any privacy_budget settings as a JSON object, or @FILE holding one (docs/operating.md lists "
                              "them); the other flags apply over it")
    release.add_argument("--mechanism", choices=[m.value for m in Mechanism],
                         help="noise mechanism (default: gaussian for card_period, laplace otherwise)")
    release.add_argument("--design", dest="release_design", choices=[d.value for d in Design],
                         help="release design: sbh (default, the 2016 design), public_domain (noise on every "
                              "public cell, consistent tables with remainder rows) or hierarchy (card units: one "
                              "consistent hierarchy per date, mode and tap, and time-loc-levels.csv)")
    release.add_argument("--relation", choices=["replace_one", "add_remove"],
                         help="neighbouring datasets: one unit replaced or one added or removed (default: replace_one "
                              "for trip, add_remove for card units)")
    release.add_argument("--max-trips-per-card-day", type=int, metavar="M",
                         help="card units: at most M trips of a card on one day are counted (default 4)")
    release.add_argument("--max-per-bin", type=int, metavar="B",
                         help="card units: at most B trips of a card-day in any one bin of a marginal (default 1)")
    release.add_argument("--max-days-per-card", type=int, metavar="D",
                         help="card_period: at most D days of a card in a week are counted (default: all 7)")
    release.add_argument("--synthetic", action="store_true",
                         help="also publish synthetic card-day trips (card_period DP, charged to each week within its "
                              "share) under published/synthetic/")
    release.add_argument("--acknowledge-ledger-reset", metavar="REASON",
                         help="use a new or replaced ledger although releases were already published (recorded)")
    ledger = sub.add_parser("ledger", parents=[common], help="inspect the privacy ledger or raise a cap")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="{show,raise-cap}")
    ledger_sub.add_parser("show", parents=[common], help="caps, cap history, the person account and what each scope "
                                                         "costs")
    raise_cap = ledger_sub.add_parser("raise-cap", parents=[common], help="raise a unit's cap per scope, or the person "
                                      "cap over the horizon (recorded, with the reason)")
    which = raise_cap.add_mutually_exclusive_group(required=True)
    which.add_argument("--unit", choices=[u.value for u in PrivacyUnit],
                       help="the unit whose cap per scope (one week, day or partition) is raised")
    which.add_argument("--person", action="store_true",
                       help="the person cap: one card's loss over any horizon of service dates, every product")
    raise_cap.add_argument("--epsilon", required=True, type=float, help="the new cap's epsilon")
    raise_cap.add_argument("--delta", required=True, type=float, help="the new cap's delta")
    raise_cap.add_argument("--reason", required=True, help="why, recorded in the ledger and the statement")
    home = sub.add_parser("dagster-home", help="create a Dagster home with telemetry off")
    home.add_argument("path", type=Path, help="the folder to create (or complete) as a Dagster home")
    return parser


def main(argv: list[str] | None = None) -> None:
    from opal_dp.simulate.sample import BrokenSampleRecord

    args = _parser().parse_args(argv)
    if args.command == "release":
        try:
            with private_umask():  # what Dagster writes (its home, event log) is private too
                _release(args)
        except BrokenSampleRecord as err:
            raise SystemExit(str(err)) from None
    elif args.command == "ledger":
        _ledger(args)
    else:
        print(ensure_dagster_home(args.path))


def _location(args: argparse.Namespace) -> DataLocation:
    """The data location the command line asks for (``DataLocation.resolved``)."""
    return DataLocation.resolved(getattr(args, "data_dir", None))


def _release(args: argparse.Namespace) -> None:
    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)
    storage = _location(args)
    if args.workers is not None and args.workers < 1:
        raise SystemExit(f"--workers must be at least 1, got {args.workers}")
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
    for day in args.without:
        if not _iso_date(day):
            raise SystemExit(f"--without takes a service date as YYYY-MM-DD, got {day!r}")
    with dg.DagsterInstance.get() as instance:
        results = run_release(instance, budget=budget_config(args), data_dir=storage.data_dir,
                              log_file=None if args.verbose else log_file, progress=not args.verbose,
                              synthetic=args.synthetic, without=args.without, workers=args.workers)
    if results.nothing_new:
        print(_nothing_new(results, storage))
    else:
        print("\n".join(summary(results, storage) + [f"Dagster's event log of these runs: {log_file}"]))
    if args.synthetic and not results.nothing_new:
        statement = json.loads((storage.published_dir / "synthetic" / "latest" / "privacy.json").read_text())
        g = statement["guarantee"]
        print(f"synthetic trips: {storage.published_dir / 'synthetic' / 'latest'} at (epsilon = {g['epsilon']:.4g}, "
              f"delta = {g['delta']:.3g}) per {g['per']}")
    if results.refused:
        n = len(results.refused)
        raise SystemExit(f"{n} week{'s were' if n > 1 else ' was'} refused (listed above); every other week went ahead")
    if results.failed_days and args.strict_days:
        raise SystemExit(f"--strict-days: {len(results.failed_days)} days could not be used (listed above)")


def _iso_date(text: str) -> bool:
    try:
        return datetime.strptime(text, "%Y-%m-%d").date().isoformat() == text
    except ValueError:
        return False


def _nothing_new(results: ReleaseRuns, storage: DataLocation) -> str:
    """The one line of a release with nothing new: what stands published, and what still waits."""
    try:
        index = read_index(latest_release(storage.published_dir))
        stands = f"{len(index['dates'])} days stand published as {index['release_id']}"
    except FileNotFoundError:
        stands = "nothing is published yet"
    waiting = [f"week {week} waits for {len(held)} day{'s' * (len(held) > 1)}" for week, held in results.waiting.items()]
    return "nothing new to release: " + "; ".join([stands, *waiting])


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
        cap = ledger.raise_cap(PrivacyUnit(args.unit), args.epsilon, args.delta, args.reason)
        print(f"cap for {cap.unit} raised to (epsilon={cap.epsilon:g}, delta={cap.delta:g}) at {cap.set_at}: {cap.reason}")
        return
    print(f"ledger {ledger.ledger_id} at {ledger.location}")
    for unit in PrivacyUnit:
        for cap in ledger.cap_history(unit):
            print(f"  cap {unit}: {cap.action} {cap.set_at} epsilon={cap.epsilon:g} delta={cap.delta:g} ({cap.reason})")
    for person in ledger.person_cap_history():
        print(f"  person cap over {person.horizon_days} days: {person.action} {person.set_at} "
              f"epsilon={person.epsilon:g} delta={person.delta:g} ({person.reason})")
    account = person_account(ledger)
    if account:
        print(f"  person account: the worst {account['horizon_days']}-day window ({account['window']}) has spent "
              f"epsilon={account['epsilon_spent']:.4g} delta={account['delta_spent']:.3g} of the person cap "
              f"(epsilon={account['cap_epsilon']:g}, delta={account['cap_delta']:g}): {account['share_of_cap']:.1%}, "
              f"about epsilon={account['epsilon_remaining']:.4g} left")
    for row in ledger.summary():
        g = row.guarantee
        print(f"  {row.unit} {row.scope}: epsilon={g.epsilon:.6g} delta={g.delta:.3g} charges={row.charges} "
              f"draws={row.draws} pending={row.pending}")


if __name__ == "__main__":
    main()
