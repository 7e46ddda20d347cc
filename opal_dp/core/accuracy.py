"""Accuracy figures of the noise (float64, for statements and charts, never for privacy decisions)."""

from __future__ import annotations

import numpy as np


def error_bound_of_sum(pmf: np.ndarray, n: int, confidence: float = 0.95) -> int:
    """Smallest integer ``e >= 0`` with ``P(|Z_1 + ... + Z_n| <= e) >= confidence`` for ``n`` independent draws of
    a noise with the symmetric probability mass ``pmf`` over ``-k..k`` (odd length, ``z = 0`` in the middle).

    The n-fold convolution is taken by FFT at the exact length of its support (no wrap-around); mass left
    out of ``pmf`` counts as outside every bound, so a truncated ``pmf`` can only make ``e`` larger.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    pmf = np.asarray(pmf, dtype=float)
    if pmf.ndim != 1 or len(pmf) % 2 == 0:
        raise ValueError("pmf must be a 1-D array of odd length centred on z = 0")
    size = n * (len(pmf) - 1) + 1
    total = pmf if n == 1 else np.clip(np.fft.irfft(np.fft.rfft(pmf, size) ** n, size), 0, None)
    centre = size // 2
    within = np.cumsum(np.concatenate(([total[centre]], total[centre + 1:] + total[:centre][::-1])))
    return int(np.searchsorted(within, confidence))
