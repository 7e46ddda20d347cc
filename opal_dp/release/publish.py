"""Publish released marginals as the open-data files, atomically, next to their privacy statement.

Published layout; nothing else is written under the published folder, apart from the transient
``.staging-<release id>/`` and ``.latest-<release id>`` of a publish in progress::

    <published>/<release id>/{time-loc,time,loc}.csv, privacy.json, PRIVACY.md, index.html
                             [od.csv, od-sequences.csv]   (when the statement has an ``od`` section)
    <published>/latest -> <release id>          (relative symlink, repointed atomically)
    <published>/latest.json                      ({"release_id": ...}: the pointer, replaced atomically, last)

``latest.json`` is the pointer readers should use (``latest_release``): a plain file works on any
filesystem a reader mounts or syncs, where a symlink may not; the symlink stays for local users.

The files are public: folders 0755, files 0644, whatever the umask (the command line runs under 077).

Rows are ``mode,date,tap,time,loc,count`` as in the 2016 open data (``bus,20160730,on,2:30,2000,415``),
ordered by date, mode, tap (on before off), time window and location label: a function of the
released bins only, never of the order the data came in. A public-domain release (the statement names its
design) also has the remainder rows ``time = T, loc = other`` and ``time = other, loc = L`` in ``time-loc.csv``,
and its files must add up exactly (``public_domain.sum_problems``); an SBH release may have neither.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from opal_dp.network import MODES, load_stops
from opal_dp.permissions import PUBLIC_DIR, PUBLIC_FILE, create_file, make_dirs
from opal_dp.prep.binning import window_label
from opal_dp.prep.sequences import TripAlphabet
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.private_files import fsync_folder
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, Marginal
from opal_dp.release.od.publish import OD_TABLES, validate_od
from opal_dp.release.marginals.public_domain import OTHER, OTHER_WINDOW, sum_problems
from opal_dp.release.page.render import PAGE, external_references, links, render_index, stated_guarantee, stated_sizes
from opal_dp.release.page.catalogue import PageSettings
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD, open_data_partition, stated_design
from opal_dp.release.statement.markdown import render_markdown

COLUMNS = ["mode", "date", "tap", "time", "loc", "count"]
TABLES = ("time-loc", "time", "loc")
TAPS = ("on", "off")
AGGREGATED = "-"
FILES = (*(f"{t}.csv" for t in TABLES), STATEMENT_JSON, STATEMENT_MD, PAGE)
LATEST = "latest"
LATEST_JSON = "latest.json"
STAGING_PREFIX, LINK_PREFIX = ".staging-", ".latest-"

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


def publish(
    published_dir: Path, tables: Mapping[str, pd.DataFrame], statement: dict, release_id: str, stops: pd.DataFrame,
    od: Mapping[str, pd.DataFrame] | None = None, page: PageSettings = PageSettings(),
) -> Path:
    """Write, validate and fsync the release in a staging folder, rename it to ``<release_id>``, then
    repoint ``latest``, then write ``latest.json``. A crash at any point leaves both naming complete releases
    (between the two, ``latest.json`` the previous one, until the next publish); stale staging
    folders are removed by the next publish. Refuses an existing release id. ``stops``: the public stop
    list, which places the locations on the page's map; ``page``: the publisher, contact, licence and update
    frequency the page states. The page, written last, lists the size of every other file."""
    if not RELEASE_ID.fullmatch(release_id) or release_id == LATEST:
        raise ValueError(f"release id must match {RELEASE_ID.pattern} and not be {LATEST!r}, got {release_id!r}")
    if statement["release"]["id"] != release_id:
        raise ValueError(f"statement is for release {statement['release']['id']!r}, not {release_id!r}")
    if sorted(tables) != sorted(TABLES):
        raise ValueError(f"tables must be exactly {TABLES}, got {sorted(tables)}")
    if ("od" in statement) != (od is not None) or (
            od is not None and sorted(f"{t}.csv" for t in od) != sorted(statement["od"]["files"])):
        raise ValueError(f"the OD tables {OD_TABLES} go with the statement's od section (its files), and only with it")
    published_dir = make_dirs(published_dir, PUBLIC_DIR)
    with publish_lock(published_dir):
        target = published_dir / release_id
        if target.exists() or target.is_symlink():
            raise FileExistsError(f"release {release_id} already exists at {target}")
        _remove_stale(published_dir)
        staging = published_dir / f"{STAGING_PREFIX}{release_id}"
        make_dirs(staging, PUBLIC_DIR)
        for table in TABLES:
            write_durably(staging / f"{table}.csv", tables[table].to_csv(index=False, lineterminator="\n"))
        for table, frame in (od or {}).items():
            write_durably(staging / f"{table}.csv", frame.to_csv(index=False, lineterminator="\n"))
        write_durably(staging / STATEMENT_JSON, json.dumps(statement, indent=2, ensure_ascii=False) + "\n")
        write_durably(staging / STATEMENT_MD, render_markdown(statement))
        sizes = {p.name: p.stat().st_size for p in staging.iterdir()}
        write_durably(staging / PAGE, render_index(tables, statement, stops, sizes, page))
        validate_published(staging)
        fsync_folder(staging)
        os.rename(staging, target)
        fsync_folder(published_dir)
        link = published_dir / f"{LINK_PREFIX}{release_id}"
        os.symlink(release_id, link)
        os.replace(link, published_dir / LATEST)
        pointer = published_dir / f"{LINK_PREFIX}{release_id}.json"
        write_durably(pointer, json.dumps({"release_id": release_id}) + "\n")
        os.replace(pointer, published_dir / LATEST_JSON)
        fsync_folder(published_dir)
    return target


def latest_release(published_dir: Path) -> Path:
    """The folder of the latest published release, as ``latest.json`` names it."""
    pointer = published_dir / LATEST_JSON
    release_id = json.loads(pointer.read_text(encoding="utf-8"))["release_id"]
    if not RELEASE_ID.fullmatch(release_id) or release_id == LATEST:
        raise PublishedFormatError(f"{pointer} names no release: {release_id!r}")
    return published_dir / release_id


@contextmanager
def publish_lock(folder: Path):
    """One publisher at a time: an advisory lock on the folder itself (writes nothing)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale(published_dir: Path) -> None:
    """Leftovers of an interrupted publish: staging folders and unrenamed links."""
    for path in published_dir.iterdir():
        if path.name.startswith(LINK_PREFIX):
            path.unlink()
        elif path.name.startswith(STAGING_PREFIX):
            shutil.rmtree(path)


