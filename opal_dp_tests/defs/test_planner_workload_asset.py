"""The ``planner_workload`` asset end to end on the session's tiny release: the released files answered as a reader
answers them and scored against the true cells, nothing charged, stored beside the private reports only."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from opal_dp.private_files import PartitionStore
from opal_dp.release.marginals.tables import histograms_from_cells
from opal_dp_tests.defs.conftest import run_report_job


@pytest.mark.slow
def test_score_workload_job_scores_the_released_files_against_the_truth_without_charging(released):
    result, storage = run_report_job(released[0], "score_workload")
    table = pd.read_parquet(storage.private_dir / "planner_workload.parquet").set_index(["query_class", "tap"])
    assert len(table) == 12 and table["share"].between(0, 1).all()
    # mode_day, tap-on, recomputed by hand: each (date, mode)'s time.csv total against its true trips
    store = PartitionStore(storage.private_dir)
    truth = answered = error = 0
    for piece in store.stored(("true_cells",)):
        cells = pd.read_parquet(store.path(("true_cells",), piece))
        true = int(histograms_from_cells(cells)["tap_on_time"]["count"].sum())
        total = int(pd.read_parquet(store.path(("release", "tap_on_time"), piece))["count"].sum())
        truth += true
        answered += true if total > 0 else 0
        error += abs(total - true) if total > 0 else 0
    assert truth > 0 and answered > 0
    mode_day = table.loc[("mode_day", "on")]
    assert math.isclose(mode_day["share"], answered / truth) and math.isclose(mode_day["wre"], error / answered)
    (materialization,) = result.asset_materializations_for_node("planner_workload")
    assert materialization.metadata["partitions"].value == 8  # the week's 2 days x 4 modes
    assert "station_hour" in materialization.metadata["scores (internal, not DP)"].value
