"""The command line's release: what is new, and the runs that release it.

``run_release`` ingests every raw day that is new, replaced or cut with other settings (``prep.day_records``), then
releases each week whose days are all ingested and whose input or settings changed since its last release, then
publishes: the runs of ``defs.shared.jobs.run_plan``, the same ones a UI backfill and the automation make (one
ingest run over the new days, one ``release`` and one ``release_od`` run a week, one roll-up). A week that is not
ready waits, named with the reason, and is not charged; a week whose release is refused fails its own runs and no
other. With nothing new it launches nothing.

The runs are runs of the code location's jobs: created with the origin of ``workspace.yaml``'s location
(``LOCATION``), so the UI lists them on the jobs' pages and the overview, tagged with their weeks, the privacy unit
and the release id (``defs.shared.tags``), and executed from here by the jobs' executor (``defs.shared.executor``:
in this process on one machine, the Celery workers of ``deploy/`` when ``distributed``). In this process, the roll-up's
card-level audit, which depends on the plan only, starts with the first week released and runs beside the weeks'
steps (``audit.early``), when the roll-up runs in this process and the release may use more than one process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections.abc import Collection, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import dagster as dg

from opal_dp import settings
from opal_dp.audit import early
from opal_dp.audit.card_level import audit_plan
from opal_dp.defs.shared.executor import in_process
from opal_dp.defs.shared.jobs import OD_ASSETS, run_plan
from opal_dp.defs.shared.logs import STEP_LISTENERS
from opal_dp.defs.shared.partitions import RANGE_END, RANGE_START, service_dates
from opal_dp.defs.shared.tags import RELEASE_ID_TAG, UNIT_TAG, WEEKS_TAG, WITHOUT_TAG
from opal_dp.locations import DataLocation
from opal_dp.network import MODES, load_stops
from opal_dp.parallel import start_in_background
from opal_dp.prep.day_files import raw_file_stamp
from opal_dp.prep.day_records import DayCut, DayRecord, read_records
from opal_dp.prep.ingest import scan_raw_files
from opal_dp.release.period_input import RECORDS, PeriodNotReady, period_input, released_period_input
from opal_dp.release.audit_call import card_audit_call
from opal_dp.release.periods import name, week_days, week_of
from opal_dp.release.published_folder import LATEST, read_index
from opal_dp.release.statement.build import STATEMENT_JSON
from opal_dp.release.synthetic.publish import SYNTHETIC
from opal_dp.release.settings import PrivacySettings

BUDGET = "privacy_budget"
LOCATION = "opal_dp"  # workspace.yaml's location_name: the UI lists the runs under it
STAGE_NAMES = {"private_stages": "ingest", "release": "release", "release_od": "OD release", "rollup": "roll-up",
               "synthetic": "synthetic", "synthetic_publish": "synthetic publish"}


@dataclass
class ReleaseRuns:
    """What a release did: the successful runs by job name; the days whose raw file could not be used (date ->
    why); the weeks not released because a day is not ready (week name -> why) and those whose release failed
    (week name -> why, e.g. refused by the ledger's caps); the release id its runs are tagged with."""

    release_id: str
    runs: dict[str, list] = field(default_factory=dict)
    launched: int = 0
    failed_days: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, dict[str, str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, job: str) -> list:
        return self.runs[job]

    def __contains__(self, job: object) -> bool:
        return job in self.runs

    @property
    def nothing_new(self) -> bool:
        return self.launched == 0


def run_release(
    instance: dg.DagsterInstance,
    dates: list[str] | None = None,
    budget: Mapping[str, object] | None = None,
    data_dir: str | Path | None = None,
    log_file: Path | None = None,
    progress: bool = False,
    synthetic: bool = False,
    distributed: bool = False,
    without: Collection[str] = (),
    workers: int | None = None,
) -> ReleaseRuns:
    """Release what is new among the raw days (default: every raw file; ``dates``: only those) and publish it.

    ``budget``: configuration of the ``privacy_budget`` resource for every run (privacy unit, bounds, ...);
    ``data_dir``: the data directory (default: ``$OPAL_DP_DATA_DIR`` or ``./data``, read once); ``log_file``:
    where the runs' events go instead of the console; ``progress``: a progress bar per run on stderr;
    ``synthetic``: the synthetic card-day trips too (``privacy_budget.synthetic`` on); ``distributed``: the jobs'
    executor is the Celery workers of ``deploy/`` (on a persistent ``instance``), so no per-day workers start here; ``without``: days whose weeks are released without them (named by the operator; the statement lists
    them); ``workers``: processes for the per-day work of every run (the ``workers`` resource; default
    ``$OPAL_DP_WORKERS`` or the CPUs). A failed ingest of a bad raw file, a week that waits and a refused week are
    results, not errors; any other failed run stops the release (``SystemExit`` with the run's message).
    """
    location = DataLocation.resolved(data_dir)
    config = {**dict(budget or {}), **({"synthetic": True} if synthetic else {})}
    chosen = PrivacySettings(**config)
    found = scan_raw_files(location.raw_dir)[0] if location.raw_dir.exists() else {}
    days = sorted(dates or found)
    if not days:
        raise SystemExit(f"no raw files in {location.raw_dir}")
    started = datetime.now(timezone.utc)  # the one instant whose partitions every run of this release sees
    outside = sorted(set(days) - set(service_dates.get_partition_keys(current_time=started)))
    if outside:
        raise SystemExit(f"not a service date of this deployment (from ${settings.FIRST_DATE_ENV} = "
                         f"{service_dates.start:%Y-%m-%d} to yesterday, {settings.TIMEZONE_ENV} = "
                         f"{service_dates.timezone}): {', '.join(outside)}")
    cut = chosen.day_cut(load_stops())
    release_id = f"{started:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    out = ReleaseRuns(release_id)
    launcher = _Launcher(instance, _run_config(location, config, log_file, progress, workers), release_id,
                         chosen.unit.value, progress, distributed, workers, started)
    records = read_records(location.private_dir)
    new = [d for d in days if _needs_ingest(records.get(d), raw_file_stamp(location.raw_dir, d), cut)]
    for span in _ranges(new):
        result = launcher.run("private_stages", span, [span[0], span[1]])
        records = read_records(location.private_dir)
        failed = {d: records[d].reason for d in _dates(span) if d in records and not records[d].ingested}
        if not result.success and not failed:  # not a bad raw file: nothing to leave out
            raise SystemExit(failure_message("private_stages", result))
    out.failed_days = {d: r.reason for d, r in records.items() if d in days and not r.ingested}
    if new and set(new) <= set(out.failed_days) and not any(r.ingested for r in records.values()):
        raise SystemExit("no day could be ingested:\n" + "\n".join(f"{d}: {why}" for d, why in out.failed_days.items()))
    try:
        _release_weeks(launcher, out, instance, location, chosen, days, cut, without, synthetic, distributed)
    finally:
        early.discard()  # an audit started for a roll-up that did not run
    out.runs, out.launched = launcher.results, launcher.launched
    return out


def _release_weeks(launcher: _Launcher, out: ReleaseRuns, instance: dg.DagsterInstance, location: DataLocation,
                   chosen: PrivacySettings, days: list[str], cut: DayCut, without: Collection[str], synthetic: bool,
                   distributed: bool) -> None:
    """Release each week that is ready and new, then roll up and publish (``run_release``). In this process, the
    card-level audit starts with the first week released, beside its steps (``audit.early``)."""
    for week in sorted({week_of(d) for d in days}):
        try:
            wanted = period_input(location.private_dir, week, cut, without)
        except PeriodNotReady as err:
            out.waiting[name(week_days(week))] = err.held
            continue
        last = released_period_input(location.private_dir, week)
        if (not chosen.fresh_draw and last is not None and last.settings == chosen.fingerprint()
                and (last.days, last.without, last.versions) == (wanted.days, wanted.without, wanted.versions)
                and _week_released(instance, location, week, synthetic)):
            continue  # released already, from this input with these settings
        if not distributed:
            _start_audit(chosen, launcher.workers)
        tags = {WITHOUT_TAG: ",".join(wanted.without)} if wanted.without else {}
        plan = [(job, span) for job, span in run_plan([], [week]) if job != "rollup"]
        for job, span in plan + ([("synthetic", (week, week))] if synthetic else []):
            result = launcher.run(job, span, [week], tags)
            if not result.success:
                out.refused[name(week_days(week))] = failure_message(job, result)
                break
    released = [d for d in _released_dates(location, days) if _week_released(instance, location, week_of(d), False)]
    if released and (set(launcher.results) - {"private_stages"} or not set(released) <= _published_dates(location)
                     or synthetic and not set(released) <= _published_dates(location, SYNTHETIC)):
        result = launcher.run("rollup", None, [])
        if not result.success:
            raise SystemExit(failure_message("rollup", result))
        if synthetic:
            result = launcher.run("synthetic_publish", None, [])
            if not result.success:
                raise SystemExit(failure_message("synthetic_publish", result))


def _start_audit(chosen: PrivacySettings, workers: int | None) -> None:
    """Start the roll-up's card-level audit, the same call its ``privacy_audit`` step makes (``audit.early``), when
    that step runs in this process (the in-process executor) and the release may use more than one process
    (``workers``). Best effort: a plan that cannot be built, or an audit setting refused, is left for the steps to
    report as they always did."""
    try:
        if not in_process() or (workers or settings.workers_from_env()) <= 1:
            return
        call = card_audit_call(chosen, chosen.plan())
    except Exception:  # noqa: BLE001 - the definitions and the step that builds this plan say what is wrong with it
        return
    if call is not None:
        early.start(audit_plan, *call)


def _needs_ingest(record: DayRecord | None, stamp: tuple | None, cut: DayCut) -> bool:
    """A day is ingested when it never was, when its raw file is new or replaced, or when it was cut with other
    settings; a day that failed is tried again only with another file."""
    if record is None or record.raw != stamp:
        return True
    return record.ingested and record.cut != cut


def _ranges(days: list[str]) -> list[tuple[str, str]]:
    """The fewest contiguous ranges of service dates covering exactly ``days``."""
    ordinals = [datetime.fromisoformat(d).toordinal() for d in days]
    out: list[tuple[str, str]] = []
    for day, ordinal in zip(days, ordinals):
        if out and datetime.fromisoformat(out[-1][1]).toordinal() == ordinal - 1:
            out[-1] = (out[-1][0], day)
        else:
            out.append((day, day))
    return out


def _dates(span: tuple[str, str]) -> list[str]:
    first, last = (datetime.fromisoformat(d).toordinal() for d in span)
    return [datetime.fromordinal(o).date().isoformat() for o in range(first, last + 1)]


def _published_dates(location: DataLocation, product: str = "") -> set[str]:
    """The service dates (ISO) the latest publication holds (of the marginals, or of the synthetic trips)."""
    if product == SYNTHETIC:
        stated = location.published_dir / SYNTHETIC / LATEST / STATEMENT_JSON
        return set(json.loads(stated.read_text(encoding="utf-8"))["release"]["dates"]) if stated.exists() else set()
    folder = location.published_dir / LATEST
    if not (folder / "index.json").exists():
        return set()
    return {f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in read_index(folder)["dates"]}


def _released_dates(location: DataLocation, days: list[str]) -> list[str]:
    """Those of ``days`` that their week's last release read (the days left out of it are not)."""
    weeks = {week: released_period_input(location.private_dir, week) for week in {week_of(d) for d in days}}
    return [d for d in days if weeks[week_of(d)] is not None and d in weeks[week_of(d)].days]


def _week_released(instance: dg.DagsterInstance, location: DataLocation, week: str, synthetic: bool) -> bool:
    """Whether every release asset of the week was materialised after its input was last recorded (a release that
    stopped half-way, a crash included, is not: the next run resumes it, the ledger reusing what was drawn)."""
    recorded = (location.private_dir / RECORDS / f"{week}.json").stat().st_mtime
    wanted = [("release_draws", f"{mode}|{week}") for mode in MODES] + [(a, week) for a in OD_ASSETS] + (
        [("synthetic_release", week)] if synthetic else [])
    for asset, partition in wanted:
        found = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
        if not found or found[0].timestamp < recorded:
            return False
    return True


def _run_config(location: DataLocation, budget: Mapping[str, object], log_file: Path | None, progress: bool,
                workers: int | None) -> dict:
    config: dict = {"resources": {"storage": {"config": {"data_dir": location.data_dir,
                                                         "ledger_url": location.ledger_url}},
                                  **({BUDGET: {"config": dict(budget)}} if budget else {}),
                                  **({"workers": {"config": {"count": workers}}} if workers else {})}}
    if log_file is not None:
        config["loggers"] = {"event_log_file": {"config": {"path": str(log_file)}},
                             **({"step_progress": {}} if progress else {})}
    return config


class _Launcher:
    """Creates each run as a run of the code location's job (origin, tags) and executes it. Before the first run
    (none when nothing is new), the per-day workers start in the background while the definitions load."""

    def __init__(self, instance: dg.DagsterInstance, run_config: dict, release_id: str, unit: str, progress: bool,
                 distributed: bool, workers: int | None, started: datetime) -> None:
        self.instance, self.run_config, self.progress, self.distributed = instance, run_config, progress, distributed
        self.workers, self.started = workers, started
        self.tags = {RELEASE_ID_TAG: release_id, UNIT_TAG: unit}
        self.results: dict[str, list] = {}
        self.launched = 0

    def run(self, job: str, span: tuple[str, str] | None, weeks: list[str], tags: Mapping[str, str] | None = None):
        from dagster._core.execution.api import execute_run

        if not self.launched and not self.distributed:
            start_in_background(self.workers)
        recon = dg.build_reconstructable_job(__name__, job_by_name.__name__, (job,))
        job_def = job_by_name(job)
        run_tags = {**self.tags, **(tags or {}), **({WEEKS_TAG: ",".join(sorted(set(weeks)))} if weeks else {}),
                    **({RANGE_START: span[0], RANGE_END: span[1]} if span else {})}
        dagster_run = self.instance.create_run_for_job(
            job_def=job_def, run_config=self.run_config, tags=run_tags, job_code_origin=recon.get_python_origin(),
            remote_job_origin=job_origin(job))
        label = STAGE_NAMES[job] + (f" {weeks[0]}" if job in ("release", "release_od", "synthetic") else "")
        self.launched += 1
        with _progress_bar(label, len(job_def.graph.node_dict), enabled=self.progress) as bar:
            # every run of the release sees the partitions of one instant, its start: consistent, and Dagster
            # enumerates the (week, mode) keys once (about 2,000, 80 ms) instead of at each step that reads them
            with dg.partition_loading_context(effective_dt=self.started):
                result = execute_run(recon, dagster_run, self.instance)
            bar(result.success)
        if result.success:
            self.results.setdefault(job, []).append(result)
        return result


@cache
def _definitions(settings: tuple[tuple[str, str], ...]) -> dg.Definitions:
    from opal_dp.definitions import defs

    return defs()


def job_by_name(name: str) -> dg.JobDefinition:
    """The job, from the definitions, wherever a step runs: loaded once per process and per value of the
    ``OPAL_DP_*`` settings they are built from (the executor, the schedule's clock), so a process whose settings
    change (a test, a notebook) never runs a job defined under the old ones."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OPAL_DP_")))
    return _definitions(settings).resolve_job_def(name)


def job_origin(job: str):
    """The origin the UI's code location gives the job (``workspace.yaml``: module ``opal_dp.definitions``, location
    ``LOCATION``): a run created with it is listed on the job's page."""
    from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
    from dagster._core.remote_origin import (ManagedGrpcPythonEnvCodeLocationOrigin, RemoteJobOrigin,
                                             RemoteRepositoryOrigin)
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    target = LoadableTargetOrigin(executable_path=sys.executable, module_name="opal_dp.definitions",
                                  working_directory=os.getcwd())
    location = ManagedGrpcPythonEnvCodeLocationOrigin(loadable_target_origin=target, location_name=LOCATION)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job)


