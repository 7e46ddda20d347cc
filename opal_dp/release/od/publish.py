"""The OD part of a publication: ``od.csv`` and ``od-sequences.csv``, the ``od`` section of the privacy statement
built from the ledger, and the checks the publish gate and the folder validation run.

``od.csv`` comes from the hierarchical OD release when it is on (``release.od.hierarchy_publish``: a ``level``
column, exact totals; the default weekly release), else from the consistent DP prefix trees (the trip-level
reproduction of 2016): ``date,mode,origin,destination,count`` (``YYYYMMDD``; bus locations are postcodes, other
modes stop names, ``-1`` an unknown tap-off), one row per trip symbol with a positive count, by date, mode, origin,
destination. ``od-sequences.csv`` comes only from the trees, when they are on: ``date,rank,trips,sequence,count``,
the most frequent sanitized card-day sequences per date (trips ``mode:origin>destination`` joined by `` | ``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import PrivacyLedger
from opal_dp.network import load_stops
from opal_dp.prep.sequences import TripAlphabet, trip_alphabet
from opal_dp.release.od.generate import consistent_tree, inconsistent_parents, od_counts, top_sequences
from opal_dp.release.od.hierarchy import od_domain
from opal_dp.release.od.hierarchy_publish import (
    hierarchy_markdown,
    hierarchy_statement,
    hierarchy_table,
    validate_hierarchy_csv,
    validate_totals_csv,
)
from opal_dp.release.statement.runs import date_runs, dates_of, draws_of, draws_section, grouped_scopes

OD_TABLES = ("od", "od-sequences", "totals")
OD_COLUMNS = ["date", "mode", "origin", "destination", "count"]
SEQUENCE_COLUMNS = ["date", "rank", "trips", "sequence", "count"]
DESCRIPTION = (
    "Origin-destination counts and trip chains from a noisy prefix tree of each card-day's trips (Chen et al., "
    "KDD 2012: hybrid granularity, Theorem 4.1 empty nodes, constrained inference). Each card-day's sequence of "
    "(mode, origin, destination) trips in tap-on order, truncated to the first `height` trips, is one record: "
    "the tree is epsilon-DP for adding or removing all trips of one card on one day (pure DP, delta 0). od.csv "
    "counts the trips among those first `height` of each card-day; both files come only from the DP tree."
)

OD_NOTES = {  # published file -> what a row counts (the page's file list)
    "od": "trips per date and mode: the mode's total, district pairs and origin-destination pairs, each level adding "
          "up to the one above (a noisy prefix tree's pairs in a release without the hierarchy)",
    "od-sequences": "the most frequent card-day trip chains of each date, from the same trees",
    "totals": "trips per date, mode and tap, each measured on its own and never suppressed, with the 95% bound of its "
              "noise: the figures to quote for how many trips a mode carried (a card's trips past its per-day bound, "
              "in privacy.json, are not counted)",
}
OD_DICTIONARY = (  # column, the files (stems) that have it, meaning (added to that of the marginals' same column)
    ("mode", ("od", "totals"), ""),
    ("date", ("od", "od-sequences", "totals"), ""),
    ("tap", ("totals",), " (totals.csv: <code>on</code> counts every trip, <code>off</code> the trips with a recorded "
                         "tap-off)"),
    ("count", ("od", "od-sequences", "totals"), " (totals.csv lists every one, 0 included)"),
    ("error_95", ("totals",), "the count's noise is within this many trips of 0 with 95% probability"),
    ("origin, destination", ("od",), "where the trip started and ended, labelled as <code>loc</code>; <code>all</code> "
                                     "above the location level, <code>other</code> on a district pair's row of the "
                                     "pairs not listed one by one"),
    ("level", ("od",), "<code>mode</code>, <code>district</code> or <code>location</code>: which matrix the row belongs "
                       "to (releases with the hierarchy)"),
    ("origin_district, destination_district", ("od",),
     "the district of the origin and of the destination: the first three digits of the stop's postcode followed "
     "by <code>x</code> (<code>200x</code>: postcodes 2000 to 2009); <code>-1</code>: unknown, a trip without a "
     "tap-off; <code>all</code> on the mode row"),
    ("rank", ("od-sequences",), "1 for the most frequent chain of the date, then 2, ..."),
    ("trips", ("od-sequences",), "how many trips the chain has"),
    ("sequence", ("od-sequences",), "the trips of the chain, each <code>mode:origin&gt;destination</code>, joined by "
                                    "<code> | </code>"),
)

SEQUENCES_DESCRIPTION = (
    "od-sequences.csv: the most frequent card-day trip chains, from a noisy prefix tree per date (Chen et al., KDD "
    "2012), epsilon-DP for adding or removing all trips of one card on one day (pure DP, delta 0)."
)


def od_gate(trees: Mapping[str, pd.DataFrame], ledger: PrivacyLedger, root: Path, alphabet: TripAlphabet) -> list[str]:
    """Problems with the trees about to be published: each must come from a completed ledger draw whose stored
    noisy tree gives it exactly, be consistent, and use only public symbols."""
    problems = []
    ids = {day: int(tree["draw_id"].iloc[0]) for day, tree in trees.items()}
    draws = {d.id: d for d in ledger.draws(ids.values())}
    for day, tree in trees.items():
        draw = draws.get(ids[day])
        if draw is None or draw.status != "complete" or draw.date != day:
            problems.append(f"{day} od: no completed ledger draw {ids[day]} of that date")
            continue
        stored = consistent_tree(pd.read_parquet(root / draw.release_ref))
        if not stored.equals(tree.drop(columns=["draw_id"]).reset_index(drop=True)):
            problems.append(f"{day} od: the tree asset is not the inference of the ledger's stored draw {draw.id}")
        if inconsistent_parents(tree):
            problems.append(f"{day} od: {inconsistent_parents(tree)} nodes differ from their children plus terminals")
        symbol = tree["symbol"][tree["level"] > 0]
        if ((symbol < 0) | (symbol >= alphabet.size)).any():
            problems.append(f"{day} od: a symbol outside the public alphabet")
    return problems


def od_tables(trees: Mapping[str, pd.DataFrame], alphabet: TripAlphabet, top: int,
              hierarchy: Mapping[str, pd.DataFrame] | None = None,
              totals: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """The OD files: ``od`` from the ``hierarchy`` rows when given, else from the trees; ``od-sequences`` from the
    trees when there are any; ``totals`` (``hierarchy_publish.totals_table``) when given."""
    out = {}
    if hierarchy:
        out["od"] = hierarchy_table(hierarchy)
    if totals is not None:
        out["totals"] = totals
    if trees:
        days = sorted(trees)
        od = pd.concat([od_counts(trees[d], alphabet.symbols, _compact(d)) for d in days], ignore_index=True)
        out.setdefault("od", od.sort_values(OD_COLUMNS[:4], ignore_index=True)[OD_COLUMNS])
        out["od-sequences"] = pd.concat([top_sequences(trees[d], alphabet.labels, _compact(d), top) for d in days],
                                        ignore_index=True)
    return out


def od_statement(trees: Mapping[str, int], ledger: PrivacyLedger,
                 hierarchy: Mapping[tuple[str, str], int] | None = None) -> dict:
    """The statement's ``od`` section, from the ledger records of the published draws (``trees``: date -> the tree's
    draw id; ``hierarchy``: (date, mode) -> the hierarchy's): the trees' fields (when there are trees) and the
    ``hierarchy`` section (when there are hierarchy draws); ``draws``, ``scopes`` and ``dates`` cover both, ``files``
    lists what is published."""
    draws = ledger.draws(trees.values())
    section = hierarchy_statement(hierarchy, ledger) if hierarchy else None
    ids = {d.charge_id for d in draws} | set(section["charges"] if section else ())
    charges = {c.id: c for c in ledger.charges(ids=ids)}
    spend = ledger.summary(scopes={(c.unit, c.scope) for c in charges.values()})
    out = {
        "description": (section["description"] + (" " + SEQUENCES_DESCRIPTION if trees else "")) if section
        else DESCRIPTION,
        "protects": _protects({s.unit for s in spend}),
        "delta": 0.0,
        "date_runs": date_runs(_compact(d) for d in [*trees, *(day for day, _ in hierarchy or {})]),
        "draws": draws_section({d.id for d in draws} | set(draws_of(section["draws"]) if section else ())),
        "composition": (
            "Each tree and each date's hierarchy is one more charge on the ledger scope of its date (card_day unit) "
            "or of the period (card_period unit, one charge per date), next to the marginals of the same trips: the "
            "ledger composes them against the scope's cap, and every card-level charge also against the person "
            "cap, and refuses a draw that would exceed either. Under the trip unit the marginals make no card-day "
            "claim, and the OD charges go to the card_day scope of their date."
        ),
        "scopes": [{"unit": s.unit, "scope": s.scope, "epsilon": s.guarantee.epsilon, "delta": s.guarantee.delta,
                    "cap_epsilon": s.cap.epsilon, "cap_delta": s.cap.delta} for s in spend],
        "files": ["od.csv", *(["od-sequences.csv"] if trees else []), *(["totals.csv"] if section else [])],
    }
    if trees:
        params = {c.mechanism for c in charges.values() if c.id in {d.charge_id for d in draws}}
        if len(params) != 1:
            raise ValueError("the published OD trees were drawn with different parameters")
        mechanism = json.loads(params.pop())
        out |= {"epsilon_per_tree": mechanism["epsilon"], "height": mechanism["height"], "parameters": mechanism}
    if section:
        out["hierarchy"] = {k: v for k, v in section.items() if k != "charges"}
    return out


def _protects(units: set[str]) -> str:
    """What the OD files protect, from the units of the ledger scopes their charges went to: a card-day measurement
    charged once per date to a period's scope protects the card over the period (the ledger composes the dates)."""
    if units == {"card_period"}:
        return ("all trips of one card over one period (a calendar week by default), added or removed: each date's "
                "measurement protects the card's day and is charged to its week's scope, where the ledger composes them")
    return "all trips of one card on one service day (its whole sequence), added or removed"


