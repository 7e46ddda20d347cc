"""What a mechanism costs, and what a set of mechanism applications costs one privacy unit together.

Two measures are used:

- ``approx_dp``: (epsilon, delta)-DP. The thresholded Laplace histogram (SBH) is (epsilon, delta).
- ``zcdp``: delta-approximate rho-zCDP (Bun & Steinke 2016): with probability at least ``1 - delta``
  over the threshold events the output is rho-zCDP. The thresholded discrete Gaussian is (rho, delta).

Composition of the charges of one ledger scope (everything released about one unit's data):

- all ``approx_dp``: basic composition, (sum epsilon_i, sum delta_i);
- any ``zcdp``: every epsilon-DP part is (epsilon**2 / 2)-zCDP (Bun & Steinke, Prop. 1.4), rho adds up
  (Lemma 1.7), the deltas of the threshold events add up, and the total rho is converted to
  (epsilon, delta_conversion)-DP by OpenDP's ``make_zCDP_to_approxDP`` (the conversion of Canonne,
  Kamath & Steinke 2020), with ``delta_conversion = delta_target - sum delta_i``.

The conversion is OpenDP's; nothing here re-derives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

Measure = Literal["approx_dp", "zcdp"]


@dataclass(frozen=True)
class PrivacyCost:
    """The privacy cost of one mechanism application, in its native measure.

    ``approx_dp``: (epsilon, delta) with ``rho = 0``; ``zcdp``: delta-approximate rho-zCDP with
    ``epsilon = 0``.
    """

    measure: Measure
    epsilon: float
    rho: float
    delta: float

    def __post_init__(self) -> None:
        if self.measure not in ("approx_dp", "zcdp"):
            raise ValueError(f"measure must be approx_dp or zcdp, got {self.measure!r}")
        for name in ("epsilon", "rho", "delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not self.delta < 1:
            raise ValueError(f"delta must be < 1, got {self.delta!r}")
        if self.measure == "approx_dp" and (self.rho != 0 or self.epsilon <= 0):
            raise ValueError("an approx_dp cost has epsilon > 0 and rho = 0")
        if self.measure == "zcdp" and (self.epsilon != 0 or self.rho <= 0):
            raise ValueError("a zcdp cost has rho > 0 and epsilon = 0")

    @classmethod
    def approx_dp(cls, epsilon: float, delta: float) -> PrivacyCost:
        return cls("approx_dp", float(epsilon), 0.0, float(delta))

    @classmethod
    def zcdp(cls, rho: float, delta: float) -> PrivacyCost:
        return cls("zcdp", 0.0, float(rho), float(delta))

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Guarantee:
    """(epsilon, delta)-DP for one privacy unit over everything composed; ``rho`` when zCDP was used."""

    epsilon: float
    delta: float
    rho: float | None
    composition: str

    def describe(self) -> dict:
        return asdict(self)


def compose(costs: Sequence[PrivacyCost], delta_target: float | None = None) -> Guarantee:
    """The (epsilon, delta) of all ``costs`` together (module docstring).

    ``delta_target`` is the total delta to report at when any cost is zCDP (required then); the
    epsilon is infinite when the threshold deltas alone use it up.
    """
    if not costs:
        return Guarantee(0.0, 0.0, None, "nothing released")
    delta_events = math.fsum(c.delta for c in costs)
    if all(c.measure == "approx_dp" for c in costs):
        return Guarantee(math.fsum(c.epsilon for c in costs), delta_events, None, "basic composition")
    if delta_target is None or not 0 < delta_target < 1:
        raise ValueError(f"composing zCDP needs a delta_target in (0, 1), got {delta_target!r}")
    rho = math.fsum(c.rho if c.measure == "zcdp" else c.epsilon**2 / 2 for c in costs)
    conversion_delta = delta_target - delta_events
    epsilon = zcdp_epsilon(rho, conversion_delta) if conversion_delta > 0 else math.inf
    return Guarantee(epsilon, delta_target, rho, "zCDP composition, converted by OpenDP")


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon OpenDP certifies for a rho-zCDP mechanism at ``delta`` (CKS 2020 conversion)."""
    if not (rho > 0 and 0 < delta < 1):
        raise ValueError(f"need rho > 0 and 0 < delta < 1, got rho={rho!r}, delta={delta!r}")
    return _conversion(rho).epsilon(delta)


def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """Largest rho (to 1e-12 relative) whose OpenDP conversion at ``delta`` stays within ``epsilon``."""
    lo, hi = 0.0, epsilon
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if zcdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    if lo == 0.0:
        raise ValueError(f"no rho > 0 reaches epsilon {epsilon!r} at delta {delta!r}")
    return lo


@lru_cache(maxsize=256)
def _conversion(rho: float):
    """OpenDP's privacy profile of a rho-zCDP measurement (the map of a measurement that costs rho)."""
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")  # the map below states the ledger's composed rho
    measurement = dp.m.make_user_measurement(
        dp.atom_domain(T=float, nan=False),
        dp.absolute_distance(T=float),
        dp.zero_concentrated_divergence(),
        lambda value: value,
        lambda d_in: rho,
    )
    return dp.c.make_zCDP_to_approxDP(measurement).map(1.0)
