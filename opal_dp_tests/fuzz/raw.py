"""Raw day files for the fuzz and crash tests, built from the reference network."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.network import MODES, load_stops
from opal_dp.prep.ingest import RAW_COLUMNS


@lru_cache(maxsize=1)
def stops() -> pd.DataFrame:
    return load_stops()


@lru_cache(maxsize=1)
def stops_by_mode() -> dict[str, np.ndarray]:
    table = stops()
    return {mode: table.loc[table["mode"] == mode, "stop_id"].to_numpy("int64") for mode in MODES}


def tiny_day(day: str, trips: int = 2_000, seed: int = 0) -> pd.DataFrame:
    """Valid trips of ``day`` between three busy stops per mode, 07:00-09:59, so that bins are released."""
    rng = np.random.default_rng(seed)
    mode = rng.choice(list(MODES), trips)
    on_stop, off_stop = np.empty(trips, "int64"), np.empty(trips, "int64")
    for name, ids in stops_by_mode().items():
        here = mode == name
        on_stop[here] = rng.choice(ids[:3], here.sum())
        off_stop[here] = rng.choice(ids[:3], here.sum())
    on = pd.Timestamp(day) + pd.to_timedelta(rng.integers(7 * 3600, 10 * 3600, trips), unit="s")
    return pd.DataFrame({
        "card_id": rng.permutation(np.arange(1, trips + 1)) * 7919,
        "mode": mode,
        "tap_on_time": on,
        "tap_on_stop": on_stop.astype("int32"),
        "tap_off_time": on + pd.to_timedelta(rng.integers(60, 3600, trips), unit="s"),
        "tap_off_stop": pd.array(off_stop, dtype="Int32"),
    })[list(RAW_COLUMNS)]


def write_day(folder: Path, day: str, trips: pd.DataFrame) -> Path:
    path = folder / f"trips_{day}.parquet"
    folder.mkdir(parents=True, exist_ok=True)
    trips.to_parquet(path, index=False)
    return path
