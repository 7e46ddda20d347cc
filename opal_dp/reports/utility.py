"""Internal utility report: how much the privacy protection costs, measured against the truth.

Never published: it compares released counts with true ones. Per marginal and mode: share of bins and
of trips suppressed, i.e. not listed individually (SBH: below the threshold; public-domain design: folded
into a remainder row, where their trips are still counted), and the mean relative error of the individually
listed counts with a sanity bound,
|released - true| / max(true, s), s = 0.1% of the partition's trips (as in the Montreal transit study).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.prep.binning import window_label
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, Marginal, histograms_from_cells
from opal_dp.reports.plots import figure, png

SANITY_SHARE = 0.001


def utility_rows(true_cells: Path, released: Mapping[str, Path], mode: str) -> list[dict]:
    """One (date, mode) partition's ``partition_utility`` of every marginal, from its stored true cells and
    released tables (``released``: marginal -> file); a plain function of files, for a worker process."""
    truths = histograms_from_cells(pd.read_parquet(true_cells))
    trips = int(truths["tap_on_time"]["count"].sum())  # every trip has exactly one tap-on
    return [{"marginal": m.name, "mode": mode,
             **partition_utility(m, truths[m.name], pd.read_parquet(released[m.name]), trips)} for m in MARGINALS]


def partition_utility(marginal: Marginal, truth: pd.DataFrame, released: pd.DataFrame, trips: int) -> dict:
    """Sums and error terms of one (partition, marginal); ``summarise`` turns them into shares."""
    joined = truth.merge(released, on=marginal.dimensions, how="left", suffixes=("_true", "_released"))
    kept = joined["count_released"].notna()
    true, noisy = joined["count_true"].to_numpy(float), joined["count_released"].to_numpy(float)
    sanity = max(SANITY_SHARE * trips, 1.0)
    return {
        "bins": len(joined),
        "bins_suppressed": int((~kept).sum()),
        "trips": int(true.sum()),
        "trips_suppressed": int(true[~kept].sum()),
        "relative_error_sum": float((np.abs(noisy[kept] - true[kept]) / np.maximum(true[kept], sanity)).sum()),
        "bins_released": int(kept.sum()),
    }


def summarise(rows: Iterable[dict]) -> pd.DataFrame:
    """Per (marginal, mode): suppression shares and mean relative error of released counts."""
    frame = pd.DataFrame(list(rows))
    grouped = frame.groupby(["marginal", "mode"], sort=True)[
        ["bins", "bins_suppressed", "trips", "trips_suppressed", "relative_error_sum", "bins_released"]
    ].sum()
    return pd.DataFrame(
        {
            "share_of_bins_suppressed": grouped["bins_suppressed"] / grouped["bins"].clip(lower=1),
            "share_of_trips_suppressed": grouped["trips_suppressed"] / grouped["trips"].clip(lower=1),
            # undefined (NaN), not 0, where nothing was released
            "mean_relative_error": grouped["relative_error_sum"] / grouped["bins_released"].where(grouped["bins_released"] > 0),
            "bins_released": grouped["bins_released"],
        }
    ).reset_index()


def busiest_location_plot(truth: pd.DataFrame, released: pd.DataFrame, title: str) -> bytes:
    """PNG: true vs released counts per 15-minute window at the busiest location of a time x loc
    marginal."""
    busiest = truth.groupby(LOC, observed=True)[COUNT].sum().idxmax()
    windows = np.arange(96)
    series = {}
    for name, frame in (("true", truth), ("released", released)):
        at = frame.loc[frame[LOC] == busiest].set_index(TIME)[COUNT]
        series[name] = at.reindex(windows, fill_value=0).to_numpy()
    fig, ax = figure(1, (9, 3.2))
    ax.plot(windows, series["true"], label="true count", color="#444444")
    ax.plot(windows, series["released"], label="released (0 = suppressed)", color="#d9480f", alpha=0.8)
    ax.set_xticks(windows[::8], [window_label(w) for w in windows[::8]])
    ax.set_ylabel("trips")
    ax.legend()
    return png(fig, f"Internal, not DP: {title} - {busiest}")
