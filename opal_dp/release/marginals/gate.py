"""The publish gate of one date's marginals: what is about to be published checked against the ledger's records
of the draws that stand for it, and every blocking check run again on it; the published tables made from exactly
the frames checked. A plain function of its ``DateGate``, so that the dates are gated side by side in the per-day
workers (``release.publish``); the ledger is read by the caller, never in a worker."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core.ledger_records import Cap
from opal_dp.prep.binning import location_labels
from opal_dp.release.marginals.checks import ReleaseUnderCheck, blocking_problems
from opal_dp.release.marginals.public_domain import Domain, domain
from opal_dp.release.marginals.tables import BOUNDED, MARGINALS, histograms_from_cells, same_bins
from opal_dp.release.options import Design
from opal_dp.release.marginals.hierarchy_design import levels_path
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.marginals.time_loc_tables import LEVELS_TABLE, level_problems, published_levels
from opal_dp.release.publish import DateFiles
from opal_dp.release.statement.build import LedgerEvidence, open_data_partition


class PublishRefused(Exception):
    """A date failed the publish gate: ``description`` says why, ``failed_checks`` counts the failures per check."""

    def __init__(self, description: str, failed_checks: dict[str, int] | None = None):
        super().__init__(description, failed_checks)
        self.description, self.failed_checks = description, failed_checks or {}


@dataclass(frozen=True)
class DateGate:
    """What one date's gate needs, so that a worker can run it (``gate_date``): the ledger's records of the draws
    that stand for its partitions (read in the publishing process: a worker opens no ledger), where its release
    assets and true cells are, and the other products' tables of the date (``others``: gated against the ledger
    before, ``release.products.DATED_PARTS``)."""

    day: str  # YYYY-MM-DD
    evidence: LedgerEvidence
    caps: Mapping[str, Cap]
    releases: Mapping[str, Mapping[str, Path]]  # marginal -> partition key -> release asset file
    cells: Mapping[str, Path]  # partition key -> true cells file
    private_dir: Path
    stops: pd.DataFrame  # the reference stop list
    others: Mapping[str, pd.DataFrame]
    draws: tuple[int, ...]


def gate_date(gate: DateGate) -> DateFiles:
    """Check exactly what is about to be published for one date against the ledger, and make its published
    tables from the frames checked; refuse (``PublishRefused``) on any failure.

    For every (partition, marginal): the draw that stands for it must be a completed ledger draw whose stored
    file equals the release asset, and every blocking check must pass on it with the mechanism the ledger
    charged. The release step evaluated the same checks, but publishing is a separate run: checking again
    here leaves no gap between what was checked and what goes out.
    """
    stops = gate.stops
    labels = frozenset(location_labels(stops))
    evidence, loaded, problems = gate.evidence, {m.name: {} for m in MARGINALS}, []
    keys = sorted({key for key, _ in evidence.draws})
    domains: dict[tuple[str, str], Domain] = {}
    spend = {(s.unit, s.scope): s.guarantee for s in evidence.scopes}

    def under_check():
        for key in keys:
            truths = histograms_from_cells(pd.read_parquet(gate.cells[key]), column=BOUNDED)
            for m in MARGINALS:
                draw = evidence.draws[key, m.name]
                charge = evidence.charges[draw.charge_id]
                frame, drawn = read_asset_and_draw(gate.releases[m.name][key], gate.private_dir / draw.release_ref)
                if draw.status != "complete" or not drawn:
                    problems.append(f"{key} {m.name}: the release asset is not the ledger's stored draw {draw.id}")
                loaded[m.name][key] = frame
                cap = gate.caps[charge.unit]
                mechanism = json.loads(charge.mechanism)
                public = None  # the ledger's design chooses the checks, not this run's configuration
                if Design.parse(mechanism.get("design", Design.SBH)).consistent:
                    mode = open_data_partition(key)[1]
                    public = domains.setdefault((mode, m.tap), domain(stops, mode, m.tap))
                yield ReleaseUnderCheck(key, m, frame, truths[m.name], mechanism, draw, charge,
                                        spend[charge.unit, charge.scope], (cap.epsilon, cap.delta), labels, public)

    failed = {name: found for name, found in blocking_problems(under_check()).items() if found}
    if problems:
        failed["matches_ledger_draw"] = problems
    if failed:
        lines = [f"{name}: {problem}" for name, found in failed.items() for problem in found[:5]]
        raise PublishRefused("publishing refused, blocking checks failed:\n" + "\n".join(lines),
                             {k: len(v) for k, v in failed.items()})
    design = Design.parse(json.loads(next(iter(evidence.charges.values())).mechanism).get("design", Design.SBH))
    tables = to_open_data(loaded)
    if design is Design.HIERARCHY:
        tables[LEVELS_TABLE] = _levels(gate, keys, tables["loc"])
    return DateFiles(gate.day.replace("-", ""), tables | dict(gate.others), gate.draws,
                     tuple(sorted({open_data_partition(k)[1] for k in keys})), design.consistent)


def _levels(gate: DateGate, keys: list[str], loc: pd.DataFrame) -> pd.DataFrame:
    """The hierarchy design's coarser rows of the date, stored beside each tap's ``time-loc`` draw, checked to add up
    with the date's ``loc`` table (``level_problems``); refused when a tap's rows are missing or do not add up."""
    parts = []
    for key in keys:
        date, mode = open_data_partition(key)
        for tap in ("on", "off"):
            draw = gate.evidence.draws[key, f"tap_{tap}_time_loc"]
            path = levels_path(gate.private_dir / draw.release_ref)
            if not path.is_file():
                raise PublishRefused(f"publishing refused: {key} tap-{tap}: its coarser rows are not stored beside its "
                                     "draw; release the week again with a fresh draw (privacy_budget.fresh_draw)")
            parts.append(pd.read_parquet(path).assign(mode=mode, date=date, tap=tap))
    table = published_levels(parts)
    problems = level_problems(table, loc.astype({"count": "int64"}))
    if problems:
        raise PublishRefused("publishing refused, the levels do not add up:\n" + "\n".join(problems[:10]),
                             {"levels_add_up": len(problems)})
    return table


def read_asset_and_draw(asset: Path, stored: Path) -> tuple[pd.DataFrame, bool]:
    """The release asset's frame, and whether it is the ledger's stored draw: the same bytes are the same frame
    (parsed once); other bytes are parsed too and compared bin by bin (``same_bins``)."""
    with asset.open("rb") as handle:
        raw = handle.read()
    with stored.open("rb") as handle:
        stored_raw = handle.read()
    frame = pd.read_parquet(io.BytesIO(raw))
    return frame, raw == stored_raw or same_bins(pd.read_parquet(io.BytesIO(stored_raw)), frame)

