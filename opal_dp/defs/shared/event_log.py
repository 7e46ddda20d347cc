"""Dagster's SQLite event log, keeping its connections: what ``make release``, the UI and the daemon store their
events in on one machine (``dagster.yaml`` of the Dagster home ``opal_dp`` creates; PostgreSQL stays the
production profile, deploy/README.md).

Dagster's own ``SqliteEventLogStorage`` builds a SQLAlchemy engine and opens a connection for every event it
stores and every question about the index's tables, and closing the last connection of a WAL database
checkpoints it. This storage is the same class, the same files and the same schema, but each database file (one
per run and the cross-run index) keeps one engine with one open connection, used under the storage's lock
as Dagster uses its own; the least recently used files beyond ``KEPT_FILES`` are closed. The UI's live view of a
run that another process executes watches the run's ``.db`` file only (``SqliteEventLogStorageWatchdog``), which
Dagster's own storage changes by checkpointing as it closes each connection; here the new events stay in the WAL
until SQLite's automatic checkpoint, so each write to a run's file ends by touching the ``.db`` file (its
modification time: a change for inotify and for polling observers alike, and it never waits on a reader, as a
checkpoint may).

Public API only: it overrides ``run_connection``, ``index_connection`` (the ``SqlEventLogStorage`` interface),
``store_event_batch`` (one transaction per file for a batch of events), ``has_table``, ``wipe`` and
``dispose``; a database file is created and migrated the first time by Dagster's own connection.
No privacy figure depends on it (the event log holds internal, non-DP figures and lives in the private home).
"""

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress

import sqlalchemy as sa
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

KEPT_FILES = 16  # open database files per process: a release's runs and the index, with room for the UI's reads
INDEX = "index"  # Dagster's name of the cross-run shard


def _synchronous_normal(dbapi_connection, _record) -> None:  # noqa: ANN001 (SQLAlchemy's connect event)
    """WAL with ``synchronous=NORMAL``: a commit is ordered and atomic but waits for no ``fsync`` (SQLite syncs at
    checkpoints), so a power cut may lose the last events and never corrupts the file; a killed process loses nothing.
    Dagster's default, FULL, syncs every commit: one per event stored, 3.2 ms each on the 2-core machine."""
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class KeptConnectionSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` with one kept connection per database file (module docstring)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._kept_lock = threading.RLock()  # a thread's nested uses of a file share its open transaction
        self._open: dict[str, Connection] = {}  # the files with a transaction open (by the thread holding the lock)
        super().__init__(base_dir, inst_data)  # may already connect (a new home's index is built here)

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # noqa: ANN001 (Dagster's signature)
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        """The kept engine of ``shard``, most recently used last; called under ``_kept_lock``. An engine evicted
        beyond ``KEPT_FILES`` is never one with an open transaction."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            first = super().index_connection() if shard == INDEX else super().run_connection(shard)
            with first:  # Dagster's own path creates and migrates the file, once per process
                pass
            engine = sa.create_engine(self.conn_string_for_shard(shard), poolclass=StaticPool,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                    "check_same_thread": False})
            sa.event.listen(engine, "connect", _synchronous_normal)
        self._engines[shard] = engine
        for old in [s for s in self._engines if s not in self._open][:max(0, len(self._engines) - KEPT_FILES)]:
            self._engines.pop(old).dispose()
        return engine

    @contextmanager
    def _kept_connection(self, shard: str) -> Iterator[Connection]:
        """A connection to ``shard`` in a transaction: a new one, committed on leaving, or, nested inside one (a
        batch, or ``has_table`` inside an index transaction), that same one: one transaction, as with Dagster's own
        storage, whose nested questions use connections of their own."""
        with self._kept_lock:
            if shard in self._open:
                yield self._open[shard]
                return
            with self._engine(shard).connect() as conn:
                sqlite = conn.connection.dbapi_connection
                changes = sqlite.total_changes
                self._open[shard] = conn
                try:
                    with conn.begin():
                        yield conn
                finally:
                    del self._open[shard]
            if shard != INDEX and sqlite.total_changes != changes:  # the live view watches the run's .db file
                with suppress(OSError):  # stored already; a file wiped meanwhile has no view to wake
                    os.utime(self.path_for_shard(shard))

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """The events of a batch (the materialisations of one partitioned output, ``DAGSTER_EVENT_BATCH_SIZE``) in
        one transaction per file instead of one per event, the runs' files committed before the index; on any error
        none is stored and Dagster stores them one by one (``handle_new_event``)."""
        with self._kept_lock, ExitStack() as stack:
            for shard in [INDEX, *sorted({event.run_id for event in events})]:  # left in reverse: the index last
                stack.enter_context(self._kept_connection(shard))
            for event in events:
                self.store_event(event)

    def run_connection(self, run_id: str | None = None) -> Iterator[Connection]:  # type: ignore[override]
        return self._kept_connection(run_id)  # type: ignore[arg-type]  # Dagster's own signature allows None

    def index_connection(self) -> Iterator[Connection]:  # type: ignore[override]
        return self._kept_connection(INDEX)

    def has_table(self, table_name: str) -> bool:
        """Asked before every asset event's tags and check result are stored: on the kept index connection (Dagster's
        own opens a new engine and connection each time)."""
        with self.index_connection() as conn:
            return bool(conn.dialect.has_table(conn, table_name))

    def _close_all(self) -> None:
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()

    def wipe(self) -> None:
        with self._kept_lock:  # the run files are deleted: no connection may outlive them, none opens meanwhile
            self._close_all()
            super().wipe()

    def dispose(self) -> None:
        super().dispose()  # the live views' observer first: it reads through the kept connections
        with self._kept_lock:
            self._close_all()
