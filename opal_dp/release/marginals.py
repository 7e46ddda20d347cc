"""The six marginals of a (date, mode) partition (seed §4.1 step 6) and their true histograms.

A histogram lists only the bins present in the data (count > 0: SBH adds no new points), in the
canonical order (time window, then location label). That order comes from the public label universe
(category codes are sorted labels), so it is the same function of the bin set on every input: the
row order of the input can never show through (seed §3.3.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY

TAP, TIME, LOC, COUNT = "tap", "time_window", "loc", "count"


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


def histograms(partition: pd.DataFrame, marginals: Iterable[Marginal] = MARGINALS) -> dict[str, pd.DataFrame]:
    """True counts of the bins present in ``partition`` for each marginal, canonically ordered, from one
    count per tap (time x location); the one-way marginals are its row and column sums."""
    wanted = list(marginals)
    joint = {tap: _joint_counts(partition, tap) for tap in {m.tap for m in wanted}}
    return {m.name: _present_bins(joint[m.tap], m) for m in wanted}


def histograms_from_cells(cells: pd.DataFrame, marginals: Iterable[Marginal] = MARGINALS) -> dict[str, pd.DataFrame]:
    """The same histograms from stored true time x location cells (``true_cells``): every marginal of a
    tap is a sum of that tap's cells."""
    wanted = list(marginals)
    labels = cells[LOC].cat.categories
    joint = {}
    for tap in {m.tap for m in wanted}:
        mine = cells.loc[cells[TAP] == tap]
        counts = np.zeros((WINDOWS_PER_DAY + 1, len(labels)), dtype=np.int64)
        counts[mine[TIME].to_numpy("int64") - UNKNOWN, mine[LOC].cat.codes.to_numpy("int64")] = mine[COUNT]
        joint[tap] = (counts, labels)
    return {m.name: _present_bins(joint[m.tap], m) for m in wanted}


def true_cells(truths: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Both taps' true time x location histograms in one frame (tap, time_window, loc, count)."""
    frames = [truths[m.name].assign(**{TAP: m.tap}) for m in MARGINALS if m.by_time and m.by_loc]
    cells = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
    return cells[[TAP, TIME, LOC, COUNT]]


def _joint_counts(partition: pd.DataFrame, tap: str) -> tuple[np.ndarray, pd.Index]:
    """(counts of shape (windows + 1, locations), location labels); window row 0 = unknown (-1)."""
    loc = partition[f"tap_{tap}_loc"]
    labels = loc.cat.categories
    window = partition[f"tap_{tap}_window"].to_numpy("int64") - UNKNOWN
    key = window * len(labels) + loc.cat.codes.to_numpy("int64")
    counts = np.bincount(key, minlength=(WINDOWS_PER_DAY + 1) * len(labels))
    return counts.reshape(WINDOWS_PER_DAY + 1, len(labels)), labels


def _present_bins(joint: tuple[np.ndarray, pd.Index], marginal: Marginal) -> pd.DataFrame:
    counts, labels = joint
    if not marginal.by_loc:
        counts = counts.sum(axis=1, keepdims=True)
    if not marginal.by_time:
        counts = counts.sum(axis=0, keepdims=True)
    n_locs = counts.shape[1]
    flat = counts.ravel()
    present = np.flatnonzero(flat)
    columns: dict[str, object] = {}
    if marginal.by_time:
        columns[TIME] = (present // n_locs + UNKNOWN).astype("int16")
    if marginal.by_loc:
        columns[LOC] = pd.Categorical.from_codes(present % n_locs, categories=labels)
    columns[COUNT] = flat[present].astype("int64")
    return pd.DataFrame(columns)
