import inspect
import re

import numpy as np
import pytest
from scipy import stats

from opal_dp.core import BitSource, SecureBits, SeededBits
from opal_dp_tests.core.helpers import ALPHA, OS_ALPHA


def test_secure_bits_cannot_be_seeded():
    assert list(inspect.signature(SecureBits).parameters) == []
    with pytest.raises(TypeError):
        SecureBits(1)  # type: ignore[call-arg]
    assert SecureBits.seeded is False and SecureBits().seeded is False


def test_seeded_bits_flagged_and_reproducible():
    a, b = SeededBits(7), SeededBits(7)
    assert a.seeded is True
    np.testing.assert_array_equal(a.words(100), b.words(100))
    assert not np.array_equal(SeededBits(8).words(100), SeededBits(7).words(100))


@pytest.mark.parametrize("source", [SecureBits(), SeededBits(1)], ids=["secure", "seeded"])
def test_words_shape_dtype(source: BitSource):
    w = source.words(1000)
    assert w.dtype == np.uint64 and w.shape == (1000,)
    assert source.words(0).shape == (0,)


@pytest.mark.parametrize("source", [SecureBits(), SeededBits(1)], ids=["secure", "seeded"])
@pytest.mark.parametrize("n", [-1, 1.5, True, "3"])
def test_words_rejects_bad_n(source: BitSource, n):
    with pytest.raises(ValueError, match=f"^n must be a non-negative integer, got {re.escape(repr(n))}$"):
        source.words(n)


@pytest.mark.parametrize("source", [SecureBits(), SeededBits(2)], ids=["secure", "seeded"])
def test_every_bit_position_is_fair(source: BitSource):
    """Each of the 64 bit positions is 1 with probability 1/2 (two-sided binomial; overall 1e-6 seeded, 1e-7 for
    the OS source)."""
    n = 100_000
    w = source.words(n)
    ones = ((w[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    p = [stats.binomtest(int(c), n, 0.5).pvalue for c in ones]
    assert min(p) > (OS_ALPHA if isinstance(source, SecureBits) else ALPHA) / 64
