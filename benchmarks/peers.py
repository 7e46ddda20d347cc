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

Every peer times its own read and binning too. The two row-level peers are slow, so they can run on
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

from benchmarks.floor import N_MODES, TAPS, Labels, bin_day, day_histograms
from opal_dp.release.settings import PrivacySettings
from opal_dp.release.marginals.tables import MARGINALS


@dataclass
class PeerResult:
    name: str
    seconds: float  # measured on the days it ran on
    rows: int  # rows it ran on
    days: int  # leading days it ran on
    released_bins: int

    def full_seconds(self, total_rows: int, total_days: int) -> float:
        """Seconds for the whole fortnight: measured, or extrapolated along ``EXTRAPOLATE_BY``."""
        if self.days == total_days:
            return self.seconds
        if EXTRAPOLATE_BY[self.name] == "rows":
            return self.seconds * total_rows / self.rows
        return self.seconds * total_days / self.days


def _timed(name: str, files: list[Path], release_day: Callable[..., int]) -> PeerResult:
    started = time.perf_counter()
    labels = Labels.load()
    rows = released = 0
    for path in files:
        day = bin_day(path, labels)
        rows += day.rows
        released += release_day(day, labels)
    return PeerResult(name, time.perf_counter() - started, rows, len(files), released)


def opendp_threshold(files: list[Path]) -> PeerResult:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    ours = PrivacySettings().plan().mechanisms
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

    def release_day(day, labels: Labels) -> int:
        released = 0
        for name, counts in day_histograms(day, labels.count).items():
            for mode in range(N_MODES):
                present = np.flatnonzero(counts[mode])
                released += len(measurements[name](dict(zip(present.tolist(), counts[mode, present].tolist()))))
        return released

    return _timed("opendp_threshold", files, release_day)


def opendp_polars(files: list[Path]) -> PeerResult:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    budget = PrivacySettings()
    epsilon, delta = budget.nominal
    weights = [budget.epsilon[m.name] for m in MARGINALS]

    def release_day(day, labels: Labels) -> int:
        released = 0
        for mode in range(N_MODES):
            rows = day.mode == mode
            frame = pl.DataFrame({f"{tap}_{what}": getattr(day, attr)[tap][rows].astype(np.int32)
                                  for tap in TAPS for what, attr in (("window", "window"), ("loc", "loc"))})
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
                released += query.release().collect().height
        return released

    return _timed("opendp_polars", files, release_day)


def pipelinedp(files: list[Path]) -> PeerResult:
    import pipeline_dp

    budget = PrivacySettings()
    epsilon, delta = budget.nominal
    params = {
        m.name: pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            metrics=[pipeline_dp.Metrics.PRIVACY_ID_COUNT],
            max_partitions_contributed=1,
            max_contributions_per_partition=1,
            partition_selection_strategy=pipeline_dp.PartitionSelectionStrategy.LAPLACE_THRESHOLDING,
            post_aggregation_thresholding=True,
            budget_weight=budget.epsilon[m.name],
        )
        for m in MARGINALS
    }
    extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda row: row[0],
                                            partition_extractor=lambda row: row[1],
                                            value_extractor=lambda row: 0)

    def release_day(day, labels: Labels) -> int:
        released = 0
        for mode in range(N_MODES):
            rows = day.mode == mode
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=delta)
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            outputs = []
            for m in MARGINALS:
                window = day.window[m.tap][rows] if m.by_time else 0
                loc = day.loc[m.tap][rows] if m.by_loc else 0
                key = np.broadcast_to(window * labels.count + loc, rows.sum())
                outputs.append(engine.aggregate(list(enumerate(key.tolist())), params[m.name], extractors))
            accountant.compute_budgets()
            released += sum(len(list(out)) for out in outputs)  # the local backend is lazy
        return released

    return _timed("pipelinedp", files, release_day)


PEERS = {"opendp_threshold": opendp_threshold, "opendp_polars": opendp_polars, "pipelinedp": pipelinedp}
# The slow, row-level peers (subsampled to leading days) and what their cost grows with.
EXTRAPOLATE_BY = {"opendp_polars": "partitions", "pipelinedp": "rows"}
