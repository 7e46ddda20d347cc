"""Per-partition metadata over dynamic partitions: the registered dates are read once per step, not once per call."""

import dagster as dg
import pytest

from opal_dp.defs.shared.metadata import READS_OF_DATES, dates_read_once

DATES = dg.DynamicPartitionsDefinition(name="test_dates")
KEYS = [f"2016-07-{d:02d}" for d in range(1, 29)]
DATE_MODE = dg.MultiPartitionsDefinition({"date": DATES, "mode": dg.StaticPartitionsDefinition(["bus", "train"])})
SCHEMES = {  # partitions, the step's range, the partition keys it records, the key's figure
    "date": (DATES, (KEYS[0], KEYS[-1]), KEYS, lambda key: int(key[-2:])),
    "date_mode": (DATE_MODE, (f"{KEYS[0]}|bus", f"{KEYS[-1]}|bus"), [f"{k}|bus" for k in KEYS],
                  lambda key: int(key[8:10])),
}


def _asset(scheme: str, read_once: bool) -> dg.AssetsDefinition:
    partitions, _, _, figure = SCHEMES[scheme]

    @dg.asset(partitions_def=partitions, backfill_policy=dg.BackfillPolicy.single_run())
    def per_partition(context: dg.AssetExecutionContext) -> None:
        def record() -> None:
            for key in context.partition_keys:
                context.add_asset_metadata({"dagster/row_count": figure(str(key))}, partition_key=key)
        if read_once:
            with dates_read_once(context):
                record()
        else:
            record()

    return per_partition


def _run(scheme: str, read_once: bool, monkeypatch) -> tuple[int, dict[str, int], dg.DagsterInstance]:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(DATES.name, KEYS)
    storage = instance.event_log_storage
    reads = []
    for read in READS_OF_DATES:
        original = getattr(storage, read)
        monkeypatch.setattr(storage, read, lambda *a, original=original: reads.append(a) or original(*a))
    span = SCHEMES[scheme][1]
    result = dg.materialize([_asset(scheme, read_once)], instance=instance,
                            tags={"dagster/asset_partition_range_start": span[0],
                                  "dagster/asset_partition_range_end": span[1]})
    rows = {e.partition: e.materialization.metadata["dagster/row_count"].value
            for e in result.get_asset_materialization_events()}
    return len(reads), rows, instance


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_dates_are_read_once_and_every_partition_gets_its_metadata(scheme, monkeypatch):
    """Without the context manager Dagster reads the registered dates for each ``add_asset_metadata`` call (every
    date for a date partition, each date of the range for a (date, mode) one: a cost that grows with the dates);
    with it, the step's calls share one read per question and each partition still gets its own figures, and the
    instance is left as it was."""
    _, _, keys, figure = SCHEMES[scheme]
    plain, rows_plain, _ = _run(scheme, False, monkeypatch)
    once, rows_once, instance = _run(scheme, True, monkeypatch)
    assert plain >= 2 * len(keys) and once < 12  # per call, against a few reads that do not grow with the keys
    assert rows_once == rows_plain == {key: figure(key) for key in keys}
    assert not set(READS_OF_DATES) & set(vars(instance))
