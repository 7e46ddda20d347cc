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

TAP, TIME, LOC, COUNT, BOUNDED = "tap", "time_window", "loc", "count", "bounded_count"
TAPS = ("on", "off")


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


def histograms_from_cells(
    cells: pd.DataFrame, marginals: Iterable[Marginal] = MARGINALS, column: str = COUNT
) -> dict[str, pd.DataFrame]:
    """The same histograms from stored time x location cells (``true_cells``): every marginal of a tap is a
    sum of that tap's cells. ``column``: ``count`` (all trips) or ``bounded_count`` (the mechanism's input)."""
    wanted = list(marginals)
    labels = cells[LOC].cat.categories
    joint = {}
    for tap in {m.tap for m in wanted}:
        mine = cells.loc[cells[TAP] == tap]
        counts = np.zeros((WINDOWS_PER_DAY + 1, len(labels)), dtype=np.int64)
        counts[mine[TIME].to_numpy("int64") - UNKNOWN, mine[LOC].cat.codes.to_numpy("int64")] = mine[column]
        joint[tap] = (counts, labels)
    return {m.name: _present_bins(joint[m.tap], m) for m in wanted}


def true_cells(truths: dict[str, pd.DataFrame], over_bound: pd.DataFrame) -> pd.DataFrame:
    """Both taps' time x location cells of a partition with any trip: ``count`` over all its trips and
    ``bounded_count`` over the trips kept by contribution bounding. ``truths``: the partition's histograms of
    the bounded trips (``histograms``); ``over_bound``: the partition's trips over the bound."""
    frames = []
    for marginal in (m for m in MARGINALS if m.by_time and m.by_loc):
        truth = truths[marginal.name]
        labels = truth[LOC].cat.categories
        kept = np.zeros((WINDOWS_PER_DAY + 1, len(labels)), dtype=np.int64)
        kept[truth[TIME].to_numpy("int64") - UNKNOWN, truth[LOC].cat.codes.to_numpy("int64")] = truth[COUNT]
        over, _ = _joint_counts(over_bound, marginal.tap, labels)
        total = (kept + over).ravel()
        present = np.flatnonzero(total)
        frames.append(pd.DataFrame({
            TAP: pd.Categorical.from_codes(np.full(len(present), TAPS.index(marginal.tap), dtype=np.int8), TAPS),
            TIME: (present // len(labels) + UNKNOWN).astype("int16"),
            LOC: pd.Categorical.from_codes(present % len(labels), categories=labels),
            COUNT: total[present].astype("int64"),
            BOUNDED: kept.ravel()[present].astype("int64"),
        }))
    return pd.concat(frames, ignore_index=True)


def same_bins(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two released frames hold the same bins and counts in the same order (labels compared as text)."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    return all(
        (a[c].astype(str).to_numpy() == b[c].astype(str).to_numpy()).all() if c == LOC
        else (a[c].to_numpy("int64") == b[c].to_numpy("int64")).all()
        for c in a.columns
    )


def _joint_counts(partition: pd.DataFrame, tap: str, labels: pd.Index | None = None) -> tuple[np.ndarray, pd.Index]:
    """(counts of shape (windows + 1, locations), location labels); window row 0 = unknown (-1).
    ``labels``: the label universe to count over (default: the column's categories)."""
    loc = partition[f"tap_{tap}_loc"]
    codes = loc.cat.codes.to_numpy("int64")
    if labels is None:
        labels = loc.cat.categories
    elif not loc.cat.categories.equals(labels):
        codes = labels.get_indexer(loc.cat.categories)[codes] if len(codes) else codes
        if (codes < 0).any():
            raise ValueError(f"tap_{tap}_loc holds labels outside the given universe")
    window = partition[f"tap_{tap}_window"].to_numpy("int64") - UNKNOWN
    key = window * len(labels) + codes
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
