"""The publish gate: what goes out is the ledger's stored draws, checked again, after a passing audit, and
described by the ledger, whatever the publishing run's configuration.

One small release (two days, 1,500 trips each) is made once; each test then runs the publication alone (or the
roll-up) on a copy of it and compares the published folder with what was there before. The audit runs at
10^5 releases per input (``AUDIT_RUNS``): its false-alarm bound alpha = 1e-6 holds at any number of runs, and
the planted leak below exceeds delta by far more than the confidence interval at that size.
"""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pandas as pd
import pytest

import opal_dp.defs.marginals.audit as audit_defs
from opal_dp.cli import run_release
from opal_dp.settings import AUDIT_RUNS_ENV
from opal_dp.definitions import defs
from opal_dp.defs.marginals.gate_checks import GATE_CHECKS
from opal_dp.defs.marginals.publish import PUBLICATION_STATE
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals.tables import COUNT, MARGINALS
from opal_dp.release.periods import week_of
from opal_dp_tests.audit.planted import ScaleBug
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, TRIP
from opal_dp_tests.fuzz.raw import tiny_day, write_day

pytestmark = [pytest.mark.slow, pytest.mark.publish_gate]
AUDIT_RUNS = 10**5
TAMPERED = f"{DAYS[0].isoformat()}|bus", "tap_on_loc"


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """(instance, storage) after one release of the two days, published once."""
    storage = OpalStorage(data_dir=str(tmp_path_factory.mktemp("gate")))
    for day in DAYS:
        write_day(storage.raw_dir, day.isoformat(), tiny_day(day.isoformat(), trips=1_500))
    instance = dg.DagsterInstance.ephemeral()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AUDIT_RUNS_ENV, str(AUDIT_RUNS))
        run_release(instance, data_dir=storage.root, budget=TRIP, without=other_days(d.isoformat() for d in DAYS))
    return instance, storage


@pytest.fixture
def released(original, tmp_path, monkeypatch):
    """A private copy of the released data (the instance's records point at the data directory's contents
    only through the storage resource, which each run is given), without its publication: a publication
    gates the dates it publishes, and this way every date is about to be published."""
    instance, storage = original
    copy = OpalStorage(data_dir=str(tmp_path / "data"))
    shutil.copytree(storage.root, copy.root, symlinks=True)
    shutil.rmtree(copy.published_dir)
    shutil.rmtree(copy.private_dir / PUBLICATION_STATE)
    monkeypatch.setenv(AUDIT_RUNS_ENV, str(AUDIT_RUNS))
    return instance, copy


def run(instance: dg.DagsterInstance, storage: OpalStorage, assets: list[str] | None, budget: dict | None = None):
    """The roll-up job, or only ``assets`` of it, on ``private_files``; never raises."""
    config = {"resources": {"storage": {"config": {"data_dir": storage.data_dir}},
                            "privacy_budget": {"config": budget or TRIP}}}
    job = defs().resolve_job_def("rollup")
    selection = None if assets is None else [dg.AssetKey(a) for a in assets]
    return job.execute_in_process(instance=instance, run_config=config, asset_selection=selection,
                                  raise_on_error=False)


