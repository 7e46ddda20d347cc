import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from opal_dp.core import MAX_SCALE, DiscreteLaplace, SecureBits, SeededBits
from opal_dp.core import noise
from opal_dp.core.noise import _floor_scaled_power, _floor_scaled_powers, _table, floor_exp_neg
from opal_dp_tests.core.helpers import (
    ALPHA,
    OS_ALPHA,
    UINT64_MAX,
    Z_TWO_SIDED,
    ScriptedBits,
    chi_square_pvalue,
    reference_floor,
)

dp.enable_features("contrib")

SCALES = [0.2, 0.5, 1.0, 2.0, 2 / 3, 7.3, 50.0]


# --- the exact inversion table ---------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.01, 0.05, 0.5, 1.0, 2.0, 2 / 3, 1 / 0.7, 40.0])
def test_table_is_exact(scale):
    t = _table(scale)
    k = np.arange(t.size, 0, -1)
    assert t.ascending.tolist() == [reference_floor(scale, int(i), 64) for i in k]
    assert t.size == max(1, math.ceil(32 * math.log(2) * scale))


@pytest.mark.parametrize("scale", [0.05, 0.3, 1.0, 2.0, 100.0, MAX_SCALE])
def test_table_strictly_decreasing_and_reaches_2_pow_minus_32(scale):
    asc = _table(scale).ascending.astype(object)
    assert all(a < b for a, b in zip(asc[:-1], asc[1:]))
    assert asc[0] <= 2**32 * 1.0001  # T_K / 2**64 ~ q**K ~ 2**-32


@pytest.mark.parametrize("scale", [1.0, 2.0, 2 / 3])
@pytest.mark.parametrize("k", [1, 3])
def test_next_digits_are_exact(scale, k):
    t = _table(scale)
    for j in (2, 3, 4):
        assert t.next_digit(k, j) == reference_floor(scale, k, 64 * j) % 2**64


@pytest.mark.parametrize("scale", [0.05, 1.0, 2 / 3, 50.0, 300.0, MAX_SCALE])
def test_the_guide_ranks_every_word_as_the_search_does(scale):
    """``_Table.rank`` is ``searchsorted`` on every word: each entry, its neighbours, the edges of every guide
    bucket that holds an entry, and random words."""
    t = _table(scale)
    edges = (t.ascending >> np.uint64(64 - noise.GUIDE_BITS)) << np.uint64(64 - noise.GUIDE_BITS)
    span = np.uint64(2 ** (64 - noise.GUIDE_BITS) - 1)
    words = np.concatenate([t.ascending, t.ascending - np.uint64(1), t.ascending + np.uint64(1), edges, edges + span,
                            np.array([0, 1, UINT64_MAX - 1, UINT64_MAX], dtype=np.uint64),
                            SeededBits(7).words(200_000), SeededBits(8).words(20_000) >> np.uint64(16)])
    assert (t.guide >= 0).any() and (t.guide < 0).any()
    assert np.array_equal(t.rank(words), np.searchsorted(t.ascending, words, side="right"))


@pytest.mark.parametrize("scale", [100.0, MAX_SCALE])
def test_a_large_table_is_the_floor_of_each_entrys_own_exponential(scale):
    """The table's chained products give what each entry's own ``floor_exp_neg`` gives, up to the last entries of
    the largest table, where the chain's enclosure is widest."""
    by_k = _table(scale).ascending[::-1]  # T_1, ..., T_K
    ks = [*range(1, len(by_k) + 1, 37), len(by_k)]
    assert [int(by_k[k - 1]) for k in ks] == [_floor_scaled_power(1 / Fraction(scale), k, 64) for k in ks]


def _counting_alone(monkeypatch) -> list[int]:
    """The k of every entry ``_floor_scaled_powers`` hands to ``_floor_scaled_power`` to decide alone."""
    alone: list[int] = []

    def counted(inv_scale, k, bits):
        alone.append(k)
        return _floor_scaled_power(inv_scale, k, bits)

    monkeypatch.setattr(noise, "_floor_scaled_power", counted)
    return alone


