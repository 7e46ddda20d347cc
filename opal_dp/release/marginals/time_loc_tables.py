"""The published rows of a time x location hierarchy (``time_loc_hierarchy``): the three 2016 tables at their own
resolution, and one row set per coarser resolution for a file with a ``level`` column. Post-processing: they read
the noisy measurement, the fit and public parameters only.

The 2016 tables (``open_data_blocks``, in the public-domain design's form, so that both designs publish, check and
state them alike; ``release-format.md``): ``time-loc`` lists the finest level's listed (window, station) cells, and
per window and per station one remainder row of its unlisted cells; ``time`` and ``loc`` are the window's and the
station's totals. A parent's remainder at the finest level is one number for its unlisted cells; spread over them
(``finest_cells``) it gives every window's total. So ``loc`` is the fitted station-day exactly, every one-way total
is its ``time-loc`` rows with their remainder, and both one-way tables add up to the tree's root.

The coarser rows (``level_rows``): every resolution of ``time_loc_hierarchy.RESOLUTIONS`` but the finest. A level of
the tree lists its cells as the tree does (``TreeRelease.rows``), the rest of each parent cell in one remainder row
(``other`` in the fields the parent does not fix); a resolution that is not a level (the districts, by default) is
summed from the coarsest level inside it, every cell with a count. Each resolution's rows add up to the root, and
every trip is in exactly one row of each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opal_dp.core.hierarchy import round_exact, weighted_projection
from opal_dp.prep.schemas import UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.release.marginals.consistency import Rounded
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.time_loc_hierarchy import RESOLUTIONS, TapDomain, TreeRelease

AGGREGATED = "-"
LEVEL_COLUMNS = ["level", "hour", "district", "loc", "count"]
FIELDS = {"mode_day": (), "district_day": ("district",), "district_hour": ("hour", "district"),
          "station_day": ("district", "loc"), "station_hour": ("hour", "district", "loc")}
"""The fields a cell of each coarser resolution names (a station names its district too)."""


def finest_cells(release: TreeRelease) -> np.ndarray:
    """Every finest cell's count: its listed count, or its part of its parent's remainder, which is spread over the
    parent's unlisted cells in proportion to their noisy measurements (the variance-weighted projection, rounded
    exactly: ``core.hierarchy``), so that the cells sum to their parent exactly."""
    tree, fitted = release.domain.tree(release.levels), release.fitted
    parent, unlisted = tree.parents[-1], fitted.listed == 0
    noisy = release.measured.levels[-1][unlisted].astype(np.float64)
    group, target = parent[unlisted], fitted.remainder
    spread = round_exact(weighted_projection(noisy, np.ones(len(noisy)), group, target), group, target)
    out = fitted.listed.copy()
    out[unlisted] = spread
    return out


def open_data_blocks(release: TreeRelease) -> list[Rounded]:
    """The 2016 tables of one tree as the public-domain design's blocks (module docstring): the (window, station)
    block, and for tap-off the unknown cell's."""
    dom = release.domain
    n_loc = len(dom.locations)
    cells = finest_cells(release)
    known = cells[: WINDOWS_PER_DAY * n_loc].reshape(WINDOWS_PER_DAY, n_loc)
    listed = release.fitted.listed[: WINDOWS_PER_DAY * n_loc].reshape(WINDOWS_PER_DAY, n_loc)
    rows, cols = known.sum(axis=1), known.sum(axis=0)
    blocks = [Rounded(listed > 0, listed, rows - listed.sum(axis=1), cols - listed.sum(axis=0), rows, cols)]
    if dom.unknown:
        u = np.array([cells[-1]], dtype=np.int64)
        blocks.append(Rounded(u[:, None] > 0, u[:, None], np.zeros(1, np.int64), np.zeros(1, np.int64), u, u))
    return blocks


