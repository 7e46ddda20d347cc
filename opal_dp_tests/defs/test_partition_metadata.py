"""Per-partition metadata over dynamic partitions: the registered dates are read once per step, not once per call."""

import dagster as dg

from opal_dp.defs.shared.metadata import dates_read_once

DATES = dg.DynamicPartitionsDefinition(name="test_dates")
KEYS = [f"2016-07-{d:02d}" for d in range(1, 29)]


def _asset(read_once: bool) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=DATES, backfill_policy=dg.BackfillPolicy.single_run())
    def per_date(context: dg.AssetExecutionContext) -> None:
        def record() -> None:
            for key in context.partition_keys:
                context.add_asset_metadata({"dagster/row_count": int(key[-2:])}, partition_key=key)
        if read_once:
            with dates_read_once(context):
                record()
        else:
            record()

    return per_date


def _run(read_once: bool, monkeypatch) -> tuple[int, dict[str, int], dg.DagsterInstance]:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(DATES.name, KEYS)
    storage = instance.event_log_storage
    reads = []
    original = storage.get_dynamic_partitions
    monkeypatch.setattr(storage, "get_dynamic_partitions", lambda name: reads.append(name) or original(name))
    result = dg.materialize([_asset(read_once)], instance=instance,
                            tags={"dagster/asset_partition_range_start": KEYS[0],
                                  "dagster/asset_partition_range_end": KEYS[-1]})
    rows = {e.partition: e.materialization.metadata["dagster/row_count"].value
            for e in result.get_asset_materialization_events()}
    return len(reads), rows, instance


def test_the_dates_are_read_once_and_every_partition_gets_its_metadata(monkeypatch):
    """Without the context manager Dagster reads every registered date for each ``add_asset_metadata`` call (its
    cost grows with the dates registered); with it, the step's calls share one read and each partition still gets
    its own figures, and the instance is left as it was."""
    plain, rows_plain, _ = _run(False, monkeypatch)
    once, rows_once, instance = _run(True, monkeypatch)
    assert plain >= len(KEYS) and once < plain - len(KEYS) + 3
    assert rows_once == rows_plain == {key: int(key[-2:]) for key in KEYS}
    assert "get_dynamic_partitions" not in vars(instance)
