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

from opal_dp.network import MODES
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOW_MINUTES, CardBinnedTrips, CardDays, PartitionTrips


def stop_labels(stops: pd.DataFrame) -> pd.Series:
    """stop_id -> published location label (postcode for bus, name otherwise)."""
    label = stops["name"].astype(str).where(stops["mode"] != "bus", stops["postcode"].astype(str))
    return pd.Series(label.to_numpy(), index=stops["stop_id"].astype("int64"))


def location_points(stops: pd.DataFrame) -> pd.DataFrame:
    """Public coordinates of every (mode, location label): the stop's own, or for a bus postcode the mean of
    its bus stops'. Columns ``mode, loc, lat, lon``, sorted by mode and label."""
    points = pd.DataFrame({"mode": stops["mode"].astype(str).to_numpy(), "loc": stop_labels(stops).to_numpy(),
                           "lat": stops["lat"].to_numpy(), "lon": stops["lon"].to_numpy()})
    return points.groupby(["mode", "loc"], sort=True)[["lat", "lon"]].mean().reset_index()


def location_labels(stops: pd.DataFrame) -> list[str]:
    """Every label that can be published, plus "-1", in lexicographic order."""
    return sorted(set(stop_labels(stops)) | {UNKNOWN_LABEL})


NS_PER_WINDOW = WINDOW_MINUTES * 60 * 10**9


def time_window(times: pd.Series) -> np.ndarray:
    """15-minute window of the day (0..95), or -1 where the time is missing."""
    ns = times.to_numpy("datetime64[ns]").view(np.int64)
    window = (ns % (24 * 4 * NS_PER_WINDOW)) // NS_PER_WINDOW
    return np.where(times.isna().to_numpy(), UNKNOWN, window).astype("int16")


def window_label(window: int) -> str:
    """Window index -> start of the window as the release prints it ("H:MM"), "-1" if unknown."""
    if window == UNKNOWN:
        return UNKNOWN_LABEL
    hours, minutes = divmod(int(window) * WINDOW_MINUTES, 60)
    return f"{hours}:{minutes:02d}"


def bin_trips(trips: pd.DataFrame, stops: pd.DataFrame) -> pd.DataFrame:
    """Ingested trips -> binned trips, still with the card id (``CardBinnedTrips``), in the same row order."""
    categories = location_labels(stops)
    label_code = _label_codes(stops, categories)
    off_stop = trips["tap_off_stop"]
    off_code = np.full(len(trips), categories.index(UNKNOWN_LABEL), dtype=np.int32)
    has_off = off_stop.notna().to_numpy()
    off_code[has_off] = label_code[off_stop.to_numpy(np.int64, na_value=0)[has_off]]
    binned = pd.DataFrame(
        {
            "card_id": trips["card_id"].to_numpy(np.int64),
            "mode": pd.Categorical(trips["mode"], categories=list(MODES)),  # also for an empty day
            "tap_on_window": time_window(trips["tap_on_time"]),
            "tap_on_loc": pd.Categorical.from_codes(label_code[trips["tap_on_stop"].to_numpy(np.int64)], categories),
            "tap_off_window": time_window(trips["tap_off_time"]),
            "tap_off_loc": pd.Categorical.from_codes(off_code, categories),
        }
    )
    return CardBinnedTrips.validate(binned[list(CardBinnedTrips.to_schema().columns)], inplace=True)


def card_codes(binned: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each trip's card as a code, and the distinct card ids of one day's binned trips (``CardDays``, in first-seen
    order: the code is a card's place in it), from one hash pass over the card ids."""
    codes, cards = pd.factorize(binned["card_id"].to_numpy(np.int64))
    return codes, CardDays.validate(pd.DataFrame({"card_id": cards}), inplace=True)


def _label_codes(stops: pd.DataFrame, categories: list[str]) -> np.ndarray:
    """stop_id -> code of its label in ``categories`` (-1 for ids that are no stop)."""
    labels = stop_labels(stops)
    lookup = np.full(int(labels.index.max()) + 1, -1, dtype=np.int32)
    lookup[labels.index.to_numpy()] = pd.Index(categories).get_indexer(labels.to_numpy())
    return lookup


def split_by_mode(binned: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One (date, mode) partition: the mode's rows, without the now-constant mode column."""
    part = binned.loc[binned["mode"] == mode].drop(columns=["mode"]).reset_index(drop=True)
    return PartitionTrips.validate(part, inplace=True)
