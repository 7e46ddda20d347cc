"""Where the end-to-end seconds of one pipeline repeat go: interpreter start, imports, each Dagster step, Dagster
inside runs but outside steps, ``run_release`` outside runs, and the child's exit; and how many Dagster events of
each kind the runs recorded (each one is stored in the event log: a cost inside steps that scales with events).

The child (``benchmarks.pipeline``) records wall-clock stamps (``time.time()``, the clock of Dagster's event
log) and, from each run's event log, the run's RUN_START/RUN_SUCCESS and every step's STEP_START to
STEP_SUCCESS (or STEP_FAILURE). The parent adds the moment it spawned the child and the moment the child
exited, and ``phases`` splits that span into parts that add up to it exactly.
"""

from __future__ import annotations

STEP_ENDS = ("STEP_SUCCESS", "STEP_FAILURE")
RUN_ENDS = ("RUN_SUCCESS", "RUN_FAILURE")


def run_intervals(instance, run_ids: list[str]) -> list[dict]:
    """Per run, in start order: its job, start and end, each step's (key, start, end) and the number of its Dagster
    events of each kind, from the event log."""
    runs = []
    for run_id in run_ids:
        run = {"job": instance.get_run_by_id(run_id).job_name, "start": None, "end": None, "steps": [], "events": {}}
        started: dict[str, float] = {}
        for entry in instance.all_logs(run_id):
            if not entry.is_dagster_event:
                continue
            kind, key = entry.dagster_event_type.name, entry.dagster_event.step_key  # names: RUN_START's value differs
            run["events"][kind] = run["events"].get(kind, 0) + 1
            if kind == "RUN_START":
                run["start"] = entry.timestamp
            elif kind in RUN_ENDS:
                run["end"] = entry.timestamp
            elif kind == "STEP_START":
                started[key] = entry.timestamp
            elif kind in STEP_ENDS:
                run["steps"].append((key, started.pop(key), entry.timestamp))
        if run["start"] is not None and run["end"] is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: r["start"])


def per_job(runs: list[dict]) -> dict[str, dict]:
    """Per job, summed over its runs (the release job runs once per mode): wall seconds, runs, seconds per step."""
    jobs: dict[str, dict] = {}
    for run in runs:
        job = jobs.setdefault(run["job"], {"wall_s": 0.0, "runs": 0, "steps": {}})
        job["wall_s"] += run["end"] - run["start"]
        job["runs"] += 1
        for key, start, end in run["steps"]:
            job["steps"][key] = job["steps"].get(key, 0.0) + end - start
    return jobs


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``intervals`` (steps of one run may overlap under a parallel executor)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def phases(stamps: dict, runs: list[dict]) -> dict:
    """Seconds per phase of one repeat; they add up to ``end_to_end_s``.

    ``stamps``: ``spawned`` and ``exited`` (parent), ``module_started``, ``imported``, ``release_started`` and
    ``release_ended`` (child). ``steps`` sums each step key over the runs (the release job runs once per mode).
    """
    steps: dict[str, float] = {}
    for job in per_job(runs).values():
        for key, seconds in job["steps"].items():
            steps[key] = steps.get(key, 0.0) + seconds
    events: dict[str, int] = {}
    for run in runs:
        for kind, count in run["events"].items():
            events[kind] = events.get(kind, 0) + count
    in_steps = sum(_covered([(start, end) for _, start, end in run["steps"]]) for run in runs)
    in_runs = sum(run["end"] - run["start"] for run in runs)
    return {
        "interpreter_start_s": stamps["module_started"] - stamps["spawned"],
        "imports_s": stamps["imported"] - stamps["module_started"],
        "before_release_s": stamps["release_started"] - stamps["imported"],
        "steps_s": in_steps,
        "dagster_in_runs_outside_steps_s": in_runs - in_steps,
        "release_outside_runs_s": stamps["release_ended"] - stamps["release_started"] - in_runs,
        "after_release_s": stamps["exited"] - stamps["release_ended"],
        "end_to_end_s": stamps["exited"] - stamps["spawned"],
        "runs": len(runs),
        "events": dict(sorted(events.items(), key=lambda kv: -kv[1])),
        "steps": dict(sorted(steps.items(), key=lambda kv: -kv[1])),
    }


PHASES = (
    ("interpreter_start_s", "interpreter start (spawn to the child's first line)"),
    ("imports_s", "imports (dagster, opal_dp)"),
    ("before_release_s", "ephemeral instance"),
    ("release_outside_runs_s", "run_release outside runs (definitions, partitions, run set-up)"),
    ("dagster_in_runs_outside_steps_s", "Dagster inside runs, outside steps"),
    ("steps_s", "steps (sum of the rows below)"),
    ("after_release_s", "after run_release (ledger summary, published listing, exit)"),
)


def markdown(profile: dict, floor_s: float) -> list[str]:
    """The profile of one repeat as a Markdown table, each phase and step beside the floor."""
    total = profile["end_to_end_s"]
    lines = ["| phase | seconds | share of end to end | vs floor |", "|---|---|---|---|"]

    def row(label: str, seconds: float) -> str:
        return f"| {label} | {seconds:.2f} | {seconds / total:.1%} | {seconds / floor_s:.1f}× |"

    for key, label in PHASES:
        lines.append(row(label, profile[key]))
        if key == "steps_s":
            lines += [row(f"&nbsp;&nbsp;step `{step}`", seconds) for step, seconds in profile["steps"].items()]
    lines += [row(f"**end to end** ({profile['runs']} runs)", total), row("floor (same files, same run)", floor_s)]
    events = profile["events"]
    lines += ["", f"Dagster events: {sum(events.values()):,} (" + ", ".join(f"{k} {n:,}" for k, n in events.items())
              + ")."]
    return lines
