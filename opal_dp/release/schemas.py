"""Pandera contracts of released marginal frames (DP output, still private until published)."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY
from opal_dp.release.marginals import Marginal


class TimeRelease(pa.DataFrameModel):
    time_window: Series["int16"] = pa.Field(ge=UNKNOWN, lt=WINDOWS_PER_DAY)
    count: Series["int64"] = pa.Field(ge=1)

    class Config:
        strict = True
        ordered = True


class LocRelease(pa.DataFrameModel):
    loc: Series[pd.CategoricalDtype]
    count: Series["int64"] = pa.Field(ge=1)

    class Config:
        strict = True
        ordered = True


class TimeLocRelease(pa.DataFrameModel):
    time_window: Series["int16"] = pa.Field(ge=UNKNOWN, lt=WINDOWS_PER_DAY)
    loc: Series[pd.CategoricalDtype]
    count: Series["int64"] = pa.Field(ge=1)

    class Config:
        strict = True
        ordered = True


class TrueCells(pa.DataFrameModel):
    """True time x location counts of one partition, both taps: NOT private, never published.
    The checks and the internal utility report derive every true marginal from them."""

    tap: Series[str] = pa.Field(isin=["on", "off"])
    time_window: Series["int16"] = pa.Field(ge=UNKNOWN, lt=WINDOWS_PER_DAY)
    loc: Series[pd.CategoricalDtype]
    count: Series["int64"] = pa.Field(ge=1)

    class Config:
        strict = True


class LedgerSummary(pa.DataFrameModel):
    """Spend per (date, mode) partition, from the privacy ledger (internal)."""

    partition: Series[str]
    epsilon_spent: Series[float] = pa.Field(ge=0)
    delta_spent: Series[float] = pa.Field(ge=0)
    epsilon_remaining: Series[float] = pa.Field(ge=0)
    delta_remaining: Series[float] = pa.Field(ge=0)
    releases: Series[int] = pa.Field(ge=0)
    pending: Series[int] = pa.Field(ge=0)
    last_release_at: Series[str]

    class Config:
        strict = True


class UtilitySummary(pa.DataFrameModel):
    """Cost of the protection per marginal and mode, measured against the truth (internal)."""

    marginal: Series[str]
    mode: Series[str]
    share_of_bins_suppressed: Series[float] = pa.Field(ge=0, le=1)
    share_of_trips_suppressed: Series[float] = pa.Field(ge=0, le=1)
    mean_relative_error: Series[float] = pa.Field(ge=0, nullable=True)
    bins_released: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True


def schema_for(marginal: Marginal) -> type[pa.DataFrameModel]:
    return {(True, False): TimeRelease, (False, True): LocRelease, (True, True): TimeLocRelease}[
        (marginal.by_time, marginal.by_loc)
    ]
