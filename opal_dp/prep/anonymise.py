"""Remove the card id, the only unique identifier, and the raw row order that could stand in for it.

Raw files may list a card's trips next to each other, so rows are put in a uniformly random order
drawn from the OS CSPRNG. Nothing downstream depends on row order (histograms count, and releases
are sorted canonically). No pseudonym is kept: no later stage needs a per-card key yet.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opal_dp.core import SecureBits
from opal_dp.prep.schemas import AnonymisedTrips

IDENTIFIERS = ("card_id",)


def anonymise(trips: pd.DataFrame) -> pd.DataFrame:
    # Equal 64-bit keys (probability < n^2 / 2^65, about 1e-7 for a 2.35 M-trip day) are the only
    # pairs whose relative order is left to the sort.
    order = np.argsort(SecureBits().words(len(trips)))
    anonymous = trips[[c for c in trips.columns if c not in IDENTIFIERS]].take(order)
    return AnonymisedTrips.validate(anonymous.reset_index(drop=True))
