"""The event log of one machine's Dagster home (``defs.shared.event_log``): everything the UI reads is what Dagster's
own SQLite storage gives for the same runs, a run executed by another process reaches the live view, and each
database file is opened once, not once per event (the test that fails when a Dagster upgrade routes the storage's
connections around the two methods it overrides)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.events.log import EventLogEntry

from opal_dp.defs.shared.event_log import KEPT_FILES, KeptConnectionSqliteEventLogStorage
from opal_dp.defs.shared.instance import HEADER, dagster_yaml, ensure_dagster_home, instance_settings

DAYS = dg.StaticPartitionsDefinition(["2016-07-25", "2016-07-26", "2016-07-27"])


@dg.asset(partitions_def=DAYS, check_specs=[dg.AssetCheckSpec("rows_positive", asset="trips")])
def trips(context):
    rows = 10 + DAYS.get_partition_keys().index(context.partition_key)
    context.log.info(f"day {context.partition_key}")
    yield dg.MaterializeResult(metadata={"rows": rows})
    yield dg.AssetCheckResult(check_name="rows_positive", passed=context.partition_key != "2016-07-27",
                              metadata={"rows": rows})


@dg.asset(deps=[trips])
def summary() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"days": len(DAYS.get_partition_keys())})


def _release(instance: dg.DagsterInstance) -> None:
    for day in DAYS.get_partition_keys():
        dg.materialize([trips], instance=instance, partition_key=day, tags={"opal_dp/week": "2016-07-25"})
    dg.materialize([trips, summary], instance=instance, selection=[summary], tags={"opal_dp/week": "2016-07-25"})


def _what_the_ui_reads(instance: dg.DagsterInstance) -> dict:
    """Partitions, runs with status and tags, every run's events by type and message, check history, the latest
    materialisation's metadata, asset event tags: run ids and times left out (they differ between any two runs)."""
    runs = sorted(instance.get_runs(), key=lambda r: r.tags.get("dagster/partition", "~"))
    check = dg.AssetCheckKey(dg.AssetKey("trips"), "rows_positive")
    latest = instance.get_latest_materialization_event(dg.AssetKey("trips"))
    return {
        "partitions": sorted(instance.get_materialized_partitions(dg.AssetKey("trips"))),
        "assets": sorted(key.to_user_string() for key in instance.get_asset_keys()),
        "runs": [(r.job_name, r.status.value, sorted((k, v) for k, v in r.tags.items() if "run_id" not in k))
                 for r in runs],
        "events": [sorted(Counter((e.dagster_event_type.value if e.dagster_event_type else None,
                                   e.user_message if not e.is_dagster_event else "")
                                  for e in instance.all_logs(r.run_id)).items(), key=str) for r in runs],
        "checks": sorted((r.partition, r.status.value) for r in
                         instance.event_log_storage.get_asset_check_execution_history(check, limit=10)),
        "latest": (latest.asset_materialization.partition,
                   {k: v.value for k, v in latest.asset_materialization.metadata.items()}),
        "summary": instance.get_latest_materialization_event(dg.AssetKey("summary")).asset_materialization.metadata[
            "days"].value,
    }


def _home(path: Path, kept: bool) -> Path:
    settings = instance_settings(path)
    if not kept:
        del settings["event_log_storage"]  # Dagster's own SqliteEventLogStorage, same place
    path.mkdir()
    (path / "dagster.yaml").write_text(dagster_yaml(settings))
    return path


def test_the_ui_reads_the_same_as_from_dagsters_own_storage(tmp_path):
    reads = {}
    for kept in (False, True):
        with dg.DagsterInstance.from_config(str(_home(tmp_path / f"home-{kept}", kept))) as instance:
            assert isinstance(instance.event_log_storage, KeptConnectionSqliteEventLogStorage) is kept
            _release(instance)
            reads[kept] = _what_the_ui_reads(instance)
    assert reads[True] == reads[False]
    assert reads[True]["partitions"] == DAYS.get_partition_keys() and len(reads[True]["runs"]) == 4
    assert sorted(status for _, status in reads[True]["checks"]) == ["FAILED", "SUCCEEDED", "SUCCEEDED"]


def test_a_home_that_opal_dp_creates_uses_it_and_keeps_an_existing_setting(tmp_path):
    home = ensure_dagster_home(tmp_path / "home")
    text = (home / "dagster.yaml").read_text()
    assert text.startswith(HEADER) and str((home / "history" / "runs").resolve()) in text
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage) is KeptConnectionSqliteEventLogStorage
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # an operator's own: left alone
    ensure_dagster_home(home)
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


