"""Card-day archetypes and the public coarsening the synthetic data's private queries count in.

Archetypes (the DeID2 taxi synthesizer's idea, seed ``deid2_taxi_synthesizer.txt``) group card-days that
travel alike, so that a few low-sensitivity counts per archetype suffice to generate rows. The seed fitted
Gaussian mixtures on a public data set; we have no public trip data, and fitting on the private trips
would make the archetypes themselves a private release. We therefore define them by **fixed rules from
public knowledge** of how people use a transit card (the 2016 Opal report's own vocabulary: peak
commuters, off-peak and weekend travel, multi-modal journeys), applied to each card-day's kept trips,
first rule that matches wins, so every card-day has exactly one archetype:

1. ``weekend``: the service date is a Saturday or Sunday (public calendar);
2. ``multi_modal``: a weekday card-day whose trips use two or more modes;
3. ``peak_commuter``: two or more trips, the first tapped on in the morning peak 06:00-09:59;
4. ``single_trip``: exactly one trip;
5. ``off_peak``: every other weekday card-day (two or more trips, one mode, first trip outside the peak).

The rules read nothing but the card-day's own trips and the date, so adding or removing one card changes
the archetype of that card's card-days only: the sensitivities of ``release.synthetic.queries`` hold.

Public coarsening of a trip: its mode, the hour of its tap-on (``tap_on_window // 4``), and the *district*
of its tap-on and tap-off stop: the band of 20 postcodes it lies in (``postcode // 20``, e.g. 2000-2019),
taken from the reference network, with one more district ``NONE`` for a missing tap-off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

from opal_dp.network import MODES
from opal_dp.prep.binning import stop_labels
from opal_dp.prep.schemas import UNKNOWN

ARCHETYPES = ("weekend", "multi_modal", "peak_commuter", "single_trip", "off_peak")
HOURS = 24
POSTCODES_PER_DISTRICT = 20
PEAK_WINDOWS = (6 * 4, 10 * 4)  # tap-on windows [24, 40): 06:00-09:59
CARD = "card_id"


@dataclass(frozen=True)
class Districts:
    """The public districts (postcode bands) and which of them each mode serves.

    ``names``: "2000-2019", ...; the last is ``"none"`` (no tap-off). ``of_mode[mode]``: the district
    indices (sorted) with a stop of that mode. ``lookup``: (mode code, location label code) -> district
    index, -1 where the label is not a stop of that mode; label codes are those of ``location_labels``.
    """

    names: tuple[str, ...]
    of_mode: dict[str, np.ndarray]
    lookup: np.ndarray
    labels: tuple[str, ...]

    @property
    def none(self) -> int:
        return len(self.names) - 1


def districts(stops: pd.DataFrame, labels: list[str]) -> Districts:
    """The districts of the reference network ``stops``; ``labels``: the public location label universe."""
    band = stops["postcode"].to_numpy(np.int64) // POSTCODES_PER_DISTRICT
    bands = np.unique(band)
    index = np.searchsorted(bands, band)
    names = tuple(f"{b * POSTCODES_PER_DISTRICT}-{b * POSTCODES_PER_DISTRICT + POSTCODES_PER_DISTRICT - 1}"
                  for b in bands) + ("none",)
    label_code = {label: i for i, label in enumerate(labels)}
    lookup = np.full((len(MODES), len(labels)), -1, dtype=np.int64)
    mode = stops["mode"].astype(str).to_numpy()
    for m, label, d in zip(mode, stop_labels(stops).to_numpy(), index):
        lookup[MODES.index(m), label_code[label]] = d
    of_mode = {m: np.unique(index[mode == m]) for m in MODES}
    return Districts(names, of_mode, lookup, tuple(labels))


def trip_features(trips: pd.DataFrame, dist: Districts) -> pd.DataFrame:
    """Binned trips (``CardBinnedTrips``) -> ``card_id, mode, hour, on_district, off_district`` (int codes)."""
    if tuple(trips["tap_on_loc"].cat.categories) != dist.labels:
        raise ValueError("the trips' location labels are not the reference network's label universe")
    mode = trips["mode"].cat.codes.to_numpy(np.int64)
    on = dist.lookup[mode, trips["tap_on_loc"].cat.codes.to_numpy(np.int64)]
    off_window = trips["tap_off_window"].to_numpy(np.int64)
    off = np.where(off_window == UNKNOWN, dist.none,
                   dist.lookup[mode, trips["tap_off_loc"].cat.codes.to_numpy(np.int64)])
    if (on < 0).any() or (off < 0).any():
        raise ValueError("a trip's location is not a stop of its mode in the reference network")
    return pd.DataFrame({
        CARD: trips[CARD].to_numpy(np.int64),
        "mode": mode,
        "hour": trips["tap_on_window"].to_numpy(np.int64) // 4,
        "window": trips["tap_on_window"].to_numpy(np.int64),
        "on_district": on,
        "off_district": off,
    })


def card_days(features: pd.DataFrame, day: date, max_trips: int) -> pd.DataFrame:
    """One row per card-day of one date, sorted by ``card_id``: ``archetype`` (index into ``ARCHETYPES``),
    ``trips`` (its number of trips, capped at ``max_trips``: trips beyond the bound are not counted) and
    ``returns`` (1 if it has two or more trips and its last trip, in tap-on order, ends in the district where its
    first began: the return-trip structure; else 0). Reads the card-day's own trips only."""
    order = np.lexsort((features["window"].to_numpy(np.int64), features[CARD].to_numpy(np.int64)))
    card = features[CARD].to_numpy(np.int64)[order]
    starts = np.flatnonzero(np.r_[True, card[1:] != card[:-1]]) if len(card) else np.zeros(0, np.int64)
    trips = np.diff(np.r_[starts, len(card)])
    if not len(card):
        modes = first = returns = trips
    else:
        modes = np.bitwise_or.reduceat(1 << features["mode"].to_numpy(np.int64)[order], starts)
        first = features["window"].to_numpy(np.int64)[order][starts]
        on, off = (features[c].to_numpy(np.int64)[order] for c in ("on_district", "off_district"))
        returns = ((trips >= 2) & (off[starts + trips - 1] == on[starts])).astype(np.int64)
    multi_modal = (modes & (modes - 1)) != 0  # two or more mode bits set
    if day.weekday() >= 5:
        archetype = np.zeros(len(starts), dtype=np.int64)
    else:
        peak = (first >= PEAK_WINDOWS[0]) & (first < PEAK_WINDOWS[1])
        archetype = np.select(
            [multi_modal, (trips >= 2) & peak, trips == 1],
            [ARCHETYPES.index("multi_modal"), ARCHETYPES.index("peak_commuter"), ARCHETYPES.index("single_trip")],
            default=ARCHETYPES.index("off_peak"),
        ).astype(np.int64)
    return pd.DataFrame({CARD: card[starts], "archetype": archetype, "trips": np.minimum(trips, max_trips),
                         "returns": returns})
