"""The public reference stop network (``data/reference/stops.csv``), free of Dagster.

One row per stop: ``stop_id`` (unique across modes), ``mode``, ``name`` (unique within
each non-bus mode; the published location for train, ferry and light rail), ``postcode``
(the published location for bus) and WGS84 ``lat``/``lon``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from opal_dp import settings

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
