"""The noisy prefix tree: the paper's budget split, Theorem 4.1's empty children against naive enumeration,
recovery with little noise, bad input, and a planted-bug privacy audit."""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from opal_dp_tests.audit.prefix_tree_audit import audit_tree
from opal_dp.core import SecureBits, SeededBits, prefix_tree
from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, _measure, build_noisy_prefix_tree
from opal_dp.core.sparse_noise import LaplaceNoise
from opal_dp_tests.core.helpers import ALPHA
from opal_dp_tests.core.test_sparse_noise import _two_sample_pvalue

TAXONOMY = Taxonomy(np.array([0, 3, 6]), np.array([3, 3, 4]))


@pytest.mark.parametrize("hybrid", [True, False])
def test_budget_split_adds_up_to_epsilon(hybrid):
    budget = TreeBudget(1.0, 4, hybrid)
    p = budget.calibrate(TAXONOMY)
    assert budget.height * (p["epsilon_generalised"] + p["epsilon_location"]) == pytest.approx(1.0, rel=1e-12)
    assert p["scale_location"] >= 1 / p["epsilon_location"]
    assert p["theta_location"] >= 2 * math.sqrt(2) * p["scale_location"]
    if hybrid:
        f = TAXONOMY.fan_out
        assert p["epsilon_generalised"] == pytest.approx(2 * 0.25 / f)
        assert p["scale_generalised"] >= 1 / p["epsilon_generalised"]
        assert p["theta_generalised"] >= 4 * math.sqrt(2) * p["scale_generalised"]


def _smallest_scale(epsilon: float) -> float:
    scale = float(1 / Fraction(epsilon))
    return scale if Fraction(scale) >= 1 / Fraction(epsilon) else math.nextafter(scale, math.inf)


def _smallest_threshold(scale: float, sds: float, cells: int) -> int:
    """The least integer theta >= 1 with theta >= sds sqrt(2) scale and cells q**theta/(1+q) <= 0.2, by counting up."""
    q, theta = math.exp(-1 / scale), 1
    while theta < sds * math.sqrt(2) * scale or cells * q**theta / (1 + q) > 0.2:
        theta += 1
    return theta


@pytest.mark.parametrize("taxonomy", [TAXONOMY, Taxonomy(np.array([0, 2]), np.array([2, 3])),
                                      Taxonomy(np.arange(0, 160_000, 8), np.full(20_000, 8))])
@pytest.mark.parametrize("epsilon, height, hybrid", [(1.0, 4, True), (1.0, 4, False), (3.0, 3, True), (0.5, 2, True)])
def test_calibration_is_the_papers_split_with_the_least_safe_scales_and_thresholds(taxonomy, epsilon, height, hybrid):
    """Every public parameter recomputed here from its definition (the paper's split 2/f and (f-2)/f of each level's
    epsilon, the least float scale >= 1/epsilon, the least threshold above sds standard deviations that keeps the
    expected false children <= 0.2, counted up one by one): kills a doubled scale, another number of standard
    deviations, a tail bound that is not ``q**theta/(1+q)``, renamed keys, and a fan-out between 2 and 3 refused."""
    f, eps_bar = taxonomy.fan_out, epsilon / height
    eps_1, eps_2 = (2 * eps_bar / f, (f - 2) * eps_bar / f) if hybrid else (0.0, eps_bar)
    expected = {"epsilon": epsilon, "height": height, "hybrid": hybrid, "fan_out": f, "epsilon_generalised": eps_1,
                "epsilon_location": eps_2, "scale_location": _smallest_scale(eps_2)}
    if hybrid:
        expected |= {"scale_generalised": _smallest_scale(eps_1),
                     "theta_generalised": _smallest_threshold(_smallest_scale(eps_1), 4, taxonomy.generalised),
                     "theta_location": _smallest_threshold(_smallest_scale(eps_2), 2, int(taxonomy.size.max()))}
    else:
        expected |= {"theta_location": _smallest_threshold(_smallest_scale(eps_2), 2, taxonomy.symbols)}
    assert TreeBudget(epsilon, height, hybrid).calibrate(taxonomy) == expected


