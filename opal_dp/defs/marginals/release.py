"""The release: six DP marginals per (week, mode) partition, one piece per (date, mode) as published, under the
configured privacy unit, charged to the privacy ledger, with blocking consistency checks evaluated in the same step
(the true histograms are already in memory). A run releases whole weeks: the week's charge is begun and completed
in one step."""

import math

import dagster as dg
import pandas as pd

from opal_dp.core import LedgerError
from opal_dp.defs.shared.automation import PERIOD
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames
from opal_dp.defs.shared.metadata import LEDGER_POOL, SINGLE_RUN, column_schema, labels, partition_table
from opal_dp.defs.shared.partitions import date_and_mode, period_and_mode, period_mode, run_partition_keys
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.weeks import recorded_inputs
from opal_dp.parallel import map_calls
from opal_dp.defs.trips.private_stages import OVER_BOUND
from opal_dp.prep.binning import location_labels
from opal_dp.release.marginals.checks import BLOCKING_CHECKS, DESIGN_CHECKS, ReleaseUnderCheck, blocking_problems, plausibility
from opal_dp.release.marginals.engine import partition_truths, release_partitions
from opal_dp.release.marginals.tables import BY_NAME, MARGINALS
from opal_dp.release.marginals.schemas import (
    LedgerSummary, ReleaseDraws, ReleaseDrawsByPartition, TrueCells, schema_for,
)
from opal_dp.release.od.hierarchy_publish import stored_totals
from opal_dp.release.options import Design
from opal_dp.release.periods import week_of
from opal_dp.release.statement.person import person_account

RELEASE_PREFIX = "release"
TRUE_CELLS, RELEASE_DRAWS = "true_cells", "release_draws"
RELEASE_KEYS = {m.name: dg.AssetKey([RELEASE_PREFIX, m.name]) for m in MARGINALS}
RELEASE_ASSETS = {*RELEASE_KEYS.values(), dg.AssetKey(RELEASE_DRAWS), dg.AssetKey(TRUE_CELLS)}
"""Every asset of ``release_marginals``: drawn and charged together, so materialised together."""
# One-way marginals of the same taps, whose released totals must roughly agree (warning check).
PLAUSIBLE_PAIRS = {"tap_on_time": "tap_on_loc", "tap_off_time": "tap_off_loc"}

CHECKED = ("Evaluated per (week, mode) partition in the release step, on each (date, mode) piece of it, before "
           "anything is stored: if any fails, the step fails and no release asset of the run is stored (the publish "
           "gate evaluates it again on what it publishes).")


def _designs(check: str) -> str:
    """Which release designs evaluate a check (a run evaluates only its design's checks)."""
    names = [str(d) for d, checks in DESIGN_CHECKS.items() if check in checks]
    listed = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    return f"Evaluated under the {listed} release design{'s' if len(names) > 1 else ''}."


CHECK_SPECS = [
    dg.AssetCheckSpec(check, asset=RELEASE_KEYS[m.name], blocking=True, partitions_def=period_mode,
                      description=f"{(function.__doc__ or check.replace('_', ' ')).strip()} {_designs(check)} "
                                  + CHECKED)
    for m in MARGINALS for check, function in BLOCKING_CHECKS.items()
] + [
    dg.AssetCheckSpec("plausible_totals", asset=RELEASE_KEYS[time], partitions_def=period_mode,
                      description=f"Released totals of {time} and {loc} differ by no more than suppression "
                                  "plus a 1e-6 Chernoff bound on the noise (warning only), per (week, mode) partition.")
    for time, loc in PLAUSIBLE_PAIRS.items()
]
"""One check per property and release asset, each evaluated per partition: the UI shows which property of which
partition failed. The checks of the other release design show as not executed."""


