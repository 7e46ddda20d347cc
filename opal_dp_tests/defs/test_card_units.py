"""Card-level units end to end through Dagster: a complete release per unit, the unit on every record, and a
card with hundreds of trips in one bin moving that bin by at most its bound (plus noise), against the trip
unit on the same input."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from opal_dp import settings
from opal_dp.cli import run_release
from opal_dp.core import error_bound
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.prep.ingest import RAW_COLUMNS
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.settings import DEFAULT_DELTA
from opal_dp_tests.conftest import other_days
from opal_dp_tests.core.helpers import OS_ALPHA
from opal_dp_tests.fuzz.raw import tiny_day, write_day

DAYS = ["2016-07-25", "2016-07-26"]
WEEK = "2016-07-25..2016-07-31"  # released without its five other days
CENTRAL, TOWN_HALL = 200010, 200011  # train stops in data/reference/stops.csv
OTHER_CARDS, HEAVY_TRIPS = 150, 300


def heavy_bin_trips(day: str) -> pd.DataFrame:
    """150 cards with one train trip Central -> Town Hall tapped on in 08:00-08:14, and one card with 300 such
    trips (each a second apart, so none is a duplicate)."""
    n = OTHER_CARDS + HEAVY_TRIPS
    on = pd.Timestamp(f"{day} 08:00:00") + pd.to_timedelta(np.arange(n) % 840, unit="s")
    return pd.DataFrame({
        "card_id": np.concatenate([np.arange(10**9, 10**9 + OTHER_CARDS), np.full(HEAVY_TRIPS, 4242)]),
        "mode": "train",
        "tap_on_time": on,
        "tap_on_stop": np.full(n, CENTRAL, dtype="int32"),
        "tap_off_time": on + pd.Timedelta(minutes=20),
        "tap_off_stop": pd.array(np.full(n, TOWN_HALL), dtype="Int32"),
    })[list(RAW_COLUMNS)]


@pytest.fixture(scope="module")
def raw_days(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    for i, day in enumerate(DAYS):
        trips = tiny_day(day, trips=3_000, seed=i)
        if i == 0:
            trips = pd.concat([trips, heavy_bin_trips(day)], ignore_index=True)
        write_day(folder, day, trips)
    return folder


def true_heavy_bin(raw) -> int:
    """Trips in the heavy bin on the first day: the heavy card's and every other card's (one trip each)."""
    trips = pd.read_parquet(raw / f"trips_{DAYS[0]}.parquet")
    on = trips["tap_on_time"]
    inside = (trips["mode"] == "train") & (trips["tap_on_stop"] == CENTRAL) & (on.dt.hour == 8) & (on.dt.minute < 15)
    assert trips.loc[inside & (trips["card_id"] != 4242), "card_id"].is_unique
    return int(inside.sum())


def release(raw, root, unit: str):
    root.mkdir(parents=True)
    shutil.copytree(raw, root / "raw")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.DATA_DIR_ENV, str(root))
        # every unit at the 2016 budgets with the OD tree, not the card units' shares of the person cap: this test is
        # about units, not the person cap (SBH's delta per date alone passes it on the second card_day date)
        budget = {"privacy_unit": unit, "epsilon": {m.name: m.default_epsilon for m in MARGINALS},
                  "delta": {m.name: DEFAULT_DELTA for m in MARGINALS}, "od_release": True, "od_epsilon": 1.0,
                  "od_hierarchy_release": False, "person_cap_epsilon": 1000.0, "person_cap_delta": 1e-3} | (
                      {"mechanism": "laplace"} if unit == "card_day" else {})  # SBH calibrated to the card-day
        results = run_release(dg.DagsterInstance.ephemeral(), budget=budget, without=other_days(DAYS))
        statement = json.loads((default_storage().published_dir / "latest" / "privacy.json").read_text())
        time_loc = pd.read_csv(default_storage().published_dir / "latest" / "time-loc.csv", dtype=str)
        ledger = PrivacyBudget(**budget).ledger(default_storage())
        return results, statement, time_loc, ledger


@pytest.fixture(scope="module")
def releases(raw_days, tmp_path_factory):
    root = tmp_path_factory.mktemp("units")
    return {unit: release(raw_days, root / unit, unit) for unit in ("trip", "card_day", "card_period")}


def heavy_cell(time_loc: pd.DataFrame) -> int:
    row = time_loc[(time_loc["date"] == "20160725") & (time_loc["mode"] == "train") & (time_loc["tap"] == "on")
                   & (time_loc["time"] == "8:00") & (time_loc["loc"] == "Central")]
    assert len(row) == 1, "the heavy bin must be released"
    return int(row["count"].iloc[0])


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["trip", "card_day", "card_period"])
def test_each_unit_publishes_a_complete_checked_release(releases, unit):
    results, statement, _, ledger = releases[unit]
    evaluations = results["release"][0].get_asset_check_evaluations()
    assert evaluations and all(e.passed for e in evaluations if e.check_name != "plausible_totals"), [
        e.metadata["first_failures"] for e in evaluations if not e.passed]
    assert statement["privacy_unit"]["unit"] == unit
    od = [c for c in ledger.charges() if c.marginal.startswith("od")]
    charges = [c for c in ledger.charges() if not c.marginal.startswith("od")]
    assert {c.unit for c in charges} == {unit}
    assert {c.unit for c in od} == {"card_period" if unit == "card_period" else "card_day"} and len(od) == 2
    od_scopes = {s["scope"]: s["epsilon"] for s in statement["od"]["scopes"]}
    scopes = {s["scope"] for s in statement["guarantee"]["scopes"]}
    if unit == "card_day":
        assert scopes == set(DAYS) and len(charges) == 2 * 6  # one charge per date and marginal
        # the tree is charged on the marginals' scope: the date's guarantee is the sum of both
        assert all(s["epsilon"] == pytest.approx(8.0 + 1.0) for s in statement["guarantee"]["scopes"])
        assert od_scopes == {s["scope"]: s["epsilon"] for s in statement["guarantee"]["scopes"]}
        assert statement["privacy_unit"]["relation"] == "add_remove"
        assert statement["worked_examples"][0]["epsilon"] == pytest.approx(10 * statement["guarantee"]["epsilon"])
    elif unit == "card_period":
        assert scopes == {WEEK} and len(charges) == 6  # one charge per marginal
        g = statement["guarantee"]
        cap = statement["ledger"]["cap_in_force"]["epsilon"]
        assert 8.0 < g["epsilon"] <= cap * (1 + 1e-9) and g["delta"] <= 1e-6 and g["scopes"][0]["rho"] > 0
        assert od_scopes == {WEEK: g["epsilon"]}  # one tree per date, on the period
        assert {m["noise"] for m in statement["marginals"]} == {"discrete_gaussian"}
        assert statement["worked_examples"][0]["epsilon"] == g["epsilon"]  # the commuter: the period's guarantee
        assert statement["privacy_unit"]["contribution_bounds"]["period_days"] == 7  # the week, whatever days it has
    else:
        assert len(scopes) == 8 and len(charges) == 8 * 6
        assert set(od_scopes) == set(DAYS)  # the trees protect card-days: charged apart from the trip scopes
    meta = {}
    for m in results["release"][0].get_asset_materialization_events():
        meta.setdefault(m.asset_key.to_user_string(), m.materialization.metadata)
    assert meta["release/tap_on_time_loc"]["privacy_unit"].value == unit
    bounded = [m.materialization.metadata for m in results["private_stages"][0].get_asset_materialization_events()
               if m.asset_key == dg.AssetKey("bounded_trips")]
    assert any("share_dropped_by_bounding (internal, not DP)" in b for b in bounded)


@pytest.mark.slow
def test_a_card_with_hundreds_of_trips_in_one_bin_moves_it_by_its_bound_only(releases, raw_days):
    """Trip unit: the bin shows every trip, the heavy card's 300 included. card_day (at most 1 trip of a card in a
    bin): the heavy card counts once. Both within the noise bound at false-failure rate 1e-6."""
    true = true_heavy_bin(raw_days)
    trip_count, card_count = heavy_cell(releases["trip"][2]), heavy_cell(releases["card_day"][2])
    trip_scale = releases["trip"][1]["marginals"][4]["scale"]
    card_scale = releases["card_day"][1]["marginals"][4]["scale"]
    assert releases["card_day"][1]["marginals"][4]["sensitivity"]["linf"] == 1
    assert abs(trip_count - true) <= error_bound(trip_scale, 1 - OS_ALPHA)
    assert abs(card_count - (true - HEAVY_TRIPS + 1)) <= error_bound(card_scale, 1 - OS_ALPHA)


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["trip", "card_day", "card_period"])
def test_privacy_md_states_the_od_trees_once_with_the_unit_of_their_ledger_scopes(releases, unit):
    """With the prefix trees on, under each unit: no paragraph of PRIVACY.md twice, and the OD files' stated
    protection is that of the ledger scopes their charges went to (a card-day under trip and card_day, the card's
    week under card_period). The hierarchy and the totals: ``test_default_release``."""
    from opal_dp.core import PrivacyUnit
    from opal_dp.release.statement.markdown import render_markdown

    _, statement, _, ledger = releases[unit]
    markdown = render_markdown(statement)
    paragraphs = [p.strip() for p in markdown.split("\n\n") if len(p.strip()) > 80]
    assert len(paragraphs) == len(set(paragraphs))
    (scope_unit,) = {c.unit for c in ledger.charges() if c.marginal.startswith("od")}
    assert statement["od"]["protects"].startswith(PrivacyUnit(scope_unit).protects.split(",")[0])
    assert f"- protects: {statement['od']['protects']}" in markdown
