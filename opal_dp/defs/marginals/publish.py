"""Publish: the released marginals, and each other product's part of a date (``release.products.DATED_PARTS``: the
OD files), become the open-data files and their privacy statement, built from the ledger records of the draws that
produced them; date by date, each date once (``release.publish``). No product but the marginals is named here."""

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp.core import PrivacyLedger
from opal_dp.defs.marginals.gate_checks import (AUDIT_PASSED, DATES, FOLDER, GATE_CHECK_SPECS, STATEMENT,
                                                audit_stands, failed_check, passed_checks, refused)
from opal_dp.defs.marginals.release import RELEASE_DRAWS, RELEASE_KEYS, TRUE_CELLS
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.heap import earlier_objects_frozen
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import LEDGER_POOL, labels
from opal_dp.defs.shared.partitions import date_and_mode
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.day_records import read_records
from opal_dp.prep.ingest import scan_raw_files
from opal_dp.release.period_input import PeriodNotReady, stored_period_input
from opal_dp.release.periods import week_of
from opal_dp.release.marginals.gate import DateGate, PublishRefused, gate_date
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.statement.person import person_account, person_section
from opal_dp.release.statement.coverage import coverage_section
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.products import DATED_PARTS
from opal_dp.release.published_folder import files_of, published_index
from opal_dp.release.publish import publish
from opal_dp.release.page.catalogue import PageSettings
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.build import (
    StatementError,
    ledger_evidence,
    privacy_statement,
)
from opal_dp.reports.partition_rows import PartitionRows, version_of

from opal_dp.defs.shared.tags import RELEASE_ID_TAG
from opal_dp.simulate.sample import sample_days

PUBLICATION_STATE = "publication"  # private: the page summaries of what is published (``release.publish``)
DATED_ASSETS = tuple(asset for part in DATED_PARTS for asset in part.assets)  # the other products' inputs


def complete_partitions(
    releases: dict[str, PartitionFrames], cells: PartitionFrames, standing: PartitionFrames, ledger: PrivacyLedger,
    kept: PartitionRows,
) -> dict[tuple[str, str], int]:
    """The draws (piece, marginal) -> draw id of every (date, mode) piece whose release is complete (every asset
    stored, every draw complete in the ledger). ``kept``: each piece's standing draws from earlier runs, read again
    only when its ``release_draws`` file changed."""
    keys = materialised(cells, standing, *releases.values())

    def standing_draws(key: str) -> list[dict]:
        return [{"marginal": str(row.marginal), "draw_id": int(row.draw_id)} for row in standing[key].itertuples()]

    draw_ids = {(key, row["marginal"]): row["draw_id"] for key in keys
                for row in kept.rows(key, version_of([standing.path(key)]), lambda key=key: standing_draws(key))}
    kept.save()
    done = {d.id for d in ledger.draws(draw_ids.values()) if d.status == "complete"}
    complete = [k for k in keys if all(draw_ids[k, m.name] in done for m in MARGINALS if (k, m.name) in draw_ids)
                and all((k, m.name) in draw_ids for m in MARGINALS)]
    return {pair: i for pair, i in draw_ids.items() if pair[0] in complete}


