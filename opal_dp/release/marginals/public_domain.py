"""The public-domain release design (issue 11): noise on every cell of a public domain, zeros included; the
one-way marginals derived consistently from the same measurements; remainder rows below a threshold.

Per (date, mode) partition and tap:

1. **Domain, from public data only.** The 15-minute windows 0..95 x the mode's location labels in the
   reference stops (postcodes for bus, names otherwise); for tap-off also the unknown cell (window -1,
   location "-1") of trips without a tap-off, as a block of its own: every other cell with a -1 is a
   structural zero (a trip has both or neither), as are all -1 cells of tap-on. A trip outside the domain is
   an error, never dropped silently.
2. **Measurement.** Three histograms per block, each with independent integer noise on every cell: the joint
   (time x location), the time marginal and the location marginal, with the plan's per-marginal budget
   (``tap_*_time_loc``, ``tap_*_time``, ``tap_*_loc``). Discrete Laplace of scale ``l1/epsilon`` gives pure
   ``epsilon``-DP per histogram (``delta = 0``); discrete Gaussian of ``sigma² = l2²/(2 rho)`` gives
   ``rho``-zCDP. The sensitivities are the unit's (``opal_dp.core.units``), as for SBH. Every cell's noise is
   drawn (``law.draw``): the least-squares step uses the joint through its row and column sums, whose joint
   law depends on every cell (``opal_dp.core.sparse_noise`` says why its fast path does not apply). At about
   29,000 cells per partition and tap this costs tens of milliseconds, and its running time does not depend
   on the data.
3. **Consistency (post-processing).** Weighted least squares and the rounding with remainders of
   ``opal_dp.release.marginals.consistency``; ``tau`` is the public publication threshold.
4. **Published rows.** ``time-loc``: listed cells, ``(T, other)`` and ``(other, L)`` remainders; ``time`` and
   ``loc``: the one-way counts. Zero counts are not written. Every file adds up (``release-format.md``).

False cells: an empty cell is listed only if its estimate rounds to ``tau`` or more. Its estimate is its noisy
measurement moved by the least-squares correction, a share of one row's and one column's residual (of order
``1/J`` and ``1/I`` of them), so the expected number of empty cells passing ``tau`` is ``n_empty * P(Z >= tau)``, ``Z`` the joint's
noise, up to that correction; the rounding then de-lists those that their row or column estimate cannot hold,
so fewer are published. ``n_empty`` is at most the domain size, a public figure, so
``expected_false_cells(noise, domain cells, tau)`` is a data-independent upper estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.bits import BitSource, SecureBits
from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.core.noise import laplace_scale
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.core.sparse_noise import GaussianNoise, LaplaceNoise, ThresholdNoise, tail_probability
from opal_dp.network import MODES
from opal_dp.prep.binning import stop_labels
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.release.marginals.consistency import Rounded, least_squares, round_with_remainders
from opal_dp.release.marginals.tables import TAPS
from opal_dp.release.marginals.schemas import OTHER_WINDOW
from opal_dp.release.options import Mechanism

OTHER = "other"
TABLES = ("time-loc", "time", "loc")


@dataclass(frozen=True)
class Block:
    """A rectangle of the domain: every (window, location) pair in it is a possible cell."""

    windows: tuple[int, ...]
    locations: tuple[str, ...]

    def __post_init__(self) -> None:
        if list(self.windows) != list(range(self.windows[0], self.windows[0] + len(self.windows))):
            raise ValueError(f"a block's windows must be consecutive, got {self.windows}")

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.windows), len(self.locations)


@dataclass(frozen=True)
class Domain:
    """The public cells of one (mode, tap) (module docstring, step 1)."""

    mode: str
    tap: str
    locations: tuple[str, ...]

    @property
    def blocks(self) -> tuple[Block, ...]:
        main = Block(tuple(range(WINDOWS_PER_DAY)), self.locations)
        return (main, Block((UNKNOWN,), (UNKNOWN_LABEL,))) if self.tap == "off" else (main,)

    @property
    def cells(self) -> int:
        return sum(math.prod(b.shape) for b in self.blocks)


def domain(stops: pd.DataFrame, mode: str, tap: str) -> Domain:
    """The domain of ``mode`` and ``tap`` from the reference stops alone."""
    if mode not in MODES or tap not in TAPS:
        raise ValueError(f"mode must be one of {MODES} and tap one of {TAPS}, got {mode!r}, {tap!r}")
    labels = stop_labels(stops)
    mine = sorted(set(labels[stops.loc[stops["mode"] == mode, "stop_id"].astype("int64").to_numpy()]))
    if not mine:
        raise ValueError(f"the reference stops list no location of mode {mode!r}")
    return Domain(mode, tap, tuple(mine))


def true_blocks(partition: pd.DataFrame, dom: Domain) -> list[np.ndarray]:
    """True counts of every cell of each block of ``dom`` (int64 arrays), from the partition's trips."""
    window = partition[f"tap_{dom.tap}_window"].to_numpy("int64")
    loc = partition[f"tap_{dom.tap}_loc"].astype("category")
    codes = loc.cat.codes.to_numpy("int64")
    labels = loc.cat.categories.astype(str)
    out, placed = [], np.zeros(len(window), dtype=bool)
    for block in dom.blocks:
        n_rows, n_cols = block.shape
        rows = window - block.windows[0]  # a block's windows are consecutive
        column_of = np.append(pd.Index(block.locations).get_indexer(labels), -1)  # code -1 (missing) -> -1
        cols = column_of[codes]
        inside = (rows >= 0) & (rows < n_rows) & (cols >= 0)
        counts = np.bincount(rows[inside] * n_cols + cols[inside], minlength=n_rows * n_cols)
        out.append(counts.reshape(n_rows, n_cols).astype(np.int64))
        placed |= inside
    if not placed.all():
        i = int(np.flatnonzero(~placed)[0])
        raise ValueError(f"a {dom.mode} trip lies outside the public domain of tap-{dom.tap}: window "
                         f"{window[i]}, location {loc.iloc[i]!r}")
    return out


