"""Property tests: malformed raw files never produce an unexplained traceback.

Every file either raises ``RawInputError`` naming it, or is read with rows read = accepted + rejected,
each rejected row carrying a field and a reason, and exactly the rows we broke rejected.
"""

from __future__ import annotations

import gzip
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opal_dp.network import MODES
from opal_dp.prep.ingest import MAX_DURATION, RAW_COLUMNS, RawInputError, ingest_file
from opal_dp_tests.fuzz.raw import stops, stops_by_mode

DAY = "2016-07-25"
FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FORMATS = ("csv", "csv.gz", "parquet")

# Values that break one field for certain (Parquet-only cases are tested at the end of this module).
BAD = {
    "card_id": ["", "  ", "abc", "-5", "0", "1.5", "1e30", str(2**63), "NaN", "ﬁve"],
    "mode": ["", "tram", "BUS", "ferry ", "1", "fèrry"],
    "tap_on_time": ["", "not a time", "2016-07-26 08:00:00", "2016-07-24 23:59:59", "2016-07-25 25:00",
                    "99999-01-01", "1e10", "2016-13-01 08:00", "2016-07-25T08:00:00+10:00", "2016-07-25 08:00Z"],
    "tap_on_stop": ["", "-1", "abc", "1.5", "99999999999", str(2**40), "OTHER_MODE", "UNKNOWN_ID"],
}


@dataclass
class Case:
    rows: list[dict[str, str]]
    broken: set[int]  # row positions that must be rejected


def _fmt(ts: pd.Timestamp) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S")


@st.composite
def valid_row(draw, card: int) -> dict[str, str]:
    mode = draw(st.sampled_from(MODES))
    ids = stops_by_mode()[mode]
    on = pd.Timestamp(DAY) + pd.Timedelta(seconds=draw(st.integers(0, 86_399)))
    row = {"card_id": str(card), "mode": mode, "tap_on_time": _fmt(on),
           "tap_on_stop": str(draw(st.sampled_from(ids))), "tap_off_time": "", "tap_off_stop": ""}
    if draw(st.booleans()):
        seconds = draw(st.integers(0, int(MAX_DURATION[mode].total_seconds())))
        row.update(tap_off_time=_fmt(on + pd.Timedelta(seconds=seconds)), tap_off_stop=str(draw(st.sampled_from(ids))))
    return row


@st.composite
def broken_row(draw, row: dict[str, str]) -> dict[str, str]:
    """``row`` with one certain contract violation."""
    row = dict(row)
    kind = draw(st.sampled_from([*BAD, "off_before_on", "off_too_late", "off_half_missing", "off_unknown_stop"]))
    on = pd.Timestamp(row["tap_on_time"])
    mode = row["mode"]
    if kind in BAD:
        value = draw(st.sampled_from(BAD[kind]))
        if value == "OTHER_MODE":
            other = draw(st.sampled_from([m for m in MODES if m != mode]))
            value = str(stops_by_mode()[other][0])
        elif value == "UNKNOWN_ID":
            value = str(int(stops()["stop_id"].max()) + draw(st.integers(1, 10**6)))
        row[kind] = value
    elif kind == "off_before_on":
        back = draw(st.integers(1, 3600))
        row.update(tap_off_time=_fmt(on - pd.Timedelta(seconds=back)), tap_off_stop=row["tap_on_stop"])
    elif kind == "off_too_late":
        extra = draw(st.integers(1, 10**6))
        row.update(tap_off_time=_fmt(on + MAX_DURATION[mode] + pd.Timedelta(seconds=extra)),
                   tap_off_stop=row["tap_on_stop"])
    elif kind == "off_half_missing":
        row.update(tap_off_time="", tap_off_stop=row["tap_on_stop"])
    else:
        row.update(tap_off_time=_fmt(on), tap_off_stop="0")
    return row


@st.composite
def cases(draw) -> Case:
    n = draw(st.integers(0, 25))
    rows = [draw(valid_row(card)) for card in range(1, n + 1)]
    broken = set(draw(st.sets(st.integers(0, n - 1), max_size=n)) if n else set())
    rows = [draw(broken_row(r)) if i in broken else r for i, r in enumerate(rows)]
    duplicates = draw(st.lists(st.integers(0, n - 1), max_size=3)) if n else []
    for source in duplicates:  # an exact copy of an earlier sound row is rejected as a duplicate
        if source not in broken:
            broken.add(len(rows))
            rows.append(dict(rows[source]))
    return Case(rows, broken)


