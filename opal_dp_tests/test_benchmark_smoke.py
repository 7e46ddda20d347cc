"""The benchmark at a tiny scale, so that it never rots: structure only, no timing assertions."""

from __future__ import annotations

import json

import pytest

from benchmarks import dataset
from benchmarks.__main__ import main
from benchmarks.profile import PHASES
from opal_dp.release.od.publish import OD_TABLES
from opal_dp.release.marginals.open_data import TABLES
from opal_dp.release.published_folder import FILES

PIPELINE_RUNS = {"private_stages", "release", "release_od", "rollup"}
SCALE = "0.002"  # a week of about 4,700 trips a day: structure only, and a release's fixed cost is most of its time


@pytest.mark.slow(80)
def test_benchmark_smoke(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset, "DAYS", 1)  # one day of its week, not the fortnight: structure only
    assert main(["--scale", SCALE, "--no-peers", "--repeat", "1", "--out", str(tmp_path),
                 "--units", "trip,card_day", "--compare-units", "--compare-designs"]) == 0

    results = json.loads((tmp_path / "results.json").read_text())
    assert {"command", "repeat", "machine", "scales", "notes"} <= results.keys()
    assert {"nproc", "memory_gib", "cpu_model", "python", "numpy", "dagster"} <= results["machine"].keys()
    (scale,) = results["scales"]
    assert scale["scale"] == float(SCALE) and scale["trips"] > 0 and scale["peers"] == {}
    assert scale["pipeline_error"] is None
    assert scale["floor"]["rows"] == scale["trips"]
    pipeline = scale["pipeline"]
    assert set(pipeline["runs"]) == PIPELINE_RUNS
    assert {"private_day_stages", "release_marginals", "published_release"} <= pipeline["steps"].keys()
    assert pipeline["wall_s"] > 0 and pipeline["peak_rss_bytes"] > 0 and pipeline["s_per_m_trips"] > 0
    assert scale["ratios"]["pipeline_over_floor"] > 0
    assert scale["headline_unit"] == "trip"  # the first of --units (the default: card_period, then trip)
    floor_dagster = pipeline["dagster_floor"]
    assert floor_dagster["wall_s"] > floor_dagster["runs_s"] > 0 and floor_dagster["events"] > 0
    assert scale["ratios"]["pipeline_over_dagster_floor"] == pytest.approx(pipeline["wall_s"] / floor_dagster["wall_s"])
    assert scale["units"]["card_day"]["dagster_floor"] is None  # the headline's only
    (repeat,) = pipeline["repeats"]
    assert repeat["rows_accepted"] == scale["trips"]
    profile = pipeline["profile"]
    assert profile == repeat["profile"] and profile["runs"] == 4  # private_stages, release and release_od per week, rollup
    assert profile["end_to_end_s"] == pytest.approx(pipeline["wall_s"], abs=0.05)
    assert sum(profile[key] for key, _ in PHASES) == pytest.approx(profile["end_to_end_s"])
    assert profile["steps"] == pytest.approx(pipeline["steps"])  # one repeat: its steps are the medians

    assert scale["units"]["card_day"]["ledger"]["scopes"] == dataset.DAYS and scale["ratios"]["card_day_over_trip"] > 0
    comparison = {row["unit"]: row for row in scale["unit_comparison"]["rows"]}
    assert set(comparison) == {"trip", "card_day", "card_period"}
    assert comparison["trip"]["share_dropped_by_bounding"] == 0 < comparison["card_day"]["share_dropped_by_bounding"]

    designs = scale["designs"]
    assert designs["pipelines"]["sbh"] == pipeline  # the trip run of --units, not run twice
    public = designs["pipelines"]["public_domain"]
    assert not public.get("error") and public["blocking_checks_passed"]
    assert public["repeats"][0]["rows_accepted"] == scale["trips"]
    assert scale["ratios"]["public_domain_release_over_sbh"] == pytest.approx(
        public["steps"]["release_marginals"] / pipeline["steps"]["release_marginals"])
    figures = {row["design"]: row for row in designs["comparison"]["rows"]}
    assert set(figures) == {"sbh", "public_domain"}
    assert figures["public_domain"]["differencing_residual"] == 0 < figures["sbh"]["differencing_residual"]
    assert figures["sbh"]["trips"] == figures["public_domain"]["trips"] == scale["trips"]
    assert figures["sbh"]["false_cells_per_day"] == 0
    public_latest = tmp_path / "runs" / f"scale-{SCALE}" / "trip-public_domain" / "repeat-0" / "data" / "published"
    assert "other" in (public_latest / "latest" / "time-loc.csv").read_text()  # remainder rows

    latest = tmp_path / "runs" / f"scale-{SCALE}" / "trip" / "repeat-0" / "data" / "published" / "latest"
    od_files = {f"{t}.csv" for t in OD_TABLES if t != "totals"}  # the trip unit: the trees' files, no hierarchy
    assert latest.is_dir() and sorted(p.name for p in latest.iterdir()) == sorted({*FILES, *od_files, "dates"})
    assert set(repeat["published_files"]) == {f"{t}.csv" for t in TABLES} | od_files
    assert all(repeat["published_files"][f"{t}.csv"] > 0 for t in TABLES)
    assert not (latest.parent.parent / "private").exists()  # microdata removed after the repeat

    markdown = (tmp_path / "RESULTS.md").read_text()
    assert "| scale | unit | trips | end to end s |" in markdown and "| pipeline / Dagster floor |" in markdown
    assert f"| {SCALE} | trip | {scale['trips']:,} |" in markdown
    assert "Machine: " in markdown
    assert f"## Profile of the pipeline, scale {SCALE}" in markdown and "step `release_marginals` |" in markdown
    assert "## Privacy units" in markdown and "## Utility of the units on the same data" in markdown
    assert "## Release designs" in markdown
    assert f"| {SCALE} | public_domain |" in markdown and f"| {SCALE} | sbh |" in markdown


