"""Ingest: every rejection reason, file-level errors, and rows read = accepted + rejected."""

from __future__ import annotations

import csv
import gzip

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opal_dp.prep.ingest import RawInputError, ingest_file, raw_file_for, raw_files
from opal_dp_tests.conftest import write_csv

DAY = "2016-07-25"
GOOD = {"card_id": 7, "mode": "train", "tap_on_time": f"{DAY} 08:01:00", "tap_on_stop": 10,
        "tap_off_time": f"{DAY} 08:20:00", "tap_off_stop": 11}

BAD_ROWS = [  # (row overrides, field, reason fragment)
    ({"card_id": ""}, "card_id", "card_id is missing"),
    ({"card_id": "abc"}, "card_id", "not a positive integer"),
    ({"card_id": -5}, "card_id", "not a positive integer"),
    ({"card_id": 2**61 + 2**20}, "card_id", "reserved for synthetic cards"),  # any synthetic card's id
    ({"mode": ""}, "mode", "mode is missing"),
    ({"mode": "tram"}, "mode", "unknown mode"),
    ({"tap_on_time": ""}, "tap_on_time", "tap_on_time is missing"),
    ({"tap_on_time": "yesterday"}, "tap_on_time", "not a timestamp"),
    ({"tap_on_time": "2016-07-26 00:00:00", "tap_off_time": "2016-07-26 00:10:00"}, "tap_on_time",
     "not on the file's service date"),
    ({"tap_on_stop": ""}, "tap_on_stop", "tap_on_stop is missing"),
    ({"tap_on_stop": 1}, "tap_on_stop", "not a stop of this mode"),
    ({"tap_on_stop": 999999}, "tap_on_stop", "not a stop of this mode"),
    ({"tap_off_stop": ""}, "tap_off_time", "both be present or both empty"),
    ({"tap_off_time": "soon"}, "tap_off_time", "not a timestamp"),
    ({"tap_off_stop": 21}, "tap_off_stop", "not a stop of this mode"),
    ({"tap_off_time": f"{DAY} 07:59:00"}, "tap_off_time", "before tap-on"),
    ({"tap_off_time": "2016-07-26 08:00:00"}, "tap_off_time", "maximum plausible duration"),
]


@pytest.mark.parametrize(("override", "field", "reason"), BAD_ROWS)
def test_each_rejection_reason_names_line_and_field(tmp_path, stops, override, field, reason):
    path = write_csv(tmp_path, DAY, [GOOD, {**GOOD, "card_id": 8, **override}])
    result = ingest_file(path, stops)
    assert len(result.accepted) == 1 and len(result.rejected) == 1
    row = result.rejected.iloc[0]
    assert (row["source_file"], row["line"], row["field"]) == (str(path), 3, field)
    assert reason in row["reason"]


def test_lines_with_the_wrong_number_of_fields_are_rejected_with_their_text(tmp_path, stops):
    path = write_csv(tmp_path, DAY, [GOOD, {**GOOD, "card_id": 8}])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "1,2", lines[1], "9,bus,x,1,,,extra", lines[2]]) + "\n")
    result = ingest_file(path, stops)
    assert result.rows_read == 4 and len(result.accepted) == 2
    assert result.rejected["line"].tolist() == [2, 4]
    assert result.rejected["raw_line"].tolist() == ["1,2", "9,bus,x,1,,,extra"]
    assert result.rejected["reason"].str.contains("fields where the header has 6").all()


def test_duplicate_rows_are_rejected_after_the_first(tmp_path, stops):
    path = write_csv(tmp_path, DAY, [GOOD, GOOD, GOOD])
    result = ingest_file(path, stops)
    assert len(result.accepted) == 1
    assert list(result.rejected["line"]) == [3, 4]
    assert result.rejected["reason"].str.contains("duplicate").all()


