"""The privacy budget: one validated resource holds every privacy parameter of a release."""


import math

import dagster as dg
from pydantic import model_validator

from opal_dp import settings
from opal_dp.core import (
    DiscreteLaplace,
    HistogramMechanism,
    PrivacyLedger,
    Relation,
    SecureBits,
    StabilityHistogram,
)
from opal_dp.release.marginals import MARGINALS

DEFAULT_DELTA = 1 / 8_000_000


class PrivacyBudget(dg.ConfigurableResource):
    """Per-marginal (epsilon_j, delta_j), neighbouring relation, per-partition ledger cap.

    Defaults are the 2016 release's: epsilon_j = 1,1,1,1,2,2 and delta_j = 1/8,000,000, so one full
    release spends (8, 6/8,000,000) per (date, mode) partition; the cap defaults to exactly that.
    ``fresh_draw`` asks for new noise over an input that was already released: it is charged.
    """

    epsilon: dict[str, float] = {m.name: m.default_epsilon for m in MARGINALS}
    delta: dict[str, float] = {m.name: DEFAULT_DELTA for m in MARGINALS}
    relation: str = Relation.REPLACE_ONE.value
    cap_epsilon: float | None = None  # default: the sum of epsilon_j (one full release)
    cap_delta: float | None = None  # default: the sum of delta_j
    fresh_draw: bool = False

    @model_validator(mode="after")
    def _validate(self) -> "PrivacyBudget":
        names = {m.name for m in MARGINALS}
        for label, values in (("epsilon", self.epsilon), ("delta", self.delta)):
            if set(values) != names:
                raise ValueError(f"{label} must give exactly the marginals {sorted(names)}, got {sorted(values)}")
        for name in sorted(names):
            eps, delta = self.epsilon[name], self.delta[name]
            if not (math.isfinite(eps) and eps > 0):
                raise ValueError(f"epsilon[{name}] must be finite and > 0, got {eps}")
            if not 0 < delta < 1:
                raise ValueError(f"delta[{name}] must satisfy 0 < delta < 1, got {delta}")
        if self.relation not in {r.value for r in Relation}:
            raise ValueError(f"relation must be one of {[r.value for r in Relation]}, got {self.relation!r}")
        for label, cap in (("cap_epsilon", self.cap_epsilon), ("cap_delta", self.cap_delta)):
            if cap is not None and not cap > 0:
                raise ValueError(f"{label} must be > 0, got {cap}")
        return self

    @property
    def partition_cap(self) -> tuple[float, float]:
        return (
            self.cap_epsilon if self.cap_epsilon is not None else math.fsum(self.epsilon.values()),
            self.cap_delta if self.cap_delta is not None else math.fsum(self.delta.values()),
        )

    def noise(self) -> DiscreteLaplace:
        """Production noise: exact discrete Laplace from the OS CSPRNG. There is no seed to set."""
        return DiscreteLaplace(SecureBits())

    def mechanisms(self) -> dict[str, HistogramMechanism]:
        noise = self.noise()
        return {
            m.name: StabilityHistogram(self.epsilon[m.name], self.delta[m.name], Relation(self.relation), noise)
            for m in MARGINALS
        }

    def ledger(self) -> PrivacyLedger:
        cap_epsilon, cap_delta = self.partition_cap
        return PrivacyLedger(settings.private_dir() / "ledger.sqlite", cap_epsilon=cap_epsilon, cap_delta=cap_delta)
