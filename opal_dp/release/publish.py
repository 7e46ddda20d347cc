"""Publish released marginals (and any other product's tables, e.g. the OD files) as the open-data files, date by
date, next to their privacy statement.

Published layout; nothing else is written under the published folder, apart from the hidden staging files and
folders (``.staging-*``) of a publish in progress::

    <published>/latest/dates/<YYYYMMDD>/{time-loc,time,loc}.csv [od.csv, od-sequences.csv], manifest.json
                                                 (one date, written once)
    <published>/latest/{time-loc,time,loc}.csv [od.csv, od-sequences.csv]   (combined: every date, in published order)
    <published>/latest/privacy.json, PRIVACY.md, index.html, index.json
    <published>/latest.json                      ({"release_id": ..., "folder": "latest"}: written last)

A date is written when its partitions are complete and gated, and again only when the ledger released it again
(a correction). Each date's ``manifest.json`` lists its files (rows, bytes, SHA-256), modes and ledger draws;
``index.json`` lists every date with the SHA-256 of its manifest, and each combined file's dates and size; the
statement states its dates and draws as runs (``statement.runs``), so what a weekly publish rewrites grows by
about a line a date, not by the date's whole listing. The
combined files are the dates' files concatenated in date order (one header): appended to when new dates follow,
rebuilt by streaming otherwise, never held whole in memory. ``latest.json`` is the
pointer readers should use (``latest_release``): a plain file works on any filesystem a reader mounts or syncs.

The files are public: folders 0755, files 0644, whatever the umask (the command line runs under 077).

Rows are ``mode,date,tap,time,loc,count`` as in the 2016 open data (``bus,20160730,on,2:30,2000,415``),
ordered by date, mode, tap (on before off), time window and location label: a function of the
released bins only, never of the order the data came in. A public-domain release (the statement names its
design) also has the remainder rows ``time = T, loc = other`` and ``time = other, loc = L`` in ``time-loc.csv``,
and its files must add up exactly (``public_domain.sum_problems``); an SBH release may have neither.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from opal_dp.network import MODES, load_stops
from opal_dp.parallel import map_calls
from opal_dp.permissions import PUBLIC_DIR, PUBLIC_FILE, create_file, make_dirs, reserve_private
from opal_dp.prep.binning import window_label
from opal_dp.prep.sequences import trip_alphabet
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.private_files import fsync_folder
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, Marginal
from opal_dp.release.od.publish import OD_TABLES, validate_od
from opal_dp.release.marginals.public_domain import OTHER, OTHER_WINDOW, sum_problems
from opal_dp.release.page.render import PAGE, external_references, links, render_index, stated_guarantee, stated_sizes
from opal_dp.release.page.catalogue import INDEX_JSON, PageSettings
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD, open_data_partition, stated_design
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.runs import date_runs, dates_of, partition_keys

COLUMNS = ["mode", "date", "tap", "time", "loc", "count"]
TABLES = ("time-loc", "time", "loc")
TAPS = ("on", "off")
AGGREGATED = "-"
DATES = "dates"
MANIFEST = "manifest.json"
FILES = (*(f"{t}.csv" for t in TABLES), STATEMENT_JSON, STATEMENT_MD, INDEX_JSON, PAGE)
CHUNK = 1 << 20  # bytes copied at a time when streaming date files into a combined file
LATEST = "latest"
LATEST_JSON = "latest.json"
STAGING_PREFIX, LINK_PREFIX = ".staging-", ".latest-"
T = TypeVar("T")

WINDOW_LABELS = [window_label(w) for w in range(UNKNOWN, WINDOWS_PER_DAY)]
TIME_ORDER = [AGGREGATED, *WINDOW_LABELS, OTHER]  # categories of the time column, in sort order
RELEASE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")
DATE = re.compile(r"\d{8}")
COUNT_TEXT = re.compile(r"[1-9]\d*")


def files_of(statement: Mapping) -> tuple[str, ...]:
    """The files of a release: the marginals' and the statement's, plus the OD files its OD section lists."""
    return FILES + tuple(statement["od"]["files"]) if "od" in statement else FILES


class PublishedFormatError(ValueError):
    """A published file does not match the open-data format."""


def to_open_data(releases: Mapping[str, Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """{marginal: {partition key: released frame}} -> {"time-loc"|"time"|"loc": published table}."""
    names = sorted(m.name for m in MARGINALS)
    if sorted(releases) != names:
        raise ValueError(f"releases must hold exactly the marginals {names}, got {sorted(releases)}")
    keys = {name: sorted(map(str, parts)) for name, parts in releases.items()}
    if len({tuple(k) for k in keys.values()}) > 1:
        raise ValueError("every marginal must cover the same (date, mode) partitions")
    dates = sorted({open_data_partition(key)[0] for key in keys[names[0]]})
    pieces: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    for marginal in MARGINALS:
        for key, frame in releases[marginal.name].items():
            pieces[marginal.table].append(_rows(marginal, str(key), frame, dates))
    return {table: _canonical(parts) for table, parts in pieces.items()}


def _rows(marginal: Marginal, key: str, frame: pd.DataFrame, dates: list[str]) -> pd.DataFrame:
    """One released frame in published form, as categoricals; ``-`` in the aggregated-over column."""
    day, mode = open_data_partition(key)
    n = len(frame)

    def constant(value: str, categories: list[str]) -> pd.Categorical:
        return pd.Categorical.from_codes(np.full(n, categories.index(value)), categories=categories)

    if marginal.by_time:
        window = frame[TIME].to_numpy("int64")
        other = window == OTHER_WINDOW  # a remainder row (public-domain design; validated on publishing)
        if n and ((window[~other] < UNKNOWN).any() or window.max() >= WINDOWS_PER_DAY):
            raise ValueError(f"{marginal.name} {key}: time_window outside [{UNKNOWN}, {WINDOWS_PER_DAY})")
        time = pd.Categorical.from_codes(np.where(other, len(TIME_ORDER) - 1, window - UNKNOWN + 1),
                                         categories=TIME_ORDER)
    else:
        time = constant(AGGREGATED, TIME_ORDER)
    return pd.DataFrame(
        {
            "mode": constant(mode, list(MODES)),
            "date": constant(day, dates),
            "tap": constant(marginal.tap, list(TAPS)),
            "time": time,
            "loc": pd.Categorical(frame[LOC]) if marginal.by_loc else constant(AGGREGATED, [AGGREGATED]),
            "count": frame[COUNT].to_numpy("int64"),
        }
    )


def _canonical(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate published pieces and put their rows in published order; bins must be unique."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "count" else object) for c in COLUMNS})
    loc = union_categoricals([part["loc"] for part in parts], sort_categories=True)
    table = pd.concat([part.drop(columns="loc") for part in parts], ignore_index=True).assign(loc=loc)[COLUMNS]
    order, repeated = _order(table)
    if repeated:
        raise ValueError("released bins are not unique: a (mode, date, tap, time, loc) appears twice")
    return table.iloc[order].reset_index(drop=True)


def _order(table: pd.DataFrame) -> tuple[np.ndarray, bool]:
    """Row positions in published order (date, mode, tap on/off, time window, location label), and
    whether any (mode, date, tap, time, loc) appears twice."""
    codes = [
        _categorical(table["date"]),
        _categorical(table["mode"], list(MODES)),
        _categorical(table["tap"], list(TAPS)),
        _categorical(table["time"], TIME_ORDER),
        _categorical(table["loc"]),
    ]
    key = np.ravel_multi_index([c.codes for c in codes], [max(len(c.categories), 1) for c in codes])
    order = np.argsort(key, kind="stable")
    return order, bool((np.diff(key[order]) == 0).any())


def _categorical(column: pd.Series, categories: list[str] | None = None) -> pd.Categorical:
    """``column`` as a categorical in the order of ``categories`` (default: its distinct values, sorted)."""
    return pd.Categorical(column, categories=sorted(column.unique()) if categories is None else categories)


@dataclass(frozen=True)
class DateFiles:
    """One service date as published: its tables (file stem -> rows in published order: the marginals', and any
    other product's, e.g. the OD tables), the ledger draws they come from, and what its validation needs (the
    modes of its partitions; whether its design has remainder rows)."""

    date: str  # YYYYMMDD
    tables: Mapping[str, pd.DataFrame]
    draws: tuple[int, ...]
    modes: tuple[str, ...]
    remainders: bool = False


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


def _committed(index: dict) -> dict:
    """The index as ``index.json`` holds it: per date only its manifest's SHA-256 (the manifest lists its draws,
    modes and files), and each combined file's dates as runs, so that what a weekly publish rewrites grows by a
    line a date."""
    return {**index, "dates": {d: {MANIFEST: e[MANIFEST]} for d, e in index["dates"].items()},
            "combined": {name: {"date_runs": date_runs(about["dates"]), "bytes": about["bytes"]}
                         for name, about in index["combined"].items()}}


def given(day: DateFiles) -> DateFiles:
    """``publish``'s ``prepare`` for dates already made."""
    return day


