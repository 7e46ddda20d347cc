import json
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import (
    MAX_SCALE,
    DiscreteLaplace,
    HistogramMechanism,
    PrivacyCost,
    Relation,
    SeededBits,
    Sensitivity,
    StabilityHistogram,
    error_bound,
    release_probability,
)
from opal_dp.core import sbh
from opal_dp.core.noise import laplace_scale
from opal_dp.core.sbh import _tail_within
from opal_dp_tests.core.helpers import Z_TWO_SIDED, binomial_interval, trip_sbh

DELTA = 1 / 8e6  # the default per-release delta


def seeded(epsilon=1.0, delta=DELTA, relation=Relation.REPLACE_ONE, seed=0) -> StabilityHistogram:
    return trip_sbh(epsilon, delta, relation, DiscreteLaplace(SeededBits(seed)))


# --- parameters --------------------------------------------------------------------------------


def test_relation():
    assert Relation.REPLACE_ONE.bins_touched == 2 and Relation.ADD_REMOVE.bins_touched == 1
    assert Relation("replace_one") is Relation.REPLACE_ONE and Relation.ADD_REMOVE == "add_remove"


@pytest.mark.parametrize(
    "epsilon, relation, threshold, minimum",
    [
        (1.0, Relation.REPLACE_ONE, 34.176198560, 35),
        (2.0, Relation.REPLACE_ONE, 17.588099280, 18),  # the 2016 release: counts below 18 removed
        (1.0, Relation.ADD_REMOVE, 16.894952100, 17),
        (2.0, Relation.ADD_REMOVE, 8.947476050, 9),
    ],
)
def test_default_budget_thresholds(epsilon, relation, threshold, minimum):
    m = trip_sbh(epsilon, DELTA, relation)
    k = relation.bins_touched
    assert m.scale == k / epsilon
    assert m.threshold == pytest.approx(k * math.log(k / DELTA) / epsilon + 1, rel=1e-14)
    assert m.threshold == pytest.approx(threshold, abs=1e-8)
    assert m.min_released_count == minimum


def test_document_formula_for_replace_one():
    """Algorithm 1, step 6: threshold 2 ln(2/delta)/epsilon + 1."""
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        m = trip_sbh(eps, DELTA)
        assert m.threshold == pytest.approx(2 * math.log(2 / DELTA) / eps + 1, rel=1e-14)


def test_integer_threshold_stays_that_integer():
    m = trip_sbh(1.0, math.exp(-3), Relation.ADD_REMOVE)
    assert m.threshold == 4.0 and m.min_released_count == 4


@settings(max_examples=300, deadline=None)
@given(
    epsilon=st.floats(0.01, 20.0),
    delta=st.floats(1e-15, 0.99),
    relation=st.sampled_from(list(Relation)),
)
def test_per_bin_delta_bound_holds_exactly(epsilon, delta, relation):
    """P(Z >= min_released_count - 1) = q**(m-1)/(1+q) <= delta/k, checked at 50 digits."""
    m = trip_sbh(epsilon, delta, relation)
    k = relation.bins_touched
    with localcontext() as ctx:
        ctx.prec = 50
        inv = 1 / Decimal(m.scale)
        q = (-inv).exp()
        tail = (-(m.min_released_count - 1) * inv).exp() / (1 + q)
        assert tail <= Decimal(delta) / k
    assert math.isclose(float(tail), m.release_probability(1), rel_tol=1e-9)


@pytest.mark.parametrize("epsilon", [0, -1.0, math.inf, math.nan, "1", True, None, 1e-5])
def test_rejects_bad_epsilon(epsilon):
    with pytest.raises(ValueError):
        trip_sbh(epsilon, DELTA)


@pytest.mark.parametrize("delta", [0, 1, 1.5, -1e-9, math.nan, "0.1", None])
def test_rejects_bad_delta(delta):
    with pytest.raises(ValueError):
        trip_sbh(1.0, delta)


