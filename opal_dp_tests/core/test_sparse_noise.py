"""The fast empty-cell sampler against naive enumeration, its exact tail digits, and its exact accept steps."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from opal_dp.core import SecureBits, SeededBits
from opal_dp.core.sparse_noise import (
    GaussianNoise,
    LaplaceNoise,
    _bernoulli,
    _exact_failures,
    _failures,
    _floor_word,
    sparse_threshold_cells,
    tail_probability,
    threshold_cells,
)
from opal_dp_tests.core.helpers import ALPHA, UINT64_MAX, ScriptedBits

def naive_threshold_cells(law, k: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference the fast samplers are tested against: draw every cell's noise, keep those ``>= t``."""
    z = law.draw(k)
    positions = np.flatnonzero(z >= t)
    return positions, z[positions]


CELLS = 12  # cells per replicate; one call over CELLS * REPS iid cells gives REPS independent replicates
REPS = 40_000
N_TESTS = 3  # chi-square tests per law: the false-failure rate per law is at most ALPHA (Bonferroni)


def _reference_tail(law, t: int) -> Fraction:
    """``P(Z >= t)`` at 120 digits, plainly (independent of the module's interval code)."""
    with localcontext() as ctx:
        ctx.prec = 120
        if isinstance(law, LaplaceNoise):
            q = (-(1 / Decimal(law.scale))).exp()
            p = q**t / (1 + q)
        else:
            s2 = Decimal(law.sigma) ** 2
            k0 = math.ceil(60 * law.sigma) + 20
            w = {z: (-(Decimal(z * z) / (2 * s2))).exp() for z in range(-k0, k0 + 1)}
            p = sum(v for z, v in w.items() if z >= t) / sum(w.values())
        return Fraction(p)


