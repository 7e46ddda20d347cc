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


def schema_for(marginal: Marginal) -> type[pa.DataFrameModel]:
    return {(True, False): TimeRelease, (False, True): LocRelease, (True, True): TimeLocRelease}[
        (marginal.by_time, marginal.by_loc)
    ]
