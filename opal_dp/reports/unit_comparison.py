"""Internal report: what each privacy unit costs in utility, on the same data at the same nominal budget.

Never published and not differentially private: it compares noisy cells with the true ones. For every unit
the same trips go through that unit's contribution bounding and its calibrated mechanism (``build_plan`` with
the same per-marginal (epsilon_j, delta_j) per scope), and the time x location cells of both taps are drawn
once with production noise. The figures, per unit, over all (date, mode) partitions and both taps:

- ``share_of_trips_in_released_cells``: true trips (before bounding) in the cells released;
- ``released_cells``;
- ``mean_relative_error`` / ``median_relative_error``: |released - true| / true over released cells with a
  true count >= 100 (bounding bias included: the truth is the data before bounding);
- ``suppressed_trips``: true trips in the cells not released;
- ``share_dropped_by_bounding``: trips removed by contribution bounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date

import numpy as np
import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.plan import build_plan
from opal_dp.reports.plots import figure, png
from opal_dp.release.periods import Periods

CELLS = [m for m in MARGINALS if m.by_time and m.by_loc]
LARGE = 100
COLUMNS = ["unit", "mechanism", "share_of_trips_in_released_cells", "released_cells", "mean_relative_error",
           "median_relative_error", "suppressed_trips", "share_dropped_by_bounding", "trips"]


def compare_units(
    days: Mapping[str, Callable[[], pd.DataFrame]],
    epsilon: Mapping[str, float],
    delta: Mapping[str, float],
    bounds: ContributionBounds,
    key: bytes,
    units: Sequence[PrivacyUnit] = tuple(PrivacyUnit),
) -> pd.DataFrame:
    """One row per unit (module docstring). ``days``: service date -> loader of that day's binned trips with
    card ids (``CardBinnedTrips``); the period of ``card_period`` is all of them."""
    period = tuple(sorted(days))
    plans = {u: build_plan(u, epsilon, delta, bounds=bounds, periods=Periods(period)) for u in units}
    tallies = {u: _Tally() for u in units}
    for day in period:
        trips = days[day]()
        truth = _cells(trips)
        for unit in units:
            bounded = bound_day(trips, date.fromisoformat(day), unit, bounds, key)
            tallies[unit].add(truth, _cells(bounded.kept), plans[unit].mechanisms, len(bounded.over_bound))
    return pd.DataFrame([{"unit": u.value, "mechanism": plans[u].mechanism, **tallies[u].figures()} for u in units],
                        columns=COLUMNS)


def _cells(trips: pd.DataFrame) -> dict[tuple[str, str], np.ndarray]:
    """(mode, tap) -> true counts of the time x location cells, shape (windows + 1, labels)."""
    mode = trips["mode"].cat.codes.to_numpy(np.int64)
    out = {}
    for tap in ("on", "off"):
        loc = trips[f"tap_{tap}_loc"]
        size = len(loc.cat.categories)
        key = (mode * (WINDOWS_PER_DAY + 1) + trips[f"tap_{tap}_window"].to_numpy(np.int64) - UNKNOWN) * size
        counts = np.bincount(key + loc.cat.codes.to_numpy(np.int64), minlength=len(MODES) * (WINDOWS_PER_DAY + 1) * size)
        for i, name in enumerate(MODES):
            out[name, tap] = counts.reshape(len(MODES), -1)[i]
    return out


class _Tally:
    def __init__(self) -> None:
        self.trips = self.in_released = self.cells = self.dropped = 0
        self.errors: list[np.ndarray] = []

    def add(self, truth: dict, bounded: dict, mechanisms: Mapping, dropped: int) -> None:
        self.dropped += dropped
        for marginal in CELLS:
            for mode in MODES:
                true, kept = truth[mode, marginal.tap], bounded[mode, marginal.tap]
                present = np.flatnonzero(kept)
                noisy = mechanisms[marginal.name].release(kept[present])
                released = noisy > 0
                cells, values = present[released], noisy[released]
                self.trips += int(true.sum())
                self.in_released += int(true[cells].sum())
                self.cells += int(cells.size)
                large = true[cells] >= LARGE
                self.errors.append(np.abs(values[large] - true[cells][large]) / true[cells][large])

    def figures(self) -> dict:
        errors = np.concatenate(self.errors) if self.errors else np.zeros(0)
        trips = self.trips // len(CELLS)  # each trip is in one cell of each tap
        return {
            "share_of_trips_in_released_cells": self.in_released / self.trips if self.trips else float("nan"),
            "released_cells": self.cells,
            "mean_relative_error": float(errors.mean()) if errors.size else float("nan"),
            "median_relative_error": float(np.median(errors)) if errors.size else float("nan"),
            "suppressed_trips": self.trips - self.in_released,
            "share_dropped_by_bounding": self.dropped / trips if trips else 0.0,
            "trips": trips,
        }


def comparison_plot(table: pd.DataFrame) -> bytes:
    """PNG: share of trips in released cells and median relative error per unit."""
    fig, axes = figure(2, (9, 3.2))
    axes[0].bar(table["unit"], table["share_of_trips_in_released_cells"], color="#1c7ed6")
    axes[0].set_ylim(0, 1)
    axes[0].set_title("trips in released cells")
    axes[1].bar(table["unit"], table["median_relative_error"], color="#d9480f")
    axes[1].set_title(f"median relative error, cells >= {LARGE}")
    return png(fig, "Internal, not DP: the three privacy units on the same data")
