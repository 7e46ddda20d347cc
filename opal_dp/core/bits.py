"""Sources of uniform random 64-bit words, the only randomness the noise samplers consume."""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np


class BitSource(Protocol):
    """Independent, uniformly distributed 64-bit words."""

    seeded: bool

    def words(self, n: int) -> np.ndarray:
        """Return ``n`` independent uniform words as a 1-D ``uint64`` array."""
        ...


def _check_count(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return int(n)


class SecureBits:
    """Production source: the operating system's CSPRNG (``os.urandom``). It cannot be seeded."""

    seeded = False

    def words(self, n: int) -> np.ndarray:
        n = _check_count(n)
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


class SeededBits:
    """REPRODUCIBLE, NOT SECURE: numpy ``PCG64(seed)``. For tests and audits only, NEVER for releases.

    Anyone who knows the seed can recompute the noise and undo it; ``seeded = True`` lets
    callers refuse it.
    """

    seeded = True

    def __init__(self, seed: int) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def words(self, n: int) -> np.ndarray:
        return self._rng.bit_generator.random_raw(_check_count(n))