def cell_labels(dom: TapDomain, resolution: str) -> pd.DataFrame:
    """The fields (``hour``, ``district``, ``loc``) of every cell of ``resolution``, the unknown cell last for
    tap-off (``-1`` in its fields); ``-`` where the resolution aggregates the field."""
    key, size = dom.key(resolution)
    finest = np.zeros(size, dtype=np.int64)
    finest[key] = np.arange(len(key))
    n_loc = len(dom.locations)
    window, loc = finest // n_loc, finest % n_loc
    named = {"hour": (window // (WINDOWS_PER_DAY // 24)).astype(str),
             "district": np.asarray(dom.districts, dtype=object)[dom.location_district[loc]],
             "loc": np.asarray(dom.locations, dtype=object)[loc]}
    fields = FIELDS[resolution]
    frame = pd.DataFrame({f: named[f] if f in fields else AGGREGATED for f in ("hour", "district", "loc")},
                         index=range(size))
    if dom.unknown and resolution != "mode_day":
        frame.loc[size] = [UNKNOWN_LABEL if f in fields else AGGREGATED for f in ("hour", "district", "loc")]
    return frame


def resolution_rows(release: TreeRelease) -> dict[str, tuple[np.ndarray, np.ndarray, str | None]]:
    """Per coarser resolution (module docstring): each cell's count where it has a row of its own (0 elsewhere), and
    the remainder of each cell of the level above (empty, and None for that level, where there is none)."""
    dom, levels = release.domain, release.levels
    counts = (*release.fitted.counts, finest_cells(release))
    out = {}
    for resolution in (r for r in RESOLUTIONS if r in FIELDS):
        if resolution in levels:
            level = levels.index(resolution)
            if level == 0:
                out[resolution] = counts[0], np.zeros(0, np.int64), None
            else:
                out[resolution] = (*release.rows(level), levels[level - 1])
        else:
            inside = min(i for i, level in enumerate(levels) if _into(dom, level, resolution) is not None)
            out[resolution] = summed(counts[inside], dom, levels[inside], resolution), np.zeros(0, np.int64), None
    return out


def level_rows(release: TreeRelease) -> pd.DataFrame:
    """The coarser resolutions' rows of one tree (module docstring): ``level, hour, district, loc, count``, zero
    counts left out, in resolution order, then cell order, each level's remainder rows (``other`` in the fields
    that its parent does not fix) after its cells."""
    dom, parts = release.domain, []
    for resolution, (cells, remainder, parent) in resolution_rows(release).items():
        rows = [cell_labels(dom, resolution).assign(count=cells)]
        if parent is not None:
            finer = {f: OTHER for f in FIELDS[resolution] if f not in FIELDS[parent]}
            rows.append(cell_labels(dom, parent).assign(**finer, count=remainder))
        frame = pd.concat(rows, ignore_index=True)
        parts.append(frame.loc[frame["count"] > 0].assign(level=resolution))
    return pd.concat(parts, ignore_index=True)[LEVEL_COLUMNS].astype({"count": "int64"})


def _into(dom: TapDomain, resolution: str, coarser: str) -> np.ndarray | None:
    """Each ``resolution`` cell's ``coarser`` cell (the unknown cell's: the unknown one), or None when a cell
    straddles two (the root straddles the unknown cell and the others of any resolution below it)."""
    if resolution == "mode_day" and coarser != "mode_day":
        return None
    (key, size), (target, n) = dom.key(resolution), dom.key(coarser)
    into = np.full(size, -1, dtype=np.int64)
    into[key] = target
    if (into[key] != target).any():
        return None
    if coarser == "mode_day":
        return np.zeros(size + dom.unknown, np.int64)
    return np.concatenate([into, np.full(dom.unknown, n, dtype=np.int64)])


def summed(values: np.ndarray, dom: TapDomain, resolution: str, coarser: str) -> np.ndarray | None:
    """Cell values at ``resolution`` (the unknown cell last) summed into ``coarser`` cells (likewise), or None when a
    cell straddles two (``_into``)."""
    into = _into(dom, resolution, coarser)
    if into is None:
        return None
    size = dom.key(coarser)[1] + (dom.unknown if coarser != "mode_day" else 0)
    return np.bincount(into, weights=np.asarray(values, dtype=np.float64), minlength=size).astype(np.int64)


KEY = ["mode", "date", "tap"]


def level_problems(levels: pd.DataFrame, loc: pd.DataFrame) -> list[str]:
    """What breaks the coarser rows' sums in published tables of the default levels (``time_loc_hierarchy.LEVELS``;
    ``levels``: ``KEY`` and ``LEVEL_COLUMNS``; ``loc``: the 2016 ``loc`` table), per (mode, date, tap): every
    resolution adds up to the mode's day; no row twice; every
    station's hour rows (remainder included) add up to its station-day row, or with the other unlisted stations' to
    the station-day remainder; every district's day to its hours and to its stations' hours; every ``loc`` count to
    its station's hour rows. Empty when they add up."""
    levels = levels.astype({"count": "int64"})
    problems = []
    duplicated = levels.duplicated([*KEY, "level", "hour", "district", "loc"])
    if duplicated.any():
        problems.append(f"a row appears twice, e.g. {levels.loc[duplicated].iloc[0][KEY + ['level']].tolist()}")
    for key, rows in levels.groupby(KEY, observed=True, sort=True):
        at = {r: rows.loc[rows["level"] == r] for r in FIELDS}
        total = int(at["mode_day"]["count"].sum())
        problems += [f"{key} {r}: {int(f['count'].sum())} in all, the mode's day {total}" for r, f in at.items()
                     if int(f["count"].sum()) != total]
        hours = at["station_hour"]
        by_station = hours.groupby("loc")["count"].sum()
        days = at["station_day"].set_index("loc")["count"]
        listed = days.drop(OTHER, errors="ignore")
        for station, count in listed.items():
            if by_station.get(station, 0) != count:
                problems.append(f"{key} station {station}: day {count}, hours {int(by_station.get(station, 0))}")
        rest = int(by_station.drop(listed.index, errors="ignore").sum())
        if rest != int(days.get(OTHER, 0)):
            problems.append(f"{key} stations without a day row: hours {rest}, day remainder {int(days.get(OTHER, 0))}")
        district = at["district_day"].set_index("district")["count"]
        for name, found in (("hours", at["district_hour"].groupby("district")["count"].sum()),
                            ("station hours", hours.groupby("district")["count"].sum())):
            if district.to_dict() != found.astype("int64").to_dict():
                problems.append(f"{key} district days differ from their {name}")
        mine = loc
        for column, value in zip(KEY, key):
            mine = mine.loc[mine[column] == value]
        published = mine.loc[mine["loc"] != OTHER].groupby("loc", observed=True)["count"].sum().astype("int64")
        if published.to_dict() != by_station.astype("int64").to_dict():
            problems.append(f"{key} loc.csv differs from the stations' hour rows")
    return problems


def totals_problems(loc: pd.DataFrame, totals: pd.DataFrame) -> list[str]:
    """What breaks the pin to the published daily totals (``time_loc_hierarchy.totals_pins``): per (date, mode) of
    ``totals`` (``totals.csv``), ``loc.csv``'s tap-on rows must add up to its tap-on total and its tap-off rows of a
    known location to its tap-off total; ``loc.csv`` has no (date, mode, tap) that ``totals`` lacks. Empty when they
    do."""
    known = loc.loc[(loc["tap"] == "on") | (loc["loc"] != UNKNOWN_LABEL)]
    sums = known.groupby(["date", "mode", "tap"], observed=True)["count"].sum()
    stated = totals.set_index(["date", "mode", "tap"])["count"]
    return [f"{day} {mode} tap-{tap}: loc.csv {int(sums.get((day, mode, tap), 0))}, totals.csv "
            f"{stated.get((day, mode, tap), 'none')}" for day, mode, tap in sorted({*sums.index, *stated.index})
            if (day, mode, tap) not in stated or int(sums.get((day, mode, tap), 0)) != int(stated[day, mode, tap])]


LEVELS_TABLE = "time-loc-levels"
LEVELS_FILE_COLUMNS = [*KEY, *LEVEL_COLUMNS]


def published_levels(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The coarser rows of several trees (each ``level_rows`` with its ``mode``, ``date`` and ``tap``) as one
    published table: ``mode,date,tap,level,hour,district,loc,count`` in an order that depends on the rows' values
    only (date, mode, tap on before off, resolution, hour, district, location)."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "count" else object) for c in LEVELS_FILE_COLUMNS})
    table = pd.concat(parts, ignore_index=True)[LEVELS_FILE_COLUMNS]
    hour = pd.to_numeric(table["hour"], errors="coerce").fillna(99)  # "-": 99, "-1" before 0, "other" after 23
    hour = hour.where(table["hour"] != OTHER, 100)
    order = np.lexsort([table["loc"].to_numpy(str), table["district"].to_numpy(str), hour.to_numpy(),
                        table["level"].map(list(FIELDS).index).to_numpy(), table["tap"].map(["on", "off"].index),
                        table["mode"].to_numpy(str), table["date"].to_numpy(str)])
    return table.iloc[order].reset_index(drop=True).astype({"count": "int64"})


def levels_file_problems(path, loc: pd.DataFrame) -> list[str]:
    """What is wrong with a published levels file: its header, its values (a known level, a positive count) and
    its sums against ``loc.csv`` (``level_problems``)."""
    with open(path, encoding="utf-8", newline="") as handle:
        header = handle.readline()
    if header != ",".join(LEVELS_FILE_COLUMNS) + "\n":
        return [f"{path.name}: header must be {','.join(LEVELS_FILE_COLUMNS)!r}"]
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    if not rows["level"].isin(list(FIELDS)).all():
        return [f"{path.name}: a level not one of {list(FIELDS)}"]
    if not rows["count"].str.fullmatch(r"[1-9]\d*").all():
        return [f"{path.name}: a count is not a positive integer"]
    problems = level_problems(rows.astype({"count": "int64"}), loc)
    return [f"{path.name}: " + "; ".join(problems[:5])] if problems else []
