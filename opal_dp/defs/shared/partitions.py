"""Partitions: the service day, on which raw files arrive and are ingested, and the release period, the calendar
week, on which everything differentially private is released, checked, charged and published.

- ``service_dates``: one partition a day from ``$OPAL_DP_FIRST_DATE``, in the agency's time zone
  (``$OPAL_DP_TIMEZONE``); a day is a partition once it has ended there. The private stages are per day.
- ``release_periods``: calendar weeks, Monday to Sunday (``release.periods``), a partition once the week has ended.
  A week's release reads its seven days through Dagster's ``TimeWindowPartitionMapping`` (inferred), so automation
  releases it once every one of its days is ingested, and never before.
- ``period_mode``: (week, mode), the six marginals: the UI shows one partition per week and mode. A run covers
  whole weeks (Dagster splits a backfill of it into one run per week, its primary dimension), so a week is
  released, checked and charged as one thing, and a refused week fails its own run only.

Key strings: a day and a week are ISO dates (a week by its Monday); a (week, mode) key is ``mode|week`` (Dagster
joins dimensions in the alphabetical order of their names). Inside a week's partition the stored pieces stay per
service date: ``date`` for a week, ``date|mode`` for a (week, mode), the published layout's unit.
"""

from __future__ import annotations

import dagster as dg

from opal_dp import settings
from opal_dp.network import MODES
from opal_dp.release.periods import week_days

# Run tags that make one run cover a range of partitions (with single-run backfill policies).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
FIRST_DATE, TIMEZONE = settings.first_date_from_env(), settings.timezone_from_env()

service_dates = dg.DailyPartitionsDefinition(start_date=FIRST_DATE, timezone=TIMEZONE)
release_periods = dg.WeeklyPartitionsDefinition(start_date=FIRST_DATE, day_offset=1, timezone=TIMEZONE)
modes = dg.StaticPartitionsDefinition(list(MODES))
period_mode = dg.MultiPartitionsDefinition({"period": release_periods, "mode": modes})


def run_partition_keys(context: dg.AssetExecutionContext) -> list[str]:
    """The run's partition keys as Dagster hands them to its steps, refused when the run's tags say otherwise.

    A backfill launched from a job's Partitions page (Dagster 1.13, ``job_backfill``) gives each run of a range of
    (week, mode) partitions its first partition's dimension tags too, and the steps of such a run are handed that one
    partition only: released, it would publish one mode of one week and report success. Such a run fails here, at
    its first step, before anything is read, drawn or charged."""
    keys = [str(k) for k in context.partition_keys]
    tags, partitions = context.run.tags, context.assets_def.partitions_def
    if RANGE_START in tags and RANGE_END in tags and isinstance(partitions, dg.MultiPartitionsDefinition):
        spanned = partitions.get_partition_keys_in_range(dg.PartitionKeyRange(
            partitions.get_partition_key_from_str(tags[RANGE_START]),
            partitions.get_partition_key_from_str(tags[RANGE_END])))
        if sorted(map(str, spanned)) != sorted(keys):
            raise dg.Failure(description=(
                f"this run covers {tags[RANGE_START]} to {tags[RANGE_END]}, but Dagster hands its steps "
                f"{', '.join(keys)} only: a backfill launched from a job's Partitions page gives every run of a range "
                "its first partition's tags. Nothing was read, drawn or charged. Release the weeks from the asset "
                "graph (select the assets, Materialize, choose the partitions) or with `python -m opal_dp.cli "
                "release`."))
    return keys


def period_and_mode(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(week, mode) of a (week, mode) key, whether Dagster hands it over as a key or a plain string ``mode|week``."""
    mode, sep, period = str(key).partition("|")
    if not (sep and period and mode in MODES):
        raise ValueError(f"a (week, mode) partition key is '<mode>|<week>' with mode in {MODES}, got {str(key)!r}")
    return period, mode


def date_and_mode(piece: str) -> tuple[str, str]:
    """(date, mode) of a stored ``date|mode`` piece of a (week, mode) partition."""
    day, sep, mode = str(piece).partition("|")
    if not (sep and day and mode in MODES):
        raise ValueError(f"a piece key is '<date>|<mode>' with mode in {MODES}, got {str(piece)!r}")
    return day, mode


def pieces(partitions_def: dg.PartitionsDefinition, key: str) -> list[str]:
    """The stored pieces of one partition: a week's dates, a (week, mode)'s ``date|mode``, a day itself."""
    if partitions_def == period_mode:
        period, mode = period_and_mode(key)
        return [f"{day}|{mode}" for day in week_days(period)]
    if partitions_def == release_periods:
        return list(week_days(str(key)))
    return [str(key)]


def period_range(periods: list[str]) -> tuple[str, str]:
    """The (week, mode) range of whole weeks ``periods[0]..periods[-1]``, every mode: one run's partitions."""
    return f"{MODES[0]}|{periods[0]}", f"{MODES[-1]}|{periods[-1]}"
