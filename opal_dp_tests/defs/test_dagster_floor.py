"""The Dagster-only floor of the benchmark (``benchmarks.dagster_floor``): a release's run plan replayed through the
same asset graph with steps that do nothing stores the same Dagster events by type as the release, but those of
the values the real steps store and load and the steps' outputs (the real day step reports its partitions as
materialisation events, the floor's steps as one output per asset), so that the floor measures Dagster's own cost
of this graph and plan; on an ephemeral instance (the benchmark's headline) and on a persistent home with opal_dp's
settings (``benchmarks.cli_release``: the CLI's kind of instance)."""

from __future__ import annotations

from collections import Counter

import dagster as dg
import pytest

from benchmarks.dagster_floor import CHECKS_TAG, floor_definitions, release_plan, replay
from opal_dp.definitions import defs
from opal_dp.defs.shared.metadata import LEDGER_POOL
from opal_dp.defs.shared.instance import ensure_dagster_home
from opal_dp.defs.shared.tags import RELEASE_ID_TAG

VALUES = {dg.DagsterEventType.HANDLED_OUTPUT, dg.DagsterEventType.LOADED_INPUT, dg.DagsterEventType.STEP_INPUT,
          dg.DagsterEventType.STEP_OUTPUT}


def _events(instance: dg.DagsterInstance, release_id: str | None = None) -> Counter:
    """Dagster's events of every run (of the release ``release_id``, if given) by type, the values' events and the
    steps' own log lines left out."""
    runs = [r for r in instance.get_runs() if release_id is None or r.tags.get(RELEASE_ID_TAG) == release_id]
    return Counter(e.dagster_event_type for r in runs for e in instance.all_logs(r.run_id)
                   if e.is_dagster_event and e.dagster_event_type not in VALUES)


@pytest.mark.parametrize("kind", ["ephemeral", "persistent"])
def test_the_floor_replays_the_release_plan_with_the_same_events_but_the_values(released, kind, tmp_path):
    instance, results = released  # the session's instance: other tests may have added runs of other jobs to it
    plan = [run for run in release_plan(instance) if run[1].get(RELEASE_ID_TAG) == results.release_id]
    assert [job for job, _, _ in plan].count("rollup") == 1 and len(plan) == results.launched
    assert any(checks for _, _, checks in plan), "the release's checks are evaluated by the floor too"
    opened = (dg.DagsterInstance.ephemeral() if kind == "ephemeral"
              else dg.DagsterInstance.from_config(str(ensure_dagster_home(tmp_path / "home"))))
    with opened as floor:
        seconds = replay(plan, floor)
        assert len(seconds) == len(plan) and all(s > 0 for s in seconds)
        runs = [(r.job_name, r.tags) for r in reversed(floor.get_runs())]
        assert runs == [(job, {**tags, CHECKS_TAG: ",".join(checks)}) for job, tags, checks in plan]
        real, replayed = _events(instance, results.release_id), _events(floor)
    assert replayed == real and replayed[dg.DagsterEventType.ASSET_CHECK_EVALUATION] > 0


def test_the_floor_s_steps_claim_the_release_s_concurrency_pools_and_its_jobs_partitions():
    real, floor = defs(), floor_definitions(defs())
    pools = {a.node_def.name: a.op.pool for a in real.resolve_asset_graph().assets_defs if a.is_executable}
    assert LEDGER_POOL in pools.values()
    assert {a.node_def.name: a.op.pool for a in floor.resolve_asset_graph().assets_defs if a.is_executable} == pools
    partitions = {job.name: job.partitions_def for job in real.resolve_all_job_defs() if not job.name.startswith("__")}
    assert {job.name: job.partitions_def for job in floor.resolve_all_job_defs() if job.name in partitions} == partitions
