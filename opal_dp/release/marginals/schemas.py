"""Pandera contracts of released marginal frames (DP output, still private until published)."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY, IngestedTrips
from opal_dp.release.marginals.tables import Marginal
from opal_dp.release.options import Design

OTHER_WINDOW = -2  # a public-domain remainder row's time window in a released frame (published: "other")


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


class TimeLocRemainderRelease(pa.DataFrameModel):
    """A public-domain joint: listed cells and remainder rows (``time_window = -2``: time = other)."""

    time_window: Series["int16"] = pa.Field(ge=OTHER_WINDOW, lt=WINDOWS_PER_DAY)
    loc: Series[pd.CategoricalDtype]
    count: Series["int64"] = pa.Field(ge=1)

    class Config:
        strict = True
        ordered = True


class TrueCells(pa.DataFrameModel):
    """True time x location counts of one partition, both taps: NOT private, never published. ``count``
    over all trips, ``bounded_count`` over those kept by contribution bounding (the mechanism's input).
    The checks and the internal utility report derive every true marginal from them."""

    tap: Series[pd.CategoricalDtype] = pa.Field(isin=["on", "off"])  # categorical: no per-row type check
    time_window: Series["int16"] = pa.Field(ge=UNKNOWN, lt=WINDOWS_PER_DAY)
    loc: Series[pd.CategoricalDtype]
    count: Series["int64"] = pa.Field(ge=1)
    bounded_count: Series["int64"] = pa.Field(ge=0)

    class Config:
        strict = True


class ReleaseDraws(pa.DataFrameModel):
    """The ledger draw (and its charge) that stands for each released marginal of a partition."""

    marginal: Series[str] = pa.Field(unique=True)
    draw_id: Series[int] = pa.Field(ge=1)
    charge_id: Series[int] = pa.Field(ge=1)

    class Config:
        strict = True


class LedgerSummary(pa.DataFrameModel):
    """What each ledger scope costs one privacy unit, against the cap in force (internal)."""

    unit: Series[str]
    scope: Series[str]
    epsilon: Series[float] = pa.Field(ge=0)
    delta: Series[float] = pa.Field(ge=0)
    rho: Series[float] = pa.Field(ge=0, nullable=True)
    cap_epsilon: Series[float] = pa.Field(gt=0)
    cap_delta: Series[float] = pa.Field(gt=0)
    charges: Series[int] = pa.Field(ge=1)
    draws: Series[int] = pa.Field(ge=0)
    pending: Series[int] = pa.Field(ge=0)
    last_charge_at: Series[str]

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


def schema_for(marginal: Marginal, design: Design | str = Design.SBH) -> type[pa.DataFrameModel]:
    if Design.parse(design).consistent and marginal.by_time and marginal.by_loc:
        return TimeLocRemainderRelease
    return {(True, False): TimeRelease, (False, True): LocRelease, (True, True): TimeLocRelease}[
        (marginal.by_time, marginal.by_loc)
    ]


class UnitComparison(pa.DataFrameModel):
    """The three privacy units on the same data (internal report, not DP)."""

    unit: Series[str] = pa.Field(isin=["trip", "card_day", "card_period"])
    mechanism: Series[str]
    share_of_trips_in_released_cells: Series[float] = pa.Field(ge=0, le=1, nullable=True)
    released_cells: Series[int] = pa.Field(ge=0)
    mean_relative_error: Series[float] = pa.Field(ge=0, nullable=True)
    median_relative_error: Series[float] = pa.Field(ge=0, nullable=True)
    suppressed_trips: Series[int] = pa.Field(ge=0)
    share_dropped_by_bounding: Series[float] = pa.Field(ge=0, le=1)
    trips: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True


class DesignComparison(pa.DataFrameModel):
    """The two release designs on the same data, unit and budget (internal report, not DP)."""

    design: Series[str] = pa.Field(isin=[d.value for d in Design], unique=True)
    share_of_trips_in_listed_cells: Series[float] = pa.Field(ge=0, le=1, nullable=True)
    listed_cells: Series[int] = pa.Field(ge=0)
    mean_relative_error: Series[float] = pa.Field(ge=0, nullable=True)
    median_relative_error: Series[float] = pa.Field(ge=0, nullable=True)
    rmse_time: Series[float] = pa.Field(ge=0, nullable=True)
    rmse_loc: Series[float] = pa.Field(ge=0, nullable=True)
    false_cells_per_day: Series[float] = pa.Field(ge=0)
    differencing_residual: Series[int] = pa.Field(ge=0)
    listed_true_zero_share: Series[float] = pa.Field(ge=0, le=1)
    lone_trip_listed_probability: Series[float] = pa.Field(ge=0, le=1)
    empty_cell_listed_probability: Series[float] = pa.Field(ge=0, le=1)
    expected_false_cells_per_day: Series[float] = pa.Field(ge=0)
    trips: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
        ordered = True


class SyntheticTrips(IngestedTrips):
    """Synthetic card-day trips (``release.synthetic.generator``): the raw input contract's columns, every
    card id a fresh synthetic one."""

    class Config:
        strict = True
        ordered = True


class SyntheticScores(pa.DataFrameModel):
    """Internal, not DP: the synthetic trips and two baselines scored against the true trips."""

    method: Series[str]
    k_marginal: Series[float] = pa.Field(ge=0, le=1000)
    k_marginal_2way: Series[float] = pa.Field(ge=0, le=1000)
    od_top100_l1: Series[float] = pa.Field(ge=0, le=2)
    trips_per_card_day_l1: Series[float] = pa.Field(ge=0, le=2)
    rows: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
