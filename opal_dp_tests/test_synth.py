"""Reference network and synthetic trip generator: contract, determinism and realism."""

from __future__ import annotations

import subprocess
import sys
from datetime import date

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opal_dp.network import MODES, load_stops
from opal_dp.simulate import sample
from opal_dp_tests.network_builder import build_stops
from opal_dp.simulate.trips import (
    COLUMNS,
    MANLY_TAP_OFF_S,
    build_population,
    card_numbers,
    day_path,
    generate_day,
    generate_days,
    write_day,
)

MON, SAT, SUN = date(2016, 7, 25), date(2016, 7, 30), date(2016, 7, 31)
SMALL = 0.002
DURATION_MIN = {"bus": (5, 60), "train": (5, 90), "ferry": (10, 45), "light_rail": (3, 30)}
LIGHT_RAIL_2016 = [
    "Central", "Capitol Square", "Paddy's Markets", "Exhibition Centre", "Convention", "Pyrmont Bay",
    "The Star", "John Street Square", "Fish Market", "Wentworth Park", "Glebe", "Jubilee Park",
    "Rozelle Bay", "Lilyfield", "Leichhardt North", "Hawthorne", "Marion", "Taverners Hill",
    "Lewisham West", "Waratah Mills", "Arlington", "Dulwich Grove", "Dulwich Hill",
]


@pytest.fixture(scope="module")
def stops() -> pd.DataFrame:
    return load_stops()


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("raw")
    list(generate_days([MON, SAT, SUN], out, seed=7, scale=SMALL))
    return out


@pytest.fixture(scope="module")
def days(raw_dir) -> dict[date, pd.DataFrame]:
    return {d: pd.read_parquet(day_path(raw_dir, d)) for d in (MON, SAT, SUN)}


@pytest.fixture(scope="module")
def weekday() -> pd.DataFrame:
    """A larger weekday (about 47 k trips) for distributional checks."""
    return generate_day(build_population(11, 0.02), MON)


def _durations_min(trips: pd.DataFrame) -> pd.Series:
    return (trips["tap_off_time"] - trips["tap_on_time"]).dt.total_seconds() / 60


# --- reference network -------------------------------------------------------------------


def test_stops_dtypes_and_ids(stops):
    assert list(stops.columns) == ["stop_id", "mode", "name", "postcode", "lat", "lon"]
    assert stops.dtypes.astype(str).tolist() == ["int32", "category", "object", "int16", "float64", "float64"]
    assert list(stops["mode"].cat.categories) == list(MODES)
    assert stops["stop_id"].is_unique and stops["stop_id"].is_monotonic_increasing
    assert stops[["lat", "lon"]].notna().all().all()
    assert stops["lat"].between(-35.5, -32.0).all() and stops["lon"].between(149.0, 152.5).all()


def test_network_sizes_and_names(stops):
    counts = stops["mode"].value_counts()
    assert 270 <= counts["train"] <= 330
    assert counts["light_rail"] == 23
    assert 35 <= counts["ferry"] <= 45
    assert 2000 <= counts["bus"] <= 6000
    assert 200 <= stops.loc[stops["mode"] == "bus", "postcode"].nunique() <= 400
    for mode in ("train", "ferry", "light_rail"):
        assert stops.loc[stops["mode"] == mode, "name"].is_unique, mode
    assert sorted(stops.loc[stops["mode"] == "light_rail", "name"]) == sorted(LIGHT_RAIL_2016)
    trains = set(stops.loc[stops["mode"] == "train", "name"])
    assert {"Central", "Town Hall", "Wynyard", "Circular Quay", "Parramatta", "Bondi Junction", "Penrith"} <= trains
    assert {"Circular Quay", "Manly", "Taronga Zoo", "Watsons Bay"} <= set(stops.loc[stops["mode"] == "ferry", "name"])


def test_committed_csv_matches_builder(stops):
    built = build_stops()
    pd.testing.assert_frame_equal(
        built.astype({"stop_id": "int32", "postcode": "int16", "mode": stops["mode"].dtype}), stops
    )


# --- raw file contract -------------------------------------------------------------------


def test_file_naming_and_parquet_schema(raw_dir):
    assert sorted(p.name for p in raw_dir.iterdir()) == [
        "trips_2016-07-25.parquet", "trips_2016-07-30.parquet", "trips_2016-07-31.parquet"
    ]
    schema = pq.read_schema(day_path(raw_dir, MON))
    assert schema.names == list(COLUMNS)
    assert [schema.field(c).type for c in COLUMNS] == [
        pa.int64(), pa.string(), pa.timestamp("us"), pa.int32(), pa.timestamp("us"), pa.int32()
    ]


