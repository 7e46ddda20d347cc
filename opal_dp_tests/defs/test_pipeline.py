"""End to end through Dagster: ingest -> publish on synthetic days, then an idempotent rerun."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp.cli import run_release
from opal_dp.defs.marginals.release import CHECK_SPECS, PLAUSIBLE_PAIRS
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.marginals.checks import DESIGN_CHECKS
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.network import MODES, load_stops
from opal_dp.prep.sequences import TripAlphabet
from opal_dp.release.od.publish import od_tables
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.published_folder import LATEST, LATEST_JSON, MANIFEST, files_of, latest_release, validate_published
from opal_dp.release.statement.runs import partition_keys
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, TRIP


def materialized(instance: dg.DagsterInstance, key: str) -> set[str]:
    return set(instance.get_materialized_partitions(dg.AssetKey.from_user_string(key)))


def test_every_partition_is_materialised_in_the_plans_runs(released):
    instance, results = released
    assert list(results.runs) == ["private_stages", "release_od", "release", "rollup"]
    days = {d.isoformat() for d in DAYS}
    assert materialized(instance, "binned_trips") == days
    keys = {f"{mode}|2016-07-25" for mode in ("bus", "ferry", "light_rail", "train")}  # both days: one week
    for asset in ("trip_partitions", "release/tap_on_time", "release/tap_off_time_loc"):
        assert materialized(instance, asset) == keys
    assert materialized(instance, "od_prefix_tree") == {"2016-07-25"}


def test_ingest_reports_read_equals_accepted_plus_rejected(released):
    instance, _ = released
    record = instance.fetch_materializations(dg.AssetKey("ingested_trips"), limit=1).records[0]
    meta = record.asset_materialization.metadata
    assert meta["rows_read"].value == meta["rows_accepted"].value + meta["rows_rejected"].value > 0


def test_all_blocking_checks_pass_and_epsilon_is_in_metadata(released):
    _, results = released
    # One ingest run per range of consecutive days (a run's days are a range: 25 and 30 July are two), one release run
    # and one OD release run for the week (every mode in it), one rollup.
    assert [len(runs) for runs in results.runs.values()] == [2, 1, 1, 1]
    evaluations = [e for run in results["release"] for e in run.get_asset_check_evaluations()]
    # One evaluation per check of the design in use, release asset and (week, mode) partition of the run.
    sbh = [s for s in CHECK_SPECS if s.name in DESIGN_CHECKS["sbh"] or s.name == "plausible_totals"]
    assert len(evaluations) == len(sbh) * len(MODES), len(evaluations)
    assert {(e.asset_check_key, e.partition) for e in evaluations} == {
        (s.key, f"{mode}|2016-07-25") for s in sbh for mode in MODES}
    assert all(e.passed for e in evaluations if e.check_name != "plausible_totals")
    meta = {}
    for m in results["release"][0].get_asset_materialization_events():
        if m.partition != "bus|2016-07-25":
            continue
        key = m.asset_key.to_user_string()
        meta[key] = {**meta.get(key, {}), **m.materialization.metadata}
    assert meta["release/tap_on_time"]["epsilon"].value == 1.0
    assert meta["release/tap_on_time_loc"]["epsilon"].value == 2.0
    assert meta["release/tap_on_time_loc"]["noise_seeded"].value is False
    assert meta["release/tap_on_time"]["privacy_unit"].value == "trip"
    assert meta["release/tap_on_time"]["blocking_checks"].value == "all passed"
    assert meta["release/tap_on_time"]["dagster/row_count"].value > 0


def test_each_partitions_check_outcome_is_in_its_checks_table_and_its_materialisation(released):
    """What the UI shows per partition: each property checked on each (week, mode) partition, named by the check
    (only the design's: the public-domain design's checks are not evaluated under sbh), its dates counted, and the
    partition's outcome again in its materialisation metadata."""
    instance, results = released
    keys = {f"{m}|2016-07-25" for m in MODES}
    evaluations = [e for run in results["release"] for e in run.get_asset_check_evaluations()]
    checked = {e.check_name for e in evaluations}
    assert checked == {*DESIGN_CHECKS["sbh"], "plausible_totals"}
    assert not checked & {"within_public_domain", "listed_counts_reach_tau", "sums_exact"}
    for e in evaluations:
        assert e.partition in keys and e.metadata["dates"].value == len(DAYS), e
        if e.check_name != "plausible_totals":
            assert e.passed and e.blocking and e.metadata["failures"].value == 0, e
        else:
            assert {r.data["partition"].split("|")[1] for r in e.metadata["by_date"].records} == {e.partition.split("|")[0]}
    for marginal in MARGINALS:
        records = instance.fetch_materializations(dg.AssetKey(["release", marginal.name]), limit=100).records
        by_partition = {r.partition_key: r.asset_materialization.metadata for r in records}
        assert set(by_partition) == keys
        assert all(m["blocking_checks"].value == "all passed" and m["ledger"].value and m["dagster/row_count"]
                   for m in by_partition.values())
        assert all(("plausible_totals" in m) == (marginal.name in PLAUSIBLE_PAIRS) for m in by_partition.values())


def test_one_release_asset_alone_is_refused_before_anything_is_charged(released):
    """The release multi-asset is subsettable only so that a run evaluates its design's checks: materialising one
    marginal without the others (as the UI's asset page offers) fails with a reason, and the ledger is unchanged."""
    from opal_dp.definitions import defs

    instance, _ = released
    ledger = PrivacyBudget(**TRIP).ledger(default_storage())
    before = [(c.id, c.scope, c.marginal) for c in ledger.charges()]
    result = defs().resolve_job_def("release").execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey(["release", "tap_on_time"])],
        partition_key=dg.MultiPartitionKey({"mode": "bus", "period": "2016-07-25"}),
        run_config={"resources": {"privacy_budget": {"config": TRIP}}}, raise_on_error=False)
    assert not result.success
    failures = [e.step_failure_data.user_failure_data for e in result.all_events if e.is_step_failure]
    assert any(f and "the six marginals of a week are released together" in f.description for f in failures)
    assert [(c.id, c.scope, c.marginal) for c in ledger.charges()] == before


