"""The same release with peer libraries, from the same Parquet files and the floor's binning.

- ``opendp_threshold``: OpenDP 0.16 ``make_laplace_threshold`` on pre-aggregated counts (replace-one
  space ``l01inf_distance``, ``d_in = (2, 2, 1)``, scale ``2/eps``, threshold = our integer
  threshold; its privacy map is checked against each marginal's (eps, delta)). The counts come from
  the floor's numpy aggregation, one measurement call per (date, mode) partition and marginal.
- ``opendp_polars``: OpenDP's Polars front end from rows, one ``Context`` per partition (replace-one
  ``unit_of(changes=1)``, total (8, 6/8e6) split by weights 1,1,1,1,2,2), six ``group_by(...).agg(dp.len())``
  queries; OpenDP picks the thresholds itself.
- ``pipelinedp``: PipelineDP's local backend, one trip per privacy id, ``PRIVACY_ID_COUNT`` with
  Laplace thresholding after aggregation (PipelineDP only offers add/remove neighbours); float output.

Every peer times its own read and binning too, and returns what it released: per marginal, one table of
(date, mode, bin, count) rows with bins in the floor's canonical order (``benchmarks.floor.bin_of``), so
a test can hold each peer's output against the true counts. The two row-level peers are slow, so they can run on
the leading days of the fortnight only and are then extrapolated: PipelineDP linearly in rows (its
cost is per row), OpenDP's Polars front end linearly in partitions (its cost is per query, about
the same on 20 k and 500 k rows: the threshold search, not the data, dominates).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.floor import N_MODES, TAPS, TRIP_RELEASE, BinnedDay, Labels, bin_day, bin_of, day_histograms
from opal_dp.release.marginals.tables import MARGINALS


COLUMNS = ["date", "mode", "bin", "count"]
# One day's release of a peer: per marginal, (mode, bins, counts) triples.
Released = dict[str, list[tuple[int, np.ndarray, np.ndarray]]]


@dataclass
class PeerResult:
    name: str
    seconds: float  # measured on the days it ran on
    rows: int  # rows it ran on
    days: int  # leading days it ran on
    tables: dict[str, pd.DataFrame]  # per marginal: the released (date, mode, bin, count) rows

    @property
    def released_bins(self) -> int:
        return sum(len(table) for table in self.tables.values())

    def full_seconds(self, total_rows: int, total_days: int) -> float:
        """Seconds for the whole fortnight: measured, or extrapolated along ``EXTRAPOLATE_BY``."""
        if self.days == total_days:
            return self.seconds
        if EXTRAPOLATE_BY[self.name] == "rows":
            return self.seconds * total_rows / self.rows
        return self.seconds * total_days / self.days


def _timed(name: str, files: list[Path], release_day: Callable[[BinnedDay, Labels], Released]) -> PeerResult:
    started = time.perf_counter()
    labels = Labels.load()
    rows = 0
    parts: dict[str, list[pd.DataFrame]] = {m.name: [] for m in MARGINALS}
    for path in files:
        day = bin_day(path, labels)
        rows += day.rows
        for marginal, released in release_day(day, labels).items():
            parts[marginal] += [pd.DataFrame({"date": day.date, "mode": mode, "bin": bins, "count": counts},
                                             columns=COLUMNS) for mode, bins, counts in released]
    seconds = time.perf_counter() - started
    tables = {m: pd.concat(p, ignore_index=True) if p else pd.DataFrame(columns=COLUMNS) for m, p in parts.items()}
    return PeerResult(name, seconds, rows, len(files), tables)


def _arrays(released: dict) -> tuple[np.ndarray, np.ndarray]:
    """A peer's {bin: count} as (bins, counts) arrays."""
    return np.fromiter(released.keys(), np.int64, len(released)), np.fromiter(released.values(), float, len(released))


