"""The OD assets end to end on the session's tiny release: sequences private, one tree per date charged on its
card_day scope, the evaluation report materialised without charging or publishing anything."""

from __future__ import annotations

import pandas as pd

from opal_dp.definitions import defs
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.od.generate import inconsistent_parents
from opal_dp_tests.defs.conftest import DAYS


def test_sequences_stay_private_and_trees_are_consistent(released):
    storage = default_storage()
    for day in DAYS:
        seqs = pd.read_parquet(storage.private_dir / "trip_sequences" / f"{day.isoformat()}.parquet")
        assert list(seqs.columns) == [f"s{i}" for i in range(PrivacyBudget().od_height)]  # no card id
        tree = pd.read_parquet(storage.private_dir / "od_prefix_tree" / f"{day.isoformat()}.parquet")
        assert inconsistent_parents(tree) == 0 and tree["draw_id"].nunique() == 1
    assert not any("trip_sequences" in str(p) for p in storage.published_dir.rglob("*"))


def test_od_evaluation_job_charges_and_publishes_nothing(released):
    instance, _ = released
    storage = default_storage()
    ledger = PrivacyBudget().ledger(storage)
    before = (ledger.charges(), ledger.draws(), sorted(p.name for p in storage.published_dir.rglob("*")))
    result = defs().resolve_job_def("evaluate_od").execute_in_process(
        instance=instance, run_config={"resources": {"storage": {"config": {"data_dir": storage.data_dir}}}})
    assert result.success
    ledger = PrivacyBudget().ledger(storage)
    assert (ledger.charges(), ledger.draws(), sorted(p.name for p in storage.published_dir.rglob("*"))) == before
    table = pd.read_parquet(storage.private_dir / "od_evaluation.parquet")
    assert set(table["tree"]) == {"hybrid", "plain"} and set(table["epsilon"]) == {0.5, 0.75, 1.0, 1.25, 1.5}
    assert table["average_relative_error"].between(0, 10).all()
    (materialization,) = result.asset_materializations_for_node("od_evaluation")
    assert materialization.metadata["plot"].value.startswith("![od](data:image/png;base64,")