def publish(
    published_dir: Path, changed: Sequence[T], statement_of: Callable[[PageSummary], dict],
    stops: pd.DataFrame, state_dir: Path, page: PageSettings = PageSettings(),
    prepare: Callable[[T], DateFiles] = given,
) -> Path:
    """Publish the ``changed`` dates (new, or re-released: a correction) into ``<published>/latest`` and rebuild
    what covers them all; nothing else is rewritten.

    Every changed date is made (``prepare`` of its item of ``changed``: the caller's gate, which raises to refuse
    it; ``given`` when the items are already ``DateFiles``), written, validated and fsynced in a staging folder
    first, the dates side by side in the per-day workers (``opal_dp.parallel``; ``prepare`` is pickled by name);
    any failure there publishes nothing, and every date is staged or abandoned before the error is raised. Only
    then is each renamed to ``dates/<date>``; each combined CSV is appended to in place when every
    changed date is new and follows the dates it holds (else rebuilt by streaming the date files in date order
    into a new file renamed over it); then ``privacy.json`` (``statement_of`` the publication's
    ``PageSummary``), ``PRIVACY.md`` and ``index.html`` are replaced, then ``index.json`` (the commit record),
    then ``latest.json``. A date's files are always whole; after a crash the root files may mix two publishes
    until the next one, which finds dates the index lacks, a combined file whose size is not the index's, or
    ``latest.json`` behind the index, and completes it. ``state_dir`` (private) keeps the page summaries, so the
    statement and the page cost the changed dates only and never read a published CSV."""
    published_dir = make_dirs(published_dir, PUBLIC_DIR)
    with publish_lock(published_dir):
        _remove_stale(published_dir)
        folder, staging = published_dir / LATEST, published_dir / f"{STAGING_PREFIX}{DATES}"
        index = published_index(published_dir)
        state = _SummaryState(Path(state_dir), index)
        added: list[PageSummary] = []
        removed: list[PageSummary] = []
        touched: list[str] = []
        try:
            if changed:
                make_dirs(staging, PUBLIC_DIR)
            for day in map_calls(stage_date, [(staging, prepare, item) for item in changed]):
                if day.date in index["dates"]:
                    removed.append(state.of_date(folder, day.date, index["dates"][day.date]))
                index["dates"][day.date] = day.entry
                state.store(day.date, day.draws, day.summary)
                added.append(day.summary)
                touched.append(day.date)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if not touched and index["release_id"] is not None and index["release_id"] == _pointer(published_dir):
            return folder  # nothing new, and the last publish was committed whole
        summary = state.combined(folder).combine(added, removed)
        statement = statement_of(summary)
        release_id = statement["release"]["id"]
        if not RELEASE_ID.fullmatch(release_id) or release_id == LATEST:
            shutil.rmtree(staging, ignore_errors=True)
            raise ValueError(f"release id must match {RELEASE_ID.pattern} and not be {LATEST!r}, got {release_id!r}")
        dates_dir = make_dirs(_publication_folder(published_dir) / DATES, PUBLIC_DIR)
        for date in touched:  # every changed date passed the gate and validated: only now does any go out
            _place_date(staging / date, dates_dir / date)
        shutil.rmtree(staging, ignore_errors=True)
        index["dates"] = dict(sorted(index["dates"].items()))
        index["combined"] = _combine(folder, index, touched)
        index["release_id"] = release_id
        committed = folder / f"{STAGING_PREFIX}{INDEX_JSON}"
        write_durably(committed, json.dumps(_committed(index), separators=(",", ":")) + "\n")
        _replace(folder / STATEMENT_JSON, json.dumps(statement, indent=2, ensure_ascii=False) + "\n")
        _replace(folder / STATEMENT_MD, render_markdown(statement))
        sizes = {name: (folder / name).stat().st_size for name in files_of(statement) if name not in (PAGE, INDEX_JSON)}
        sizes[INDEX_JSON] = committed.stat().st_size
        _replace(folder / PAGE, render_index(summary, statement, stops, sizes, page))
        os.replace(committed, folder / INDEX_JSON)  # the commit: the dates, the combined files and their sizes
        fsync_folder(folder)
        _validate_root(folder, statement)
        state.commit(index["release_id"], summary)
        _replace(published_dir / LATEST_JSON, json.dumps({"release_id": index["release_id"], "folder": LATEST}) + "\n")
        fsync_folder(published_dir)
    return folder