def od_markdown(od: Mapping) -> list[str]:
    own = od["description"].removeprefix(od["hierarchy"]["description"]).strip() if "hierarchy" in od else od["description"]
    lines = [f"## Origin-destination release ({', '.join(od['files'])})", "", *([own, ""] if own else []),
             f"- protects: {od['protects']}"]  # the hierarchy's own description is printed once, in its section
    if "epsilon_per_tree" in od:
        lines += [f"- od-sequences.csv{'' if 'hierarchy' in od else ' and od.csv'}: epsilon per tree (one tree per "
                  f"date): {od['epsilon_per_tree']}, delta {od['delta']}",
                  f"- height (trips per card-day kept): {od['height']}"]
    lines += [f"- dates: {', '.join(a if a == b else f'{a} to {b}' for a, b in od['date_runs'])}", ""]
    if "hierarchy" in od:
        lines += hierarchy_markdown(od["hierarchy"])
    lines += [od["composition"], "",
              "| scope | unit | epsilon spent | delta spent | cap epsilon | cap delta |", "|---|---|---|---|---|---|"]
    lines += grouped_scopes(od["scopes"], lambda s: (s["unit"], f"{s['epsilon']:.4g}", f"{s['delta']:.3g}",
                                                     f"{s['cap_epsilon']:.4g}", f"{s['cap_delta']:.3g}"))
    return [*lines, ""]


