"""Remove the card id, the only unique identifier, and the raw row order that could stand in for it.

Raw files may list a card's trips next to each other; re-sorting by trip content (a data-independent
rule) removes that link. No pseudonym is kept: no later stage needs a per-card key yet.
"""

from __future__ import annotations

import pandas as pd

from opal_dp.prep.schemas import AnonymisedTrips

IDENTIFIERS = ("card_id",)
CANONICAL_ORDER = ["mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]


def anonymise(trips: pd.DataFrame) -> pd.DataFrame:
    anonymous = trips.drop(columns=list(IDENTIFIERS))
    anonymous = anonymous.sort_values(CANONICAL_ORDER, kind="stable", na_position="first")
    return AnonymisedTrips.validate(anonymous.reset_index(drop=True))
