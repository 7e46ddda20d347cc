"""One pass per day (``prep.day_files.day_pass``) stores exactly the partitions the stage-by-stage code stored:
ingest, then bin from the stored accepted rows, then bound and build the card-day sequences from the stored binned
trips. Deterministic partitions are compared frame for frame (dtypes included); bounded rows and card-day
sequences, which are in CSPRNG-random order, as multisets. Every release reads only these partitions, so equal
partitions give equal releases and ledger charges."""

from __future__ import annotations

from collections import Counter
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.prep.binning import bin_trips, card_codes
from opal_dp.prep.bounding import bound_day
from opal_dp.core.input_version import file_version
from opal_dp.prep.binning import split_by_mode
from opal_dp.prep.day_files import Bounding, DayCap, DayFailure, DayPaths, day_pass, split_day
from opal_dp.prep.day_records import DayCut, raw_stamp, read_record
from opal_dp.prep.ingest import ingest_file
from opal_dp.prep.sequences import TripAlphabet, card_day_sequences, to_frame
from opal_dp.private_files import write_parquet_atomic
from opal_dp_tests.conftest import write_csv

DAY = "2016-07-25"
KEY = b"k" * 32
HEIGHT = 3
CUT = DayCut((2, 1), HEIGHT, "stop list version")


def _raw_day(folder: Path) -> Path:
    rng = np.random.default_rng(5)
    rows = []
    for i in range(600):
        on = pd.Timestamp(DAY) + pd.Timedelta(minutes=int(rng.integers(0, 1400)))
        mode, stop, off_stop = [("bus", 1, 3), ("train", 10, 12), ("ferry", 20, 21)][i % 3]
        off = (on + pd.Timedelta(minutes=20)).isoformat(sep=" ") if i % 7 else ""  # some trips without tap-off
        rows.append({"card_id": int(rng.integers(1, 80)), "mode": mode, "tap_on_time": on.isoformat(sep=" "),
                     "tap_on_stop": stop, "tap_off_time": off, "tap_off_stop": off_stop if off else ""})
    rows += [{"card_id": "x", "mode": "bus"}, {"card_id": 3, "mode": "bus", "tap_on_time": f"{DAY} 08:00:00",
                                               "tap_on_stop": 99_999, "tap_off_time": "", "tap_off_stop": ""}]
    folder.mkdir()
    return write_csv(folder, DAY, rows)


def _paths(folder: Path) -> DayPaths:
    return DayPaths(*(folder / f"{name}.parquet" for name in
                      ("accepted", "rejected", "binned", "cards", "sequences", "kept", "over")))


def _staged(raw: Path, stops: pd.DataFrame, bounding: Bounding, folder: Path) -> dict[str, pd.DataFrame]:
    """The multi-stage code's order: every stage reads what the previous one stored."""
    p = _paths(folder)
    ingested = ingest_file(raw, stops)
    write_parquet_atomic(ingested.accepted, p.accepted, durable=False)
    write_parquet_atomic(ingested.rejected, p.rejected, durable=False)
    binned = bin_trips(pd.read_parquet(p.accepted), stops)
    write_parquet_atomic(binned, p.binned, durable=False)
    write_parquet_atomic(card_codes(binned)[1], p.cards, durable=False)
    stored = pd.read_parquet(p.binned)
    write_parquet_atomic(to_frame(card_day_sequences(stored, TripAlphabet.from_stops(stops), HEIGHT)), p.sequences,
                         durable=False)
    bounded = bound_day(stored, date.fromisoformat(DAY), bounding.unit, bounding.bounds, bounding.key, None)
    write_parquet_atomic(bounded.kept, p.kept, durable=False)
    write_parquet_atomic(bounded.over_bound, p.over_bound, durable=False)
    return _read(p)


def _read(paths: DayPaths) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(path) for name, path in vars(paths).items()}


def _multiset(frame: pd.DataFrame) -> Counter:
    return Counter(map(tuple, frame.astype(str).to_numpy()))


BOUNDINGS = {
    "trip": Bounding(PrivacyUnit.TRIP, ContributionBounds(), KEY),
    "card_day": Bounding(PrivacyUnit.CARD_DAY, ContributionBounds(max_trips_per_card_day=2, max_per_bin=1), KEY),
    "card_period": Bounding(PrivacyUnit.CARD_PERIOD, ContributionBounds(max_trips_per_card_day=3, max_per_bin=1), KEY),
}