def _two_sample_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test of homogeneity of two integer samples; sparse top values pooled (expected >= 10)."""
    top = max(int(a.max(initial=0)), int(b.max(initial=0)))
    lo = min(int(a.min(initial=0)), int(b.min(initial=0)))
    counts = np.stack([np.bincount(x - lo, minlength=top - lo + 1) for x in (a, b)])
    total = counts.sum(axis=0)
    expected_min = total * min(len(a), len(b)) / (len(a) + len(b))
    keep = np.flatnonzero(expected_min >= 10)
    cut = keep[-1] if keep.size else 0
    pooled = np.concatenate([counts[:, :cut], counts[:, cut:].sum(axis=1, keepdims=True)], axis=1)
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    return float(stats.chi2_contingency(pooled).pvalue)


def _replicates(sampler, law, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept cells per replicate, kept positions within their replicate, kept values)."""
    positions, values = sampler(law, CELLS * REPS, t)
    return np.bincount(positions // CELLS, minlength=REPS), positions % CELLS, values


@pytest.mark.parametrize("sampler", [threshold_cells, sparse_threshold_cells])
@pytest.mark.parametrize("law,t", [(LaplaceNoise(1.5, SeededBits(21)), 2),
                                   (GaussianNoise(2.5, SeededBits(22)), 3)])
def test_fast_sampler_matches_naive_enumeration(sampler, law, t):
    fast, naive = _replicates(sampler, law, t), _replicates(naive_threshold_cells, law, t)
    for a, b in zip(fast, naive):  # per-replicate count, position, value: each law must be the same
        assert _two_sample_pvalue(a, b) > ALPHA / N_TESTS


@pytest.mark.parametrize("sampler", [threshold_cells, sparse_threshold_cells])
@pytest.mark.parametrize("law,t", [(LaplaceNoise(1.5, SeededBits(21)), 2),
                                   (GaussianNoise(2.5, SeededBits(22)), 3)])
def test_fast_sampler_is_not_blind_to_a_wrong_threshold(sampler, law, t):
    """The same comparison must reject a sampler whose threshold is off by one (the test has power)."""
    fast = _replicates(sampler, law, t)
    wrong = _replicates(naive_threshold_cells, law, t + 1)
    assert min(_two_sample_pvalue(a, b) for a, b in zip(fast, wrong)) < ALPHA / N_TESTS


@pytest.mark.parametrize(
    "law,t",
    [(LaplaceNoise(1.0), 1), (LaplaceNoise(2.0), 7), (LaplaceNoise(0.3), 3),
     (GaussianNoise(1.0), 1), (GaussianNoise(4.5), 9), (GaussianNoise(12.0), 40)],
)
def test_tail_digits_are_exact(law, t):
    p = _reference_tail(law, t)
    for j in (1, 2):
        assert law.tail_digit(t, j) == math.floor(p * 2 ** (64 * j)) % 2**64
    assert tail_probability(law, t) == pytest.approx(float(p), rel=1e-12)



@pytest.mark.parametrize(
    "law,t",
    [(LaplaceNoise(1.0), 1), (LaplaceNoise(2.0), 7), (LaplaceNoise(0.3), 3),
     (GaussianNoise(1.0), 1), (GaussianNoise(4.5), 9), (GaussianNoise(12.0), 40)],
)
@pytest.mark.parametrize("prec", [12, 30])
def test_tail_bounds_enclose_the_exact_tail(law, t, prec):
    """The digits of ``P(Z >= t)`` are exact only if every enclosure ``lo <= p <= hi`` is rigorous. At 12 and 30
    digits (where a rounding in the wrong direction is visible against the 120-digit reference) the enclosure
    holds and is tight. Kills the mutants that round a bound the wrong way or drop a term of the Gaussian sum."""
    p = _reference_tail(law, t)
    lo, hi = law.tail_bounds(t, prec)
    assert Fraction(lo) <= p <= Fraction(hi)
    assert Fraction(hi - lo) <= p * Fraction(10) ** (5 - prec)

def test_exact_skip_agrees_with_the_floor_of_the_logarithm():
    """The exact fallback of the sparse sampler gives ``floor(ln R / ln(1 - p))`` (the float path's value away from
    integer boundaries), also for the word 0 and when capped."""
    law = LaplaceNoise(3.0, SecureBits())
    p = tail_probability(law, 4)
    bounds = lambda prec: law.tail_bounds(4, prec)  # noqa: E731
    for u in SecureBits().words(200):
        expected = math.floor(math.log((int(u) + 0.5) / 2**64) / math.log1p(-p))
        assert _exact_failures(law.bits, int(u), bounds, 10**9) == expected
    assert _exact_failures(ScriptedBits([0, 0, 2**63]), 0, bounds, 10**9) > 200  # R = 2**-129
    assert _exact_failures(law.bits, 0, bounds, 7) == 7



def _first_two_words(power: Decimal) -> tuple[int, int]:
    """The integer part of ``power`` (a value times 2**64) and the next 64 bits of its fraction."""
    u = int(power)
    return u, int((power - u) * Decimal(2) ** 64)


@pytest.mark.parametrize("side, expected", [(-1, 5), (1, 4)])
def test_exact_skip_reads_further_words_where_the_first_straddles_a_power(side, expected):
    """A first word ``u = floor(a**5 * 2**64)`` leaves ``R`` on either side of ``a**5`` (``a = 1 - p``): the next word,
    just below or above the fraction ``a**5 * 2**64 - u``, decides ``N = 5`` or ``4``. Kills the ``_exact_failures``
    mutants that round ``R``'s or ``a``'s enclosure the wrong way, or weigh the further words wrongly: they are sure
    too early, or of the wrong count, exactly where the float path hands over."""
    law = LaplaceNoise(3.0)
    bounds = lambda prec: law.tail_bounds(4, prec)  # noqa: E731
    with localcontext() as ctx:
        ctx.prec = 120
        lo, hi = law.tail_bounds(4, 110)
        power = (1 - (lo + hi) / 2) ** 5 * Decimal(2) ** 64
        u, w = _first_two_words(power)
        w += side
    bits = ScriptedBits([w])
    assert _exact_failures(bits, u, bounds, 10**9) == expected and bits.remaining == 0

@pytest.mark.parametrize("side", [-1, 1])
def test_exact_skip_counts_right_from_either_side_of_its_guess(side):
    """The exact fallback guesses ``N`` from floats and walks to the count its enclosures make certain. Whether the
    guess lands on ``N`` or one below depends on float rounding; at ``p = 0.15`` (given exactly), first words
    straddling ``a**n`` for ``n`` in 1..40 meet both (36 below, 4 on it). Kills the mutants that walk the wrong way
    (``n -= 1`` for ``n += 1``), restart the walk at 1, or compare with ``below(n + 2)``: each returns a wrong count
    or never ends."""
    p = Decimal("0.15")
    guessed_low = 0
    for n in range(1, 41):
        with localcontext() as ctx:
            ctx.prec = 200
            power = (1 - p) ** n * Decimal(2) ** 64
            u, w = _first_two_words(power)
            w += side
            ctx.prec = 60  # the first guess of ``_exact_failures``, as it computes it
            slack = Decimal(10) ** -55
            r_hi, a_hi = (u + 1) / Decimal(2) ** 64 * (1 + slack), (1 - p) * (1 + slack)
            guessed_low += math.floor(math.log(float(r_hi)) / math.log(float(a_hi))) < n
        bits = ScriptedBits([w])
        assert _exact_failures(bits, u, lambda prec: (p, p), 10**9) == (n if side < 0 else n - 1)
        assert bits.remaining == 0
    assert 0 < guessed_low < 40  # both kinds of guess were met


def test_the_float_skip_is_sure_only_of_the_exact_count_near_every_power():
    """Words at 1 to 10**8 units of ``2**-64`` on either side of ``a**n`` for ``n`` in 1..150 (``p = 0.15`` given
    exactly): the float path must give the exact count ``#{j : u < floor(a**j 2**64)}`` and, where unsure, the exact
    path must settle it without further words (none of these words straddles a power). The relative margin decides
    near the larger powers, the word's own slack near the smaller ones (``a**n < 3e-5``). Kills the mutants that
    narrow ``R``'s interval (``u - 2**12`` for the top) or the relative margin on either end (``x_lo / (1 - 1e-12)``,
    ``x_lo (1 + 1e-12)``, ``x_hi / (1 + 1e-12)``, ``x_hi (1 - 1e-12)``): each is sure of a wrong count next to a
    power."""
    p = Decimal("0.15")
    with localcontext() as ctx:
        ctx.prec = 200
        floors = [int((1 - p) ** j * Decimal(2) ** 64) for j in range(1, 300)]
    offsets = (1, 2, 3, 100, 4095, 4096, 4097, 8193, 10**5, 10**6, 5 * 10**6, 10**7, 10**8)
    words = sorted({floors[n - 1] + side * d for n in range(1, 151) for d in offsets for side in (-1, 1)})
    expected = [sum(u < f for f in floors) for u in words]
    n = _failures(ScriptedBits([]), np.array(words, dtype=np.uint64), math.log1p(-0.15), lambda prec: (p, p), 10**9)
    assert n.tolist() == expected


def test_the_word_zero_is_never_taken_as_sure():
    """``u = 0`` leaves ``R`` in ``[0, 2**-64)``, where the count has no upper bound: the exact path must read further
    words. At ``a = 1e-10`` the float path's interval for ``u = 0`` would claim a count of 1; the next words
    ``0, 2**63`` put ``R`` in ``[2**-129, 2**-128)``, between ``a**4`` and ``a**3``: the count is 3. Kills ``u >= 0``
    for ``u > 0``."""
    p = 1 - Decimal("1e-10")
    bits = ScriptedBits([0, 2**63])
    n = _failures(bits, np.zeros(1, dtype=np.uint64), math.log1p(-float(p)), lambda prec: (p, p), 10**9)
    assert n.tolist() == [3] and bits.remaining == 0


def test_sparse_cells_pass_one_after_another_across_batches():
    """Words of all ones make every cell pass (``R >= a``: no failure before each success), so ``k = 100`` cells at
    ``p = 0.45`` take two batches of words: the positions are 0..99, each once, and their values ``t`` (geometric 0).
    Kills the mutant that starts the second batch at the first batch's second-to-last success (a cell twice)."""
    law = LaplaceNoise(5.0, ScriptedBits([UINT64_MAX] * 1000))
    positions, values = sparse_threshold_cells(law, 100, 1)
    assert positions.tolist() == list(range(100)) and values.tolist() == [1] * 100


def test_sparse_cells_settle_a_straddling_word_with_the_laws_own_bits_and_tail():
    """A first word straddling ``a**5`` sends the sparse sampler to its exact path, which must read the next word from
    the law's own source and narrow the law's own tail bounds. With ``k = 8`` the batch is 17 words: the straddling
    one, then all ones (no failures); the word after the batch settles the count at 5, so cells 5, 6 and 7 pass and
    their values read three more words (all ones: geometric 0, value ``t``). Kills the mutants that hand the exact
    path no source, no bounds, or bounds of another threshold or precision."""
    law = LaplaceNoise(3.0)
    with localcontext() as ctx:
        ctx.prec = 120
        lo, hi = law.tail_bounds(4, 110)
        power = (1 - (lo + hi) / 2) ** 5 * Decimal(2) ** 64
        u, w = _first_two_words(power)
        w -= 1
    bits = ScriptedBits([u] + [UINT64_MAX] * 16 + [w] + [UINT64_MAX] * 3)
    positions, values = sparse_threshold_cells(LaplaceNoise(3.0, bits), 8, 4)
    assert positions.tolist() == [5, 6, 7] and values.tolist() == [4, 4, 4] and bits.remaining == 0


def test_a_bad_threshold_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="^threshold t must be an integer >= 1, got 0$"):
        threshold_cells(LaplaceNoise(1.0), 4, 0)