@dataclass(frozen=True)
class DesignNoise:
    """The noise of the three measurements of a block, by published table: ``time-loc``, ``time``, ``loc``."""

    mechanism: Mechanism
    sensitivity: Sensitivity
    budget: Mapping[str, float]  # epsilon (laplace) or rho (gaussian) per table
    laws: Mapping[str, ThresholdNoise]
    parameters: Mapping[str, float]  # Laplace scale or Gaussian sigma
    variances: Mapping[str, float]  # weights of the least-squares step

    def cost(self, table: str) -> PrivacyCost:
        """What measuring ``table`` costs one unit: pure epsilon-DP (delta 0) or rho-zCDP (delta 0)."""
        if self.mechanism.pure:
            return PrivacyCost.approx_dp(self.budget[table], 0.0)
        return PrivacyCost.zcdp(self.budget[table], 0.0)

    def describe(self) -> dict:
        name = "scale" if self.mechanism.pure else "sigma"
        return {"mechanism": self.mechanism.value, "noise": f"discrete_{self.mechanism}", name: dict(self.parameters),
                "sensitivity": self.sensitivity.describe(),
                "cost": {table: self.cost(table).describe() for table in TABLES}}


def calibrate(
    mechanism: Mechanism | str, sens: Sensitivity, budget: Mapping[str, float], bits: BitSource | None = None
) -> DesignNoise:
    """Noise for ``budget`` per table: epsilon (``laplace``, pure DP) or rho (``gaussian``, zCDP)."""
    mechanism = Mechanism.parse(mechanism)
    if sorted(budget) != sorted(TABLES) or not all(math.isfinite(v) and v > 0 for v in budget.values()):
        raise ValueError(f"budget must give a finite positive value for each of {TABLES}, got {dict(budget)}")
    bits = SecureBits() if bits is None else bits
    laws: dict[str, ThresholdNoise] = {}
    parameters, variances = {}, {}
    for table, value in budget.items():
        if mechanism.pure:
            scale = laplace_scale(sens.l1, value)  # rounded up, as sigma below
            laws[table] = LaplaceNoise(scale, bits)
            q = math.exp(-1 / scale)
            parameters[table], variances[table] = scale, 2 * q / (1 - q) ** 2
        else:
            sigma = sigma_for(value, sens.l2_squared)
            laws[table] = GaussianNoise(sigma, bits)
            parameters[table], variances[table] = sigma, sigma**2  # the variance is at most sigma²
    return DesignNoise(mechanism, sens, dict(budget), laws, parameters, variances)


