"""What an open-data portal asks of a dataset page besides the data: publisher, contact, licence, citation,
update frequency and temporal coverage; a data dictionary of every published column; the files with their
sizes. Publisher, contact, licence and update frequency are settings (``PageSettings``, from the environment);
everything else comes from the statement and the published files.

Nothing here links outside the release folder: the licence is named (with its SPDX identifier), not linked,
and the contact is text, because the publisher refuses a page that refers to anything outside the release.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


from opal_dp import settings
from opal_dp.release.page.common import e, iso, stacked_table
from opal_dp.release.products import PUBLICATIONS
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD

LICENCES = {  # SPDX identifier -> full name
    "CC-BY-4.0": "Creative Commons Attribution 4.0 International (CC BY 4.0)",
    "CC0-1.0": "Creative Commons Zero 1.0 Universal (CC0 1.0)",
    "CC-BY-SA-4.0": "Creative Commons Attribution-ShareAlike 4.0 International (CC BY-SA 4.0)",
    "ODbL-1.0": "Open Data Commons Open Database License 1.0 (ODbL)",
    "PDDL-1.0": "Open Data Commons Public Domain Dedication and License 1.0 (PDDL)",
}
NOT_STATED = "not stated"
TITLE = "Public-transport trips by smart-card tap (differentially private counts)"
@dataclass(frozen=True)
class PageSettings:
    """Who publishes the release and on what terms. ``licence``: an SPDX identifier (named in full if known) or
    any text; ``update_frequency``: how often a new release comes out, as people read it."""

    publisher: str = NOT_STATED
    contact: str = NOT_STATED
    licence: str = "CC-BY-4.0"
    update_frequency: str = "weekly"

    @classmethod
    def from_env(cls) -> PageSettings:
        """``$OPAL_DP_PUBLISHER``, ``$OPAL_DP_CONTACT``, ``$OPAL_DP_LICENCE``, ``$OPAL_DP_UPDATE_FREQUENCY``; an unset
        or empty variable keeps the default."""
        names = {"publisher": settings.PUBLISHER_ENV, "contact": settings.CONTACT_ENV,
                 "licence": settings.LICENCE_ENV, "update_frequency": settings.UPDATE_FREQUENCY_ENV}
        return cls(**{field: os.environ[name].strip() for field, name in names.items()
                      if os.environ.get(name, "").strip()})

    @property
    def licence_name(self) -> str:
        return LICENCES.get(self.licence, self.licence)


def coverage(dates: list[str]) -> str:
    span = iso(dates[0]) if len(dates) == 1 else f"{iso(dates[0])} to {iso(dates[-1])}"
    return f"{span} ({len(dates)} service date{'s' * (len(dates) > 1)})"


def dataset_section(page: PageSettings, statement: Mapping, dates: list[str]) -> str:
    """The dataset's metadata as a definition list, citation included."""
    release = statement["release"]
    citation = (f"{page.publisher if page.publisher != NOT_STATED else 'Publisher not stated'} "
                f"({release['created_at'][:4]}). {TITLE}, release {release['id']}, {coverage(dates)}. "
                f"Licence: {page.licence}.")
    items = {
        "Publisher": e(page.publisher),
        "Contact": e(page.contact),
        "Licence": f'<span id="licence">{e(page.licence_name)}</span> (SPDX: <code>{e(page.licence)}</code>). '
                   "Reuse must credit the publisher and keep the privacy statement with the data.",
        "Temporal coverage": f'<span id="coverage">{e(coverage(dates))}</span>',
        "Update frequency": e(page.update_frequency) + ": each release republishes every date it covers.",
        "Release": f"{e(release['id'])}, created {e(release['created_at'])}",
        "Cite as": f'<span id="citation">{e(citation)}</span>',
    }
    rows = "".join(f"<dt>{k}</dt><dd>{v}</dd>\n" for k, v in items.items())
    return (f'<section id="dataset" aria-labelledby="dataset-title">\n<h2 id="dataset-title">About this dataset</h2>\n'
            f'<dl class="meta">\n{rows}</dl>\n</section>\n')


