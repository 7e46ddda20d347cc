"""The materialisations of one partitioned output reach the Dagster instance together: on PostgreSQL (the deploy/
profile's storage) in one insert, not one transaction per partition."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import dagster as dg
import pytest

from opal_dp.definitions import EVENT_BATCH, EVENT_BATCH_ENV
from opal_dp_tests.browser.dagster_dev import REPO_ROOT

DAYS = dg.DailyPartitionsDefinition(start_date="2016-07-25", end_date="2016-07-28")


@dg.asset(partitions_def=DAYS, backfill_policy=dg.BackfillPolicy.single_run())
def days_seen(context) -> None:
    for day in context.partition_keys:
        context.add_asset_metadata({"day": day}, partition_key=day)


def test_a_partitioned_output_is_stored_in_one_batch_on_postgres(postgres, tmp_path, monkeypatch):
    from dagster_postgres.event_log import PostgresEventLogStorage

    batches = []
    store_batch = PostgresEventLogStorage.store_event_batch

    def recorded(storage, events):
        batches.append([e.get_dagster_event().event_type for e in events])
        store_batch(storage, events)

    monkeypatch.setattr(PostgresEventLogStorage, "store_event_batch", recorded)
    url = postgres.new_database().replace("postgresql://", "postgresql+psycopg2://", 1)
    monkeypatch.setenv("DAGSTER_POSTGRES_URL", url)
    shutil.copy(REPO_ROOT / "deploy" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        result = dg.materialize([days_seen], instance=instance, tags={
            "dagster/asset_partition_range_start": "2016-07-25", "dagster/asset_partition_range_end": "2016-07-27"})
        assert result.success
        stored = instance.fetch_materializations(days_seen.key, limit=10).records
    assert [dg.DagsterEventType.ASSET_MATERIALIZATION] * 3 in batches
    assert sorted(r.partition_key for r in stored) == ["2016-07-25", "2016-07-26", "2016-07-27"]
    assert {r.asset_materialization.metadata["day"].value for r in stored} == {r.partition_key for r in stored}


@pytest.mark.parametrize(("given", "used"), [(None, EVENT_BATCH), ("0", "0")])
def test_the_definitions_batch_events_unless_the_operator_said_otherwise(given, used):
    env = {k: v for k, v in os.environ.items() if k != EVENT_BATCH_ENV} | ({EVENT_BATCH_ENV: given} if given else {})
    program = f"import os, opal_dp.definitions; print(os.environ['{EVENT_BATCH_ENV}'])"
    shown = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True,
                           cwd=REPO_ROOT).stdout
    assert shown.strip() == used
