"""Contribution bounding: keep at most what the privacy unit's public bounds allow of each card, then drop
the card id. The card id exists only for this step.

For a card-level unit (``core.units``), of each card-day at most ``m = max_trips_per_card_day`` trips are
kept, and never more than ``b = max_per_bin`` of them in one bin of any of the six marginals (tap-on and
tap-off time, location, and time x location); for ``card_period`` with ``max_days_per_card = D``, only D
of each card's travel days in the period are kept at all. Trips are considered in a pseudo-random
order and kept greedily while every bound holds, so which trips are kept is uniform-looking, not the
first k (that would bias the release towards mornings).

The order is a keyed pseudo-random function of the trip itself: AES-256 (``cryptography``) under the
``bounding`` key (``core.secrets``: drawn once from the OS CSPRNG, mode 0600) of one 16-byte block
(card id, date, mode, bins). Two consequences the privacy argument and the ledger rely on:

- the trips kept of a card depend only on that card's own trips, so removing one card changes the
  bounded data by exactly that card's kept trips: the sensitivities of ``core.units`` hold;
- the same input gives the same bounded data, so re-running the pipeline reproduces the mechanism
  input, and the ledger reuses the stored release instead of charging new noise.
Trips that tie (the same card, date and bins) are interchangeable: which one is kept changes nothing.

The trip unit keeps every trip. In both cases the kept rows are put in a uniformly random order from
the OS CSPRNG, so no row order can stand in for the card id. Rows in = rows kept + rows over the bound,
always; the rows over the bound are kept (without card id) for the internal utility report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from opal_dp.core import SecureBits
from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES
from opal_dp.prep.schemas import UNKNOWN, BinnedTrips

CARD = "card_id"
_CODE_BITS = 11  # location codes < 2048 (the public label universe has ~630 labels)


@dataclass(frozen=True)
class BoundedDay:
    """One service day after bounding: ``kept`` (the mechanism's input) and ``over_bound`` (the rest),
    both without the card id and in CSPRNG-random row order."""

    kept: pd.DataFrame
    over_bound: pd.DataFrame

    @property
    def share_dropped(self) -> float:
        total = len(self.kept) + len(self.over_bound)
        return len(self.over_bound) / total if total else 0.0


def bound_day(
    trips: pd.DataFrame,
    day: date,
    unit: PrivacyUnit,
    bounds: ContributionBounds,
    key: bytes,
    kept_cards: np.ndarray | None = None,
    card_codes: np.ndarray | None = None,
) -> BoundedDay:
    """Bound one day's binned trips (``BinnedTrips`` plus ``card_id``) for ``unit``.

    ``kept_cards``: for ``card_period`` with a day cap, the sorted card ids whose day this is one of
    their kept days (``select_card_days``); trips of other cards are over the bound. ``card_codes``: each trip's
    card as a code below 2^32 (``binning.card_codes``), when the caller has it: which trips are kept does not
    depend on the codes, only on which trips share a card (one code per card, one card per code).
    """
    keep = keep_mask(trips, day, unit, bounds, key, kept_cards, card_codes)
    binned = trips.drop(columns=[CARD])
    return BoundedDay(_shuffled(binned.loc[keep]), _shuffled(binned.loc[~keep]))


def keep_mask(
    trips: pd.DataFrame,
    day: date,
    unit: PrivacyUnit,
    bounds: ContributionBounds,
    key: bytes,
    kept_cards: np.ndarray | None = None,
    card_codes: np.ndarray | None = None,
) -> np.ndarray:
    """Which rows of one day's ``trips`` (with ``card_id``) the bounds keep, as ``bound_day`` keeps them; for
    callers that still need the card id of the kept trips (the synthetic data's card-day queries)."""
    keep = np.ones(len(trips), dtype=bool)
    if unit.bounds_cards:
        card = trips[CARD].to_numpy(np.int64)
        if kept_cards is not None:
            keep &= _member(card, kept_cards)
        codes = None if card_codes is None else _checked_codes(card_codes, len(trips))[keep]
        keep[keep] = _greedy_keep(trips.loc[keep], day, bounds, key, codes)
    return keep


def _checked_codes(card_codes: np.ndarray, trips: int) -> np.ndarray:
    """``card_codes`` if they are integers in [0, 2^32), one per trip: the greedy bound's sort key holds a code in 32
    bits, and two codes that agree there would be bounded as one card."""
    codes = np.asarray(card_codes)
    if codes.shape != (trips,) or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"card_codes must be {trips} integers, one per trip; got {codes.dtype} of shape {codes.shape}")
    if trips and (codes.min() < 0 or codes.max() >= 1 << 32):
        raise ValueError("card_codes must lie in [0, 2^32)")
    return codes


def select_card_days(card_days: pd.DataFrame, max_days: int, key: bytes) -> pd.DataFrame:
    """Of each card's travel days (``card_id``, ``date`` as ISO strings, one row per card-day), the at most
    ``max_days`` with the smallest keyed pseudo-random priority: a uniform-looking choice that depends
    only on the card's own days."""
    card = card_days[CARD].to_numpy(np.int64)
    ordinal = np.array([date.fromisoformat(d).toordinal() for d in card_days["date"]], dtype=np.uint64)
    priority = _prf(key, card, ordinal | np.uint64(1 << 63))  # top bit: never equal to a trip block
    order = np.lexsort((priority, card))
    rank = _rank_in_groups(card[order])
    return card_days.iloc[np.sort(order[rank < max_days])].reset_index(drop=True)


def _greedy_keep(trips: pd.DataFrame, day: date, bounds: ContributionBounds, key: bytes,
                 card_codes: np.ndarray | None = None) -> np.ndarray:
    """Keep mask: per card, trips in priority order while the card-day and per-bin bounds hold.

    Rows are sorted by (card, priority); slot s of a card-day is its s-th trip in that order. The first
    trip of a card-day always fits. A later trip is compared with the at most m trips already kept of its
    card-day (``kept_pos``), so the work is O(trips x m) whatever the data. ``card_codes``: the cards as codes
    below 2^32 (else factorized here); only which trips share a card matters.
    """
    n = len(trips)
    card = pd.factorize(trips[CARD].to_numpy(np.int64))[0] if card_codes is None else card_codes
    priority = _prf(key, trips[CARD].to_numpy(np.int64), _pack(trips, day))
    order = np.argsort((card.astype(np.uint64) << np.uint64(32)) | (priority >> np.uint64(32)), kind="stable")
    rank = _rank_in_groups(card[order])
    keep = np.zeros(n, dtype=bool)
    keep[order[rank == 0]] = True  # the first trip of every card-day fits any bound
    group = np.cumsum(rank == 0) - 1
    in_multi = (np.bincount(group) > 1)[group]  # sorted rows of card-days with a later trip to decide
    if not in_multi.any():
        return keep
    rows_of = order[in_multi]  # trip row of each decided position
    rank = rank[in_multi]
    group = np.cumsum(rank == 0) - 1
    m, per_bin = bounds.max_trips_per_card_day, bounds.per_bin
    bins = _marginal_bins(trips, rows_of)
    kept_pos = np.full((group[-1] + 1, m), -1, dtype=np.int64)
    kept_pos[:, 0] = np.flatnonzero(rank == 0)
    kept_count = np.ones(len(kept_pos), dtype=np.int64)
    narrow = rank.astype(np.uint16) if rank.max() < 1 << 16 else rank  # 16-bit keys: numpy sorts by radix
    by_slot = np.argsort(narrow, kind="stable")
    slot_starts = np.searchsorted(rank[by_slot], np.arange(int(rank.max()) + 2))
    for slot in range(1, int(rank.max()) + 1):
        pos = by_slot[slot_starts[slot] : slot_starts[slot + 1]]
        g = group[pos]
        pos, g = pos[kept_count[g] < m], g[kept_count[g] < m]
        earlier = kept_pos[g, : min(slot, m)]
        present = earlier >= 0
        fits = np.ones(pos.size, dtype=bool)
        for b in bins:
            fits &= ((b[earlier] == b[pos][:, None]) & present).sum(axis=1) < per_bin
        pos, g = pos[fits], g[fits]
        kept_pos[g, kept_count[g]] = pos
        kept_count[g] += 1
        keep[rows_of[pos]] = True
    return keep


def _marginal_bins(trips: pd.DataFrame, rows: np.ndarray) -> list[np.ndarray]:
    """One integer per trip in ``rows`` and marginal: its bin in each of the six marginals of its partition
    (the mode is part of every bin, as in ``core.units``)."""
    mode = trips["mode"].cat.codes.to_numpy()[rows].astype(np.int64)
    out = []
    for tap in ("on", "off"):
        window = trips[f"tap_{tap}_window"].to_numpy()[rows].astype(np.int64) - UNKNOWN
        loc = trips[f"tap_{tap}_loc"].cat.codes.to_numpy()[rows].astype(np.int64)
        for key in (window, loc, window * (1 << _CODE_BITS) + loc):
            out.append(key * len(MODES) + mode)
    return out


def _pack(trips: pd.DataFrame, day: date) -> np.ndarray:
    """The second half of a trip's PRF block: date, mode, windows and location codes, 57 bits."""
    on_code = trips["tap_on_loc"].cat.codes.to_numpy(np.int64)
    off_code = trips["tap_off_loc"].cat.codes.to_numpy(np.int64)
    if len(trips) and max(on_code.max(), off_code.max()) >= 1 << _CODE_BITS:
        raise ValueError(f"more than {1 << _CODE_BITS} location labels: widen the bounding PRF block")
    fields = (
        (np.full(len(trips), day.toordinal(), dtype=np.int64), 20),
        (trips["mode"].cat.codes.to_numpy(np.int64), 2),
        (trips["tap_on_window"].to_numpy(np.int64) - UNKNOWN, 7),
        (trips["tap_off_window"].to_numpy(np.int64) - UNKNOWN, 7),
        (on_code, _CODE_BITS),
        (off_code, _CODE_BITS),
    )
    packed = np.zeros(len(trips), dtype=np.uint64)
    for value, width in fields:
        packed = (packed << np.uint64(width)) | value.astype(np.uint64)
    return packed


def _prf(key: bytes, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """First 64 bits of AES-256_key(left || right) per element: a keyed pseudo-random function."""
    blocks = np.empty((len(left), 2), dtype="<u8")
    blocks[:, 0], blocks[:, 1] = left.astype(np.uint64), right
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    cipher = encryptor.update(blocks.tobytes()) + encryptor.finalize()
    return np.frombuffer(cipher, dtype="<u8").reshape(-1, 2)[:, 0].astype(np.uint64)


def _rank_in_groups(sorted_keys: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal keys (``sorted_keys`` sorted)."""
    n = len(sorted_keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    lengths = np.diff(np.append(starts, n))
    return np.arange(n) - np.repeat(starts, lengths)


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    at = np.searchsorted(sorted_set, values)
    found = np.zeros(len(values), dtype=bool)
    inside = at < len(sorted_set)
    found[inside] = sorted_set[at[inside]] == values[inside]
    return found


def _shuffled(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in a uniformly random order from the OS CSPRNG (ties of 64-bit keys: probability < n²/2^65)."""
    order = np.argsort(SecureBits().words(len(frame)))
    return BinnedTrips.validate(frame.take(order).reset_index(drop=True), inplace=True)
