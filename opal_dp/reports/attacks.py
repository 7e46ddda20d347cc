"""The independent assessment's attacks (Culnane, Rubinstein & Teague, 2017) run against our own release.

Inputs are what an outsider has: the released marginals, ``releases`` = {marginal name: {"YYYY-MM-DD|mode":
released frame}} (the six ``release/<name>`` assets), and the public mechanism parameters. No true count
is read here.

- §4.1 differencing ("secret ferries"): a one-way released count minus the released time x location cells
  inside it is the suppressed mass plus noise; a residual >= min_released_count of the time x location
  marginal exposes mass the threshold was meant to hide.
- §2 duplicated measurement (Manly ferry): with automatic tap-off on a fixed-duration point-to-point route,
  the tap-on cell (t, A) and the tap-off cell (t + d, B) count the same trips. Such pairs show in the release
  as cells whose counts agree within the noise bound at one fixed offset, window after window.
- §3 presence detection: a lone trip in an otherwise empty bin is published with probability
  ``release_probability(1)``; the parameters alone fix it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.prep.binning import window_label
from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY
from opal_dp.release.marginals.checks import noise_sum_bound
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME
from opal_dp.core import HistogramMechanism as AccountableMechanism

Releases = Mapping[str, Mapping[str, pd.DataFrame]]
TAPS = ("on", "off")
TAP_ON_CELLS, TAP_OFF_CELLS = "tap_on_time_loc", "tap_off_time_loc"
AUTO_TAP_OFF_MODES = ("ferry", "light_rail")
DIFFERENCING_COLUMNS = ["partition", "tap", "by", "bin", "released", "cells_sum", "residual", "threshold"]
COUNTED = ("released", "cells_sum", "residual", "threshold")
WINDOW_LABELS = np.array([window_label(w) for w in range(UNKNOWN, WINDOWS_PER_DAY)], dtype=object)


def _stack(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One marginal's partitions in one frame: partition, mode, date (categorical), time_window, loc
    (text), count. A dimension the marginal does not have is left empty; no input gives an empty frame.
    """
    present = [(str(key), frame) for key, frame in frames.items() if len(frame)]
    keys = [key for key, _ in present]
    stacked = pd.concat([frame for _, frame in present], ignore_index=True) if present else pd.DataFrame()
    which = np.repeat(np.arange(len(keys)), [len(frame) for _, frame in present]).astype(np.int32)
    dates, modes = (np.array([key.split("|")[i] for key in keys], dtype=object) for i in (0, 1))
    return pd.DataFrame({
        "partition": pd.Categorical.from_codes(which, categories=keys),
        "mode": modes[which], "date": dates[which],
        TIME: stacked[TIME].to_numpy("int64") if TIME in stacked else np.zeros(len(stacked), "int64"),
        LOC: stacked[LOC].astype(str).to_numpy(object) if LOC in stacked else np.full(len(stacked), "", object),
        COUNT: stacked[COUNT].to_numpy("int64") if COUNT in stacked else np.zeros(0, "int64"),
    })


def _min_count(mechanism: AccountableMechanism) -> int:
    return int(mechanism.describe()["min_released_count"])


def differencing(releases: Releases, mechanisms: Mapping[str, AccountableMechanism]) -> pd.DataFrame:
    """One row per released one-way bin (§4.1), largest residual first.

    Columns: partition, tap, by ("time": a tap_*_time window, "loc": a tap_*_loc location), bin (its
    published label), released (its count), cells_sum (the released time x location cells inside it),
    residual = released - cells_sum, threshold = min_released_count of that tap's time x location
    marginal. ``residual >= threshold`` flags suppressed mass an outsider can see.
    """
    out = []
    for tap in TAPS:
        cells_name = f"tap_{tap}_time_loc"
        cells, threshold = _stack(releases[cells_name]), _min_count(mechanisms[cells_name])
        for by, column in (("time", TIME), ("loc", LOC)):
            one_way = _stack(releases[f"tap_{tap}_{by}"])
            inside = cells.groupby(["partition", column], observed=True)[COUNT].sum().rename("cells_sum")
            cells_sum = one_way.join(inside, on=["partition", column])["cells_sum"].fillna(0).to_numpy("int64")
            released = one_way[COUNT].to_numpy("int64")
            label = WINDOW_LABELS[one_way[TIME].to_numpy() - UNKNOWN] if by == "time" else one_way[LOC].to_numpy()
            out.append(pd.DataFrame({
                "partition": one_way["partition"].astype(str).to_numpy(object), "tap": tap, "by": by, "bin": label,
                "released": released, "cells_sum": cells_sum, "residual": released - cells_sum,
                "threshold": threshold,
            }))
    return _largest_first(pd.concat(out, ignore_index=True))