def test_od_benchmark_smoke(tmp_path):
    from datetime import date

    from benchmarks.od import markdown as od_markdown
    from benchmarks.od import run_od
    from opal_dp.simulate.trips import generate_days

    list(generate_days([date(2016, 7, 25), date(2016, 7, 26)], tmp_path / "raw", seed=3, scale=0.005))
    od = run_od(tmp_path / "raw", queries=50)
    assert len(od["days"]) == 2 and od["trips"] > 0 and od["build_s"] > 0
    assert all(d["od_trips"] <= d["trips"] for d in od["days"])
    assert {r["tree"] for r in od["evaluation"]["rows"]} == {"hybrid", "plain"}
    text = od_markdown(od, "python -m benchmarks.od --scale 0.005")
    assert "## OD prefix tree" in text and "| 6 |" in text
@pytest.mark.slow
def test_synthetic_benchmark_smoke(tmp_path):
    from benchmarks.synthetic import main as synthetic_main

    assert synthetic_main(["--scale", SCALE, "--out", str(tmp_path), "--peers", "none"]) == 0
    result = json.loads((tmp_path / "synthetic_eps8.json").read_text())
    assert result["synthetic_trips"] > 0 and result["peak_rss_bytes"] > 0 and result["synthesis_s"] > 0
    assert result["ledger_epsilon"] <= 8.0 * (1 + 1e-9)
    assert [r["method"] for r in result["scores"]] == ["archetype_synthesizer", "one_way", "sbh"]
    assert 0 <= result["travel_days_l1"] <= 2 and {r["measure"] for r in result["period"]} == {"travel_days", "returns"}
    assert not (tmp_path / "runs" / f"scale-{SCALE}" / "synthetic" / "private").exists()  # draws removed after


