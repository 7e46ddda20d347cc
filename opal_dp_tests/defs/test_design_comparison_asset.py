"""The ``design_comparison`` asset end to end on the session's tiny release: both designs drawn in memory, nothing
charged, stored beside the private reports only, never published."""

from __future__ import annotations

import pandas as pd
import pytest

from opal_dp_tests.defs.conftest import run_report_job


@pytest.mark.slow
def test_compare_designs_job_materialises_the_table_without_charging(released):
    result, storage = run_report_job(released[0], "compare_designs")

    table = pd.read_parquet(storage.private_dir / "design_comparison.parquet").set_index("design")
    assert list(table.index) == ["sbh", "public_domain"]
    assert table.loc["public_domain", "differencing_residual"] == 0
    assert table.loc["sbh", "differencing_residual"] > 0  # independent one-way draws never add up here
    assert table.loc["sbh", "false_cells_per_day"] == 0 == table.loc["sbh", "listed_true_zero_share"]
    assert table["trips"].nunique() == 1 and table["trips"].iloc[0] > 0
    assert (table["share_of_trips_in_listed_cells"] > 0).all()
    assert table.loc["public_domain", "expected_false_cells_per_day"] > 0

    (materialization,) = result.asset_materializations_for_node("design_comparison")
    metadata = materialization.metadata
    assert metadata["partitions"].value == 8  # 2 days x 4 modes
    assert "public_domain" in metadata["comparison (internal, not DP)"].value
    assert metadata["plot"].value.startswith("![designs](data:image/png;base64,")
    assert metadata["privacy_unit"].value == "trip"
