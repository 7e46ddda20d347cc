"""Kept per-partition report rows: reused while the partition's files are unchanged, computed again after."""

from __future__ import annotations

import os

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