def _pointer(published_dir: Path) -> str | None:
    """The release id ``latest.json`` names (None before the first publish)."""
    pointer = published_dir / LATEST_JSON
    return json.loads(pointer.read_text(encoding="utf-8")).get("release_id") if pointer.is_file() else None


def _publication_folder(published_dir: Path) -> Path:
    """``<published>/latest``, created on the first publish; a ``latest`` link of the per-release layout this one
    replaces is removed (its release folders stay, untouched), and so are leftovers of an interrupted publish."""
    folder = published_dir / LATEST
    if folder.is_symlink():
        folder.unlink()
    make_dirs(folder, PUBLIC_DIR)
    _remove_stale(folder)
    if (folder / DATES).is_dir():
        _remove_stale(folder / DATES)
    return folder


@dataclass(frozen=True)
class StagedDate:
    """A date written, validated and fsynced in the staging folder: its index entry and page summary."""

    date: str
    draws: tuple[int, ...]
    entry: dict
    summary: PageSummary


def stage_date(staging: Path, prepare: Callable[[T], DateFiles], item: T) -> StagedDate:
    """``prepare(item)`` (a refusal raises before anything of the date is written), then its files and manifest
    written, validated and fsynced in ``staging``."""
    day = prepare(item)
    if not DATE.fullmatch(day.date):
        raise ValueError(f"a published date is YYYYMMDD, got {day.date!r}")
    return StagedDate(day.date, tuple(day.draws), _stage_date(staging, day),
                      PageSummary.of_tables({t: day.tables[t] for t in TABLES}))