def noisy(counts: np.ndarray, law: ThresholdNoise) -> np.ndarray:
    """One measurement: every cell of ``counts`` plus independent noise from ``law``, zeros included (the
    privacy argument: each table is a histogram of L1 sensitivity ``noise.sensitivity.l1``, and ``law`` is
    calibrated to it, so the measurement is epsilon-DP (or rho-zCDP) whatever the counts; a zero left
    unnoised would reveal that no unit was there)."""
    return counts + law.draw(counts.size).reshape(counts.shape)


def release_tap(partition: pd.DataFrame, dom: Domain, noise: DesignNoise, tau: int) -> list[Rounded]:
    """Measure, combine and round every block of ``dom`` (module docstring, steps 2-3): what follows the
    three ``noisy`` measurements reads nothing but them and public parameters (post-processing)."""
    out = []
    for truth in true_blocks(partition, dom):
        joint = noisy(truth, noise.laws["time-loc"])
        rows = noisy(truth.sum(axis=1), noise.laws["time"])
        cols = noisy(truth.sum(axis=0), noise.laws["loc"])
        v = noise.variances
        estimate = least_squares(joint, rows, cols, v["time-loc"], v["time"], v["loc"])
        out.append(round_with_remainders(estimate, tau))
    return out


def released_frames(dom: Domain, blocks: list[Rounded], labels: pd.Index) -> dict[str, pd.DataFrame]:
    """The tap's three tables as released frames (the engine's form, as SBH's: ``time_window``, ``loc``,
    ``count``), canonically ordered, zero counts left out. Remainder rows: ``time_window = OTHER_WINDOW`` or
    ``loc = OTHER``. ``labels``: the public label universe the ``loc`` categories come from."""
    if OTHER in labels:
        raise ValueError(f"{OTHER!r} is a location label: it cannot also name the remainder rows")
    categories = pd.Index(sorted([*map(str, labels), OTHER]))
    parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {t: [] for t in TABLES}
    for block, rounded in zip(dom.blocks, blocks, strict=True):
        windows = np.asarray(block.windows, dtype=np.int64)
        locs = np.asarray(block.locations, dtype=object)
        i, j = np.nonzero(rounded.cells)
        parts["time-loc"].append((windows[i], locs[j], rounded.cells[i, j]))
        i = np.flatnonzero(rounded.row_other)
        parts["time-loc"].append((windows[i], np.full(i.size, OTHER, dtype=object), rounded.row_other[i]))
        j = np.flatnonzero(rounded.col_other)
        parts["time-loc"].append((np.full(j.size, OTHER_WINDOW), locs[j], rounded.col_other[j]))
        i = np.flatnonzero(rounded.rows)
        parts["time"].append((windows[i], np.full(i.size, None, dtype=object), rounded.rows[i]))
        j = np.flatnonzero(rounded.cols)
        parts["loc"].append((np.zeros(j.size, dtype=np.int64), locs[j], rounded.cols[j]))
    out = {}
    for table, pieces in parts.items():
        window, loc, count = (np.concatenate([p[k] for p in pieces]) for k in range(3))
        columns: dict[str, object] = {}
        if table != "loc":
            columns["time_window"] = window.astype("int16")
        if table != "time":
            columns["loc"] = pd.Categorical(loc, categories=categories)
        columns["count"] = count.astype(np.int64)
        frame = pd.DataFrame(columns)
        order = [c for c in ("time_window", "loc") if c in frame]
        keys = [frame[c].cat.codes if c == "loc" else frame[c] for c in order]
        frame = frame.iloc[np.lexsort(keys[::-1])].reset_index(drop=True)
        if frame.duplicated(order).any():
            raise ValueError(f"{dom.mode} tap-{dom.tap}: a {table} row appears twice")
        out[table] = frame
    return out


def expected_false_cells(noise: DesignNoise, cells: int, tau: int) -> float:
    """Expected number of empty cells passing threshold ``tau`` among ``cells`` empty cells, an upper estimate
    of those listed (module docstring: exact for the noisy measurement, up to the least-squares correction)."""
    return cells * tail_probability(noise.laws["time-loc"], tau)


