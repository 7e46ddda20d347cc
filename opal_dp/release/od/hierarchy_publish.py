"""``od.csv`` from the hierarchical OD release (``release.od.hierarchy``): the gate before publishing, the table, the
statement's ``od.hierarchy`` section and the published file's checks.

One file with a ``level`` column, not one file per level: an open-data user downloads one table with one schema,
filters ``level`` for the matrix they want, and can check within the file that each level adds up to the one above
(district rows to the mode row, a district pair's location rows, its ``other`` remainder row included, to the
district row). Three files would repeat the schema, and the check would need a join across them.

Columns (``OD_HIERARCHY_COLUMNS``): ``date`` (``YYYYMMDD``), ``mode``, ``level`` (``mode``, ``district`` or
``location``), ``origin_district``, ``destination_district`` (a postcode's first three digits and ``x``, e.g. ``200x``; ``-1`` for no
tap-off; ``all`` on the mode row), ``origin``, ``destination`` (postcode for bus, stop name otherwise, ``-1`` no
tap-off; ``all`` above the location level; ``other`` on a district pair's remainder row), ``count`` (an integer
``>= 0``; a zero count is only on a mode row). Rows by date, mode, level, then labels.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core import PrivacyLedger
from opal_dp.core.hierarchy import fit
from opal_dp.release.statement.runs import date_runs, draws_section
from opal_dp.core.totals import TAPS
from opal_dp.network import MODES
from opal_dp.release.od.hierarchy import (
    LEVEL_NAMES,
    ROW_COLUMNS,
    OdDomain,
    domain_problems,
    measurement_of,
    rows,
    sum_problems,
    totals_of,
)

OD_HIERARCHY_COLUMNS = ROW_COLUMNS
TOTALS_COLUMNS = ["date", "mode", "tap", "count", "error_95"]
TOTALS_DESCRIPTION = (
    "totals.csv: trips per date, mode and tap (on: every trip; off: trips with a recorded tap-off), each a count "
    "measured on its own with discrete Gaussian noise (zCDP) and never suppressed, so it is not biased by the "
    "thresholds of the other files; error_95 bounds its noise with 95% probability. Each card-day counts at most "
    "`max_items` trips, at most `max_per_mode` of one mode."
)
DESCRIPTION = (
    "od.csv: origin-destination counts per date and mode at three levels with exact totals: the mode's total, "
    "district x district and location x location, all cells from the public stop list. Every cell of every level "
    "gets discrete Gaussian noise (zCDP), a top-down least-squares fit makes each level sum exactly to the one "
    "above, and location pairs whose noisy count is under a public threshold are summed into one row with "
    "origin = destination = other per district pair; so each trip counted (the first `height` of a card-day, at "
    "most `max_per_cell` of one location pair) is in exactly one row at each level."
)


def hierarchy_draw_ids(frames: Mapping[str, pd.DataFrame]) -> dict[tuple[str, str], int]:
    """(date, mode) -> the draw id of the rows of ``{date: rows with draw_id}``."""
    return {(day, mode): int(part["draw_id"].iloc[0]) for day, frame in frames.items()
            for mode, part in frame.groupby("mode", sort=True)}


def hierarchy_gate(frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger, root: Path, domain: OdDomain,
                   tau: int) -> tuple[list[str], pd.DataFrame | None]:
    """Problems with the hierarchy rows about to be published (``{date: rows with draw_id}``): each (date, mode)
    must come from a completed ledger draw of that date whose stored measurement fits to exactly these rows, add up
    level by level, and hold only labels of the public domain; and, where there is no problem, ``totals.csv`` of
    those dates, made from the same reads of the stored draws (``totals_table``; else None)."""
    problems, totals = [], {}
    for (day, mode), (draw_id, draw, recorded) in sorted(_stored_draws(frames, ledger).items()):
        if draw is None or draw.status != "complete" or draw.date != day:
            problems.append(f"{day} {mode} od: no completed ledger draw {draw_id} of that date")
            continue
        dom = domain.modes[mode]
        stored = pd.read_parquet(root / draw.release_ref)
        fitted = fit(dom.tree, measurement_of(stored, dom.tree), tuple(recorded["sigma"]), int(recorded["tau"]))
        part = frames[day][frames[day]["mode"] == mode].drop(columns=["draw_id"]).reset_index(drop=True)
        if recorded["tau"] != tau or not rows(dom, fitted, day).astype(str).equals(part.astype(str)):
            problems.append(f"{day} {mode} od: the rows are not the fit of the ledger's stored draw {draw_id}")
        try:
            totals[day, mode] = _published_totals(stored), recorded["totals"], draw_id
        except ValueError as err:
            problems.append(f"{day} {mode} od: {err} (draw {draw_id})")
    for frame in frames.values():
        problems += sum_problems(frame) + domain_problems(frame, domain)
    return problems, None if problems else totals_table(totals)


def _stored_draws(frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger) -> dict[tuple[str, str], tuple]:
    """(date, mode) -> (draw id, the ledger's draw or None, the mechanism its charge recorded or None)."""
    ids = hierarchy_draw_ids(frames)
    draws = {d.id: d for d in ledger.draws(ids.values())}
    charges = {c.id: c for c in ledger.charges(ids={d.charge_id for d in draws.values()})}
    return {key: (i, draws.get(i), json.loads(charges[draws[i].charge_id].mechanism) if i in draws else None)
            for key, i in ids.items()}


def stored_totals(frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger, root: Path
                  ) -> dict[tuple[str, str], tuple[tuple[int, int], dict, int]]:
    """(date, mode) -> the published (tap-on, tap-off) totals of the ledger's draw (its stored noisy totals floored
    at 0: post-processing), the totals' parameters as its charge recorded them, and the draw's id; refuses rows
    whose draw is not a completed ledger draw of their date."""
    out = {}
    for (day, mode), (draw_id, draw, recorded) in sorted(_stored_draws(frames, ledger).items()):
        if draw is None or draw.status != "complete" or draw.date != day:
            raise ValueError(f"{day} {mode}: the OD hierarchy's rows name draw {draw_id}, not a completed ledger draw "
                             "of that date")
        out[day, mode] = _published_totals(pd.read_parquet(root / draw.release_ref)), recorded["totals"], draw_id
    return out


def _published_totals(stored: pd.DataFrame) -> tuple[int, int]:
    """The (tap-on, tap-off) totals published of a stored draw: its noisy totals floored at 0 (post-processing)."""
    on, off = (max(0, int(n)) for n in totals_of(stored))
    return on, off


def totals_table(totals: Mapping[tuple[str, str], tuple[tuple[int, int], dict, int]]) -> pd.DataFrame:
    """``totals.csv`` of the gated dates: per (date, mode, tap) the published total and the 95% bound of its noise
    as the charge recorded it, from ``stored_totals``' (date, mode) -> (totals, parameters, draw id), in date and
    mode order."""
    out = [(day.replace("-", ""), mode, tap, n, int(recorded["error_bound_95"]))
           for (day, mode), (counts, recorded, _) in sorted(totals.items())
           for tap, n in zip(TAPS, counts)]
    return pd.DataFrame(out, columns=TOTALS_COLUMNS).astype({"count": "int64", "error_95": "int64"})


def hierarchy_table(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """``od.csv`` (module docstring) from the gated rows of each date."""
    parts = [f.drop(columns=["draw_id"]).assign(date=day.replace("-", "")) for day, f in sorted(frames.items())]
    if not parts:
        return pd.DataFrame(columns=OD_HIERARCHY_COLUMNS)
    frame = pd.concat(parts, ignore_index=True)
    frame["rank"] = frame["level"].map({name: i for i, name in enumerate(LEVEL_NAMES)})
    keys = ["date", "mode", "rank", "origin_district", "destination_district", "origin", "destination"]
    return frame.sort_values(keys, ignore_index=True)[OD_HIERARCHY_COLUMNS]


def hierarchy_statement(draw_ids: Mapping[tuple[str, str], int], ledger: PrivacyLedger) -> dict:
    """The statement's ``od.hierarchy`` section, from the ledger records of the published draws, (date, mode) ->
    draw id (``hierarchy_draw_ids``)."""
    draws = ledger.draws(draw_ids.values())
    charges = {c.id: c for c in ledger.charges(ids={d.charge_id for d in draws})}
    params = {c.mechanism for c in charges.values()}
    if len(params) != 1:
        raise ValueError("the published OD hierarchies were drawn with different parameters")
    mechanism = json.loads(params.pop())
    return {
        "description": DESCRIPTION,
        "file": "od.csv",
        "measures": "each date on its own: all trips of one card on one service day (its charge goes to the scope of the od section's unit)",
        "rho_per_date": mechanism["rho"],
        "delta": 0.0,
        "levels": list(LEVEL_NAMES),
        "level_rho": mechanism["level_rho"],
        "listing_threshold": mechanism["tau"],
        "parameters": mechanism,
        "columns": list(OD_HIERARCHY_COLUMNS),
        **({"totals": {"description": TOTALS_DESCRIPTION, "file": "totals.csv", "columns": TOTALS_COLUMNS,
                       **mechanism["totals"]}} if "totals" in mechanism else {}),
        "date_runs": date_runs(day.replace("-", "") for day, _ in draw_ids),
        "draws": draws_section(d.id for d in draws),
        "charges": sorted(charges),
    }


def hierarchy_markdown(section: Mapping) -> list[str]:
    totals = section.get("totals")
    return ["### od.csv: hierarchical OD counts with exact totals", "", section["description"], "",
            f"- rho per date (zCDP, delta {section['delta']}): {section['rho_per_date']}, split over the levels "
            f"{', '.join(section['levels'])} as {', '.join(f'{r:.4g}' for r in section['level_rho'])}",
            f"- location pairs listed where their noisy count reached {section['listing_threshold']} (a public "
            "threshold from the noise scale), then fitted so that the levels add up: a listed pair's published count "
            "can be lower; the others are in their district pair's `other` row",
            f"- columns: {', '.join(section['columns'])}", "",
            *([] if totals is None else [
                "### totals.csv: trips per date, mode and tap", "", totals["description"], "",
                f"- rho per date (zCDP, delta 0, in the same charge as od.csv): {totals['rho']:.4g}; noise standard "
                f"deviation {totals['sigma']:.4g}; 95% of totals within ±{totals['error_bound_95']} of their count",
                f"- bounds: at most {totals['max_items']} trips of a card-day, {totals['max_per_mode']} of one mode; a "
                "card-day's further trips are not counted, so the totals run low by those trips (no ± covers them)",
                f"- columns: {', '.join(totals['columns'])}", ""])]


def validate_hierarchy_csv(folder: Path, dates: list[str], domain: OdDomain) -> list[str]:
    """Problems with a published hierarchy ``od.csv``: columns, dates of the statement, integer counts ``>= 0``
    (0 only on a mode row), labels of the public domain, levels that add up."""
    frame, problems = _read_published(folder, "od.csv", OD_HIERARCHY_COLUMNS, dates)
    if frame is None:
        return problems
    positive = frame["count"].str.fullmatch(r"[1-9]\d*")
    if not (positive | ((frame["count"] == "0") & (frame["level"] == "mode"))).all():
        problems.append("od.csv: a count that is not a positive integer (or 0 on a mode row)")
        return problems
    frame = frame.astype({"count": np.int64})
    return problems + [f"od.csv: {p}" for p in sum_problems(frame) + domain_problems(frame, domain)]


def _read_published(folder: Path, name: str, columns: list[str], dates: list[str]) -> tuple[pd.DataFrame | None,
                                                                                            list[str]]:
    """A published CSV as text, and its first problems: columns other than ``columns`` (then no frame), a date that
    the statement does not list."""
    frame = pd.read_csv(folder / name, dtype=str, keep_default_na=False)
    if list(frame.columns) != columns:
        return None, [f"{name}: columns must be {columns}"]
    return frame, [] if frame["date"].isin(dates).all() else [f"{name}: a date that privacy.json does not list"]


def validate_totals_csv(folder: Path, dates: list[str]) -> list[str]:
    """Problems with a published ``totals.csv``: columns, dates of the statement, modes and taps of the public
    domain, one row per (date, mode, tap), integer counts ``>= 0`` and error bounds ``> 0``."""
    frame, problems = _read_published(folder, "totals.csv", TOTALS_COLUMNS, dates)
    if frame is None:
        return problems
    if not (frame["mode"].isin(MODES) & frame["tap"].isin(TAPS)).all():
        problems.append("totals.csv: a mode or tap outside the public domain")
    if frame.duplicated(["date", "mode", "tap"]).any():
        problems.append("totals.csv: a (date, mode, tap) listed twice")
    if not (frame["count"].str.fullmatch(r"0|[1-9]\d*") & frame["error_95"].str.fullmatch(r"[1-9]\d*")).all():
        problems.append("totals.csv: a count that is not an integer >= 0 or an error_95 that is not one > 0")
    return problems
