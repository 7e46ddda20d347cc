"""The public reference stop network (``data/reference/stops.csv``), free of Dagster.

One row per stop: ``stop_id`` (unique across modes), ``mode``, ``name`` (unique within
each non-bus mode; the published location for train, ferry and light rail), ``postcode``
(the published location for bus) and WGS84 ``lat``/``lon``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd

from opal_dp import settings

T = TypeVar("T")
MODES = ("bus", "ferry", "light_rail", "train")
STOPS_FILE = "stops.csv"
_DTYPES = {
    "stop_id": "int32",
    "mode": pd.CategoricalDtype(list(MODES)),
    "name": str,
    "postcode": "int16",
    "lat": "float64",
    "lon": "float64",
}


def load_stops(path: Path | None = None) -> pd.DataFrame:
    """Read the reference stop list with fixed dtypes, sorted by ``stop_id``."""
    stops = pd.read_csv(path or settings.reference_dir() / STOPS_FILE, dtype=_DTYPES)
    if stops["mode"].isna().any():
        raise ValueError(f"unknown mode in stop list; expected one of {MODES}")
    return stops[list(_DTYPES)].sort_values("stop_id", ignore_index=True)


def stops_version(stops: pd.DataFrame) -> str:
    """The stop list's content version (SHA-256 of its rows and columns): what the binning of a day depends on."""
    rows = pd.util.hash_pandas_object(stops, index=False).to_numpy().tobytes()
    return hashlib.sha256(rows + repr(list(stops.columns)).encode()).hexdigest()


def per_stop_list(build: Callable[[pd.DataFrame], T]) -> Callable[[pd.DataFrame], T]:
    """``build(stops)`` computed once per distinct stop list in a process (keyed on its content, so an edited
    list is a new key): the tables derived from the public reference (the OD alphabet, the OD domain) take a
    tenth of a second each, and the publish step needs them for every date. The result is shared: treat it as
    read-only. ``cache_clear()`` empties the cache."""
    cache: dict[bytes, T] = {}

    @functools.wraps(build)
    def cached(stops: pd.DataFrame) -> T:
        key = stops_version(stops)
        if key not in cache:
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            cache[key] = build(stops)
        return cache[key]

    cached.cache_clear = cache.clear  # type: ignore[attr-defined]
    return cached
