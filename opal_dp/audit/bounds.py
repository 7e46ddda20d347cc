"""Exact one-sided Clopper-Pearson confidence bounds for binomial proportions."""

from __future__ import annotations

import numpy as np


def clopper_pearson(successes: np.ndarray, trials: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided bounds ``(lower, upper)`` on ``p`` from ``successes ~ Binomial(trials, p)``.

    ``lower`` is the ``alpha`` quantile of ``Beta(k, n - k + 1)`` (0 when ``k = 0``) and ``upper`` the
    ``1 - alpha`` quantile of ``Beta(k + 1, n - k)`` (1 when ``k = n``). By the beta-binomial identity
    ``P(Bin(n, p) >= k) = I_p(k, n - k + 1)``, ``P(lower > p) <= alpha`` and ``P(upper < p) <= alpha``
    for every ``p``, exactly (no normal approximation).
    """
    from scipy.special import betaincinv  # here, not at import: scipy.special costs every process loading the code 0.3 s

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    k = np.asarray(successes, dtype=np.float64)
    n = float(trials)
    if np.any((k < 0) | (k > n)):
        raise ValueError("successes must lie in [0, trials]")
    lower = np.where(k > 0, betaincinv(np.maximum(k, 1), n - k + 1, alpha), 0.0)
    upper = np.where(k < n, betaincinv(k + 1, np.maximum(n - k, 1), 1 - alpha), 1.0)
    return lower, upper
