"""The release: six DP marginals per (date, mode) partition under the configured privacy unit, charged to the
privacy ledger, with blocking consistency checks evaluated in the same step (the true histograms are already
in memory)."""

import math

import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.core import LedgerError
from opal_dp.defs.budget import PrivacyBudget
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.metadata import SINGLE_RUN, column_schema, partition_table
from opal_dp.defs.partitions import date_and_mode, date_mode
from opal_dp.defs.private_stages import OVER_BOUND
from opal_dp.defs.resources import ReferenceNetwork
from opal_dp.prep.binning import location_labels
from opal_dp.core.accounting import Guarantee
from opal_dp.prep.binning import split_by_mode
from opal_dp.release.checks import BLOCKING_CHECKS, ReleaseUnderCheck, blocking_problems, plausibility
from opal_dp.release.engine import ReleasedMarginal, release_partitions
from opal_dp.release.marginals import BY_NAME, MARGINALS, true_cells
from opal_dp.release.schemas import LedgerSummary, ReleaseDraws, TrueCells, schema_for

RELEASE_PREFIX = "release"
TRUE_CELLS, RELEASE_DRAWS = "true_cells", "release_draws"
RELEASE_KEYS = {m.name: dg.AssetKey([RELEASE_PREFIX, m.name]) for m in MARGINALS}
# One-way marginals of the same taps, whose released totals must roughly agree (warning check).
PLAUSIBLE_PAIRS = {"tap_on_time": "tap_on_loc", "tap_off_time": "tap_off_loc"}

CHECK_SPECS = [
    dg.AssetCheckSpec(check, asset=RELEASE_KEYS[m.name], blocking=True, partitions_def=date_mode,
                      description=(BLOCKING_CHECKS[check].__doc__ or check.replace("_", " ")).strip())
    for m in MARGINALS
    for check in BLOCKING_CHECKS
] + [
    dg.AssetCheckSpec("plausible_totals", asset=RELEASE_KEYS[time], partitions_def=date_mode,
                      description=f"Released totals of {time} and {loc} differ by no more than suppression "
                                  "plus a 1e-6 Chernoff bound on the noise (warning only).")
    for time, loc in PLAUSIBLE_PAIRS.items()
]


