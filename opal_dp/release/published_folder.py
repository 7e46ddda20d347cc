"""The published folder: its layout, its index, where the latest publication is, and its validation.

    <published>/latest/dates/<YYYYMMDD>/<each product's files>, manifest.json   (e.g. time.csv, od.csv)
    <published>/latest/<each product's files>   (combined: every date, in date order)
    <published>/latest/privacy.json, PRIVACY.md, index.html, index.json
    <published>/latest.json                      ({"release_id": ..., "folder": "latest"}: written last)

``release.publish`` writes it; readers and tests read it through ``latest_release``, ``read_index`` and
``validate_published``. The products' files and their checks are the registry's (``release.products``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

from opal_dp.release.page.catalogue import INDEX_JSON
from opal_dp.release.page.render import PAGE, external_references, links, stated_guarantee, stated_sizes
from opal_dp.release.products import PUBLICATIONS
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD, stated_design
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.runs import dates_of, partition_keys

DATES = "dates"
MANIFEST = "manifest.json"
OWN_FILES = (STATEMENT_JSON, STATEMENT_MD, INDEX_JSON, PAGE)  # the publication's own, beside the products' (``files_of``)
LATEST = "latest"
LATEST_JSON = "latest.json"
STAGING_PREFIX, LINK_PREFIX = ".staging-", ".latest-"
RELEASE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")


def files_of(statement: Mapping) -> tuple[str, ...]:
    """The files of a release: each product's its statement lists (``release.products``), then ``OWN_FILES``."""
    return (*(name for p in PUBLICATIONS for name in p.files(statement)), *OWN_FILES)


FILES = files_of({})  # the files every release has (those of a statement that lists no other)


def published_index(published_dir: Path) -> dict:
    """The committed ``index.json`` of the publication (an empty index before the first), each date's entry
    completed from its ``manifest.json`` (``read_index``)."""
    folder = Path(published_dir) / LATEST
    if not (folder / INDEX_JSON).is_file():
        return {"release_id": None, "dates": {}, "combined": {}}
    return read_index(folder)


def read_index(folder: Path) -> dict:
    """``folder``'s ``index.json``, each date's entry completed from its ``manifest.json`` (draws, files and modes).
    A manifest whose SHA-256 is not the index's gives no draws (``None``): after a crash between a correction's
    placing and its commit, the date's manifest is the new one while the index still names the old, so the next
    publish finds the date changed and completes the correction."""
    index = json.loads((folder / INDEX_JSON).read_text(encoding="utf-8"))
    for day, entry in index["dates"].items():
        raw = (folder / DATES / day / MANIFEST).read_bytes()
        manifest = json.loads(raw)
        committed = hashlib.sha256(raw).hexdigest() == entry[MANIFEST]
        entry.update(draws=manifest["draws"] if committed else None, modes=manifest["modes"], files=manifest["files"])
    for about in index["combined"].values():
        about["dates"] = dates_of(about.pop("date_runs"))
    return index


