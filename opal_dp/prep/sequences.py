"""Per card-day trip sequences for the OD prefix tree (Montreal seed §3), and their public alphabet.

A *symbol* is one trip's ``(mode, origin, destination)``: the tap-on and tap-off location labels of the
marginals (postcode for bus, name otherwise, ``-1`` for a missing tap-off). The alphabet and its taxonomy
come from the public stop list only, never from the data:

    symbol (mode, origin, destination) -> group (mode, origin, destination district) -> mode

A location's district is its postcode's first three digits (``2000..2009`` -> ``200x``; the stop's own
postcode for a station, wharf or light-rail stop); ``-1`` is its own district. The prefix tree's generalised
level is the group: a mean fan-out of 6.6 symbols per group, close to the seed's (stations per metro line). A
district pair on both ends (fan-out 44) leaves the generalised level only ``2/f`` of each level's budget, and
measured worse on our data (one scale-1.0 day, epsilon 1, h 4: OD L1 error 0.54 against 0.46). Symbols are
numbered so that the symbols of one group are consecutive: the tree's non-generalised children of a group are
then one range of ids.

Unit: the card-day. A sequence is every trip of one card on one service day in tap-on order (ties: tap-off
window, then symbol), truncated to the public height ``h``. Why the card-day and not the card over the period:
trips per card-day are few (at most 5 in our data, mostly 1-2), so a small ``h`` keeps almost every trip and
the OD counts are nearly complete; over a fortnight a card makes up to ~28 trips and truncating them at any
``h`` the tree can afford drops most of them. The card-day is also the marginals' ``card_day`` unit, so both
releases are charged to the same ledger scope (the date). Neighbouring inputs differ by one card-day's whole
sequence: that is what the prefix tree's privacy argument (``core.prefix_tree``) protects.

The card id is used only to group the trips and is not kept: the output is private microdata all the same
(it lives under ``private/``), in CSPRNG-random row order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from opal_dp.core import SecureBits
from opal_dp.network import MODES, per_stop_list
from opal_dp.prep.binning import stop_labels
from opal_dp.prep.schemas import UNKNOWN_LABEL

PAD = -1
SYMBOL_BITS = 20  # of a card-day's sort key (``card_day_sequences``): the alphabet holds at most 2^20 symbols
"""Fills a sequence shorter than ``h``."""


def district_of(postcode: int) -> str:
    return f"{int(postcode) // 10}x"


@dataclass(frozen=True)
class TripAlphabet:
    """The public symbol universe and its taxonomy (module docstring).

    ``symbols``: one row per symbol id (``mode, origin, destination, group``); ``groups``: one row per group id
    (``mode, origin, destination_district, first, size``: its symbols are ids ``first .. first + size - 1``).
    """

    symbols: pd.DataFrame
    groups: pd.DataFrame

    @classmethod
    def from_stops(cls, stops: pd.DataFrame) -> TripAlphabet:
        labels = pd.DataFrame({"mode": stops["mode"].astype(str).to_numpy(), "loc": stop_labels(stops).to_numpy(),
                               "district": [district_of(p) for p in stops["postcode"]]})
        labels = labels.drop_duplicates(["mode", "loc"]).sort_values(["mode", "loc"], ignore_index=True)
        unknown = pd.DataFrame({"mode": [m for m in MODES if m in set(labels["mode"])], "loc": UNKNOWN_LABEL,
                                "district": UNKNOWN_LABEL})
        on = labels
        off = pd.concat([labels, unknown], ignore_index=True)
        rows = on.merge(off, on="mode", suffixes=("_on", "_off"))
        keys = ["mode", "loc_on", "district_off"]
        rows = rows.sort_values([*keys, "loc_off"], ignore_index=True)
        group = rows.groupby(keys, sort=False).ngroup().to_numpy(np.int32)
        symbols = pd.DataFrame({"mode": rows["mode"], "origin": rows["loc_on"], "destination": rows["loc_off"],
                                "group": group})
        first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        groups = rows.loc[first, keys].rename(columns={"loc_on": "origin", "district_off": "destination_district"})
        groups = groups.reset_index(drop=True).assign(first=first, size=np.diff(np.r_[first, len(rows)]))
        return cls(symbols, groups)

    @property
    def size(self) -> int:
        return len(self.symbols)

    @cached_property
    def group_of(self) -> np.ndarray:
        """Symbol id -> group id."""
        return self.symbols["group"].to_numpy(np.int64)

    @cached_property
    def _lookup(self) -> tuple[pd.Index, pd.Index, np.ndarray]:
        """Mode labels, location labels, and the dense table (mode, origin, destination) codes -> symbol id (-1)."""
        modes = pd.Index(sorted(set(self.symbols["mode"])))
        locs = pd.Index(sorted(set(self.symbols["origin"]) | set(self.symbols["destination"])))
        table = np.full(len(modes) * len(locs) ** 2, -1, dtype=np.int32)
        m, o, d = (idx.get_indexer(self.symbols[c]) for idx, c in ((modes, "mode"), (locs, "origin"),
                                                                     (locs, "destination")))
        table[(m * len(locs) + o) * len(locs) + d] = np.arange(len(self.symbols), dtype=np.int32)
        return modes, locs, table

    @cached_property
    def labels(self) -> np.ndarray:
        """Symbol id -> ``mode:origin>destination``, the form a published sequence writes a trip in."""
        return (self.symbols["mode"] + ":" + self.symbols["origin"] + ">" + self.symbols["destination"]).to_numpy()

    def encode(self, mode, origin, destination) -> np.ndarray:
        """Symbol ids of (mode, origin, destination) triples; a triple outside the public alphabet is an error.
        Categorical inputs are encoded through their categories (one lookup per category, not per row)."""
        ids = self.lookup(mode, origin, destination)
        if (ids < 0).any():
            i = int(np.flatnonzero(ids < 0)[0])
            raise ValueError(f"trip ({np.asarray(mode)[i]}, {np.asarray(origin)[i]}, {np.asarray(destination)[i]}) "
                             "is outside the public OD alphabet of the reference stop list")
        return ids

    def lookup(self, mode, origin, destination) -> np.ndarray:
        """``encode`` without the error: -1 for a triple outside the public alphabet."""
        modes, locs, table = self._lookup
        codes = []
        for values, labels in ((mode, modes), (origin, locs), (destination, locs)):
            cat = values.array if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype) \
                else pd.Categorical(np.asarray(values, dtype=object))
            lookup = np.append(labels.get_indexer(cat.categories.astype(str)), -1)
            codes.append(lookup[cat.codes])  # a missing value (code -1) maps to -1
        known = (codes[0] >= 0) & (codes[1] >= 0) & (codes[2] >= 0)  # not np.min(codes, axis=0): a strided pass
        ids = np.full(len(known), -1, dtype=np.int32)
        ids[known] = table[(codes[0][known] * len(locs) + codes[1][known]) * len(locs) + codes[2][known]]
        return ids


@per_stop_list
def trip_alphabet(stops: pd.DataFrame) -> TripAlphabet:
    """``TripAlphabet.from_stops``, built once per stop list in a process (shared: read-only)."""
    return TripAlphabet.from_stops(stops)


def card_day_sequences(binned: pd.DataFrame, alphabet: TripAlphabet, height: int,
                       cards: np.ndarray | None = None) -> np.ndarray:
    """One day's binned trips with card id (``CardBinnedTrips``) -> ``(card-days, height)`` int32 symbol ids,
    each row one card-day's trips in tap-on order truncated to ``height`` and padded with ``PAD``; rows in
    CSPRNG-random order, no card id. ``cards``: each trip's card code when the caller has it (``card_codes``)."""
    if isinstance(height, bool) or not isinstance(height, int) or height < 1:
        raise ValueError(f"height must be an integer >= 1, got {height!r}")
    if len(alphabet.symbols) > 1 << SYMBOL_BITS or len(binned) >= 1 << 28:
        raise ValueError(f"{len(alphabet.symbols)} symbols or {len(binned)} trips do not fit the sort key (at most "
                         f"2^{SYMBOL_BITS} symbols and 2^28 trips a day)")
    symbol = alphabet.encode(binned["mode"], binned["tap_on_loc"], binned["tap_off_loc"])
    card = pd.factorize(binned["card_id"].to_numpy(np.int64))[0] if cards is None else cards
    on_w = binned["tap_on_window"].to_numpy().astype(np.int64)
    off_w = binned["tap_off_window"].to_numpy().astype(np.int64) + 1  # -1 (unknown) first
    # card (under 2^28 per day), tap-on window (7 bits), tap-off window (8), symbol: one key holds the trip, so
    # sorting the keys sorts the trips (by card, then time) and the card and symbol are read back from them
    key = np.sort((((card.astype(np.int64) << 7 | on_w) << 8 | off_w) << SYMBOL_BITS) | symbol)
    card, symbol = key >> (15 + SYMBOL_BITS), (key & ((1 << SYMBOL_BITS) - 1)).astype(np.int32)
    starts = np.flatnonzero(np.r_[True, card[1:] != card[:-1]]) if len(card) else np.zeros(0, np.int64)
    rank = np.arange(len(card)) - np.repeat(starts, np.diff(np.r_[starts, len(card)]))
    row = np.cumsum(np.r_[True, card[1:] != card[:-1]])[rank < height] - 1 if len(card) else np.zeros(0, np.int64)
    out = np.full((len(starts), height), PAD, dtype=np.int32)
    out[row, rank[rank < height]] = symbol[rank < height]
    return out[np.argsort(SecureBits().words(len(out)))]


def to_frame(sequences: np.ndarray) -> pd.DataFrame:
    """Storage form: columns ``s0 .. s{h-1}``."""
    return pd.DataFrame({f"s{i}": sequences[:, i] for i in range(sequences.shape[1])})


def from_frame(frame: pd.DataFrame) -> np.ndarray:
    cols = [c for c in frame.columns if c.startswith("s")]
    return frame[sorted(cols, key=lambda c: int(c[1:]))].to_numpy(np.int32)