def test_person_cap_budget_is_the_largest_within_the_cap():
    """The benchmark's budget is the production share (``release.share``) over a year of 52 weeks."""
    from benchmarks.person_cap import annual, week, weekly_budget, weekly_costs, weekly_plan
    from opal_dp.core import ContributionBounds
    from opal_dp.network import load_stops
    from opal_dp.release.options import Design, Mechanism
    from opal_dp.release.share import share_epsilon

    stops = load_stops()
    epsilon = weekly_budget(20.0, Mechanism.GAUSSIAN, Design.SBH)
    assert epsilon == share_epsilon(20.0, 1e-6, 52, Mechanism.GAUSSIAN, Design.SBH)

    def year(e):
        plan = weekly_plan(e, 1e-6 / 104, Mechanism.GAUSSIAN, Design.SBH, ContributionBounds(), week(), stops)
        return annual(weekly_costs(plan))

    assert 1.0 < epsilon < 20.0 / 52 * 10
    assert year(epsilon) <= 20.0 < year(epsilon + 0.02)  # the largest to three digits
    assert weekly_budget(20.0, Mechanism.GAUSSIAN, Design.SBH, od_epsilon=1.0) == 0.0  # the trees alone pass the cap


def test_person_cap_tally_weighted_error():
    import pandas as pd

    from benchmarks.person_cap import Tally

    truth = pd.DataFrame({"time_window": [1, 2, 3], "loc": ["a", "b", "c"], "count": [100, 300, 5]})
    released = pd.DataFrame({"time_window": [1, 2, 4], "loc": ["a", "b", "d"], "count": [110, 290, 7]})
    tally = Tally()
    tally.add("on", truth, released)
    figures = tally.figures()
    assert figures["on_share_in_released"] == pytest.approx(400 / 405)
    assert figures["on_weighted_rel_error"] == pytest.approx((10 + 10 + 7) / 400)  # a false cell counts fully
    assert figures["on_median_rel_error_100"] == pytest.approx((0.1 + 10 / 300) / 2)
    assert figures["on_released_cells"] == 3


@pytest.mark.slow
def test_person_cap_benchmark_smoke(tmp_path):
    from benchmarks.person_cap import main as person_cap_main

    assert person_cap_main(["--scale", SCALE, "--out", str(tmp_path), "--caps", "20", "--od-epsilons", "0,0.1",
                            "--bounds", "2x5", "--pd-bounds", "2x5", "--coarse-bounds", "2x5"]) == 0
    result = json.loads((tmp_path / "person_cap.json").read_text())
    assert result["trips"] > 0 and len(list((tmp_path / "raw").glob("trips_*"))) == 7
    budgets = {(r["mechanism"], r["design"], r["od_epsilon_per_date"]): r for r in result["budgets"]}
    assert len(budgets) == 6
    for mechanism, design in (("gaussian", "sbh"), ("gaussian", "public_domain"), ("laplace", "sbh")):
        assert 0 < budgets[mechanism, design, 0.1]["week_epsilon"] < budgets[mechanism, design, 0.0]["week_epsilon"]
    assert budgets["gaussian", "sbh", 0.0]["week_epsilon"] > 2 * budgets["laplace", "sbh", 0.0]["week_epsilon"]
    rows = result["utility"]
    assert {(r["budget"], r["design"], r["bins"]) for r in rows} == {
        *((b, "sbh", bins) for b in ("cap 20", "EIE") for bins in ("15min-stop", "hour-stop", "hour-district")),
        ("cap 20", "public_domain", "15min-stop"), ("EIE", "public_domain", "15min-stop"),
        ("cap 20", "sbh", "15min-stop")}
    assert all(0 <= r["on_share_in_released"] <= 1 and 0 < r["share_dropped_by_bounding"] < 1 for r in rows)
    assert "## Utility under a person cap" in (tmp_path / "person_cap.md").read_text()


def test_samplers_benchmark_smoke(monkeypatch, capsys):
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "DRAWS", 10)
    samplers.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "discrete Laplace, scale 3", "discrete Laplace, scale 30", "discrete Laplace, scale 300",
        "discrete Gaussian, sigma 30"] and all(line.endswith(" ms for 10 draws") for line in lines)
