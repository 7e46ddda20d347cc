"""Dagster's own floor for opal_dp's asset graph: the same asset keys, partitions, dependencies (with their partition
mappings), check specs, backfill policies and jobs, every step doing nothing (each selected asset materialised with
nothing stored, each selected check passed), run with the run plan of a real release: the same jobs with the same
tags (partition ranges, weeks), replayed in order on an instance of the same kind. What a release costs above it is
opal_dp's own work (issue 48: "at most 2x the Dagster-only floor").

``python -m benchmarks.dagster_floor PLAN RESULT [HOME]`` replays a plan (``release_plan``, as JSON) in a fresh
process, on an ephemeral instance as the pipeline's repeat ran its release (``benchmarks.pipeline``), or on a new
persistent Dagster home at HOME as the CLI runs it (``benchmarks.cli_release``): its end to end is the release's like
for like, interpreter start, imports and definitions included."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import dagster as dg

RunPlan = list[tuple[str, dict[str, str], tuple[str, ...]]]  # (job, run tags, checks evaluated), in the release's order
IO_MANAGER_KEY = "dagster/io_manager_key"  # where an asset spec names its IO manager
CHECKS_TAG = "opal_dp/floor_checks"  # the checks a replayed run evaluates (``asset key:check name``, comma-separated)


class _NothingStored(dg.IOManager):
    """The IO manager of every key the real assets name: no step of the floor stores or loads a value."""

    def handle_output(self, context, obj) -> None:
        pass

    def load_input(self, context):
        return None


def _noop_assets(assets_def: dg.AssetsDefinition, rank: dict[dg.AssetKey, int]):
    """A step of ``assets_def``'s shape and concurrency pool (on a persistent home it claims its slot, as the release's
    steps that charge the ledger do) that computes nothing and evaluates, of its selected checks, those its run's
    ``CHECKS_TAG`` names (the real step evaluates only its design's); its assets in the graph's topological order
    (``rank``), as Dagster requires."""
    def evaluated(context) -> list[dg.AssetCheckKey]:
        wanted = set(context.run.tags.get(CHECKS_TAG, "").split(","))
        return [key for key in context.selected_asset_check_keys if key.to_user_string() in wanted]

    if not assets_def.keys:  # checks only
        @dg.multi_asset_check(specs=list(assets_def.check_specs), name=assets_def.node_def.name,
                              can_subset=assets_def.can_subset, pool=assets_def.op.pool)
        def checks_only(context):
            for key in evaluated(context):
                yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True)
        return checks_only

    @dg.multi_asset(specs=list(assets_def.specs), check_specs=list(assets_def.check_specs),
                    name=assets_def.node_def.name, can_subset=assets_def.can_subset,
                    backfill_policy=assets_def.backfill_policy, pool=assets_def.op.pool)
    def assets(context):
        for key in sorted(context.selected_asset_keys, key=rank.__getitem__):
            yield dg.MaterializeResult(asset_key=key)
        partitions = context.partition_keys if context.has_partition_key_range else []
        for key in evaluated(context):
            if len(partitions) > 1:  # as the release's steps check a range: an evaluation per partition
                for partition in partitions:
                    yield dg.AssetCheckEvaluation(asset_key=key.asset_key, check_name=key.name, passed=True,
                                                  partition=partition)
            else:
                yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True)
    return assets


def floor_definitions(real: dg.Definitions) -> dg.Definitions:
    """``real``'s assets as steps that do nothing but evaluate the checks their run names, and its asset jobs with
    the same selections, partitions and executor."""
    graph = real.resolve_asset_graph()
    rank = {key: i for i, key in enumerate(graph.toposorted_asset_keys)}
    assets = [_noop_assets(a, rank) for a in graph.assets_defs if a.is_executable]
    jobs = []
    for job in real.resolve_all_job_defs():
        layer = job.asset_layer
        if job.name.startswith("__") or not layer.executable_asset_keys:
            continue
        selection = dg.AssetSelection.assets(*layer.executable_asset_keys).without_checks() | \
            dg.AssetSelection.checks(*layer.asset_graph.asset_check_keys)
        jobs.append(dg.define_asset_job(job.name, selection=selection, executor_def=job.executor_def))  # partitions:
        # the selected assets' (``test_dagster_floor``)
    io_managers = {spec.metadata.get(IO_MANAGER_KEY, "io_manager") for spec in real.resolve_all_asset_specs()}
    return dg.Definitions(assets=assets, jobs=jobs, resources={key: _NothingStored() for key in io_managers})


@cache
def _floor() -> dg.Definitions:
    from opal_dp.definitions import defs

    return floor_definitions(defs())


def floor_job(name: str) -> dg.JobDefinition:
    """The floor's job ``name``, its definitions built once per process from opal_dp's (module level, so that Dagster
    can reconstruct it in a run's process)."""
    return _floor().resolve_job_def(name)


def release_plan(instance: dg.DagsterInstance) -> RunPlan:
    """The job, tags and evaluated checks of every run on ``instance``, oldest first: the plan of its release."""
    plan = []
    for run in reversed(instance.get_runs()):
        events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        checks = {e.dagster_event.event_specific_data.asset_check_key.to_user_string() for e in events}
        plan.append((run.job_name, dict(run.tags), tuple(sorted(checks))))
    return plan


def replay(plan: RunPlan, instance: dg.DagsterInstance) -> list[float]:
    """Each run of ``plan`` through the floor's jobs on ``instance``, as ``opal_dp.runs`` executes a run; the
    seconds of each. A run that fails raises: a floor that does not finish measures nothing."""
    from dagster._core.execution.api import execute_run

    seconds = []
    for job, tags, checks in plan:
        recon = dg.build_reconstructable_job("benchmarks.dagster_floor", floor_job.__name__, (job,))
        job_def = floor_job(job)  # built before the clock starts: the release's jobs are, too
        started = time.perf_counter()
        run = instance.create_run_for_job(job_def=job_def, tags={**tags, CHECKS_TAG: ",".join(checks)},
                                          job_code_origin=recon.get_python_origin())
        result = execute_run(recon, run, instance)
        seconds.append(time.perf_counter() - started)
        if not result.success:
            raise RuntimeError(f"the floor's run of {job} failed")
    return seconds


def dagster_floor_run(plan: RunPlan, run_dir: Path, env: dict[str, str], home: Path | None = None) -> dict:
    """``plan`` replayed in a fresh ``python -m benchmarks.dagster_floor`` process: its end to end (``wall_s``), the
    seconds of its runs and the events they stored. On an ephemeral instance, or with ``home`` on the persistent
    instance of a new Dagster home there with opal_dp's settings (``ensure_dagster_home``, as the CLI makes one)."""
    plan_file, result_file = run_dir / "floor_plan.json", run_dir / "floor.json"
    plan_file.write_text(json.dumps(plan))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "benchmarks.dagster_floor", str(plan_file), str(result_file),
                    *([str(home)] if home else [])], env=env,
                   cwd=Path(__file__).resolve().parent.parent, check=True, capture_output=True)
    return {"wall_s": time.perf_counter() - started, **json.loads(result_file.read_text())}


def main(plan_path: Path, result_path: Path, home: Path | None = None) -> None:
    """Replay the plan at ``plan_path`` on an ephemeral instance (or on a new persistent Dagster home at ``home``);
    the seconds and events to ``result_path``."""
    if home is None:
        opened = dg.DagsterInstance.ephemeral()
    else:
        from opal_dp.defs.shared.instance import ensure_dagster_home

        opened = dg.DagsterInstance.from_config(str(ensure_dagster_home(home)))
    with opened as instance:
        runs = replay([(job, tags, tuple(checks)) for job, tags, checks in json.loads(plan_path.read_text())], instance)
        events = sum(len(instance.all_logs(run.run_id)) for run in instance.get_runs())
    result_path.write_text(json.dumps({"runs_s": sum(runs), "per_run_s": runs, "events": events}) + "\n")


if __name__ == "__main__":
    from benchmarks.dagster_floor import main as main_of_module  # the module Dagster reconstructs the jobs from

    main_of_module(*map(Path, sys.argv[1:4]))
