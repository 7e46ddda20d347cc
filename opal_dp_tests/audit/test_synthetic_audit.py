"""Planted-bug audit of the synthetic data's card-level queries: the production path passes, and a count of trips
where card-days are meant, or a sigma that ignores the trips a card-day can pile into one cell, are caught.
Every verdict is a 1 - 1e-6 confidence statement (``audit.privacy_loss``): a false failure has probability
at most 1e-6."""

from __future__ import annotations

import dataclasses

import pytest

from opal_dp_tests.audit import synthetic_audit as audit
from opal_dp.core import ContributionBounds
from opal_dp.core.bits import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import sigma_for

KEY = b"\x05" * 32
RUNS = 10**6


def plan(seed: int):
    return audit.audit_plan(8.0, ContributionBounds(), DiscreteGaussian(SeededBits(seed)))


def test_the_scenario_moves_one_cell_of_each_query_by_its_bound():
    p = plan(0)
    m = p.bounds.max_trips_per_card_day
    for query, shift in (("counts", 1), ("time_origin", m), ("od", m)):
        pair = audit.neighbouring_histograms(p, query, KEY)
        assert len(pair.d) == 1 and pair.d[0] - pair.d_prime[0] == shift, (query, pair)
    bugged = audit.neighbouring_histograms(p, "counts", KEY, count_trips=True)
    assert bugged.d[0] - bugged.d_prime[0] == m


@pytest.mark.slow
@pytest.mark.parametrize("query", ["counts", "time_origin", "od"])
def test_production_queries_pass(query):
    report = audit.audit_query(plan(1), query, KEY, runs=RUNS)
    assert report.passed, report.worst


@pytest.mark.slow
def test_counting_trips_instead_of_card_days_is_caught():
    report = audit.audit_query(plan(2), "counts", KEY, count_trips=True, runs=RUNS)
    assert not report.passed and report.epsilon_lower > report.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("query", ["time_origin", "od"])
def test_sigma_ignoring_the_sensitivity_is_caught(query):
    p = plan(3)
    bugged = dataclasses.replace(p, sigma={**p.sigma, query: sigma_for(p.rho[query], 1)})
    report = audit.audit_query(bugged, query, KEY, runs=RUNS)
    assert not report.passed and report.epsilon_lower > report.epsilon