def test_describe_is_json_ready_and_complete():
    m = seeded()
    d = json.loads(json.dumps(m.describe()))
    assert d == {
        "mechanism": "stability_based_histogram",
        "epsilon": 1.0,
        "delta": DELTA,
        "noise": "discrete_laplace",
        "scale": 2.0,
        "threshold": m.threshold,
        "min_released_count": 35,
        "sensitivity": {"l0": 2, "l1": 2, "l2_squared": 2, "linf": 1},
        "cost": {"measure": "approx_dp", "epsilon": 1.0, "rho": 0.0, "delta": DELTA},
        "seeded": True,
    }
    assert trip_sbh(1.0, DELTA).describe()["seeded"] is False


def test_implements_interface():
    m: HistogramMechanism = trip_sbh(1.0, DELTA)
    assert m.name == "stability_based_histogram" and m.epsilon == 1.0 and m.delta == DELTA
    assert m.cost() == PrivacyCost.approx_dp(1.0, DELTA)


# --- release: properties ----------------------------------------------------------------------

counts_st = st.lists(st.integers(1, 10**12), max_size=200).map(lambda c: np.array(c, dtype=np.int64))


@settings(max_examples=200, deadline=None)
@given(counts=counts_st, seed=st.integers(0, 2**32), relation=st.sampled_from(list(Relation)))
def test_release_shape_and_values(counts, seed, relation):
    m = seeded(relation=relation, seed=seed)
    out = m.release(counts)
    assert out.dtype == np.int64 and out.shape == counts.shape
    assert np.all((out == 0) | (out >= m.min_released_count))


@settings(max_examples=100, deadline=None)
@given(counts=counts_st, bad=st.integers(-(10**6), 0), at=st.integers(0, 10**6))
def test_rejects_non_positive_counts(counts, bad, at):
    c = np.insert(counts, at % (counts.size + 1), bad)
    with pytest.raises(ValueError, match="> 0"):
        seeded().release(c)


@pytest.mark.parametrize(
    "counts", [np.array([1.0, 2.0]), np.array([[1, 2]]), np.array([True]), np.array([2**63], dtype=np.uint64)]
)
def test_rejects_non_integer_or_non_1d(counts):
    with pytest.raises(ValueError):
        seeded().release(counts)


def test_accepts_small_integer_dtypes_and_empty():
    assert seeded().release(np.array([5, 6], dtype=np.uint8)).dtype == np.int64
    assert seeded().release(np.array([], dtype=np.int64)).shape == (0,)


@settings(max_examples=50, deadline=None)
@given(
    a=st.lists(st.integers(10**6, 10**12), min_size=1, max_size=100),
    b_seed=st.integers(0, 2**32),
    seed=st.integers(0, 2**32),
)
def test_noise_is_independent_of_the_counts(a, b_seed, seed):
    """Ordering is the caller's job (the engine sorts bins canonically): the i-th noise draw goes to
    the i-th input, and the noise vector does not depend on the counts. Hence with iid noise the
    output distribution is permutation-equivariant. (Same seed + permuted input is NOT the
    permuted output: draws are positional.) Counts >= 10**6 are never suppressed here."""
    a = np.array(a, dtype=np.int64)
    b = np.random.default_rng(b_seed).integers(10**6, 10**12, a.size)
    za = seeded(seed=seed).release(a) - a
    zb = seeded(seed=seed).release(b) - b
    np.testing.assert_array_equal(za, zb)


# --- release: statistics (each assertion fails falsely with probability <= 1e-6) -------------


def test_count_one_release_rate_with_large_delta():
    """delta = 0.01 (much larger than production, so the event is frequent enough to measure):
    a bin with true count 1 is released at rate release_probability(1) <= delta/2."""
    m = seeded(epsilon=1.0, delta=0.01, seed=1)
    n = 1_000_000
    released = int(np.count_nonzero(m.release(np.ones(n, dtype=np.int64))))
    lo, hi = binomial_interval(released, n)
    assert lo <= m.release_probability(1) <= hi
    assert lo <= m.delta / 2
    assert m.release_probability(1) <= m.delta / 2


