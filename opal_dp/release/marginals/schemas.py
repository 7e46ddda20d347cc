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
    time_window: Series["int16"] = pa.Field(
        ge=UNKNOWN, lt=WINDOWS_PER_DAY, description="15-minute window of the day (-1: no tap-off; -2: the remainder row of a location)")
    count: Series["int64"] = pa.Field(ge=1, description="the count: noisy (DP) in a release, true in internal tables")

    class Config:
        strict = True
        ordered = True


class LocRelease(pa.DataFrameModel):
    loc: Series[pd.CategoricalDtype] = pa.Field(
        description="location: postcode for bus, stop name otherwise; -1 unknown; other: a remainder row")
    count: Series["int64"] = pa.Field(ge=1, description="the count: noisy (DP) in a release, true in internal tables")

    class Config:
        strict = True
        ordered = True


class TimeLocRelease(pa.DataFrameModel):
    time_window: Series["int16"] = pa.Field(
        ge=UNKNOWN, lt=WINDOWS_PER_DAY, description="15-minute window of the day (-1: no tap-off; -2: the remainder row of a location)")
    loc: Series[pd.CategoricalDtype] = pa.Field(
        description="location: postcode for bus, stop name otherwise; -1 unknown; other: a remainder row")
    count: Series["int64"] = pa.Field(ge=1, description="the count: noisy (DP) in a release, true in internal tables")

    class Config:
        strict = True
        ordered = True


class TimeLocRemainderRelease(pa.DataFrameModel):
    """A public-domain joint: listed cells and remainder rows (``time_window = -2``: time = other)."""

    time_window: Series["int16"] = pa.Field(
        ge=OTHER_WINDOW, lt=WINDOWS_PER_DAY, description="15-minute window of the day (-1: no tap-off; -2: the remainder row of a location)")
    loc: Series[pd.CategoricalDtype] = pa.Field(
        description="location: postcode for bus, stop name otherwise; -1 unknown; other: a remainder row")
    count: Series["int64"] = pa.Field(ge=1, description="the count: noisy (DP) in a release, true in internal tables")

    class Config:
        strict = True
        ordered = True


class TrueCells(pa.DataFrameModel):
    """True time x location counts of one partition, both taps: NOT private, never published. ``count``
    over all trips, ``bounded_count`` over those kept by contribution bounding (the mechanism's input).
    The checks and the internal utility report derive every true marginal from them."""

    tap: Series[pd.CategoricalDtype] = pa.Field(isin=["on", "off"], description="on or off")
    time_window: Series["int16"] = pa.Field(
        ge=UNKNOWN, lt=WINDOWS_PER_DAY, description="15-minute window of the day (-1: no tap-off; -2: the remainder row of a location)")
    loc: Series[pd.CategoricalDtype] = pa.Field(
        description="location: postcode for bus, stop name otherwise; -1 unknown; other: a remainder row")
    count: Series["int64"] = pa.Field(ge=1, description="the count: noisy (DP) in a release, true in internal tables")
    bounded_count: Series["int64"] = pa.Field(
        ge=0, description="true count after contribution bounding: what the mechanism reads (internal, not DP)")

    class Config:
        strict = True


class ReleaseDraws(pa.DataFrameModel):
    """The ledger draw (and its charge) that stands for each released marginal of a partition."""

    marginal: Series[str] = pa.Field(unique=True, description="which of the six marginals")
    draw_id: Series[int] = pa.Field(ge=1, description="the ledger draw that stands for it")
    charge_id: Series[int] = pa.Field(ge=1, description="the ledger charge of that draw")

    class Config:
        strict = True