def write(folder: Path, fmt: str, frame: pd.DataFrame, day: str = DAY) -> Path:
    path = folder / f"trips_{day}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    else:
        text = frame.to_csv(index=False, lineterminator="\n").encode("utf-8")
        path.write_bytes(gzip.compress(text) if fmt == "csv.gz" else text)
    return path


def ingest_or_explain(path: Path):
    """The ingest result, or None after checking the RawInputError names the file."""
    try:
        result = ingest_file(path, stops())
    except RawInputError as err:
        assert path.name in str(err), f"error does not name the file: {err}"
        return None
    rejected = result.rejected
    assert (rejected["reason"].str.strip() != "").all() and (rejected["field"].str.strip() != "").all()
    assert (rejected["source_file"] == str(path)).all()
    accepted = result.accepted
    day = pd.Timestamp(path.name[6:16])
    assert ((accepted["tap_on_time"] >= day) & (accepted["tap_on_time"] < day + pd.Timedelta(days=1))).all()
    assert not (accepted["tap_off_time"] < accepted["tap_on_time"]).any()
    known = stops().set_index("stop_id")["mode"].astype(str)
    assert (accepted["tap_on_stop"].map(known) == accepted["mode"].astype(str)).all()
    assert not accepted.duplicated(["card_id", "mode", "tap_on_time", "tap_on_stop"]).any()
    return result


@FUZZ
@given(case=cases(), fmt=st.sampled_from(FORMATS), extra=st.booleans(), shuffle=st.randoms(use_true_random=False))
def test_rows_read_equal_accepted_plus_rejected_and_broken_rows_are_rejected(case, fmt, extra, shuffle):
    columns = list(RAW_COLUMNS)
    shuffle.shuffle(columns)
    frame = pd.DataFrame(case.rows, columns=list(RAW_COLUMNS), dtype=object)[columns]
    if extra:
        frame["note"] = "extra column"
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), fmt, frame)
        result = ingest_or_explain(path)
    assert result is not None, "a well-formed file with bad rows must be read, not refused"
    assert result.rows_read == len(case.rows)
    first = 1 if fmt == "parquet" else 2
    assert set(result.rejected["line"] - first) == case.broken
    assert result.ignored_columns == (["note"] if extra else [])


@FUZZ
@given(case=cases(), fmt=st.sampled_from(FORMATS), missing=st.sets(st.sampled_from(RAW_COLUMNS), min_size=1, max_size=5))
def test_a_missing_column_refuses_the_file_naming_it(case, fmt, missing):
    frame = pd.DataFrame(case.rows, columns=list(RAW_COLUMNS), dtype=object).drop(columns=sorted(missing))
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), fmt, frame)
        with pytest.raises(RawInputError, match="missing required column") as err:
            ingest_file(path, stops())
    assert path.name in str(err.value) and any(repr(c) in str(err.value) for c in missing)


WRONG_TYPES = {
    "card_id": [pa.array([1.5, -2.0, 1e300]), pa.array([True, False, True]), pa.array([None, None, None], pa.null()),
                pa.array([[1], [2], []]), pa.array([-(2**63), 0, -1], pa.int64()),
                pa.array([2**64 - 1, 2**63, 0], pa.uint64())],
    "mode": [pa.array([1, 2, 3]), pa.array([b"x", b"bus", b""]), pa.array([1.0, None, 2.0])],
    "tap_on_time": [pa.array([1, 2, 3], pa.int64()), pa.array([True, False, None]),
                    pa.array(["x", "", None]), pa.array([0, 1, 2], pa.date32()),
                    pa.array([0, 1, 2], pa.timestamp("s", tz="Australia/Sydney"))],
    "tap_on_stop": [pa.array(["a", "b", None]), pa.array([1.5, float("nan"), float("inf")]),
                    pa.array([2**40, -1, 0], pa.int64()), pa.array([0, 1, 2], pa.timestamp("s"))],
    "tap_off_time": [pa.array([1, 2, 3]), pa.array(["2016-07-24 00:00", "garbage", ""])],
    "tap_off_stop": [pa.array([2**40, -(2**40), 7], pa.int64()), pa.array(["x", "y", "z"])],
}


