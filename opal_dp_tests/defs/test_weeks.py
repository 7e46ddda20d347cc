"""The release week is the unit of work, as an agency meets it at the command line: a bad day holds its own week only
(uncharged, named as waiting), a later week goes ahead, the fixed file releases the held week, a run with nothing new
launches nothing and says so in one line, and the runs are the code location's own runs, listed on the job's page
with their weeks, unit and release id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest

from opal_dp import cli
from opal_dp.cli import ensure_dagster_home
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.marginals.gate_checks import GATE_CHECKS
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.tags import RELEASE_ID_TAG, UNIT_TAG, WEEKS_TAG
from opal_dp.network import MODES
from opal_dp.release.marginals.checks import DESIGN_CHECKS
from opal_dp.release.published_folder import LATEST
from opal_dp.release.statement.runs import partition_keys
from opal_dp.settings import STRICT_PERMISSIONS_ENV
from opal_dp_tests.browser.dagster_dev import REPO_ROOT
from opal_dp_tests.fuzz.raw import tiny_day, write_day

WEEKS = [[(date(2016, 7, 25) + timedelta(days=7 * w + d)).isoformat() for d in range(7)] for w in range(3)]
BAD = WEEKS[1][2]
JOBS = ("private_stages", "release", "release_od", "rollup")
JOB_RUNS = "query JobRuns {" + "".join(f"""
  {job}: pipelineOrError(params: {{pipelineName: "{job}", repositoryName: "__repository__",
                                   repositoryLocationName: "opal_dp"}}) {{
    ... on Pipeline {{ runs {{ runId status tags {{ key value }} }} }}
  }}""" for job in JOBS) + "\n}"


def release(data: Path, home: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python -m opal_dp.cli release --data-dir DATA`` under the default unit, in a process of its own."""
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop(STRICT_PERMISSIONS_ENV, None)
    return subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--data-dir", str(data), *extra],
                          capture_output=True, text=True, env=env, timeout=900, cwd=REPO_ROOT)


def deliver(data: Path, days: list[str], seed: int = 0) -> None:
    for i, day in enumerate(days):
        write_day(data / "raw", day, tiny_day(day, trips=900, seed=seed + i))


def published_dates(data: Path) -> set[str]:
    statement = json.loads((data / "published" / LATEST / "privacy.json").read_text())
    return {f"{k['date'][:4]}-{k['date'][4:6]}-{k['date'][6:]}" for k in partition_keys(statement)}


def latest_release_id(data: Path) -> str:
    return json.loads((data / "published" / LATEST / "privacy.json").read_text())["release"]["id"]


def charged_weeks(data: Path) -> set[str]:
    return {c.scope for c in PrivacyBudget().ledger(OpalStorage(data_dir=str(data))).charges()}


