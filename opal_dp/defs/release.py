"""The SBH release: six DP marginals per (date, mode) partition, charged to the privacy ledger."""


import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.core.ledger import LedgerError
from opal_dp.defs.budget import PrivacyBudget
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.metadata import SINGLE_RUN, column_schema, partition_table
from opal_dp.defs.partitions import date_mode
from opal_dp.release.engine import release_partition
from opal_dp.release.marginals import MARGINALS
from opal_dp.release.schemas import schema_for

RELEASE_PREFIX = "release"
RELEASE_KEYS = [dg.AssetKey([RELEASE_PREFIX, m.name]) for m in MARGINALS]


@dg.multi_asset(
    outs={
        m.name: dg.AssetOut(
            key_prefix=RELEASE_PREFIX,
            group_name="release",
            io_manager_key="private_parquet",
            description=f"SBH release of the {m.name.replace('_', ' ')} marginal (DP; not yet published).",
            metadata=column_schema(schema_for(m)),
        )
        for m in MARGINALS
    },
    ins={"trip_partitions": dg.AssetIn()},
    partitions_def=date_mode,
    backfill_policy=SINGLE_RUN,
)
def sbh_release(
    context: dg.AssetExecutionContext,
    trip_partitions: PartitionFrames,
    privacy_budget: PrivacyBudget,
):
    """Six marginals from one read of each partition; every draw is charged to the ledger first."""
    mechanisms = privacy_budget.mechanisms()
    ledger = privacy_budget.ledger()
    store = settings.private_dir() / "releases"
    frames = {m.name: {} for m in MARGINALS}
    rows = {m.name: [] for m in MARGINALS}
    for key in map(str, context.partition_keys):
        try:
            released = release_partition(
                key, trip_partitions[key], mechanisms, ledger, store, context.run_id, privacy_budget.fresh_draw
            )
        except LedgerError as err:
            raise dg.Failure(description=str(err)) from err
        eps_spent, delta_spent = ledger.spent(key)
        eps_left, delta_left = ledger.remaining(key)
        for name, result in released.items():
            frames[name][key] = result.frame
            rows[name].append(
                {
                    "partition": key,
                    "bins_released": len(result.frame),
                    "reused_stored_release": str(result.reused),
                    "ledger_entry": result.entry_id,
                    "partition_epsilon_spent": eps_spent,
                    "partition_epsilon_remaining": eps_left,
                    "partition_delta_spent": delta_spent,
                    "partition_delta_remaining": delta_left,
                }
            )
    for marginal in MARGINALS:
        params = mechanisms[marginal.name].describe()
        if params["seeded"]:
            context.log.warning(f"{marginal.name}: SEEDED noise - for tests only, never publish this release")
        yield dg.Output(
            frames[marginal.name],
            marginal.name,
            metadata={
                **{k: v for k, v in params.items() if k != "seeded"},
                "noise_seeded": params["seeded"],
                "noise_source": "seeded PRNG (TEST ONLY)" if params["seeded"] else "OS CSPRNG (os.urandom)",
                "bins_released": sum(r["bins_released"] for r in rows[marginal.name]),
                "by_partition": partition_table(rows[marginal.name]),
            },
        )


@dg.asset(
    group_name="release",
    deps=RELEASE_KEYS,
    io_manager_key="private_parquet",
)
def privacy_ledger(privacy_budget: PrivacyBudget) -> dg.Output[pd.DataFrame]:
    """Spent and remaining (epsilon, delta) per (date, mode) partition, read from the persistent ledger."""
    summary = pd.DataFrame(privacy_budget.ledger().summary())
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
