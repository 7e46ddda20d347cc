"""Privacy ledger: cap, reuse/resume/charge, concurrency, crash safety, invariants."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opal_dp.core.ledger import (
    SCHEMA_VERSION,
    BudgetExceeded,
    Decision,
    LedgerError,
    PrivacyLedger,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PART = "2016-07-25|bus"
FP = "a3f5c0ffee" * 4
MARGINALS = {  # name -> epsilon; delta = 1/8e6 each: six fit the default cap exactly once
    "tap_on_time": 1.0,
    "tap_on_loc": 1.0,
    "tap_off_time": 1.0,
    "tap_off_loc": 1.0,
    "tap_on_time_loc": 2.0,
    "tap_off_time_loc": 2.0,
}
DELTA = 1 / 8_000_000


def _begin(ledger: PrivacyLedger, marginal: str = "tap_on_time", **kw) -> Decision:
    partition = kw.pop("partition", PART)
    args = dict(
        epsilon=MARGINALS.get(marginal, 1.0),
        delta=DELTA,
        mechanism='{"name": "discrete_gaussian"}',
        fingerprint=FP,
        run_id="run-1",
    )
    args.update(kw)
    return ledger.begin(partition, marginal, **args)


def _release_all(ledger: PrivacyLedger, **kw) -> dict[str, str]:
    refs = {}
    for marginal in MARGINALS:
        d = _begin(ledger, marginal, **kw)
        ref = f"releases/{marginal}.parquet"
        refs[marginal] = ledger.complete(d.entry.id, ref, run_id="run-1")
    return refs


@pytest.fixture
def ledger(tmp_path: Path) -> PrivacyLedger:
    return PrivacyLedger(tmp_path / "private" / "ledger.sqlite")


# -- storage -----------------------------------------------------------------------------


def test_creates_versioned_wal_database(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ledger.sqlite"
    PrivacyLedger(path)
    PrivacyLedger(path)  # reopening is fine
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_refuses_unknown_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(LedgerError, match="schema version 99"):
        PrivacyLedger(path)


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"epsilon": 0.0}, "epsilon must be > 0"),
        ({"epsilon": -1.0}, "epsilon must be > 0"),
        ({"epsilon": math.inf}, "epsilon must be finite"),
        ({"epsilon": math.nan}, "epsilon must be finite"),
        ({"epsilon": "1"}, "epsilon must be a number"),
        ({"epsilon": True}, "epsilon must be a number"),
        ({"delta": 0.0}, "0 < delta < 1"),
        ({"delta": 1.0}, "0 < delta < 1"),
        ({"mechanism": ""}, "mechanism must be a non-empty string"),
        ({"fingerprint": " "}, "fingerprint must be a non-empty string"),
        ({"run_id": None}, "run_id must be a non-empty string"),
        ({"partition": ""}, "partition must be a non-empty string"),
        ({"fresh": 1}, "fresh must be a bool"),
    ],
)
def test_begin_validates_inputs(ledger: PrivacyLedger, override: dict, match: str) -> None:
    with pytest.raises(LedgerError, match=match):
        _begin(ledger, **override)
    assert ledger.entries() == []


def test_begin_validates_marginal(ledger: PrivacyLedger) -> None:
    with pytest.raises(LedgerError, match="marginal must be a non-empty string"):
        _begin(ledger, "")


@pytest.mark.parametrize(
    ("caps", "match"),
    [((0.0, 1e-6), "cap_epsilon must be > 0"), ((8.0, 1.0), "cap_delta must satisfy")],
)
def test_validates_caps(tmp_path: Path, caps: tuple[float, float], match: str) -> None:
    with pytest.raises(LedgerError, match=match):
        PrivacyLedger(tmp_path / "l.sqlite", *caps)


# -- cap ---------------------------------------------------------------------------------


def test_six_marginals_fit_default_cap_exactly_once(ledger: PrivacyLedger) -> None:
    eps, delta = sum(MARGINALS.values()), sum(DELTA for _ in MARGINALS)
    assert eps <= ledger.cap_epsilon * (1 + 1e-9) and delta <= ledger.cap_delta * (1 + 1e-9)
    _release_all(ledger)
    assert ledger.spent(PART) == pytest.approx((8.0, 6 / 8_000_000), rel=1e-12)
    assert ledger.remaining(PART) == pytest.approx((0.0, 0.0), abs=1e-15)

    for kw in ({"fingerprint": "b" * 40}, {"fresh": True}):  # a seventh release, either way
        with pytest.raises(BudgetExceeded) as info:
            _begin(ledger, "tap_on_time", run_id="run-2", **kw)
        assert len(ledger.entries()) == 6
    message = str(info.value)
    for needle in (
        repr(PART),
        "already spent ε=8.0",
        "tap_off_time_loc: ε=2.0",
        "run run-1",
        f"input fingerprint {FP[:12]}",
        "this release needs ε=1.0, δ=1.25e-07",
        "cap ε=8.0, δ=7.5e-07",
        "Publish the existing release instead",
        "privacy_budget.cap_epsilon / cap_delta",
        "each fresh draw is charged",
    ):
        assert needle in message
    assert info.value.partition == PART
    assert info.value.requested == (1.0, DELTA)


def test_budget_is_refused_before_any_noise_is_drawn(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.sqlite", cap_epsilon=1.5)
    draws: list[str] = []

    def release(marginal: str, fingerprint: str) -> None:
        decision = _begin(ledger, marginal, fingerprint=fingerprint)
        draws.append(marginal)  # stands for drawing noise: only after begin returned
        ledger.complete(decision.entry.id, f"ref/{marginal}", run_id="run-1")

    release("tap_on_time", FP)
    with pytest.raises(BudgetExceeded):
        release("tap_on_loc", FP)
    assert draws == ["tap_on_time"]
    assert [e.marginal for e in ledger.entries()] == ["tap_on_time"]
    assert ledger.spent(PART) == (1.0, DELTA)


def test_delta_cap_is_enforced_too(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.sqlite", cap_epsilon=100.0, cap_delta=2e-7)
    _begin(ledger, delta=1e-7)
    _begin(ledger, "tap_on_loc", delta=1e-7)
    with pytest.raises(BudgetExceeded, match="δ="):
        _begin(ledger, "tap_off_time", delta=1e-9)


def test_partitions_have_separate_budgets(ledger: PrivacyLedger) -> None:
    _release_all(ledger)
    other = "2016-07-25|train"
    _release_all(ledger, partition=other)
    assert ledger.spent(other) == ledger.spent(PART)
    assert ledger.spent("2016-07-26|bus") == (0.0, 0.0)
    assert ledger.remaining("2016-07-26|bus") == (8.0, 6 / 8_000_000)


# -- reuse / resume / charge -------------------------------------------------------------


def test_rerun_reuses_stored_release_without_charge(ledger: PrivacyLedger) -> None:
    refs = _release_all(ledger)
    spent = ledger.spent(PART)
    for marginal in MARGINALS:
        d = _begin(ledger, marginal, run_id="run-2")
        assert d.kind == "reuse"
        assert d.entry.release_ref == refs[marginal]
        assert d.entry.run_id == "run-1"
    assert ledger.spent(PART) == spent
    assert len(ledger.entries()) == 6


def test_pending_entry_is_resumed_not_charged_again(ledger: PrivacyLedger) -> None:
    first = _begin(ledger)
    assert first.kind == "charge" and first.entry.status == "pending"
    assert first.entry.release_ref is None and first.entry.completed_at is None
    spent = ledger.spent(PART)
    assert spent == (1.0, DELTA)  # pending entries count

    again = _begin(ledger, run_id="run-2")  # e.g. the first run was killed mid-draw
    assert again == Decision("resume", first.entry)
    assert ledger.spent(PART) == spent
    assert ledger.complete(again.entry.id, "ref/2", run_id="run-2") == "ref/2"
    assert _begin(ledger, run_id="run-3").kind == "reuse"
    assert ledger.spent(PART) == spent


def test_fresh_draw_is_charged_and_supersedes(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.sqlite", cap_epsilon=2.0)
    d1 = _begin(ledger)
    ledger.complete(d1.entry.id, "ref/1", run_id="run-1")
    d2 = _begin(ledger, run_id="run-2", fresh=True)
    assert d2.kind == "charge" and d2.entry.id != d1.entry.id
    assert ledger.spent(PART) == (2.0, 2 * DELTA)
    # while the fresh draw is pending, a plain rerun still reuses the stored release
    assert _begin(ledger, run_id="run-3").entry.release_ref == "ref/1"
    assert ledger.complete(d2.entry.id, "ref/2", run_id="run-2") == "ref/2"
    assert _begin(ledger, run_id="run-3").entry.release_ref == "ref/2"
    with pytest.raises(BudgetExceeded):
        _begin(ledger, run_id="run-4", fresh=True)


def test_changed_fingerprint_is_charged(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.sqlite", cap_epsilon=2.0)
    d1 = _begin(ledger)
    ledger.complete(d1.entry.id, "ref/1", run_id="run-1")
    d2 = _begin(ledger, fingerprint="corrected-raw-data")
    assert d2.kind == "charge"
    assert ledger.spent(PART) == (2.0, 2 * DELTA)
    with pytest.raises(BudgetExceeded, match="input fingerprint corrected-ra"):
        _begin(ledger, fingerprint="corrected-again")


@pytest.mark.parametrize(
    "override",
    [{"epsilon": 0.5}, {"delta": 2e-7}, {"mechanism": '{"name": "laplace"}'}],
)
def test_key_includes_budget_and_mechanism(ledger: PrivacyLedger, override: dict) -> None:
    d1 = _begin(ledger)
    ledger.complete(d1.entry.id, "ref/1", run_id="run-1")
    assert _begin(ledger, **override).kind == "charge"


# -- complete ----------------------------------------------------------------------------


def test_complete_records_release(ledger: PrivacyLedger) -> None:
    d = _begin(ledger)
    assert ledger.complete(d.entry.id, "ref/1", run_id="run-1") == "ref/1"
    (entry,) = ledger.entries(PART)
    assert entry.status == "complete"
    assert entry.release_ref == "ref/1"
    assert entry.completed_by == "run-1"
    assert entry.completed_at >= entry.created_at
    assert entry.created_at.endswith("+00:00")


def test_complete_errors(ledger: PrivacyLedger) -> None:
    with pytest.raises(LedgerError, match="no ledger entry with id 42"):
        ledger.complete(42, "ref", run_id="run-1")
    d = _begin(ledger)
    for bad, match in (({"release_ref": ""}, "release_ref"), ({"run_id": ""}, "run_id")):
        with pytest.raises(LedgerError, match=match):
            ledger.complete(d.entry.id, **{"release_ref": "ref", "run_id": "run-1", **bad})
    ledger.complete(d.entry.id, "ref/1", run_id="run-1")
    with pytest.raises(LedgerError, match="already completed by run run-1"):
        ledger.complete(d.entry.id, "ref/1", run_id="run-1")
    assert ledger.entries()[0].release_ref == "ref/1"


def test_first_completion_wins_for_concurrent_runs(ledger: PrivacyLedger) -> None:
    a = _begin(ledger, run_id="run-a")
    b = _begin(ledger, run_id="run-b")
    assert (a.kind, b.kind) == ("charge", "resume")
    assert ledger.complete(a.entry.id, "ref/a", run_id="run-a") == "ref/a"
    assert ledger.complete(b.entry.id, "ref/b", run_id="run-b") == "ref/a"  # discard b's draw
    assert [e.release_ref for e in ledger.entries()] == ["ref/a"]
    assert ledger.spent(PART) == (1.0, DELTA)


# -- reads -------------------------------------------------------------------------------


def test_entries_and_summary(ledger: PrivacyLedger) -> None:
    assert ledger.summary() == []
    _release_all(ledger)
    _begin(ledger, partition="2016-07-25|train")
    assert [e.marginal for e in ledger.entries(PART)] == list(MARGINALS)
    assert len(ledger.entries()) == 7
    bus, train = ledger.summary()
    assert bus == {
        "partition": PART,
        "epsilon_spent": 8.0,
        "delta_spent": ledger.spent(PART)[1],
        "epsilon_remaining": 0.0,
        "delta_remaining": ledger.remaining(PART)[1],
        "releases": 6,
        "pending": 0,
        "last_release_at": ledger.entries(PART)[-1].created_at,
    }
    assert train["partition"] == "2016-07-25|train"
    assert (train["epsilon_spent"], train["epsilon_remaining"]) == (1.0, 7.0)
    assert (train["releases"], train["pending"]) == (1, 1)


def test_entries_are_frozen(ledger: PrivacyLedger) -> None:
    entry = _begin(ledger).entry
    with pytest.raises(AttributeError):
        entry.epsilon = 0.0  # type: ignore[misc]


# -- concurrency (separate processes) ----------------------------------------------------


def _race_worker(path: str, run_id: str, barrier, results) -> None:
    ledger = PrivacyLedger(Path(path))
    decision = _begin(ledger, run_id=run_id)
    barrier.wait()  # everyone has drawn; now race to complete
    ref = ledger.complete(decision.entry.id, f"ref/{run_id}", run_id=run_id)
    results.put((decision.kind, decision.entry.id, ref))


def _charge_worker(path: str, run_id: str, barrier, results) -> None:
    ledger = PrivacyLedger(Path(path), cap_epsilon=3.0)
    barrier.wait()
    try:
        results.put(_begin(ledger, fingerprint=run_id, run_id=run_id).kind)
    except BudgetExceeded:
        results.put("refused")


def _run_processes(target, path: Path, n: int) -> list:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(str(path), f"run-{i}", barrier, results))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_processes_racing_to_complete_agree_on_one_release(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    PrivacyLedger(path)
    out = _run_processes(_race_worker, path, 4)
    kinds = sorted(kind for kind, _, _ in out)
    assert kinds == ["charge", "resume", "resume", "resume"]
    assert len({entry_id for _, entry_id, _ in out}) == 1
    (winner,) = {ref for _, _, ref in out}
    ledger = PrivacyLedger(path)
    (entry,) = ledger.entries()
    assert entry.release_ref == winner == f"ref/{entry.completed_by}"
    assert ledger.spent(PART) == (1.0, DELTA)


def test_processes_racing_to_charge_never_exceed_cap(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    out = _run_processes(_charge_worker, path, 5)
    assert sorted(out) == ["charge"] * 3 + ["refused"] * 2
    assert PrivacyLedger(path).spent(PART) == (3.0, 3 * DELTA)


# -- crash safety ------------------------------------------------------------------------

_CRASH_SCRIPT = """
import os, signal, sqlite3, sys
from pathlib import Path
from opal_dp.core.ledger import PrivacyLedger