def job_runs(home: Path) -> dict[str, list[dict]]:
    """The runs each job's page in the UI lists: Dagster's GraphQL over the workspace of ``workspace.yaml``."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    with dg.DagsterInstance.from_config(str(home)) as instance, WorkspaceProcessContext(
            instance, WorkspaceFileTarget([str(REPO_ROOT / "workspace.yaml")])) as workspace:
        result = execute_dagster_graphql(workspace.create_request_context(), JOB_RUNS)
    assert not result.errors, result.errors
    return {job: result.data[job]["runs"] for job in JOBS}


@pytest.mark.slow(130)
def test_a_bad_day_holds_its_own_week_and_every_other_week_goes_ahead(tmp_path, capsys):
    data, home = tmp_path / "data", ensure_dagster_home(tmp_path / "home")
    deliver(data, WEEKS[0] + WEEKS[1])
    (data / "raw" / f"trips_{BAD}.parquet").write_bytes(b"PAR1 truncated")
    first = release(data, home)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"not ingested: {BAD}: " in first.stdout
    assert f"waiting (nothing charged): week {WEEKS[1][0]}..{WEEKS[1][-1]}" in first.stdout
    assert published_dates(data) == set(WEEKS[0])
    assert charged_weeks(data) == {f"{WEEKS[0][0]}..{WEEKS[0][-1]}"}  # nothing charged to the held week
    statement = json.loads((data / "published" / LATEST / "privacy.json").read_text())
    assert set(statement["data"]["pending_dates"]) == {d.replace("-", "") for d in WEEKS[1]}

    releases = [statement["release"]["id"]]
    with dg.DagsterInstance.from_config(str(home)) as instance:  # the person account as numbers the UI plots
        published = instance.get_latest_materialization_event(dg.AssetKey("published_release")).asset_materialization
        week = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(["release", "tap_on_time"]), asset_partitions=[f"bus|{WEEKS[0][0]}"]), limit=1)
        checks = {key: instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
                  for key in (*(dg.AssetCheckKey(dg.AssetKey(["release", "tap_on_time"]), name)
                                for name in DESIGN_CHECKS["sbh"]),
                              *(dg.AssetCheckKey(dg.AssetKey("published_release"), name) for name in GATE_CHECKS))}
    for key, history in checks.items():  # each property of each partition, and the publication gate, by name
        outcome = {(r.partition, r.status.value) for r in history}
        wanted = {(None, "SUCCEEDED")} if key.asset_key == dg.AssetKey("published_release") else {
            (f"{mode}|{WEEKS[0][0]}", "SUCCEEDED") for mode in MODES}
        assert outcome == wanted, (key, outcome)
    person = statement["person"]
    assert published.metadata["person_epsilon_spent"].value == pytest.approx(person["spent"]["epsilon"])
    assert published.metadata["person_cap_epsilon"].value == 20.0
    assert 0 < published.metadata["person_share_of_cap"].value < 1
    meta = week.records[0].asset_materialization.metadata
    assert meta["scope_rho"].value > 0 and meta["charge"].value.startswith("zCDP rho=")  # never "epsilon 0"
    capsys.readouterr()
    cli.main(["ledger", "show", "--data-dir", str(data)])  # in this process: its interpreter start is not what is tested
    assert "person account: the worst 365-day window" in capsys.readouterr().out

    deliver(data, WEEKS[2], seed=50)  # a third week, the bad day still bad: it goes ahead
    third = release(data, home)
    assert third.returncode == 0, third.stderr[-3000:]
    releases.append(latest_release_id(data))
    assert published_dates(data) == set(WEEKS[0] + WEEKS[2])
    assert f"{WEEKS[1][0]}..{WEEKS[1][-1]}" not in charged_weeks(data)

    write_day(data / "raw", BAD, tiny_day(BAD, trips=900, seed=99))  # the file fixed in place
    fixed = release(data, home)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    releases.append(latest_release_id(data))
    assert published_dates(data) == {d for week in WEEKS for d in week}
    assert charged_weeks(data) == {f"{w[0]}..{w[-1]}" for w in WEEKS}

    again = release(data, home)  # nothing new: one line, no run launched
    assert again.returncode == 0 and again.stdout.count("\n") == 1, again.stdout
    assert again.stdout.startswith("nothing new to release: 21 days stand published as ")
    pages = job_runs(home)  # the CLI's runs are the UI's: on the jobs' pages, each run tagged with its release
    tags = {job: [{t["key"]: t["value"] for t in run["tags"]} for run in runs] for job, runs in pages.items()}
    for job in JOBS:  # one run of each job per release, none for the release with nothing new
        assert sorted(t[RELEASE_ID_TAG] for t in tags[job]) == sorted(releases), job
    assert all(run["status"] == "SUCCESS" for run in pages["release"])
    first = next(t for t in tags["release"] if t[RELEASE_ID_TAG] == releases[0])
    assert first[WEEKS_TAG] == WEEKS[0][0] and first[UNIT_TAG] == "card_period"


@pytest.mark.slow
def test_one_real_day_is_ingested_and_reported_and_its_week_waits_uncharged(tmp_path):
    """A data folder with one real day: its private stages are materialised and its rejected rows reported; the
    summary says the week waits for its other six days; exit 0; nothing charged, nothing published."""
    data, home = tmp_path / "data", ensure_dagster_home(tmp_path / "home")
    day = WEEKS[0][0]
    trips = tiny_day(day, trips=900)
    trips.loc[3, "tap_on_stop"] = 99_999  # a stop no public list knows: rejected, with its reason
    write_day(data / "raw", day, trips)
    done = release(data, home)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    waiting = [line for line in lines if line.startswith("waiting (nothing charged)")]
    assert waiting == [f"waiting (nothing charged): week {WEEKS[0][0]}..{WEEKS[0][-1]} is released once all its days "
                       f"are ingested; {', '.join(WEEKS[0][1:])}: not ingested"]
    assert "nothing published yet" in lines
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for asset in ("ingested_trips", "rejected_trips", "binned_trips", "bounded_trips", "trip_sequences"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {day}, asset
        rejected = instance.fetch_materializations(dg.AssetKey("rejected_trips"), limit=1).records[0]
        assert rejected.asset_materialization.metadata["dagster/row_count"].value == 1
    assert not (data / "private" / "ledger.sqlite").exists() and not (data / "published").exists()