def test_a_scale_up_to_max_scale_and_no_further():
    assert TreeBudget(2.0**-10, 1, hybrid=False).calibrate(TAXONOMY)["scale_location"] == 1024.0
    with pytest.raises(ValueError, match=r"^noise scale 1025.0 exceeds the sampler's MAX_SCALE 1024.0: raise epsilon, "
                                         r"or lower the height or the fan-out$"):
        TreeBudget(1 / 1025, 1, hybrid=False).calibrate(TAXONOMY)


def test_thresholds_bound_the_expected_false_children():
    big = Taxonomy(np.arange(0, 160_000, 8), np.full(20_000, 8))
    p = TreeBudget(1.0, 4).calibrate(big)
    q = math.exp(-1 / p["scale_generalised"])
    assert big.generalised * q ** p["theta_generalised"] / (1 + q) <= 0.2


def test_fan_out_two_or_less_is_refused():
    with pytest.raises(ValueError, match="fan-out"):
        TreeBudget(1.0, 2).calibrate(Taxonomy(np.array([0, 2]), np.array([2, 2])))


@pytest.mark.parametrize("first, size", [([], []), ([0, 0], [0, 3]), ([1], [3]), ([0, 3], [2, 2])])
def test_a_taxonomy_that_does_not_cover_the_alphabet_in_order_is_refused(first, size):
    """Each case breaks one condition alone (no group; an empty group; not starting at 0; a gap): kills the mutants
    that join two of the conditions with ``and``."""
    with pytest.raises(ValueError, match=r"^a taxonomy's generalised symbols must cover the symbols 0\.\.\|L\|-1 in "
                                         r"consecutive ranges$"):
        Taxonomy(np.array(first, dtype=np.int64), np.array(size, dtype=np.int64))


def test_a_taxonomy_holds_integer_arrays_whatever_it_was_given():
    taxonomy = Taxonomy([0.0, 3.0], [3.0, 4.0])
    assert taxonomy.first.dtype == taxonomy.size.dtype == np.int64 and taxonomy.first.tolist() == [0, 3]


@pytest.mark.parametrize("hybrid", [True, False])
def test_a_seeded_tree_draws_only_from_its_seed(hybrid, monkeypatch):
    """Both levels' noise comes from the source given: the OS source is never read, and the same seed gives the same
    tree, counts as integers. Kills the mutants that build either law on the OS source instead (audits would not be
    reproducible)."""
    monkeypatch.setattr(SecureBits, "words", lambda self, n: pytest.fail("the OS source was read"))
    seqs = np.array([[0, 1, -1]] * 50 + [[4, 5, 9]] * 30 + [[7, -1, -1]] * 20)
    a, b = (build_noisy_prefix_tree(seqs, TAXONOMY, TreeBudget(1.0, 3, hybrid), SeededBits(12)) for _ in range(2))
    assert all(np.array_equal(x, y) for x, y in zip(astuple(a), astuple(b)))
    assert a.noisy.dtype == np.int64


def test_without_noise_the_tree_keeps_exactly_the_prefixes_both_sub_levels_pass(monkeypatch):
    """The tree's structure with the noise taken out (every measurement exact): at epsilon 3, height 2 the thresholds
    are 7 (generalised) and 5 (location). Symbol 7 has 6 sequences: enough for its own node, not for its group's, so
    the hybrid tree drops it; symbol 3 has 4: its group passes (with symbol 4's), it does not, so its continuation
    ``[3, 5]`` must vanish with it. Kills the mutants that build a hybrid tree on the flat taxonomy (7 kept) or give
    a sequence whose prefix was dropped another node (``[3, 5]`` counted under ``[4]``)."""
    def exact(keys, line, law, theta):
        points, counts = np.unique(keys, return_counts=True)
        return points[counts >= theta], counts[counts >= theta]

    monkeypatch.setattr(prefix_tree, "_measure", exact)
    budget = TreeBudget(3.0, 2, hybrid=True)
    assert (budget.calibrate(TAXONOMY)["theta_generalised"], budget.calibrate(TAXONOMY)["theta_location"]) == (7, 5)
    seqs = np.array([[0, 1]] * 20 + [[4, 5]] * 20 + [[7, -1]] * 6 + [[3, 5]] * 4)
    tree = build_noisy_prefix_tree(seqs, TAXONOMY, budget, SeededBits(0))
    nodes = list(zip(tree.level.tolist(), tree.parent.tolist(), tree.symbol.tolist(), tree.noisy.tolist()))
    assert nodes == [(1, -1, 0, 20), (1, -1, 4, 20), (2, 0, 1, 20), (2, 1, 5, 20)]


