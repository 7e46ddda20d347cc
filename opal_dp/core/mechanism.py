"""The interface every histogram release mechanism implements, and the neighbouring relations."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

import numpy as np

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.sensitivity import Sensitivity


class Relation(str, Enum):
    """Which datasets are neighbours: one privacy unit's data replaced by another's, or added/removed."""

    REPLACE_ONE = "replace_one"
    """One unit's data replaced by another unit's (the 2016 document's relation, with the trip as unit)."""
    ADD_REMOVE = "add_remove"
    """One unit's data added or removed."""

    @property
    def units_changed(self) -> int:
        """Contributions that differ between neighbours: the old and the new one, or just one."""
        return 2 if self is Relation.REPLACE_ONE else 1

    @property
    def bins_touched(self) -> int:
        """Bins of a marginal that one trip changes (trip unit): the same number."""
        return self.units_changed


class HistogramMechanism(Protocol):
    """DP release of the counts of the bins present in the data, calibrated to a ``Sensitivity``."""

    name: str
    sensitivity: Sensitivity

    def release(self, counts: np.ndarray) -> np.ndarray:
        """``counts``: int, all > 0, one per bin present. Returns int64, same order; 0 = suppressed."""
        ...

    def cost(self) -> PrivacyCost:
        """What one application costs a unit whose contribution is bounded by ``sensitivity``."""
        ...

    def describe(self) -> dict:
        """JSON-ready parameters: mechanism, noise distribution and scale, threshold,
        min_released_count, sensitivity, cost, seeded."""
        ...

    def release_probability(self, n: int) -> float:
        """P(a bin of true count ``n`` is released)."""
        ...

    def error_bound(self, confidence: float = 0.95) -> int:
        """Smallest integer ``e`` with P(|noise| <= e) >= ``confidence``."""
        ...
