"""Oracle for ``core.units.sensitivity``: the sensitivity measured on real data, independently of the formula.

A card travels on every day of a period in the worst patterns the bounds allow (spread over many bins, piled
into one bin, stacked b deep in several bins); the production bounding (``prep.bounding.bound_day``) runs on
each day with and without the card, and the six marginals' histograms over (date, bin) are compared. The
largest change seen in L0, L1, sum of squares and Linf must equal the formula's value (the patterns reach
each bound) and never exceed it.

Kills the mutation "days of a period set to 1" in ``core.units``: the formula would then give one card-day's
sensitivity, 14 times too small in L0, L1 and L2 squared for the 14-day period here.
"""

from __future__ import annotations

import os
from datetime import date

import numpy as np
import pandas as pd
import pytest

from opal_dp.audit.card_level import trips_of
from opal_dp.core import ContributionBounds, PrivacyUnit, Relation, Sensitivity, sensitivity
from opal_dp.prep.bounding import bound_day
from opal_dp.release.marginals.tables import COUNT, histograms

BOUNDS = ContributionBounds(max_trips_per_card_day=4, max_per_bin=2)
FIRST_DAY = date(2016, 7, 25)


def patterns(bounds: ContributionBounds) -> dict[str, tuple[int, ...]]:
    """The audited card's trips per bin, for one day (other cards: one trip in each of these bins)."""
    m, b = bounds.max_trips_per_card_day, bounds.per_bin
    return {"spread": (1,) * (2 * m), "pile": (3 * m,), "stacks": (b + 1,) * m}


def period_histograms(card: tuple[int, ...], days: int, with_card: bool, key: bytes) -> dict[tuple, int]:
    """{(marginal, date, bin...): count} of every marginal over ``days`` days, after the real bounding."""
    out: dict[tuple, int] = {}
    for i in range(days):
        day = date.fromordinal(FIRST_DAY.toordinal() + i)
        trips = trips_of((1,) * len(card), card)
        if not with_card:
            trips = trips[trips["card_id"] != 1]
        kept = bound_day(trips, day, PrivacyUnit.CARD_PERIOD, BOUNDS, key).kept
        for name, hist in histograms(kept).items():
            bins = hist.drop(columns=[COUNT]).astype(str).itertuples(index=False, name=None)
            out.update({(name, i, *b): int(c) for b, c in zip(bins, hist[COUNT])})
    return out


def measured(days: int) -> dict[str, int]:
    """The largest change of one marginal's period histogram when the card is removed, over the patterns."""
    worst = {"l0": 0, "l1": 0, "l2_squared": 0, "linf": 0}
    key = os.urandom(32)
    for card in patterns(BOUNDS).values():
        d, d_prime = period_histograms(card, days, True, key), period_histograms(card, days, False, key)
        diff = pd.Series({k: d.get(k, 0) - d_prime.get(k, 0) for k in d.keys() | d_prime.keys()})
        for name, change in diff.groupby(lambda k: k[0]):
            change = np.abs(change.to_numpy())
            for stat, value in (("l0", np.count_nonzero(change)), ("l1", change.sum()),
                                ("l2_squared", (change**2).sum()), ("linf", change.max())):
                worst[stat] = max(worst[stat], int(value))
    return worst


@pytest.mark.parametrize("unit, days", [(PrivacyUnit.CARD_PERIOD, 14), (PrivacyUnit.CARD_DAY, 1)])
def test_the_sensitivity_formula_equals_the_measured_worst_change(unit, days):
    sens = sensitivity(unit, Relation.ADD_REMOVE, BOUNDS, days if unit is PrivacyUnit.CARD_PERIOD else None)
    assert sens.describe() == measured(days)


def test_a_day_cap_bounds_the_period_sensitivity():
    capped = ContributionBounds(max_trips_per_card_day=4, max_per_bin=2, max_days_per_card=3)
    full = sensitivity(PrivacyUnit.CARD_PERIOD, Relation.ADD_REMOVE, BOUNDS, 14)
    assert sensitivity(PrivacyUnit.CARD_PERIOD, Relation.ADD_REMOVE, capped, 14).l1 == 3 * full.l1 // 14
    replace = sensitivity(PrivacyUnit.CARD_PERIOD, Relation.REPLACE_ONE, BOUNDS, 14)
    assert (replace.l0, replace.l1, replace.l2_squared, replace.linf) == (2 * full.l0, 2 * full.l1,
                                                                            2 * full.l2_squared, full.linf)


@pytest.mark.parametrize("field", ["max_trips_per_card_day", "max_per_bin", "max_days_per_card"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_bounds_below_one_or_not_integers_are_refused(field, value):
    """Mutation testing: a cap of 0 trips or days (or a bool, a float) would pass the checks unseen."""
    message = "must be None or an integer >= 1" if field == "max_days_per_card" else "must be an integer >= 1"
    with pytest.raises(ValueError, match=f"{field} {message}"):
        ContributionBounds(**{field: value})


@pytest.mark.parametrize("days", [None, 0, -3])
def test_card_period_needs_its_days(days):
    with pytest.raises(ValueError, match="card_period needs the number of days of the period"):
        sensitivity(PrivacyUnit.CARD_PERIOD, Relation.ADD_REMOVE, BOUNDS, days)


def test_a_one_day_period_is_one_card_day():
    assert sensitivity(PrivacyUnit.CARD_PERIOD, Relation.ADD_REMOVE, BOUNDS, 1) == sensitivity(
        PrivacyUnit.CARD_DAY, Relation.ADD_REMOVE, BOUNDS)


@pytest.mark.parametrize("field", ["l0", "l1", "l2_squared", "linf"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_a_sensitivity_below_one_or_not_an_integer_is_refused(field, value):
    """Mutation testing: a zero sensitivity would calibrate no noise."""
    values = {"l0": 4, "l1": 4, "l2_squared": 4, "linf": 1, field: value}
    with pytest.raises(ValueError, match=f"{field} must be an integer >= 1"):
        Sensitivity(**values)


@pytest.mark.parametrize("values, message", [
    ((2, 5, 5, 2), r"need linf <= l1 <= l0 \* linf"), ((4, 4, 4, 5), r"need linf <= l1 <= l0 \* linf"),
    ((4, 4, 9, 2), r"need linf\*\*2 <= l2_squared <= l1 \* linf"), ((4, 4, 3, 2), r"need linf\*\*2 <= l2_squared"),
])
def test_inconsistent_sensitivities_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        Sensitivity(*values)