def latest_release(published_dir: Path) -> Path:
    """The folder of the publication, as ``latest.json`` names it."""
    pointer = published_dir / LATEST_JSON
    data = json.loads(pointer.read_text(encoding="utf-8"))
    if not RELEASE_ID.fullmatch(data.get("release_id") or "") or data.get("folder") != LATEST:
        raise PublishedFormatError(f"{pointer} names no publication: {data!r}")
    return published_dir / LATEST


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def csv_header(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.readline()


def validate_published(folder: Path) -> None:
    """Raise ``PublishedFormatError`` unless ``folder`` holds exactly a well-formed publication: every date's files
    valid, each combined CSV the concatenation of its dates' files, the statement and the page. Reads every
    file: for tests and audits; a publish validates the dates it writes and the statement and page."""
    folder = Path(folder)
    statement = _statement(folder)
    index = read_index(folder)
    modes_of: dict[str, set[str]] = {}
    for key in partition_keys(statement):
        modes_of.setdefault(key["date"], set()).add(key["mode"])
    published = set(modes_of)
    if sorted(index["dates"]) != sorted(published) or sorted(p.name for p in (folder / DATES).iterdir()) != sorted(published):
        raise PublishedFormatError(f"{folder}: {DATES}/ and {INDEX_JSON} must hold exactly the dates of {STATEMENT_JSON}")
    remainders = stated_design(statement).consistent
    for day, entry in index["dates"].items():
        if set(entry["modes"]) != modes_of[day]:
            raise PublishedFormatError(f"{folder / DATES / day / MANIFEST}: not the modes {STATEMENT_JSON} states")
        validate_date(folder / DATES / day, day, modes_of[day], remainders, statement)
        if file_sha256(folder / DATES / day / MANIFEST) != entry[MANIFEST]:
            raise PublishedFormatError(f"{folder / DATES / day / MANIFEST}: not the manifest {INDEX_JSON} lists")
        for name, about in entry["files"].items():
            if file_sha256(folder / DATES / day / name) != about["sha256"]:
                raise PublishedFormatError(f"{folder / DATES / day / name}: not the file its {MANIFEST} lists")
    for name, about in index["combined"].items():
        parts = [folder / DATES / d / name for d in about["dates"]]
        expected = csv_header(parts[0]) + "".join(p.read_text(encoding="utf-8").split("\n", 1)[1] for p in parts)
        if (folder / name).read_text(encoding="utf-8") != expected:
            raise PublishedFormatError(f"{folder / name}: not its dates' files in date order")
    validate_root(folder, statement)


def validate_date(folder: Path, day: str, modes: set[str], remainders: bool, statement: Mapping | None = None) -> None:
    """Raise ``PublishedFormatError`` unless ``folder`` holds well-formed files of date ``day`` only, each some
    product's and valid by its ``date_problems`` (``statement``: the release's, when known)."""
    present = {p.name for p in folder.iterdir() if p.name != MANIFEST}
    known = {f"{t}.csv" for p in PUBLICATIONS for t in p.tables}
    if not present <= known:
        raise PublishedFormatError(f"{folder}: files no product publishes: {sorted(present - known)}")
    problems = [problem for p in PUBLICATIONS
                for problem in p.date_problems(folder, day, present, modes, remainders, statement)]
    if problems:
        raise PublishedFormatError(f"{folder}: " + "; ".join(problems))


def _statement(folder: Path) -> dict:
    try:
        return json.loads((folder / STATEMENT_JSON).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, FileNotFoundError) as err:
        raise PublishedFormatError(f"{folder / STATEMENT_JSON}: missing or not valid JSON ({err})") from err


def validate_root(folder: Path, statement: dict) -> None:
    """The publication's own files: exactly those of the statement beside ``dates/``, the statement rendered, the
    page true to them. Reads no CSV."""
    present = sorted(p.name for p in folder.iterdir())
    if present != sorted([*files_of(statement), DATES]):
        raise PublishedFormatError(f"{folder}: expected exactly the files {sorted([*files_of(statement), DATES])}, "
                                   f"found {present}")
    if (folder / STATEMENT_MD).read_text(encoding="utf-8") != render_markdown(statement):
        raise PublishedFormatError(f"{folder / STATEMENT_MD} does not render {STATEMENT_JSON}")
    _validate_page(folder / PAGE, statement)


def _validate_page(path: Path, statement: dict) -> None:
    """The page must be self-contained, state the statement's guarantee, link to every other file of the
    release and to nothing else, and state their sizes truly."""
    page = path.read_text(encoding="utf-8")
    guarantee = statement["guarantee"]
    if stated_guarantee(page) != (guarantee["epsilon"], guarantee["delta"]):
        raise PublishedFormatError(f"{path} does not state the guarantee of {STATEMENT_JSON}")
    external = external_references(page)
    if external:
        raise PublishedFormatError(f"{path}: refers to something outside the release: {external[:5]}")
    linked = {url for url in links(page) if not url.startswith("#")}
    others = set(files_of(statement)) - {PAGE}
    if linked != others:
        raise PublishedFormatError(f"{path}: must link to exactly the other files {sorted(others)}, "
                                   f"links to {sorted(linked)}")
    actual = {name: (path.parent / name).stat().st_size for name in others}
    if stated_sizes(page) != actual:
        raise PublishedFormatError(f"{path}: the file sizes it states are not those of the files")
