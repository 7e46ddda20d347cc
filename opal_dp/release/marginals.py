"""The six marginals of a (date, mode) partition (seed §4.1 step 6) and their true histograms.

A histogram lists only the bins present in the data (count > 0: SBH adds no new points), in the
canonical order (time window, then location label). That order comes from the public label universe
(category codes are sorted labels), so it is the same function of the bin set on every input: the
row order of the input can never show through (seed §3.3.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY

TIME, LOC, COUNT = "time_window", "loc", "count"


@dataclass(frozen=True)
class Marginal:
    name: str
    tap: str  # "on" | "off"
    by_time: bool
    by_loc: bool
    default_epsilon: float

    @property
    def dimensions(self) -> list[str]:
        return [c for c, used in ((TIME, self.by_time), (LOC, self.by_loc)) if used]

    @property
    def table(self) -> str:
        """Published file stem: time, loc or time-loc."""
        return "-".join(d.split("_")[0] for d in self.dimensions)


MARGINALS = (
    Marginal("tap_on_time", "on", True, False, 1.0),
    Marginal("tap_on_loc", "on", False, True, 1.0),
    Marginal("tap_off_time", "off", True, False, 1.0),
    Marginal("tap_off_loc", "off", False, True, 1.0),
    Marginal("tap_on_time_loc", "on", True, True, 2.0),
    Marginal("tap_off_time_loc", "off", True, True, 2.0),
)
BY_NAME = {m.name: m for m in MARGINALS}


def histogram(partition: pd.DataFrame, marginal: Marginal) -> pd.DataFrame:
    """True counts of the bins present in ``partition`` for ``marginal``, canonically ordered."""
    window = partition[f"tap_{marginal.tap}_window"].to_numpy("int64") - UNKNOWN  # 0 = unknown
    loc = partition[f"tap_{marginal.tap}_loc"]
    labels = loc.cat.categories
    n_windows = WINDOWS_PER_DAY + 1 if marginal.by_time else 1
    n_locs = len(labels) if marginal.by_loc else 1
    key = (window if marginal.by_time else 0) * n_locs + (loc.cat.codes.to_numpy("int64") if marginal.by_loc else 0)
    counts = np.bincount(np.broadcast_to(key, len(partition)), minlength=n_windows * n_locs)
    present = np.flatnonzero(counts)
    columns: dict[str, object] = {}
    if marginal.by_time:
        columns[TIME] = (present // n_locs + UNKNOWN).astype("int16")
    if marginal.by_loc:
        columns[LOC] = pd.Categorical.from_codes(present % n_locs, categories=labels)
    columns[COUNT] = counts[present].astype("int64")
    return pd.DataFrame(columns)
