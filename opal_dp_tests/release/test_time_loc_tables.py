"""The published rows of a time x location hierarchy: the 2016 tables add up under the remainder convention, every
coarser resolution adds up to the mode's day and to the stations, and the checks refuse rows that do not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.units import ContributionBounds
from opal_dp.prep.binning import location_labels
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.time_loc_hierarchy import LEVELS, period_budget, release_period, time_loc_domains
from opal_dp.release.marginals.time_loc_tables import (KEY, finest_cells, level_problems, level_rows,
                                                       open_data_blocks, totals_problems)
from opal_dp.release.statement.build import open_data_partition
from opal_dp_tests.release.test_time_loc_hierarchy import DESIGNS, STOPS

DAYS = ("2016-07-25", "2016-07-26")


def released(design: tuple[str, ...], rho: float = 0.5, totals=None):
    domains = time_loc_domains(STOPS)
    rng = np.random.default_rng(11)
    finest = {}
    for day in DAYS:
        for mode, tap in domains:
            counts = np.zeros(domains[mode, tap].cells, dtype=np.int64)
            counts[rng.integers(0, len(counts), 50)] = rng.integers(0, 2500, 50)
            finest[day, mode, tap] = counts
    budget = period_budget(rho, ContributionBounds(4, 1), len(DAYS), design, (1 / len(design),) * len(design))
    return release_period(DAYS, finest, domains, budget, design, DiscreteGaussian(SeededBits(7)), totals)


def published(releases) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The 2016 tables as the publication writes them (``to_open_data``), and the coarser rows with their keys."""
    labels = pd.Index(location_labels(STOPS))
    frames = {m.name: {} for m in MARGINALS}
    levels = []
    for (day, mode, tap), release in releases.items():
        dom = pd_design.Domain(mode, tap, release.domain.locations)
        tables = pd_design.released_frames(dom, open_data_blocks(release), labels)
        for m in (m for m in MARGINALS if m.tap == tap):
            frames[m.name][f"{day}|{mode}"] = tables[m.table]
        date, _ = open_data_partition(f"{day}|{mode}")
        levels.append(level_rows(release).assign(mode=mode, date=date, tap=tap))
    return to_open_data(frames), pd.concat(levels, ignore_index=True)


@pytest.mark.parametrize("design", DESIGNS)
def test_the_published_rows_add_up_at_every_resolution(design):
    """Under any levels the 2016 tables add up and each resolution's rows add up to the mode's day, once each; the
    default levels' rows also add up to one another (``level_problems``)."""
    releases = released(design)
    tables, levels = published(releases)
    assert pd_design.sum_problems(tables) == []
    if design == LEVELS:  # the default levels' rows also add up to one another
        assert level_problems(levels, tables["loc"]) == []
    for release in releases.values():
        rows = level_rows(release)
        assert set(rows.groupby("level")["count"].sum()) == {release.fitted.total}  # one trip, one row a level
        assert not rows.duplicated(["level", "hour", "district", "loc"]).any()
    assert set(levels["level"]) == {"mode_day", "district_day", "district_hour", "station_day", "station_hour"}


def test_the_finest_cells_keep_the_listed_and_spread_each_remainder_over_its_unlisted_cells():
    for release in released(DESIGNS[0]).values():
        tree, fitted = release.domain.tree(release.levels), release.fitted
        cells = finest_cells(release)
        assert (cells >= 0).all() and (cells[fitted.listed > 0] == fitted.listed[fitted.listed > 0]).all()
        assert (np.bincount(tree.parents[-1], weights=cells, minlength=tree.sizes[-2]) == fitted.counts[-1]).all()


def test_the_loc_table_is_the_fitted_station_day():
    for release in released(DESIGNS[0]).values():
        blocks = open_data_blocks(release)
        day = release.fitted.counts[1]  # the default levels: mode_day, station_day, ...
        assert (blocks[0].cols == day[: len(release.domain.locations)]).all()
        assert sum(int(b.rows.sum()) for b in blocks) == release.fitted.total


def plant(levels: pd.DataFrame, level: str) -> pd.DataFrame:
    """One trip more in the last row of ``level``."""
    out = levels.copy()
    out.loc[out.index[out["level"] == level][-1], "count"] += 1
    return out


@pytest.mark.parametrize("level", ["mode_day", "district_day", "district_hour", "station_day", "station_hour"])
def test_a_row_one_trip_off_is_refused(level):
    tables, levels = published(released(DESIGNS[0]))
    problems = level_problems(plant(levels, level), tables["loc"])
    assert problems and all(str(p) for p in problems)


def test_a_row_twice_and_a_loc_count_off_are_refused():
    tables, levels = published(released(DESIGNS[0]))
    twice = pd.concat([levels, levels.iloc[[3]]], ignore_index=True)
    assert any("appears twice" in p for p in level_problems(twice, tables["loc"]))
    loc = tables["loc"].copy()
    loc.loc[loc.index[-1], "count"] += 1
    assert any("loc.csv differs" in p for p in level_problems(levels, loc))
    assert set(KEY) <= set(levels.columns)


def test_a_remainder_is_spread_by_the_unlisted_cells_noisy_counts():
    """Within a parent, an unlisted cell whose noisy count is larger by 2 or more gets at least as much of the
    remainder (the variance-weighted projection, rounded exactly: an even spread would not)."""
    checked = 0
    for release in released(DESIGNS[0], rho=0.02).values():
        tree, fitted = release.domain.tree(release.levels), release.fitted
        cells, noisy = finest_cells(release), release.measured.levels[-1]
        unlisted = np.flatnonzero(fitted.listed == 0)
        for parent in np.unique(tree.parents[-1][unlisted]):
            mine = unlisted[tree.parents[-1][unlisted] == parent]
            if fitted.remainder[parent] == 0:
                continue
            order = np.argsort(noisy[mine])
            y, x = noisy[mine][order], cells[mine][order]
            larger = y[None, :] >= y[:, None] + 2  # [i, j]: cell j's noisy count is at least 2 above cell i's
            assert (x[None, :] >= x[:, None])[larger].all()
            checked += int(larger.any() and x.max() > x.min())
    assert checked > 10


def test_trees_pinned_to_the_published_totals_add_up_to_them_exactly():
    """Every tree of a day pinned to its published totals (another product's release): ``loc.csv``'s tap-on rows add
    up to the tap-on total and its known tap-off rows to the tap-off total, also where noise made the tap-off total
    the larger; one trip off in either file is refused."""
    totals = {(day, mode): (40_000, 41_000 if mode == "ferry" else 39_000) for day in DAYS
              for mode in ("bus", "ferry", "train")}
    tables, levels = published(released(LEVELS, totals=totals))
    frame = pd.DataFrame([(day.replace("-", ""), mode, tap, n) for (day, mode), counts in totals.items()
                          for tap, n in zip(("on", "off"), counts)], columns=["date", "mode", "tap", "count"])
    assert totals_problems(tables["loc"], frame) == [] and level_problems(levels, tables["loc"]) == []
    days = levels.loc[levels["level"] == "mode_day"].set_index(KEY)["count"]
    assert set(days) == {40_000, 41_000}  # tap-off's root: the larger total, its unknown cell the difference
    for tap in ("on", "off"):
        planted = frame.copy()
        planted.loc[planted.index[planted["tap"] == tap][0], "count"] += 1
        assert len(totals_problems(tables["loc"], planted)) == 1
    assert len(totals_problems(tables["loc"], frame.iloc[1:])) == 1  # a day and mode of loc.csv without its total