@pytest.mark.parametrize("relation", list(Relation))
def test_release_probability_near_threshold(relation):
    m = seeded(epsilon=1.0, delta=0.01, relation=relation, seed=2)
    n = 200_000
    for count in range(m.min_released_count - 3, m.min_released_count + 4):
        released = int(np.count_nonzero(m.release(np.full(n, count, dtype=np.int64))))
        lo, hi = binomial_interval(released, n)
        assert lo <= m.release_probability(count) <= hi


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_large_counts_are_unbiased(epsilon):
    m = seeded(epsilon=epsilon, seed=3)
    n, true = 1_000_000, 10**7
    err = m.release(np.full(n, true, dtype=np.int64)) - true
    q = math.exp(-1 / m.scale)
    assert abs(err.mean()) <= Z_TWO_SIDED * math.sqrt(2 * q / (1 - q) ** 2 / n)


# --- accuracy helpers ---------------------------------------------------------------------------


def _pmf_sum(scale, lo, hi):
    q = math.exp(-1 / scale)
    z = np.arange(lo, hi + 1)
    return float(np.sum((1 - q) / (1 + q) * q ** np.abs(z)))


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 7.3])
def test_release_probability_matches_pmf(scale):
    for n in range(-5, 60):
        assert release_probability(n, scale, 18) == pytest.approx(_pmf_sum(scale, 18 - n, 5000), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 7.3])
@pytest.mark.parametrize("confidence", [0.1, 0.5, 0.9, 0.95, 0.99, 0.999999])
def test_error_bound_is_smallest(scale, confidence):
    e = error_bound(scale, confidence)
    assert _pmf_sum(scale, -e, e) >= confidence
    assert e == 0 or _pmf_sum(scale, -(e - 1), e - 1) < confidence


def test_error_bound_method_and_validation():
    m = trip_sbh(1.0, DELTA)
    assert m.error_bound() == error_bound(2.0, 0.95) == 6
    for c in (0, 1, 1.5):
        with pytest.raises(ValueError):
            m.error_bound(c)


@pytest.mark.parametrize("scale, t, k", [(2.0, 34, 2), (1.0, 3, 1), (0.05, 2, 1), (7.3, 100, 2)])
def test_tail_check_is_tight_and_conservative(scale, t, k):
    """The constructor's rigorous check accepts delta 1e-12 above k*P(Z >= t) and rejects 1e-12 below."""
    with localcontext() as ctx:
        ctx.prec = 60
        inv = 1 / Decimal(scale)
        exact = k * (-t * inv).exp() / (1 + (-inv).exp())
    assert _tail_within(scale, t, float(exact * Decimal(1 + 1e-12)), k)
    assert not _tail_within(scale, t, float(exact * Decimal(1 - 1e-12)), k)


# --- bounded contributions (L0, L1, Linf) -------------------------------------------------------


sensitivities = st.builds(
    lambda l0, linf, l1_extra: Sensitivity(l0, min(l0 * linf, linf + l1_extra), min(l0 * linf, linf + l1_extra) * linf, linf),
    st.integers(1, 60), st.integers(1, 5), st.integers(0, 300),
)


