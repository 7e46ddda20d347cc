"""Binning: windows at the day's edges, postcodes, missing tap-off; the card id kept for bounding only."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.prep.binning import (
    bin_trips,
    card_codes,
    location_labels,
    location_points,
    split_by_mode,
    time_window,
    window_label,
)
from opal_dp.prep.ingest import ingest_file
from opal_dp.prep.schemas import BinnedTrips, CardBinnedTrips
from opal_dp_tests.conftest import write_csv

DAY = "2016-07-25"


def trips(stops, tmp_path, rows):
    return ingest_file(write_csv(tmp_path, DAY, rows), stops).accepted


def row(card, mode, on, on_stop, off="", off_stop=""):
    return {"card_id": card, "mode": mode, "tap_on_time": on, "tap_on_stop": on_stop,
            "tap_off_time": off, "tap_off_stop": off_stop}


@pytest.mark.parametrize(
    ("time", "window", "label"),
    [("00:00:00", 0, "0:00"), ("00:14:59", 0, "0:00"), ("00:15:00", 1, "0:15"), ("02:37:00", 10, "2:30"),
     ("13:45:00", 55, "13:45"), ("23:59:59", 95, "23:45")],
)
def test_time_windows_at_day_edges(time, window, label):
    assert time_window(pd.Series(pd.to_datetime([f"{DAY} {time}"])))[0] == window
    assert window_label(window) == label


def test_missing_time_is_window_minus_one():
    assert time_window(pd.Series(pd.to_datetime([None]))).tolist() == [-1]
    assert window_label(-1) == "-1"


def test_binned_trips_keep_the_card_id_only_for_bounding(tmp_path, stops):
    rows = [row(i + 1, "train", f"{DAY} 08:{i:02d}:00", 10 + i % 3) for i in range(40)]
    binned = bin_trips(trips(stops, tmp_path, rows), stops)
    assert binned["card_id"].tolist() == list(range(1, 41))  # same rows, same order, card id kept
    CardBinnedTrips.validate(binned)
    with pytest.raises((pa.errors.SchemaError, pa.errors.SchemaErrors)):
        BinnedTrips.validate(binned)  # the schema after bounding has no room for a card id


def test_binning_collapses_bus_stops_to_postcodes_and_keeps_names(tmp_path, stops):
    rows = [row(1, "bus", f"{DAY} 08:00:00", 1, f"{DAY} 08:10:00", 3),
            row(2, "bus", f"{DAY} 08:01:00", 2, f"{DAY} 08:30:00", 3),
            row(3, "train", f"{DAY} 08:02:00", 10, f"{DAY} 08:40:00", 12)]
    binned = bin_trips(trips(stops, tmp_path, rows), stops)  # rows keep their file order here
    assert binned["tap_on_loc"].astype(str).tolist() == ["2000", "2000", "Central"]
    assert binned["tap_off_loc"].astype(str).tolist() == ["2010", "2010", "Parramatta"]
    assert binned["tap_off_window"].tolist() == [32, 34, 34]


def test_midnight_crossing_and_missing_tap_off(tmp_path, stops):
    rows = [row(1, "ferry", f"{DAY} 23:50:00", 20, "2016-07-26 00:20:00", 21),
            row(2, "ferry", f"{DAY} 07:00:00", 20)]
    binned = bin_trips(trips(stops, tmp_path, rows), stops).sort_values("tap_on_window")
    assert binned["tap_on_window"].tolist() == [28, 95]
    assert binned["tap_off_window"].tolist() == [-1, 1]  # 00:20 next day: window 0:15 of the tap-on day
    assert binned["tap_off_loc"].astype(str).tolist() == ["-1", "Manly"]


def test_location_universe_is_public_and_sorted(stops):
    labels = location_labels(stops)
    assert labels == sorted(labels) and "-1" in labels
    assert {"2000", "2010", "Central", "Manly"} <= set(labels)


def test_split_by_mode_is_disjoint_and_complete(tmp_path, stops):
    rows = [row(i, mode, f"{DAY} 08:0{i}:00", stop) for i, (mode, stop) in
            enumerate([("bus", 1), ("train", 10), ("train", 11), ("ferry", 20), ("light_rail", 30)])]
    binned = bin_trips(trips(stops, tmp_path, rows), stops).drop(columns="card_id")
    parts = {m: split_by_mode(binned, m) for m in ("bus", "ferry", "light_rail", "train")}
    assert sum(len(p) for p in parts.values()) == len(binned)
    assert len(parts["train"]) == 2 and "mode" not in parts["train"].columns


def test_location_points_place_postcodes_at_their_bus_stops_mean(stops):
    stops = stops.assign(lat=[-33.0, -34.0, -33.5, -33.1, -33.2, -33.3, -33.4, -33.8, -33.6, -33.7],
                         lon=151.0 + stops.index * 0.01)
    points = location_points(stops).set_index(["mode", "loc"])
    assert points.loc[("bus", "2000"), "lat"] == pytest.approx(-33.5)  # stops 1 and 2
    assert points.loc[("bus", "2000"), "lon"] == pytest.approx(151.005)
    assert points.loc[("train", "Central"), "lat"] == -33.1
    assert ("bus", "Central") not in points.index and ("train", "2000") not in points.index
    assert len(points) == 2 + 3 + 2 + 2  # two bus postcodes, then one point per named stop


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(1, 2**40), max_size=50))
def test_card_codes_are_each_trips_place_among_the_days_cards_in_first_seen_order(ids):
    codes, cards = card_codes(pd.DataFrame({"card_id": pd.array(ids, dtype="int64")}))
    first_seen = list(dict.fromkeys(ids))
    assert cards["card_id"].tolist() == first_seen
    assert [first_seen[c] for c in codes] == ids