@pytest.mark.parametrize("offset", ["-1e-60", "1e-60"])
def test_a_power_within_a_hair_of_an_integer_is_decided_alone(offset, monkeypatch):
    """``q * 2**64`` 1e-60 below or above an integer: the chain's enclosure (73 digits) straddles it, so that entry
    alone goes to ``floor_exp_neg``, and the next ones, far from any integer, are the chain's. Kills the enclosure
    turned inward and the fallback taken on agreement instead of disagreement."""
    n = 12_345_678_901_234_567_891  # q about 0.67: q**2 * 2**64 and q**3 * 2**64 are nowhere near an integer
    x = _x_near(n + 1 if offset.startswith("-") else n, offset)
    alone = _counting_alone(monkeypatch)
    assert _floor_scaled_powers(x, 3, 64) == [floor_exp_neg(k * x, 64) for k in (1, 2, 3)]
    assert alone == [1] and _floor_scaled_powers(x, 3, 64)[0] == n


def test_a_chain_too_coarse_to_decide_falls_back_entry_by_entry_and_stays_exact(monkeypatch):
    """With 21 digits the enclosure of ``q**k * 2**64`` is wider than one: many entries fall back, none is wrong."""
    monkeypatch.setattr(noise, "CHAIN_GUARD_DIGITS", -40)
    alone = _counting_alone(monkeypatch)
    inv_scale = 1 / Fraction(7.3)
    assert _floor_scaled_powers(inv_scale, 300, 64) == [floor_exp_neg(k * inv_scale, 64) for k in range(1, 301)]
    assert 0 < len(alone) < 300


# --- scripted paths: tie at U == T_k and the memoryless tail ----------------------------------


def _t(scale, k):
    return reference_floor(scale, k, 64)


def _digit(scale, k, j):
    return reference_floor(scale, k, 64 * j) % 2**64


@pytest.mark.parametrize("k", [1, 3, 44])
def test_tie_resolved_by_next_word(k):
    """U == T_k: the next word below q**k's next digit means R < q**k (G = k), above means G = k-1."""
    s = 2.0  # K = 45; k = K is in test_tie_at_last_entry_continues_into_tail
    d2 = _digit(s, k, 2)
    assert 0 < d2 < UINT64_MAX
    for w2, g in [(d2 - 1, k), (d2 + 1, k - 1)]:
        bits = ScriptedBits([_t(s, k), UINT64_MAX, w2])  # G1 ties at T_k, G2 = 0
        assert DiscreteLaplace(bits).sample(s, 1).tolist() == [g]
        assert bits.remaining == 0


def test_tie_on_second_geometric_and_equal_next_word():
    s, k = 2.0, 3
    d2, d3 = _digit(s, k, 2), _digit(s, k, 3)
    cases = [
        ([UINT64_MAX, _t(s, k), d2 - 1], -k),
        ([_t(s, k), UINT64_MAX, d2, d3 - 1], k),
        ([_t(s, k), UINT64_MAX, d2, d3 + 1], k - 1),
    ]
    for words, z in cases:
        bits = ScriptedBits(words)
        assert DiscreteLaplace(bits).sample(s, 1).tolist() == [z]
        assert bits.remaining == 0


def test_tie_at_last_entry_continues_into_tail():
    """U == T_K resolved below q**K: G = K plus a fresh geometric."""
    s, big_k = 2.0, 45
    bits = ScriptedBits([_t(s, big_k), UINT64_MAX, _digit(s, big_k, 2) - 1, _t(s, 2) - 1])
    assert DiscreteLaplace(bits).sample(s, 1).tolist() == [big_k + 2]
    assert bits.remaining == 0


def test_memoryless_tail():
    """U < T_K means R < q**K: G = K + a fresh geometric (twice here)."""
    s, big_k = 2.0, 45
    for words, z in [
        ([0, UINT64_MAX, _t(s, 2) - 1], big_k + 2),
        ([0, UINT64_MAX, 0, _t(s, 2) - 1], 2 * big_k + 2),
        ([UINT64_MAX, 0, UINT64_MAX], -big_k),
    ]:
        bits = ScriptedBits(words)
        assert DiscreteLaplace(bits).sample(s, 1).tolist() == [z]
        assert bits.remaining == 0


