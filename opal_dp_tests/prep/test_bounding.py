"""Contribution bounding: the bounds hold, nothing is lost, a card's selection depends on its own trips only
(so removing a card removes exactly its kept trips), the choice is uniform, and reruns reproduce it."""

from __future__ import annotations

import math
from collections import Counter
from datetime import date
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES
from opal_dp.prep.bounding import bound_day, select_card_days
from opal_dp_tests.core.helpers import ALPHA

DAY = date(2016, 7, 25)
LABELS = ["-1", "2000", "2010", "Central", "Manly", "Wynyard"]
COLUMNS = ["mode", "tap_on_window", "tap_on_loc", "tap_off_window", "tap_off_loc"]


def trips(rows: list[tuple[int, int, int, int, int, int]]) -> pd.DataFrame:
    """rows: (card, mode code, on window, on label code, off window, off label code)."""
    frame = pd.DataFrame(rows, columns=["card", "mode", "on_w", "on_l", "off_w", "off_l"])
    return pd.DataFrame({
        "tap_on_window": frame["on_w"].astype("int16"),
        "tap_on_loc": pd.Categorical.from_codes(frame["on_l"], categories=LABELS),
        "tap_off_window": frame["off_w"].astype("int16"),
        "tap_off_loc": pd.Categorical.from_codes(frame["off_l"], categories=LABELS),
        "mode": pd.Categorical.from_codes(frame["mode"], categories=list(MODES)),
        "card_id": frame["card"].astype("int64") + 1,
    })


def multiset(frame: pd.DataFrame) -> Counter:
    return Counter(map(tuple, frame[COLUMNS].astype(str).to_numpy()))


trip_rows = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 95), st.integers(1, 5), st.integers(-1, 95),
              st.integers(0, 5)),
    max_size=80,
)
bounds_st = st.builds(ContributionBounds, st.integers(1, 5), st.integers(1, 3))


def _bins(frame: pd.DataFrame) -> list[pd.Series]:
    out = []
    for tap in ("on", "off"):
        w, loc = frame[f"tap_{tap}_window"].astype(str), frame[f"tap_{tap}_loc"].astype(str)
        out += [w, loc, w + "@" + loc]
    return [b + "/" + frame["mode"].astype(str) for b in out]


@settings(max_examples=200, deadline=None)
@given(rows=trip_rows, bounds=bounds_st)
def test_bounds_hold_and_nothing_is_lost(rows, bounds):
    data = trips(rows)
    key = b"\x01" * 32
    kept_idx = _kept_rows(data, bounds, key)
    result = bound_day(data, DAY, PrivacyUnit.CARD_DAY, bounds, key)
    assert len(result.kept) + len(result.over_bound) == len(data)
    assert multiset(result.kept) + multiset(result.over_bound) == multiset(data)
    assert "card_id" not in result.kept.columns and "card_id" not in result.over_bound.columns
    kept = data.iloc[kept_idx]
    assert multiset(kept) == multiset(result.kept)
    assert (kept.groupby("card_id").size() <= bounds.max_trips_per_card_day).all()
    for b in _bins(kept):
        assert (kept.groupby([kept["card_id"], b]).size() <= bounds.per_bin).all()
    # greedy: a card-day with fewer kept trips than m had every other trip blocked by a per-bin bound
    for card, mine in data.groupby("card_id"):
        if len(kept[kept["card_id"] == card]) < min(len(mine), bounds.max_trips_per_card_day):
            assert bounds.per_bin < bounds.max_trips_per_card_day


def _kept_rows(data: pd.DataFrame, bounds: ContributionBounds, key: bytes) -> np.ndarray:
    """Positions of the kept rows (bound_day shuffles them; this recovers them through a row tag)."""
    from opal_dp.prep.bounding import _greedy_keep

    return np.flatnonzero(_greedy_keep(data, DAY, bounds, key)) if len(data) else np.zeros(0, int)


@settings(max_examples=150, deadline=None)
@given(rows=trip_rows, bounds=bounds_st, kept_cards=st.none() | st.sets(st.integers(1, 7)), seed=st.integers(0, 99))
def test_the_trips_kept_do_not_depend_on_the_card_codes_given(rows, bounds, kept_cards, seed):
    """``card_codes`` (the day pass's, from ``card_codes``) only says which trips share a card: any injective codes
    keep the same rows as the codes factorized inside."""
    from opal_dp.prep.bounding import keep_mask

    data, key = trips(rows), b"\x03" * 32
    cards = None if kept_cards is None else np.array(sorted(kept_cards), dtype=np.int64)
    codes = np.random.default_rng(seed).permutation(8)[data["card_id"].to_numpy() - 1] * 1000 + 7
    chosen = keep_mask(data, DAY, PrivacyUnit.CARD_PERIOD, bounds, key, cards)
    assert keep_mask(data, DAY, PrivacyUnit.CARD_PERIOD, bounds, key, cards, codes).tolist() == chosen.tolist()


def test_card_codes_that_would_merge_cards_in_the_sort_key_are_refused():
    """The greedy bound keeps a code in 32 bits: codes 0 and 2^32 would be one card, its bound broken."""
    from opal_dp.prep.bounding import keep_mask

    data, bounds = trips([(c, 0, w, w, w, w) for c in (0, 1) for w in range(6)]), ContributionBounds(2, 1)  # bins apart
    ok = np.repeat([0, 1], 6)
    assert keep_mask(data, DAY, PrivacyUnit.CARD_PERIOD, bounds, b"\x04" * 32, card_codes=ok).sum() == 4
    for bad in (np.repeat([0, 1 << 32], 6), np.repeat([-1, 0], 6), ok[:-1], ok.astype(float)):
        with pytest.raises(ValueError, match="card_codes"):
            keep_mask(data, DAY, PrivacyUnit.CARD_PERIOD, bounds, b"\x04" * 32, card_codes=bad)


