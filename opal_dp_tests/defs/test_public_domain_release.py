"""The public-domain design end to end through Dagster, per privacy unit: a complete checked release whose files
add up exactly with their remainder rows, stated at delta = 0 where the noise is Laplace; and ``--design`` on the
command line."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pandas as pd
import pytest

from opal_dp import settings
from opal_dp import cli
from opal_dp.cli import budget_config, main, run_release
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.published_folder import validate_published
from opal_dp.release.settings import DEFAULT_DELTA
from opal_dp_tests.conftest import other_days
from opal_dp_tests.fuzz.raw import tiny_day, write_day

DAYS = ["2016-07-25", "2016-07-26"]
KEY = ["mode", "date", "tap"]
# card_day at the 2016 budgets with the OD tree (not its share of the person cap), as trip: the same figures to check
SIXTEEN = {"epsilon": {m.name: m.default_epsilon for m in MARGINALS}, "delta": {m.name: DEFAULT_DELTA for m in MARGINALS},
           "od_release": True, "od_epsilon": 1.0, "mechanism": "laplace", "od_hierarchy_release": False,
           "person_cap_epsilon": 1000.0, "person_cap_delta": 1e-3}


@pytest.fixture(scope="module")
def raw_days(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    for i, day in enumerate(DAYS):
        write_day(folder, day, tiny_day(day, trips=3_000, seed=i))
    return folder


def release(raw, root, unit: str):
    root.mkdir(parents=True)
    shutil.copytree(raw, root / "raw")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.DATA_DIR_ENV, str(root))
        budget = {"privacy_unit": unit, "release_design": "public_domain"} | ({} if unit == "card_period" else SIXTEEN)
        results = run_release(dg.DagsterInstance.ephemeral(), budget=budget, without=other_days(DAYS))
        latest = default_storage().published_dir / "latest"
        validate_published(latest)
        tables = {t: pd.read_csv(latest / f"{t}.csv", dtype=str, keep_default_na=False).astype({"count": "int64"})
                  for t in ("time-loc", "time", "loc")}
        pages = (latest / "PRIVACY.md").read_text() + (latest / "index.html").read_text()
        return results, json.loads((latest / "privacy.json").read_text()), tables, pages, latest.resolve()


@pytest.fixture(scope="module")
def releases(raw_days, tmp_path_factory):
    root = tmp_path_factory.mktemp("public_domain")
    return {unit: release(raw_days, root / unit, unit) for unit in ("trip", "card_day", "card_period")}


def sums(rows: pd.DataFrame, dim: str) -> pd.Series:
    return rows.groupby([*KEY, dim])["count"].sum()


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["trip", "card_day", "card_period"])
def test_each_unit_publishes_files_that_add_up(releases, unit):
    results, statement, tables, page, _ = releases[unit]
    evaluations = results["release"][0].get_asset_check_evaluations()
    assert evaluations and all(e.passed for e in evaluations)
    checked = {e.check_name for e in evaluations}
    assert checked >= {"within_public_domain", "listed_counts_reach_tau", "sums_exact"}
    assert not checked & {"no_new_points", "counts_above_threshold"}  # the sbh design's checks are not evaluated
    audit = next(e.materialization.metadata for r in results["rollup"] for e in r.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey("privacy_audit"))
    assert audit["tables_audited"].value == 3 and audit["release_design"].value == "public_domain"
    risk = next(e.materialization.metadata for r in results["rollup"] for e in r.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("disclosure_risk"))
    assert risk["differencing_bins_checked"].value > 100
    assert risk["differencing_max_residual"].value == 0 and risk["differencing_exposed_bins"].value == 0
    assert 0 < risk["presence_probability_tap_on_time_loc"].value < 1
    joint, time, loc = tables["time-loc"], tables["time"], tables["loc"]
    assert list(joint.columns) == list(time.columns) == list(loc.columns) == [*KEY, "time", "loc", "count"]
    assert (joint["time"] == OTHER).any() and (joint["loc"] == OTHER).any(), "remainder rows are published"
    assert not (time["loc"] == OTHER).any() and not (loc["time"] == OTHER).any()
    # every (mode, date, tap, time) of time.csv is the sum of its time-loc rows, loc = other included; likewise loc
    by_time = pd.concat([sums(joint[joint["time"] != OTHER], "time").rename("joint"),
                         sums(time, "time").rename("one_way")], axis=1).fillna(0)
    by_loc = pd.concat([sums(joint[joint["loc"] != OTHER], "loc").rename("joint"),
                        sums(loc, "loc").rename("one_way")], axis=1).fillna(0)
    assert len(by_time) > 100 and (by_time["joint"] == by_time["one_way"]).all()
    assert len(by_loc) > 100 and (by_loc["joint"] == by_loc["one_way"]).all()
    listed = joint[(joint["time"] != OTHER) & (joint["loc"] != OTHER)]
    design = statement["design"]
    assert design["name"] == "public_domain" and (listed["count"] >= design["tau"]).all()
    totals = time.groupby(KEY)["count"].sum()
    assert {(t["mode"], t["date"], t["tap"]): t["trips"] for t in design["totals"]} == totals.to_dict()
    assert "double-counts" in page and "Remainder rows" in page  # PRIVACY.md
    assert "do not add up all of time-loc.csv" in page  # index.html
    if unit == "card_period":  # the Gaussian composes in zCDP: approximate DP after conversion
        assert not design["pure_dp"] and 0 < statement["guarantee"]["delta"] <= 6 / 8e6 * (1 + 1e-9)
        # the marginals' weekly share plus one OD hierarchy per date, composed in zCDP, within the cap
        assert statement["guarantee"]["epsilon"] <= statement["ledger"]["cap_in_force"]["epsilon"] * (1 + 1e-9)
        assert {m["noise"] for m in statement["marginals"]} == {"discrete_gaussian"}
    else:  # discrete Laplace on every cell: pure epsilon-DP
        assert design["pure_dp"] and statement["guarantee"]["delta"] == 0
        od = 1.0 if unit == "card_day" else 0.0  # the date's OD tree shares the card_day scope
        assert statement["guarantee"]["epsilon"] == pytest.approx(8.0 + od)  # the six tables' epsilon_j
        assert all(s["delta"] == 0 for s in statement["guarantee"]["scopes"])
        assert {m["noise"] for m in statement["marginals"]} == {"discrete_laplace"}
        assert {m["delta"] for m in statement["marginals"]} == {0}


@pytest.mark.slow
def test_published_files_that_do_not_add_up_are_rejected(releases, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(releases["trip"][4], folder)
    path = sorted((folder / "dates").iterdir())[0] / "time.csv"  # a date's own file, as validated when written
    time = pd.read_csv(path, dtype=str, keep_default_na=False)
    time.loc[0, "count"] = str(int(time.loc[0, "count"]) + 1)
    time.to_csv(path, index=False, lineterminator="\n")
    with pytest.raises(PublishedFormatError, match="do not add up"):
        validate_published(folder)


def test_the_design_flag_reaches_the_privacy_resource(monkeypatch, capsys):
    parsed = []
    monkeypatch.setattr(cli, "_release", parsed.append)  # parse the command line, run nothing
    main(["release", "--design", "public_domain"])
    main(["release"])
    assert budget_config(parsed[0])["release_design"] == "public_domain"
    assert "release_design" not in budget_config(parsed[1])  # the resource's default: sbh
    assert PrivacyBudget(**budget_config(parsed[0])).plan().design == "public_domain"
    with pytest.raises(SystemExit):
        main(["release", "--design", "nonsense"])
    assert "invalid choice" in capsys.readouterr().err
