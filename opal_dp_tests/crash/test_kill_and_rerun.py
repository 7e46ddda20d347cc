"""Crash safety: SIGKILL a release or a publish part-way (in a subprocess), then rerun.

The ledger is never under-charged (every stored draw is a ledger draw, pending or complete; after the rerun
all are complete), never charged twice for an idempotent rerun (one draw per (partition, marginal)), never
holds two draws of one part under one charge, and ``published/latest`` is always one complete, valid release.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from opal_dp import settings
from opal_dp.cli import run_release
from opal_dp.core import PrivacyLedger
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.network import MODES
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.published_folder import LATEST, LATEST_JSON, latest_release, validate_published
from opal_dp_tests.conftest import other_days
from opal_dp_tests.fuzz.raw import tiny_day, write_day

DAY = "2016-07-25"
EPSILON = {m.name: m.default_epsilon for m in MARGINALS}
PARTITIONS = {f"{DAY}|{mode}" for mode in MODES}

# One process imports the pipeline once, then forks a child per crash (it starts no thread before forking): the child
# sets the data directory, runs the whole pipeline and SIGKILLs itself at the n-th call of the patched function.
# "before": the call never happens; "after": it completes (a commit, a rename) and the process dies right after.
# The parent reads one crash a line on stdin and answers the child's exit status.
CRASHER = textwrap.dedent("""
    import itertools, os, signal, sys, traceback
    import dagster as dg
    import opal_dp.release.charged as charged
    import opal_dp.release.publish as publish
    from opal_dp.cli import run_release
    from opal_dp.core import PrivacyLedger

    def crash(data_dir, owner_name, attr, when, n):
        os.environ["OPAL_DP_DATA_DIR"] = data_dir
        owner = {"charged": charged, "publish": publish, "PrivacyLedger": PrivacyLedger, "os": os}[owner_name]
        real = getattr(owner, attr)
        calls = itertools.count(1)  # each call takes its own number: draws are stored from several threads at once

        def killer(*args, **kwargs):
            if owner_name == "os" and attr == "replace" and os.path.basename(str(args[1])) != publish.INDEX_JSON:
                return real(*args, **kwargs)
            call = next(calls)
            if call == n and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = real(*args, **kwargs)
            if call == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(owner, attr, killer)
        with dg.DagsterInstance.ephemeral() as instance:
            run_release(instance, budget={"privacy_unit": "trip"}, without=[f"2016-07-{d}" for d in range(26, 32)])

    for line in sys.stdin:
        data_dir, owner_name, attr, when, n, log = line.split()
        pid = os.fork()
        if pid == 0:
            with open(log, "wb") as err:
                os.dup2(err.fileno(), 1)
                os.dup2(err.fileno(), 2)
            try:
                crash(data_dir, owner_name, attr, when, int(n))
            except BaseException:
                traceback.print_exc()
            os._exit(3)  # the kill point was never reached
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
""")


@pytest.fixture(scope="module")
def crasher():
    """The forking process of ``CRASHER``: a crash costs its release, not an interpreter start and the imports."""
    proc = subprocess.Popen([sys.executable, "-c", CRASHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != settings.DATA_DIR_ENV})
    yield proc
    proc.stdin.close()
    proc.wait(timeout=60)


def crash(crasher: subprocess.Popen, data_dir: Path, owner: str, attr: str, when: str, n: int) -> None:
    log = data_dir.parent / f"{data_dir.name}-crash-{owner}-{attr}-{n}.log"
    crasher.stdin.write(f"{data_dir} {owner} {attr} {when} {n} {log}\n")
    crasher.stdin.flush()
    status = int(crasher.stdout.readline())
    assert status == -9, f"expected SIGKILL, got {status}:\n{log.read_text(errors='replace')[-3000:]}"


def rerun() -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        run_release(instance, budget={"privacy_unit": "trip"}, without=other_days([DAY]))


def ledger() -> PrivacyLedger:
    return PrivacyBudget(privacy_unit="trip").ledger(default_storage())


def assert_never_under_charged() -> None:
    """Every stored draw is a ledger draw (pending or complete) at its recorded place, and the scope's spend
    covers every charge; no charge holds two draws of one part."""
    draws = ledger().draws()
    recorded = {d.release_ref for d in draws}
    root = default_storage().private_dir
    for path in (root / "releases").rglob("*.parquet"):
        assert str(path.relative_to(root)) in recorded, f"{path} is a draw no ledger charge stands for"
    assert len({(d.charge_id, d.part) for d in draws}) == len(draws)
    charges = {c.id: c for c in ledger().charges()}
    for part in {d.part for d in draws}:
        spent = math.fsum(EPSILON[charges[d.charge_id].marginal] for d in draws if d.part == part
                          and charges[d.charge_id].unit == "trip")  # OD trees: card_day scopes of their own
        unit = "trip" if "|" in part else "card_day"
        assert ledger().spend(unit, part).epsilon >= spent - 1e-9


def assert_charged_exactly_once() -> None:
    draws = ledger().draws()
    assert all(d.status == "complete" for d in draws)
    charges = {c.id: c for c in ledger().charges()}
    keys = [(d.part, charges[d.charge_id].marginal) for d in draws]
    days = sorted({p.split("|")[0] for p in PARTITIONS})
    assert sorted(keys) == sorted([(p, m.name) for p in PARTITIONS for m in MARGINALS] + [(d, "od") for d in days])
    for draw in draws:
        assert (default_storage().private_dir / draw.release_ref).is_file()
    for partition in PARTITIONS:
        assert ledger().spend("trip", partition).epsilon == pytest.approx(8.0)


def assert_latest_is_complete() -> str:
    """The publication ``latest.json`` names is whole; its release id."""
    latest = latest_release(default_storage().published_dir)
    validate_published(latest)  # exactly its files, each well-formed
    return json.loads((default_storage().published_dir / LATEST_JSON).read_text())["release_id"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(settings.DATA_DIR_ENV, str(tmp_path))
    write_day(default_storage().raw_dir, DAY, tiny_day(DAY, trips=1_500))
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    "owner, attr, when, n",
    [
        ("PrivacyLedger", "begin_many", "after", 1),  # everything charged, nothing drawn yet
        ("charged", "write_parquet_exclusive", "after", 3),  # three draws stored, none completed
        ("PrivacyLedger", "complete_many", "after", 1),  # all completed, the run's outputs never written
    ],
)
def test_killed_release_is_never_under_or_double_charged(crasher, data_dir, owner, attr, when, n):
    crash(crasher, data_dir, owner, attr, when, n)
    assert ledger().draws(), "the kill came before any charge"
    assert_never_under_charged()
    assert not (default_storage().published_dir / LATEST).exists()
    rerun()
    assert_never_under_charged()
    assert_charged_exactly_once()
    assert_latest_is_complete()


@pytest.mark.slow(70)
def test_killed_publish_is_completed_by_the_rerun_and_reruns_charge_nothing(crasher, data_dir):
    """Kill the publish at each of its steps: nothing is pointed at before its commit, the rerun completes it, and a
    rerun with nothing new rewrites nothing."""
    for owner, attr, when, n in [
        ("publish", "write_durably", "after", 2),  # a date's staging half written
        ("publish", "_place_date", "after", 1),  # the date in place; no combined file, statement or index yet
        ("publish", "_replace", "after", 2),  # statement and PRIVACY.md written, page and index not
        ("os", "replace", "after", 1),  # index.json committed, latest.json not yet written
    ]:
        crash(crasher, data_dir, owner, attr, when, n)
        assert not (default_storage().published_dir / LATEST_JSON).exists()
    rerun()
    release = assert_latest_is_complete()
    files = {p: p.stat().st_mtime_ns for p in default_storage().published_dir.rglob("*")}
    rerun()
    assert assert_latest_is_complete() == release
    assert {p: p.stat().st_mtime_ns for p in default_storage().published_dir.rglob("*")} == files
    assert_never_under_charged()
    assert_charged_exactly_once()  # reruns of the same input: one charge per (partition, marginal)
