"""Small helpers shared by the asset modules: schema metadata, per-partition tables and metadata, backfill policy."""


import re
from collections.abc import Sequence

import dagster as dg
import pandera.pandas as pa

# One run materialises a whole backfill: never one process per partition per asset. A backfill of (week, mode)
# partitions is still one run per week (Dagster splits it along the week, its primary dimension).
SINGLE_RUN = dg.BackfillPolicy.single_run()
# A week's assets: one run a week, so that a week refused fails alone.
WEEK_A_RUN = dg.BackfillPolicy.multi_run(1)
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
    """Definition metadata that makes the UI show the Pandera model as the asset's column schema: each column's
    dtype, description, nullability, uniqueness and checks, as ``dagster-pandera`` states them (the test compares),
    without its import of Polars in every process that loads the definitions (about 0.3 s)."""
    schema = model.to_schema()
    return {"dagster/column_schema": dg.TableSchema(
        columns=[dg.TableColumn(name=column.name, type=str(column.dtype), description=column.description,
                                constraints=dg.TableColumnConstraints(
                                    nullable=column.nullable, unique=column.unique,
                                    other=[_constraint(check) for check in column.checks or []]))
                 for column in schema.columns.values()],
        constraints=dg.TableConstraints(other=[_identifier(check) for check in schema.checks]))}


_OPERATORS = {"equal_to": "==", "not_equal_to": "!=", "less_than": "<", "less_than_or_equal_to": "<=",
              "greater_than": ">", "greater_than_or_equal_to": ">="}


def _constraint(check: pa.Check) -> str:
    if not check.description and check.name in _OPERATORS:
        operand = re.search(r"(?<=\().+(?=\))", check.error)
        return f"{_OPERATORS[check.name]} {operand.group(0) if operand else ''}"
    return _identifier(check)


def _identifier(check: pa.Check) -> str:
    return check.description or check.error or check.name or str(check)


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