def test_read_back_dtypes(days):
    assert days[MON].dtypes.astype(str).tolist() == [
        "int64", "object", "datetime64[us]", "int32", "datetime64[us]", "Int32"
    ]


def test_stops_exist_and_match_mode(days, stops):
    mode_of = stops.set_index("stop_id")["mode"].astype(str)
    for trips in days.values():
        assert (trips["tap_on_stop"].map(mode_of) == trips["mode"]).all()
        off = trips.dropna(subset=["tap_off_stop"])
        assert (off["tap_off_stop"].astype(int).map(mode_of) == off["mode"]).all()
        assert (off["tap_off_stop"] != off["tap_on_stop"]).all()


def test_times_on_service_date_and_durations(days):
    for day, trips in days.items():
        start = pd.Timestamp(day)
        assert trips["tap_on_time"].between(start, start + pd.Timedelta(seconds=86_399)).all()
        assert trips["tap_on_time"].is_monotonic_increasing
        assert (trips["tap_off_time"].isna() == trips["tap_off_stop"].isna()).all()
        minutes = _durations_min(trips).dropna()
        assert (minutes >= 0).all()
        for mode, (lo, hi) in DURATION_MIN.items():
            assert minutes[trips["mode"] == mode].between(lo, hi).all(), mode


def test_missing_tap_off_share(weekday):
    assert 0.01 <= weekday["tap_off_time"].isna().mean() <= 0.06


def test_manly_auto_tap_off(weekday, stops):
    ferry = stops[stops["mode"] == "ferry"].set_index("name")["stop_id"]
    pair = {ferry["Circular Quay"], ferry["Manly"]}
    manly = weekday[weekday["tap_on_stop"].isin(pair) & weekday["tap_off_stop"].isin(pair)]
    assert len(manly) > 20
    assert ((manly["tap_off_time"] - manly["tap_on_time"]) == pd.Timedelta(seconds=MANLY_TAP_OFF_S)).all()


# --- determinism ---------------------------------------------------------------------------


def test_same_seed_same_bytes_and_days_independent(raw_dir, tmp_path):
    list(generate_days([SUN], tmp_path, seed=7, scale=SMALL))
    assert day_path(tmp_path, SUN).read_bytes() == day_path(raw_dir, SUN).read_bytes()


def test_different_seed_differs(days):
    other = generate_day(build_population(8, SMALL), MON)
    assert not other.equals(days[MON])


def test_card_numbers_distinct_and_16_digits():
    ids = card_numbers(np.arange(1_000_000), seed=3)
    assert len(np.unique(ids)) == len(ids)
    assert ((ids >= 10**15) & (ids < 10**16)).all()


# --- realism -------------------------------------------------------------------------------


def test_weekday_busier_than_weekend(days):
    assert len(days[MON]) > 1.5 * len(days[SAT]) > 1.5 * 0.9 * len(days[SUN])


def test_peaks(weekday, days):
    hours = weekday["tap_on_time"].dt.hour.value_counts()
    assert hours[8] > 20 * hours[3] and hours[17] > 20 * hours[3]
    assert hours[8] > 2 * hours[12]
    weekend_hours = days[SAT]["tap_on_time"].dt.hour.value_counts()
    assert weekend_hours.max() < 2.5 * weekend_hours[12]  # flatter


def test_midnight_crossing(weekday):
    crossing = weekday["tap_off_time"].dt.normalize() > pd.Timestamp(MON)
    assert crossing.sum() > 10
    assert (weekday.loc[crossing, "tap_on_time"].dt.hour >= 22).all()


def test_mode_shares(weekday):
    share = weekday["mode"].value_counts(normalize=True)
    assert 0.40 <= share["bus"] <= 0.50 and 0.40 <= share["train"] <= 0.50
    assert 0.03 <= share["ferry"] <= 0.04 and 0.02 <= share["light_rail"] <= 0.03


def test_commuters_return_and_occasional_users(weekday):
    per_card = weekday.groupby("card_id").size()
    assert (per_card == 1).mean() > 0.2 and (per_card == 2).mean() > 0.4
    pairs = weekday[weekday["card_id"].isin(per_card.index[per_card == 2])].dropna(subset=["tap_off_stop"])
    first, second = (pairs.groupby("card_id").nth(i).set_index("card_id") for i in (0, 1))
    first = first.loc[first.index.intersection(second.index)]
    second = second.loc[first.index]
    reversed_od = (first["tap_on_stop"] == second["tap_off_stop"]) & (first["tap_off_stop"] == second["tap_on_stop"])
    assert reversed_od.mean() > 0.75  # the rest: occasional cards that happened to travel twice
    assert (first.loc[reversed_od, "tap_on_time"].dt.hour < 12).mean() > 0.95


