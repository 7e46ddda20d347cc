"""The marginals as the registry sees them (``release.products``): every published date has their three tables
(``time-loc.csv``, ``time.csv``, ``loc.csv``, ``release.marginals.open_data``), checked against the statement's
partitions, and, under a design with remainder rows, checked to add up. They charge nothing on top of the share:
their budget is what the weekly share solves for, given the other products' charges (``release.share``). Their
part of the statement is its body (guarantee, mechanisms, per-marginal parameters: ``release.statement``), so they
add no section of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import PrivacyCost, PrivacyUnit
from opal_dp.release.marginals.public_domain import sum_problems
from opal_dp.release.marginals.open_data import TABLE_NOTES, TABLES, validate_table
from opal_dp.release.marginals.time_loc_tables import LEVELS_TABLE, levels_file_problems, totals_problems


@dataclass(frozen=True)
class MarginalTables:
    """The marginal tables in the shared publication (``release.products.Publication``)."""

    tables: tuple[str, ...] = (*TABLES, LEVELS_TABLE)

    @property
    def notes(self) -> Mapping[str, str]:
        return {**TABLE_NOTES, LEVELS_TABLE: "trips per mode, date, tap and level: the mode's day, each district's "
                                             "and station's day and hours (hierarchy design only)"}

    def files(self, statement: Mapping) -> tuple[str, ...]:
        """The 2016 files, and the levels' under the hierarchy design."""
        hierarchy = statement.get("design", {}).get("name") == "hierarchy"
        return tuple(f"{t}.csv" for t in (*TABLES, *((LEVELS_TABLE,) if hierarchy else ())))

    def columns(self, statement: Mapping) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        """Their columns for the page's data dictionary; under a design with remainder rows, ``other`` explained."""
        design = statement.get("design", {}).get("name")
        other = "; <code>other</code>: a remainder row of time-loc.csv, the sum of the combinations not listed on " \
                "their own (see above)" if design in ("public_domain", "hierarchy") else ""
        tables = TABLES
        levels = (LEVELS_TABLE,) if design == "hierarchy" else ()
        return (
            ("mode", tables, "<code>bus</code>, <code>ferry</code>, <code>light_rail</code> or <code>train</code>"),
            ("date", tables, "service date (the tap-on date), <code>YYYYMMDD</code>"),
            ("tap", tables, "<code>on</code>: where and when the trip started; <code>off</code>: where and when "
                            "it ended"),
            ("time", tables, "start of the 15-minute window of the tap, <code>H:MM</code> (0:00 to 23:45); "
                             "<code>-</code>: all times of the day together (loc.csv); <code>-1</code>: unknown, a trip "
                             f"without a tap-off{other}"),
            ("loc", tables, "where the tap was: the <strong>postcode</strong> of the stop for bus, the <strong>stop "
                            "name</strong> for train, ferry and light rail; <code>-</code>: all locations together "
                            f"(time.csv); <code>-1</code>: unknown, a trip without a tap-off{other}"),
            ("count", (*tables, *levels), "the noisy number of trips, a positive integer; a combination that is not "
                                          "listed had no trips or too few to publish"),
            *((("level", levels, "<code>mode_day</code>, <code>district_day</code>, <code>district_hour</code>, "
                                 "<code>station_day</code> or <code>station_hour</code>: every level adds up to the "
                                 "mode's day, each trip in one row of each"),
               ("hour", levels, "the hour of the day (0 to 23); <code>-</code>: the whole day; <code>-1</code>: no "
                                "tap-off; <code>other</code>: the station's hours not listed on their own"),
               ("district", levels, "the first three digits of the postcode and x; <code>-</code>: every district"),
               ) if levels else ()),
        )

    def date_problems(self, folder: Path, day: str, present: set[str], modes: set[str], remainders: bool,
                      statement: Mapping | None) -> list[str]:
        """All three tables, rows of the date's ``modes`` only (``validate_table`` raises on a malformed row); with
        ``remainders``, the one-way tables equal to the joint's rows, remainders included."""
        if not set(self.files(statement or {})) <= present:
            return [f"expected the files {list(self.files(statement or {}))}, found {sorted(present)}"]
        for table in TABLES:
            validate_table(folder / f"{table}.csv", table, {(day, mode) for mode in modes}, remainders)
        if f"{LEVELS_TABLE}.csv" in present:
            loc = pd.read_csv(folder / "loc.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
            levels = levels_file_problems(folder / f"{LEVELS_TABLE}.csv", loc)
            if any(m.get("root") == "totals.csv" for m in (statement or {}).get("marginals", [])):  # pinned trees
                if "totals.csv" not in present:
                    return ["the trees are pinned to totals.csv (privacy.json), which the date does not have"]
                totals = pd.read_csv(folder / "totals.csv", dtype=str, keep_default_na=False)
                pinned = totals_problems(loc, totals.astype({"count": "int64"}))
                levels += [f"loc.csv and totals.csv: {p}" for p in pinned]
            if levels:
                return levels
        if not remainders:
            return []
        tables = {t: pd.read_csv(folder / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
                  for t in TABLES}
        problems = sum_problems(tables)
        return ["the files do not add up: " + "; ".join(problems[:5])] if problems else []

    def markdown(self, statement: Mapping) -> list[str]:
        return []  # the statement's body is the marginals' (module docstring)


@dataclass(frozen=True)
class Marginals:
    name: str = "marginals"
    publication: MarginalTables = MarginalTables()
    dated: None = None  # the publish asset is the marginals' own (``defs.marginals.publish``)

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]:
        return []  # their budget is the share's remainder (module docstring)

    def audit(self, settings) -> None:
        return None  # their audit is the audit asset's own (``defs.marginals.audit``)


MARGINALS_PRODUCT = Marginals()
