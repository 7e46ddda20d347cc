"""The publish gate's comparison of a release asset with the ledger's stored draw (``release.marginals.gate``)."""

from __future__ import annotations

import pandas as pd

from opal_dp.private_files import write_parquet_atomic
from opal_dp.release.marginals.gate import read_asset_and_draw

FRAME = pd.DataFrame({"time_window": pd.array([10, 54], dtype="int16"),
                      "loc": pd.Categorical(["2000", "Central"], categories=["2000", "2010", "Central"]),
                      "count": pd.array([18, 25], dtype="int64")})


def test_the_same_bytes_or_the_same_bins_are_the_draw_and_a_changed_count_is_not(tmp_path):
    stored, asset = tmp_path / "draw.parquet", tmp_path / "asset.parquet"
    write_parquet_atomic(FRAME, stored)
    write_parquet_atomic(FRAME, asset)
    assert asset.read_bytes() == stored.read_bytes()
    frame, drawn = read_asset_and_draw(asset, stored)
    assert drawn and frame.equals(FRAME)
    FRAME.to_parquet(asset, index=False, compression="snappy")  # other bytes, the same bins
    assert asset.read_bytes() != stored.read_bytes()
    assert read_asset_and_draw(asset, stored)[1]
    FRAME.assign(count=[18, 26]).to_parquet(asset, index=False)
    frame, drawn = read_asset_and_draw(asset, stored)
    assert not drawn and frame["count"].tolist() == [18, 26]
