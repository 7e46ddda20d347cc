"""Synthetic card-day trips end to end through Dagster (``release --synthetic``): published with a statement from
the ledger, rows that our own ingest accepts whole, the internal score report, and the blocking card-id check."""

from __future__ import annotations

import json

import dagster as dg
import pandas as pd
import pytest

from opal_dp import settings
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.release.settings import published_ledger_draws
from opal_dp.defs.shared.storage import default_storage
from opal_dp.defs.synthetic.assets import synthetic_card_ids_are_fresh, synthetic_dir
from opal_dp.network import load_stops
from opal_dp.prep.ingest import ingest_file
from opal_dp.prep.raw_columns import SYNTHETIC_ID_LOW
from opal_dp.release.synthetic.generator import CSV, PARQUET
from opal_dp.release.statement.runs import draws_of, ints_of
from opal_dp_tests.conftest import release_tiny_days

DAYS = ["2016-07-25", "2016-07-26"]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    results = release_tiny_days(root, DAYS, {"privacy_unit": "trip", "synthetic_epsilon": 4.0}, synthetic=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.DATA_DIR_ENV, str(root))
        yield results, default_storage()


@pytest.mark.slow
def test_release_synthetic_publishes_raw_contract_rows_with_a_ledger_statement(released, tmp_path):
    results, storage = released
    (run,) = results["synthetic"]  # the week's queries, charged to its card_period scope
    (published,) = results["synthetic_publish"]  # generated from every released week, checked, published
    assert run.success and published.success
    latest = storage.published_dir / "synthetic" / "latest"
    assert sorted(p.name for p in latest.iterdir()) == sorted([PARQUET, CSV, "privacy.json", "PRIVACY.md"])
    statement = json.loads((latest / "privacy.json").read_text())
    assert statement["privacy_unit"]["unit"] == "card_period"
    assert 0 < statement["guarantee"]["epsilon"] <= 4.0 * (1 + 1e-9)  # nothing else charged to card_period
    ledger = PrivacyBudget().ledger(storage)
    assert set(draws_of(statement["ledger"]["draws"])) <= published_ledger_draws(storage.published_dir)[ledger.ledger_id]
    assert "4" in (latest / "PRIVACY.md").read_text()
    # the person total covers every card-level file of these dates: the OD trees too, and it flags the trip files
    person = statement["person"]
    od_trees = {c.id for c in ledger.charges("card_day") if c.marginal == "od"}
    mine = {c.id for c in ledger.charges("card_period") if c.marginal.startswith("synthetic:")}
    assert len(od_trees) == len(DAYS) and od_trees | mine <= set(ints_of(person["charges"]))
    assert set(ints_of(person["this_release_charges"])) == mine and person["bounded"]
    assert "Trip-level files were also published for 2 of these dates" in person["sentence"]
    assert (latest / "PRIVACY.md").read_text().splitlines()[2] == f"**{person['sentence']}**"
    rows = pd.read_parquet(latest / PARQUET)
    assert len(rows) > 0 and len(rows) == len(pd.read_csv(latest / CSV))
    stops = load_stops()
    for day, frame in rows.groupby(rows["tap_on_time"].dt.date.astype(str)):
        path = tmp_path / f"trips_{day}.parquet"
        frame.to_parquet(path, index=False)  # every field valid raw input but the synthetic card id, refused
        assert set(ingest_file(path, stops).rejected["reason"]) == {"card_id is in the range reserved for synthetic cards"}
        frame.assign(card_id=frame["card_id"] - SYNTHETIC_ID_LOW + 1).to_parquet(path, index=False)
        assert len(ingest_file(path, stops).rejected) == 0
    (report,) = [e for e in published.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey("synthetic_report")]
    assert "scores (internal, not DP)" in report.materialization.metadata
    assert 0 <= report.materialization.metadata["travel_days_l1"].value <= 2
    assert (storage.reports_dir / "synthetic_period.png").read_bytes().startswith(b"\x89PNG")
    (trips,) = [e for e in published.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("synthetic_trips")]
    assert trips.materialization.metadata["weeks"].value == 1
    (week,) = [e for e in run.get_asset_materialization_events() if e.asset_key == dg.AssetKey("synthetic_release")]
    assert week.materialization.metadata["epsilon"].value == pytest.approx(statement["guarantee"]["epsilon"])
    checks = published.get_asset_check_evaluations()
    assert [c.check_name for c in checks] == ["synthetic_card_ids_are_fresh"] and checks[0].passed


@pytest.mark.slow
def test_card_id_check_fails_when_a_synthetic_card_id_is_a_private_one(released):
    _, storage = released
    staged = synthetic_dir(storage) / "staged" / PARQUET
    rows = pd.read_parquet(staged)
    private_id = int(pd.read_parquet(storage.private_dir / "card_days" / f"{DAYS[0]}.parquet")["card_id"].iloc[0])
    assert synthetic_card_ids_are_fresh(storage=storage, privacy_budget=PrivacyBudget()).passed
    rows.loc[0, "card_id"] = private_id
    rows.to_parquet(staged, index=False)
    assert not synthetic_card_ids_are_fresh(storage=storage, privacy_budget=PrivacyBudget()).passed
