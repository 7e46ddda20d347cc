"""The code location loads, and its lineage is what we mean it to be (changes must be deliberate)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandera.pandas as pa

from opal_dp.definitions import defs
from opal_dp.defs.shared.metadata import column_schema
from opal_dp.defs.shared.partitions import period_mode
from opal_dp_tests.browser.dagster_dev import REPO_ROOT

EXPECTED_GROUPS = {
    "ingest": {"ingested_trips", "rejected_trips"},
    "bin": {"binned_trips", "card_days"},
    "bound": {"bounded_trips", "trips_over_bound"},
    "od": {"trip_sequences", "od_prefix_tree"},
    "partition": {"trip_partitions", "true_cells"},
    "release": {f"release/{m}" for m in ("tap_on_time", "tap_on_loc", "tap_off_time", "tap_off_loc",
                                          "tap_on_time_loc", "tap_off_time_loc")} | {"privacy_ledger", "release_draws"},
    "synthetic": {"synthetic_release", "synthetic_trips", "synthetic_published", "synthetic_report"},
    "od_hierarchy": {"od_hierarchy"},
}

MODEL_MODULES = ("opal_dp.prep.schemas", "opal_dp.release.marginals.schemas")  # every Pandera model of opal_dp
ON_DEMAND = {"unit_comparison", "design_comparison", "planner_workload", "od_evaluation", "od_hierarchy_evaluation"}
ROLLUP = {"privacy_ledger", "privacy_audit", "utility_report", "disclosure_risk", "published_release"}


def specs() -> dict[str, dg.AssetSpec]:
    return {spec.key.to_user_string(): spec for spec in defs().resolve_all_asset_specs()}


def test_assets_are_grouped_by_stage():
    groups: dict[str, set[str]] = {}
    for key, spec in specs().items():
        groups.setdefault(spec.group_name, set()).add(key)
    for group, keys in EXPECTED_GROUPS.items():
        assert keys <= groups[group], group


def test_lineage_runs_ingest_to_publish():
    deps = {key: {d.asset_key.to_user_string() for d in spec.deps} for key, spec in specs().items()}
    assert deps["binned_trips"] == {"ingested_trips"}
    assert deps["bounded_trips"] == {"binned_trips"}  # the card id is dropped here, after bounding
    assert deps["trip_partitions"] == {"bounded_trips", "binned_trips", "card_days"}  # the week's day cap
    # the hierarchy design pins its trees to the week's published daily totals (od_hierarchy's draws)
    assert deps["release/tap_on_time_loc"] == {"trip_partitions", "trips_over_bound", "od_hierarchy"}
    assert {f"release/{m}" for m in ("tap_on_time", "tap_off_loc")} | {"release_draws"} <= deps["published_release"]
    assert deps["trip_sequences"] == {"binned_trips"}  # built while the card id exists, kept private
    assert deps["od_prefix_tree"] == {"trip_sequences"} and "od_prefix_tree" in deps["published_release"]
    assert deps["od_hierarchy"] == {"trip_sequences"} and "od_hierarchy" in deps["published_release"]  # od.csv
    assert specs()["trip_sequences"].tags["data_class"] == "microdata"
    assert specs()["od_prefix_tree"].tags["data_class"] == "dp"


def test_every_dataframe_asset_shows_its_column_schema():
    for key, spec in specs().items():
        if (spec.group_name in {"ingest", "bin", "bound", "partition"} or key.startswith("release/") or key in {
                "privacy_ledger", "utility_report", "release_draws"}) and key != "raw_trip_files":
            schema = spec.metadata.get("dagster/column_schema")
            assert isinstance(schema, dg.TableSchema) and schema.columns, key
            assert all(column.description for column in schema.columns), key  # shown in the UI beside each column


def test_the_column_schemas_are_those_dagster_pandera_states():
    """``column_schema`` builds the UI's column schema itself (``dagster-pandera`` imports Polars in every process
    that loads the definitions): for every Pandera model of opal_dp, the schema ``dagster-pandera`` makes."""
    from dagster_pandera import pandera_schema_to_dagster_type

    models = {model for module in map(importlib.import_module, MODEL_MODULES) for model in vars(module).values()
              if isinstance(model, type) and issubclass(model, pa.DataFrameModel) and model is not pa.DataFrameModel}
    assert len(models) >= 15
    for model in models:
        assert column_schema(model)["dagster/column_schema"] == pandera_schema_to_dagster_type(
            model).metadata["schema"].schema, model.__name__


def test_each_release_asset_has_one_blocking_check_per_property_per_partition():
    """Each property a name of its own on each release asset, blocking, per (week, mode) partition, saying which
    design evaluates it; the warning check only on the time marginals."""
    graph = defs().resolve_asset_graph()
    keys = [c for c in graph.asset_check_keys if c.asset_key.to_user_string() == "release/tap_on_time"]
    names = {"no_new_points", "counts_above_threshold", "canonical_order", "schema_valid", "budget_recorded",
             "no_identifiers", "within_public_domain", "listed_counts_reach_tau", "sums_exact"}
    assert {k.name for k in keys} == names | {"plausible_totals"}
    for key in keys:
        spec = graph.get_check_spec(key)
        assert spec.partitions_def == period_mode and spec.blocking == (key.name != "plausible_totals"), key
    assert "Evaluated under the sbh release design." in graph.get_check_spec(next(k for k in keys if k.name == "no_new_points")).description
    assert "Evaluated under the sbh, public_domain and hierarchy release designs." in graph.get_check_spec(
        next(k for k in keys if k.name == "schema_valid")).description
    assert "Evaluated under the public_domain and hierarchy release designs." in graph.get_check_spec(
        next(k for k in keys if k.name == "sums_exact")).description
    loc = {c.name for c in graph.asset_check_keys if c.asset_key.to_user_string() == "release/tap_on_loc"}
    assert loc == names


def test_jobs_and_sensors_exist():
    d = defs()
    for job in ("private_stages", "release", "release_od", "rollup", "compare_units", "compare_designs", "score_workload",
                "evaluate_od", "synthetic", "synthetic_publish"):
        assert d.resolve_job_def(job)
    for sensor in ("raw_file_sensor", "opal_dp_automation"):
        assert d.resolve_sensor_def(sensor).description
    assert d.resolve_schedule_def("weekly_publication").description


def test_every_asset_has_a_data_class_owner_kind_code_reference_and_automation():
    """data_class says what an asset holds (microdata, internal non-DP figures, dp, public); the UI shows it."""
    for key, spec in specs().items():
        assert spec.tags.get("data_class") in {"microdata", "internal", "dp", "public"}, key
        if key == "raw_trip_files":
            continue
        assert spec.owners == ["team:opal-data"] and "python" in spec.kinds, key
        assert "dagster/code_references" in spec.metadata, key
        opt_in = key in ON_DEMAND or spec.group_name == "synthetic"  # od_hierarchy: part of the release
        weekly = key in ROLLUP  # launched together by the weekly_publication schedule, not by conditions
        assert (spec.automation_condition is None) == (opt_in or weekly), key
    internal = {k for k, s in specs().items() if s.tags["data_class"] == "internal"}
    assert {"true_cells", "utility_report", "disclosure_risk", "unit_comparison", "design_comparison",
            "privacy_ledger"} <= internal
    for key in internal - {"privacy_audit", "privacy_ledger"}:
        assert "not differentially private" in (specs()[key].description or "").lower() or "internal" in (
            specs()[key].description or "").lower(), key
    published = specs()["published_release"]
    assert published.tags["data_class"] == "public" and published.freshness_policy is not None


def test_dg_check_defs_passes():
    """The project's own tooling accepts the code location (the issue's `dg check defs`)."""
    dg_cli = Path(sys.executable).with_name("dg")
    done = subprocess.run([str(dg_cli), "check", "defs"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All definitions loaded successfully" in done.stdout + done.stderr


def test_the_release_is_what_make_release_builds_and_nothing_opt_in():
    """The four jobs of the release cover every asset except the opt-in synthetic ones and the on-demand reports
    (the OD hierarchy, which makes od.csv, is released with its week); each job has one partitioning: service days,
    (week, mode), weeks, none. Automation may launch only those, and the roll-up job is the weekly sensor's."""
    d = defs()
    graph = d.resolve_asset_graph()
    jobs = {name: {k.to_user_string() for k in d.resolve_job_def(name).asset_layer.selected_asset_keys}
            for name in ("private_stages", "release", "release_od", "rollup")}
    everything = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert set().union(*jobs.values()) == everything - ON_DEMAND - EXPECTED_GROUPS["synthetic"]
    assert jobs["release_od"] == {"od_prefix_tree", "od_hierarchy"}
    partitions = {name: {str(type(graph.get(dg.AssetKey.from_user_string(k)).partitions_def).__name__) for k in keys}
                  for name, keys in jobs.items()}
    assert partitions == {"private_stages": {"DailyPartitionsDefinition"}, "release": {"MultiPartitionsDefinition"},
                          "release_od": {"WeeklyPartitionsDefinition"}, "rollup": {"NoneType"}}
    assert jobs["rollup"] == ROLLUP
    automation = d.resolve_sensor_def("opal_dp_automation")
    assert {k.to_user_string() for k in automation.asset_selection.resolve(graph)} <= set().union(*jobs.values())
    assert d.resolve_schedule_def("weekly_publication").job_name == "rollup"


def test_one_switch_starts_the_sensors():
    """OPAL_DP_AUTOMATION=1 in the daemon's environment turns both sensors and the weekly schedule on; without it they
    are off."""
    code = ("from opal_dp.definitions import defs; d = defs(); "
            "print(sorted((s.name, s.default_status.value) for s in [*d.sensors, *d.schedules]))")
    statuses = {}
    for switch in ("", "1"):
        env = {**os.environ, "OPAL_DP_AUTOMATION": switch, "PYTHONPATH": str(REPO_ROOT)}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        statuses[switch] = done.stdout.strip()
    names = ("opal_dp_automation", "raw_file_sensor", "weekly_publication")
    assert statuses[""] == str([(n, "STOPPED") for n in names])
    assert statuses["1"] == str([(n, "RUNNING") for n in names])