def test_batch_with_ties_and_tail_draws_in_element_order():
    s = 2.0
    d2 = _digit(s, 5, 2)
    words = [_t(s, 5), 0, UINT64_MAX, UINT64_MAX,  # G1 = (tie@5, tail), G2 = (0, 0)
             d2 - 1,                                # tie of element 0 -> below
             UINT64_MAX]                            # tail of element 1 -> +0
    bits = ScriptedBits(words)
    assert DiscreteLaplace(bits).sample(s, 2).tolist() == [5, 45]
    assert bits.remaining == 0


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0, -1.0, math.inf, math.nan, MAX_SCALE * 2, "2", True, None])
def test_rejects_bad_scale(scale):
    with pytest.raises(ValueError):
        DiscreteLaplace(SeededBits(0)).sample(scale, 3)


@pytest.mark.parametrize("size", [-1, 2.0, True])
def test_rejects_bad_size(size):
    with pytest.raises(ValueError):
        DiscreteLaplace(SeededBits(0)).sample(1.0, size)


def test_output_type_and_seeded_passthrough():
    z = DiscreteLaplace(SeededBits(0)).sample(1.0, 10)
    assert z.dtype == np.int64 and z.shape == (10,)
    assert DiscreteLaplace(SeededBits(0)).sample(1.0, 0).shape == (0,)
    assert DiscreteLaplace(SeededBits(0)).seeded is True
    assert DiscreteLaplace().seeded is False and DiscreteLaplace(SecureBits()).seeded is False


def test_seeded_sampler_is_reproducible():
    a = DiscreteLaplace(SeededBits(5)).sample(2.0, 1000)
    b = DiscreteLaplace(SeededBits(5)).sample(2.0, 1000)
    np.testing.assert_array_equal(a, b)


# --- distribution (each assertion fails falsely with probability <= 1e-6) ---------------------

N = 200_000


@pytest.mark.parametrize("scale", SCALES)
def test_goodness_of_fit_seeded(scale):
    z = DiscreteLaplace(SeededBits(20160730)).sample(scale, N)
    assert chi_square_pvalue(z, scale) > ALPHA


@pytest.mark.parametrize("scale", [0.5, 2.0, 7.3])
def test_goodness_of_fit_secure(scale):
    z = DiscreteLaplace(SecureBits()).sample(scale, N)
    assert chi_square_pvalue(z, scale) > OS_ALPHA


@pytest.mark.parametrize("scale", SCALES)
def test_mean_variance_symmetry(scale):
    """CLT bounds at 1e-6 two-sided for the mean and the variance; sign test for symmetry."""
    z = DiscreteLaplace(SeededBits(11)).sample(scale, N).astype(np.float64)
    q = math.exp(-1 / scale)
    var = 2 * q / (1 - q) ** 2
    m4 = float(np.sum(np.arange(1, 4000) ** 4 * (1 - q) / (1 + q) * 2 * q ** np.arange(1, 4000)))
    assert abs(z.mean()) <= Z_TWO_SIDED * math.sqrt(var / N)
    assert abs(np.mean(z**2) - var) <= Z_TWO_SIDED * math.sqrt((m4 - var**2) / N)
    pos, neg = int((z > 0).sum()), int((z < 0).sum())
    assert stats.binomtest(pos, pos + neg, 0.5).pvalue > ALPHA


@pytest.mark.parametrize("scale", [2.0, 1 / 0.7])
def test_matches_opendp_discrete_laplace(scale):
    """Two-sample chi-square (1e-6) against OpenDP's exact integer Laplace on zeros."""
    n = 100_000
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64), scale=scale)
    theirs = np.asarray(meas([0] * n), dtype=np.int64)
    ours = DiscreteLaplace(SeededBits(3)).sample(scale, n)
    a = 1
    while min(np.sum(theirs >= a + 1), np.sum(ours >= a + 1)) >= 20:
        a += 1
    table = np.stack([np.bincount(np.clip(x, -a, a) + a, minlength=2 * a + 1) for x in (ours, theirs)])
    assert stats.chi2_contingency(table).pvalue > ALPHA