def test_a_row_repeating_a_rejected_row_is_judged_on_its_own(tmp_path, stops):
    """A duplicate is of an earlier *accepted* row: the rejected first row keeps its reason, the sound second is
    accepted."""
    path = write_csv(tmp_path, DAY, [{**GOOD, "tap_off_stop": 21}, GOOD])
    result = ingest_file(path, stops)
    assert len(result.accepted) == 1 and result.rejected["line"].tolist() == [2]
    assert result.rejected["reason"].str.contains("not a stop of this mode").all()


def test_missing_tap_off_and_midnight_crossing_are_accepted(tmp_path, stops):
    rows = [
        {**GOOD, "tap_off_time": "", "tap_off_stop": ""},
        {**GOOD, "card_id": 9, "tap_on_time": f"{DAY} 23:50:00", "tap_off_time": "2016-07-26 00:20:00"},
    ]
    result = ingest_file(write_csv(tmp_path, DAY, rows), stops)
    assert result.rejected.empty
    assert result.accepted["tap_off_stop"].isna().tolist() == [True, False]
    assert result.accepted["tap_off_time"].iloc[1] == pd.Timestamp("2016-07-26 00:20:00")


def test_rejected_row_keeps_the_raw_values(tmp_path, stops):
    path = write_csv(tmp_path, DAY, [{**GOOD, "tap_on_stop": "12x"}])
    row = ingest_file(path, stops).rejected.iloc[0]
    assert row["tap_on_stop"] == "12x" and row["card_id"] == "7"


def test_parquet_and_gzip_read_like_csv(tmp_path, stops):
    csv = write_csv(tmp_path, DAY, [GOOD, {**GOOD, "card_id": 8, "mode": "tram"}])
    frame = pd.read_csv(csv)
    frame["tap_on_time"] = pd.to_datetime(frame["tap_on_time"])
    frame["tap_off_time"] = pd.to_datetime(frame["tap_off_time"])
    other = tmp_path / "other"
    other.mkdir()
    frame.to_parquet(other / f"trips_{DAY}.parquet", index=False)
    gz = tmp_path / "gz"
    gz.mkdir()
    (gz / f"trips_{DAY}.csv.gz").write_bytes(gzip.compress(csv.read_bytes()))
    for path in (other / f"trips_{DAY}.parquet", gz / f"trips_{DAY}.csv.gz"):
        result = ingest_file(path, stops)
        assert (len(result.accepted), len(result.rejected)) == (1, 1)
    assert ingest_file(other / f"trips_{DAY}.parquet", stops).rejected["line"].tolist() == [2]


def test_missing_column_fails_naming_file_and_column(tmp_path, stops):
    path = write_csv(tmp_path, DAY, [GOOD], header="card_id,mode,tap_on_time,tap_on_stop,tap_off_time,stop_off")
    with pytest.raises(RawInputError, match=r"trips_2016-07-25\.csv: missing required column 'tap_off_stop'"):
        ingest_file(path, stops)


def test_a_file_without_its_header_line_fails_without_quoting_its_first_row(tmp_path, stops):
    """Read without its header, a file's first row becomes its column names: the error counts them, never shows them."""
    path = write_csv(tmp_path, DAY, [{**GOOD, "card_id": 3085220888869376}])
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(RawInputError) as raised:
        ingest_file(path, stops)
    message = str(raised.value)
    assert "missing required column 'card_id'" in message and "the file has 6 columns, 0 of them the contract's" in message
    assert "3085220888869376" not in message and "08:01:00" not in message and "train" not in message