@pytest.mark.parametrize("side", [-1, 1])
def test_exact_skip_is_not_fooled_by_a_power_a_hair_from_a_words_end(side):
    """``a**20`` placed ``1e-57`` (relative) below (``side = -1``) or above a multiple ``W 2**-64``, with ``p`` given
    exactly (to 200 digits): the first word's interval ends on that multiple, on the far side of ``a**20`` from where
    ``R`` lies, and further words (all ones, or all zeros) must carry ``R`` past the hair before the count is sure.
    The enclosure of ``a`` is widened once and then raised to the 20th power: turned inward, the error grows 20-fold
    and outweighs the two other widenings (of ``R`` and of the comparison), so the count is wrongly sure at the first
    word. Kills the mutants that turn ``a``'s widening inward on either end."""
    with localcontext() as ctx:
        ctx.prec = 200
        w = int(Decimal("0.85") ** 20 * Decimal(2) ** 64)
        power = Decimal(w) / Decimal(2) ** 64 * (1 + side * Decimal("1e-57"))
        p = 1 - power ** (Decimal(1) / 20)
    word, after, expected = (w - 1, UINT64_MAX, 19) if side < 0 else (w, 0, 20)
    bits = ScriptedBits([after] * 3)
    assert _exact_failures(bits, word, lambda prec: (p, p), 10**9) == expected and bits.remaining == 0