# --- floor_exp_neg where exp(-x) * 2**bits lies within 1e-45 of an integer -----------------------


def _x_near(value: int, offset: str, bits: int = 64) -> Fraction:
    """A rational ``x`` with ``exp(-x) * 2**bits`` within 1e-120 of ``value + offset``."""
    with localcontext() as ctx:
        ctx.prec = 150
        return Fraction((Decimal(2) ** bits / (Decimal(value) + Decimal(offset))).ln())


@pytest.mark.parametrize("offset", ["-1e-45", "1e-45"])
def test_floor_exp_neg_is_exact_within_a_hair_of_an_integer(offset):
    """``exp(-x) * 2**64`` 1e-45 below or above an integer near 2**63: the first enclosure (61 digits, widened by
    1e-60 relative, about 9e-42 here, 9 units of the last digit) straddles the integer, so the precision must be
    raised before the floor is known.
    Kills the enclosure turned inward (``lo = ... * (1 + rel)`` returns one too many below the integer,
    ``hi = ... * (1 - rel)`` one too few above it) and a precision that does not grow (``prec /= 2``)."""
    n = 2**63 - 1  # leading digits 9.2 (and 0.49 for exp(-x)): the widening is many units of the last digit
    value = n + 1 if offset.startswith("-") else n
    x = _x_near(value, offset)
    with localcontext() as ctx:  # the reference, at 300 digits
        ctx.prec = 300
        exact = (-(Decimal(x.numerator) / Decimal(x.denominator))).exp() * Decimal(2) ** 64
    assert int(exact) == n and Decimal("1e-46") < abs(exact - value) < Decimal("1e-44")
    assert floor_exp_neg(x, 64) == n


@pytest.mark.parametrize("x", [Fraction(0), Fraction(-1, 3), Fraction(-5)])
def test_floor_exp_neg_refuses_x_that_is_not_positive(x):
    """``exp(0) * 2**bits`` is an integer, so the enclosure never settles (the loop would never end); a negative
    ``x`` is outside the contract. Kills ``not x >= 0`` and the refusal without its reason."""
    with pytest.raises(ValueError, match="^x must be a positive rational, got "):
        floor_exp_neg(x, 64)


# --- the accepted scales and sizes, and the refusals' reasons -----------------------------------


def test_scale_up_to_max_scale_and_no_further():
    """``MAX_SCALE`` itself is accepted (kills ``scale < MAX_SCALE``), the next float above it is refused."""
    assert DiscreteLaplace(SeededBits(0)).sample(MAX_SCALE, 3).shape == (3,)
    with pytest.raises(ValueError, match=r"^scale must be finite with 0 < scale <= 1024\.0, got "):
        DiscreteLaplace(SeededBits(0)).sample(math.nextafter(MAX_SCALE, math.inf), 3)


@pytest.mark.parametrize("scale", ["2", True, None])
def test_a_scale_that_is_not_a_number_is_refused_with_its_reason(scale):
    """Kills the refusal without its reason (``ValueError(None)``) in ``_check_scale``."""
    with pytest.raises(ValueError, match="^scale must be a real number, got "):
        DiscreteLaplace(SeededBits(0)).sample(scale, 3)


@pytest.mark.parametrize("size", [-1, 2.0, True])
@pytest.mark.parametrize("draw", ["sample", "geometric"])
def test_a_size_that_is_not_a_count_is_refused_with_its_reason(size, draw):
    """``geometric`` is called directly by the sparse sampler, so its own check matters: kills a float or bool size
    accepted there (``and`` for ``or``) and either refusal without its reason."""
    with pytest.raises(ValueError, match="^size must be a non-negative integer, got "):
        getattr(DiscreteLaplace(SeededBits(0)), draw)(1.0, size)
