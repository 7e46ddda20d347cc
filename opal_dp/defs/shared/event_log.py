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
from contextlib import ExitStack, contextmanager

import sqlalchemy as sa
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

KEPT_FILES = 16  # open database files per process: a release's runs and the index, with room for the UI's reads
INDEX = "index"  # Dagster's name of the cross-run shard
BUSY_TIMEOUT_SECONDS = 120  # Dagster's own SQLite busy timeout


class KeptConnectionSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` with one kept connection per database file (module docstring)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._kept_lock = threading.RLock()  # store_event_batch holds it across the events' own connections
        self._batch: dict[str, Connection] = {}
        super().__init__(base_dir, inst_data)  # may already connect (a new home's index is built here)

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # noqa: ANN001 (Dagster's signature)
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        """The kept engine of ``shard``, most recently used last; called under ``_kept_lock``."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            first = super().index_connection() if shard == INDEX else super().run_connection(shard)
            with first:  # Dagster's own path creates and migrates the file, once per process
                pass
            engine = sa.create_engine(self.conn_string_for_shard(shard), poolclass=StaticPool,
                                      connect_args={"timeout": BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
        self._engines[shard] = engine
        while len(self._engines) > KEPT_FILES:
            self._engines.popitem(last=False)[1].dispose()
        return engine

    @contextmanager
    def _kept_connection(self, shard: str) -> Iterator[Connection]:
        with self._kept_lock:
            if shard in self._batch:  # inside store_event_batch: its open transaction
                yield self._batch[shard]
                return
            with self._engine(shard).connect() as conn:
                sqlite = conn.connection.dbapi_connection
                changes = sqlite.total_changes
                with conn.begin():
                    yield conn
                if shard != INDEX and sqlite.total_changes != changes:  # the live view watches the run's .db file
                    os.utime(self.path_for_shard(shard))

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """The events of a batch (the materialisations of one partitioned output, ``DAGSTER_EVENT_BATCH_SIZE``) in
        one transaction per file instead of one per event; on any error none is stored and Dagster stores them one
        by one (``handle_new_event``)."""
        shards = sorted({event.run_id for event in events}) + [INDEX]
        with self._kept_lock, ExitStack() as stack:
            self._batch = {shard: stack.enter_context(self._kept_connection(shard)) for shard in shards}
            try:
                for event in events:
                    self.store_event(event)
            finally:
                self._batch = {}

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
        with self._kept_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        self._close_all()  # the run files are deleted: no connection may outlive them
        super().wipe()

    def dispose(self) -> None:
        self._close_all()
        super().dispose()