def test_bad_sequences_are_refused():
    for bad in ([[10, -1]], [[1, -2]]):
        with pytest.raises(ValueError, match="^a sequence symbol is outside the taxonomy's alphabet$"):
            build_noisy_prefix_tree(np.array(bad), TAXONOMY, TreeBudget(1.0, 2))
    with pytest.raises(ValueError, match="shape"):
        build_noisy_prefix_tree(np.array([[1]]), TAXONOMY, TreeBudget(1.0, 2))


@pytest.mark.parametrize("hybrid", [True, False])
def test_little_noise_recovers_the_true_tree(hybrid):
    seqs = np.array([[0, 1, -1]] * 5000 + [[4, 5, 9]] * 3000 + [[7, -1, -1]] * 2000)
    tree = build_noisy_prefix_tree(seqs, TAXONOMY, TreeBudget(30.0, 3, hybrid), SeededBits(4))
    got = {(int(lv), int(s)): int(c) for lv, s, c in zip(tree.level, tree.symbol, tree.noisy)}
    assert set(got) == {(1, 0), (1, 4), (1, 7), (2, 1), (2, 5), (3, 9)}
    truth = {(1, 0): 5000, (1, 4): 3000, (1, 7): 2000, (2, 1): 5000, (2, 5): 3000, (3, 9): 3000}
    # node noise: discrete Laplace of scale at most 0.25 here, P(|Z| >= 5) = 2 q^5/(1+q) < 4.2e-9 (q = e^-4)
    assert all(abs(got[k] - truth[k]) < 5 for k in truth)
    assert tree.parent.tolist() == [-1, -1, -1, 0, 1, 4]


@pytest.mark.parametrize("hybrid", [True, False])
def test_node_noise_has_the_calibrated_scale(hybrid):
    """Over 300 seeded trees of 6 busy nodes at epsilon 3 (scale 2.5 hybrid, 1 plain), the share of nodes whose
    noisy count is off by at least one is P(|Z| >= 1) = 2q/(1+q), q = exp(-1/scale_location): exact two-sided
    binomial test at 1e-6. At half or twice the scale the share moves by 0.1 or more, over 8 standard errors."""
    seqs = np.array([[0, 1, -1]] * 5000 + [[4, 5, 9]] * 3000 + [[7, -1, -1]] * 2000)
    truth = {(1, 0): 5000, (1, 4): 3000, (1, 7): 2000, (2, 1): 5000, (2, 5): 3000, (3, 9): 3000}
    budget = TreeBudget(3.0, 3, hybrid)
    scale = 2.5 if hybrid else 1.0  # 1 / eps_2, eps_2 = (f - 2)/f * 3/3 with f = 10/3, or 3/3: not read from the code
    assert budget.calibrate(TAXONOMY)["scale_location"] == pytest.approx(scale, rel=1e-15)
    q = math.exp(-1 / scale)
    off = 0
    for seed in range(300):
        tree = build_noisy_prefix_tree(seqs, TAXONOMY, budget, SeededBits(seed))
        got = {(int(lv), int(s)): int(c) for lv, s, c in zip(tree.level, tree.symbol, tree.noisy)}
        off += sum(got[k] != n for k, n in truth.items())  # busy nodes: always present
        nodes = list(zip(tree.level.tolist(), tree.parent.tolist(), tree.symbol.tolist()))
        assert len(set(nodes)) == len(nodes) and set(tree.parent[tree.level == 1].tolist()) == {-1}
    assert stats.binomtest(off, 6 * 300, 2 * q / (1 + q)).pvalue > ALPHA



def _at_least(scale: float, k: int) -> float:
    """``P(Z >= k)`` for the discrete Laplace of ``scale``: ``q**k/(1+q)`` for ``k >= 1``, else ``1 - P(Z >= 1 - k)``."""
    q = math.exp(-1 / scale)
    return q**k / (1 + q) if k >= 1 else 1 - q ** (1 - k) / (1 + q)


