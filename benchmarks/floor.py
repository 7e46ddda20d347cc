"""The floor: the least work that computes the pipeline's six marginals for every (date, mode) partition.

Per day file: read the five needed Parquet columns, bin (15-minute window from the integer timestamp,
location label from a stop-id lookup array), count each tap's joint (mode, window, location)
histogram with one ``np.bincount`` (the one-way marginals are sums of it, not further passes over
the rows), then release the bins present with the pipeline's own mechanism: ``StabilityHistogram``
with the parameters of the trip-unit release (``TRIP_RELEASE``, the benchmark's pipeline), i.e. our exact
discrete Laplace on the OS CSPRNG (``opal_dp.core.DiscreteLaplace`` + ``SecureBits``) and the same integer
threshold. The four modes of a day are released in one call per marginal (the noise is iid, so this is the same distribution as
one call per partition). No validation, no intermediates on disk, no published files.

The binning here is shared with the peers (``benchmarks.peers``), so they all start from the same bins.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from opal_dp.core import PrivacyUnit
from opal_dp.release.settings import PrivacySettings
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import location_labels, stop_labels
from opal_dp.prep.schemas import WINDOW_MINUTES, WINDOWS_PER_DAY
from opal_dp.release.marginals.tables import MARGINALS, Marginal

WINDOW_US = WINDOW_MINUTES * 60 * 1_000_000
N_WINDOWS = WINDOWS_PER_DAY + 1  # index 0 is the unknown window (-1), as in marginals.histogram
N_MODES = len(MODES)
# What the floor and the peers release: the 2016 trip-unit release, as the benchmark's pipeline runs it.
TRIP_RELEASE = PrivacySettings(privacy_unit=PrivacyUnit.TRIP.value)
TAPS = ("on", "off")
COLUMNS = ["mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]


@dataclass(frozen=True)
class Labels:
    """Stop id -> code of its published location label (codes index the sorted label universe)."""

    of_stop: np.ndarray
    unknown: int
    count: int

    @classmethod
    def load(cls) -> Labels:
        stops = load_stops()
        universe = location_labels(stops)
        code = {label: i for i, label in enumerate(universe)}
        by_stop = stop_labels(stops)
        of_stop = np.full(int(by_stop.index.max()) + 1, -1, dtype=np.int16)
        of_stop[by_stop.index.to_numpy()] = [code[label] for label in by_stop]
        return cls(of_stop, code["-1"], len(universe))


@dataclass(frozen=True)
class BinnedDay:
    """One day's trips as bin coordinates: mode code, window index (0 = unknown) and label code per tap."""

    date: str
    mode: np.ndarray
    window: dict[str, np.ndarray]
    loc: dict[str, np.ndarray]

    @property
    def rows(self) -> int:
        return len(self.mode)


def day_of(path: Path) -> str:
    return path.stem.removeprefix("trips_")


def bin_day(path: Path, labels: Labels) -> BinnedDay:
    table = pq.read_table(path, columns=COLUMNS)
    mode = pc.index_in(table["mode"], value_set=pa.array(MODES)).to_numpy(zero_copy_only=False).astype(np.int64)
    window, loc = {}, {}
    for tap in TAPS:
        micros = table[f"tap_{tap}_time"].cast(pa.timestamp("us")).cast(pa.int64())
        known = micros.is_valid().to_numpy(zero_copy_only=False)
        stamp = pc.fill_null(micros, 0).to_numpy(zero_copy_only=False)
        window[tap] = np.where(known, stamp // WINDOW_US % WINDOWS_PER_DAY + 1, 0)
        stop = pc.fill_null(table[f"tap_{tap}_stop"].cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
        loc[tap] = np.where(stop >= 0, labels.of_stop[stop], labels.unknown).astype(np.int64)
    return BinnedDay(day_of(path), mode, window, loc)


def joint_counts(day: BinnedDay, tap: str, n_labels: int) -> np.ndarray:
    """True counts by (mode, window, label) of one tap, shape ``(modes, windows, labels)``."""
    key = (day.mode * N_WINDOWS + day.window[tap]) * n_labels + day.loc[tap]
    return np.bincount(key, minlength=N_MODES * N_WINDOWS * n_labels).reshape(N_MODES, N_WINDOWS, n_labels)


def marginal_counts(joint: np.ndarray, marginal: Marginal) -> np.ndarray:
    """``(modes, bins)`` counts of ``marginal``, bins in canonical (window, label) order."""
    if marginal.by_time and marginal.by_loc:
        return joint.reshape(N_MODES, -1)
    return joint.sum(axis=2) if marginal.by_time else joint.sum(axis=1)


def bin_of(marginal: Marginal, window: np.ndarray, loc: np.ndarray, n_labels: int) -> np.ndarray:
    """The bin of each (window, label) pair under ``marginal``, in ``marginal_counts``' order."""
    if marginal.by_time and marginal.by_loc:
        return window * n_labels + loc
    return window if marginal.by_time else loc


def day_histograms(day: BinnedDay, n_labels: int) -> dict[str, np.ndarray]:
    joints = {tap: joint_counts(day, tap, n_labels) for tap in TAPS}
    return {m.name: marginal_counts(joints[m.tap], m) for m in MARGINALS}


@dataclass
class FloorResult:
    seconds: float
    read_bin_s: float
    count_s: float
    noise_s: float
    rows: int
    bins_present: dict[str, int]
    bins_released: dict[str, int]


def run_floor(files: list[Path]) -> FloorResult:
    started = time.perf_counter()
    labels = Labels.load()
    mechanisms = TRIP_RELEASE.plan().mechanisms
    read_bin = count = noise = 0.0
    rows = 0
    present_total = {m.name: 0 for m in MARGINALS}
    released_total = {m.name: 0 for m in MARGINALS}
    for path in files:
        t0 = time.perf_counter()
        day = bin_day(path, labels)
        t1 = time.perf_counter()
        histograms = day_histograms(day, labels.count)
        t2 = time.perf_counter()
        for name, counts in histograms.items():
            flat = counts.ravel()
            present = np.flatnonzero(flat)
            released = mechanisms[name].release(flat[present])
            present_total[name] += present.size
            released_total[name] += int(np.count_nonzero(released))
        t3 = time.perf_counter()
        read_bin, count, noise = read_bin + t1 - t0, count + t2 - t1, noise + t3 - t2
        rows += day.rows
    return FloorResult(time.perf_counter() - started, read_bin, count, noise, rows, present_total, released_total)