def opendp_threshold(files: list[Path]) -> PeerResult:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    ours = TRIP_RELEASE.plan().mechanisms
    space = (dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64)),
             dp.l01inf_distance(dp.absolute_distance(T=dp.i64)))
    measurements = {}
    for name, mechanism in ours.items():
        m = dp.m.make_laplace_threshold(*space, scale=mechanism.scale, threshold=mechanism.min_released_count)
        sens = mechanism.sensitivity
        epsilon, delta = m.map((sens.l0, sens.l1, sens.linf))
        if epsilon > mechanism.epsilon * (1 + 1e-9) or delta > mechanism.delta:
            raise ValueError(f"OpenDP's map gives ({epsilon}, {delta}) for {name}, "
                             f"above ({mechanism.epsilon}, {mechanism.delta})")
        measurements[name] = m

    def release_day(day: BinnedDay, labels: Labels) -> Released:
        released: Released = {}
        for name, counts in day_histograms(day, labels.count).items():
            for mode in range(N_MODES):
                present = np.flatnonzero(counts[mode])
                noisy = measurements[name](dict(zip(present.tolist(), counts[mode, present].tolist())))
                released.setdefault(name, []).append((mode, *_arrays(noisy)))
        return released

    return _timed("opendp_threshold", files, release_day)


def opendp_polars(files: list[Path]) -> PeerResult:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    epsilon, delta = TRIP_RELEASE.nominal
    weights = [TRIP_RELEASE.budget()[0][m.name] for m in MARGINALS]

    def release_day(day: BinnedDay, labels: Labels) -> Released:
        released: Released = {}
        for mode in range(N_MODES):
            rows = day.mode == mode
            if not rows.any():  # no trips of the mode that day: no query (every mode has trips on the benchmark's days)
                continue
            frame = pl.DataFrame({f"{tap}_{what}": getattr(day, what)[tap][rows].astype(np.int32)
                                  for tap in TAPS for what in ("window", "loc")})
            context = dp.Context.compositor(
                data=frame.lazy(),
                privacy_unit=dp.unit_of(changes=1),
                privacy_loss=dp.loss_of(epsilon=epsilon, delta=delta),
                split_by_weights=weights,
                margins=[dp.polars.Margin(by=[], max_length=10**9)],
            )
            for m in MARGINALS:
                by = [f"{m.tap}_{what}" for what, used in (("window", m.by_time), ("loc", m.by_loc)) if used]
                query = context.query().group_by(by).agg(dp.len(signed=True))  # signed: the coming default
                table = query.release().collect()
                columns = {what: table[f"{m.tap}_{what}"].to_numpy() if f"{m.tap}_{what}" in table.columns else 0
                           for what in ("window", "loc")}
                bins = bin_of(m, columns["window"], columns["loc"], labels.count)
                released.setdefault(m.name, []).append((mode, np.asarray(bins), table["len"].to_numpy()))
        return released

    return _timed("opendp_polars", files, release_day)


def pipelinedp(files: list[Path]) -> PeerResult:
    import pipeline_dp

    epsilon, delta = TRIP_RELEASE.nominal
    per_marginal = TRIP_RELEASE.budget()[0]
    params = {
        m.name: pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            metrics=[pipeline_dp.Metrics.PRIVACY_ID_COUNT],
            max_partitions_contributed=1,
            max_contributions_per_partition=1,
            partition_selection_strategy=pipeline_dp.PartitionSelectionStrategy.LAPLACE_THRESHOLDING,
            post_aggregation_thresholding=True,
            budget_weight=per_marginal[m.name],
        )
        for m in MARGINALS
    }
    extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda row: row[0],
                                            partition_extractor=lambda row: row[1],
                                            value_extractor=lambda row: 0)

    def release_day(day: BinnedDay, labels: Labels) -> Released:
        released: Released = {}
        for mode in range(N_MODES):
            rows = day.mode == mode
            if not rows.any():  # as for OpenDP's Polars front end (PipelineDP refuses an empty input)
                continue
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=delta)
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            outputs = {}
            for m in MARGINALS:
                key = bin_of(m, day.window[m.tap][rows], day.loc[m.tap][rows], labels.count)
                outputs[m.name] = engine.aggregate(list(enumerate(key.tolist())), params[m.name], extractors)
            accountant.compute_budgets()
            for name, out in outputs.items():  # the local backend is lazy: the release happens here
                noisy = {key: metrics.privacy_id_count for key, metrics in out}
                released.setdefault(name, []).append((mode, *_arrays(noisy)))
        return released

    return _timed("pipelinedp", files, release_day)


PEERS = {"opendp_threshold": opendp_threshold, "opendp_polars": opendp_polars, "pipelinedp": pipelinedp}
# The slow, row-level peers (subsampled to leading days) and what their cost grows with.
EXTRAPOLATE_BY = {"opendp_polars": "partitions", "pipelinedp": "rows"}
