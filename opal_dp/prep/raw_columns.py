"""Raw columns (Arrow, as read from CSV or Parquet) -> typed numpy arrays plus what was present.

Every function returns ``(values, present, valid)``: ``present`` is "not null and not blank",
``valid`` is "present and of the right type"; ``values`` is only meaningful where ``valid``.
Vectorised throughout: the typed Parquet path never touches a Python object per row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

NAT = np.iinfo(np.int64).min
MAX_ID = 2**62
SYNTHETIC_ID_LOW = 2**61
"""Card ids in [SYNTHETIC_ID_LOW, MAX_ID) are synthetic cards' (``release.synthetic.generator``); ingest rejects them."""


def present(column: pa.ChunkedArray) -> np.ndarray:
    mask = pc.is_valid(column)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        mask = pc.and_(mask, pc.not_equal(pc.utf8_trim_whitespace(column), ""))
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool) if len(column) else np.zeros(0, bool)


def integers(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    here = present(column)
    kind = column.type
    if pa.types.is_integer(kind):
        values = pc.fill_null(column, 0).to_numpy().astype(np.int64, copy=False)
        return values, here, here & (np.abs(values) < MAX_ID)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_floating(kind):
        numbers = pd.to_numeric(pd.Series(column.to_numpy(zero_copy_only=False)), errors="coerce").to_numpy(float)
        whole = here & np.isfinite(numbers) & (numbers == np.floor(numbers)) & (np.abs(numbers) < MAX_ID)
        return np.where(whole, numbers, 0).astype(np.int64), here, whole
    return np.zeros(len(column), np.int64), here, np.zeros(len(column), bool)


# A UTC offset or "Z" after the time of day: such a time is not local, so the value is invalid.
UTC_OFFSET = r"[T ]\d{1,2}(?::?\d{2}){0,2}(?:[.,]\d+)?\s*(?:Z|[+-]\d{2}(?::?\d{2})?)\s*$"
NS_PER_UNIT = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def timestamps(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Naive local timestamps as int64 nanoseconds. Time-zone-aware values are not local, and values
    outside the nanosecond range (years 1678-2261) cannot be trips: both invalid."""
    here = present(column)
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is None:
        raw = pc.fill_null(pc.cast(column, pa.int64()), 0).to_numpy()
        factor = NS_PER_UNIT[kind.unit]
        fits = here & (np.abs(raw) < np.iinfo(np.int64).max // factor)
        values = np.where(fits, raw, 0) * factor
        return values, here, fits & (values != NAT)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pd.Series(column.to_numpy(zero_copy_only=False), dtype=object).astype("string")
        local = text.where(~text.str.contains(UTC_OFFSET, na=False))
        parsed = pd.to_datetime(local, format="ISO8601", errors="coerce")
        values = parsed.to_numpy("datetime64[ns]").view(np.int64)
        return values, here, here & (values != NAT)
    return np.zeros(len(column), np.int64), here, np.zeros(len(column), bool)


def categories(column: pa.ChunkedArray, allowed: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes into ``allowed`` (-1 elsewhere); exact, case-sensitive match."""
    here = present(column)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = pc.cast(column, pa.string())
    encoded = pc.dictionary_encode(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    lookup = np.array([allowed.index(v) if v in allowed else -1 for v in encoded.dictionary.to_pylist()] + [-1])
    indices = encoded.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False)
    codes = lookup[indices]
    return codes, here, here & (codes >= 0)
