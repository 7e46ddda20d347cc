"""Private Parquet files grouped by a column (``private_files``): one value's rows read alone, as a filtered read of
the whole file gives them."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.private_files import read_parquet_group, write_parquet_atomic

MODES = ["bus", "ferry", "light_rail", "train"]


@settings(max_examples=40, deadline=None)
@given(modes=st.lists(st.sampled_from(MODES), max_size=60))
def test_a_grouped_file_gives_each_value_its_rows_in_their_order(tmp_path_factory, modes):
    folder = tmp_path_factory.mktemp("grouped")
    frame = pd.DataFrame({"mode": pd.Categorical(modes, categories=MODES), "row": range(len(modes))})
    grouped, plain = folder / "grouped.parquet", folder / "plain.parquet"
    write_parquet_atomic(frame, grouped, durable=False, grouped_by="mode")
    write_parquet_atomic(frame, plain, durable=False)
    stored = pd.read_parquet(grouped)  # every row, in the order of the categories, each value's rows in order
    pd.testing.assert_frame_equal(stored, pd.read_parquet(plain).sort_values("mode", kind="stable", ignore_index=True))
    assert pq.ParquetFile(grouped).metadata.num_row_groups == max(len(set(modes)), 1)
    for mode in MODES:
        expected = pd.read_parquet(plain, filters=[("mode", "==", mode)])
        pd.testing.assert_frame_equal(read_parquet_group(grouped, "mode", mode), expected)
        pd.testing.assert_frame_equal(read_parquet_group(plain, "mode", mode), expected)  # not grouped: filtered
