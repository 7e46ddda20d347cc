"""Publish: the released marginals become the open-data files and their privacy statement, built from the
ledger records of the draws that produced them."""

import json
from datetime import datetime, timedelta, timezone

import dagster as dg
import pandas as pd

from opal_dp.core import PrivacyLedger
from opal_dp.defs.marginals.release import RELEASE_DRAWS, RELEASE_KEYS, TRUE_CELLS
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import LEDGER_POOL, labels
from opal_dp.defs.shared.partitions import date_and_mode
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.binning import location_labels
from opal_dp.prep.failed_days import failed_days
from opal_dp.prep.sequences import TripAlphabet
from opal_dp.release.marginals.checks import ReleaseUnderCheck, blocking_problems
from opal_dp.release.marginals.tables import BOUNDED, MARGINALS, histograms_from_cells, same_bins
from opal_dp.release.od.hierarchy import OdDomain, hierarchy_plan
from opal_dp.release.od.hierarchy_publish import hierarchy_gate
from opal_dp.release.od.publish import od_gate, od_statement, od_tables
from opal_dp.release.statement.person import person_section
from opal_dp.release.marginals.public_domain import Domain, domain
from opal_dp.release.options import Design
from opal_dp.release.publish import TABLES, files_of, publish, to_open_data
from opal_dp.release.page.catalogue import PageSettings
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.build import (
    LedgerEvidence,
    StatementError,
    ledger_evidence,
    privacy_statement,
)
from opal_dp.private_files import read_parquet
from opal_dp.simulate.sample import sample_days


def complete_partitions(
    releases: dict[str, PartitionFrames], cells: PartitionFrames, standing: PartitionFrames, ledger: PrivacyLedger
) -> tuple[dict[tuple[str, str], int], list[str]]:
    """The draws (partition, marginal) -> draw id of every partition whose release is complete (every asset
    stored, every draw complete in the ledger), and the registered partitions that are not (pending)."""
    keys = materialised(cells, standing, *releases.values())
    draw_ids = {(key, row.marginal): int(row.draw_id) for key in keys for row in standing[key].itertuples()}
    done = {d.id for d in ledger.draws(draw_ids.values()) if d.status == "complete"}
    complete = [k for k in keys if all(draw_ids[k, m.name] in done for m in MARGINALS if (k, m.name) in draw_ids)
                and all((k, m.name) in draw_ids for m in MARGINALS)]
    pending = sorted(set(map(str, cells)) - set(complete))
    return {pair: i for pair, i in draw_ids.items() if pair[0] in complete}, pending


def data_origin(storage: OpalStorage, draw_ids: dict[tuple[str, str], int], pending: list[str]) -> dict:
    """The statement's ``data``: whether published dates are the bundled synthetic sample (by the generator's
    record of its files, ``simulate.sample``, never by the values) and the dates not released, as published dates."""
    days = sorted({date_and_mode(k)[0] for k, _ in draw_ids})
    synthetic = sample_days(storage.raw_dir, days)
    published = sorted({d.replace("-", "") for d in synthetic})
    return {"synthetic_sample": bool(synthetic), "synthetic_sample_dates": published,
            "pending_dates": sorted({date_and_mode(k)[0].replace("-", "") for k in pending})}


def _gate(
    releases: dict[str, PartitionFrames],
    cells: PartitionFrames,
    draw_ids: dict[tuple[str, str], int],
    ledger: PrivacyLedger,
    reference: ReferenceNetwork,
    storage: OpalStorage,
) -> tuple[LedgerEvidence, dict[str, dict[str, pd.DataFrame]]]:
    """Check exactly what is about to be published against the ledger; refuse on any failure.

    For every (partition, marginal): the draw that stands for it must be a completed ledger draw whose stored
    file equals the release asset, and every blocking check must pass on it with the mechanism the ledger
    charged. The release step evaluated the same checks, but publishing is a separate run: checking again
    here leaves no gap between what was checked and what goes out.
    """
    stops = reference.stops()
    labels = frozenset(location_labels(stops))
    loaded = {m.name: {} for m in MARGINALS}
    keys, problems = sorted({key for key, _ in draw_ids}), []
    try:
        evidence = ledger_evidence(ledger, draw_ids)
    except StatementError as err:
        raise dg.Failure(description=f"publishing refused: {err}") from err
    caps = {u: ledger.cap(u) for u in {c.unit for c in evidence.charges.values()}}
    domains: dict[tuple[str, str], Domain] = {}
    spend = {(s.unit, s.scope): s.guarantee for s in evidence.scopes}

    def under_check():
        for key in keys:
            truths = histograms_from_cells(cells[key], column=BOUNDED)
            for m in MARGINALS:
                draw = evidence.draws[key, m.name]
                charge = evidence.charges[draw.charge_id]
                frame = releases[m.name][key]
                if draw.status != "complete" or not same_bins(read_parquet(storage.private_dir / draw.release_ref), frame):
                    problems.append(f"{key} {m.name}: the release asset is not the ledger's stored draw {draw.id}")
                loaded[m.name][key] = frame
                cap = caps[charge.unit]
                mechanism = json.loads(charge.mechanism)
                public = None  # the ledger's design chooses the checks, not this run's configuration
                if Design.parse(mechanism.get("design", Design.SBH)).consistent:
                    mode = date_and_mode(key)[1]
                    public = domains.setdefault((mode, m.tap), domain(stops, mode, m.tap))
                yield ReleaseUnderCheck(key, m, frame, truths[m.name], mechanism, draw, charge,
                                        spend[charge.unit, charge.scope], (cap.epsilon, cap.delta), labels, public)

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