mode, path = sys.argv[1], Path(sys.argv[2])
ledger = PrivacyLedger(path)
armed = False
real_connect = sqlite3.connect

def connect(*args, **kwargs):
    conn = real_connect(*args, **kwargs)
    def trace(sql):
        if armed and sql == "COMMIT":  # statement about to run: the transaction is open
            os.kill(os.getpid(), signal.SIGKILL)
    conn.set_trace_callback(trace)
    return conn

sqlite3.connect = connect
kw = dict(epsilon=2.0, delta=1e-7, mechanism="gauss", fingerprint="fp", run_id="crash")
if mode == "begin-mid-transaction":
    armed = True
    ledger.begin("p", "m", **kw)
elif mode == "begin-after-commit":
    ledger.begin("p", "m", **kw)
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == "complete-mid-transaction":
    entry = ledger.begin("p", "m", **kw).entry
    armed = True
    ledger.complete(entry.id, "ref/crash", run_id="crash")
sys.exit(3)  # not reached unless the kill point was missed
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("begin-mid-transaction", []),
        ("begin-after-commit", ["pending"]),
        ("complete-mid-transaction", ["pending"]),
    ],
)
def test_killed_process_leaves_no_half_written_entry(
    tmp_path: Path, mode: str, expected: list[str]
) -> None:
    path = tmp_path / "l.sqlite"
    ledger = PrivacyLedger(path)
    d = ledger.begin(
        "p", "other", epsilon=1.0, delta=1e-7, mechanism="g", fingerprint="x", run_id="r"
    )
    ledger.complete(d.entry.id, "ref/other", run_id="r")

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_SCRIPT, mode, str(path)], env=env)
    assert proc.wait(timeout=60) == -signal.SIGKILL

    ledger = PrivacyLedger(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    crashed = [e for e in ledger.entries() if e.run_id == "crash"]
    assert [e.status for e in crashed] == expected
    assert all(e.release_ref is None and e.completed_at is None for e in crashed)
    assert ledger.spent("p") == (1.0 + 2.0 * len(crashed), 1e-7 + 1e-7 * len(crashed))
    redo = ledger.begin(
        "p", "m", epsilon=2.0, delta=1e-7, mechanism="gauss", fingerprint="fp", run_id="retry"
    )
    assert redo.kind == ("resume" if crashed else "charge")
    assert ledger.spent("p") == (3.0, 2e-7)  # charged exactly once either way


# -- invariants (property test) ----------------------------------------------------------

_KEYS = [  # (partition, marginal, fingerprint, epsilon, delta, mechanism); few, so keys repeat
    ("p1", "m1", "f1", 0.7, 1 / 8_000_000, "lap"),
    ("p1", "m1", "f2", 0.7, 1 / 8_000_000, "lap"),
    ("p1", "m1", "f1", 2.5, 1 / 8_000_000, "lap"),
    ("p1", "m2", "f1", 0.1, 3e-7, "gauss"),
    ("p1", "m2", "f1", 0.1, 3e-7, "lap"),
    ("p2", "m1", "f1", 2.5, 3e-7, "gauss"),
]
_begin_op = st.tuples(
    st.just("begin"), st.sampled_from(_KEYS), st.sampled_from([False, False, False, True])
)
# complete the entry this many places back from the newest (-1: an unknown id)
_complete_op = st.tuples(st.just("complete"), st.integers(-1, 2))
CAP = (4.0, 6 / 8_000_000)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_begin_op, _complete_op, _complete_op), max_size=30))
def test_ledger_matches_model_and_never_exceeds_cap(ops: list[tuple]) -> None:
    """An in-memory model predicts every outcome; spend stays under the cap and equals the
    sum of the entries; reuse, resume, refusals and completions never change spend."""
    model: list[dict] = []  # id = index + 1; entries are never deleted

    def spent(part: str) -> tuple[float, float]:
        mine = [m for m in model if m["key"][0] == part]
        return math.fsum(m["key"][3] for m in mine), math.fsum(m["key"][4] for m in mine)

    with tempfile.TemporaryDirectory() as tmp:
        ledger = PrivacyLedger(Path(tmp) / "l.sqlite", *CAP)
        for n, op in enumerate(ops):
            run = f"r{n % 2 + 1}"
            if op[0] == "begin":
                _, key, fresh = op
                part, marginal, fp, eps, delta, mech = key
                same = [m for m in model if m["key"] == key]
                done = [m for m in same if m["status"] == "complete"]
                pending = [m for m in same if m["status"] == "pending"]
                was = spent(part)
                fits = (was[0] + eps <= CAP[0] * (1 + 1e-9)
                        and was[1] + delta <= CAP[1] * (1 + 1e-9))
                if not fresh and done:
                    expected = ("reuse", max(m["id"] for m in done))
                elif not fresh and pending:
                    expected = ("resume", min(m["id"] for m in pending))
                elif fits:
                    expected = ("charge", len(model) + 1)
                    model.append({"id": len(model) + 1, "key": key, "run": run,
                                  "status": "pending", "ref": None, "by": None})
                else:
                    expected = ("refused", None)
                try:
                    d = ledger.begin(part, marginal, epsilon=eps, delta=delta, mechanism=mech,
                                     fingerprint=fp, run_id=run, fresh=fresh)
                    assert (d.kind, d.entry.id) == expected
                except BudgetExceeded:
                    assert expected == ("refused", None)
            else:
                entry_id = max(len(model) - op[1], 1)  # 1 is unknown while the model is empty
                target = model[entry_id - 1] if 1 <= entry_id <= len(model) else None
                try:
                    ref = ledger.complete(entry_id, f"ref/{entry_id}/{run}", run_id=run)
                except LedgerError:
                    assert target is None or target["by"] == run
                else:
                    assert target is not None and target["by"] != run
                    if target["status"] == "pending":
                        target.update(status="complete", ref=f"ref/{entry_id}/{run}", by=run)
                    assert ref == target["ref"]  # the first completion stands
            entries = ledger.entries()
            assert [(e.id, (e.partition, e.marginal, e.fingerprint, e.epsilon, e.delta,
                            e.mechanism), e.run_id, e.status, e.release_ref, e.completed_by)
                    for e in entries] == [
                (m["id"], m["key"], m["run"], m["status"], m["ref"], m["by"]) for m in model
            ]
            for part in ("p1", "p2"):
                eps, delta = ledger.spent(part)
                assert (eps, delta) == spent(part)
                assert eps <= CAP[0] * (1 + 1e-9) and delta <= CAP[1] * (1 + 1e-9)
