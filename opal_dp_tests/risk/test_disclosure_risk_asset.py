"""The ``disclosure_risk`` asset: wiring and the figures it reports."""

from __future__ import annotations

import dagster as dg
import pytest

from opal_dp.definitions import defs
from opal_dp.defs.marginals.risk import disclosure_risk
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.release.marginals.tables import COUNT, MARGINALS, TIME
from opal_dp_tests.risk.test_attacks import manly_release


def test_asset_is_an_unpartitioned_report_over_the_six_releases():
    loaded = defs()
    node = loaded.resolve_assets_def("disclosure_risk")
    key = dg.AssetKey("disclosure_risk")
    assert node.partitions_def is None
    assert node.group_names_by_key[key] == "report"
    assert node.asset_deps[key] == {dg.AssetKey(["release", m.name]) for m in MARGINALS}
    assert key in loaded.resolve_job_def("rollup").asset_layer.selected_asset_keys


def test_metadata_reports_all_three_attacks():
    releases = manly_release(7, range(24, 80, 2), pair_noise=3)
    secret = releases["tap_on_time"]["2016-07-25|ferry"]
    secret.loc[secret[TIME] == 40, COUNT] += 50
    budget = PrivacyBudget(privacy_unit="trip")  # the attacks are on the 2016 trip-level release
    result = disclosure_risk(context=dg.build_asset_context(), privacy_budget=budget, **releases)
    meta = result.metadata
    assert meta["partitions"] == 2
    assert meta["differencing_exposed_bins"] == 1
    assert meta["differencing_max_residual"] == 50
    assert "10:00" in meta["differencing_worst"].value
    assert meta["duplicated_pairs"] == 2
    assert "Circular Quay" in meta["duplicated_pairs_table"].value
    assert meta["duplication_loss_on_duplicated_count"] == 2.0
    assert meta["duplication_noise_std_reduction"] == pytest.approx(2**0.5)
    for name, mechanism in budget.plan().mechanisms.items():
        assert meta[f"presence_probability_{name}"] == mechanism.release_probability(1)
    assert 0 < meta["presence_probability_any_marginal"] < 6 / 16_000_000
