"""The OD products' part of each published date (``release.products.DatedPart``): the draws a date's stored tree
and hierarchy hold, their gate against the ledger and the OD files made from exactly the frames gated, and the
statement's ``od`` section. The publish asset loops over the registry's parts and names no product.

Publishing is post-processing of draws the ledger already charged: nothing here draws noise or charges; a frame that
is not the ledger's stored draw, or fails a check, refuses the date."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import PrivacyLedger
from opal_dp.prep.sequences import trip_alphabet
from opal_dp.release.od.hierarchy import hierarchy_plan, od_domain
from opal_dp.release.od.hierarchy_publish import hierarchy_gate
from opal_dp.release.od.publish import od_gate, od_statement, od_tables

TREE, HIERARCHY = "od_prefix_tree", "od_hierarchy"

Gate = Callable[[str, Mapping[str, pd.DataFrame]], tuple[list[str], dict[str, pd.DataFrame]]]


@dataclass(frozen=True)
class OdDated:
    """The OD files of a date, from its prefix tree (``od_prefix_tree``) and its hierarchy (``od_hierarchy``)."""

    name: str = "od"
    assets: tuple[str, ...] = (TREE, HIERARCHY)

    def on(self, settings) -> tuple[str, ...]:
        """The assets whose release the settings turn on."""
        return (*((TREE,) if settings.releases_od else ()), *((HIERARCHY,) if settings.releases_od_hierarchy else ()))

    def stored_draws(self, asset: str, path: Path) -> list[dict]:
        """The draws one date's stored file holds: the tree's draw (none when it was built while the OD release was
        off), or the hierarchy's draw of each mode."""
        if asset == TREE:
            ids = pd.read_parquet(path, columns=["draw_id"])["draw_id"]
            return [{"draw_id": int(ids.iloc[0])}] if len(ids) else []
        ids = pd.read_parquet(path, columns=["mode", "draw_id"]).drop_duplicates()
        return [{"mode": str(r.mode), "draw_id": int(r.draw_id)} for r in ids.sort_values("mode").itertuples()]

    def gate(self, settings, stops: pd.DataFrame, ledger: PrivacyLedger, private_dir: Path) -> Gate:
        """``gate(day, frames)``: the problems of the date's tree and hierarchy (``frames``: asset -> the date's
        stored frame, those with draws) against the ledger, and the OD files made from exactly those frames."""
        alphabet = trip_alphabet(stops)
        plan = hierarchy_plan(settings, od_domain(stops)) if settings.releases_od_hierarchy else None

        def gate(day: str, frames: Mapping[str, pd.DataFrame]) -> tuple[list[str], dict[str, pd.DataFrame]]:
            tree = {day: frames[TREE]} if TREE in frames else {}
            rows = {day: frames[HIERARCHY]} if HIERARCHY in frames else {}
            problems = od_gate(tree, ledger, private_dir, alphabet) if tree else []
            totals = None
            if rows:
                found, totals = hierarchy_gate(rows, ledger, private_dir, plan.domain, plan.tau)
                problems += found
            if problems:
                return problems, {}
            return [], od_tables(tree, alphabet, settings.od_top_sequences, rows, totals)

        return gate

    def section(self, stored: Mapping[str, Mapping[str, list[dict]]], ledger: PrivacyLedger) -> dict | None:
        """The statement's ``od`` section of the published dates (``stored``: date -> asset -> its draws), or None
        when no date has OD files."""
        trees = {day: draws[TREE][0]["draw_id"] for day, draws in stored.items() if draws.get(TREE)}
        rows = {(day, row["mode"]): row["draw_id"] for day, draws in stored.items() for row in draws.get(HIERARCHY, [])}
        return od_statement(trees, ledger, rows) if trees or rows else None


OD_DATED = OdDated()
