"""The design comparison's figures on hand-made true cells and released tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from opal_dp.core.sparse_noise import tail_probability
from opal_dp.reports.design_comparison import COLUMNS, DesignTally
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.schemas import OTHER_WINDOW, DesignComparison

KEYS = ["2016-07-25|bus", "2016-07-25|ferry"]  # two partitions of one day
LABELS = ["A", "B", "C", OTHER]
SHIFT = {"on": 40, "off": 42}  # tap-off cells sit two windows later


def frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=[*columns, "count"]).astype({"count": "int64"})
    if "time_window" in out:
        out["time_window"] = out["time_window"].astype("int16")
    if "loc" in out:
        out["loc"] = pd.Categorical(out["loc"], categories=LABELS)
    return out


def true_cells() -> pd.DataFrame:
    rows = [(tap, SHIFT[tap] + dt, loc, n, n) for tap in ("on", "off") for dt, loc, n in ((0, "A", 150), (1, "B", 5))]
    cells = pd.DataFrame(rows, columns=["tap", "time_window", "loc", "count", "bounded_count"])
    return cells.assign(time_window=cells["time_window"].astype("int16"),
                        loc=pd.Categorical(cells["loc"], categories=LABELS[:3]))


def sbh_tables() -> dict[str, pd.DataFrame]:
    """(40, A) listed at 160, (41, B) suppressed; the one-way tables drawn independently, window 41 suppressed."""
    out = {}
    for tap, t in SHIFT.items():
        out[f"tap_{tap}_time_loc"] = frame([(t, "A", 160)], ["time_window", "loc"])
        out[f"tap_{tap}_time"] = frame([(t, 170)], ["time_window"])
        out[f"tap_{tap}_loc"] = frame([("A", 158), ("B", 4)], ["loc"])
    return out


def public_domain_tables() -> dict[str, pd.DataFrame]:
    """Consistent by construction: (40, A) = 149, a false cell (41, C) = 25, remainders (41, other) and (other, B)."""
    out = {}
    for tap, t in SHIFT.items():
        out[f"tap_{tap}_time_loc"] = frame([(OTHER_WINDOW, "B", 4), (t, "A", 149), (t + 1, "C", 25),
                                            (t + 1, OTHER, 4)], ["time_window", "loc"])
        out[f"tap_{tap}_time"] = frame([(t, 149), (t + 1, 29)], ["time_window"])
        out[f"tap_{tap}_loc"] = frame([("A", 149), ("B", 4), ("C", 25)], ["loc"])
    return out


def compare_released(true_cells, released, mechanisms) -> pd.DataFrame:
    """``compare_designs`` on tables released by hand: design -> partition key -> marginal -> released frame."""
    tallies = {design: DesignTally(design, mechanisms[design]) for design in released}
    for key in sorted(true_cells):
        for design, by_key in released.items():
            tallies[design].add(key, true_cells[key], by_key[key])
    return pd.DataFrame([t.figures() for t in tallies.values()], columns=COLUMNS)


@pytest.fixture(scope="module")
def plans():
    epsilon = {m.name: m.default_epsilon for m in MARGINALS}
    delta = {m.name: 1 / 8e6 for m in MARGINALS}
    return {d: build_plan("trip", epsilon, delta, design=d) for d in ("sbh", "public_domain")}


@pytest.fixture(scope="module")
def table(plans):
    released = {"sbh": {k: sbh_tables() for k in KEYS}, "public_domain": {k: public_domain_tables() for k in KEYS}}
    out = compare_released({k: true_cells() for k in KEYS}, released, {d: p.mechanisms for d, p in plans.items()})
    return DesignComparison.validate(out).set_index("design")


def test_columns_and_trips(table):
    assert list(table.reset_index().columns) == COLUMNS
    assert (table["trips"] == 2 * 155).all()
    assert table.loc["sbh", "share_of_trips_in_listed_cells"] == pytest.approx(150 / 155)
    assert table.loc["public_domain", "share_of_trips_in_listed_cells"] == pytest.approx(150 / 155)
    assert table.loc["sbh", "listed_cells"] == 4 and table.loc["public_domain", "listed_cells"] == 8


def test_differencing_residual_is_zero_for_consistent_tables_only(table):
    assert table.loc["public_domain", "differencing_residual"] == 0
    # per partition and tap: time |170 - 160| = 10; loc |158 - 160| + |4 - 0| = 6
    assert table.loc["sbh", "differencing_residual"] == 2 * 2 * (10 + 6)


def test_one_way_rmse_counts_suppressed_bins_as_zero(table):
    # SBH time: window 40 off by 20, window 41 suppressed (true 5, released 0)
    assert table.loc["sbh", "rmse_time"] == pytest.approx(math.sqrt((20**2 + 5**2) / 2))
    assert table.loc["sbh", "rmse_loc"] == pytest.approx(math.sqrt((8**2 + 1) / 2))
    # public domain: a bin released but true 0 (loc C) counts too
    assert table.loc["public_domain", "rmse_time"] == pytest.approx(math.sqrt((1 + 24**2) / 2))
    assert table.loc["public_domain", "rmse_loc"] == pytest.approx(math.sqrt((1 + 1 + 25**2) / 3))


def test_relative_error_on_large_cells_only(table):
    assert table.loc["sbh", "mean_relative_error"] == pytest.approx(10 / 150)
    assert table.loc["sbh", "median_relative_error"] == pytest.approx(10 / 150)
    assert table.loc["public_domain", "mean_relative_error"] == pytest.approx(1 / 150)


def test_false_cells_are_counted_per_day(table):
    assert table.loc["sbh", "false_cells_per_day"] == 0
    assert table.loc["public_domain", "false_cells_per_day"] == 4  # 2 partitions x 2 taps, one service day
    assert table.loc["sbh", "listed_true_zero_share"] == 0
    assert table.loc["public_domain", "listed_true_zero_share"] == pytest.approx(0.5)


def test_presence_figures(table, plans):
    sbh = plans["sbh"].mechanisms["tap_on_time_loc"]
    assert table.loc["sbh", "lone_trip_listed_probability"] == sbh.release_probability(1)
    assert table.loc["sbh", "empty_cell_listed_probability"] == 0
    assert table.loc["sbh", "expected_false_cells_per_day"] == 0
    joint = plans["public_domain"].mechanisms["tap_on_time_loc"]
    empty = tail_probability(joint.noise.laws["time-loc"], joint.tau)
    assert table.loc["public_domain", "empty_cell_listed_probability"] == pytest.approx(empty)
    lone = table.loc["public_domain", "lone_trip_listed_probability"]
    assert empty < lone <= math.exp(joint.noise.budget["time-loc"]) * empty * (1 + 1e-9)  # pure DP bounds the ratio
    assert table.loc["public_domain", "expected_false_cells_per_day"] == joint.false_cells_per_day


def test_the_listing_probability_of_a_large_count_is_near_one(plans):
    joint = plans["public_domain"].mechanisms["tap_on_time_loc"]
    assert joint.release_probability(joint.tau) == pytest.approx(1 - tail_probability(joint.noise.laws["time-loc"], 1))
    assert joint.release_probability(joint.tau + 50) > 1 - 1e-9


def test_residual_counts_the_loc_table_too(plans):
    tables = public_domain_tables()
    tables["tap_on_loc"] = tables["tap_on_loc"].assign(count=np.array([149, 5, 25]))  # B is 4 + 0 in time-loc
    out = compare_released({KEYS[0]: true_cells()}, {"public_domain": {KEYS[0]: tables}},
                           {"public_domain": plans["public_domain"].mechanisms})
    assert out.loc[0, "differencing_residual"] == 1
