"""Small helpers shared by the asset modules: schema metadata, per-partition tables and metadata, backfill policy."""


import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import dagster as dg
import pandera.pandas as pa
from dagster_pandera import pandera_schema_to_dagster_type

# One run materialises a whole backfill: never one process per partition per asset.
SINGLE_RUN = dg.BackfillPolicy.single_run()
OWNERS = ["team:opal-data"]
LEDGER_POOL = "privacy_ledger"  # runs that write the ledger queue on this pool (limit 1 in dagster.yaml)


def labels(data_class: str, *kinds: str) -> dict:
    """Owners, kinds and the ``data_class`` tag of an asset: ``microdata`` (trips, private), ``internal``
    (non-DP figures for the data team, private), ``dp`` (differentially private, not yet published) or
    ``public`` (published)."""
    if data_class not in ("microdata", "internal", "dp", "public"):
        raise ValueError(f"unknown data class {data_class!r}")
    return {"owners": OWNERS, "kinds": {"python", *kinds}, "tags": {"data_class": data_class}}


def column_schema(model: type[pa.DataFrameModel]) -> dict[str, dg.TableSchema]:
    """Definition metadata that makes the UI show the Pandera model as the asset's column schema."""
    return {"dagster/column_schema": pandera_schema_to_dagster_type(model).metadata["schema"].schema}


def partition_table(rows: Sequence[dict]) -> dg.TableMetadataValue:
    """One row per partition of the run: lets a multi-partition run still report each partition."""
    columns = list(rows[0]) if rows else ["partition"]
    return dg.MetadataValue.table(
        records=[dg.TableRecord(row) for row in rows],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn(name, "string" if isinstance(rows[0][name], str) else "float")
                for name in columns
            ]
        ) if rows else None,
    )


READS_OF_DATES = ("get_dynamic_partitions", "has_dynamic_partition")


@contextmanager
def dates_read_once(context: dg.AssetExecutionContext) -> Iterator[None]:
    """Inside it, the step reads the registered service dates from the instance once.

    Dagster checks each ``add_asset_metadata(partition_key=...)`` against the step's partition range, and for a
    dynamic partitions definition that reads every registered date from the instance: one query per call, whose
    cost grows with the dates registered (about 0.03 s a call with 98 dates; a weekly release step makes about
    200 calls, so the step grew by seconds a quarter). For a (date, mode) range it asks the instance, once per
    key of the range and call, whether each date is registered (a query each: 0.6 s of a release step at 56
    partitions). Both answers are read once here. No date is registered while a step records its metadata."""
    instance = context.instance
    for read in READS_OF_DATES:
        setattr(instance, read, functools.cache(getattr(instance, read)))
    try:
        yield
    finally:
        for read in READS_OF_DATES:
            delattr(instance, read)