@FUZZ
@given(column=st.sampled_from(sorted(WRONG_TYPES)), data=st.data())
def test_parquet_columns_of_the_wrong_type_reject_their_rows(column, data):
    values = data.draw(st.sampled_from(WRONG_TYPES[column]))
    ids = stops_by_mode()["ferry"]
    table = {
        "card_id": pa.array([11, 12, 13], pa.int64()), "mode": pa.array(["ferry"] * 3),
        "tap_on_time": pa.array([pd.Timestamp(f"{DAY} 08:00")] * 3, pa.timestamp("us")),
        "tap_on_stop": pa.array([ids[0]] * 3, pa.int32()),
        "tap_off_time": pa.array([pd.Timestamp(f"{DAY} 08:30")] * 3, pa.timestamp("us")),
        "tap_off_stop": pa.array([ids[1]] * 3, pa.int32()),
    } | {column: values}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trips_{DAY}.parquet"
        pq.write_table(pa.table(table), path)
        result = ingest_or_explain(path)
    assert result is not None and result.rows_read == 3
    assert len(result.rejected) >= 1  # no column of these types can make three valid rows


@FUZZ
@given(case=cases(), fmt=st.sampled_from(FORMATS), cut=st.floats(0.0, 0.999))
def test_truncated_files_are_refused_or_read_consistently(case, fmt, cut):
    frame = pd.DataFrame(case.rows, columns=list(RAW_COLUMNS), dtype=object)
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), fmt, frame)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * cut)])
        result = ingest_or_explain(path)
    if fmt != "csv":
        assert result is None  # a cut gzip stream or Parquet footer cannot be read
    elif result is not None:  # a CSV cut at a line boundary is a shorter, valid file
        assert result.rows_read <= len(case.rows)


@FUZZ
@given(case=cases(), encoding=st.sampled_from(["latin-1", "cp1252"]), fmt=st.sampled_from(["csv", "csv.gz"]),
       marked=st.sets(st.integers(0, 24)))
def test_rows_not_in_utf8_are_rejected_every_one_with_its_line(case, encoding, fmt, marked):
    """Latin-1 or cp1252 rows (an ASCII header) are rejected row by row, all of them in one pass."""
    rows = [dict(r, mode=r["mode"] + "é") if i in marked else r for i, r in enumerate(case.rows)]
    frame = pd.DataFrame(rows, columns=list(RAW_COLUMNS))
    text = frame.to_csv(index=False, lineterminator="\n").encode(encoding, errors="replace")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trips_{DAY}.{fmt}"
        path.write_bytes(gzip.compress(text) if fmt == "csv.gz" else text)
        result = ingest_or_explain(path)
    assert result is not None and result.rows_read == len(rows)
    encoded = result.rejected[result.rejected["reason"] == "not valid UTF-8 text"]
    not_text = [n for n, line in enumerate(text.split(b"\n")[1:], start=2) if not line.isascii()]  # é and the like
    assert encoded["line"].tolist() == not_text and len(not_text) >= len(marked & set(range(len(rows))))
    assert (encoded["field"] == "(line)").all()


@pytest.mark.parametrize("fmt", ["csv", "csv.gz"])
def test_a_header_not_in_utf8_refuses_the_file_naming_it(tmp_path, fmt):
    text = ",".join(RAW_COLUMNS).encode("utf-16")
    path = tmp_path / f"trips_{DAY}.{fmt}"
    path.write_bytes(gzip.compress(text) if fmt == "csv.gz" else text)
    with pytest.raises(RawInputError, match=f"{path.name}: not valid UTF-8 text in the header line"):
        ingest_file(path, stops())


