"""Publish: the released marginals become the open-data files and their privacy statement."""

from datetime import datetime, timezone

import dagster as dg

from opal_dp import settings
from opal_dp.defs.budget import PrivacyBudget
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.release import RELEASE_KEYS, TRUE_CELLS
from opal_dp.defs.resources import ReferenceNetwork
from opal_dp.prep.binning import location_labels
from opal_dp.release.checks import ReleaseUnderCheck, blocking_problems, standing_entry
from opal_dp.release.marginals import MARGINALS, histograms_from_cells
from opal_dp.release.publish import FILES, TABLES, publish, to_open_data
from opal_dp.release.statement import privacy_statement, render_markdown


def _gate(
    releases: dict[str, PartitionFrames],
    cells: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
) -> None:
    """Re-run every blocking check on exactly what is about to be published; refuse on any failure.

    The release step evaluated the same checks, but publishing is a separate run: checking again here
    leaves no gap between what was checked and what goes out (configuration changes included).
    """
    params = {name: mechanism.describe() for name, mechanism in privacy_budget.mechanisms().items()}
    labels = frozenset(location_labels(reference.stops()))
    ledger = privacy_budget.ledger()
    entries = ledger.entries()
    spending = {row["partition"]: (row["epsilon_spent"], row["delta_spent"]) for row in ledger.summary()}

    def under_check():
        for key in cells:
            truths, mine = histograms_from_cells(cells[key]), [e for e in entries if e.partition == key]
            for m in MARGINALS:
                yield ReleaseUnderCheck(key, m, releases[m.name][key], truths[m.name], params[m.name],
                                        standing_entry(mine, m.name), spending.get(key, (0.0, 0.0)),
                                        privacy_budget.partition_cap, labels)

    failed = {name: found for name, found in blocking_problems(under_check()).items() if found}
    if failed:
        lines = [f"{name}: {problem}" for name, found in failed.items() for problem in found[:5]]
        raise dg.Failure(
            description="publishing refused, blocking checks failed:\n" + "\n".join(lines),
            metadata={"failed_checks": dg.MetadataValue.json({k: len(v) for k, v in failed.items()})},
        )


@dg.asset(
    group_name="publish",
    deps=["privacy_audit"],
    ins={TRUE_CELLS: dg.AssetIn(), **{m.name: dg.AssetIn(key=RELEASE_KEYS[m.name]) for m in MARGINALS}},
    description="Open-data CSVs (time-loc, time, loc) plus privacy.json/PRIVACY.md, published atomically.",
)
def published_release(
    context: dg.AssetExecutionContext,
    true_cells: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
    **releases: PartitionFrames,
) -> dg.MaterializeResult:
    """Check, build the tables and the statement, publish them as a new release, repoint ``latest``."""
    _gate(releases, true_cells, privacy_budget, reference)
    now = datetime.now(timezone.utc)
    release_id = f"{now:%Y%m%dT%H%M%SZ}-{context.run.run_id[:8]}"
    statement = privacy_statement(
        privacy_budget.mechanisms(),
        sorted(releases[MARGINALS[0].name]),
        privacy_budget.relation,
        privacy_budget.partition_cap,
        release_id,
        now.isoformat(timespec="seconds"),
    )
    if statement["noise_seeded"]:
        context.log.warning("SEEDED noise: this release is NOT private; never hand it out")
    tables = to_open_data(releases)
    folder = publish(settings.published_dir(), tables, statement, release_id)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(folder)),
            "release_id": release_id,
            "files": dg.MetadataValue.json(list(FILES)),
            **{f"rows_{table}": len(tables[table]) for table in TABLES},
            "epsilon_per_partition": statement["per_partition"]["epsilon"],
            "delta_per_partition": statement["per_partition"]["delta"],
            "noise_seeded": statement["noise_seeded"],
            "privacy_statement": dg.MetadataValue.md(render_markdown(statement)),
        }
    )