class ReleaseDrawsByPartition(ReleaseDraws):
    """``ReleaseDraws`` of many partitions in one frame, validated once (Pandera costs about 8 ms a call whatever
    the rows): each marginal at most once per partition."""

    partition: Series[str] = pa.Field(description="the (date, mode) partition")
    marginal: Series[str] = pa.Field(description="which of the six marginals")

    class Config:
        strict = True
        unique = ["partition", "marginal"]

    @classmethod
    def split(cls, rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """``rows`` validated, as one ``ReleaseDraws`` frame per partition (in the order the partitions come); no rows
        (no partition released) is no partition, unchecked."""
        if rows.empty:
            return {}
        rows = cls.validate(rows)
        columns = list(ReleaseDraws.to_schema().columns)
        return {key: group[columns].reset_index(drop=True)
                for key, group in rows.groupby("partition", sort=False)}


class LedgerSummary(pa.DataFrameModel):
    """What each ledger scope costs one privacy unit, against the cap in force (internal)."""

    unit: Series[str] = pa.Field(description="privacy unit: trip, card_day or card_period")
    scope: Series[str] = pa.Field(description="ledger scope: a (date, mode), a date, or a week")
    epsilon: Series[float] = pa.Field(
        ge=0, description="epsilon one unit has lost in the scope (the ledger's composition)")
    delta: Series[float] = pa.Field(ge=0, description="delta of that guarantee")
    rho: Series[float] = pa.Field(
        ge=0, nullable=True, description="zCDP rho of the scope's zCDP charges (empty where not all are zCDP)")
    cap_epsilon: Series[float] = pa.Field(gt=0, description="the scope cap's epsilon in force")
    cap_delta: Series[float] = pa.Field(gt=0, description="the scope cap's delta in force")
    charges: Series[int] = pa.Field(ge=1, description="charges on the scope")
    draws: Series[int] = pa.Field(ge=0, description="draws on the scope")
    pending: Series[int] = pa.Field(ge=0, description="draws charged but not yet stored and completed")
    last_charge_at: Series[str] = pa.Field(description="when the scope was last charged (UTC)")

    class Config:
        strict = True


class UtilitySummary(pa.DataFrameModel):
    """Cost of the protection per marginal and mode, measured against the truth (internal)."""

    marginal: Series[str] = pa.Field(description="which of the six marginals")
    mode: Series[str] = pa.Field(description="bus, ferry, light_rail or train")
    share_of_bins_suppressed: Series[float] = pa.Field(
        ge=0, le=1, description="share of true bins not released (internal, not DP)")
    share_of_trips_suppressed: Series[float] = pa.Field(
        ge=0, le=1, description="share of trips in bins not released (internal, not DP)")
    mean_relative_error: Series[float] = pa.Field(
        ge=0, nullable=True, description="mean relative error of released counts against the truth (internal, not DP)")
    bins_released: Series[int] = pa.Field(ge=0, description="bins released")

    class Config:
        strict = True


class WorkloadScores(pa.DataFrameModel):
    """A planner's queries answered from the released files and scored against the truth (internal;
    ``reports.workload``)."""

    query_class: Series[str] = pa.Field(isin=["mode_day", "district_day", "district_hour", "station_day",
                                              "station_hour", "window_station"],
                                        description="mode, district or station by day, hour or 15-minute window")
    tap: Series[str] = pa.Field(isin=["on", "off"], description="tap-on or tap-off")
    share: Series[float] = pa.Field(ge=0, le=1, nullable=True,
                                    description="share of true trips in queries answered above 0 (internal, not DP)")
    wre: Series[float] = pa.Field(ge=0, nullable=True, description="weighted relative error of the answered queries "
                                  "(internal, not DP)")
    median: Series[float] = pa.Field(ge=0, nullable=True, description="median relative error of queries with "
                                     "truth >= 100, unanswered ones at 1 (internal, not DP)")
    p90: Series[float] = pa.Field(ge=0, nullable=True, description="90th percentile of the same (internal, not DP)")
    queries_100: Series[int] = pa.Field(ge=0, description="queries with truth >= 100 (internal, not DP)")

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

    unit: Series[str] = pa.Field(
        isin=["trip", "card_day", "card_period"], description="privacy unit: trip, card_day or card_period")
    mechanism: Series[str] = pa.Field(description="noise mechanism")
    share_of_trips_in_released_cells: Series[float] = pa.Field(
        ge=0, le=1, nullable=True, description="share of trips in released cells (internal, not DP)")
    released_cells: Series[int] = pa.Field(ge=0, description="cells released")
    mean_relative_error: Series[float] = pa.Field(
        ge=0, nullable=True, description="mean relative error of released counts against the truth (internal, not DP)")
    median_relative_error: Series[float] = pa.Field(
        ge=0, nullable=True, description="median relative error against the truth (internal, not DP)")
    suppressed_trips: Series[int] = pa.Field(ge=0, description="trips in cells not released (internal, not DP)")
    share_dropped_by_bounding: Series[float] = pa.Field(
        ge=0, le=1, description="share of trips removed by contribution bounding (internal, not DP)")
    trips: Series[int] = pa.Field(ge=0, description="true trips (internal, not DP)")

    class Config:
        strict = True


class DesignComparison(pa.DataFrameModel):
    """The two release designs on the same data, unit and budget (internal report, not DP)."""

    design: Series[str] = pa.Field(
        isin=[d.value for d in Design], unique=True, description="release design: sbh or public_domain")
    share_of_trips_in_listed_cells: Series[float] = pa.Field(
        ge=0, le=1, nullable=True, description="share of trips in individually listed cells (internal, not DP)")
    listed_cells: Series[int] = pa.Field(ge=0, description="cells listed individually")
    mean_relative_error: Series[float] = pa.Field(
        ge=0, nullable=True, description="mean relative error of released counts against the truth (internal, not DP)")
    median_relative_error: Series[float] = pa.Field(
        ge=0, nullable=True, description="median relative error against the truth (internal, not DP)")
    rmse_time: Series[float] = pa.Field(
        ge=0, nullable=True, description="root mean squared error of the time marginal (internal, not DP)")
    rmse_loc: Series[float] = pa.Field(
        ge=0, nullable=True, description="root mean squared error of the location marginal (internal, not DP)")
    false_cells_per_day: Series[float] = pa.Field(
        ge=0, description="listed cells with no trip, per day (internal, not DP)")
    differencing_residual: Series[int] = pa.Field(
        ge=0, description="mass an outsider recovers by differencing the tables (internal)")
    listed_true_zero_share: Series[float] = pa.Field(
        ge=0, le=1, description="share of listed cells whose true count is 0 (internal, not DP)")
    lone_trip_listed_probability: Series[float] = pa.Field(
        ge=0, le=1, description="probability that a cell of one trip is listed")
    empty_cell_listed_probability: Series[float] = pa.Field(
        ge=0, le=1, description="probability that an empty cell is listed")
    expected_false_cells_per_day: Series[float] = pa.Field(
        ge=0, description="expected listed cells with no trip, per day")
    trips: Series[int] = pa.Field(ge=0, description="true trips (internal, not DP)")

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

    method: Series[str] = pa.Field(description="synthesizer or baseline")
    k_marginal: Series[float] = pa.Field(
        ge=0, le=1000, description="SDNist 3-way k-marginal score (0-1000; internal, not DP)")
    k_marginal_2way: Series[float] = pa.Field(
        ge=0, le=1000, description="SDNist 2-way k-marginal score (0-1000; internal, not DP)")
    od_top100_l1: Series[float] = pa.Field(
        ge=0, le=2, description="L1 distance of the top 100 OD pairs' shares (0-2; internal, not DP)")
    trips_per_card_day_l1: Series[float] = pa.Field(
        ge=0, le=2, description="L1 distance of the trips-per-card-day distribution (0-2; internal, not DP)")
    rows: Series[int] = pa.Field(ge=0, description="rows generated")

    class Config:
        strict = True