@FUZZ
@given(blob=st.binary(max_size=300), fmt=st.sampled_from(FORMATS))
def test_arbitrary_bytes_never_escape_as_an_unexplained_error(blob, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trips_{DAY}.{fmt}"
        path.write_bytes(blob)
        ingest_or_explain(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_file_is_refused(tmp_path, fmt):
    path = tmp_path / f"trips_{DAY}.{fmt}"
    path.write_bytes(gzip.compress(b"") if fmt == "csv.gz" else b"")
    with pytest.raises(RawInputError, match=path.name):
        ingest_file(path, stops())


@pytest.mark.parametrize("fmt", FORMATS)
def test_header_only_file_has_no_rows(tmp_path, fmt):
    result = ingest_or_explain(write(tmp_path, fmt, pd.DataFrame({c: pd.Series(dtype=object) for c in RAW_COLUMNS})))
    assert result is not None and result.rows_read == 0


@pytest.mark.parametrize("name", ["trips_2016-02-30.csv", "trips_2016-7-25.csv", "trips_2016-07-25.txt"])
def test_a_file_name_without_a_calendar_date_is_refused(tmp_path, name):
    path = tmp_path / name
    pd.DataFrame(columns=list(RAW_COLUMNS)).to_csv(path, index=False)
    with pytest.raises(RawInputError, match=name):
        ingest_file(path, stops())


@FUZZ
@given(case=cases(), other_day=st.dates().filter(lambda d: d.isoformat() != DAY))
def test_taps_on_another_day_are_all_rejected(case, other_day):
    """The file is named for one date; rows of any other day never enter its partition."""
    rows = [dict(r, tap_on_time=other_day.isoformat() + r["tap_on_time"][10:]) for r in case.rows]
    with tempfile.TemporaryDirectory() as tmp:
        result = ingest_or_explain(write(Path(tmp), "csv", pd.DataFrame(rows, columns=list(RAW_COLUMNS), dtype=object)))
    assert result is not None and result.accepted.empty and result.rows_read == len(rows)


def test_csv_timestamps_with_a_utc_offset_are_rejected_not_crashing(tmp_path):
    frame = pd.DataFrame([{"card_id": "1", "mode": "ferry", "tap_on_time": f"{DAY}T08:00:00+10:00",
                           "tap_on_stop": str(stops_by_mode()["ferry"][0]), "tap_off_time": "", "tap_off_stop": ""}])
    result = ingest_or_explain(write(tmp_path, "csv", frame))
    assert result is not None and result.rejected["field"].tolist() == ["tap_on_time"]


def test_parquet_timestamps_beyond_the_nanosecond_range_are_rejected_not_crashing(tmp_path):
    path = tmp_path / f"trips_{DAY}.parquet"
    ids = stops_by_mode()["ferry"]
    pq.write_table(pa.table({
        "card_id": [1], "mode": ["ferry"], "tap_on_time": pa.array([10**17], pa.timestamp("us")),
        "tap_on_stop": pa.array([ids[0]], pa.int32()), "tap_off_time": pa.array([None], pa.timestamp("us")),
        "tap_off_stop": pa.array([None], pa.int32())}), path)
    result = ingest_or_explain(path)
    assert result is not None and result.rejected["field"].tolist() == ["tap_on_time"]


def test_unsigned_card_ids_beyond_int64_are_rejected_not_crashing(tmp_path):
    path = tmp_path / f"trips_{DAY}.parquet"
    ids = stops_by_mode()["ferry"]
    pq.write_table(pa.table({
        "card_id": pa.array([2**64 - 1, 5], pa.uint64()), "mode": ["ferry"] * 2,
        "tap_on_time": pa.array([pd.Timestamp(f"{DAY} 08:00")] * 2, pa.timestamp("us")),
        "tap_on_stop": pa.array([ids[0]] * 2, pa.int32()), "tap_off_time": pa.array([None] * 2, pa.timestamp("us")),
        "tap_off_stop": pa.array([None] * 2, pa.int32())}), path)
    result = ingest_or_explain(path)
    assert result is not None and result.rejected["line"].tolist() == [1] and len(result.accepted) == 1


def test_truncated_gzip_is_refused_naming_the_file(tmp_path):
    path = write(tmp_path, "csv.gz", pd.DataFrame([{c: "x" for c in RAW_COLUMNS}] * 50))
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(RawInputError, match=path.name):
        ingest_file(path, stops())


def test_binary_parquet_text_that_is_not_utf8_rejects_only_its_rows(tmp_path):
    path = tmp_path / f"trips_{DAY}.parquet"
    stop = str(stops_by_mode()["ferry"][0]).encode()
    good = [b"5", b"ferry", f"{DAY} 08:00:00".encode(), stop, b"", b""]
    rows = [[b"\xff"] + good[1:], good, good[:1] + [b"f\x89rry"] + good[2:]]
    pq.write_table(pa.table({c: pa.array([r[i] for r in rows], pa.binary()) for i, c in enumerate(RAW_COLUMNS)}), path)
    result = ingest_or_explain(path)
    assert result is not None and len(result.accepted) == 1
    assert result.rejected[["line", "field", "reason"]].values.tolist() == [
        [1, "card_id", "not valid UTF-8 text"], [3, "mode", "not valid UTF-8 text"]]
    assert result.rejected["mode"].tolist() == ["ferry", "f\\x89rry"]  # private: escaped, never decoded wrongly


def test_one_time_with_a_utc_offset_rejects_only_its_own_row(tmp_path):
    stop = str(stops_by_mode()["bus"][0])
    rows = [{"card_id": "1", "mode": "bus", "tap_on_time": f"{DAY}T08:00:00+10:00", "tap_on_stop": stop},
            {"card_id": "2", "mode": "bus", "tap_on_time": f"{DAY} 08:00:00", "tap_on_stop": stop}]
    result = ingest_or_explain(write(tmp_path, "csv", pd.DataFrame(rows, columns=list(RAW_COLUMNS), dtype=object)))
    assert result is not None and result.rejected["line"].tolist() == [2] and len(result.accepted) == 1
