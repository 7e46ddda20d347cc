"""``python -m opal_dp.cli``: run the whole pipeline over every raw day (``release``), or administer the
privacy ledger (``ledger show``, ``ledger raise-cap``).

``release`` makes one run per partitioning scheme (daily private stages, (date, mode) release, roll-up),
each over the full range of partitions thanks to single-run backfill policies: no process per partition.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import dagster as dg

from opal_dp import settings
from opal_dp.core import PrivacyUnit
from opal_dp.defs.partitions import RANGE_END, RANGE_START, contiguous_ranges, date_mode, service_dates
from opal_dp.prep.ingest import raw_files
from opal_dp.release.plan import MECHANISMS

BUDGET = "privacy_budget"


def run_release(
    instance: dg.DagsterInstance, dates: list[str] | None = None, budget: Mapping[str, object] | None = None
) -> dict[str, list[dg.ExecuteInProcessResult]]:
    """Register the service dates (default: of every raw file) and materialise everything over them.

    ``budget``: configuration of the ``privacy_budget`` resource for every run (privacy unit, bounds, ...).
    One run per job and contiguous range of the requested partitions (normally exactly one), so a day that
    was not asked for is never touched. Returns the successful runs by job name.
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
    run_config = {"resources": {BUDGET: {"config": dict(budget)}}} if budget else None
    results: dict[str, list[dg.ExecuteInProcessResult]] = {}
    for job, ranges in plan:
        for span in ranges:
            tags = {RANGE_START: span[0], RANGE_END: span[1]} if span else {}
            result = defs.resolve_job_def(job).execute_in_process(
                instance=instance, tags=tags, run_config=run_config, raise_on_error=False
            )
            if not result.success:
                errors = [e.step_failure_data.error.message.strip() for e in result.all_events if e.is_step_failure]
                raise SystemExit(f"run {result.run_id} of job {job} failed:\n" + "\n".join(errors))
            results.setdefault(job, []).append(result)
    return results


def budget_config(args: argparse.Namespace, days: list[str]) -> dict[str, object]:
    """The ``privacy_budget`` configuration the command line asks for (only what it sets)."""
    config: dict[str, object] = {"privacy_unit": args.privacy_unit}
    for name in ("mechanism", "relation", "max_trips_per_card_day", "max_per_bin", "max_days_per_card",
                 "acknowledge_ledger_reset"):
        value = getattr(args, name)
        if value is not None:
            config[name] = value
    if args.privacy_unit == PrivacyUnit.CARD_PERIOD.value:
        config["period"] = args.period or ",".join(days)
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m opal_dp.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    release = sub.add_parser("release", help="prepare the sample if needed, then run the pipeline end to end")
    release.add_argument("--no-sample", action="store_true", help="do not generate the bundled sample")
    release.add_argument("--privacy-unit", choices=[u.value for u in PrivacyUnit], default=PrivacyUnit.TRIP.value,
                         help="whom the release protects (default: trip, the 2016 release)")
    release.add_argument("--mechanism", choices=MECHANISMS, help="default: laplace; gaussian for card_period")
    release.add_argument("--relation", choices=["replace_one", "add_remove"],
                         help="default: replace_one for trip, add_remove for card units")
    release.add_argument("--max-trips-per-card-day", type=int)
    release.add_argument("--max-per-bin", type=int)
    release.add_argument("--max-days-per-card", type=int)
    release.add_argument("--period", help="card_period: its dates, e.g. 2016-07-25..2016-08-14 (default: the raw days)")
    release.add_argument("--acknowledge-ledger-reset", metavar="REASON",
                         help="use a new or replaced ledger although releases were already published (recorded)")
    ledger = sub.add_parser("ledger", help="inspect the privacy ledger or raise a cap")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True)
    ledger_sub.add_parser("show", help="caps, cap history and what each scope costs")
    raise_cap = ledger_sub.add_parser("raise-cap", help="raise a unit's cap per scope (recorded, with the reason)")
    raise_cap.add_argument("--unit", required=True, choices=[u.value for u in PrivacyUnit])
    raise_cap.add_argument("--epsilon", required=True, type=float)
    raise_cap.add_argument("--delta", required=True, type=float)
    raise_cap.add_argument("--reason", required=True)
    args = parser.parse_args(argv)
    if args.command == "release":
        _release(args)
    else:
        _ledger(args)


def _release(args: argparse.Namespace) -> None:
    if not args.no_sample:
        from opal_dp.synth.sample import ensure_sample

        ensure_sample(settings.raw_dir())
    days = sorted(raw_files(settings.raw_dir()))
    with dg.DagsterInstance.get() as instance:
        run_release(instance, budget=budget_config(args, days))
    latest = settings.published_dir() / "latest"
    print(f"release published: {latest} -> {latest.resolve().name}")
    print(f"files: {', '.join(sorted(p.name for p in latest.iterdir()))}")


def _ledger(args: argparse.Namespace) -> None:
    from opal_dp.defs.budget import PrivacyBudget

    ledger = PrivacyBudget().ledger()
    if args.ledger_command == "raise-cap":
        cap = ledger.raise_cap(args.unit, args.epsilon, args.delta, args.reason)
        print(f"cap for {cap.unit} raised to (epsilon={cap.epsilon:g}, delta={cap.delta:g}) at {cap.set_at}: {cap.reason}")
        return
    print(f"ledger {ledger.ledger_id} at {ledger.path}")
    for unit in PrivacyUnit:
        for cap in ledger.cap_history(unit):
            print(f"  cap {unit.value}: {cap.action} {cap.set_at} epsilon={cap.epsilon:g} delta={cap.delta:g} ({cap.reason})")
    for row in ledger.summary():
        g = row.guarantee
        print(f"  {row.unit} {row.scope}: epsilon={g.epsilon:.6g} delta={g.delta:.3g} charges={row.charges} "
              f"draws={row.draws} pending={row.pending}")


if __name__ == "__main__":
    main()