@settings(max_examples=300, deadline=None)
@given(epsilon=st.floats(0.3, 20.0), delta=st.floats(1e-15, 0.5), sens=sensitivities)
def test_generalised_threshold_bounds_every_unstable_bin(epsilon, delta, sens):
    """scale = l1/epsilon rounded up and l0 * P(Z >= m - linf) <= delta, checked at 50 digits: each of the at most
    l0 bins that exist in one neighbour only has count <= linf and is released with probability <= delta/l0."""
    m = StabilityHistogram(epsilon, delta, sens)
    assert m.scale == laplace_scale(sens.l1, epsilon) and Fraction(m.scale) >= Fraction(sens.l1) / Fraction(epsilon)
    assert m.threshold == pytest.approx(sens.linf + m.scale * math.log(sens.l0 / delta), rel=1e-12)
    with localcontext() as ctx:
        ctx.prec = 50
        inv = 1 / Decimal(m.scale)
        tail = (-(m.min_released_count - sens.linf) * inv).exp() / (1 + (-inv).exp())
        assert sens.l0 * tail <= Decimal(delta)
    assert m.release_probability(sens.linf) == pytest.approx(float(tail), rel=1e-9)


def test_card_day_parameters():
    """One card-day, at most 4 trips and 1 per bin, added or removed: scale 4/epsilon, threshold
    1 + (4/epsilon) ln(4/delta) (the 2016 formula with k = 4)."""
    m = StabilityHistogram(2.0, DELTA, Sensitivity(4, 4, 4, 1))
    assert (m.scale, m.min_released_count) == (2.0, 36)
    assert m.threshold == pytest.approx(1 + 2 * math.log(4 / DELTA), rel=1e-14)
    assert StabilityHistogram(2.0, DELTA, Sensitivity(4, 4, 8, 2)).threshold == pytest.approx(m.threshold + 1)


def test_sensitivity_must_be_consistent():
    for args in [(0, 1, 1, 1), (2, 3, 3, 1), (2, 2, 5, 1), (2, 2, 2, 3), (1, 1, 1, True)]:
        with pytest.raises(ValueError):
            Sensitivity(*args)
    with pytest.raises(ValueError, match="Sensitivity"):
        StabilityHistogram(1.0, DELTA, (2, 2, 2, 1))


# --- the largest scale, and the refusals' reasons ------------------------------------------------


def test_scale_up_to_max_scale_and_no_further():
    """l1 = 2 at epsilon 2/1024 is a scale of exactly ``MAX_SCALE``: accepted (kills ``scale >= MAX_SCALE`` in the
    constructor), with the threshold of the formula; an epsilon one float smaller is refused with its reason."""
    epsilon = 2 / MAX_SCALE
    m = StabilityHistogram(epsilon, DELTA, Sensitivity(2, 2, 2, 1))
    assert m.scale == MAX_SCALE
    assert m.min_released_count == math.ceil(1 + MAX_SCALE * math.log(2 / DELTA))
    with pytest.raises(ValueError, match=r"^epsilon too small for l1 = 2: scale 1024\.0000000000002 exceeds 1024\.0$"):
        StabilityHistogram(math.nextafter(epsilon, 0), DELTA, Sensitivity(2, 2, 2, 1))


@pytest.mark.parametrize(
    "epsilon, delta, sensitivity, reason",
    [
        (0.0, DELTA, Sensitivity(2, 2, 2, 1), "^epsilon must be finite and > 0, got 0.0$"),
        (True, DELTA, Sensitivity(2, 2, 2, 1), "^epsilon must be finite and > 0, got True$"),
        (1.0, 1.0, Sensitivity(2, 2, 2, 1), "^delta must satisfy 0 < delta < 1, got 1.0$"),
        (1.0, DELTA, (2, 2, 2, 1), r"^sensitivity must be a Sensitivity, got \(2, 2, 2, 1\)$"),
    ],
)
def test_refusals_state_their_reason(epsilon, delta, sensitivity, reason):
    """Kills each refusal of the constructor without its reason (``ValueError(None)``)."""
    with pytest.raises(ValueError, match=reason):
        StabilityHistogram(epsilon, delta, sensitivity)


