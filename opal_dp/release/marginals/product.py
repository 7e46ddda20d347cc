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


@dataclass(frozen=True)
class MarginalTables:
    """The marginal tables in the shared publication (``release.products.Publication``)."""

    tables: tuple[str, ...] = TABLES

    @property
    def notes(self) -> Mapping[str, str]:
        return TABLE_NOTES

    def files(self, statement: Mapping) -> tuple[str, ...]:
        return tuple(f"{t}.csv" for t in self.tables)

    def columns(self, statement: Mapping) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        """Their columns for the page's data dictionary; under a design with remainder rows, ``other`` explained."""
        remainders = statement.get("design", {}).get("name") == "public_domain"
        other = "; <code>other</code>: a remainder row of time-loc.csv, the sum of the combinations not listed on " \
                "their own (see above)" if remainders else ""
        tables = self.tables
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
            ("count", tables, "the noisy number of trips, a positive integer; a combination that is not listed had no "
                              "trips or too few to publish"),
        )

    def date_problems(self, folder: Path, day: str, present: set[str], modes: set[str], remainders: bool,
                      statement: Mapping | None) -> list[str]:
        """All three tables, rows of the date's ``modes`` only (``validate_table`` raises on a malformed row); with
        ``remainders``, the one-way tables equal to the joint's rows, remainders included."""
        if not set(self.files(statement or {})) <= present:
            return [f"expected the files {list(self.files(statement or {}))}, found {sorted(present)}"]
        for table in self.tables:
            validate_table(folder / f"{table}.csv", table, {(day, mode) for mode in modes}, remainders)
        if not remainders:
            return []
        tables = {t: pd.read_csv(folder / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
                  for t in self.tables}
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