@settings(max_examples=150, deadline=None)
@given(rows=trip_rows, bounds=bounds_st, removed=st.integers(1, 7))
def test_removing_a_card_removes_exactly_its_kept_trips(rows, bounds, removed):
    """The stability the sensitivity argument needs: every other card's kept trips are unchanged."""
    data, key = trips(rows), b"\x02" * 32
    full = bound_day(data, DAY, PrivacyUnit.CARD_DAY, bounds, key)
    without = bound_day(data[data["card_id"] != removed].reset_index(drop=True), DAY, PrivacyUnit.CARD_DAY,
                        bounds, key)
    mine = data[data["card_id"] == removed].reset_index(drop=True)
    own = bound_day(mine, DAY, PrivacyUnit.CARD_DAY, bounds, key) if len(mine) else None
    assert multiset(full.kept) == multiset(without.kept) + (multiset(own.kept) if own else Counter())


def test_rerun_reproduces_and_another_key_chooses_differently():
    rows = [(c, 3, w, 1 + w % 5, w + 2, 2) for c in range(200) for w in range(20, 28)]  # 8 trips per card
    data, bounds = trips(rows), ContributionBounds(3, 1)
    a = bound_day(data, DAY, PrivacyUnit.CARD_DAY, bounds, b"a" * 32)
    assert multiset(a.kept) == multiset(bound_day(data, DAY, PrivacyUnit.CARD_DAY, bounds, b"a" * 32).kept)
    assert multiset(a.kept) != multiset(bound_day(data, DAY, PrivacyUnit.CARD_DAY, bounds, b"b" * 32).kept)
    assert a.kept["tap_on_window"].tolist() != sorted(a.kept["tap_on_window"])  # rows not left in time order


def test_the_trip_unit_keeps_every_trip():
    data = trips([(0, 0, w, 1, w + 1, 1) for w in range(50)])
    result = bound_day(data, DAY, PrivacyUnit.TRIP, ContributionBounds(1, 1), b"k" * 32)
    assert len(result.kept) == 50 and result.over_bound.empty and result.share_dropped == 0


def test_hundreds_of_trips_of_one_card_in_one_bin_count_once():
    data = trips([(0, 3, 32, 3, 34, 4)] * 300 + [(c, 3, 32, 3, 34, 4) for c in range(1, 11)])
    result = bound_day(data, DAY, PrivacyUnit.CARD_DAY, ContributionBounds(4, 1), b"k" * 32)
    assert len(result.kept) == 11 and len(result.over_bound) == 299


def test_the_choice_is_uniform_not_the_first_trips():
    """A card with 5 trips in distinct bins, at most 2 kept: over 6,000 keys each of the 10 pairs is kept
    equally often (chi-square, false-failure rate 1e-6), so mornings are not favoured."""
    rows = [(0, 3, w, 1 + i, w + 3, 5 - i) for i, w in enumerate((28, 36, 48, 64, 72))]
    data, bounds = trips(rows), ContributionBounds(2, 1)
    pairs = {pair: 0 for pair in combinations(range(5), 2)}
    n, keys = 6_000, np.random.default_rng(11)  # seeded keys: the outcome is fixed
    for _ in range(n):
        kept = tuple(sorted(int(w) for w in _kept_rows(data, bounds, keys.bytes(32))))
        pairs[kept] += 1
    assert stats.chisquare(list(pairs.values())).pvalue > ALPHA


def test_day_cap_keeps_at_most_d_days_chosen_from_the_card_alone():
    days = [f"2016-07-{d}" for d in range(18, 32)]
    card_days = pd.DataFrame({"card_id": np.repeat(np.arange(1, 301), 14), "date": days * 300})
    key = b"d" * 32
    chosen = select_card_days(card_days, 10, key)
    assert (chosen.groupby("card_id").size() == 10).all()
    alone = select_card_days(card_days[card_days["card_id"] == 7], 10, key)
    assert sorted(alone["date"]) == sorted(chosen[chosen["card_id"] == 7]["date"])
    # uniform over days: each day is kept for a share 10/14 of the 300 cards (binomial, 1e-6 per day)
    counts = chosen["date"].value_counts().reindex(days)
    z = stats.norm.isf(ALPHA / (2 * len(days)))
    sd = math.sqrt(300 * (10 / 14) * (4 / 14))
    assert (abs(counts - 300 * 10 / 14) <= z * sd).all()


def test_day_cap_excludes_the_other_days_of_a_card():
    data = trips([(0, 3, 30, 1, 31, 2), (1, 3, 30, 1, 31, 2)])
    result = bound_day(data, DAY, PrivacyUnit.CARD_PERIOD, ContributionBounds(4, 1, 1), b"k" * 32,
                       kept_cards=np.array([2], dtype=np.int64))
    assert len(result.kept) == 1 and len(result.over_bound) == 1


@pytest.mark.parametrize("unit", [PrivacyUnit.CARD_DAY, PrivacyUnit.CARD_PERIOD])
def test_empty_day(unit):
    result = bound_day(trips([]), DAY, unit, ContributionBounds(), b"k" * 32)
    assert result.kept.empty and result.over_bound.empty and result.share_dropped == 0
