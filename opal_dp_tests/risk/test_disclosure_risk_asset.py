"""The ``disclosure_risk`` asset: wiring and the figures it reports."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from opal_dp.definitions import defs
from opal_dp.defs.marginals.risk import WORST, disclosure_risk
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames
from opal_dp.defs.shared.resources import PerDayWorkers
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals.tables import COUNT, MARGINALS, TIME
from opal_dp.reports.attacks import differencing, differencing_summary
from opal_dp_tests.risk.test_attacks import manly_release


def test_asset_is_an_unpartitioned_report_over_the_six_releases():
    loaded = defs()
    node = loaded.resolve_assets_def("disclosure_risk")
    key = dg.AssetKey("disclosure_risk")
    assert node.partitions_def is None
    assert node.group_names_by_key[key] == "report"
    assert node.asset_deps[key] == {dg.AssetKey(["release", m.name]) for m in MARGINALS}
    assert key in loaded.resolve_job_def("rollup").asset_layer.selected_asset_keys


def stored(releases: dict, root: Path) -> dict[str, PartitionFrames]:
    """The releases as the asset gets them: Parquet files behind lazily loaded ``PartitionFrames``."""
    out = {}
    for name, frames in releases.items():
        paths = {key: root / name / f"{key.replace('|', '_')}.parquet" for key in frames}
        for key, frame in frames.items():
            paths[key].parent.mkdir(parents=True, exist_ok=True)
            frame.to_parquet(paths[key], index=False)
        out[name] = PartitionFrames.of_paths(paths)
    return out


def test_metadata_reports_all_three_attacks(tmp_path):
    releases = manly_release(7, range(24, 80, 2), pair_noise=3)
    secret = releases["tap_on_time"]["2016-07-25|ferry"]
    secret.loc[secret[TIME] == 40, COUNT] += 50
    budget = PrivacyBudget(privacy_unit="trip")  # the attacks are on the 2016 trip-level release
    storage = OpalStorage(data_dir=str(tmp_path / "data"))
    frames = stored(releases, tmp_path / "releases")
    resources = {"privacy_budget": budget, "storage": storage, "workers": PerDayWorkers()}
    result = disclosure_risk(context=dg.build_asset_context(), **resources, **frames)
    again = disclosure_risk(context=dg.build_asset_context(), **resources, **frames)
    days = sorted({key.split("|")[0] for key in releases["tap_on_time"]})
    assert result.metadata["differencing_days_computed"] == len(days) and again.metadata["differencing_days_computed"] == 0
    assert {k: v for k, v in again.metadata.items() if k != "differencing_days_computed"} == \
        {k: v for k, v in result.metadata.items() if k != "differencing_days_computed"}  # kept rows, same report
    meta = result.metadata
    assert meta["duplicated_pair_window"] == f"{days[0]}..{days[-1]} ({len(days)} dates)"
    assert meta["partitions"] == 2
    assert meta["differencing_exposed_bins"] == 1
    assert meta["differencing_max_residual"] == 50
    # every one-way bin is checked, but a day keeps only the rows the report can show: the kept history (read and
    # written every week) grows by a few rows a date, not by every bin
    full = differencing(releases, budget.plan().mechanisms)
    assert meta["differencing_bins_checked"] == len(full) > 100
    kept = json.loads((storage.reports_dir / "differencing_rows.json").read_text())
    assert len(kept) == len(days) and sum(len(k["rows"][0]["shown"]) for k in kept.values()) <= len(days) + 1
    assert "10:00" in meta["differencing_worst"].value
    assert meta["duplicated_pairs"] == 2
    assert "Circular Quay" in meta["duplicated_pairs_table"].value
    assert meta["duplication_loss_on_duplicated_count"] == 2.0
    assert meta["duplication_noise_std_reduction"] == pytest.approx(2**0.5)
    for name, mechanism in budget.plan().mechanisms.items():
        assert meta[f"presence_probability_{name}"] == mechanism.release_probability(1)
    assert 0 < meta["presence_probability_any_marginal"] < 6 / 16_000_000


def test_a_day_keeps_its_worst_exposed_rows_and_counts_the_rest():
    """Under the default design nearly every one-way bin is exposed: a day keeps the counts and the ``WORST`` rows
    the report can show, not every row (the kept history is read and rewritten every week)."""
    table = pd.DataFrame({"partition": "2016-07-25|bus", "tap": "on", "by": "time", "bin": [str(i) for i in range(100)],
                          "released": 1000, "cells_sum": 0, "residual": range(1000, 900, -1), "threshold": 10})
    day = differencing_summary(table, WORST)
    assert day["checked"] == day["exposed"] == 100
    assert [row["residual"] for row in day["shown"]] == list(range(1000, 1000 - WORST, -1))