def test_the_ledger_is_a_table_in_the_ui_without_nan(released):
    instance, _ = released
    meta = instance.get_latest_materialization_event(dg.AssetKey("privacy_ledger")).asset_materialization.metadata
    table = meta["ledger"]
    assert [c.name for c in table.schema.columns][:5] == ["unit", "scope", "epsilon", "delta", "rho"]
    trip = [r.data for r in table.records if r.data["unit"] == "trip"]
    assert len(trip) == 8 and all(r["rho"] is None and r["charges"] == 6 and r["cap_epsilon"] > 0 for r in trip)


def test_ledger_has_exactly_one_charge_per_partition_and_marginal(released):
    """Six marginals per (date, mode) under the trip unit, and one OD tree per date on its card_day scope."""
    ledger = PrivacyBudget(**TRIP).ledger(default_storage())
    charges = ledger.charges()
    pairs = [(c.scope, c.marginal) for c in charges if c.unit == "trip"]
    assert len(pairs) == len(set(pairs)) == 8 * 6
    od = sorted((c.unit, c.scope, c.marginal, c.epsilon) for c in charges if c.unit != "trip")
    assert od == [("card_day", "2016-07-25", "od", 1.0), ("card_day", "2016-07-30", "od", 1.0)]
    assert all(d.status == "complete" for d in ledger.draws()) and len(ledger.draws()) == 48 + 2
    summary = pd.read_parquet(default_storage().private_dir / "privacy_ledger.parquet")
    assert sorted(summary["epsilon"].tolist()) == [1.0] * 2 + [8.0] * 8


def test_published_release_is_complete_and_says_it_is_not_seeded(released):
    latest = default_storage().published_dir / "latest"
    assert sorted(p.name for p in latest.iterdir()) == ["PRIVACY.md", "dates", "index.html", "index.json", "loc.csv",
                                                       "od-sequences.csv", "od.csv", "privacy.json", "time-loc.csv",
                                                       "time.csv"]
    statement = json.loads((latest / "privacy.json").read_text())
    assert statement["noise_seeded"] is False
    table = pd.read_csv(latest / "time-loc.csv", dtype=str)
    assert list(table.columns) == ["mode", "date", "tap", "time", "loc", "count"]
    assert set(table["date"]) <= {d.strftime("%Y%m%d") for d in DAYS}


def test_nothing_non_dp_is_reachable_from_published(released):
    """published/ holds the publication folder ``latest`` (its files and ``dates/<date>/`` of the per-date files and
    their manifest) and ``latest.json``, no links, no file names a private path, and every published count is
    exactly a DP release asset's count."""
    storage = default_storage()
    root = storage.published_dir.resolve()
    statement = json.loads((root / LATEST / "privacy.json").read_text(encoding="utf-8"))
    dates = {k["date"] for k in partition_keys(statement)}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        for name in dirs + files:
            path = here / name
            assert not path.is_symlink(), f"{path} is a link"
            if path.is_dir():
                assert (here, name) in {(root, LATEST), (root / LATEST, "dates")} or \
                    (here == root / LATEST / "dates" and name in dates), f"unexpected folder {path}"
            elif here == root:
                assert name == LATEST_JSON and latest_release(root) == root / LATEST, f"unexpected {path}"
            else:
                allowed = files_of(statement) if here == root / LATEST else \
                    [*(f for f in files_of(statement) if f.endswith(".csv")), MANIFEST]
                assert name in allowed, f"unexpected file {path}"
                assert str(storage.private_dir) not in path.read_text(encoding="utf-8"), f"{path} names private/"
    validate_published(root / LATEST)
    latest = root / "latest"
    keys = [f"{d[:4]}-{d[4:6]}-{d[6:]}|{k['mode']}" for k in partition_keys(
            json.loads((latest / "privacy.json").read_text())) for d in [k["date"]]]
    assets = {m.name: {key: pd.read_parquet(storage.private_dir.joinpath("release", m.name, *key.split("|"))
                                            .with_suffix(".parquet")) for key in keys} for m in MARGINALS}
    for table, frame in to_open_data(assets).items():
        assert (latest / f"{table}.csv").read_text(encoding="utf-8") == frame.to_csv(index=False)
    trees = {d.isoformat(): pd.read_parquet(storage.private_dir / "od_prefix_tree" / f"{d.isoformat()}.parquet")
             for d in DAYS}
    for table, frame in od_tables(trees, TripAlphabet.from_stops(load_stops()), PrivacyBudget(**TRIP).od_top_sequences).items():
        assert (latest / f"{table}.csv").read_text(encoding="utf-8") == frame.to_csv(index=False)


def test_rerun_reuses_every_release_without_new_charges(released):
    instance, _ = released
    before = (PrivacyBudget(**TRIP).ledger(default_storage()).charges(), PrivacyBudget(**TRIP).ledger(default_storage()).draws())
    old = (default_storage().published_dir / "latest" / "time-loc.csv").read_text()
    assert run_release(instance, budget=TRIP, without=other_days(d.isoformat() for d in DAYS)).nothing_new
    after = (PrivacyBudget(**TRIP).ledger(default_storage()).charges(), PrivacyBudget(**TRIP).ledger(default_storage()).draws())
    assert after == before
    assert (default_storage().published_dir / "latest" / "time-loc.csv").read_text() == old
