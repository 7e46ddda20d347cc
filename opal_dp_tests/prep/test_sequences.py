"""Card-day sequences: public alphabet and taxonomy, tap-on order, truncation at h, no card id."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from opal_dp.network import MODES, load_stops
from opal_dp.prep import sequences
from opal_dp.prep.sequences import PAD, TripAlphabet, card_day_sequences, from_frame, to_frame, trip_alphabet


@pytest.fixture(scope="module")
def alphabet() -> TripAlphabet:
    return TripAlphabet.from_stops(load_stops())


def test_the_alphabet_is_built_once_per_stop_list_and_again_for_an_edited_one():
    """``trip_alphabet`` (``network.per_stop_list``) keys on the stop list's content: an equal copy gets the
    same alphabet without a rebuild; a renamed stop gets its own, equal to a fresh ``from_stops``."""
    stops = load_stops()
    trip_alphabet.cache_clear()
    first = trip_alphabet(stops)
    assert trip_alphabet(stops.copy()) is first
    assert first.symbols.equals(TripAlphabet.from_stops(stops).symbols)
    edited = stops.copy()
    edited.loc[edited["mode"] == "train", "name"] = edited.loc[edited["mode"] == "train", "name"] + " (new)"
    other = trip_alphabet(edited)
    assert other is not first
    assert other.symbols.equals(TripAlphabet.from_stops(edited).symbols)
    assert not other.symbols.equals(first.symbols)
    assert trip_alphabet(edited[["mode", "name", "postcode", "stop_id", "lat", "lon"]]) is not other  # columns count
    trip_alphabet.cache_clear()
    assert trip_alphabet(stops) is not first


def binned(rows):
    """rows: (card, mode, on window, on loc, off window, off loc)."""
    frame = pd.DataFrame(rows, columns=["card_id", "mode", "tap_on_window", "tap_on_loc", "tap_off_window",
                                        "tap_off_loc"])
    labels = sorted(set(frame["tap_on_loc"]) | set(frame["tap_off_loc"]))
    return frame.assign(mode=pd.Categorical(frame["mode"], categories=list(MODES)),
                        tap_on_loc=pd.Categorical(frame["tap_on_loc"], categories=labels),
                        tap_off_loc=pd.Categorical(frame["tap_off_loc"], categories=labels),
                        tap_on_window=frame["tap_on_window"].astype("int16"),
                        tap_off_window=frame["tap_off_window"].astype("int16"))


def test_alphabet_groups_symbols_by_origin_and_destination_district(alphabet):
    group = alphabet.group_of
    assert (np.diff(group) >= 0).all()  # one range per group
    sizes = np.bincount(group)
    assert (sizes == alphabet.groups["size"].to_numpy()).all()
    assert (alphabet.groups["first"].to_numpy() == np.r_[0, np.cumsum(sizes)[:-1]]).all()
    stops = load_stops()
    town_hall = stops.loc[stops["name"] == "Town Hall"].iloc[0]
    sym = alphabet.encode(["train"], ["Central"], ["Town Hall"])[0]
    g = alphabet.groups.iloc[alphabet.group_of[sym]]
    assert (g["mode"], g["origin"], g["destination_district"]) == ("train", "Central", f"{town_hall.postcode // 10}x")
    assert alphabet.groups.iloc[alphabet.group_of[alphabet.encode(["bus"], ["2000"], ["-1"])[0]]]["size"] == 1
    assert not alphabet.symbols.duplicated(["mode", "origin", "destination"]).any()
    assert (alphabet.symbols["origin"] != "-1").all()


def test_outside_the_alphabet_is_an_error(alphabet):
    with pytest.raises(ValueError, match="outside the public OD alphabet"):
        alphabet.encode(["train"], ["Nowhere"], ["Central"])


def test_sequences_in_tap_on_order_truncated(alphabet):
    rows = [(7, "train", 40, "Central", 42, "Town Hall"), (7, "bus", 10, "2000", 12, "2010"),
            (7, "train", 60, "Town Hall", -1, "-1"), (9, "bus", 5, "2010", 7, "2000")]
    seqs = card_day_sequences(binned(rows), alphabet, height=2)
    assert seqs.shape == (2, 2)
    by_len = sorted(map(tuple, seqs), key=lambda s: sum(x != PAD for x in s))
    assert by_len[0] == (alphabet.encode(["bus"], ["2010"], ["2000"])[0], PAD)
    assert by_len[1] == tuple(alphabet.encode(["bus", "train"], ["2000", "Central"], ["2010", "Town Hall"]))
    assert (from_frame(to_frame(seqs)) == seqs).all()
    assert card_day_sequences(binned(rows)[:0], alphabet, 3).shape == (0, 3)
    with pytest.raises(ValueError, match="height"):
        card_day_sequences(binned(rows), alphabet, 0)


def test_an_alphabet_too_large_for_the_sort_key_is_refused(alphabet, monkeypatch):
    """The card, the windows and the symbol share one 64-bit sort key, and the symbols are read back from it: a
    symbol wider than its bits would come back as another symbol."""
    rows = [(7, "bus", 10, "2000", 12, "2010")]
    monkeypatch.setattr(sequences, "SYMBOL_BITS", (len(alphabet.symbols) - 1).bit_length() - 1)
    with pytest.raises(ValueError, match="sort key"):
        card_day_sequences(binned(rows), alphabet, 2)
    monkeypatch.setattr(sequences, "SYMBOL_BITS", (len(alphabet.symbols) - 1).bit_length())
    assert card_day_sequences(binned(rows), alphabet, 2).shape == (1, 2)
