"""Publish released marginals (and any other product's tables, e.g. the OD files) as the open-data files, date by
date, next to their privacy statement.

The layout is ``release.published_folder``'s, the tables each product's (``release.products``); nothing else is
written under the published folder, apart from the hidden staging files and folders (``.staging-*``) of a publish
in progress.

A date is written when its partitions are complete and gated, and again only when the ledger released it again
(a correction). Each date's ``manifest.json`` lists its files (rows, bytes, SHA-256), modes and ledger draws;
``index.json`` lists every date with the SHA-256 of its manifest, and each combined file's dates and size; the
statement states its dates and draws as runs (``statement.runs``), so what a weekly publish rewrites grows by
about a line a date, not by the date's whole listing. The combined files are the dates' files concatenated in
date order (one header): appended to when new dates follow, rebuilt by streaming otherwise, never held whole in
memory. ``latest.json`` is the pointer readers should use (``latest_release``): a plain file works on any
filesystem a reader mounts or syncs.

The files are public: folders 0755, files 0644, whatever the umask (the command line runs under 077).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd

from opal_dp.parallel import map_calls
from opal_dp.permissions import PUBLIC_DIR, PUBLIC_FILE, create_file, make_dirs, reserve_private
from opal_dp.private_files import fsync_folder
from opal_dp.release.page.catalogue import INDEX_JSON, PageSettings
from opal_dp.release.page.render import PAGE, render_index
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.products import PUBLICATIONS
from opal_dp.release.published_folder import (DATES, LATEST, LATEST_JSON, LINK_PREFIX, MANIFEST, RELEASE_ID,
                                              STAGING_PREFIX, csv_header, file_sha256, files_of, published_index,
                                              validate_date, validate_root)
from opal_dp.release.published_format import DATE, PublishedFormatError
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.runs import date_runs

CHUNK = 1 << 20  # bytes copied at a time when streaming date files into a combined file
T = TypeVar("T")


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
    published_dir: Path, changed: Iterable[T], statement_of: Callable[[PageSummary], dict],
    stops: pd.DataFrame, state_dir: Path, page: PageSettings = PageSettings(),
    prepare: Callable[[T], DateFiles] = given, workers: int | None = None, count: int | None = None,
) -> Path:
    """Publish the ``changed`` dates (new, or re-released: a correction) into ``<published>/latest`` and rebuild
    what covers them all; nothing else is rewritten.

    Every changed date is made (``prepare`` of its item of ``changed``: the caller's gate, which raises to refuse
    it; ``given`` when the items are already ``DateFiles``), written, validated and fsynced in a staging folder
    first, the dates side by side in ``workers`` per-day worker processes (``opal_dp.parallel``; ``prepare`` is pickled
    by name); ``changed`` may be an iterator that makes each item as it is asked for (``count`` of them), so that
    the first dates are staged while it makes the others. Any failure there (in making an item too) publishes
    nothing, and every date is staged or abandoned before the error is raised. Only
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
            count = len(changed) if count is None else count
            if count:
                make_dirs(staging, PUBLIC_DIR)
            for day in map_calls(stage_date, ((staging, prepare, item) for item in changed), workers, count):
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
        validate_root(folder, statement)
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
                      PageSummary.of_tables(day.tables))


def _stage_date(staging: Path, day: DateFiles) -> dict:
    """Write, validate and fsync one date's files and its manifest in the staging folder; its index entry."""
    folder = make_dirs(staging / day.date, PUBLIC_DIR)
    for name, frame in day.tables.items():
        write_durably(folder / f"{name}.csv", frame.to_csv(index=False, lineterminator="\n"))
    validate_date(folder, day.date, set(day.modes), day.remainders)
    manifest = {"date": day.date, "draws": sorted(day.draws), "modes": sorted(day.modes),
                "files": {f"{name}.csv": {"rows": len(frame), "bytes": (folder / f"{name}.csv").stat().st_size,
                                          "sha256": file_sha256(folder / f"{name}.csv")}
                          for name, frame in day.tables.items()}}
    write_durably(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    fsync_folder(folder)
    return {"draws": manifest["draws"], "modes": manifest["modes"], "files": manifest["files"],
            MANIFEST: file_sha256(folder / MANIFEST)}


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
    known = [f"{t}.csv" for p in PUBLICATIONS for t in p.tables]
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
                out.write(csv_header(folder / DATES / dates[0] / name))
            _append(staging, [folder / DATES / d / name for d in dates])
            os.replace(staging, path)
        combined[name] = {"dates": dates, "bytes": path.stat().st_size}
    return combined


def _append(path: Path, parts: list[Path]) -> None:
    """Append each part's rows (its header must be the file's) to ``path``, chunk by chunk, then fsync."""
    header = csv_header(path)
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
        tables = {name.removesuffix(".csv"): pd.read_csv(folder / DATES / date / name, dtype=str, keep_default_na=False)
                  for name in entry["files"]}  # what its manifest lists: what ``stage_date`` summarised
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