def failure_message(job: str, result) -> str:
    """What failed in a run, for a person: each failed step's own description (a ``dg.Failure``), else the step,
    the kind of error and the line of opal_dp that raised it; never the error's message (it may quote a value of the
    data), Dagster's class path or a traceback (the run's log has them)."""
    lines = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            described = data.user_failure_data and data.user_failure_data.description
            lines.append(described.strip() if described else f"step {event.step_key}: {_raised(data.error)} "
                                                               "(the run's event log has the details)")
    return f"run {result.run_id} of job {job} failed:\n" + "\n".join(lines)


def _raised(error) -> str:
    """The class of the innermost error of a step's failure (Dagster wraps the step's own; ``raise ... from``
    chains more) and the deepest frame of opal_dp's code that the chain records, as ``KeyError at
    opal_dp/reports/utility.py:57 in utility_rows``. A per-day worker's error comes back with the worker's traceback
    as text (``concurrent.futures``' ``_RemoteTraceback``, a cause of its own): its frames are the deepest."""
    chain = [error]
    while chain[-1].cause is not None:
        chain.append(chain[-1].cause)
    errors = [e for e in chain if e.cls_name != _REMOTE]
    stacks = [block for e in reversed(chain) if e.cls_name == _REMOTE for block in _text_blocks(e.message)]
    stacks += [[_FRAME.match(entry.split("\n", 1)[0]) for entry in e.stack] for e in reversed(errors)]
    name = errors[-1].cls_name if errors else error.cls_name
    for frames in stacks:  # the innermost first; in each, its last frame of opal_dp
        ours = [where for where in map(_ours, filter(None, frames)) if where]
        if ours:
            return f"{name} at {ours[-1]}"
    return name