@dg.multi_asset(
    outs={
        **{
            m.name: dg.AssetOut(
                key_prefix=RELEASE_PREFIX,
                group_name="release",
                io_manager_key="private_parquet",
                description=f"DP release of the {m.name.replace('_', ' ')} marginal (not yet published).",
                metadata=column_schema(schema_for(m)),
                automation_condition=PERIOD,
                **labels("dp", "parquet"),
            )
            for m in MARGINALS
        },
        RELEASE_DRAWS: dg.AssetOut(
            group_name="release",
            io_manager_key="private_parquet",
            description="Which ledger draw stands for each released marginal of the partition: the publish gate "
                        "and the privacy statement are built from these ledger records.",
            metadata=column_schema(ReleaseDraws),
            automation_condition=PERIOD,
            **labels("dp", "parquet"),
        ),
        TRUE_CELLS: dg.AssetOut(
            group_name="partition",
            io_manager_key="private_parquet",
            description="Internal, NOT differentially private: true time x location counts per partition, all "
                        "trips and after bounding, for the checks and internal reports only; never published.",
            metadata=column_schema(TrueCells),
            automation_condition=PERIOD,
            **labels("internal", "parquet"),
        ),
    },
    ins={"trip_partitions": dg.AssetIn(), OVER_BOUND: dg.AssetIn(), "od_hierarchy": dg.AssetIn()},
    partitions_def=period_mode,
    backfill_policy=SINGLE_RUN,
    check_specs=CHECK_SPECS,
    can_subset=True,  # so that only the design's checks are evaluated; the assets themselves go together
    pool=LEDGER_POOL,
)
def release_marginals(
    context: dg.AssetExecutionContext,
    trip_partitions: PartitionFrames,
    trips_over_bound: PartitionFrames,
    od_hierarchy: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
    storage: OpalStorage,
    workers: PerDayWorkers,
):
    """Six marginals from one read of each (date, mode) piece of the run's weeks, exactly the days ``trip_partitions``
    recorded for each week, versioned by their days' records; every draw is charged to the ledger first. The six
    marginals of a week are drawn and charged together: a selection of some of them is refused before anything is
    charged. Under the hierarchy design with the daily totals on, its trees are pinned to the week's published totals
    (``od_hierarchy``'s draws, released first by ``release_od``)."""
    if set(context.selected_asset_keys) != RELEASE_ASSETS:  # (context.assets_def is the subset run)
        raise dg.Failure(description="the six marginals of a week are released together, with their draws and true "
                                     "cells: materialise all the assets of release_marginals (any one of them is "
                                     "selected with the others in the release job)")
    stops = reference.stops()
    plan = privacy_budget.plan(stops)
    params = {name: mechanism.describe() for name, mechanism in plan.mechanisms.items()}
    labels = frozenset(location_labels(stops))
    inputs = recorded_inputs(context, storage)
    keys = [f"{day}|{mode}" for period, mode in map(period_and_mode, run_partition_keys(context))
            for day in inputs[period].days]
    versions = {day: v for found in inputs.values() for day, v in found.scope_versions(plan.unit).items()}
    try:  # each piece's truths and true cells made in the per-day workers
        ledger = privacy_budget.ledger(storage)
        totals, versions = _published_totals(plan, od_hierarchy, keys, ledger, storage, versions)
        made = dict(zip(keys, map_calls(partition_truths, [
            (trip_partitions.path(key), trips_over_bound.path(date_and_mode(key)[0]), date_and_mode(key)[1],
             list(plan.mechanisms)) for key in keys], workers.count)))
        released_by_key = release_partitions(
            trip_partitions, plan, ledger, storage.private_dir, context.run.run_id,
            privacy_budget.key(storage, "fingerprint"), privacy_budget.fresh_draw, versions,
            {key: truths for key, (truths, _) in made.items()}, totals,
        )
    except LedgerError as err:
        raise dg.Failure(description=str(err)) from err
    cap = ledger.cap(plan.unit)
    spend = {row.scope: row.guarantee for row in ledger.summary(plan.unit)}
    frames = {m.name: {} for m in MARGINALS}
    cells = {key: made[key][1] for key in released_by_key}
    draws = ReleaseDrawsByPartition.split(pd.DataFrame(
        [{"partition": key, "marginal": name, "draw_id": r.draw.id, "charge_id": r.charge.id}
         for key, released in released_by_key.items() for name, r in released.items()],
        columns=["partition", "marginal", "draw_id", "charge_id"]))
    under_check, plausible = [], {time: [] for time in PLAUSIBLE_PAIRS}
    for key, released in released_by_key.items():
        day, mode = date_and_mode(key)
        scope_spend = spend[plan.scope(day, mode)]
        for name, result in released.items():
            frames[name][key] = result.frame
            under_check.append(ReleaseUnderCheck(key, result.marginal, result.frame, result.truth, params[name],
                                                 result.draw, result.charge, scope_spend, (cap.epsilon, cap.delta),
                                                 labels, plan.domains.get((mode, result.marginal.tap))))
        for time, loc in PLAUSIBLE_PAIRS.items():
            ok, figures = plausibility(released[time].frame, released[loc].frame, released[time].truth,
                                       released[loc].truth, params[time], params[loc])
            plausible[time].append({"partition": key, "passed": str(ok), **figures})
    problems = blocking_problems(under_check)
    failed = [p for found in problems.values() for p in found]
    _record_per_partition(context, released_by_key, spend, plan, problems, plausible, ledger)
    if failed:  # the checks gate: nothing of this run is stored, so nothing downstream can use it
        yield from _check_results(list(released_by_key), problems, plausible, plan.design)
        raise dg.Failure(description="blocking checks failed; no release asset was stored:\n" + "\n".join(failed[:20]))
    for marginal in MARGINALS:
        described = params[marginal.name]
        if described["seeded"]:
            context.log.warning(f"{marginal.name}: SEEDED noise - for tests only, never publish this release")
        yield dg.Output(
            frames[marginal.name],
            marginal.name,
            metadata={  # the same for every partition of the run
                "release_design": plan.design.value,
                "privacy_unit": plan.unit.value,
                "relation": plan.relation.value,
                **{k: dg.MetadataValue.json(v) if isinstance(v, dict) else v
                   for k, v in described.items() if k not in ("seeded", "cost")},
                "charge": _charge_text(plan.mechanisms[marginal.name].cost()),
                "noise_seeded": described["seeded"],
                "noise_source": "seeded PRNG (TEST ONLY)" if described["seeded"] else "OS CSPRNG (os.urandom)",
            },
        )
    yield dg.Output(draws, RELEASE_DRAWS, metadata={"ledger": ledger.ledger_id})
    yield dg.Output(cells, TRUE_CELLS)
    yield from _check_results(list(released_by_key), problems, plausible, plan.design)


