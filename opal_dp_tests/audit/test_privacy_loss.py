"""The empirical privacy audit: it passes the real mechanism and catches every planted bug.

Every audit here runs 10^6 releases per neighbouring input. Seeds are fixed for reproducibility,
not chosen: the audit flags a correct mechanism with probability at most alpha = 1e-6 for any
seed (Clopper-Pearson with Bonferroni), and each planted bug exceeds delta by more than 25
confidence half-widths, so a miss is even less likely. One audit uses SecureBits (at alpha 1e-7).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from opal_dp.audit import (
    AUDIT_DELTA,
    AUDIT_EPSILON,
    audit_mechanism,
    clopper_pearson,
    membership_game,
    neighbouring_pairs,
)
from opal_dp.audit.privacy_loss import trip_sensitivity
from opal_dp.core import DiscreteLaplace, Relation, SeededBits, StabilityHistogram
from opal_dp.parallel import map_calls
from opal_dp_tests.audit.planted import ScaleBug, ThresholdBug, true_count_order
from opal_dp_tests.core.helpers import OS_ALPHA

RUNS = 10**6


def seeded(factory, relation, seed=0):
    return factory(AUDIT_EPSILON, AUDIT_DELTA, trip_sensitivity(relation), DiscreteLaplace(SeededBits(seed)))


# --- building blocks ---------------------------------------------------------------------------


def test_clopper_pearson_matches_beta_quantiles_and_edges():
    n, alpha = 1000, 1e-3
    lower, upper = clopper_pearson(np.array([0, 1, 500, 999, 1000]), n, alpha)
    assert lower[0] == 0 and upper[-1] == 1
    assert upper[0] == pytest.approx(1 - alpha ** (1 / n)) and lower[-1] == pytest.approx(alpha ** (1 / n))
    k = np.array([1, 500, 999])
    np.testing.assert_allclose(lower[1:4], stats.beta.ppf(alpha, k, n - k + 1), rtol=1e-10)
    np.testing.assert_allclose(upper[1:4], stats.beta.ppf(1 - alpha, k + 1, n - k), rtol=1e-10)
    with pytest.raises(ValueError):
        clopper_pearson(np.array([n + 1]), n, alpha)


def test_clopper_pearson_is_exact_at_its_level():
    """``P(upper < p) <= alpha`` summed exactly over the binomial distribution."""
    n, p, alpha = 200, 0.03, 0.05
    k = np.arange(n + 1)
    lower, upper = clopper_pearson(k, n, alpha)
    pmf = stats.binom.pmf(k, n, p)
    assert pmf[upper < p].sum() <= alpha and pmf[lower > p].sum() <= alpha


@pytest.mark.parametrize("relation", list(Relation))
def test_neighbouring_pairs_are_neighbours_and_cover_the_edges(relation):
    pairs = neighbouring_pairs(relation, 12)
    for pair in pairs:
        d, d_prime = np.array(pair.d), np.array(pair.d_prime)
        change = np.sort(d_prime - d)
        assert d.min() >= 0 and d_prime.min() >= 0
        if relation is Relation.REPLACE_ONE:
            assert change.tolist() == [-1, 1], pair
        else:
            assert change.tolist() == [-1, 0], pair
    assert any(0 in p.d_prime and 0 not in p.d for p in pairs)  # a bin of count 1 vanishes
    assert any(1 in p.d and 0 in p.d_prime for p in pairs)
    if relation is Relation.REPLACE_ONE:
        assert any(0 in p.d and 0 not in p.d_prime for p in pairs)  # a new bin appears
    else:
        assert any(p.d_prime == (0, 0) for p in pairs)  # 1 vs absent, nothing else present


def test_planted_bugs_coincide_with_the_real_mechanism_under_add_remove():
    """Scale 1/epsilon and threshold 1 + ln(1/delta)/epsilon are the add/remove formulas."""
    real = seeded(StabilityHistogram, Relation.ADD_REMOVE).describe()
    for bug in (ScaleBug, ThresholdBug):
        assert seeded(bug, Relation.ADD_REMOVE).describe() == real


def test_noiseless_release_fails_at_small_sample():
    class Exact:
        def release(self, counts):
            return np.asarray(counts, dtype=np.int64)

        def describe(self):
            return {"min_released_count": 1}

    report = audit_mechanism(lambda *args: Exact(), runs=1000, seed=0)
    assert not report.passed and report.worst.violation_lower > 0.9


# --- the audit ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("relation", list(Relation))
def test_real_mechanism_passes(relation):
    report = audit_mechanism(StabilityHistogram, relation, runs=RUNS, seed=1)
    assert report.passed and report.runs >= 10**6
    assert len(report.events) == 2 * len(neighbouring_pairs(relation, 12))
    # The bounds certify the relaxed delta on these pairs, and the audit sees almost all of epsilon.
    assert max(e.violation_upper for e in report.events) < AUDIT_DELTA
    assert 0.9 < report.epsilon_lower <= AUDIT_EPSILON


@pytest.mark.slow
def test_real_mechanism_passes_with_secure_bits():
    report = audit_mechanism(StabilityHistogram, Relation.REPLACE_ONE, runs=RUNS, seed=None, alpha=OS_ALPHA)
    assert report.passed and report.mechanism["seeded"] is False


@pytest.mark.slow
@pytest.mark.parametrize(
    "factory, relation, order, caught_on",
    [
        pytest.param(ScaleBug, Relation.REPLACE_ONE, None, {"interior", "threshold"}, id="scale-replace"),
        pytest.param(ThresholdBug, Relation.REPLACE_ONE, None,
                     {"x vanishes", "x' appears", "both edges"}, id="threshold-replace"),
        pytest.param(StabilityHistogram, Relation.REPLACE_ONE, true_count_order,
                     {"interior", "threshold"}, id="order-replace"),
        pytest.param(StabilityHistogram, Relation.ADD_REMOVE, true_count_order, {"interior"}, id="order-add"),
    ],
)
def test_planted_bug_is_caught(factory, relation, order, caught_on):
    kwargs = {} if order is None else {"order": order}
    report = audit_mechanism(factory, relation, runs=RUNS, seed=2, **kwargs)
    assert not report.passed
    assert report.worst.violation_lower > AUDIT_DELTA and report.epsilon_lower > AUDIT_EPSILON
    assert report.worst.pair.name in caught_on


# --- membership game ---------------------------------------------------------------------------


@pytest.mark.parametrize("relation", list(Relation))
def test_membership_game_real_mechanism(relation):
    mech = seeded(StabilityHistogram, relation, seed=3)
    report = membership_game(mech, RUNS)
    assert report.passed and report.upper <= AUDIT_DELTA / relation.bins_touched == report.bound
    assert report.lower <= report.exact <= report.upper
    assert report.exact == mech.release_probability(1)


def test_membership_game_catches_threshold_bug():
    report = membership_game(seeded(ThresholdBug, Relation.REPLACE_ONE, seed=4), RUNS)
    assert not report.passed and report.lower > report.bound
    assert report.lower <= report.exact <= report.upper
    assert math.isclose(report.exact, 0.0511, rel_tol=1e-2)


@pytest.mark.slow
def test_a_planted_bug_is_caught_with_the_pairs_in_worker_processes(monkeypatch):
    """Unseeded, the pairs are audited in worker processes, each drawing its own noise from the OS CSPRNG."""
    import opal_dp.audit.privacy_loss as privacy_loss

    spread = []
    monkeypatch.setattr(privacy_loss, "map_calls", lambda fn, calls, workers: spread.append(workers) or
                        map_calls(fn, calls, 2 if workers is None else workers))
    report = audit_mechanism(ScaleBug, Relation.REPLACE_ONE, runs=RUNS, seed=None, alpha=OS_ALPHA)
    assert spread == [None] and not report.passed and report.worst.pair.name in {"interior", "threshold"}
    assert audit_mechanism(StabilityHistogram, Relation.REPLACE_ONE, runs=10**4, seed=3).passed
    assert spread == [None, 1]  # a seeded source stays in this process
