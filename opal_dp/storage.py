"""Parquet files written atomically: a reader (or a crash) never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet_atomic(frame: pd.DataFrame, path: Path, durable: bool = True) -> None:
    """Write next to ``path`` then rename over it: a killed process never leaves half a file.

    ``durable`` also fsyncs before the rename, so the file survives an OS crash or power loss too:
    needed for what the privacy ledger points at, not for intermediates that can be recomputed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    table = _table(frame)
    # Private intermediates favour speed over size: no compression, dictionaries only for categoricals.
    categorical = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    pq.write_table(table, tmp, compression="none", use_dictionary=categorical)
    if durable:
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def _table(frame: pd.DataFrame) -> pa.Table:
    """Arrow table of ``frame``. Parquet keeps no dictionary for a column without rows, so an empty
    categorical comes back with no categories, typed null; it is stored as string-valued, so that it
    reads back as an (empty) categorical again rather than decaying to object on the next round."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
        if pa.types.is_dictionary(f.type) and pa.types.is_null(f.type.value_type)
        else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))