def _published_totals(plan, od_hierarchy: PartitionFrames, keys: list[str], ledger, storage: OpalStorage,
                      versions: dict[str, str]) -> tuple[dict[str, tuple[int, int]] | None, dict[str, str]]:
    """Each (date, mode) piece's published (tap-on, tap-off) totals when the plan pins its trees to them (the
    hierarchy design with the OD hierarchy on), and the input versions with the totals' ledger draws in them: a week
    whose totals were drawn again is a new input (drawn and charged anew), never a reuse of trees pinned to the old
    ones; the draws are public ledger events. Refused, before anything is charged, for a date without them or with
    totals of another noise than the plan's."""
    if plan.design is not Design.HIERARCHY or plan.hierarchy["on"].root_sd is None:
        return None, versions
    present = {day: od_hierarchy[day] for day in sorted({date_and_mode(key)[0] for key in keys}) if day in od_hierarchy}
    found = stored_totals(present, ledger, storage.private_dir) if present else {}
    missing = sorted({date_and_mode(key)[0] for key in keys if date_and_mode(key) not in found})
    if missing:
        raise dg.Failure(description="the hierarchy design pins its trees to the published daily totals, and none "
                                     f"are drawn yet for {', '.join(missing)}: run release_od for the week first")
    if any(recorded["sigma"] != plan.hierarchy["on"].root_sd for _, recorded, _ in found.values()):
        raise dg.Failure(description="the daily totals were drawn with another noise than this plan's: release the "
                                     "week's OD products again with the same settings (release_od) first")
    draws: dict[str, list[int]] = {}
    for (day, _), (_, _, draw_id) in found.items():
        draws.setdefault(versions[day], []).append(draw_id)
    pinned = {version: f"{version}+totals:{','.join(map(str, sorted(ids)))}" for version, ids in draws.items()}
    return ({f"{day}|{mode}": counts for (day, mode), (counts, _, _) in found.items()},
            {day: pinned[version] for day, version in versions.items()})


