"""The membership game of a stability histogram: how often a bin of true count 1 is released, against the proof's
bad-event bound (an absent bin is never released, so this is the attacker's true-positive rate at false-positive
rate 0). The production audit of the trip unit runs it beside ``privacy_loss.audit_mechanism``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from opal_dp.audit.bounds import clopper_pearson
from opal_dp.audit.privacy_loss import CHUNK
from opal_dp.core.mechanism import HistogramMechanism
from opal_dp.core.sbh import release_probability


@dataclass(frozen=True)
class MembershipReport:
    """Outcome of ``membership_game``: ``released`` of ``runs`` releases of a count-1 bin.

    ``[lower, upper]``: Clopper-Pearson bounds at ``alpha`` each on ``P(released | count 1)``. An
    absent bin is never released, so this is the attacker's true-positive rate at false-positive
    rate 0; it is the proof's bad event, of probability at most ``bound = delta / bins_touched``.
    ``passed = upper <= bound``: with probability ``1 - alpha`` this certifies the bound. ``exact``:
    the closed form from the mechanism's ``scale`` and ``min_released_count``."""

    runs: int
    released: int
    rate: float
    lower: float
    upper: float
    bound: float
    exact: float
    passed: bool
    seconds: float


def membership_game(mech: HistogramMechanism, runs: int = 10**6, alpha: float = 1e-6) -> MembershipReport:
    """Release a bin of true count 1 ``runs`` times (vs absent, never released); see ``MembershipReport``."""
    started = time.perf_counter()
    if runs < 1:
        raise ValueError("runs must be >= 1")
    description = mech.describe()
    released = sum(
        int(np.count_nonzero(mech.release(np.ones(min(CHUNK, runs - start), dtype=np.int64))))
        for start in range(0, runs, CHUNK)
    )
    lower, upper = (float(b) for b in clopper_pearson(released, runs, alpha))
    bound = mech.delta / mech.sensitivity.l0
    return MembershipReport(
        runs=runs,
        released=released,
        rate=released / runs,
        lower=lower,
        upper=upper,
        bound=bound,
        exact=release_probability(1, description["scale"], description["min_released_count"]),
        passed=upper <= bound,
        seconds=time.perf_counter() - started,
    )
