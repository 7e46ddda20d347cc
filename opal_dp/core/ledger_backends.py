"""Where the privacy ledger lives: SQLite (embedded, the default) or PostgreSQL (production, many hosts).

A backend owns connections, transactions, locking and the schema's dialect only; every accounting rule
is in ``core.ledger``, which writes its SQL once with ``?`` placeholders, ``RETURNING id`` and portable
expressions. Both backends run that SQL unchanged apart from the placeholder style.

- SQLite: one file, WAL, ``synchronous=FULL``; ``BEGIN IMMEDIATE`` takes the database's write lock,
  so mutations serialise across processes of one host and per-scope locks are implied.
- PostgreSQL: ``READ COMMITTED`` transactions that lock one row per scope (``SELECT ... FOR UPDATE`` on
  ``ledger_locks``) before reading what the scope spent. Workers on different hosts charging the same
  scope queue on that row, and each statement after the lock sees what the previous holder committed;
  different scopes proceed in parallel. Locks are taken in sorted order, so two batches cannot deadlock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from opal_dp.permissions import make_dirs, reserve_private

POSTGRES_SCHEMES = ("postgresql", "postgres")
_INIT_LOCK = 0x6F70616C  # "opal": the advisory lock under which a PostgreSQL ledger is created or opened


class LedgerBackend(Protocol):
    location: str
    """Where the ledger is, for messages (never a password)."""

    def exists(self) -> bool: ...
    def prepare(self) -> None: ...
    def connect(self) -> Any: ...  # context manager yielding a connection with execute(sql, params)
    def transaction(self, conn: Any, *, init: bool = False) -> Any: ...
    def schema_version(self, conn: Any) -> int: ...
    def create_schema(self, conn: Any, statements: Sequence[str], version: int) -> None: ...
    def lock(self, conn: Any, keys: Sequence[str]) -> None: ...


def open_backend(location: str | Path) -> LedgerBackend:
    """``postgresql://...`` (a libpq URI) opens PostgreSQL; anything else is the path of a SQLite file."""
    if isinstance(location, str) and urlsplit(location).scheme in POSTGRES_SCHEMES:
        return PostgresBackend(location)
    return SQLiteBackend(Path(location))


class SQLiteBackend:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)

    def exists(self) -> bool:
        return self.path.exists()

    def prepare(self) -> None:
        make_dirs(self.path.parent)
        reserve_private(self.path)  # 0600 before SQLite opens it; its -wal and -shm files take that mode
        with self.connect() as conn:
            if self._journal_mode(conn, "PRAGMA journal_mode=WAL") != "wal":
                from opal_dp.core.ledger_records import LedgerError

                raise LedgerError(f"cannot put the ledger {self.path} in WAL mode")

    @staticmethod
    def _journal_mode(conn: sqlite3.Connection, pragma: str, wait_s: float = 60.0) -> str:
        """The journal mode after ``pragma``. Switching a new file to WAL needs the database to itself, and SQLite
        answers "database is locked" at once (no busy wait) while another process creates the schema: processes
        opening a new ledger together (workers started at once) try again until ``wait_s``, and skip the switch
        once one of them made it (WAL is recorded in the file)."""
        deadline = time.monotonic() + wait_s
        while True:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return "wal"
            try:
                return conn.execute(pragma).fetchone()[0].lower()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection per operation: safe across threads and forked processes."""
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def transaction(self, conn: sqlite3.Connection, *, init: bool = False) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")  # the database's write lock: every scope is locked
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def schema_version(self, conn: sqlite3.Connection) -> int:
        return conn.execute("PRAGMA user_version").fetchone()[0]

    def create_schema(self, conn: sqlite3.Connection, statements: Sequence[str], version: int) -> None:
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {int(version)}")

    def lock(self, conn: sqlite3.Connection, keys: Sequence[str]) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the whole database."""


class _PgConnection:
    """A psycopg2 connection that runs the ledger's ``?``-style SQL (the ledger's SQL has no ``%``)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence = ()) -> Any:
        cur = self.raw.cursor()
        cur.execute(sql.replace("?", "%s"), tuple(params))
        return cur


def _dialect(statement: str) -> str:
    """The ledger's DDL in PostgreSQL's dialect (SQLite's REAL is 8 bytes; PostgreSQL's is 4)."""
    return (statement.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
            .replace(" REAL ", " DOUBLE PRECISION "))


class PostgresBackend:
    def __init__(self, url: str) -> None:
        try:
            import psycopg2  # noqa: F401  (the `cluster` extra)
        except ImportError as exc:
            from opal_dp.core.ledger_records import LedgerError

            raise LedgerError(
                "a PostgreSQL ledger needs psycopg2: pip install 'opal_dp[cluster]'"
            ) from exc
        self.url = url
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        user = parts.username
        self.location = urlunsplit(parts._replace(netloc=f"{user}@{netloc}" if user else netloc))

    def exists(self) -> bool:
        with self.connect() as conn:
            return conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]

    def prepare(self) -> None:
        """Nothing to prepare: the database exists (the operator creates it and its roles)."""

    @contextmanager
    def connect(self) -> Iterator[_PgConnection]:
        import psycopg2

        raw = psycopg2.connect(self.url, connect_timeout=30)
        raw.autocommit = True  # transactions are explicit, as in SQLite's isolation_level=None
        try:
            yield _PgConnection(raw)
        finally:
            raw.close()

    @contextmanager
    def transaction(self, conn: _PgConnection, *, init: bool = False) -> Iterator[None]:
        conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        try:
            if init:  # creating the schema, or checking it, happens once at a time across hosts
                conn.execute("SELECT pg_advisory_xact_lock(?)", (_INIT_LOCK,))
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def schema_version(self, conn: _PgConnection) -> int:
        if not conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]:
            return 0
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def create_schema(self, conn: _PgConnection, statements: Sequence[str], version: int) -> None:
        for statement in statements:
            conn.execute(_dialect(statement))
        conn.execute("CREATE TABLE ledger_locks (key TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(int(version)),))

    def lock(self, conn: _PgConnection, keys: Sequence[str]) -> None:
        """Lock one row per key until the transaction ends, creating the row the first time."""
        for key in sorted(set(keys)):
            conn.execute("INSERT INTO ledger_locks VALUES (?) ON CONFLICT DO NOTHING", (key,))
            conn.execute("SELECT key FROM ledger_locks WHERE key = ? FOR UPDATE", (key,))