def _record_per_partition(context, released_by_key: dict, spend: dict, plan, problems: dict[str, list[str]],
                          plausible: dict[str, list[dict]], ledger) -> None:
    """Per-(week, mode) metadata, folded into each partition's materialisation (no event of its own), over its
    (date, mode) pieces: rows, its own blocking checks' outcome, its ledger draws and the largest spend of its scopes,
    and the warning check's outcome."""
    warnings = {(row["partition"], time): row for time, rows in plausible.items() for row in rows}
    by_partition: dict[str, list[str]] = {}
    for key in released_by_key:
        day, mode = date_and_mode(key)
        by_partition.setdefault(f"{mode}|{week_of(day)}", []).append(key)
    person = {f"person_{k}": float(v) for k, v in (person_account(ledger) or {}).items()
              if k in ("epsilon_spent", "share_of_cap", "epsilon_remaining")}
    for partition, keys in by_partition.items():
        scopes = [spend[plan.scope(*date_and_mode(k))] for k in keys]
        for m in MARGINALS:
            results = [released_by_key[k][m.name] for k in keys]
            mine = [f"{check}: {p}" for check, found in problems.items() for p in found
                    if any(p.startswith(f"{k} {m.name}:") for k in keys)]
            suppressed = {"bins_suppressed (internal, not DP)": sum(len(r.truth) - len(r.frame) for r in results)} \
                if not plan.design.consistent else {}  # the public-domain design lists cells absent from the data too
            rows = [warnings[k, m.name] for k in keys if (k, m.name) in warnings]
            charges = sorted({(r.charge.id, r.charge.unit, r.charge.scope) for r in results})
            context.add_asset_metadata({
                "dagster/row_count": sum(len(r.frame) for r in results),
                **suppressed,
                "dates": len(keys),
                "blocking_checks": "all passed" if not mine else dg.MetadataValue.md("\n".join(mine)),
                "ledger": f"draws {', '.join(str(r.draw.id) for r in results)} ("
                          + "; ".join(f"charge {c} {u} scope {scope}" for c, u, scope in charges)
                          + f"; {', '.join(sorted({r.decision for r in results}))})",
                "scope_epsilon": max(g.epsilon for g in scopes),
                "scope_delta": max(g.delta for g in scopes),
                **({"scope_rho": max(g.rho for g in scopes)} if all(g.rho is not None for g in scopes) else {}),
                **person,
                **({"plausible_totals": "passed" if all(r["passed"] == "True" for r in rows)
                    else "WARNING: totals disagree"} if rows else {}),
            }, asset_key=RELEASE_KEYS[m.name], partition_key=partition)
        context.add_asset_metadata({"dagster/row_count": sum(len(released_by_key[k]) for k in keys)},
                                   asset_key=RELEASE_DRAWS, partition_key=partition)
        context.add_asset_metadata({"dagster/row_count": len(keys)}, asset_key=TRUE_CELLS, partition_key=partition)


def _charge_text(cost) -> str:
    """A marginal's charge as its measure states it: rho for zCDP (never "epsilon 0"), epsilon otherwise."""
    if cost.measure == "zcdp":
        return f"zCDP rho={cost.rho:.6g} with delta={cost.delta:.3g} (its epsilon is the week scope's composition)"
    return f"epsilon={cost.epsilon:.6g} delta={cost.delta:.3g}"


