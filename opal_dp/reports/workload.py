"""A planner's workload, scored against the truth: internal, never published, not DP.

Queries, per (date, mode, tap), on the mode's public locations and districts (``time_loc_hierarchy.TapDomain``):
``mode_day``; ``district_day``, ``district_hour``; ``station_day``, ``station_hour``; ``window_station`` (15
minutes), the unknown tap-off cell a query of its own in each class below the mode's day. A release's answer is
what a reader computes from the 2016 files: each class summed from the finest file inside it (``window_station``,
``station_hour`` and ``district_hour`` from ``time-loc``, ``station_day`` and ``district_day`` from ``loc``,
``mode_day`` from ``time``), rows not published counting 0 and remainder rows left out (they name no cell).

Figures per class and tap (``Score``): ``share`` (true trips in the queries answered above 0, over all trips of the
class), ``wre`` (sum |answer - truth| / sum truth over the answered queries), ``median`` and ``p90`` (relative
error over the queries with truth >= 100, unanswered ones at error 1). Used by ``benchmarks.workload`` (several
designs on one week) and by the ``planner_workload`` asset (the release's own files on its latest week).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from opal_dp.prep.schemas import UNKNOWN_LABEL
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.schemas import OTHER_WINDOW
from opal_dp.release.marginals.tables import COUNT, LOC, TAPS, TIME, histograms_from_cells
from opal_dp.release.marginals.time_loc_hierarchy import RESOLUTIONS, TapDomain
from opal_dp.release.marginals.time_loc_tables import summed
from opal_dp.reports.unit_comparison import LARGE

CLASSES = RESOLUTIONS


def query_answers(finest: np.ndarray, dom: TapDomain) -> dict[str, np.ndarray]:
    """Every query class from finest counts."""
    return {c: summed(finest, dom, "window_station", c) for c in CLASSES}


def table_answers(tables: Mapping[str, pd.DataFrame], tap: str, dom: TapDomain) -> dict[str, np.ndarray]:
    """What a reader takes from the 2016 files of one tap (module docstring)."""
    joint, one_way, times = (tables[f"tap_{tap}_{m}"] for m in ("time_loc", "loc", "time"))
    joint = joint.loc[(joint[TIME].astype("int64") != OTHER_WINDOW) & (joint[LOC].astype(str) != OTHER)]
    out = query_answers(dom.finest_counts(joint[TIME].to_numpy("int64"), joint[LOC].astype(str).to_numpy(object),
                                          joint[COUNT].to_numpy("int64")), dom)
    labels = one_way[LOC].astype(str)
    station = np.where(labels == UNKNOWN_LABEL, len(dom.locations), pd.Index(dom.locations).get_indexer(labels))
    station_day = np.bincount(station, weights=one_way[COUNT].to_numpy("float64"),
                              minlength=len(dom.locations) + dom.unknown).astype(np.int64)
    out.update(station_day=station_day, district_day=summed(station_day, dom, "station_day", "district_day"),
               mode_day=np.array([times[COUNT].sum()], dtype=np.int64))
    return out


class Score:
    """Errors of one (method, class, tap), accumulated over trees."""

    def __init__(self) -> None:
        self.trips = self.answered = self.abs_error = 0
        self.large: list[np.ndarray] = []
        self.points: list[np.ndarray] = []  # (truth, answer) of the listed queries, for the plot

    def add(self, answer: np.ndarray, truth: np.ndarray) -> None:
        """One tree's queries of the class: a query answered above 0 is in a row of its own (or summed from them)."""
        answer, truth = np.asarray(answer, dtype=np.int64).ravel(), np.asarray(truth, dtype=np.int64).ravel()
        shown = answer > 0
        self.trips += int(truth.sum())
        self.answered += int(truth[shown].sum())
        self.abs_error += int(np.abs(answer[shown] - truth[shown]).sum())
        self.points.append(np.stack([truth[shown], answer[shown]]))
        big = truth >= LARGE
        self.large.append(np.abs(answer[big] - truth[big]) / truth[big])

    def figures(self) -> dict:
        errors = np.concatenate(self.large) if self.large else np.zeros(0)
        return {"share": self.answered / self.trips if self.trips else math.nan,
                "wre": self.abs_error / self.answered if self.answered else math.nan,
                "median": float(np.median(errors)) if errors.size else math.nan,
                "p90": float(np.quantile(errors, 0.9)) if errors.size else math.nan, "queries_100": int(errors.size)}


def true_answers(true_cells: pd.DataFrame, tap: str, dom: TapDomain) -> dict[str, np.ndarray]:
    """Every query class of one tap from a partition's stored true cells (``true_cells``: all trips, before
    bounding, so that bounding's loss counts)."""
    truth = histograms_from_cells(true_cells)[f"tap_{tap}_time_loc"]
    return query_answers(dom.finest_counts(truth[TIME].to_numpy("int64"), truth[LOC].astype(str).to_numpy(object),
                                           truth[COUNT].to_numpy("int64")), dom)


def score_partitions(parts: Iterable[tuple[str, pd.DataFrame, Mapping[str, pd.DataFrame]]],
                     domains: Mapping[tuple[str, str], TapDomain]) -> pd.DataFrame:
    """One row per (class, tap): the release's files of each (mode, true cells, released tables) partition scored
    against its truth (module docstring)."""
    scores = {(c, t): Score() for c in CLASSES for t in TAPS}
    for mode, cells, released in parts:
        for tap in TAPS:
            truth = true_answers(cells, tap, domains[mode, tap])
            for c, answer in table_answers(released, tap, domains[mode, tap]).items():
                scores[c, tap].add(answer, truth[c])
    return pd.DataFrame([{"query_class": c, "tap": t, **s.figures()} for (c, t), s in scores.items()])
