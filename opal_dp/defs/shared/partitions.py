"""Partitions: service dates (added as raw files arrive) and (date x mode), the unit of privacy."""


from collections.abc import Iterable, Sequence

import dagster as dg

from opal_dp.network import MODES

# Run tags that make one run cover a range of partitions (with single-run backfill policies).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"

service_dates = dg.DynamicPartitionsDefinition(name="service_date")
modes = dg.StaticPartitionsDefinition(list(MODES))
date_mode = dg.MultiPartitionsDefinition({"date": service_dates, "mode": modes})


def date_and_mode(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(date, mode) of a date x mode key, whether Dagster hands it over as a key or a plain string (``date|mode``:
    Dagster joins the dimensions in name order); read directly, since a roll-up splits every key of the history."""
    day, sep, mode = str(key).partition("|")
    if not (sep and day and mode in MODES):
        raise ValueError(f"a partition key is '<date>|<mode>' with mode in {MODES}, got {str(key)!r}")
    return day, mode


def contiguous_ranges(ordered: Sequence[str], wanted: Iterable[str]) -> list[tuple[str, str]]:
    """The fewest (first, last) ranges of ``ordered`` (a partitions definition's key order) covering
    exactly the keys in ``wanted``: one run per range never touches a key that was not asked for."""
    chosen = {str(k) for k in wanted}
    ranges: list[tuple[str, str]] = []
    run: list[str] = []
    for key in map(str, ordered):
        if key in chosen:
            run.append(key)
        elif run:
            ranges.append((run[0], run[-1]))
            run = []
    if run:
        ranges.append((run[0], run[-1]))
    return ranges