@dataclass(frozen=True)
class OdFiles:
    """The OD files in the shared publication (``release.products.Publication``), one for the trees and the
    hierarchy: ``od.csv`` (the hierarchy's when it is on), with or without ``od-sequences.csv`` and ``totals.csv``."""

    tables: tuple[str, ...] = OD_TABLES

    @property
    def notes(self) -> Mapping[str, str]:
        return OD_NOTES

    def files(self, statement: Mapping) -> tuple[str, ...]:
        return tuple(statement["od"]["files"]) if "od" in statement else ()

    def columns(self, statement: Mapping) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        return OD_DICTIONARY

    def date_problems(self, folder: Path, day: str, present: set[str], modes: set[str], remainders: bool,
                      statement: Mapping | None) -> list[str]:
        """``validate_od`` of the date's OD files, if it has any; a hierarchy's ``od.csv`` has a ``level`` column
        (read from the file when the statement's OD section is not known)."""
        mine = present & {f"{t}.csv" for t in self.tables}
        if not mine:
            return []
        if "od.csv" not in mine:
            return [f"od-sequences.csv and totals.csv come with od.csv, found {sorted(present)}"]
        stated = (statement or {}).get("od")
        if stated is not None:
            hierarchy = "hierarchy" in stated
        else:
            with open(folder / "od.csv", encoding="utf-8") as handle:
                hierarchy = "level" in handle.readline().rstrip("\n").split(",")
        runs = [[day, day]]
        section = {"date_runs": runs, "files": sorted(mine), **({"hierarchy": {"date_runs": runs}} if hierarchy else {})}
        return validate_od(folder, section, trip_alphabet(load_stops()))

    def markdown(self, statement: Mapping) -> list[str]:
        return od_markdown(statement["od"]) if "od" in statement else []


