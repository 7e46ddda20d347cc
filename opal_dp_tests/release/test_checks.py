"""Each consistency check fails on a crafted bad frame and passes on a good one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from opal_dp.core import DiscreteLaplace, SeededBits, StabilityHistogram
from opal_dp.core.ledger import Entry
from opal_dp.release.checks import (
    BLOCKING_CHECKS,
    ReleaseUnderCheck,
    blocking_problems,
    noise_sum_bound,
    plausibility,
)
from opal_dp.release.marginals import BY_NAME

LABELS = ["-1", "2000", "2010", "Central", "Manly"]
TIME_LOC = BY_NAME["tap_on_time_loc"]
MECH = StabilityHistogram(2.0, 1 / 8e6)


def frame(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame({
        "time_window": np.array([r[0] for r in rows], dtype="int16"),
        "loc": pd.Categorical([r[1] for r in rows], categories=LABELS),
        "count": np.array([r[2] for r in rows], dtype="int64"),
    })


TRUTH = frame([(30, "2000", 40), (30, "Central", 3), (31, "2000", 25), (31, "Manly", 100)])
GOOD = frame([(30, "2000", 41), (31, "2000", 24), (31, "Manly", 98)])
ENTRY = Entry(1, "2016-07-25|bus", TIME_LOC.name, 2.0, 1 / 8e6, "m", "run", "f", "t", "complete", "ref", "t", "run")


def under_check(released: pd.DataFrame = GOOD, **changes) -> ReleaseUnderCheck:
    base = ReleaseUnderCheck("2016-07-25|bus", TIME_LOC, released, TRUTH, MECH.describe(), ENTRY,
                             (8.0, 6 / 8e6), (8.0, 6 / 8e6), frozenset(LABELS))
    return dataclasses.replace(base, **changes)


def test_good_release_passes_every_blocking_check():
    assert blocking_problems([under_check()]) == {name: [] for name in BLOCKING_CHECKS}


BAD = {
    "no_new_points": under_check(frame([(30, "2000", 41), (32, "2010", 30)])),
    "counts_above_threshold": under_check(frame([(30, "2000", 17), (31, "Manly", 98)])),
    "canonical_order": under_check(frame([(31, "2000", 24), (30, "2000", 41)])),
    "schema_valid": under_check(GOOD.assign(count=GOOD["count"].astype("float64"))),
    "budget_recorded": under_check(entry=dataclasses.replace(ENTRY, epsilon=1.0)),
    "no_identifiers": under_check(GOOD.assign(card_id=123)),
}


@pytest.mark.parametrize("check", list(BAD))
def test_each_check_fails_on_its_crafted_bad_frame(check):
    problem = BLOCKING_CHECKS[check](BAD[check])
    assert problem, f"{check} passed a frame built to fail it"
    assert BLOCKING_CHECKS[check](under_check()) is None


def test_budget_check_catches_overspend_and_missing_entries():
    assert "exceeds the cap" in BLOCKING_CHECKS["budget_recorded"](under_check(partition_spent=(9.0, 6 / 8e6)))
    assert "no ledger entry" in BLOCKING_CHECKS["budget_recorded"](under_check(entry=None))
    pending = dataclasses.replace(ENTRY, status="pending")
    assert "pending" in BLOCKING_CHECKS["budget_recorded"](under_check(entry=pending))


def test_identifier_check_catches_raw_values_in_known_columns():
    raw_stop = GOOD.assign(loc=pd.Categorical(["200010", "2000", "2000"]))
    assert "outside the public label universe" in BLOCKING_CHECKS["no_identifiers"](under_check(raw_stop))


def test_noise_sum_bound_holds_empirically():
    scale, bins, draws = 2.0, 50, 20_000
    sums = DiscreteLaplace(SeededBits(3)).sample(scale, bins * draws).reshape(draws, bins).sum(axis=1)
    bound = noise_sum_bound(bins, scale)
    assert np.abs(sums).max() <= bound < 10 * np.abs(sums).std() * 3


def test_plausibility_flags_only_implausible_gaps():
    time_truth = pd.DataFrame({"time_window": np.array([30, 31], "int16"), "count": np.array([500, 500])})
    loc_truth = pd.DataFrame({"loc": pd.Categorical(["2000"], categories=LABELS), "count": np.array([1000])})
    ok, figures = plausibility(time_truth.assign(count=[503, 498]), loc_truth.assign(count=[997]),
                               time_truth, loc_truth, 2.0, 2.0)
    assert ok and figures["released_total_gap"] == 4
    bad, _ = plausibility(time_truth.assign(count=[900, 900]), loc_truth.assign(count=[997]),
                          time_truth, loc_truth, 2.0, 2.0)
    assert not bad


def test_batched_schema_check_names_the_failing_partition():
    good = under_check()
    bad = under_check(GOOD.assign(count=GOOD["count"].astype("float64")), partition="2016-07-26|bus")
    problems = blocking_problems([good, bad])
    assert problems["schema_valid"] and all(p.startswith("2016-07-26|bus") for p in problems["schema_valid"])
