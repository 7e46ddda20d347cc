"""The hierarchy design end to end through Dagster: a checked, audited weekly release whose 2016 files and levels
file add up exactly, stated as the hierarchy; a levels file that does not add up is refused; the plan charges each
table the levels it is read from, and refuses the trip unit and the Laplace."""

from __future__ import annotations

import json
import math
import re
import shutil

import dagster as dg
import pandas as pd
import pytest

from opal_dp.release.marginals.public_domain import sum_problems
from opal_dp.release.marginals.time_loc_tables import LEVELS_TABLE, level_problems, totals_problems
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.published_folder import validate_published
from opal_dp.release.settings import PrivacySettings
from opal_dp.release.page.common import sum_error_bounds
from opal_dp_tests.conftest import release_tiny_days

DAYS = ["2016-07-25", "2016-07-26"]
KEY = ["mode", "date", "tap"]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    root = tmp_path_factory.mktemp("hierarchy")
    results = release_tiny_days(root, DAYS, {"release_design": "hierarchy"})
    latest = root / "published" / "latest"
    validate_published(latest)
    tables = {t: pd.read_csv(latest / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
              for t in ("time-loc", "time", "loc", LEVELS_TABLE)}
    return results, json.loads((latest / "privacy.json").read_text()), tables, latest.resolve(), root


@pytest.mark.slow
def test_a_weekly_release_publishes_files_and_levels_that_add_up(released):
    results, statement, tables, latest, _ = released
    evaluations = results["release"][0].get_asset_check_evaluations()
    checked = {e.check_name for e in evaluations}
    assert evaluations and all(e.passed for e in evaluations)
    assert checked >= {"within_public_domain", "sums_exact"}
    assert not checked & {"no_new_points", "counts_above_threshold", "listed_counts_reach_tau"}
    audit = next(e.materialization.metadata for r in results["rollup"] for e in r.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey("privacy_audit"))
    taps = audit["hierarchy_audit"].value
    assert audit["mechanism"].value == "time_loc_hierarchy" and sorted(taps) == ["tap_off", "tap_on"]
    assert all(t["passed"] and t["silent_cells"] == 0 and 0 < t["rho_lower_bound"] <= t["charged_rho"]
               for t in taps.values())
    assert sum_problems({t: tables[t] for t in ("time-loc", "time", "loc")}) == []
    levels = tables[LEVELS_TABLE]
    assert level_problems(levels, tables["loc"]) == []
    assert set(levels["level"]) == {"mode_day", "district_day", "district_hour", "station_day", "station_hour"}
    days = levels[levels["level"] == "mode_day"].set_index(KEY)["count"]
    assert days.to_dict() == tables["time"].groupby(KEY)["count"].sum().to_dict()  # one total in every file
    assert statement["design"]["name"] == "hierarchy"
    assert {m["mechanism"] for m in statement["marginals"]} == {"time_loc_hierarchy"}
    assert statement["guarantee"]["epsilon"] <= statement["ledger"]["cap_in_force"]["epsilon"] * (1 + 1e-9)
    assert f"{LEVELS_TABLE}.csv" in (latest / "index.html").read_text()


@pytest.mark.slow
def test_the_page_states_the_hourly_profile_and_the_stations_with_the_fits_error(released):
    _, statement, tables, latest, _ = released
    page = (latest / "index.html").read_text()
    on = next(m for m in statement["marginals"] if m["file"] == "time.csv" and m["tap"] == "on")
    hour = on["fit_error_sd"]["train"]["hour"]
    assert hour > 0 and f"train {hour:,.1f}" in page  # the fit's error of a sum of stations, not one level's noise
    assert "average tap-ons and tap-offs per day by hour" in page and "by 15-minute window" not in page
    chart = page[page.index('id="time-train"'):]
    label, average, error = re.search(r"(\d+):00-\d+:00, tap-ons: ([\d,.]+) ± ([\d,.]+) per day", chart).groups()
    train = tables["time"].loc[(tables["time"]["mode"] == "train") & (tables["time"]["tap"] == "on")]
    in_hour = train.loc[train["time"].str.partition(":")[0] == label, "count"].sum()
    assert float(average.replace(",", "")) == pytest.approx(in_hour / len(DAYS), abs=0.05)
    assert error == f"{sum_error_bounds('discrete_gaussian', hour)(len(DAYS)) / len(DAYS):,.1f}"
    station = next(m for m in statement["marginals"] if m["file"] == "loc.csv" and m["tap"] == "on")
    assert f"train {station['fit_error_sd']['train']['station_day']:,.1f}" in page


@pytest.mark.slow
def test_the_trees_add_up_to_the_published_totals_and_a_total_one_off_is_refused(released, tmp_path):
    _, statement, tables, latest, _ = released
    totals = pd.read_csv(latest / "totals.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
    assert totals_problems(tables["loc"], totals) == []
    assert {m["root"] for m in statement["marginals"]} == {"totals.csv"}
    folder = tmp_path / "copy"
    shutil.copytree(latest, folder)
    path = sorted((folder / "dates").iterdir())[0] / "totals.csv"
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    rows.loc[0, "count"] = str(int(rows.loc[0, "count"]) + 1)
    rows.to_csv(path, index=False, lineterminator="\n")
    with pytest.raises(PublishedFormatError, match="loc.csv and totals.csv"):
        validate_published(folder)


@pytest.mark.slow
def test_a_levels_file_that_does_not_add_up_is_refused(released, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(released[3], folder)
    path = sorted((folder / "dates").iterdir())[0] / f"{LEVELS_TABLE}.csv"
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    hour = rows.index[rows["level"] == "station_hour"][0]
    rows.loc[hour, "count"] = str(int(rows.loc[hour, "count"]) + 1)
    rows.to_csv(path, index=False, lineterminator="\n")
    with pytest.raises(PublishedFormatError, match=LEVELS_TABLE):
        validate_published(folder)


def test_the_plan_charges_each_table_its_levels_and_refuses_what_it_cannot_measure():
    plan = PrivacySettings(release_design="hierarchy").plan()
    for tap, taps in plan.hierarchy.items():
        mine = {m.table: m for name, m in plan.mechanisms.items() if name.startswith(f"tap_{tap}_")}
        rho = taps.budget.level_rho
        assert mine["time"].cost().rho == rho[0] and mine["loc"].cost().rho == rho[1]
        assert mine["time-loc"].cost().rho == math.fsum(rho[2:])
        assert math.isclose(math.fsum(m.cost().rho for m in mine.values()), taps.budget.rho)
        assert taps.budget.groups == 7 and 0 < mine["time-loc"].release_probability(1) < 1e-6
        assert mine["time-loc"].describe()["min_released_count"] == taps.taus[-1]
    with pytest.raises(ValueError, match="discrete Gaussian"):
        PrivacySettings(release_design="hierarchy", mechanism="laplace").plan()
    with pytest.raises(ValueError, match="measures cards"):
        PrivacySettings(release_design="hierarchy", privacy_unit="trip", mechanism="gaussian").plan()


@pytest.mark.slow
def test_the_pinned_input_version_names_the_totals_draws_and_a_week_without_them_is_refused(released):
    """The release step's reading of the week's published totals (``_published_totals``) on the release's own ledger
    and OD draws: each scope's input version names its totals' ledger draws, so totals drawn again make a new input
    (drawn and charged anew, never old trees reused); a week without them is refused, nothing charged."""
    from opal_dp.defs.marginals.release import _published_totals
    from opal_dp.defs.shared.storage import OpalStorage

    *_, root = released
    storage = OpalStorage.resolved(root)
    settings = PrivacySettings(release_design="hierarchy")
    plan, ledger = settings.plan(), settings.ledger(storage)
    frames = {day: pd.read_parquet(storage.private_dir / "od_hierarchy" / f"{day}.parquet") for day in DAYS}
    keys = [f"{day}|{mode}" for day in DAYS for mode in ("bus", "ferry", "light_rail", "train")]
    totals, versions = _published_totals(plan, frames, keys, ledger, storage, {day: "raw:week" for day in DAYS})
    ids = sorted(int(i) for f in frames.values() for i in f["draw_id"].unique())
    assert set(versions.values()) == {"raw:week+totals:" + ",".join(map(str, ids))}
    published = pd.read_csv(root / "published" / "latest" / "totals.csv", dtype=str).astype({"count": "int64"})
    assert {(f"{d[:4]}-{d[4:6]}-{d[6:]}|{m}", t): n for d, m, t, n in published[["date", "mode", "tap", "count"]]
            .itertuples(index=False)} == {(key, tap): n for key, pair in totals.items() for tap, n in zip(("on", "off"),
                                                                                                      pair)}
    charges = len(ledger.charges())
    with pytest.raises(dg.Failure, match=f"none are drawn yet for {DAYS[0]}: run release_od"):
        _published_totals(plan, {DAYS[1]: frames[DAYS[1]]}, keys, ledger, storage, {day: "raw:week" for day in DAYS})
    assert len(ledger.charges()) == charges
