"""The interface every histogram release mechanism implements, and the neighbouring relations."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

import numpy as np


class Relation(str, Enum):
    """Which datasets are neighbours, i.e. what one person's single trip can change."""

    REPLACE_ONE = "replace_one"
    """One trip changed (the 2016 document's relation): two bins change, each by 1."""
    ADD_REMOVE = "add_remove"
    """One trip added or removed: one bin changes, by 1."""

    @property
    def bins_touched(self) -> int:
        return 2 if self is Relation.REPLACE_ONE else 1


class HistogramMechanism(Protocol):
    """(epsilon, delta)-DP release of the counts of the bins present in the data."""

    name: str
    epsilon: float
    delta: float

    def release(self, counts: np.ndarray) -> np.ndarray:
        """``counts``: int, all > 0, one per bin present. Returns int64, same order; 0 = suppressed."""
        ...

    def describe(self) -> dict:
        """JSON-ready parameters: mechanism, epsilon, delta, relation, noise distribution, scale,
        threshold, min_released_count, seeded."""
        ...