def test_heavy_tailed_popularity(weekday, stops):
    trains = weekday[weekday["mode"] == "train"]
    share = trains["tap_off_stop"].value_counts(normalize=True)
    names = stops.set_index("stop_id")["name"]
    assert names[share.index[0]] == "Central"
    assert share.iloc[:10].sum() > 0.3  # ten stations of ~300 take a third of train trips
    bus = weekday[weekday["mode"] == "bus"]
    postcode_share = bus["tap_on_stop"].map(stops.set_index("stop_id")["postcode"]).value_counts(normalize=True)
    assert postcode_share.index[0] == 2000


# --- writers, sample and CLI ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "csv.gz"])
def test_csv_round_trip(days, tmp_path, fmt):
    path = write_day(days[SUN], day_path(tmp_path, SUN, fmt))
    back = pd.read_csv(path, parse_dates=["tap_on_time", "tap_off_time"], dtype={"tap_off_stop": "Int32"})
    assert list(back.columns) == list(COLUMNS)
    expected = days[SUN].astype({"tap_on_time": "datetime64[ns]", "tap_off_time": "datetime64[ns]"})
    pd.testing.assert_frame_equal(back, expected, check_dtype=False)


def test_unknown_format_rejected(tmp_path):
    with pytest.raises(ValueError, match="format"):
        day_path(tmp_path, MON, "xlsx")


def test_ensure_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(sample, "SAMPLE_SCALE", 0.0005)
    paths = sample.ensure_sample(tmp_path)
    assert [p.name for p in paths] == [f"trips_{d.isoformat()}.parquet" for d in sample.SAMPLE_DATES]
    assert sample.SAMPLE_DATES[0] == date(2016, 7, 25) and sample.SAMPLE_DATES[-1] == date(2016, 8, 14)
    assert date(2016, 8, 1) not in sample.SAMPLE_DATES and len(sample.SAMPLE_DATES) == 14
    before = {p: p.stat().st_mtime_ns for p in paths}
    original = paths[3].read_bytes()
    paths[3].unlink()
    assert sample.ensure_sample(tmp_path) == paths
    assert paths[3].read_bytes() == original
    assert all(p.stat().st_mtime_ns == before[p] for p in paths if p != paths[3])
    days = [d.isoformat() for d in sample.SAMPLE_DATES]
    assert sample.sample_days(tmp_path, days) == days  # recorded in raw/SYNTHETIC_SAMPLE.json, by digest
    assert oct((tmp_path / sample.MARKER).stat().st_mode & 0o777) == "0o600"


def test_the_sample_is_never_added_next_to_real_files_and_a_changed_file_is_real(tmp_path, monkeypatch):
    monkeypatch.setattr(sample, "SAMPLE_SCALE", 0.0005)
    monkeypatch.setattr(sample, "SAMPLE_DATES", sample.SAMPLE_DATES[:2])
    real = tmp_path / "trips_2024-03-04.csv"
    real.write_text("card_id,mode,tap_on_time,tap_on_stop,tap_off_time,tap_off_stop\n")
    with pytest.raises(sample.RealDataPresent, match="trips_2024-03-04.csv"):
        sample.ensure_sample(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [real.name]
    real.unlink()
    first, second = sample.ensure_sample(tmp_path)
    days = [d.isoformat() for d in sample.SAMPLE_DATES]
    first.write_bytes(first.read_bytes() + b"\0")  # no longer what the generator wrote: real data now
    assert sample.sample_days(tmp_path, days) == days[1:]
    with pytest.raises(sample.RealDataPresent, match=first.name):
        sample.ensure_sample(tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opal_dp.simulate", *args], capture_output=True, text=True, check=True)


def test_cli_help():
    out = _cli("--help").stdout
    for flag in ("--scale", "--start", "--days", "--dates", "--seed", "--out", "--format"):
        assert flag in out


def test_cli_tiny_csv_run(tmp_path):
    run = _cli("--scale", "0.0005", "--start", "2016-08-08", "--days", "2", "--format", "csv", "--out", str(tmp_path))
    assert "rows written" in run.stdout and "peak RSS" in run.stdout
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["trips_2016-08-08.csv", "trips_2016-08-09.csv"]
    lines = files[0].read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    assert any(line.endswith(",,") for line in lines[1:])
    assert all(line.split(",")[2].startswith("2016-08-08 ") for line in lines[1:])