def _od(trees: PartitionFrames, hierarchy: PartitionFrames, days: list[str], privacy_budget: PrivacyBudget,
        ledger: PrivacyLedger, reference: ReferenceNetwork, storage: OpalStorage,
        statement: dict) -> dict[str, pd.DataFrame] | None:
    """The OD tables of the published dates whose tree or hierarchy is complete (their draw ids in it), gated like
    the marginals; adds the statement's ``od`` section. None when both OD releases are off or nothing is ready."""
    def ready(frames: PartitionFrames, on: bool) -> dict[str, pd.DataFrame]:
        found = {d: frames[d] for d in days if on and d in frames}
        return {d: f for d, f in found.items() if len(f)}  # empty: built while that release was off

    ready_trees, ready_rows = ready(trees, privacy_budget.releases_od), ready(hierarchy, privacy_budget.releases_od_hierarchy)
    if not (ready_trees or ready_rows):
        return None
    stops = reference.stops()
    alphabet = TripAlphabet.from_stops(stops)
    problems = od_gate(ready_trees, ledger, storage.private_dir, alphabet) if ready_trees else []
    if ready_rows:
        plan = hierarchy_plan(privacy_budget, OdDomain.from_stops(stops, alphabet))
        problems += hierarchy_gate(ready_rows, ledger, storage.private_dir, plan.domain, plan.tau)
    if problems:
        raise dg.Failure(description="publishing refused, OD checks failed:\n" + "\n".join(problems[:10]))
    statement["od"] = od_statement(ready_trees, ledger, ready_rows)
    return od_tables(ready_trees, alphabet, privacy_budget.od_top_sequences, ready_rows)


@dg.asset(
    group_name="publish",
    deps=["privacy_audit"],
    ins={TRUE_CELLS: dg.AssetIn(), RELEASE_DRAWS: dg.AssetIn(), "od_prefix_tree": dg.AssetIn(),
         "od_hierarchy": dg.AssetIn(), **{m.name: dg.AssetIn(key=RELEASE_KEYS[m.name]) for m in MARGINALS}},
    description="Open-data CSVs (time-loc, time, loc) plus privacy.json/PRIVACY.md built from the ledger and a "
                "self-contained index.html for the public, published atomically; the partitions whose releases are "
                "complete, the others listed as pending. With the OD release on, od.csv and od-sequences.csv of the "
                "published dates whose DP tree is complete, checked by the same gate, in the same folder.",
    freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(days=8), warn_window=timedelta(days=7)),
    pool=LEDGER_POOL,
    **labels("public", "csv"),
)
def published_release(
    context: dg.AssetExecutionContext,
    true_cells: PartitionFrames,
    release_draws: PartitionFrames,
    od_prefix_tree: PartitionFrames,
    od_hierarchy: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
    storage: OpalStorage,
    **releases: PartitionFrames,
) -> dg.MaterializeResult:
    """Check, build the tables and the statement, publish them as a new release, repoint ``latest``."""
    ledger = privacy_budget.ledger(storage)
    draw_ids, pending = complete_partitions(releases, true_cells, release_draws, ledger)
    failed = {day: why for day, why in failed_days(storage.private_dir).items() if any(k.startswith(day) for k in pending)}
    if not draw_ids:
        raise dg.Failure(description=f"nothing to publish yet: no partition's release is complete (pending: "
                                     f"{', '.join(pending) or 'none registered'})")
    if pending:
        context.log.warning(f"publishing {len({k for k, _ in draw_ids})} complete partitions; pending: {', '.join(pending)}")
    for day, why in failed.items():
        context.log.warning(f"not released, its raw file could not be used: {day}: {why}")
    evidence, loaded = _gate(releases, true_cells, draw_ids, ledger, reference, storage)
    now = datetime.now(timezone.utc)
    release_id = f"{now:%Y%m%dT%H%M%SZ}-{context.run.run_id[:8]}"
    tables = to_open_data(loaded)
    try:
        statement = privacy_statement(evidence, sorted({k for k, _ in draw_ids}), release_id,
                                      now.isoformat(timespec="seconds"), tables, data_origin(storage, draw_ids, pending))
    except StatementError as err:
        raise dg.Failure(description=f"publishing refused: {err}") from err
    days = sorted({k.split("|")[0] for k, _ in draw_ids})
    od = _od(od_prefix_tree, od_hierarchy, days, privacy_budget, ledger, reference, storage, statement)
    if od:  # the person's share of this release counts every file in it, the OD releases too
        trees = {d.charge_id for d in ledger.draws(statement["od"]["draws"])}
        statement["person"] = person_section(ledger, days, [*evidence.charges.values(),
                                                            *(c for c in ledger.charges() if c.id in trees)])
    if statement["noise_seeded"]:
        context.log.warning("SEEDED noise: this release is NOT private; never hand it out")
    folder = publish(storage.published_dir, tables, statement, release_id, reference.stops(), od,
                     PageSettings.from_env())
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(folder)),
            "release_id": release_id,
            "files": dg.MetadataValue.json(list(files_of(statement))),
            "rows_od": len(od["od"]) if od else 0,
            **{f"rows_{table}": len(tables[table]) for table in TABLES},
            "release_design": statement["design"]["name"],
            "privacy_unit": statement["privacy_unit"]["unit"],
            "epsilon_per_unit": statement["guarantee"]["epsilon"],
            "delta_per_unit": statement["guarantee"]["delta"],
            "per": statement["guarantee"]["per"],
            "noise_seeded": statement["noise_seeded"],
            "partitions_published": len(statement["partitions"]["keys"]),
            "partitions_pending": dg.MetadataValue.json(pending),
            "days_failed": dg.MetadataValue.json(failed),
            "synthetic_sample": statement["data"]["synthetic_sample"],
            "privacy_statement": dg.MetadataValue.md(render_markdown(statement)),
        }
    )