_REMOTE = "_RemoteTraceback"
_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)\s*$')
_PACKAGE = os.path.realpath(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _text_blocks(text: str) -> list[list[re.Match]]:
    """The frame lines of each traceback block of a traceback's text, the innermost cause's block first (as Python
    prints a chain): after each ``Traceback (most recent call last):`` line, the indented lines up to the first that
    is not, where the error's message begins (a message is never read)."""
    blocks: list[list[re.Match]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            blocks.append([])
            inside = True
        elif inside and line.startswith(" "):
            blocks[-1].append(_FRAME.match(line))
        else:
            inside = False
    return blocks


def _ours(frame: re.Match) -> str | None:
    """``opal_dp/<file>:<line> in <function>`` for a frame of a file of this package, else None: a path merely
    containing ``opal_dp`` (a checkout named so, its virtual environment) is not ours."""
    path = os.path.realpath(frame["file"])
    if not path.startswith(_PACKAGE) or not os.path.isfile(path):
        return None
    return f"opal_dp/{Path(path[len(_PACKAGE):]).as_posix()}:{frame['line']} in {frame['function']}"


@contextmanager
def _progress_bar(label: str, steps: int, enabled: bool):
    """A tqdm bar over the run's steps, advanced by the step_progress logger; yields a function that marks the
    run's outcome on the bar."""
    if not enabled:
        yield lambda success: None
        return
    from tqdm import tqdm

    bar = tqdm(total=steps, desc=f"{label:<22}", unit="step", file=sys.stderr, leave=True,
               bar_format="{desc} {bar:20} {n_fmt}/{total_fmt} steps  {elapsed}{postfix}")

    def listener(event: str, step: str | None) -> None:
        if event in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            bar.update(1)

    def outcome(success: bool) -> None:
        if not success:
            bar.set_postfix_str("FAILED", refresh=True)

    STEP_LISTENERS.append(listener)
    try:
        yield outcome
    finally:
        STEP_LISTENERS.remove(listener)
        bar.close()