def dictionary_section(statement: Mapping) -> str:
    """Every column of the CSV files of the release (the files ``files_section`` lists): what it holds, in which of
    them, and its special values; each product's columns from its publication (``columns``), a column that several
    products' files share in one row, its meanings joined in registry order."""
    merged: dict[str, tuple[list[str], str]] = {}
    for publication in PUBLICATIONS:
        for column, stems, meaning in publication.columns(statement):
            files, text = merged.get(column, ([], ""))
            merged[column] = ([*files, *stems], text + meaning)
    published = {stem for stem, _ in _notes(statement)}
    rows = [(f"<code>{e(c)}</code>", e(", ".join(f for f in files if f in published)), d)
            for c, (files, d) in merged.items() if set(files) & published]
    return (
        '<section id="dictionary" aria-labelledby="dictionary-title">\n<h2 id="dictionary-title">Data dictionary</h2>\n'
        f'{stacked_table(("column", "files", "meaning"), rows)}'
        "<p><code>-</code> and <code>-1</code> differ: <code>-</code> means the column was summed over (every value "
        "together), <code>-1</code> means the value is unknown.</p>\n</section>\n"
    )


def _notes(statement: Mapping) -> list[tuple[str, str]]:
    """(stem, what a row counts) of every CSV file the release has, in registry order (each product's ``notes``)."""
    return [(name.removesuffix(".csv"), publication.notes[name.removesuffix(".csv")])
            for publication in PUBLICATIONS for name in publication.files(statement) if name.endswith(".csv")]


INDEX_JSON = "index.json"


def files_section(rows: Mapping[str, int], statement: Mapping, sizes: Mapping[str, int]) -> str:
    """The files of the release, each with what it holds, its rows (published file stem -> rows) and its size in
    bytes."""
    notes = {f"{name}.csv": (note, rows.get(name)) for name, note in _notes(statement)}
    notes |= {STATEMENT_JSON: ("the privacy statement, machine-readable", None),
              STATEMENT_MD: ("the privacy statement for people", None),
              INDEX_JSON: ("the index: every published date, with the SHA-256 of "
                           "<code>dates/YYYYMMDD/manifest.json</code>, which lists that date's own copies of the files "
                           "above in the same folder (rows, bytes, SHA-256), its modes and the ledger draws its files "
                           "come from; the combined files, the dates they hold (runs of consecutive days) and their "
                           "sizes", None)}
    shares = (statement.get("coverage") or {}).get("files", {})
    table = stacked_table(("file", "holds", "share of trips", "rows", "size"), [
        (f'<a href="{name}">{name}</a>', note, f"{shares[name]:.0%}" if name in shares else "",
         "" if count is None else f"{count:,}", _size(name, sizes))
        for name, (note, count) in notes.items()], numeric=3)
    covered = ("Share of trips: the sum of a file's published counts against the trips totals.csv measures for the "
               "same dates (for od.csv, the trips in individually listed origin-destination pairs); a count under a "
               "file's threshold is not in its rows." if shares else
               "Without totals.csv this release states no share of trips: a sum of thresholded counts would "
               "understate it.")
    return (
        '<section id="files" aria-labelledby="files-title">\n<h2 id="files-title">Files</h2>\n<p>CSV files are UTF-8 '
        "with a header row; the columns of time-loc.csv, time.csv and loc.csv are <code>mode,date,tap,time,loc,"
        f"count</code>, as in the 2016 Opal open data.</p>\n<p class=\"note\">{covered}</p>\n{table}</section>\n"
    )


def _size(name: str, sizes: Mapping[str, int]) -> str:
    if name not in sizes:
        return ""
    n = sizes[name]
    shown = f"{n:,} B" if n < 1000 else f"{n / 1000:,.1f} kB" if n < 1_000_000 else f"{n / 1e6:,.2f} MB"
    return f'<span class="size" data-file="{e(name)}" data-bytes="{n}">{shown}</span>'