def releases(storage: OpalStorage) -> set[tuple[str, int, int]]:
    """Every published file and folder, with its size and modification time."""
    root = storage.published_dir
    return {(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def failure_messages(result) -> str:
    return "\n".join(e.step_failure_data.error.message for e in result.all_events if e.is_step_failure)


def stored_draw(storage: OpalStorage) -> tuple:
    """(release asset file, ledger's stored draw file, the draw's charge) of the ``TAMPERED`` partition's marginal."""
    key, name = TAMPERED
    day, mode = key.split("|")
    ledger = PrivacyBudget(**TRIP).ledger(storage)
    draw, charge = max(((d, c) for d, c in ledger.draws_on([day]) if c.marginal == name and c.scope == key
                        and d.status == "complete"), key=lambda dc: dc[0].id)
    asset = next(storage.private_dir.joinpath("release", name).rglob(f"{mode}.parquet"))
    return asset, storage.private_dir / draw.release_ref, charge


def add_one(path) -> None:
    frame = pd.read_parquet(path)
    frame.loc[frame.index[0], COUNT] += 1
    frame.to_parquet(path, index=False)


def test_a_release_asset_that_is_not_the_ledgers_draw_is_not_published(released):
    """Kills a gate that skips "the release asset is the ledger's stored draw" (``defs.marginals.publish``)."""
    instance, storage = released
    asset, _, _ = stored_draw(storage)
    add_one(asset)  # tampered after the release, before the roll-up
    before = releases(storage)
    result = run(instance, storage, ["published_release"])
    assert not result.success
    assert f"{TAMPERED[0]} {TAMPERED[1]}: the release asset is not the ledger's stored draw" in failure_messages(result)
    assert gate_checks(result) == {("dates_are_the_ledgers_draws", False)}  # the UI names the check that refused
    assert releases(storage) == before


def gate_checks(result) -> set[tuple[str, bool]]:
    return {(e.check_name, e.passed) for e in result.get_asset_check_evaluations()}


def test_publication_waits_for_an_audit_stored_after_the_latest_draws(released):
    """On an instance that holds no audit, then one older than the latest release draws, the publication is refused
    by its ``audit_passed`` check and writes nothing; once an audit is stored after them, every gate check passes
    and the release is published. Kills a gate that publishes without a passing audit of the current draws."""
    _, storage = released
    instance = dg.DagsterInstance.ephemeral()
    before = releases(storage)
    for event in ([], [dg.AssetMaterialization("privacy_audit"),
                       dg.AssetMaterialization("release_draws", partition=f"bus|{week_of(DAYS[0].isoformat())}")]):
        for materialisation in event:
            instance.report_runless_asset_event(materialisation)
        result = run(instance, storage, ["published_release"])
        assert not result.success and gate_checks(result) == {("audit_passed", False)}
        assert "no privacy audit passed since the latest release was drawn" in failure_messages(result)
        assert releases(storage) == before
    instance.report_runless_asset_event(dg.AssetMaterialization("privacy_audit"))
    result = run(instance, storage, ["published_release"])
    assert result.success and gate_checks(result) == {(name, True) for name in GATE_CHECKS}
    assert (storage.published_dir / "latest" / "privacy.json").exists()


def test_a_stored_draw_failing_a_blocking_check_is_not_published(released):
    """Asset and ledger draw tampered alike (they match), one count set below the release threshold: kills a gate
    that does not re-run the blocking checks at publish (``defs.marginals.publish``)."""
    instance, storage = released
    for path in stored_draw(storage)[:2]:
        frame = pd.read_parquet(path)
        frame.loc[frame.index[0], COUNT] = 1
        frame.to_parquet(path, index=False)
    before = releases(storage)
    result = run(instance, storage, ["published_release"])
    assert not result.success
    assert "counts_above_threshold" in failure_messages(result)
    assert releases(storage) == before


def test_a_failing_privacy_audit_stops_publication(released, monkeypatch):
    """Planted leak: the audited mechanism's noise scale ignores the replace-one relation (``ScaleBug``), so
    ``privacy_audit`` fails. Kills an audit that reports without failing, and a publication that does not wait
    for the audit."""
    instance, storage = released
    monkeypatch.setattr(audit_defs, "StabilityHistogram", ScaleBug)
    before = releases(storage)
    result = run(instance, storage, None)
    assert not result.success
    audit = [e for e in result.all_events if e.is_step_failure and e.step_key == "privacy_audit"]
    assert audit and "privacy audit FAILED" in failure_messages(result)
    published = [e for e in result.all_events if e.is_step_success and e.step_key == "published_release"]
    assert not published
    assert releases(storage) == before


def test_the_statement_states_the_ledgers_parameters_not_the_publishing_configuration(original, released):
    """Kills a statement built from the publishing run's configuration: publishing with other epsilons, deltas,
    relation and bounds states exactly what the previous publication (same ledger draws) stated."""
    instance, storage = released
    latest = storage.published_dir / "latest" / "privacy.json"
    charged = json.loads((original[1].published_dir / "latest" / "privacy.json").read_text())
    other = {"epsilon": {m.name: 0.25 for m in MARGINALS}, "delta": {m.name: 1e-9 for m in MARGINALS},
             "relation": "add_remove", "max_trips_per_card_day": 2, "od_release": True}  # the default unit, card_period
    result = run(instance, storage, ["published_release"], budget=other)
    assert result.success, failure_messages(result)
    stated = json.loads(latest.read_text())
    assert stated.pop("release")["id"] != charged.pop("release")["id"]  # a new publication, same statement
    assert stated == charged