@contextmanager
def _opened_files(base_dir: Path) -> Iterator[Counter]:
    """Every SQLite connection opened to a file in ``base_dir`` while inside, counted by file name."""
    opened: Counter = Counter()

    def on_connect(dbapi_connection, _record) -> None:
        path = Path(dbapi_connection.execute("PRAGMA database_list").fetchone()[2] or "/")
        if path.parent == base_dir:
            opened[path.name] += 1

    sa.event.listen(sa.pool.Pool, "connect", on_connect)
    try:
        yield opened
    finally:
        sa.event.remove(sa.pool.Pool, "connect", on_connect)


def test_each_database_file_is_opened_a_few_times_per_process_not_once_per_event(tmp_path):
    opened = {}
    for kept in (False, True):
        home = _home(tmp_path / f"home-{kept}", kept)
        with _opened_files((home / "history" / "runs").resolve()) as opened[kept], \
                dg.DagsterInstance.from_config(str(home)) as instance:
            _release(instance)
            for _ in range(KEPT_FILES):  # more run files than are kept open: the oldest are closed
                dg.materialize([trips], instance=instance, partition_key="2016-07-25")
            _release(instance)  # and files closed on the way are read and written again
            runs = instance.get_runs()
            assert len(runs) == 2 * 4 + KEPT_FILES and sum(len(instance.all_logs(r.run_id)) for r in runs) > 350
    assert len(opened[True]) == len(opened[False]) == len(runs) + 1  # a file per run and the index
    # creating a file: Dagster's own migration checks, a few connections; then one kept connection, whatever the
    # events. Dagster's own storage: a connection per event and per question about the index's tables
    assert max(opened[True].values()) <= 8 and sum(opened[False].values()) > 5 * sum(opened[True].values()), opened


def test_a_run_written_by_another_process_reaches_the_live_view(tmp_path):
    home = ensure_dagster_home(tmp_path / "home")
    base_dir = str((home / "history" / "runs").resolve())
    writer, viewer = KeptConnectionSqliteEventLogStorage(base_dir), KeptConnectionSqliteEventLogStorage(base_dir)
    seen, arrived = [], threading.Event()

    def message(text: str) -> EventLogEntry:
        return EventLogEntry(error_info=None, level="INFO", user_message=text, run_id="run-1", timestamp=time.time())

    writer.store_event(message("first"))
    cursor = viewer.get_records_for_run("run-1").cursor

    def on_event(entry: EventLogEntry, _cursor: str) -> None:
        seen.append(entry.user_message)
        arrived.set()

    viewer.watch("run-1", cursor, on_event)  # the webserver's subscription to a running run's log
    try:
        for text in ("second", "third"):
            writer.store_event(message(text))
        assert arrived.wait(20) and _wait_for(lambda: seen == ["second", "third"]), seen
    finally:
        viewer.end_watch("run-1", on_event)
        viewer.dispose()
        writer.dispose()


def _wait_for(condition, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_an_asset_event_reaches_the_index_whole_or_not_at_all(tmp_path, monkeypatch):
    """The index's rows of one asset event (the event, its tags, the asset's record) are one transaction, as in
    Dagster's own storage: the question about the index's tables asked in the middle shares it, never commits
    half of it."""
    home = ensure_dagster_home(tmp_path / "home")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = dg.materialize([summary], instance=instance).run_id
        (event,) = [e for e in instance.all_logs(run) if e.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION]
    storage = KeptConnectionSqliteEventLogStorage(str(tmp_path / "other"))
    materialised = dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION, asset_key=dg.AssetKey("summary"))
    store_asset_event = type(storage)._store_asset_event

    def fails(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(storage), "_store_asset_event", fails)  # after the event's row and its tags
    with pytest.raises(OSError, match="disk full"):
        storage.store_event(event)
    assert storage.get_event_records(materialised) == []
    monkeypatch.setattr(type(storage), "_store_asset_event", store_asset_event)
    storage.store_event(event)  # nothing left open or locked by the failure
    assert len(storage.get_event_records(materialised)) == 1
    storage.dispose()


def test_the_kept_files_commit_without_waiting_for_the_disk_and_stay_write_ahead_logged(tmp_path):
    """``synchronous=NORMAL`` under WAL: atomic commits that wait for no fsync (one per event under Dagster's FULL)."""
    with dg.DagsterInstance.from_config(str(_home(tmp_path / "home", kept=True))) as instance:
        _release(instance)
        storage = instance.event_log_storage
        connections = [storage.index_connection(), *(storage.run_connection(r.run_id) for r in instance.get_runs())]
        for connection in connections:
            with connection as conn:
                modes = conn.exec_driver_sql("PRAGMA synchronous").scalar(), \
                    conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            assert modes == (1, "wal"), modes