def _check_results(keys: list[str], problems: dict[str, list[str]], plausible: dict[str, list[dict]],
                   design: Design):
    """One evaluation per check of the design, release asset and (week, mode) partition, over the partition's
    (date, mode) pieces ``keys``: its failures, at most 20 of them listed."""
    partitions: dict[str, list[str]] = {}
    for key in keys:
        day, mode = date_and_mode(key)
        partitions.setdefault(f"{mode}|{week_of(day)}", []).append(key)
    for marginal in MARGINALS:
        for partition, pieces in partitions.items():
            prefixes = tuple(f"{piece} {marginal.name}:" for piece in pieces)
            for check, found in problems.items():
                failed = [p for p in found if p.startswith(prefixes)]
                yield dg.AssetCheckEvaluation(
                    asset_key=RELEASE_KEYS[marginal.name], check_name=check, passed=not failed, blocking=True,
                    severity=dg.AssetCheckSeverity.ERROR, partition=partition,
                    metadata={"release_design": str(design), "dates": len(pieces), "failures": len(failed),
                              "first_failures": dg.MetadataValue.md("\n".join(failed[:20]) or "none")})
    for time, rows in plausible.items():
        for partition, pieces in partitions.items():
            mine = [r for r in rows if r["partition"] in pieces]
            yield dg.AssetCheckEvaluation(
                asset_key=RELEASE_KEYS[time], check_name="plausible_totals", blocking=False,
                passed=all(r["passed"] == "True" for r in mine), severity=dg.AssetCheckSeverity.WARN,
                partition=partition,
                metadata={"dates": len(pieces), "by_date": partition_table(mine),
                          "compared_with": BY_NAME[PLAUSIBLE_PAIRS[time]].name})


LEDGER_COLUMNS = {"unit": "string", "scope": "string", "epsilon": "float", "delta": "float", "rho": "float",
                  "charges": "int", "draws": "int", "pending": "int", "cap_epsilon": "float", "cap_delta": "float"}


def ledger_table(summary: pd.DataFrame) -> dg.TableMetadataValue:
    """The ledger as a table the UI sorts and filters: one row per (unit, scope); rho empty where the scope's
    charges are not all zCDP."""
    cast = {"string": str, "int": int, "float": float}

    def cell(value, kind: str):
        return None if kind == "float" and math.isnan(value) else cast[kind](value)

    return dg.MetadataValue.table(
        [dg.TableRecord({name: cell(row[name], kind) for name, kind in LEDGER_COLUMNS.items()})
         for row in summary.to_dict("records")],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in LEDGER_COLUMNS.items()]))


@dg.asset(
    group_name="release",
    deps=[*RELEASE_KEYS.values(), RELEASE_DRAWS],
    io_manager_key="private_parquet",
    metadata=column_schema(LedgerSummary),
    pool=LEDGER_POOL,
    **labels("internal", "sqlite"),
)
def privacy_ledger(privacy_budget: PrivacyBudget, storage: OpalStorage) -> dg.Output[pd.DataFrame]:
    """What every ledger scope costs one privacy unit, against the cap in force, from the persistent ledger."""
    ledger = privacy_budget.ledger(storage)
    summary = LedgerSummary.validate(pd.DataFrame(
        [{"unit": r.unit, "scope": r.scope, "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta,
          "rho": math.nan if r.guarantee.rho is None else r.guarantee.rho, "cap_epsilon": r.cap.epsilon, "cap_delta": r.cap.delta, "charges": r.charges,
          "draws": r.draws, "pending": r.pending, "last_charge_at": r.last_charge_at} for r in ledger.summary()],
        columns=list(LedgerSummary.to_schema().columns),
    ))
    unit = privacy_budget.unit
    cap = ledger.cap(unit)
    mine = summary.loc[summary["unit"] == unit.value]
    return dg.Output(
        summary,
        metadata={
            "ledger_id": ledger.ledger_id,
            "privacy_unit": unit.value,
            "scopes": len(mine),
            "cap_epsilon": cap.epsilon,
            "cap_delta": cap.delta,
            "cap_set": f"{cap.action} {cap.set_at}: {cap.reason}",
            "max_epsilon_per_unit": float(mine["epsilon"].max()) if len(mine) else 0.0,
            "max_delta_per_unit": float(mine["delta"].max()) if len(mine) else 0.0,
            "ledger": ledger_table(summary),
        },
    )
