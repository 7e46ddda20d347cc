"""The discrete Gaussian's accept decision is exact at the word (``core.discrete_gaussian``, module docstring):
a uniform word ``U`` is compared with ``T = floor(p(a) * 2**64)`` as a 64-bit integer, ``U == T`` is settled by the
next words. Scripted words on each side of ``T`` pin it: a decision that compares in float64 accepts a proposal
that the exact sampler rejects. Kills the acceptance words built without ``dtype=np.uint64``: where a word of
``2**63`` or more sits beside a smaller one, numpy infers float64, where ``T + 1`` and ``T`` are the same float.
(``u <= threshold`` instead of ``<`` is equivalent: every ``U == T`` is decided again by the next words.)"""

from __future__ import annotations

import numpy as np
import pytest

from opal_dp.core.discrete_gaussian import _MASK, DiscreteGaussian, _acceptance

SIGMA = 3.0
ACCEPT = 7  # the second proposal, accepted by a zero word


class ScriptedWords:
    """A bit source that hands out the given 64-bit words in order."""

    seeded = True

    def __init__(self, words: list[int]) -> None:
        self._words = list(words)

    def words(self, n: int) -> np.ndarray:
        out, self._words = self._words[:n], self._words[n:]
        assert len(out) == n, "the sampler asked for more words than scripted"
        return np.array(out, dtype=np.uint64)


class ScriptedProposals:
    """The discrete Laplace proposals, in order."""

    def __init__(self, values: list[int]) -> None:
        self._values = list(values)

    def sample(self, t: int, n: int) -> np.ndarray:
        out, self._values = self._values[:n], self._values[n:]
        return np.array(out, dtype=np.int64)


def draws(words: list[int], proposals: list[int], size: int = 1) -> list[int]:
    noise = DiscreteGaussian(ScriptedWords(words))
    noise._laplace = ScriptedProposals(proposals)
    return [int(v) for v in noise.sample(SIGMA, size)]


def magnitude_whose_word_is_one_float() -> tuple[int, int]:
    """A proposal magnitude ``a`` whose ``T`` lies in (2**53, 2**63) (an int64 that float64 cannot tell from
    ``T + 1``)."""
    accept = _acceptance(SIGMA)
    for a in range(40):
        word = accept.word(a)
        if 2**53 < word < 2**63 and float(word + 1) == float(word) and accept.digit(a, 2) not in (0, _MASK):
            return a, word
    pytest.fail("no magnitude with a word in (2**53, 2**63)")


def test_a_word_equal_to_the_threshold_is_settled_by_the_next_word():
    a, word = magnitude_whose_word_is_one_float()
    assert draws([word, _MASK, 0], [a, ACCEPT]) == [ACCEPT]  # next word above p's next digit: rejected
    assert draws([word, 0], [a, ACCEPT]) == [a]  # below it: accepted


def test_a_word_one_above_the_threshold_is_rejected_and_one_below_accepted():
    """Drawn beside a proposal whose word is above ``2**63`` (the mode, p close to 1), as in any real batch."""
    a, word = magnitude_whose_word_is_one_float()
    mode = round(SIGMA**2 / (int(SIGMA) + 1))
    assert _acceptance(SIGMA).word(mode) >= 2**63
    assert draws([word + 1, 0, 0], [a, mode, ACCEPT], size=2) == [ACCEPT, mode]
    assert draws([word - 1, 0], [a, mode], size=2) == [a, mode]
