"""The OD assets end to end on the session's tiny (trip-level) release: sequences private, one tree per date charged on its
card_day scope, the evaluation report materialised without charging or publishing anything."""

from __future__ import annotations

import pandas as pd

from opal_dp.core import PrivacyUnit
from opal_dp.definitions import defs
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.od.generate import inconsistent_parents
from opal_dp.release.od.product import OD_HIERARCHY
from opal_dp.defs.shared.tags import WITHOUT_TAG
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, TRIP


def test_sequences_stay_private_and_trees_are_consistent(released):
    storage = default_storage()
    for day in DAYS:
        seqs = pd.read_parquet(storage.private_dir / "trip_sequences" / f"{day.isoformat()}.parquet")
        assert list(seqs.columns) == [f"s{i}" for i in range(PrivacyBudget(**TRIP).od_height)]  # no card id
        tree = pd.read_parquet(storage.private_dir / "od_prefix_tree" / f"{day.isoformat()}.parquet")
        assert inconsistent_parents(tree) == 0 and tree["draw_id"].nunique() == 1
    assert not any("trip_sequences" in str(p) for p in storage.published_dir.rglob("*"))


def test_od_evaluation_job_charges_and_publishes_nothing(released):
    instance, _ = released
    storage = default_storage()
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    before = (ledger.charges(), ledger.draws(), sorted(p.name for p in storage.published_dir.rglob("*")))
    result = defs().resolve_job_def("evaluate_od").execute_in_process(
        instance=instance, run_config={"resources": {"storage": {"config": {"data_dir": storage.data_dir}},
                                                     "privacy_budget": {"config": TRIP}}})
    assert result.success
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    assert (ledger.charges(), ledger.draws(), sorted(p.name for p in storage.published_dir.rglob("*"))) == before
    table = pd.read_parquet(storage.private_dir / "od_evaluation.parquet")
    assert set(table["tree"]) == {"hybrid", "plain"} and set(table["epsilon"]) == {0.5, 0.75, 1.0, 1.25, 1.5}
    assert table["average_relative_error"].between(0, 10).all()
    (materialization,) = result.asset_materializations_for_node("od_evaluation")
    assert materialization.metadata["plot"].value.startswith("![od](data:image/png;base64,")
    hierarchy = pd.read_parquet(storage.private_dir / "od_hierarchy_evaluation.parquet").set_index("method")
    assert list(hierarchy.index) == ["hierarchy", "tree"]
    assert hierarchy.loc["hierarchy", "accounted_share"] > 0.95  # every trip in a row: only the noise moves it
    (evaluated,) = result.asset_materializations_for_node("od_hierarchy_evaluation")
    worst = evaluated.metadata["totals_max_relative_error"].value  # the daily totals' check against the truth
    assert 0 <= worst and evaluated.metadata["totals_within_5_percent"].value == (worst <= 0.05)
    assert "| mode " in evaluated.metadata["totals_check (internal, not DP)"].value


def test_release_od_job_charges_the_hierarchy_of_each_date_once_and_publishes_nothing(released, tmp_path):
    """On a copy of the released data (its own ledger), the week's OD release with the hierarchy opted in: one charge
    per date for all modes, blocking checks pass, rows exact, nothing published."""
    import shutil

    from opal_dp.defs.shared.storage import OpalStorage
    from opal_dp.release.od.hierarchy import sum_problems

    instance, _ = released
    copy = tmp_path / "data"
    shutil.copytree(default_storage().data_dir, copy)
    storage = OpalStorage(data_dir=str(copy))
    published = sorted(p.name for p in storage.published_dir.rglob("*"))
    job = defs().resolve_job_def("release_od")
    config = {**TRIP, "od_hierarchy_release": True}  # opt-in under the trip unit
    result = job.execute_in_process(
        instance=instance, partition_key="2016-07-25", tags={WITHOUT_TAG: ",".join(other_days(d.isoformat() for d in DAYS))},
        run_config={"resources": {"storage": {"config": {"data_dir": str(copy)}}, "privacy_budget": {"config": config}}})
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 4 and all(c.passed for c in checks)  # the tree's two and the hierarchy's two
    for day in DAYS:
        frame = pd.read_parquet(storage.private_dir / "od_hierarchy" / f"{day.isoformat()}.parquet")
        assert sum_problems(frame.drop(columns=["draw_id"])) == [] and frame["draw_id"].nunique() == 4
    charges = [c for c in PrivacyBudget(**config).ledger(storage).charges() if c.marginal == "od_hierarchy"]
    assert sorted(c.scope for c in charges) == [d.isoformat() for d in DAYS]
    assert all(c.unit == "card_day" and [c.cost] == OD_HIERARCHY.costs(PrivacyBudget(**config), PrivacyUnit.CARD_DAY)
               for c in charges)
    assert sorted(p.name for p in storage.published_dir.rglob("*")) == published
