"""Publish: the released marginals become the open-data files and their privacy statement, built from the
ledger records of the draws that produced them."""

import json
from datetime import datetime, timezone

import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.defs.budget import PrivacyBudget
from opal_dp.defs.io import PartitionFrames
from opal_dp.defs.release import RELEASE_DRAWS, RELEASE_KEYS, TRUE_CELLS
from opal_dp.defs.resources import ReferenceNetwork
from opal_dp.prep.binning import location_labels
from opal_dp.release.checks import ReleaseUnderCheck, blocking_problems
from opal_dp.release.marginals import BOUNDED, MARGINALS, histograms_from_cells, same_bins
from opal_dp.release.publish import FILES, TABLES, publish, to_open_data
from opal_dp.release.statement import (
    LedgerEvidence,
    StatementError,
    ledger_evidence,
    privacy_statement,
    render_markdown,
)
from opal_dp.storage import read_parquet


def _gate(
    releases: dict[str, PartitionFrames],
    cells: PartitionFrames,
    standing: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
) -> tuple[LedgerEvidence, dict[str, dict[str, pd.DataFrame]]]:
    """Check exactly what is about to be published against the ledger; refuse on any failure.

    For every (partition, marginal): the draw that stands for it must be a completed ledger draw whose stored
    file equals the release asset, and every blocking check must pass on it with the mechanism the ledger
    charged. The release step evaluated the same checks, but publishing is a separate run: checking again
    here leaves no gap between what was checked and what goes out.
    """
    ledger = privacy_budget.ledger()
    labels = frozenset(location_labels(reference.stops()))
    loaded = {m.name: {} for m in MARGINALS}
    draw_ids, problems = {}, []
    for key in cells:
        for row in standing[key].itertuples():
            draw_ids[key, row.marginal] = int(row.draw_id)
    try:
        evidence = ledger_evidence(ledger, draw_ids)
    except StatementError as err:
        raise dg.Failure(description=f"publishing refused: {err}") from err
    caps = {u: ledger.cap(u) for u in {c.unit for c in evidence.charges.values()}}
    spend = {(s.unit, s.scope): s.guarantee for s in evidence.scopes}

    def under_check():
        for key in cells:
            truths = histograms_from_cells(cells[key], column=BOUNDED)
            for m in MARGINALS:
                draw = evidence.draws[key, m.name]
                charge = evidence.charges[draw.charge_id]
                frame = releases[m.name][key]
                if draw.status != "complete" or not same_bins(read_parquet(settings.private_dir() / draw.release_ref), frame):
                    problems.append(f"{key} {m.name}: the release asset is not the ledger's stored draw {draw.id}")
                loaded[m.name][key] = frame
                cap = caps[charge.unit]
                yield ReleaseUnderCheck(key, m, frame, truths[m.name], json.loads(charge.mechanism),
                                        draw, charge, spend[charge.unit, charge.scope], (cap.epsilon, cap.delta),
                                        labels)

    failed = {name: found for name, found in blocking_problems(under_check()).items() if found}
    if problems:
        failed["matches_ledger_draw"] = problems
    if failed:
        lines = [f"{name}: {problem}" for name, found in failed.items() for problem in found[:5]]
        raise dg.Failure(
            description="publishing refused, blocking checks failed:\n" + "\n".join(lines),
            metadata={"failed_checks": dg.MetadataValue.json({k: len(v) for k, v in failed.items()})},
        )
    return evidence, loaded


@dg.asset(
    group_name="publish",
    deps=["privacy_audit"],
    ins={TRUE_CELLS: dg.AssetIn(), RELEASE_DRAWS: dg.AssetIn(),
         **{m.name: dg.AssetIn(key=RELEASE_KEYS[m.name]) for m in MARGINALS}},
    description="Open-data CSVs (time-loc, time, loc) plus privacy.json/PRIVACY.md built from the ledger, "
                "published atomically.",
)
def published_release(
    context: dg.AssetExecutionContext,
    true_cells: PartitionFrames,
    release_draws: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
    **releases: PartitionFrames,
) -> dg.MaterializeResult:
    """Check, build the tables and the statement, publish them as a new release, repoint ``latest``."""
    evidence, loaded = _gate(releases, true_cells, release_draws, privacy_budget, reference)
    now = datetime.now(timezone.utc)
    release_id = f"{now:%Y%m%dT%H%M%SZ}-{context.run.run_id[:8]}"
    try:
        statement = privacy_statement(evidence, sorted(true_cells), release_id, now.isoformat(timespec="seconds"))
    except StatementError as err:
        raise dg.Failure(description=f"publishing refused: {err}") from err
    if statement["noise_seeded"]:
        context.log.warning("SEEDED noise: this release is NOT private; never hand it out")
    tables = to_open_data(loaded)
    folder = publish(settings.published_dir(), tables, statement, release_id)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(folder)),
            "release_id": release_id,
            "files": dg.MetadataValue.json(list(FILES)),
            **{f"rows_{table}": len(tables[table]) for table in TABLES},
            "privacy_unit": statement["privacy_unit"]["unit"],
            "epsilon_per_unit": statement["guarantee"]["epsilon"],
            "delta_per_unit": statement["guarantee"]["delta"],
            "per": statement["guarantee"]["per"],
            "noise_seeded": statement["noise_seeded"],
            "privacy_statement": dg.MetadataValue.md(render_markdown(statement)),
        }
    )