def write_durably(path: Path, text: str) -> None:
    """A public file written and fsynced before the caller renames its folder into place."""
    with open(create_file(path, PUBLIC_FILE), "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def validate_published(folder: Path) -> None:
    """Raise ``PublishedFormatError`` unless ``folder`` holds exactly a well-formed release."""
    folder = Path(folder)
    present = sorted(p.name for p in folder.iterdir())
    try:
        statement = json.loads((folder / STATEMENT_JSON).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, FileNotFoundError) as err:
        raise PublishedFormatError(f"{folder / STATEMENT_JSON}: missing or not valid JSON ({err})") from err
    if present != sorted(files_of(statement)):
        raise PublishedFormatError(f"{folder}: expected exactly the files {sorted(files_of(statement))}, found {present}")
    if "od" in statement:
        problems = validate_od(folder, statement["od"], TripAlphabet.from_stops(load_stops()))
        if problems:
            raise PublishedFormatError(f"{folder}: " + "; ".join(problems))
    if (folder / STATEMENT_MD).read_text(encoding="utf-8") != render_markdown(statement):
        raise PublishedFormatError(f"{folder / STATEMENT_MD} does not render {STATEMENT_JSON}")
    partitions = {(k["date"], k["mode"]) for k in statement["partitions"]["keys"]}
    remainders = stated_design(statement).consistent
    for table in TABLES:
        _validate_table(folder / f"{table}.csv", table, partitions, remainders)
    if remainders:
        tables = {t: pd.read_csv(folder / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
                  for t in TABLES}
        problems = sum_problems(tables)
        if problems:
            raise PublishedFormatError(f"{folder}: the files do not add up: " + "; ".join(problems[:5]))
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