def test_error_bound_and_counts_refusals_state_their_reason():
    """Kills ``error_bound``'s and ``checked_counts``' refusals without their reason, or with it in other words
    (``XX...XX``, upper case: the "> 0" the older test matches survives both)."""
    with pytest.raises(ValueError, match=r"^confidence must be in \(0, 1\), got 1$"):
        error_bound(2.0, 1)
    with pytest.raises(ValueError, match=r"^counts must be a 1-D integer array castable to int64, got float64 "
                                         r"with shape \(2,\)$"):
        seeded().release(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="^counts must all be > 0: only bins present in the data may be released$"):
        seeded().release(np.array([3, 0]))


def test_error_bound_defaults_to_95_percent():
    """The module function's default confidence is 0.95, like the method's (kills a default of 1.95, which refuses)."""
    assert error_bound(2.0) == error_bound(2.0, 0.95) == 6


@pytest.mark.parametrize("scale", [0.25, 1.0, 2.0, 7.3])
def test_pmf_is_the_centred_mass_with_under_1e_17_left_out(scale):
    """``pmf(scale)`` gives ``k0`` and the mass from ``k0`` to ``-k0``: centred (the mass at index ``-k0`` is
    ``P(Z = 0)``), and what it leaves out is below 1e-17, as documented. Kills the support cut to
    ``ceil(40 scale) - 10`` (it leaves out 5e-16 at scale 2, and all but 0 at scale 0.25) and ``k0`` returned as
    ``+k``. The page's error bounds of sums are built from this mass."""
    k0, mass = sbh.pmf(scale)
    q = math.exp(-1 / scale)
    assert k0 < 0 and mass.shape == (1 - 2 * k0,)
    assert mass[-k0] == pytest.approx((1 - q) / (1 + q), rel=1e-15)
    assert mass[-k0 + 3] == pytest.approx((1 - q) / (1 + q) * q**3, rel=1e-12)
    assert 2 * q ** (1 - k0) / (1 + q) < 1e-17  # the mass left out
    assert math.fsum(mass) == pytest.approx(1, abs=1e-15)


def test_a_threshold_that_float_rounding_puts_on_an_integer_is_refused():
    """At scale 1/40 (q = e^-40) the bound has almost no slack (the factor 1/(1 + q)), so the float threshold
    ``1 + ln(1/delta)/40`` can round down onto an integer the exact threshold lies just above: here it is 2.0, so
    ``min_released_count`` would be 2 where the delta bound needs 3. The rigorous check must refuse. Kills the check
    fed ``min_released_count + linf`` (it then passes) and the refusal without its reason."""
    delta = 4.2483542552915465e-18
    assert 1 + (1 / 40) * math.log(1 / delta) == 2.0  # what the constructor computes in float
    with localcontext() as ctx:  # exactly: the released share of a bin of count linf = 1 at threshold 2 exceeds delta
        ctx.prec = 50
        q = Decimal(-40).exp()
        assert q / (1 + q) > Decimal(delta)
    with pytest.raises(ValueError, match="^float rounding of the threshold breaks the delta bound; adjust epsilon or "
                                         "delta$"):
        StabilityHistogram(40.0, delta, Sensitivity(1, 1, 1, 1))


@pytest.mark.parametrize("scale, t, k", [(2.0, 34, 2), (1.0, 3, 1), (0.025, 1, 1), (7.3, 100, 2)])
def test_tail_check_is_rigorous_to_its_last_digit(scale, t, k):
    """A delta 1e-45 (relative) below ``k * P(Z >= t)`` is refused and one 1e-36 above accepted. No float lies that
    close, so delta is given as a 60-digit Decimal (the check reads it with ``Decimal(delta)``, exactly as a float).
    Kills the numerator's widening turned inward (``/ (1 + rel)``, ``* (1 - rel)``), which puts the bound 1e-39
    below the tail."""
    with localcontext() as ctx:
        ctx.prec = 60
        inv = 1 / Decimal(scale)
        exact = k * (-t * inv).exp() / (1 + (-inv).exp())
        below, above = exact * (1 - Decimal("1e-45")), exact * (1 + Decimal("1e-36"))
    assert not _tail_within(scale, t, below, k)
    assert _tail_within(scale, t, above, k)