def min_tau_over(pieces: list[tuple[DesignNoise, int]], target: float) -> int:
    """The smallest threshold whose expected false cells, summed over (noise, empty cells) pieces, is at most
    ``target`` (one threshold for several taps whose noise may differ). The sum falls as the threshold rises (each
    tail probability does, by far more between consecutive thresholds than its 40-digit bounds' width), so the
    threshold is found by doubling, then bisecting: about 2 log2(tau) tail sums instead of tau (a Gaussian's tau
    of several hundred took seconds of exact tail sums). Public: the noise laws and the public domains' sizes."""
    if not target > 0:
        raise ValueError(f"target must be > 0, got {target!r}")

    def fits(tau: int) -> bool:
        return sum(expected_false_cells(noise, cells, tau) for noise, cells in pieces) <= target

    lo, hi = 0, 1  # fits(lo) is false (or lo is 0), fits(hi) is true
    while not fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class DomainMeasurement:
    """One published table of a tap under the public-domain design, as the ledger charges and records it.

    It is not a ``HistogramMechanism`` that draws on its own: the three tables of a tap are measured and made
    consistent together (``release_tap``). ``tau`` (the publication threshold) and the domain are public;
    ``min_released_count`` and ``threshold`` repeat ``tau`` so that statements read both designs alike.
    """

    name = "public_domain_histogram"
    table: str
    noise: DesignNoise
    tau: int
    false_cells_per_day: float  # expected, over every (mode, tap) domain of a day at this tau
    domain_digest: str  # SHA-256 of the public domains: a changed stop list is another mechanism

    @property
    def sensitivity(self) -> Sensitivity:
        return self.noise.sensitivity

    def cost(self) -> PrivacyCost:
        return self.noise.cost(self.table)

    def release_probability(self, n: int) -> float:
        """P(a cell of true count ``n`` is published): ``P(n + Z >= tau)`` for a joint cell (listed), ``P(n + Z
        >= 1)`` for a one-way cell (any count that rounds to 1 or more), ``Z`` this table's noise, before the
        least-squares correction (approximate, as ``expected_false_cells``). The ratio between ``n`` and
        ``n + 1`` is at most ``exp(epsilon)`` of the table under pure DP: a published cell is no proof."""
        law, t = self.noise.laws[self.table], (self.tau if self.table == "time-loc" else 1) - n
        return tail_probability(law, t) if t >= 1 else 1 - tail_probability(law, 1 - t)  # Z is symmetric

    def describe(self) -> dict:
        value, parameter = self.noise.budget[self.table], self.noise.parameters[self.table]
        pure = self.noise.mechanism.pure
        return {
            "mechanism": self.name, "design": "public_domain", "table": self.table,
            "noise": f"discrete_{self.noise.mechanism}", **({"epsilon": value} if pure else {"rho": value}),
            "delta": 0.0, "scale": parameter, "threshold": float(self.tau), "min_released_count": self.tau,
            "tau": self.tau, "expected_false_cells_per_day": self.false_cells_per_day,
            "domain_digest": self.domain_digest, "sensitivity": self.sensitivity.describe(),
            "cost": self.cost().describe(), "seeded": bool(self.noise.laws[self.table].bits.seeded),
        }


def sum_problems(tables: Mapping[str, pd.DataFrame]) -> list[str]:
    """What breaks the remainder-row convention in published ``tables`` (``release-format.md``): per (mode, date,
    tap), each ``time`` count must equal its ``time-loc`` rows including ``loc = other``, each ``loc`` count its
    rows including ``time = other``, and both one-way tables the same total. Empty when the files add up."""
    joint, time, loc = (tables[t].astype({"count": "int64"}) for t in TABLES)
    key = ["mode", "date", "tap"]
    problems = []
    for table, one_way, dim, remainder in (("time", time, "time", "loc"), ("loc", loc, "loc", "time")):
        listed = joint[joint[dim] != OTHER].groupby([*key, dim], observed=True)["count"].sum()
        published = one_way.groupby([*key, dim], observed=True)["count"].sum()
        both = pd.concat([listed.rename("time-loc"), published.rename(table)], axis=1).fillna(0)
        for index, row in both[both["time-loc"] != both[table]].iterrows():
            problems.append(f"{table}.csv {index}: {int(row[table])}, but its time-loc rows ({remainder} = other "
                            f"included) sum to {int(row['time-loc'])}")
    totals = pd.concat([time.groupby(key, observed=True)["count"].sum().rename("time"),
                        loc.groupby(key, observed=True)["count"].sum().rename("loc")], axis=1).fillna(0)
    for index, row in totals[totals["time"] != totals["loc"]].iterrows():
        problems.append(f"{index}: time.csv totals {int(row['time'])}, loc.csv {int(row['loc'])}")
    return problems