def unpublished_days(storage: OpalStorage, published: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The service dates with a raw file or a record that this release does not hold, and why: (pending, left out).
    Pending: its file could not be used, or its week is not released yet; left out: its week was released without
    it, by the operator's choice (``release --without``)."""
    records = read_records(storage.private_dir)
    raw = scan_raw_files(storage.raw_dir)[0] if storage.raw_dir.exists() else {}
    left_out: dict[str, str] = {}
    for week in sorted({week_of(d) for d in published}):
        try:
            left_out |= {d: "its week was released without it" for d in stored_period_input(storage.private_dir,
                                                                                              week).without}
        except PeriodNotReady:
            continue
    pending = {}
    for day in sorted((set(records) | set(raw)) - published - set(left_out)):
        record = records.get(day)
        pending[day] = (f"its raw file could not be used: {record.reason}" if record and not record.ingested
                        else "its week is not released yet (a week is released once all its days are ingested)")
    return pending, left_out


def data_origin(storage: OpalStorage, draw_ids: dict[tuple[str, str], int], pending: dict[str, str],
                left_out: dict[str, str]) -> dict:
    """The statement's ``data``: whether published dates are the bundled synthetic sample (by the generator's
    record of its files, ``simulate.sample``, never by the values), the dates not released yet and the dates left out
    of a released week, as published dates."""
    days = sorted({date_and_mode(k)[0] for k, _ in draw_ids})
    synthetic = sample_days(storage.raw_dir, days)
    published = sorted({d.replace("-", "") for d in synthetic})
    return {"synthetic_sample": bool(synthetic), "synthetic_sample_dates": published,
            "pending_dates": sorted(d.replace("-", "") for d in pending),
            "left_out_dates": sorted(d.replace("-", "") for d in left_out)}


def _dates(draw_ids: dict[tuple[str, str], int], stored: dict[str, PartitionFrames], privacy_budget: PrivacyBudget,
           state: Path) -> dict[str, dict]:
    """Per published date (``YYYY-MM-DD``): its partitions' draws (partition, marginal) -> id and, for each other
    product's asset whose release is on and which holds the date, the draws its stored file holds (read again only
    when the file changed; kept in ``state``)."""
    out: dict[str, dict] = {}
    for (key, marginal), draw_id in draw_ids.items():
        out.setdefault(date_and_mode(key)[0], {"draws": {}, "stored": {}})["draws"][key, marginal] = draw_id
    for part in DATED_PARTS:
        for asset in part.on(privacy_budget):
            frames, kept = stored[asset], PartitionRows(state / f"{asset}_draws.json")
            for day, entry in out.items():
                if day in frames:
                    path = frames.path(day)
                    entry["stored"][asset] = kept.rows(day, version_of([path]),
                                                       lambda part=part, asset=asset, path=path:
                                                       part.stored_draws(asset, path))
            kept.save()
    return dict(sorted(out.items()))


def _date_gates(changed: list[str], dates: dict[str, dict], releases: dict[str, PartitionFrames],
                cells: PartitionFrames, stored: dict[str, PartitionFrames], privacy_budget: PrivacyBudget,
                ledger: PrivacyLedger, reference: ReferenceNetwork, storage: OpalStorage) -> Iterator[DateGate]:
    """Each changed date's gate (``gate_date``), with the ledger's evidence of its draws; each other product's part
    of the date gated here, against the ledger, and its published tables made from the frames checked. Made one date
    at a time, as ``publish`` asks: the per-day workers stage the first dates while the others are gated here."""
    stops = reference.stops()
    part_gates = [(part, part.gate(privacy_budget, stops, ledger, storage.private_dir)) for part in DATED_PARTS]
    for day in changed:
        entry = dates[day]
        try:
            evidence = ledger_evidence(ledger, entry["draws"], with_person=False)
        except StatementError as err:
            raise refused(DATES, f"publishing refused: {err}") from err
        tables: dict[str, pd.DataFrame] = {}
        for part, gate in part_gates:
            frames = {asset: stored[asset][day] for asset in part.assets if entry["stored"].get(asset)}
            if frames:
                problems, made = gate(day, frames)
                if problems:
                    raise refused(DATES, f"publishing refused, {part.name.upper()} checks failed:\n"
                                         + "\n".join(problems[:10]))
                tables |= made
        keys = sorted({key for key, _ in entry["draws"]})
        yield DateGate(
            day, evidence, {u: ledger.cap(u) for u in {c.unit for c in evidence.charges.values()}},
            {m.name: {key: releases[m.name].path(key) for key in keys} for m in MARGINALS},
            {key: cells.path(key) for key in keys}, storage.private_dir, stops, tables, tuple(_draws_of(entry)))


def _person_metadata(ledger: PrivacyLedger) -> dict:
    """The person account as numbers the UI plots across publications (``release.statement.person.person_account``):
    the worst horizon window's epsilon and delta spent, the cap, the share of it and the headroom left."""
    account = person_account(ledger)
    if account is None:
        return {}
    return {f"person_{key}": dg.MetadataValue.float(float(value)) for key, value in account.items()
            if key in ("epsilon_spent", "delta_spent", "cap_epsilon", "cap_delta", "epsilon_remaining", "share_of_cap")
            } | {"person_window": account["window"]}


def _draws_of(entry: dict) -> list[int]:
    return sorted([*entry["draws"].values(), *_part_draws(entry)])


def _part_draws(entry: dict) -> list[int]:
    """The draws of the other products' parts of a date."""
    return [row["draw_id"] for rows in entry["stored"].values() for row in rows]


def _statement(summary: PageSummary, dates: dict[str, dict], draw_ids: dict[tuple[str, str], int],
               unpublished: tuple[dict[str, str], dict[str, str]], ledger: PrivacyLedger, storage: OpalStorage,
               release_id: str, created_at: str) -> dict:
    """The statement of everything published, from the ledger's evidence of its draws and the publication's
    summary (the public-domain totals); each other product's section from the draws of its parts of the dates."""
    others = [i for e in dates.values() for i in _part_draws(e)]
    stored = {day: e["stored"] for day, e in dates.items()}
    sections, person = {}, None
    try:
        evidence = ledger_evidence(ledger, draw_ids, with_person=not others)
        for part in DATED_PARTS:
            section = part.section(stored, ledger)
            if section is not None:
                sections[part.name] = section
        if others:  # the person's share of this release counts every file in it, the other products' too
            charged = {d.charge_id for d in ledger.draws(others)}
            person = person_section(ledger, list(dates), [*evidence.charges.values(), *ledger.charges(ids=charged)])
        sections["coverage"] = coverage_section(summary)
        return privacy_statement(evidence, sorted({k for k, _ in draw_ids}), release_id, created_at, summary,
                                 data_origin(storage, draw_ids, *unpublished), marginals=MARGINALS,
                                 sections=sections, person=person)
    except StatementError as err:
        raise refused(STATEMENT, f"publishing refused: {err}") from err


@dg.asset(
    group_name="publish",
    deps=["privacy_audit"],
    ins={TRUE_CELLS: dg.AssetIn(), RELEASE_DRAWS: dg.AssetIn(), **{asset: dg.AssetIn() for asset in DATED_ASSETS},
         **{m.name: dg.AssetIn(key=RELEASE_KEYS[m.name]) for m in MARGINALS}},
    description="Open-data CSVs (time-loc, time, loc), each date's under dates/<date>/ written once when its "
                "partitions are complete and gated (again only when the ledger released it again), the combined files "
                "appended to, plus privacy.json/PRIVACY.md built from the ledger, index.json and a self-contained "
                "index.html for the public; the other partitions listed as pending. With an OD release on, od.csv (from the "
                "OD hierarchy when it is on, else the DP tree) and od-sequences.csv (the tree) of the dates whose OD "
                "assets are complete, checked by the same gate. A run with nothing new writes nothing.",
    freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(days=8), warn_window=timedelta(days=7)),
    check_specs=GATE_CHECK_SPECS,
    pool=LEDGER_POOL,
    **labels("public", "csv"),
)
def published_release(
    context: dg.AssetExecutionContext,
    true_cells: PartitionFrames,
    release_draws: PartitionFrames,
    privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
    storage: OpalStorage,
    workers: PerDayWorkers,
    **inputs: PartitionFrames,
) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    """Publish the dates whose draws are new or changed (gated one date at a time), then the combined files, the
    statement and the page over everything published; a run with nothing new writes nothing. A refusal records the
    gate check that refused it (``gate_checks``). The dates are staged by ``workers`` processes."""
    # it reads the whole history: its cost must not include re-scanning the heap
    with earlier_objects_frozen():
        try:
            stored = {asset: inputs.pop(asset) for asset in DATED_ASSETS}
            result = _publish_release(context, true_cells, release_draws, stored, privacy_budget, reference,
                                      storage, inputs, workers.count)
        except dg.Failure as failure:
            check = failed_check(failure)
            if check is not None:
                yield check
            raise
    yield result