def test_bernoulli_keeps_reading_words_while_they_tie_with_their_keys_digits():
    """Two keys, each tied with its own first and second digits, decided by the third word. Kills the mutants that
    read a tied key's digits without its key, or go to the wrong next digit (``j = 1``, ``j -= 1``, ``j += 2``)."""
    digits = {5: [0, 2**40, 2**41, 2**42, 1], 9: [0, 2**50, 2**51, 2**52, UINT64_MAX]}
    asked = []

    def digit(key: int, j: int) -> int:
        asked.append(key)
        return digits[key][j]

    words = [2**40, 2**50, 2**41, 2**42 - 1, 2**51, 2**52 + 1]  # first words of 5 and 9; 5's next two; 9's next two
    bits = ScriptedBits(words)
    out = _bernoulli(bits, np.array([5, 9]), digit)
    assert out.tolist() == [True, False] and bits.remaining == 0 and set(asked) == {5, 9}


def test_floor_word_raises_the_precision_until_the_floor_is_certain():
    """``p = 1/2 + 1e-50``: ``floor(p 2**64) = 2**63``, but an enclosure ``p +- 10**-(prec/4)`` straddles ``1/2`` until
    ``prec >= 200``. Kills a precision that does not grow (``prec = 2``: the loop never ends; ``prec /= 2``)."""
    asked = []

    def bounds(prec: int) -> tuple[Decimal, Decimal]:
        asked.append(prec)
        assert len(asked) < 10, f"precisions asked: {asked}"
        with localcontext() as ctx:
            ctx.prec = 100 + prec
            p, width = Decimal(1) / 2 + Decimal(10) ** -50, Decimal(10) ** -(prec // 4)
            return p - width, p + width

    assert _floor_word(bounds, 1) == 2**63
    assert len(asked) > 1 and asked == sorted(asked) and asked[-1] // 4 > 50


def test_floor_word_refuses_a_tail_it_cannot_resolve():
    """An enclosure of 1/2 that never shuts: ``floor(p 2**64)`` is ``2**63 - 1`` or ``2**63`` at every precision."""
    def bounds(prec: int) -> tuple[Decimal, Decimal]:
        with localcontext() as ctx:
            ctx.prec = 10 + prec
            return Decimal(1) / 2 - Decimal(10) ** -prec, Decimal(1) / 2 + Decimal(10) ** -prec

    with pytest.raises(ArithmeticError, match="^tail probability not resolved: it may have a finite binary expansion$"):
        _floor_word(bounds, 1)


def test_bernoulli_compares_words_and_settles_ties_with_further_digits():
    first, second = LaplaceNoise(2.0).tail_digit(3, 1), LaplaceNoise(2.0).tail_digit(3, 2)
    # one word per cell (below, above, tie, tie), then the ties' next words; the kept cells' geometrics
    # then read UINT64_MAX (G = 0)
    bits = ScriptedBits([first - 1, first + 1, first, first, second - 1, second + 1, UINT64_MAX, UINT64_MAX])
    positions, values = threshold_cells(LaplaceNoise(2.0, bits), 4, 3)
    assert positions.tolist() == [0, 2] and values.tolist() == [3, 3] and bits.remaining == 0


def test_laplace_conditional_values_are_threshold_plus_geometric():
    law = LaplaceNoise(2.0, SeededBits(23))
    z = law.draw_at_least(4, 200_000) - 4
    q = math.exp(-1 / 2.0)
    expected = (1 - q) * q ** np.arange(12)
    observed = np.bincount(np.minimum(z, 12), minlength=13)
    expected = np.append(expected, q**12) * z.size
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_gaussian_conditional_values_follow_the_truncated_law():
    sigma, t = 3.0, 2
    law = GaussianNoise(sigma, SeededBits(24))
    z = law.draw_at_least(t, 200_000)
    support = np.arange(t, t + 12)
    w = np.exp(-np.arange(t, t + 80) ** 2 / (2 * sigma**2))
    pmf = w / w.sum()
    expected = np.append(pmf[:12], pmf[12:].sum()) * z.size
    observed = np.bincount(np.minimum(z - t, 12), minlength=13)
    assert support[0] == t and stats.chisquare(observed, expected).pvalue > ALPHA


@pytest.mark.parametrize("k,t", [(-1, 3), (2.5, 3), (True, 3), (4, 0), (4, 1.5)])
@pytest.mark.parametrize("sampler", [threshold_cells, sparse_threshold_cells])
def test_bad_arguments_are_refused(sampler, k, t):
    with pytest.raises(ValueError):
        sampler(LaplaceNoise(1.0), k, t)


@pytest.mark.parametrize("sampler", [threshold_cells, sparse_threshold_cells])
def test_a_bad_cell_count_is_refused_with_its_reason(sampler):
    with pytest.raises(ValueError, match="^k must be a non-negative integer, got -1$"):
        sampler(LaplaceNoise(1.0), -1, 3)


def test_no_cells_and_a_proposal_out_of_range():
    """``sigma²/t`` is the conditional sampler's proposal scale: up to the geometric sampler's ``MAX_SCALE`` and no
    further (kills ``>=`` for ``>`` and the refusal without its reason)."""
    positions, values = threshold_cells(LaplaceNoise(1.0), 0, 3)
    assert positions.size == 0 and values.size == 0
    assert (GaussianNoise(32.0, SeededBits(3)).draw_at_least(1, 50) >= 1).all()  # 32**2 / 1 = MAX_SCALE
    with pytest.raises(ValueError, match=r"^sigma²/t = 1056.25 exceeds the geometric sampler's MAX_SCALE 1024.0$"):
        GaussianNoise(32.5).draw_at_least(1, 1)


def test_a_proposal_scale_that_float_rounds_down_is_rounded_up():
    """Where ``float(sigma²/t)`` lies below ``sigma²/t``, the proposal scale is the next float up (a scale below
    ``sigma²/t`` could make an acceptance probability exceed 1). Kills the mutants of that branch, which it reaches
    only for such (sigma, t)."""
    sigma, t = next((s, t) for s in (3.0, 5.0, 7.0, 11.0) for t in range(2, 40)
                    if Fraction(float(Fraction(s) ** 2 / t)) < Fraction(s) ** 2 / t)
    assert (GaussianNoise(sigma, SeededBits(4)).draw_at_least(t, 200) >= t).all()


def test_a_seeded_gaussian_law_draws_only_from_its_seed():
    """Every draw of a Gaussian law (its values and the conditional sampler's proposals) comes from the source it
    was given. Kills the mutants that build its samplers on the OS source instead: audits would no longer be
    reproducible."""
    a, b = GaussianNoise(3.0, SeededBits(8)), GaussianNoise(3.0, SeededBits(8))
    assert np.array_equal(a.draw(100), b.draw(100))
    assert np.array_equal(a.draw_at_least(2, 100), b.draw_at_least(2, 100))


def test_the_float_skip_is_never_sure_of_a_count_the_word_rounding_can_change():
    """At p = 8.1e-6 (the OD generalised level), a 64-bit word just below the boundary ``R = 1 - p`` rounds to a
    float64 above it; the float path must not be sure of N = 0 there (the exact count is >= 1)."""
    p = Decimal("8.1e-6")
    with localcontext() as ctx:
        ctx.prec = 60
        boundary = (1 - p) * Decimal(2) ** 64  # R < 1 - p  iff  N >= 1
        top = int(boundary)  # every word u < top has R < (u + 1)/2**64 <= 1 - p
        words = [u for u in range(top - 1500, top) if Decimal(float(u)) >= boundary]
    assert words  # the float rounding crosses the boundary for some of them
    u = np.array(words, dtype=np.uint64)
    n = _failures(SecureBits(), u, math.log1p(-float(p)), lambda prec: (p, p), 10**9)
    assert (n >= 1).all()