def _stage_date(staging: Path, day: DateFiles) -> dict:
    """Write, validate and fsync one date's files and its manifest in the staging folder; its index entry."""
    folder = make_dirs(staging / day.date, PUBLIC_DIR)
    for name, frame in day.tables.items():
        write_durably(folder / f"{name}.csv", frame.to_csv(index=False, lineterminator="\n"))
    validate_date(folder, day.date, set(day.modes), day.remainders)
    manifest = {"date": day.date, "draws": sorted(day.draws), "modes": sorted(day.modes),
                "files": {f"{name}.csv": {"rows": len(frame), "bytes": (folder / f"{name}.csv").stat().st_size,
                                          "sha256": _sha256(folder / f"{name}.csv")}
                          for name, frame in day.tables.items()}}
    write_durably(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    fsync_folder(folder)
    return {"draws": manifest["draws"], "modes": manifest["modes"], "files": manifest["files"],
            MANIFEST: _sha256(folder / MANIFEST)}


def _place_date(staged: Path, target: Path) -> None:
    """Rename a staged date into ``dates/<date>``, replacing the files a correction supersedes."""
    if target.exists():
        old = target.with_name(f"{STAGING_PREFIX}old-{target.name}")
        os.rename(target, old)
        os.rename(staged, target)
        shutil.rmtree(old)
    else:
        os.rename(staged, target)
    fsync_folder(target.parent)


def _combine(folder: Path, index: dict, touched: list[str]) -> dict:
    """Bring every combined CSV up to the index's dates: append the touched dates when they are all new and
    follow the dates it holds and its size is the one committed, else rebuild it by streaming; its index entry."""
    present = {name for entry in index["dates"].values() for name in entry["files"]}
    known = [f"{t}.csv" for t in (*TABLES, *OD_TABLES)]
    names = [n for n in known if n in present] + sorted(present - set(known))
    combined = {}
    for name in names:
        dates = [d for d, entry in index["dates"].items() if name in entry["files"]]
        old = index["combined"].get(name, {"dates": [], "bytes": -1})
        path, new = folder / name, [d for d in touched if name in index["dates"][d]["files"]]
        appendable = (path.is_file() and path.stat().st_size == old["bytes"] and not set(new) & set(old["dates"])
                      and dates == [*old["dates"], *sorted(new)])
        if appendable:
            _append(path, [folder / DATES / d / name for d in sorted(new)])
        else:
            staging = folder / f"{STAGING_PREFIX}{name}"
            with open(create_file(staging, PUBLIC_FILE), "w", encoding="utf-8", newline="") as out:
                out.write(_header(folder / DATES / dates[0] / name))
            _append(staging, [folder / DATES / d / name for d in dates])
            os.replace(staging, path)
        combined[name] = {"dates": dates, "bytes": path.stat().st_size}
    return combined


def _header(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.readline()


def _append(path: Path, parts: list[Path]) -> None:
    """Append each part's rows (its header must be the file's) to ``path``, chunk by chunk, then fsync."""
    header = _header(path)
    with open(path, "a", encoding="utf-8", newline="") as out:
        for part in parts:
            with open(part, encoding="utf-8", newline="") as rows:
                if rows.readline() != header:
                    raise PublishedFormatError(f"{part}: its header is not that of {path.name}")
                shutil.copyfileobj(rows, out, CHUNK)
        out.flush()
        os.fsync(out.fileno())


def _replace(path: Path, text: str) -> None:
    """A small public file replaced atomically (written beside it, fsynced, renamed over it)."""
    staging = path.with_name(f"{STAGING_PREFIX}{path.name}")
    write_durably(staging, text)
    os.replace(staging, path)


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class _SummaryState:
    """The private page summaries: one per published date (named by its draws) and the publication's, named by
    the release that committed it. A missing one (a crash, a lost private folder) is rebuilt from the dates."""

    def __init__(self, root: Path, index: dict):
        self.root, self.index = make_dirs(root), index

    def _date_path(self, date: str, draws: Iterable[int]) -> Path:
        return self.root / "dates" / f"{date}-{hashlib.sha256(repr(sorted(draws)).encode()).hexdigest()[:16]}.json"

    def store(self, date: str, draws: Iterable[int], summary: PageSummary) -> None:
        path = self._date_path(date, draws)
        make_dirs(path.parent)
        reserve_private(path).write_text(summary.to_json(), encoding="utf-8")

    def of_date(self, folder: Path, date: str, entry: dict) -> PageSummary:
        path = None if entry["draws"] is None else self._date_path(date, entry["draws"])
        if path is not None and path.is_file():
            return PageSummary.from_json(path.read_text(encoding="utf-8"))
        tables = {t: pd.read_csv(folder / DATES / date / f"{t}.csv", dtype=str, keep_default_na=False) for t in TABLES}
        return PageSummary.of_tables(tables)

    def combined(self, folder: Path) -> PageSummary:
        """The committed publication's summary (before this publish's dates replaced any)."""
        if self.index["release_id"] is None:
            return PageSummary()
        path = self.root / f"summary-{self.index['release_id']}.json"
        if path.is_file():
            return PageSummary.from_json(path.read_text(encoding="utf-8"))
        committed = published_index(folder.parent)["dates"]
        return PageSummary().combine(self.of_date(folder, d, e) for d, e in committed.items())

    def commit(self, release_id: str, summary: PageSummary) -> None:
        reserve_private(self.root / f"summary-{release_id}.json").write_text(summary.to_json(), encoding="utf-8")
        for old in self.root.glob("summary-*.json"):
            if old.name != f"summary-{release_id}.json":
                old.unlink()


def latest_release(published_dir: Path) -> Path:
    """The folder of the publication, as ``latest.json`` names it."""
    pointer = published_dir / LATEST_JSON
    data = json.loads(pointer.read_text(encoding="utf-8"))
    if not RELEASE_ID.fullmatch(data.get("release_id") or "") or data.get("folder") != LATEST:
        raise PublishedFormatError(f"{pointer} names no publication: {data!r}")
    return published_dir / LATEST


@contextmanager
def publish_lock(folder: Path):
    """One publisher at a time: an advisory lock on the folder itself (writes nothing)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale(folder: Path) -> None:
    """Leftovers of an interrupted publish: staging folders and files, unrenamed links."""
    for path in folder.iterdir():
        if path.name.startswith(STAGING_PREFIX) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.name.startswith((LINK_PREFIX, STAGING_PREFIX)):
            path.unlink()


def write_durably(path: Path, text: str) -> None:
    """A public file written and fsynced before the caller renames its folder into place."""
    with open(create_file(path, PUBLIC_FILE), "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


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
        validate_date(folder / DATES / day, day, modes_of[day], remainders, od=statement.get("od"))
        if _sha256(folder / DATES / day / MANIFEST) != entry[MANIFEST]:
            raise PublishedFormatError(f"{folder / DATES / day / MANIFEST}: not the manifest {INDEX_JSON} lists")
        for name, about in entry["files"].items():
            if _sha256(folder / DATES / day / name) != about["sha256"]:
                raise PublishedFormatError(f"{folder / DATES / day / name}: not the file its {MANIFEST} lists")
    for name, about in index["combined"].items():
        parts = [folder / DATES / d / name for d in about["dates"]]
        expected = _header(parts[0]) + "".join(p.read_text(encoding="utf-8").split("\n", 1)[1] for p in parts)
        if (folder / name).read_text(encoding="utf-8") != expected:
            raise PublishedFormatError(f"{folder / name}: not its dates' files in date order")
    _validate_root(folder, statement)


def validate_date(folder: Path, day: str, modes: set[str], remainders: bool, od: Mapping | None = None) -> None:
    """Raise ``PublishedFormatError`` unless ``folder`` holds well-formed files of date ``day`` only: the marginal
    tables (and the OD tables, if any; ``od``: the statement's OD section when known)."""
    present = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    marginals, od_files = [f"{t}.csv" for t in TABLES], [f"{t}.csv" for t in OD_TABLES]
    extra = set(present) - set(marginals)
    if not set(marginals) <= set(present) or not extra <= set(od_files) or (extra and "od.csv" not in extra):
        raise PublishedFormatError(f"{folder}: expected the files {marginals} (and od.csv, with or without "
                                   f"od-sequences.csv), found {present}")
    partitions = {(day, mode) for mode in modes}
    for table in TABLES:
        _validate_table(folder / f"{table}.csv", table, partitions, remainders)
    if remainders:
        tables = {t: pd.read_csv(folder / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
                  for t in TABLES}
        problems = sum_problems(tables)
        if problems:
            raise PublishedFormatError(f"{folder}: the files do not add up: " + "; ".join(problems[:5]))
    if extra:  # a hierarchy's od.csv has a level column (when the statement's od section is not known yet)
        hierarchy = "hierarchy" in od if od is not None else "level" in _header(folder / "od.csv").rstrip("\n").split(",")
        runs = [[day, day]]
        section = {"date_runs": runs, "files": sorted(extra), **({"hierarchy": {"date_runs": runs}} if hierarchy else {})}
        problems = validate_od(folder, section, trip_alphabet(load_stops()))
        if problems:
            raise PublishedFormatError(f"{folder}: " + "; ".join(problems))


def _statement(folder: Path) -> dict:
    try:
        return json.loads((folder / STATEMENT_JSON).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, FileNotFoundError) as err:
        raise PublishedFormatError(f"{folder / STATEMENT_JSON}: missing or not valid JSON ({err})") from err


def _validate_root(folder: Path, statement: dict) -> None:
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


def _validate_table(path: Path, table: str, partitions: set[tuple[str, str]], remainders: bool = False) -> None:
    """``remainders``: the release's design has remainder rows (``other``), in ``time-loc.csv`` only."""
    def fail(what: str, bad: pd.Series | np.ndarray) -> None:
        if bad.any():
            raise PublishedFormatError(f"{path}: {what}, e.g. row {int(np.flatnonzero(bad)[0]) + 2}")

    with open(path, encoding="utf-8", newline="") as handle:
        header = handle.readline()
    if header != ",".join(COLUMNS) + "\n":
        raise PublishedFormatError(f"{path}: header must be {','.join(COLUMNS)!r}, got {header!r}")
    rows = pd.read_csv(path, dtype="category", keep_default_na=False, na_filter=False)
    by_time, by_loc = table != "loc", table != "time"
    remainders = remainders and by_time and by_loc
    other_time = (rows["time"] == OTHER) if remainders else np.zeros(len(rows), dtype=bool)
    other_loc = (rows["loc"] == OTHER) if remainders else np.zeros(len(rows), dtype=bool)
    fail("mode not one of " + "/".join(MODES), ~rows["mode"].isin(MODES))
    fail("date is not a valid YYYYMMDD", ~_each_distinct(rows["date"], _is_date))
    fail("(date, mode) is not a partition listed in privacy.json",
         ~pd.MultiIndex.from_arrays([rows["date"], rows["mode"]]).isin(list(partitions)))
    fail("tap not on/off", ~rows["tap"].isin(TAPS))
    fail("time must be H:MM at a 15-minute start or -1" if by_time else "time must be '-' (aggregated)",
         ~(rows["time"].isin(WINDOW_LABELS) | other_time) if by_time else rows["time"] != AGGREGATED)
    fail("loc must be a label or -1" if by_loc else "loc must be '-' (aggregated)",
         rows["loc"].isin([AGGREGATED, ""]) if by_loc else rows["loc"] != AGGREGATED)
    fail("a remainder row has time = other and loc = other", other_time & other_loc)
    fail(f"loc = {OTHER} is a remainder row, which only a public-domain release's time-loc.csv has",
         (rows["loc"] == OTHER) & ~other_loc)
    unknown_time, unknown_loc = rows["time"] == UNKNOWN_LABEL, rows["loc"] == UNKNOWN_LABEL
    fail("unknown (-1) appears on a tap-on row", (unknown_time | unknown_loc) & (rows["tap"] == "on"))
    if by_time and by_loc:  # a remainder row of the unknown cell pairs -1 with other
        fail("time and loc must be unknown (-1) together", (unknown_time != unknown_loc) & ~other_time & ~other_loc)
    fail("count is not a positive integer", ~_each_distinct(rows["count"], COUNT_TEXT.fullmatch))
    order, repeated = _order(rows)
    if repeated:
        raise PublishedFormatError(f"{path}: duplicate bin, a (mode, date, tap, time, loc) appears twice")
    fail("rows are not in canonical order", order != np.arange(len(rows)))


def _each_distinct(column: pd.Series, predicate: Callable[[str], object]) -> np.ndarray:
    """``predicate`` per row of a categorical column, evaluated once per distinct value."""
    verdicts = np.array([bool(predicate(value)) for value in column.cat.categories], dtype=bool)
    return verdicts[column.cat.codes.to_numpy()]


def _is_date(text: str) -> bool:
    if not DATE.fullmatch(text):
        return False
    try:
        datetime.strptime(text, "%Y%m%d")
    except ValueError:
        return False
    return True