def _publish_release(
    context: dg.AssetExecutionContext, true_cells: PartitionFrames, release_draws: PartitionFrames,
    stored: dict[str, PartitionFrames], privacy_budget: PrivacyBudget, reference: ReferenceNetwork,
    storage: OpalStorage, releases: dict[str, PartitionFrames], workers: int | None,
) -> dg.MaterializeResult:
    ledger = privacy_budget.ledger(storage)
    state = storage.private_dir / PUBLICATION_STATE
    draw_ids = complete_partitions(releases, true_cells, release_draws, ledger,
                                   PartitionRows(state / "standing_draws.json"))
    pending, left_out = unpublished_days(storage, {date_and_mode(k)[0] for k, _ in draw_ids})
    if not draw_ids:
        raise dg.Failure(description="nothing to publish yet: no week's release is complete (pending: "
                                     + ("; ".join(f"{d}: {why}" for d, why in pending.items()) or "none") + ")")
    audit = audit_stands(context.instance)
    for day, why in {**pending, **left_out}.items():
        context.log.warning(f"not in this release: {day}: {why}")
    dates = _dates(draw_ids, stored, privacy_budget, state)
    index = published_index(storage.published_dir)
    dropped = sorted(set(index["dates"]) - {d.replace("-", "") for d in dates})
    if dropped:
        raise refused(DATES, f"publishing refused: published dates are no longer complete: {', '.join(dropped)} "
                             "(nothing is ever unpublished; release them again first)")
    changed = [d for d, e in dates.items() if index["dates"].get(d.replace("-", ""), {}).get("draws") != _draws_of(e)]
    now = datetime.now(timezone.utc)
    release_id = context.run.tags.get(RELEASE_ID_TAG) or f"{now:%Y%m%dT%H%M%SZ}-{context.run.run_id[:8]}"
    statements: list[dict] = []

    def statement_of(summary: PageSummary) -> dict:
        statements.append(_statement(summary, dates, draw_ids, (pending, left_out), ledger, storage, release_id,
                                     now.isoformat(timespec="seconds")))
        return statements[-1]

    gates = _date_gates(changed, dates, releases, true_cells, stored, privacy_budget, ledger, reference, storage)
    try:
        folder = publish(storage.published_dir, gates, statement_of, reference.stops(), state, PageSettings.from_env(),
                         prepare=gate_date, workers=workers, count=len(changed))
    except PublishRefused as gate:
        raise refused(DATES, gate.description, {"failed_checks": dg.MetadataValue.json(gate.failed_checks)}) from None
    except PublishedFormatError as err:
        raise refused(FOLDER, f"publishing refused, the new folder is not well formed: {err}") from None
    status = {**_person_metadata(ledger), "path": dg.MetadataValue.path(str(folder)),
              "dates_in_release": len(dates),  # every date the published folder holds, as the CLI's summary counts
              "dates_written": len(changed) if statements else 0,  # of those, new or changed by this run
              "dates_written_list": dg.MetadataValue.json([d.replace("-", "") for d in changed] if statements else []),
              "partitions_published": len({k for k, _ in draw_ids}),
              "days_pending": dg.MetadataValue.json(pending),
              "days_left_out": dg.MetadataValue.json(left_out)}
    covered = {DATES: {"dates_gated": len(changed) if statements else 0, "dates_standing": len(dates)},
               STATEMENT: {"draws_stated": sum(len(_draws_of(e)) for e in dates.values())},
               AUDIT_PASSED: audit, FOLDER: {"folder": dg.MetadataValue.path(str(folder))}}
    if not statements:
        context.log.info("nothing new to publish: every published date's draws are unchanged")
        return dg.MaterializeResult(metadata=status, check_results=passed_checks(covered))
    statement = statements[-1]
    if statement["noise_seeded"]:
        context.log.warning("SEEDED noise: this release is NOT private; never hand it out")
    index = published_index(storage.published_dir)
    return dg.MaterializeResult(
        metadata={
            **status,
            "release_id": release_id,
            "files": dg.MetadataValue.json(list(files_of(statement))),
            **{f"rows_{name.removesuffix('.csv')}": sum(index["dates"][d]["files"][name]["rows"] for d in about["dates"])
               for name, about in index["combined"].items()},
            "release_design": statement["design"]["name"],
            "privacy_unit": statement["privacy_unit"]["unit"],
            "epsilon_per_unit": statement["guarantee"]["epsilon"],
            "delta_per_unit": statement["guarantee"]["delta"],
            "per": statement["guarantee"]["per"],
            "noise_seeded": statement["noise_seeded"],
            "synthetic_sample": statement["data"]["synthetic_sample"],
            "privacy_statement": dg.MetadataValue.md(render_markdown(statement)),
        },
        check_results=passed_checks(covered),
    )
