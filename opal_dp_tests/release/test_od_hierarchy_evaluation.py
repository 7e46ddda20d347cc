"""The internal OD evaluation's measures on hand-made counts, and the comparison benchmark on a tiny fortnight."""

from __future__ import annotations

import numpy as np
import pytest

from opal_dp.core.hierarchy import Tree
from opal_dp.reports.od_hierarchy_evaluation import LevelCounts, evaluate

TREE = Tree((np.zeros(2, np.int64), np.array([0, 0, 1, 1])))


def test_the_measures_on_hand_made_counts():
    truth = [LevelCounts.from_finest(TREE, np.array([300, 60, 0, 40]))]
    released = [LevelCounts(400, np.array([360, 40]), np.array([270, 0, 5, 0]), np.array([90, 35]))]
    got = evaluate(truth, released, days=1)
    assert got["listed_share"] == pytest.approx(300 / 400)  # pair 2 is listed but empty: it adds no true trip
    assert got["accounted_share"] == pytest.approx(400 / 400)
    assert got["weighted_relative_error"] == pytest.approx((30 + 60 + 5 + 40) / 400)
    assert got["false_cells_per_day"] == 1
    assert got["max_abs_error"] == {"mode": 0, "district": 0, "location": 60}
    assert got["cells_200"] == 1 and got["median_200"] == pytest.approx(0.1)
    assert got["cells_50"] == 2 and got["median_50"] == pytest.approx((0.1 + 1.0) / 2)


@pytest.mark.slow
def test_the_comparison_runs_on_a_tiny_fortnight(tmp_path):
    pytest.importorskip("InfTDA")  # the bench extra
    from benchmarks.dataset import ensure_fortnight
    from benchmarks.od_compare import METHODS, run_compare, write_compare
    from opal_dp.simulate.trips import DEFAULT_SEED

    fortnight = ensure_fortnight(tmp_path / "cache", 0.002, DEFAULT_SEED)
    result = run_compare(fortnight.raw_dir, days=1)
    assert set(result["methods"]) == set(METHODS)
    assert result["methods"]["hierarchy"]["accounted_share"] > 0.9
    assert "| trips in listed location pairs |" in write_compare(result, "cmd", tmp_path)
    assert (tmp_path / "od-compare.png").stat().st_size > 0
