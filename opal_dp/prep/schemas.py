"""Pandera contracts for every trip table, from the raw input to one (date, mode) partition.

The raw contract is what ingest promises downstream after coercion; the later schemas are
``strict`` so that no identifier (or any other column) can ride along unnoticed.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from opal_dp.network import MODES

WINDOW_MINUTES = 15
WINDOWS_PER_DAY = 24 * 60 // WINDOW_MINUTES


@pa.extensions.register_check_method(statistics=["allowed"], supported_types=pd.Series)
def categories_within(series: pd.Series, *, allowed: list[str]) -> bool:
    """A categorical's values are among its categories: checking those (not every row) suffices."""
    return isinstance(series.dtype, pd.CategoricalDtype) and set(series.cat.categories) <= set(allowed)


UNKNOWN = -1  # missing tap-off time window; its location label is "-1"
UNKNOWN_LABEL = "-1"


class RejectedTrips(pa.DataFrameModel):
    """Raw rows that broke the contract, with where they came from and why; raw values as text.

    ``line`` is the CSV line (the header is line 1) or the 1-based Parquet row.
    """

    source_file: Series[str]
    line: Series[int] = pa.Field(ge=1)
    field: Series[str]
    reason: Series[str]
    card_id: Series[str] = pa.Field(nullable=True)
    mode: Series[str] = pa.Field(nullable=True)
    tap_on_time: Series[str] = pa.Field(nullable=True)
    tap_on_stop: Series[str] = pa.Field(nullable=True)
    tap_off_time: Series[str] = pa.Field(nullable=True)
    tap_off_stop: Series[str] = pa.Field(nullable=True)
    raw_line: Series[str] = pa.Field(nullable=True)  # the whole line, when it could not be split

    class Config:
        strict = True


class IngestedTrips(pa.DataFrameModel):
    """Accepted raw trips (one row per trip) of one service day, typed. The card id is kept only until
    contribution bounding; strict, so no other column can ride along."""

    card_id: Series[int] = pa.Field(gt=0)
    mode: Series[pd.CategoricalDtype] = pa.Field(categories_within={"allowed": list(MODES)})
    tap_on_time: Series[pd.Timestamp]
    tap_on_stop: Series["int32"]
    tap_off_time: Series[pd.Timestamp] = pa.Field(nullable=True)
    tap_off_stop: Series[pd.Int32Dtype] = pa.Field(nullable=True)

    class Config:
        strict = True


class PartitionTrips(pa.DataFrameModel):
    """One (date, mode) partition: only tap-on/tap-off windows and locations (seed §4.1 step 5)."""

    tap_on_window: Series["int16"] = pa.Field(ge=0, lt=WINDOWS_PER_DAY)
    tap_on_loc: Series[pd.CategoricalDtype]
    tap_off_window: Series["int16"] = pa.Field(ge=UNKNOWN, lt=WINDOWS_PER_DAY)
    tap_off_loc: Series[pd.CategoricalDtype]

    class Config:
        strict = True


class BinnedTrips(PartitionTrips):
    """Trips of one service day with 15-minute windows and published location labels, without card id
    (bounded and anonymised)."""

    mode: Series[pd.CategoricalDtype] = pa.Field(categories_within={"allowed": list(MODES)})

    class Config:
        strict = True


class CardBinnedTrips(BinnedTrips):
    """Binned trips of one service day that still carry the card id, for contribution bounding only."""

    card_id: Series[int] = pa.Field(gt=0)

    class Config:
        strict = True


class CardDays(pa.DataFrameModel):
    """The distinct card ids that travelled on one service day (private; distinct by construction)."""

    card_id: Series[int] = pa.Field(gt=0)

    class Config:
        strict = True
