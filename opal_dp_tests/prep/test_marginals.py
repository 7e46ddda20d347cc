"""True histograms: correct counts, only present bins, canonical order whatever the row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.release.marginals.tables import MARGINALS, histograms, histograms_from_cells, true_cells

LABELS = ["-1", "2000", "2010", "Central", "Manly"]


def partition(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["on_w", "on_l", "off_w", "off_l"])
    return pd.DataFrame({
        "tap_on_window": frame["on_w"].astype("int16"),
        "tap_on_loc": pd.Categorical.from_codes(frame["on_l"], categories=LABELS),
        "tap_off_window": frame["off_w"].astype("int16"),
        "tap_off_loc": pd.Categorical.from_codes(frame["off_l"], categories=LABELS),
    })


trip = st.tuples(st.integers(0, 95), st.integers(1, 4), st.integers(-1, 95), st.integers(0, 4))


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(trip, max_size=60), seed=st.integers(0, 2**32 - 1))
def test_histograms_match_groupby_and_ignore_row_order(rows, seed):
    part = partition(rows)
    shuffled = part.sample(frac=1, random_state=np.random.RandomState(seed)).reset_index(drop=True)
    truths, again = histograms(part), histograms(shuffled)
    cells = true_cells(truths, part.iloc[:0])
    assert (cells["count"] == cells["bounded_count"]).all()
    from_cells = histograms_from_cells(cells)
    for marginal in MARGINALS:
        hist = truths[marginal.name]
        pd.testing.assert_frame_equal(hist, again[marginal.name])
        pd.testing.assert_frame_equal(hist, from_cells[marginal.name])  # every marginal from the true cells
        assert (hist["count"] > 0).all() and hist["count"].sum() == len(rows)
        keys = list(hist.columns[:-1])
        renamed = part.rename(columns={f"tap_{marginal.tap}_window": "time_window", f"tap_{marginal.tap}_loc": "loc"})
        expected = renamed.groupby(keys, observed=True).size()
        got = hist.set_index(keys)["count"]
        assert got.to_dict() == expected.to_dict()
        sort_key = [hist[k].cat.codes if k == "loc" else hist[k] for k in keys]
        assert np.all(np.diff(np.lexsort(sort_key[::-1])) > 0) if len(hist) > 1 else True


def test_time_loc_order_is_window_then_label():
    hist = histograms(partition([(5, 3, -1, 0), (5, 1, -1, 0), (2, 4, -1, 0), (5, 1, 3, 2)]), [MARGINALS[4]])[
        MARGINALS[4].name]
    assert list(zip(hist["time_window"], hist["loc"].astype(str))) == [(2, "Manly"), (5, "2000"), (5, "Central")]
    assert hist["count"].tolist() == [1, 2, 1]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(trip, max_size=60), over=st.lists(trip, max_size=20))
def test_true_cells_count_all_trips_and_bounded_ones_apart(rows, over):
    """``count`` covers the trips kept and those over the bound; ``bounded_count`` only the kept ones."""
    kept, dropped = partition(rows), partition(over)
    cells = true_cells(histograms(kept), dropped)
    everything = histograms(pd.concat([kept, dropped], ignore_index=True))
    for marginal in MARGINALS:
        pd.testing.assert_frame_equal(histograms_from_cells(cells)[marginal.name], everything[marginal.name])
        bounded = histograms_from_cells(cells, column="bounded_count")[marginal.name]
        pd.testing.assert_frame_equal(bounded, histograms(kept)[marginal.name])