OD_FILES = OdFiles()


def validate_od(folder: Path, od: Mapping, alphabet: TripAlphabet) -> list[str]:
    """Problems with the published OD files: columns, dates of the statement, locations and sequences inside the
    public alphabet, positive integer counts; a hierarchy ``od.csv`` also adds up level by level."""
    if "hierarchy" in od:
        problems = validate_hierarchy_csv(folder, dates_of(od["hierarchy"]["date_runs"]), od_domain(load_stops()))
    else:
        problems = _validate_tree_od(folder, od, alphabet)
    if "totals.csv" in od["files"]:
        problems += validate_totals_csv(folder, dates_of(od["date_runs"]))
    if "od-sequences.csv" not in od["files"]:
        return problems
    seqs = pd.read_csv(folder / "od-sequences.csv", dtype=str, keep_default_na=False)
    if list(seqs.columns) != SEQUENCE_COLUMNS:
        return [*problems, f"od-sequences.csv: columns must be {SEQUENCE_COLUMNS}"]
    trips = pd.Index([t for s in seqs["sequence"] for t in s.split(" | ")])
    if not trips.isin(alphabet.labels).all():
        problems.append("od-sequences.csv: a trip outside the public domain")
    return problems + _dates_and_counts("od-sequences.csv", seqs, dates_of(od["date_runs"]))


def _validate_tree_od(folder: Path, od: Mapping, alphabet: TripAlphabet) -> list[str]:
    frame = pd.read_csv(folder / "od.csv", dtype=str, keep_default_na=False)
    if list(frame.columns) != OD_COLUMNS:
        return [f"od.csv: columns must be {OD_COLUMNS}"]
    problems = []
    if (alphabet.lookup(frame["mode"], frame["origin"], frame["destination"]) < 0).any():
        problems.append("od.csv: a (mode, origin, destination) outside the public domain")
    return problems + _dates_and_counts("od.csv", frame, dates_of(od["date_runs"]))


def _dates_and_counts(name: str, frame: pd.DataFrame, dates: Sequence[str]) -> list[str]:
    out = []
    if not frame["date"].isin(dates).all():
        out.append(f"{name}: a date that privacy.json does not list")
    if not frame["count"].str.fullmatch(r"[1-9]\d*").all():
        out.append(f"{name}: a count that is not a positive integer")
    return out


def _compact(day: str) -> str:
    return day.replace("-", "")
