"""Row order cannot stand in for the card id: bounding and card-day sequences put their rows in a random order.

Kills the mutation "both shuffles removed" (``prep.bounding._shuffled`` and the last line of
``prep.sequences.card_day_sequences`` returning rows in input order): the input lists each card's rows together
(sorted by card, as a raw file often is), so without the shuffle a card's rows stay consecutive.

False-failure bounds (uniform random order, exact or by factorial moments; sum over this file below 3e-9):

- bounding: one card's k = 6 rows among n rows are all consecutive with probability (n - k + 1) / C(n, k),
  2.5e-11 for the n = 496 rows here (asserted in the test), for each of 3 units;
- sequences: X = the number of successions (card i's row directly followed by card i + 1's) in a uniform
  permutation of n rows has E[C(X, t)] = C(n-1, t) (n-t)! / n! <= 1 / t!, so P(X >= 12) <= 1/12! < 2.1e-9.
"""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pandas as pd
import pytest

from opal_dp.audit.card_level import trips_of
from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES, load_stops
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.sequences import TripAlphabet, card_day_sequences

CARD_ROWS = 6
SUCCESSIONS = 12


@pytest.mark.parametrize("unit", [PrivacyUnit.TRIP, PrivacyUnit.CARD_DAY, PrivacyUnit.CARD_PERIOD])
def test_one_cards_rows_are_not_kept_together(unit):
    """The audited card (card 1) has its own bin (label L0) and its 6 rows last in the input."""
    others = (0,) + (10,) * 49
    trips = trips_of(others, (CARD_ROWS,))
    n = len(trips)
    assert (n - CARD_ROWS + 1) / math.comb(n, CARD_ROWS) < 2.5e-11
    bounds = ContributionBounds(max_trips_per_card_day=CARD_ROWS, max_per_bin=CARD_ROWS)
    kept = bound_day(trips, date(2016, 7, 25), unit, bounds, bytes(32)).kept
    rows = np.flatnonzero(kept["tap_on_loc"].astype(str).to_numpy() == "L0")
    assert len(kept) == n and len(rows) == CARD_ROWS
    assert rows[-1] - rows[0] > CARD_ROWS - 1, "the card's rows are consecutive: the row order shows the card"


def test_card_day_sequences_are_not_in_card_order():
    """Card i (of 400, in input order) travels once with its own symbol; the rows must not follow card order."""
    alphabet = TripAlphabet.from_stops(load_stops())
    symbols = alphabet.symbols.iloc[:400]
    labels = sorted(set(symbols["origin"]) | set(symbols["destination"]))
    binned = pd.DataFrame({
        "card_id": np.arange(400, dtype=np.int64) * 7 + 3,
        "mode": pd.Categorical(symbols["mode"].astype(str), categories=list(MODES)),
        "tap_on_window": np.full(400, 30, dtype="int16"),
        "tap_on_loc": pd.Categorical(symbols["origin"], categories=labels),
        "tap_off_window": np.full(400, 31, dtype="int16"),
        "tap_off_loc": pd.Categorical(symbols["destination"], categories=labels),
    })
    card_of_row = alphabet.encode(binned["mode"], binned["tap_on_loc"], binned["tap_off_loc"])
    rows = card_day_sequences(binned, alphabet, 2)[:, 0]
    position = np.searchsorted(card_of_row, rows)  # symbols are increasing in card order
    assert np.array_equal(card_of_row[position], rows)
    successions = int(np.count_nonzero(np.diff(position) == 1))
    assert successions < SUCCESSIONS, f"{successions} of 399 cards follow their predecessor: rows in card order"
