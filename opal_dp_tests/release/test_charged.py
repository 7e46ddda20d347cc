"""``release.charged.serve_each``: the draws made in order, stored side by side, each where the ledger said."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pandas as pd

from opal_dp.private_files import read_parquet, write_parquet_exclusive
from opal_dp.release.charged import Pending, serve_each


def frame(i: int) -> pd.DataFrame:
    return pd.DataFrame({"count": pd.array([i, i + 1], dtype="int64")})


def test_draws_are_made_in_order_in_the_caller_and_stored_where_the_ledger_said(tmp_path):
    write_parquet_exclusive(frame(99), tmp_path / "stored.parquet")
    pending = [Pending(i, SimpleNamespace(kind="charge"), tmp_path / f"{i}.parquet") for i in range(12)]
    pending.insert(5, Pending(99, SimpleNamespace(kind="reuse"), tmp_path / "stored.parquet"))
    calls = []

    def draw(request: int) -> pd.DataFrame:  # a seeded noise source is read in one order, by one thread
        calls.append((request, threading.current_thread() is threading.main_thread()))
        return frame(request)

    values = serve_each(draw)(pending)
    assert calls == [(i, True) for i in range(12)]  # the stored draw is loaded, not drawn again
    for p, value in zip(pending, values):
        pd.testing.assert_frame_equal(value, frame(p.request))
        pd.testing.assert_frame_equal(read_parquet(p.path), frame(p.request))