def test_generalised_noise_has_the_calibrated_scale():
    """A symbol with ``n = theta_generalised`` sequences is released iff its generalised node passes
    (``n + Z_1 >= theta_generalised``) and it passes itself (``n + Z_2 >= theta_location``): probability
    ``P(Z_1 >= 0) * P(Z_2 >= theta_location - n)``, independent draws. Over 4000 seeded one-level trees, exact
    two-sided binomial test at 1e-6. Kills the mutants that measure the generalised sub-level at another scale or
    threshold: at half or twice ``scale_generalised`` the probability moves by 0.10 and 0.06, over 7 standard
    errors (the location-level test above does not see the generalised level, whose counts are never released)."""
    budget = TreeBudget(1.0, 1)
    p = budget.calibrate(TAXONOMY)
    n = p["theta_generalised"]
    expected = _at_least(p["scale_generalised"], 0) * _at_least(p["scale_location"], p["theta_location"] - n)
    seqs = np.zeros((n, 1), dtype=np.int64)
    runs = 4000
    released = sum(bool(((tree.level == 1) & (tree.symbol == 0)).any())
                   for tree in (build_noisy_prefix_tree(seqs, TAXONOMY, budget, SeededBits(1000 + r)) for r in range(runs)))
    assert stats.binomtest(released, runs, expected).pvalue > ALPHA

def _naive_measure(keys, line, law, theta):
    """Theorem 4.1's reference: noise every point of the line, keep those >= theta."""
    counts = np.bincount(keys, minlength=line)
    noisy = counts + law.draw(line)
    points = np.flatnonzero(noisy >= theta)
    return points, noisy[points]


def test_empty_children_match_naive_enumeration():
    """Which points pass, and their noisy values, have the same law with the sparse sampler as when every empty
    point is noised (two-sample chi-square at a false-failure rate <= 1e-6 per statistic)."""
    keys, line, theta, reps = np.array([1, 1, 4]), 7, 2, 8_000
    out = {}
    for name, measure in (("fast", _measure), ("naive", _naive_measure)):
        law = LaplaceNoise(1.5, SeededBits(31 if name == "fast" else 32))
        masks, values = np.zeros(reps, np.int64), []
        for r in range(reps):
            points, noisy = measure(keys, line, law, theta)
            masks[r] = int((1 << points).sum())
            values.append(noisy[points != 1])  # the values of the points without data
        out[name] = masks, np.concatenate(values)
    for a, b in zip(out["fast"], out["naive"]):
        assert _two_sample_pvalue(a, b) > ALPHA / 2


@dataclass(frozen=True)
class LevelBudgetIgnored(TreeBudget):
    """Planted bug: every level spends the whole epsilon."""

    def level_epsilon(self) -> float:
        return self.epsilon


def _audit(budget_type):
    taxonomy = Taxonomy(np.array([0, 3]), np.array([3, 3]))
    budget = budget_type(1.0, 4, hybrid=False)
    data = np.array([[0, 1, 2, 0]] * 40)
    neighbour = np.vstack([data, [[0, 1, 2, 0]]])
    return audit_tree(lambda d, bits: build_noisy_prefix_tree(d, taxonomy, budget, bits), data, neighbour,
                      budget.epsilon, runs=3000, seed=None)


@pytest.mark.slow
def test_audit_passes_the_real_tree():
    report = _audit(TreeBudget)
    assert not report.flagged, report


@pytest.mark.slow
def test_audit_catches_the_level_budget_ignored():
    report = _audit(LevelBudgetIgnored)
    assert report.flagged, report


@given(st.lists(st.integers(1, 6), min_size=1, max_size=12), st.data())
def test_a_symbol_generalises_to_the_range_that_holds_it(sizes, data):
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    taxonomy = Taxonomy(first, np.array(sizes))
    symbols = np.array(data.draw(st.lists(st.integers(0, taxonomy.symbols - 1), max_size=30)), dtype=np.int64)
    expected = [next(g for g in range(len(sizes)) if first[g] <= s < first[g] + sizes[g]) for s in symbols]
    assert taxonomy.of(symbols).tolist() == expected
    for outside in (-1, taxonomy.symbols):
        with pytest.raises(ValueError, match="outside the taxonomy"):
            taxonomy.of(np.array([0, outside]))