def day_differencing(files: Mapping[str, Mapping[str, Path]], mechanisms: Mapping[str, AccountableMechanism],
                     worst: int) -> dict:
    """``differencing_summary`` of one day's partitions read from their files (``files``: marginal -> {partition:
    file}): a plain function of files, for a worker process."""
    releases = {name: {key: pd.read_parquet(path) for key, path in by_key.items()} for name, by_key in files.items()}
    return differencing_summary(combined_residuals([differencing(releases, mechanisms)]), worst)


def differencing_summary(table: pd.DataFrame, worst: int) -> dict:
    """What a report keeps of a ``differencing`` table (largest residual first): how many bins were checked and how
    many exposed, and only the rows it can show (the ``worst`` largest exposed residuals and the largest residual),
    so a kept history grows by a few rows a day instead of every one-way bin of every date (under the default
    design nearly every bin is exposed: 52 MB kept after 44 weeks)."""
    exposed = table[table["residual"] >= table["threshold"]]
    shown = pd.concat([exposed.head(worst), table.head(1)]).drop_duplicates()
    return {"checked": len(table), "exposed": len(exposed), "shown": shown.to_dict("records")}


def combined_residuals(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """``differencing`` tables of disjoint partitions (computed a day at a time, or kept from earlier runs) as one,
    largest residual first: each residual involves one partition only, so this is the table of all of them at once."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in COUNTED else object) for c in DIFFERENCING_COLUMNS})
    return _largest_first(pd.concat(frames, ignore_index=True)[DIFFERENCING_COLUMNS])


def _largest_first(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["residual", "partition"], ascending=[False, True], kind="stable").reset_index(drop=True)


def pair_noise_bound(mechanisms: Mapping[str, AccountableMechanism], false_alarm: float) -> float:
    """b with P(|noise_on - noise_off| > b) <= false_alarm for one tap-on and one tap-off cell."""
    widest = max((mechanisms[name].describe() for name in (TAP_ON_CELLS, TAP_OFF_CELLS)), key=noise_variance)
    return noise_sum_bound(2, widest, false_alarm)


def duplicated_pairs(
    releases: Releases,
    mechanisms: Mapping[str, AccountableMechanism],
    *,
    max_offset: int = 8,
    min_windows: int = 4,
    min_agreement: float = 0.9,
    false_alarm: float = 1e-3,
    modes: tuple[str, ...] = AUTO_TAP_OFF_MODES,
) -> pd.DataFrame:
    """Pairs (mode, on_loc, off_loc, offset) whose cells look like one measurement (§2), most evidence first.

    Searched in ``modes`` only: automatic tap-off exists on point-to-point ferry and light-rail services,
    not on buses or trains, whose hundreds of cells per window would also make the band join quadratic.

    A tap-on cell (date, t, on_loc) and a tap-off cell (date, t + offset, off_loc) *agree* when their
    counts differ by at most ``pair_noise_bound(false_alarm)``, as two noisy views of one count do with
    probability >= 1 - false_alarm. A pair is reported when it agrees in at least ``min_windows``
    (date, window)s and in at least ``min_agreement`` of the windows where both cells are released
    (``co_released``): consistently, not by a few coincidences. These are candidates: cells near the
    threshold can look alike by chance; ``rms_diff`` beside ``pair_noise_rms`` (the RMS of two noisy views
    of one count) says how alike. ``offset`` in 15-minute windows,
    0..max_offset; the Manly ferry is offset 2 (30 minutes).
    """
    bound = pair_noise_bound(mechanisms, false_alarm)
    on, off = (
        _searched(_stack({k: f for k, f in releases[name].items() if k.split("|")[1] in modes}))
        for name in (TAP_ON_CELLS, TAP_OFF_CELLS)
    )
    columns = ["mode", "on_loc", "off_loc", "offset", "agreeing", "co_released", "agreement", "max_abs_diff",
               "rms_diff"]
    if not (len(on) and len(off)):
        return pd.DataFrame({c: [] for c in columns})
    slots = pd.MultiIndex.from_frame(pd.concat([on, off])[["mode", "date"]]).unique()
    stride = WINDOWS_PER_DAY + max_offset + 1  # windows of one (mode, date) slot never reach the next
    width = int(max(on[COUNT].max(), off[COUNT].max()) + math.ceil(bound) + 1)  # count band inside a slot

    def group(cells: pd.DataFrame, shift: int) -> np.ndarray:
        return slots.get_indexer(pd.MultiIndex.from_frame(cells[["mode", "date"]])) * stride + cells[TIME].to_numpy() + shift

    off_key = group(off, 0) * width + off[COUNT].to_numpy()
    order = np.argsort(off_key, kind="stable")
    off_sorted = off_key[order]
    # A pair as one integer (mode, on_loc, off_loc); each offset's matches are aggregated at once, so what is held
    # is one offset's matches as integers, not every offset's as rows of labels.
    places = pd.Index(pd.unique(np.concatenate([on[LOC].to_numpy(object), off[LOC].to_numpy(object)])))
    modes = pd.Index(pd.unique(on["mode"].to_numpy(object)))
    on_pair = (modes.get_indexer(on["mode"]).astype(np.int64) * len(places)
               + places.get_indexer(on[LOC])) * len(places)
    off_place = places.get_indexer(off[LOC]).astype(np.int64)
    on_count, off_count = on[COUNT].to_numpy(), off[COUNT].to_numpy()
    parts = []
    for offset in range(max_offset + 1):
        centre = group(on, offset) * width + on_count
        lo = np.searchsorted(off_sorted, centre - math.floor(bound), "left")
        hi = np.searchsorted(off_sorted, centre + math.floor(bound), "right")
        n = hi - lo
        on_idx = np.repeat(np.arange(len(on)), n)
        off_idx = order[np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)]
        codes, which = np.unique(on_pair[on_idx] + off_place[off_idx], return_inverse=True)
        diff = np.abs(on_count[on_idx] - off_count[off_idx])
        largest = np.zeros(len(codes), np.int64)
        np.maximum.at(largest, which, diff)
        agreeing = np.bincount(which, minlength=len(codes))
        squares = np.bincount(which, weights=diff.astype(float) ** 2, minlength=len(codes))
        parts.append(pd.DataFrame({
            "mode": modes.to_numpy()[codes // len(places) ** 2], "on_loc": places.to_numpy()[codes // len(places) % len(places)],
            "off_loc": places.to_numpy()[codes % len(places)], "offset": offset, "agreeing": agreeing,
            "max_abs_diff": largest, "rms_diff": np.sqrt(squares / np.maximum(agreeing, 1)),
        }))
    pair = ["mode", "on_loc", "off_loc", "offset"]
    found = pd.concat(parts, ignore_index=True).sort_values(pair, ignore_index=True)
    found = found.loc[found["agreeing"] >= min_windows]
    if found.empty:
        return pd.DataFrame({c: [] for c in columns})
    found = found.assign(co_released=_co_released(found, on, off, group(on, 0), group(off, 0)))
    found = found.assign(agreement=found["agreeing"] / found["co_released"])
    found = found.loc[found["agreement"] >= min_agreement, columns]
    return found.sort_values(["agreeing", "agreement", *pair], ascending=[False, False, True, True, True, True],
                             kind="stable").reset_index(drop=True)


_EXPANDED = 1 << 20


def _co_released(found: pd.DataFrame, on: pd.DataFrame, off: pd.DataFrame, on_slot: np.ndarray,
                 off_slot: np.ndarray) -> np.ndarray:
    """Per candidate pair: the (date, window)s where both its cells are released, agreeing or not.

    Each pair is expanded over the released tap-on cells of its mode and location (``on_slot`` is the
    cell's (mode, date) slot and window as one integer); a window counts when the tap-off cell of the
    pair's location ``offset`` windows later is released too. Integer keys throughout, no joins; the pairs are
    expanded a chunk at a time, so memory does not grow with the number of dates.
    """
    places = pd.Index(pd.unique(np.concatenate([on[LOC].to_numpy(object), off[LOC].to_numpy(object)])))
    modes = pd.Index(pd.unique(on["mode"].to_numpy(object)))
    n_places = len(places)
    released_off = np.sort(off_slot * n_places + places.get_indexer(off[LOC]))
    on_place = modes.get_indexer(on["mode"]) * n_places + places.get_indexer(on[LOC])
    order = np.argsort(on_place, kind="stable")
    wanted = modes.get_indexer(found["mode"]) * n_places + places.get_indexer(found["on_loc"])
    lo, hi = np.searchsorted(on_place[order], wanted, "left"), np.searchsorted(on_place[order], wanted, "right")
    offset, off_place = found["offset"].to_numpy(), places.get_indexer(found["off_loc"])
    counts, cumulative, start = np.zeros(len(found), np.int64), np.cumsum(hi - lo), 0
    while start < len(found):  # pairs a chunk at a time: at most _EXPANDED (pair, cell) rows in memory
        before = cumulative[start - 1] if start else 0
        stop = max(int(np.searchsorted(cumulative, before + _EXPANDED, "right")), start + 1)
        n = hi[start:stop] - lo[start:stop]
        pair_idx = np.repeat(np.arange(start, stop), n)
        cell_idx = order[np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo[start:stop], n)]
        keys = (on_slot[cell_idx] + offset[pair_idx]) * n_places + off_place[pair_idx]
        position = np.minimum(np.searchsorted(released_off, keys), len(released_off) - 1)
        both = released_off[position] == keys
        counts[start:stop] = np.bincount(pair_idx[both] - start, minlength=stop - start)
        start = stop
    return counts


def pair_noise_rms(mechanisms: Mapping[str, AccountableMechanism]) -> float:
    """RMS of Z_on - Z_off: how far apart two noisy views of the same count are, typically."""
    return math.sqrt(sum(noise_variance(mechanisms[name].describe()) for name in (TAP_ON_CELLS, TAP_OFF_CELLS)))


def _searched(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells with a known time window (a missing tap-off has no time to be offset from)."""
    return cells.loc[cells[TIME] != UNKNOWN].reset_index(drop=True)


def noise_variance(mechanism: Mapping) -> float:
    """Variance of the noise of a mechanism (its describe()): discrete Laplace of scale s, 2q/(1-q)² with
    q = exp(-1/s); discrete Gaussian of parameter sigma, at most sigma² (CKS 2020, Cor. 9)."""
    if mechanism["noise"] == "discrete_gaussian":
        return mechanism["scale"] ** 2
    q = math.exp(-1 / mechanism["scale"])
    return 2 * q / (1 - q) ** 2


def duplication_effect(mechanisms: Mapping[str, AccountableMechanism]) -> dict[str, float]:
    """What a duplicated pair of time x location cells (tap-on, tap-off) does to a unit's protection.

    One unit moves each cell by at most its share of the sensitivity, so a released cell carries a share of
    the marginal's loss (epsilon/L1 per unit of change for the Laplace, rho/L2² per squared unit for the
    Gaussian). A trip in a duplicated pair is in two cells holding the *same* count c: the loss on c is the
    sum of both shares, which a reader of the per-marginal table would take as one. It never exceeds the
    stated per-scope guarantee (composition of all six marginals already charges both cells). What changes is
    the noise on c: the inverse-variance average of the two views has standard deviation
    1 / sqrt(1/v_on + 1/v_off), √2 smaller than one view when the noises match.
    """
    on, off = (mechanisms[name].describe() for name in (TAP_ON_CELLS, TAP_OFF_CELLS))

    def share(p: Mapping) -> float:
        cost, sens = p["cost"], p["sensitivity"]
        return cost["epsilon"] / sens["l1"] if cost["measure"] == "approx_dp" else cost["rho"] / sens["l2_squared"]

    v_on, v_off = noise_variance(on), noise_variance(off)
    one_view = math.sqrt(v_on)
    pair = 1 / math.sqrt(1 / v_on + 1 / v_off)
    return {
        "loss_measure": on["cost"]["measure"],
        "loss_share_tap_on_cell": share(on),
        "loss_share_tap_off_cell": share(off),
        "loss_on_duplicated_count": share(on) + share(off),
        "noise_std_one_view": one_view,
        "noise_std_pair_average": pair,
        "noise_std_reduction": one_view / pair,
    }


def presence_probability(mechanisms: Mapping[str, AccountableMechanism], group: int = 1) -> dict[str, float]:
    """Per marginal, P(a bin whose true count is ``group`` is published) = release_probability(group) (§3).

    With ``group = 1`` that is the chance a lone trip in an otherwise empty bin becomes visible.
    """
    return {m.name: mechanisms[m.name].release_probability(group) for m in MARGINALS}


def any_marginal(probabilities: Mapping[str, float]) -> float:
    """P(published in at least one marginal) for independent noise: 1 - Π(1 - p_j)."""
    return -math.expm1(math.fsum(math.log1p(-p) for p in probabilities.values()))
