"""Coarsen trips (seed §4.1 steps 2-3): 15-minute windows and published location labels.

- A time becomes the index of its 15-minute window within its own day, 0 (00:00-00:14) to 95
  (23:45-23:59). The service date of a trip is its tap-on date (the raw file's day), so a trip from
  23:50 to 00:20 belongs to its tap-on day with tap-off window 1 (00:15).
- Bus stops collapse to their postcode; train stations, ferry wharves and light-rail stops keep their
  name. A missing tap-off becomes window -1 and location "-1", as in the real release.
- Location labels form one public, sorted universe (``location_labels``), taken from the reference
  network, never from the data: category codes therefore order bins the same way on every input.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOW_MINUTES, BinnedTrips, PartitionTrips


def stop_labels(stops: pd.DataFrame) -> pd.Series:
    """stop_id -> published location label (postcode for bus, name otherwise)."""
    label = stops["name"].astype(str).where(stops["mode"] != "bus", stops["postcode"].astype(str))
    return pd.Series(label.to_numpy(), index=stops["stop_id"].astype("int64"))


def location_labels(stops: pd.DataFrame) -> list[str]:
    """Every label that can be published, plus "-1", in lexicographic order."""
    return sorted(set(stop_labels(stops)) | {UNKNOWN_LABEL})


def time_window(times: pd.Series) -> np.ndarray:
    """15-minute window of the day (0..95), or -1 where the time is missing."""
    minutes = times.dt.hour * 60 + times.dt.minute
    return (minutes // WINDOW_MINUTES).fillna(UNKNOWN).to_numpy("int16")


def window_label(window: int) -> str:
    """Window index -> start of the window as the release prints it ("H:MM"), "-1" if unknown."""
    if window == UNKNOWN:
        return UNKNOWN_LABEL
    hours, minutes = divmod(int(window) * WINDOW_MINUTES, 60)
    return f"{hours}:{minutes:02d}"


def bin_trips(trips: pd.DataFrame, stops: pd.DataFrame) -> pd.DataFrame:
    labels = stop_labels(stops)
    categories = location_labels(stops)
    off_stop = trips["tap_off_stop"].astype("Int64")
    binned = pd.DataFrame(
        {
            "mode": trips["mode"],
            "tap_on_window": time_window(trips["tap_on_time"]),
            "tap_on_loc": pd.Categorical(trips["tap_on_stop"].map(labels), categories=categories),
            "tap_off_window": time_window(trips["tap_off_time"]),
            "tap_off_loc": pd.Categorical(
                off_stop.map(labels).fillna(UNKNOWN_LABEL).astype(str), categories=categories
            ),
        }
    )
    return BinnedTrips.validate(binned)


def split_by_mode(binned: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One (date, mode) partition: the mode's rows, without the now-constant mode column."""
    part = binned.loc[binned["mode"] == mode].drop(columns=["mode"]).reset_index(drop=True)
    return PartitionTrips.validate(part)
