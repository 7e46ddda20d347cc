"""Internal report: the two release designs (``sbh``, ``public_domain``) on the same data, unit and budget.

Never published and not differentially private: it compares released tables with the true cells
(``true_cells``: ``count`` over all trips, so bounding bias is included, as in ``unit_comparison``). Released
tables are in the engine's form (``time_window``, ``loc``, ``count``; public-domain remainder rows have
``time_window = OTHER_WINDOW`` or ``loc = "other"``). The figures, per design, over all partitions and both taps:

- ``share_of_trips_in_listed_cells``: true trips in the individually listed time x location cells (remainder
  rows are not listed cells);
- ``listed_cells``;
- ``mean_relative_error`` / ``median_relative_error``: |released - true| / true over every true cell >= 100, a
  cell not listed counting as released 0;
- ``rmse_time`` / ``rmse_loc``: RMSE of the one-way tables over every one-way bin that is true (> 0) or
  released, an absent (suppressed) bin counting as 0;
- ``false_cells_per_day``: listed cells whose true count is 0, per service day;
- ``differencing_residual``: sum of |one-way count - the time-loc rows inside it| over every (partition, tap,
  time) of the time table (``loc = other`` rows included) and every (partition, tap, loc) of the loc table
  (``time = other`` rows included): what the assessment's differencing attack reads. 0 exactly for a design
  consistent by construction;
- presence risk. ``listed_true_zero_share``: the share of listed cells whose true count is 0 (measured): under
  SBH it is 0, so a listed cell proves someone travelled there; under the public-domain design listing is not
  proof. ``lone_trip_listed_probability``: P(a cell whose true count is 1 is listed), the larger of the two
  taps; ``empty_cell_listed_probability``: the same for true count 0 (SBH: 0, it never lists an absent bin).
  SBH's come from its mechanism (``reports.attacks.presence_probability``, the §3 attack, bounded by delta); the
  public domain's are ``P(n + Z >= tau)`` for the joint's noise ``Z`` before the least-squares correction (the
  correction moves a cell by a share of its row's and column's residuals, so this is approximate, as is the
  design's ``expected_false_cells_per_day``, which is reported beside the measured figure). Their ratio is at
  most ``exp(epsilon)`` of the joint under pure DP, and unbounded under SBH.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from opal_dp.release.marginals.engine import draw, draw_tap
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TAPS, TIME, histograms
from opal_dp.release.marginals.plan import ReleasePlan
from opal_dp.release.options import Design
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.schemas import OTHER_WINDOW
from opal_dp.reports.unit_comparison import LARGE
from opal_dp.reports.plots import figure, png

Released = Mapping[str, pd.DataFrame]  # marginal name -> released frame of one partition
COMPARED = (Design.SBH, Design.PUBLIC_DOMAIN)
"""The designs this report compares, under any unit and mechanism (the hierarchy, card units and the Gaussian only,
is scored on a planner's queries by ``benchmarks.workload``)."""
COLUMNS = ["design", "share_of_trips_in_listed_cells", "listed_cells", "mean_relative_error", "median_relative_error",
           "rmse_time", "rmse_loc", "false_cells_per_day", "differencing_residual", "listed_true_zero_share",
           "lone_trip_listed_probability", "empty_cell_listed_probability", "expected_false_cells_per_day", "trips"]


def release_in_memory(partition: pd.DataFrame, plan: ReleasePlan, mode: str) -> dict[str, pd.DataFrame]:
    """The six released tables of one partition's bounded trips under ``plan``, drawn in memory with the
    engine's own draws: nothing stored, nothing charged to the ledger, so never to be published."""
    if plan.design.consistent:
        out = {}
        for tap in TAPS:
            tables = draw_tap(partition, plan, mode, tap)
            out.update({m.name: tables[m.table] for m in MARGINALS if m.tap == tap})
        return out
    truths = histograms(partition)
    return {name: draw(truths[name], mechanism) for name, mechanism in plan.mechanisms.items()}


class DesignTally:
    """The figures of one design, accumulated one partition at a time (module docstring)."""

    def __init__(self, design: Design | str, mechanisms: Mapping[str, object]) -> None:
        self.design, self.mechanisms = Design.parse(design), mechanisms
        self.trips = self.in_listed = self.listed = self.false = self.residual = 0
        self.days: set[str] = set()
        self.errors: list[np.ndarray] = []
        self.squares: dict[str, list[np.ndarray]] = {TIME: [], LOC: []}

    def add(self, key: str, cells: pd.DataFrame, released: Released) -> None:
        """One partition: its true cells (``TrueCells``) and its six released tables."""
        self.days.add(key.split("|")[0])
        for tap in TAPS:
            mine = cells.loc[cells["tap"] == tap]
            truth = pd.DataFrame({TIME: mine[TIME].to_numpy("int64"), LOC: mine[LOC].astype(str).to_numpy(object),
                                  COUNT: mine[COUNT].to_numpy("int64")})
            joint = _plain(released[f"tap_{tap}_time_loc"])
            self._cells(truth, joint.loc[(joint[TIME] != OTHER_WINDOW) & (joint[LOC] != OTHER)])
            for dim, other in ((TIME, joint[TIME] == OTHER_WINDOW), (LOC, joint[LOC] == OTHER)):
                one_way = _plain(released[f"tap_{tap}_{dim.split('_')[0]}"])
                self.squares[dim].append(_errors(truth, one_way, dim) ** 2)
                self.residual += int(np.abs(_errors(joint.loc[~other], one_way, dim)).sum())

    def _cells(self, truth: pd.DataFrame, listed: pd.DataFrame) -> None:
        both = truth.merge(listed, on=[TIME, LOC], how="outer", suffixes=("_true", "_released"), validate="1:1")
        true = both[f"{COUNT}_true"].fillna(0).to_numpy("int64")
        out = both[f"{COUNT}_released"].fillna(0).to_numpy("int64")
        self.trips += int(true.sum())
        self.in_listed += int(true[out > 0].sum())
        self.listed += int((out > 0).sum())
        self.false += int(((out > 0) & (true == 0)).sum())
        large = true >= LARGE
        self.errors.append(np.abs(out[large] - true[large]) / true[large])

    def figures(self) -> dict:
        errors = np.concatenate(self.errors) if self.errors else np.zeros(0)
        days = max(len(self.days), 1)
        names = [m.name for m in MARGINALS if m.by_time and m.by_loc]
        joints = [self.mechanisms[name] for name in names]
        public = self.design.consistent
        lone = max(m.release_probability(1) for m in joints)  # the §3 presence attack's figure
        return {
            "design": self.design,
            "share_of_trips_in_listed_cells": self.in_listed / self.trips if self.trips else float("nan"),
            "listed_cells": self.listed,
            "mean_relative_error": float(errors.mean()) if errors.size else float("nan"),
            "median_relative_error": float(np.median(errors)) if errors.size else float("nan"),
            **{f"rmse_{dim.split('_')[0]}": _rmse(self.squares[dim]) for dim in (TIME, LOC)},
            "false_cells_per_day": self.false / days,
            "differencing_residual": self.residual,
            "listed_true_zero_share": self.false / self.listed if self.listed else 0.0,
            "lone_trip_listed_probability": lone,
            "empty_cell_listed_probability": max(m.release_probability(0) for m in joints) if public else 0.0,
            "expected_false_cells_per_day": joints[0].false_cells_per_day if public else 0.0,
            "trips": self.trips // len(TAPS),  # each trip is in one cell of each tap
        }


def compare_designs(
    parts: Iterable[tuple[str, pd.DataFrame, pd.DataFrame]], plans: Mapping[str, ReleasePlan]
) -> pd.DataFrame:
    """Release each partition under every plan in memory (``release_in_memory``) and compare; ``parts``:
    (partition key, bounded trips, ``TrueCells``), consumed one at a time."""
    tallies = {design: DesignTally(design, plan.mechanisms) for design, plan in plans.items()}
    for key, partition, cells in parts:
        mode = key.split("|")[1]
        for design, plan in plans.items():
            tallies[design].add(key, cells, release_in_memory(partition, plan, mode))
    return pd.DataFrame([t.figures() for t in tallies.values()], columns=COLUMNS)


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """A released frame with ``loc`` as text and ``time_window`` as int64 (whichever it has)."""
    out = {}
    if TIME in frame:
        out[TIME] = frame[TIME].to_numpy("int64")
    if LOC in frame:
        out[LOC] = frame[LOC].astype(str).to_numpy(object)
    out[COUNT] = frame[COUNT].to_numpy("int64")
    return pd.DataFrame(out)


def _errors(rows: pd.DataFrame, one_way: pd.DataFrame, dim: str) -> np.ndarray:
    """``one_way`` count minus the sum of ``rows`` per value of ``dim``, over the union of both (absent = 0)."""
    inside = rows.groupby(dim)[COUNT].sum()
    published = one_way.groupby(dim)[COUNT].sum()
    both = pd.concat([inside.rename("rows"), published.rename("one_way")], axis=1).fillna(0)
    return (both["one_way"] - both["rows"]).to_numpy("int64")


def _rmse(squares: list[np.ndarray]) -> float:
    values = np.concatenate(squares) if squares else np.zeros(0)
    return float(np.sqrt(values.mean())) if values.size else float("nan")


def comparison_plot(table: pd.DataFrame) -> bytes:
    """PNG: trips in listed cells, one-way RMSE and false cells per day, per design."""
    fig, axes = figure(3, (11, 3.2))
    axes[0].bar(table["design"], table["share_of_trips_in_listed_cells"], color="#1c7ed6")
    axes[0].set_ylim(0, 1)
    axes[0].set_title("trips in listed cells")
    width = 0.4
    x = np.arange(len(table))
    axes[1].bar(x - width / 2, table["rmse_time"], width, label="time", color="#d9480f")
    axes[1].bar(x + width / 2, table["rmse_loc"], width, label="loc", color="#f08c00")
    axes[1].set_xticks(x, table["design"])
    axes[1].legend()
    axes[1].set_title("one-way RMSE, all true bins")
    axes[2].bar(table["design"], table["false_cells_per_day"], color="#5f3dc4")
    axes[2].set_title("false cells per day")
    return png(fig, "Internal, not DP: the two release designs on the same data")
