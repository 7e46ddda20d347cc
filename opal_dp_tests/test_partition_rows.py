"""Kept per-partition report rows: reused while the partition's files are unchanged, computed again after."""

from __future__ import annotations

import os

import pytest

from opal_dp.reports.partition_rows import PartitionRows, version_of


def test_rows_are_kept_until_the_inputs_change(tmp_path):
    source, store = tmp_path / "a.parquet", tmp_path / "reports" / "rows.json"
    source.write_bytes(b"one")
    calls = []

    def compute(value: float) -> list[dict]:
        calls.append(value)
        return [{"x": value, "n": 1}]

    first = PartitionRows(store)
    assert first.rows("k", version_of([source]), lambda: compute(0.1)) == [{"x": 0.1, "n": 1}]
    first.save()
    again = PartitionRows(store)
    assert again.rows("k", version_of([source]), lambda: compute(0.2)) == [{"x": 0.1, "n": 1}]
    assert calls == [0.1] and again.computed == []
    source.write_bytes(b"two!")  # a re-released partition: another size and time
    os.utime(source, ns=(1, 1))
    third = PartitionRows(store)
    assert third.rows("k", version_of([source]), lambda: compute(0.3)) == [{"x": 0.3, "n": 1}]
    assert third.computed == ["k"] and oct(store.stat().st_mode)[-3:] == "600"


def test_the_stale_partitions_are_computed_together_in_order(tmp_path):
    store = tmp_path / "rows.json"
    first = PartitionRows(store)
    first.rows_of({"a": "1", "b": "1", "c": "1"}, lambda stale: ([{"key": k, "run": 1}] for k in stale))
    first.save()
    asked = []

    def compute(stale: list[str]):
        asked.append(stale)
        return [[{"key": k, "run": 2}] for k in stale]

    again = PartitionRows(store)
    got = again.rows_of({"c": "2", "a": "1", "d": "1", "b": "2"}, compute)
    assert asked == [["c", "d", "b"]] and again.computed == ["c", "d", "b"]
    assert list(got) == ["c", "a", "d", "b"]
    assert {k: rows[0]["run"] for k, rows in got.items()} == {"c": 2, "a": 1, "d": 2, "b": 2}
    assert again.rows_of({"a": "1"}, compute) == {"a": [{"key": "a", "run": 1}]} and len(asked) == 1  # nothing stale
    with pytest.raises(ValueError):  # rows for fewer partitions than asked is an error, not a silent gap
        PartitionRows(store).rows_of({"x": "1", "y": "1"}, lambda stale: [[{}]])