def test_extra_columns_are_dropped_and_reported(tmp_path, stops):
    path = tmp_path / f"trips_{DAY}.csv"
    pd.DataFrame([{**GOOD, "passenger_name": "A. Person"}]).to_csv(path, index=False)
    result = ingest_file(path, stops)
    assert result.ignored_columns == ["passenger_name"]
    assert "passenger_name" not in result.accepted.columns


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (f"trips_{DAY}.csv", b"", "file is empty"),
        (f"trips_{DAY}.csv", b"card_\xffid,mode\n", "not valid UTF-8"),
        (f"trips_{DAY}.parquet", b"PAR1\x00\x00garbage", "cannot be read as parquet"),
        ("trips_2016-02-30.csv", b"card_id\n", "not a calendar date"),
    ],
)
def test_unreadable_files_fail_naming_the_file(tmp_path, stops, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(RawInputError, match=message) as err:
        ingest_file(path, stops)
    assert name in str(err.value)


def test_nul_0x89_and_latin1_bytes_reject_their_rows_all_in_one_pass_and_echo_nothing(tmp_path, stops, capfd):
    """Each bad line is rejected with its line and reason; the others are read; nothing is printed or raised."""
    good = ",".join(str(GOOD[c]) for c in GOOD).encode()
    lines = [",".join(GOOD).encode(), good,
             b"SECRET-NUL\x00,train,x,10,,",                 # NUL: valid UTF-8, a bad card id
             good.replace(b"7,", b"8,", 1),
             b"SECRET-89\x89,train,,,",                      # 0x89, and too few fields
             b"SECRET-LATIN\xe9,train,x,10,,",               # Latin-1
             good.replace(b"7,", b"9,", 1),
             b"SECRET-LATIN2,caf\xe9,x,10,,,extra"]          # Latin-1 and too many fields
    path = tmp_path / f"trips_{DAY}.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = ingest_file(path, stops)
    assert result.rows_read == 7 and len(result.accepted) == 3
    assert result.rejected[["line", "field", "reason"]].values.tolist() == [
        [3, "card_id", "card_id is not a positive integer"],
        [5, "(line)", "not valid UTF-8 text"],
        [6, "(line)", "not valid UTF-8 text"],
        [8, "(line)", "not valid UTF-8 text"],
    ]
    assert result.rejected["raw_line"].tolist()[1:] == [
        "SECRET-89\\x89,train,,,", "SECRET-LATIN\\xe9,train,x,10,,", "SECRET-LATIN2,caf\\xe9,x,10,,,extra"]
    printed = capfd.readouterr()
    assert "SECRET" not in printed.out + printed.err


def test_blank_lines_keep_the_line_numbers_of_the_file(tmp_path, stops):
    path = write_csv(tmp_path, DAY, [GOOD, {**GOOD, "card_id": 8}, {**GOOD, "mode": "tram"}])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "", lines[1], "1,2", "", lines[2], lines[3]]) + "\n")
    result = ingest_file(path, stops)
    assert result.rows_read == 4 and result.rejected["line"].tolist() == [4, 7]


def test_raw_file_discovery(tmp_path):
    write_csv(tmp_path, DAY, [])
    (tmp_path / "notes.txt").write_text("ignored")
    assert raw_files(tmp_path) == {DAY: tmp_path / f"trips_{DAY}.csv"}
    with pytest.raises(RawInputError, match="no raw file"):
        raw_file_for(tmp_path, "2016-07-26")
    (tmp_path / f"trips_{DAY}.parquet").write_bytes(b"")
    with pytest.raises(RawInputError, match="a second raw file"):
        raw_files(tmp_path)


cell = st.one_of(st.text(max_size=12), st.integers(-10, 40).map(str), st.sampled_from(
    ["", "bus", "train", "ferry", f"{DAY} 08:00:00", f"{DAY} 09:00:00", "2016-07-26 01:00:00", "10", "11", "21"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.fixed_dictionaries({c: cell for c in GOOD}), max_size=25))
def test_rows_read_equals_accepted_plus_rejected(tmp_path_factory, stops, rows):
    folder = tmp_path_factory.mktemp("raw")
    path = folder / f"trips_{DAY}.csv"
    pd.DataFrame(rows, columns=list(GOOD)).to_csv(path, index=False, quoting=csv.QUOTE_ALL)
    result = ingest_file(path, stops)
    assert result.rows_read == len(rows)
    assert sorted(result.rejected["line"]) == sorted(set(result.rejected["line"]))
    assert (result.rejected["reason"] != "").all()