@pytest.mark.parametrize("unit", list(BOUNDINGS))
def test_one_pass_stores_what_the_stages_stored(tmp_path, stops, unit):
    raw = _raw_day(tmp_path / "raw")
    bounding = BOUNDINGS[unit]
    staged = _staged(raw, stops, bounding, tmp_path / "staged")
    (tmp_path / "pass").mkdir()
    summary = day_pass(tmp_path / "raw", DAY, stops, bounding, CUT, KEY, _paths(tmp_path / "pass"), tmp_path / "private")
    one_pass = _read(_paths(tmp_path / "pass"))
    record = read_record(tmp_path / "private", DAY)  # what was read and how it was cut, for the week's release
    assert record.ingested and record.cut == CUT and record.raw == raw_stamp(raw)
    assert record.input_version == file_version(raw, KEY) and record.rows == (602, 600, 2)
    for name in ("accepted", "rejected", "binned", "cards"):  # deterministic: equal frames, same rejection reasons
        pd.testing.assert_frame_equal(one_pass[name], staged[name])
    for name in ("sequences", "kept", "over_bound"):  # rows in CSPRNG-random order: equal multisets
        assert _multiset(one_pass[name]) == _multiset(staged[name]), name
    assert len(staged["rejected"]) == 2 and len(staged["kept"]) > 0
    assert summary.ingest.rows_read == 602 and summary.ingest.rows_rejected == 2
    assert (summary.binned, summary.cards, summary.sequences) == (len(staged["binned"]), len(staged["cards"]),
                                                                   len(staged["sequences"]))
    assert (summary.bound.kept, summary.bound.over_bound) == (len(staged["kept"]), len(staged["over_bound"]))
    if unit == "card_day":
        assert len(staged["over_bound"]) > 0  # the bounds did bind


def test_a_week_piece_under_a_day_cap_keeps_exactly_the_day_s_bounded_trips_of_the_kept_cards(tmp_path, stops):
    """A card_period day cap is applied by the week's release (``split_day`` with a ``DayCap``): bounding the stored
    binned day again keeps, of each mode, exactly what ``bound_day`` keeps for the chosen cards; without the cap each
    mode's piece is the mode's rows of the day's bounded trips."""
    raw_dir = tmp_path / "raw"
    _raw_day(raw_dir)
    paths = _paths(tmp_path)
    bounding = BOUNDINGS["card_period"]
    day_pass(raw_dir, DAY, stops, bounding, CUT, KEY, paths, tmp_path / "private")
    binned = pd.read_parquet(paths.binned)
    cards = np.sort(binned["card_id"].unique())[::2].astype(np.int64)  # the cards whose day this is one of the kept
    outs = {mode: tmp_path / f"{mode}.parquet" for mode in ("bus", "train")}
    rows = split_day(paths.kept, DAY, outs, DayCap(paths.binned, PrivacyUnit.CARD_PERIOD, bounding.bounds, KEY, cards))
    expected = bound_day(binned, date.fromisoformat(DAY), PrivacyUnit.CARD_PERIOD, bounding.bounds, KEY, cards).kept
    for mode, path in outs.items():
        assert _multiset(pd.read_parquet(path)) == _multiset(split_by_mode(expected, mode)) and rows[mode] > 0
    assert sum(rows.values()) < len(split_by_mode(pd.read_parquet(paths.kept), "bus")) + len(
        split_by_mode(pd.read_parquet(paths.kept), "train"))
    uncapped = split_day(paths.kept, DAY, outs)
    for mode, path in outs.items():
        assert _multiset(pd.read_parquet(path)) == _multiset(split_by_mode(pd.read_parquet(paths.kept), mode))
        assert uncapped[mode] == len(pd.read_parquet(path))


def test_a_day_without_a_usable_raw_file_stores_nothing_and_says_why(tmp_path, stops):
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    (raw_dir / f"trips_{DAY}.csv").write_text("card_id,mode\n1,bus\n")
    paths = _paths(tmp_path)
    failure = day_pass(raw_dir, DAY, stops, BOUNDINGS["trip"], CUT, KEY, paths, tmp_path / "private")
    assert isinstance(failure, DayFailure) and "missing required column" in failure.reason
    assert not any(path.exists() for path in vars(paths).values())
    record = read_record(tmp_path / "private", DAY)
    assert not record.ingested and record.reason == failure.reason and record.cut is None
    assert record.raw == raw_stamp(raw_dir / f"trips_{DAY}.csv")
    missing = day_pass(raw_dir, "2016-07-26", stops, BOUNDINGS["trip"], CUT, KEY, paths, tmp_path / "private")
    assert isinstance(missing, DayFailure) and read_record(tmp_path / "private", "2016-07-26").raw is None
