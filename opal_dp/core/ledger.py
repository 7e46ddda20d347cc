"""Persistent privacy ledger: the (ε, δ) spent per partition, across runs and processes.

DP libraries forget what they spent when the process exits; re-running a release draws
fresh noise, and publishing both draws spends the budget twice. The ledger records every
charge in SQLite (WAL, ``synchronous=FULL``) and every mutation runs in one
``BEGIN IMMEDIATE`` transaction, so concurrent processes serialise and a killed process
leaves either the whole entry or none of it.

Protocol, per (partition, marginal) release::

    decision = ledger.begin(partition, marginal, epsilon=..., delta=..., mechanism=...,
                            fingerprint=..., run_id=...)      # BEFORE drawing any noise
    if decision.kind == "reuse":
        ref = decision.entry.release_ref                      # load it; no new noise
    else:                                                     # "charge" or "resume"
        ref = store(draw_noise())
        ref = ledger.complete(decision.entry.id, ref, run_id=...)  # may return another run's ref

Spend composes additively (basic composition) within a partition; pending entries count.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

SCHEMA_VERSION = 1
REL_TOL = 1e-9
"""Relative slack on the cap, only to absorb float rounding in sums such as 6 × 1/8e6."""

_SCHEMA = (
    """
CREATE TABLE entries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    partition    TEXT NOT NULL CHECK (partition <> ''),
    marginal     TEXT NOT NULL CHECK (marginal <> ''),
    epsilon      REAL NOT NULL CHECK (epsilon > 0),
    delta        REAL NOT NULL CHECK (delta > 0 AND delta < 1),
    mechanism    TEXT NOT NULL CHECK (mechanism <> ''),
    run_id       TEXT NOT NULL CHECK (run_id <> ''),
    fingerprint  TEXT NOT NULL CHECK (fingerprint <> ''),
    created_at   TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'complete')),
    release_ref  TEXT,
    completed_at TEXT,
    completed_by TEXT,
    CHECK ((status = 'pending' AND release_ref IS NULL AND completed_at IS NULL
            AND completed_by IS NULL)
        OR (status = 'complete' AND release_ref IS NOT NULL AND completed_at IS NOT NULL
            AND completed_by IS NOT NULL))
)""",
    "CREATE INDEX entries_key ON entries (partition, marginal, fingerprint)",
)

_KEY_WHERE = (
    "partition = ? AND marginal = ? AND fingerprint = ? AND epsilon = ? AND delta = ?"
    " AND mechanism = ?"
)


class LedgerError(Exception):
    """Misuse of the ledger or a ledger file this code cannot trust."""


class BudgetExceeded(LedgerError):
    """A new charge would take the partition over its (ε, δ) cap; nothing was recorded."""

    def __init__(
        self,
        message: str,
        *,
        partition: str,
        spent: tuple[float, float],
        requested: tuple[float, float],
        cap: tuple[float, float],
    ) -> None:
        super().__init__(message)
        self.partition = partition
        self.spent = spent
        self.requested = requested
        self.cap = cap


@dataclass(frozen=True)
class Entry:
    """One charge; ``release_ref``, ``completed_at``, ``completed_by`` are None while pending."""

    id: int
    partition: str
    marginal: str
    epsilon: float
    delta: float
    mechanism: str
    run_id: str
    fingerprint: str
    created_at: str
    status: Literal["pending", "complete"]
    release_ref: str | None
    completed_at: str | None
    completed_by: str | None


@dataclass(frozen=True)
class Request:
    """One release asking to be charged: its key in the ledger."""

    partition: str
    marginal: str
    epsilon: float
    delta: float
    mechanism: str
    fingerprint: str


@dataclass(frozen=True)
class Decision:
    """What ``begin`` decided.

    - ``reuse``: a stored release exists; load ``entry.release_ref``. No noise, no charge.
    - ``resume``: an earlier draw was charged but never stored; redraw under that charge.
    - ``charge``: a new entry was charged; draw.
    """

    kind: Literal["reuse", "resume", "charge"]
    entry: Entry


_COLUMNS = ", ".join(Entry.__dataclass_fields__)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _name(label: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LedgerError(f"{label} must be a non-empty string, got {value!r}")
    return value


def _number(label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LedgerError(f"{label} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise LedgerError(f"{label} must be finite, got {value!r}")
    return float(value)


def _epsilon(label: str, value: object) -> float:
    eps = _number(label, value)
    if eps <= 0:
        raise LedgerError(f"{label} must be > 0, got {eps!r}")
    return eps


def _delta(label: str, value: object) -> float:
    delta = _number(label, value)
    if not 0 < delta < 1:
        raise LedgerError(f"{label} must satisfy 0 < delta < 1, got {delta!r}")
    return delta


class PrivacyLedger:
    """Per-partition (ε, δ) ledger stored in the SQLite file at ``path``.

    The cap is policy, not state: each process passes its own, and every new charge is
    checked against the cap of the ledger object making it.
    """

    def __init__(
        self, path: Path, cap_epsilon: float = 8.0, cap_delta: float = 6 / 8_000_000
    ) -> None:
        self.path = Path(path)
        self.cap_epsilon = _epsilon("cap_epsilon", cap_epsilon)
        self.cap_delta = _delta("cap_delta", cap_delta)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                raise LedgerError(f"cannot put the ledger {self.path} in WAL mode")
            with self._transaction(conn):
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                elif version != SCHEMA_VERSION:
                    raise LedgerError(
                        f"ledger {self.path} has schema version {version}; this code"
                        f" reads version {SCHEMA_VERSION} only"
                    )

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection per operation: safe across threads and forked processes."""
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            yield conn
        finally:
            conn.close()

    @staticmethod
    @contextmanager
    def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _select(conn: sqlite3.Connection, where: str, params: tuple) -> list[Entry]:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE {where}", params)
        return [Entry(*row) for row in rows]

    @staticmethod
    def _spent(conn: sqlite3.Connection, partition: str) -> tuple[float, float]:
        rows = conn.execute(
            "SELECT epsilon, delta FROM entries WHERE partition = ?", (partition,)
        ).fetchall()
        return math.fsum(r[0] for r in rows), math.fsum(r[1] for r in rows)

    # -- mutations ---------------------------------------------------------------------

    def begin(
        self,
        partition: str,
        marginal: str,
        *,
        epsilon: float,
        delta: float,
        mechanism: str,
        fingerprint: str,
        run_id: str,
        fresh: bool = False,
    ) -> Decision:
        """``begin_many`` for one release."""
        request = Request(partition, marginal, epsilon, delta, mechanism, fingerprint)
        return self.begin_many([request], run_id=run_id, fresh=fresh)[0]

    def begin_many(self, requests: Sequence[Request], *, run_id: str, fresh: bool = False) -> list[Decision]:
        """Decide, before any noise is drawn, whether each release reuses, resumes or charges.

        The key is (partition, marginal, fingerprint, epsilon, delta, mechanism). Unless
        ``fresh``: a complete entry for the key is reused (the most recently charged one, so
        a completed fresh draw supersedes older ones), else a pending entry is resumed (the
        oldest). Otherwise a pending entry is inserted (the charge) if the partition's
        spent + (epsilon, delta) stays within the cap. All requests are decided in one
        transaction: if any would exceed its cap, ``BudgetExceeded`` is raised and nothing at
        all is recorded.
        """
        keys = [
            (
                _name("partition", r.partition),
                _name("marginal", r.marginal),
                _name("fingerprint", r.fingerprint),
                _epsilon("epsilon", r.epsilon),
                _delta("delta", r.delta),
                _name("mechanism", r.mechanism),
            )
            for r in requests
        ]
        _name("run_id", run_id)
        if not isinstance(fresh, bool):
            raise LedgerError(f"fresh must be a bool, got {fresh!r}")
        with self._connect() as conn, self._transaction(conn):
            return [self._decide(conn, key, run_id, fresh) for key in keys]

    def _decide(self, conn: sqlite3.Connection, key: tuple, run_id: str, fresh: bool) -> Decision:
        if not fresh:
            done = self._select(conn, f"{_KEY_WHERE} AND status = 'complete' ORDER BY id DESC", key)
            if done:
                return Decision("reuse", done[0])
            pending = self._select(conn, f"{_KEY_WHERE} AND status = 'pending' ORDER BY id", key)
            if pending:
                return Decision("resume", pending[0])
        self._check_cap(conn, key[0], key[3], key[4])
        cur = conn.execute(
            "INSERT INTO entries (partition, marginal, fingerprint, epsilon, delta,"
            " mechanism, run_id, created_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?,"
            " 'pending')",
            (*key, run_id, _now()),
        )
        (entry,) = self._select(conn, "id = ?", (cur.lastrowid,))
        return Decision("charge", entry)

    def _check_cap(
        self, conn: sqlite3.Connection, partition: str, epsilon: float, delta: float
    ) -> None:
        spent_eps, spent_delta = self._spent(conn, partition)
        need_eps, need_delta = spent_eps + epsilon, spent_delta + delta
        if need_eps <= self.cap_epsilon * (1 + REL_TOL) and need_delta <= self.cap_delta * (
            1 + REL_TOL
        ):
            return
        charged = "\n".join(
            f"  - {e.marginal}: ε={e.epsilon!r}, δ={e.delta!r}, run {e.run_id},"
            f" {e.created_at}, {e.status}, input fingerprint {e.fingerprint[:12]}"
            for e in self._select(conn, "partition = ? ORDER BY id", (partition,))
        )
        raise BudgetExceeded(
            f"privacy budget exceeded for partition {partition!r}: already spent"
            f" ε={spent_eps!r}, δ={spent_delta!r} by\n{charged or '  (no entries)'}\n"
            f"this release needs ε={epsilon!r}, δ={delta!r}, which would total"
            f" ε={need_eps!r}, δ={need_delta!r} against the cap ε={self.cap_epsilon!r},"
            f" δ={self.cap_delta!r}. Publish the existing release instead, or raise the"
            " partition cap (privacy_budget.cap_epsilon / cap_delta) only if you accept"
            " the extra privacy loss; each fresh draw is charged.",
            partition=partition,
            spent=(spent_eps, spent_delta),
            requested=(epsilon, delta),
            cap=(self.cap_epsilon, self.cap_delta),
        )

    def complete(self, entry_id: int, release_ref: str, *, run_id: str) -> str:
        """``complete_many`` for one entry."""
        return self.complete_many([(entry_id, release_ref)], run_id=run_id)[0]

    def complete_many(self, completions: Sequence[tuple[int, str]], *, run_id: str) -> list[str]:
        """Record the stored releases of pending entries (one transaction); return, per entry,
        the ref that stands for it.

        Two runs can hold the same pending entry (one charged it, the other resumed it)
        and both draw. The first to complete wins; a later ``complete`` from a different
        ``run_id`` changes nothing and returns the winner's ref: that caller must publish
        the returned ref and discard its own draw. Completing an unknown entry, or an entry
        this same run already completed, raises ``LedgerError`` (and records nothing).
        """
        for entry_id, release_ref in completions:
            if isinstance(entry_id, bool) or not isinstance(entry_id, int):
                raise LedgerError(f"entry_id must be an int, got {entry_id!r}")
            _name("release_ref", release_ref)
        _name("run_id", run_id)
        with self._connect() as conn, self._transaction(conn):
            return [self._complete(conn, entry_id, ref, run_id) for entry_id, ref in completions]

    def _complete(self, conn: sqlite3.Connection, entry_id: int, release_ref: str, run_id: str) -> str:
        found = self._select(conn, "id = ?", (entry_id,))
        if not found:
            raise LedgerError(f"no ledger entry with id {entry_id}")
        entry = found[0]
        if entry.status == "complete":
            if entry.completed_by == run_id:
                raise LedgerError(
                    f"ledger entry {entry_id} was already completed by run {run_id}"
                    f" with release {entry.release_ref!r}"
                )
            return entry.release_ref
        conn.execute(
            "UPDATE entries SET status = 'complete', release_ref = ?, completed_at = ?,"
            " completed_by = ? WHERE id = ? AND status = 'pending'",
            (release_ref, _now(), run_id, entry_id),
        )
        return release_ref

    # -- reads -------------------------------------------------------------------------

    def spent(self, partition: str) -> tuple[float, float]:
        """(ε, δ) charged to ``partition``, pending entries included (exactly rounded sums)."""
        with self._connect() as conn:
            return self._spent(conn, _name("partition", partition))

    def remaining(self, partition: str) -> tuple[float, float]:
        """(ε, δ) left under this ledger's cap, floored at 0."""
        return self._remaining(*self.spent(partition))

    def _remaining(self, epsilon: float, delta: float) -> tuple[float, float]:
        return max(0.0, self.cap_epsilon - epsilon), max(0.0, self.cap_delta - delta)

    def entries(self, partition: str | None = None) -> list[Entry]:
        """All entries, or those of ``partition``, in charge order."""
        with self._connect() as conn:
            if partition is None:
                return self._select(conn, "1 ORDER BY id", ())
            return self._select(
                conn, "partition = ? ORDER BY id", (_name("partition", partition),)
            )

    def summary(self) -> list[dict]:
        """Per partition (sorted): spend, remaining, entry counts, latest charge time."""
        with self._connect() as conn:
            all_entries = self._select(conn, "1 ORDER BY id", ())
        by_partition: dict[str, list[Entry]] = {}
        for entry in all_entries:
            by_partition.setdefault(entry.partition, []).append(entry)
        rows = []
        for partition in sorted(by_partition):
            group = by_partition[partition]
            eps = math.fsum(e.epsilon for e in group)
            delta = math.fsum(e.delta for e in group)
            eps_left, delta_left = self._remaining(eps, delta)
            rows.append(
                {
                    "partition": partition,
                    "epsilon_spent": eps,
                    "delta_spent": delta,
                    "epsilon_remaining": eps_left,
                    "delta_remaining": delta_left,
                    "releases": len(group),
                    "pending": sum(e.status == "pending" for e in group),
                    "last_release_at": max(e.created_at for e in group),
                }
            )
        return rows
