"""Each consistency check fails on a crafted bad frame and passes on a good one."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from opal_dp.core import DiscreteLaplace, PrivacyCost, SeededBits, compose
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.ledger_records import Charge, Draw
from opal_dp.release.marginals.checks import (
    BLOCKING_CHECKS,
    DESIGN_CHECKS,
    PLAUSIBILITY_FALSE_ALARM,
    ReleaseUnderCheck,
    blocking_problems,
    noise_sum_bound,
    plausibility,
)
from opal_dp.release.marginals.tables import BY_NAME
from opal_dp_tests.core.helpers import trip_sbh

LABELS = ["-1", "2000", "2010", "Central", "Manly"]
TIME_LOC = BY_NAME["tap_on_time_loc"]
MECH = trip_sbh(2.0, 1 / 8e6)


def frame(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame({
        "time_window": np.array([r[0] for r in rows], dtype="int16"),
        "loc": pd.Categorical([r[1] for r in rows], categories=LABELS),
        "count": np.array([r[2] for r in rows], dtype="int64"),
    })


TRUTH = frame([(30, "2000", 40), (30, "Central", 3), (31, "2000", 25), (31, "Manly", 100)])
GOOD = frame([(30, "2000", 41), (31, "2000", 24), (31, "Manly", 98)])
CHARGE = Charge(1, "trip", "2016-07-25|bus", TIME_LOC.name, "replace_one", "approx_dp", 2.0, 0.0, 1 / 8e6,
                json.dumps(MECH.describe(), sort_keys=True), '{"unit": "trip"}', "run", "t")
DRAW = Draw(1, 1, "2016-07-25|bus", "2016-07-25", "f", "releases/x.parquet", "run", "t", "complete", "t", "run")
SPEND = compose([PrivacyCost.approx_dp(8.0, 6 / 8e6)])


def under_check(released: pd.DataFrame = GOOD, **changes) -> ReleaseUnderCheck:
    base = ReleaseUnderCheck("2016-07-25|bus", TIME_LOC, released, TRUTH, MECH.describe(), DRAW, CHARGE,
                             SPEND, (8.0, 6 / 8e6), frozenset(LABELS))
    return dataclasses.replace(base, **changes)


def test_good_release_passes_every_blocking_check():
    assert blocking_problems([under_check()]) == {name: [] for name in DESIGN_CHECKS["sbh"]}


BAD = {
    "no_new_points": under_check(frame([(30, "2000", 41), (32, "2010", 30)])),
    "counts_above_threshold": under_check(frame([(30, "2000", 17), (31, "Manly", 98)])),
    "canonical_order": under_check(frame([(31, "2000", 24), (30, "2000", 41)])),
    "schema_valid": under_check(GOOD.assign(count=GOOD["count"].astype("float64"))),
    "budget_recorded": under_check(charge=dataclasses.replace(CHARGE, mechanism=json.dumps(trip_sbh(1.0, 1 / 8e6).describe()))),
    "no_identifiers": under_check(GOOD.assign(card_id=123)),
}


@pytest.mark.parametrize("check", list(BAD))
def test_each_check_fails_on_its_crafted_bad_frame(check):
    problem = BLOCKING_CHECKS[check](BAD[check])
    assert problem, f"{check} passed a frame built to fail it"
    assert BLOCKING_CHECKS[check](under_check()) is None


def test_budget_check_catches_overspend_missing_draws_and_other_parameters():
    over = compose([PrivacyCost.approx_dp(9.0, 6 / 8e6)])
    assert "over the cap" in BLOCKING_CHECKS["budget_recorded"](under_check(scope_spend=over))
    assert "no ledger draw" in BLOCKING_CHECKS["budget_recorded"](under_check(draw=None))
    pending = dataclasses.replace(DRAW, status="pending", completed_at=None, completed_by=None)
    assert "pending" in BLOCKING_CHECKS["budget_recorded"](under_check(draw=pending))
    add_remove = trip_sbh(2.0, 1 / 8e6, "add_remove").describe()  # a replace-one draw checked as add/remove
    assert "other mechanism parameters" in BLOCKING_CHECKS["budget_recorded"](under_check(mechanism=add_remove))


def test_identifier_check_catches_raw_values_in_known_columns():
    raw_stop = GOOD.assign(loc=pd.Categorical(["200010", "2000", "2000"]))
    assert "outside the public label universe" in BLOCKING_CHECKS["no_identifiers"](under_check(raw_stop))


@pytest.mark.parametrize("noise", ["discrete_laplace", "discrete_gaussian"])
def test_noise_sum_bound_holds_and_is_tight(noise):
    """Holds on 20,000 seeded sums of 50 draws (deterministic), and lies between the normal approximation's
    two-sided 1e-6 quantile of the exact sum's standard deviation and 1.3 times it: a bound computed at half
    or twice the scale fails (a Chernoff bound of a sum of 50 is within 20% of that quantile here)."""
    scale, bins, draws = 2.0, 50, 20_000
    sampler = DiscreteLaplace(SeededBits(3)) if noise == "discrete_laplace" else DiscreteGaussian(SeededBits(3))
    sums = sampler.sample(scale, bins * draws).reshape(draws, bins).sum(axis=1)
    bound = noise_sum_bound(bins, {"noise": noise, "scale": scale})
    q = math.exp(-1 / scale)
    variance = 2 * q / (1 - q) ** 2 if noise == "discrete_laplace" else scale**2  # the discrete Gaussian's is below
    normal = stats.norm.isf(PLAUSIBILITY_FALSE_ALARM / 2) * math.sqrt(bins * variance)
    assert np.abs(sums).max() <= bound
    assert 0.95 * normal <= bound <= 1.3 * normal


LAPLACE_2 = {"noise": "discrete_laplace", "scale": 2.0}


def test_plausibility_flags_only_implausible_gaps():
    time_truth = pd.DataFrame({"time_window": np.array([30, 31], "int16"), "count": np.array([500, 500])})
    loc_truth = pd.DataFrame({"loc": pd.Categorical(["2000"], categories=LABELS), "count": np.array([1000])})
    ok, figures = plausibility(time_truth.assign(count=[503, 498]), loc_truth.assign(count=[997]),
                               time_truth, loc_truth, LAPLACE_2, LAPLACE_2)
    assert ok and figures["released_total_gap"] == 4
    bad, _ = plausibility(time_truth.assign(count=[900, 900]), loc_truth.assign(count=[997]),
                          time_truth, loc_truth, LAPLACE_2, LAPLACE_2)
    assert not bad


def test_plausibility_allows_the_true_mass_a_release_suppressed():
    """A bin the time release left out moves its true count (500) into the allowed gap, a released one does not."""
    time_truth = pd.DataFrame({"time_window": np.array([30, 31], "int16"), "count": np.array([500, 500])})
    loc_truth = pd.DataFrame({"loc": pd.Categorical(["2000", "2010"], categories=LABELS), "count": np.array([990, 10])})
    time_release = time_truth.iloc[:1].assign(count=[503])
    loc_release = loc_truth.iloc[:1].assign(count=[992])
    ok, figures = plausibility(time_release, loc_release, time_truth, loc_truth, LAPLACE_2, LAPLACE_2)
    noise = noise_sum_bound(1, LAPLACE_2)
    assert ok and figures["released_total_gap"] == 489
    assert figures["allowed_gap"] == pytest.approx(500 + 10 + 2 * noise, rel=1e-12)


def test_plausibility_matches_locations_by_label_across_category_lists():
    """A release's location categories need not be the truth's: a bin is released by its label; an unknown (NaN)
    location of the truth is suppressed unless released as such."""
    time_truth = pd.DataFrame({"time_window": np.array([30], "int16"), "count": np.array([1000])})
    loc_truth = pd.DataFrame({"loc": pd.Categorical(["2000", "2010", None], categories=LABELS),
                              "count": np.array([600, 300, 100])})
    loc_release = pd.DataFrame({"loc": pd.Categorical(["2010", "2000"], categories=["2010", "2000"]),
                                "count": np.array([300, 600])})
    _, figures = plausibility(time_truth, loc_release, time_truth, loc_truth, LAPLACE_2, LAPLACE_2)
    assert figures["allowed_gap"] == pytest.approx(100 + noise_sum_bound(1, LAPLACE_2) + noise_sum_bound(2, LAPLACE_2))


def test_batched_schema_check_names_the_failing_partition():
    good = under_check()
    bad = under_check(GOOD.assign(count=GOOD["count"].astype("float64")), partition="2016-07-26|bus")
    problems = blocking_problems([good, bad])
    assert problems["schema_valid"] and all(p.startswith("2016-07-26|bus") for p in problems["schema_valid"])