@dg.multi_asset(
    outs={
        **{
            m.name: dg.AssetOut(
                key_prefix=RELEASE_PREFIX,
                group_name="release",
                io_manager_key="private_parquet",
                description=f"DP release of the {m.name.replace('_', ' ')} marginal (not yet published).",
                metadata=column_schema(schema_for(m)),
            )
            for m in MARGINALS
        },
        RELEASE_DRAWS: dg.AssetOut(
            group_name="release",
            io_manager_key="private_parquet",
            description="Which ledger draw stands for each released marginal of the partition: the publish gate "
                        "and the privacy statement are built from these ledger records.",
            metadata=column_schema(ReleaseDraws),
        ),
        TRUE_CELLS: dg.AssetOut(
            group_name="partition",
            io_manager_key="private_parquet",
            description="True time x location counts per partition, all trips and after bounding (NOT private; "
                        "for checks and internal reports only, never published).",
            metadata=column_schema(TrueCells),
        ),
    },
    ins={"trip_partitions": dg.AssetIn(), OVER_BOUND: dg.AssetIn()},
    partitions_def=date_mode,
    backfill_policy=SINGLE_RUN,
    check_specs=CHECK_SPECS,
)
def release_marginals(
    context: dg.AssetExecutionContext,
    trip_partitions: PartitionFrames,
    trips_over_bound: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
):
    """Six marginals from one read of each partition; every draw is charged to the ledger first."""
    plan = privacy_budget.plan()
    params = {name: mechanism.describe() for name, mechanism in plan.mechanisms.items()}
    labels = frozenset(location_labels(reference.stops()))
    try:  # trip_partitions holds exactly this run's partitions, loaded one at a time
        ledger = privacy_budget.ledger()
        released_by_key = release_partitions(
            trip_partitions, plan, ledger, settings.private_dir(), context.run.run_id,
            privacy_budget.fingerprint_key(), privacy_budget.fresh_draw,
        )
    except LedgerError as err:
        raise dg.Failure(description=str(err)) from err
    cap = ledger.cap(plan.unit)
    spend = {row.scope: row.guarantee for row in ledger.summary(plan.unit)}
    frames, cells, draws = {m.name: {} for m in MARGINALS}, {}, {}
    rows = {m.name: [] for m in MARGINALS}
    under_check, plausible = [], {time: [] for time in PLAUSIBLE_PAIRS}
    over_by_day: dict[str, pd.DataFrame] = {}
    for key, released in released_by_key.items():
        day, mode = date_and_mode(key)
        if day not in over_by_day:
            over_by_day = {day: trips_over_bound[day]}  # keys are date-major: one day in memory at a time
        truths = {name: result.truth for name, result in released.items()}
        cells[key] = TrueCells.validate(true_cells(truths, split_by_mode(over_by_day[day], mode)))
        draws[key] = ReleaseDraws.validate(pd.DataFrame(
            {"marginal": list(released), "draw_id": [r.draw.id for r in released.values()],
             "charge_id": [r.charge.id for r in released.values()]}))
        scope_spend = spend[plan.scope(day, mode)]
        for name, result in released.items():
            frames[name][key] = result.frame
            rows[name].append(_partition_row(key, result, scope_spend))
            under_check.append(ReleaseUnderCheck(key, result.marginal, result.frame, result.truth, params[name],
                                                 result.draw, result.charge, scope_spend, (cap.epsilon, cap.delta),
                                                 labels))
            context.add_asset_metadata({"bins_released": len(result.frame), "ledger_draw": result.draw.id},
                                       asset_key=RELEASE_KEYS[name], partition_key=key)
        for time, loc in PLAUSIBLE_PAIRS.items():
            ok, figures = plausibility(released[time].frame, released[loc].frame, released[time].truth,
                                       released[loc].truth, params[time], params[loc])
            plausible[time].append({"partition": key, "passed": str(ok), **figures})
    for marginal in MARGINALS:
        described = params[marginal.name]
        if described["seeded"]:
            context.log.warning(f"{marginal.name}: SEEDED noise - for tests only, never publish this release")
        yield dg.Output(
            frames[marginal.name],
            marginal.name,
            metadata={
                "privacy_unit": plan.unit.value,
                "relation": plan.relation.value,
                **{k: dg.MetadataValue.json(v) if isinstance(v, dict) else v
                   for k, v in described.items() if k != "seeded"},
                "noise_seeded": described["seeded"],
                "noise_source": "seeded PRNG (TEST ONLY)" if described["seeded"] else "OS CSPRNG (os.urandom)",
                "by_partition (bins suppressed: internal, not DP)": partition_table(rows[marginal.name]),
            },
        )
    yield dg.Output(draws, RELEASE_DRAWS, metadata={"ledger": ledger.ledger_id})
    yield dg.Output(cells, TRUE_CELLS, metadata={"partitions": len(cells)})
    yield from _check_results(blocking_problems(under_check), plausible)


def _partition_row(key: str, result: ReleasedMarginal, spend: Guarantee) -> dict:
    return {
        "partition": key,
        "bins_released": len(result.frame),
        "bins_suppressed": len(result.truth) - len(result.frame),  # internal UI only, never published
        "ledger": result.decision,
        "ledger_draw": result.draw.id,
        "ledger_scope": result.charge.scope,
        "scope_epsilon": spend.epsilon,
        "scope_delta": spend.delta,
    }


def _check_results(problems: dict[str, list[str]], plausible: dict[str, list[dict]]):
    for marginal in MARGINALS:
        prefix = f"{marginal.name}:"
        for check, found in problems.items():
            mine = [p for p in found if p.split(" ", 1)[1].startswith(prefix)]
            yield dg.AssetCheckResult(
                asset_key=RELEASE_KEYS[marginal.name],
                check_name=check,
                passed=not mine,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"failures": len(mine), "first_failures": dg.MetadataValue.md("\n".join(mine[:20]) or "none")},
            )
    for time, rows in plausible.items():
        yield dg.AssetCheckResult(
            asset_key=RELEASE_KEYS[time],
            check_name="plausible_totals",
            passed=all(r["passed"] == "True" for r in rows),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"by_partition": partition_table(rows), "compared_with": BY_NAME[PLAUSIBLE_PAIRS[time]].name},
        )


@dg.asset(
    group_name="release",
    deps=[*RELEASE_KEYS.values(), RELEASE_DRAWS],
    io_manager_key="private_parquet",
    metadata=column_schema(LedgerSummary),
)
def privacy_ledger(privacy_budget: PrivacyBudget) -> dg.Output[pd.DataFrame]:
    """What every ledger scope costs one privacy unit, against the cap in force, from the persistent ledger."""
    ledger = privacy_budget.ledger()
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
            "ledger": dg.MetadataValue.md(summary.to_markdown(index=False) if len(summary) else "empty"),
        },
    )
