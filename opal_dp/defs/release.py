"""The SBH release: six DP marginals per (date, mode) partition, charged to the privacy ledger, with
blocking consistency checks evaluated in the same step (the true histograms are already in memory)."""

import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.core import LedgerError
from opal_dp.defs.budget import PrivacyBudget
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.metadata import SINGLE_RUN, column_schema, partition_table
from opal_dp.defs.partitions import date_mode
from opal_dp.defs.resources import ReferenceNetwork
from opal_dp.prep.binning import location_labels
from opal_dp.release.checks import BLOCKING_CHECKS, ReleaseUnderCheck, blocking_problems, plausibility
from opal_dp.release.engine import ReleasedMarginal, release_partitions
from opal_dp.release.marginals import BY_NAME, MARGINALS, true_cells
from opal_dp.release.schemas import LedgerSummary, TrueCells, schema_for

RELEASE_PREFIX = "release"
TRUE_CELLS = "true_cells"
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
                description=f"SBH release of the {m.name.replace('_', ' ')} marginal (DP; not yet published).",
                metadata=column_schema(schema_for(m)),
            )
            for m in MARGINALS
        },
        TRUE_CELLS: dg.AssetOut(
            group_name="partition",
            io_manager_key="private_parquet",
            description="True time x location counts per partition (NOT private; for checks and internal "
                        "reports only, never published).",
            metadata=column_schema(TrueCells),
        ),
    },
    ins={"trip_partitions": dg.AssetIn()},
    partitions_def=date_mode,
    backfill_policy=SINGLE_RUN,
    check_specs=CHECK_SPECS,
)
def sbh_release(
    context: dg.AssetExecutionContext,
    trip_partitions: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
):
    """Six marginals from one read of each partition; every draw is charged to the ledger first."""
    mechanisms = privacy_budget.mechanisms()
    params = {name: mechanism.describe() for name, mechanism in mechanisms.items()}
    ledger = privacy_budget.ledger()
    labels = frozenset(location_labels(reference.stops()))
    store = settings.private_dir() / "releases"
    frames = {m.name: {} for m in MARGINALS}
    cells = {}
    rows = {m.name: [] for m in MARGINALS}
    under_check, plausible = [], {time: [] for time in PLAUSIBLE_PAIRS}
    try:  # trip_partitions holds exactly this run's partitions, loaded one at a time
        released_by_key = release_partitions(
            trip_partitions, mechanisms, ledger, store, context.run.run_id, privacy_budget.fresh_draw
        )
    except LedgerError as err:
        raise dg.Failure(description=str(err)) from err
    entries = {e.id: e for e in ledger.entries()}
    spending = {row["partition"]: row for row in ledger.summary()}
    for key, released in released_by_key.items():
        cells[key] = TrueCells.validate(true_cells({name: result.truth for name, result in released.items()}))
        spent = (spending[key]["epsilon_spent"], spending[key]["delta_spent"])
        left = (spending[key]["epsilon_remaining"], spending[key]["delta_remaining"])
        for name, result in released.items():
            frames[name][key] = result.frame
            rows[name].append(_partition_row(key, result, spent, left))
            under_check.append(
                ReleaseUnderCheck(key, result.marginal, result.frame, result.truth, params[name],
                                  entries.get(result.entry_id), spent, privacy_budget.partition_cap, labels)
            )
        for time, loc in PLAUSIBLE_PAIRS.items():
            ok, figures = plausibility(released[time].frame, released[loc].frame, released[time].truth,
                                       released[loc].truth, mechanisms[time].scale, mechanisms[loc].scale)
            plausible[time].append({"partition": key, "passed": str(ok), **figures})
    for marginal in MARGINALS:
        described = params[marginal.name]
        if described["seeded"]:
            context.log.warning(f"{marginal.name}: SEEDED noise - for tests only, never publish this release")
        yield dg.Output(
            frames[marginal.name],
            marginal.name,
            metadata={
                **{k: v for k, v in described.items() if k != "seeded"},
                "noise_seeded": described["seeded"],
                "noise_source": "seeded PRNG (TEST ONLY)" if described["seeded"] else "OS CSPRNG (os.urandom)",
                "bins_released": sum(r["bins_released"] for r in rows[marginal.name]),
                "by_partition": partition_table(rows[marginal.name]),
            },
        )
    yield dg.Output(cells, TRUE_CELLS, metadata={"partitions": len(cells)})
    yield from _check_results(blocking_problems(under_check), plausible)


def _partition_row(key: str, result: ReleasedMarginal, spent: tuple, left: tuple) -> dict:
    return {
        "partition": key,
        "bins_released": len(result.frame),
        "bins_suppressed": len(result.truth) - len(result.frame),  # internal UI only, never published
        "reused_stored_release": str(result.reused),
        "ledger_entry": result.entry_id,
        "partition_epsilon_spent": spent[0],
        "partition_epsilon_remaining": left[0],
        "partition_delta_spent": spent[1],
        "partition_delta_remaining": left[1],
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
    deps=list(RELEASE_KEYS.values()),
    io_manager_key="private_parquet",
    metadata=column_schema(LedgerSummary),
)
def privacy_ledger(privacy_budget: PrivacyBudget) -> dg.Output[pd.DataFrame]:
    """Spent and remaining (epsilon, delta) per (date, mode) partition, read from the persistent ledger."""
    columns = list(LedgerSummary.to_schema().columns)
    summary = LedgerSummary.validate(pd.DataFrame(privacy_budget.ledger().summary(), columns=columns))
    cap_epsilon, cap_delta = privacy_budget.partition_cap
    return dg.Output(
        summary,
        metadata={
            "partitions": len(summary),
            "cap_epsilon": cap_epsilon,
            "cap_delta": cap_delta,
            "max_epsilon_spent": float(summary["epsilon_spent"].max()) if len(summary) else 0.0,
            "ledger": dg.MetadataValue.md(summary.to_markdown(index=False) if len(summary) else "empty"),
        },
    )
