"""Internal reports (never published): utility of the release measured against the truth."""

import base64

import dagster as dg
import pandas as pd

from opal_dp.defs.marginals.release import RELEASE_KEYS, TRUE_CELLS
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import column_schema, labels
from opal_dp.defs.shared.partitions import date_and_mode
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.parallel import map_calls
from opal_dp.permissions import make_dirs, reserve_private
from opal_dp.reports.design_comparison import COMPARED, compare_designs
from opal_dp.reports.design_comparison import comparison_plot as design_plot
from opal_dp.release.marginals.tables import MARGINALS, histograms_from_cells
from opal_dp.release.marginals.schemas import DesignComparison
from opal_dp.release.marginals.schemas import UnitComparison, UtilitySummary, WorkloadScores
from opal_dp.release.marginals.time_loc_hierarchy import time_loc_domains
from opal_dp.release.periods import week_of
from opal_dp.reports.unit_comparison import comparison_plot, compare_units
from opal_dp.reports.partition_rows import PartitionRows, version_of
from opal_dp.reports.utility import busiest_location_plot, summarise, utility_rows
from opal_dp.reports.workload import score_partitions

PLOTTED = "tap_on_time_loc"


def _internal_report(schema, description: str):
    """A private report on the true cells and the six released marginals of every (date, mode) piece."""
    return dg.asset(group_name="report", io_manager_key="private_parquet", metadata=column_schema(schema),
                    ins={TRUE_CELLS: dg.AssetIn(), **{name: dg.AssetIn(key=key) for name, key in RELEASE_KEYS.items()}},
                    description=description, **labels("internal", "parquet"))


@_internal_report(UtilitySummary, "Internal, NOT differentially private: suppression and relative error of the "
                  "release measured against the true counts, and a plot of true vs released counts. Never published.")
def utility_report(true_cells: PartitionFrames, storage: OpalStorage, workers: PerDayWorkers,
                   **released: PartitionFrames) -> dg.Output[pd.DataFrame]:
    """Share of bins/trips suppressed and mean relative error per marginal and mode, over the partitions released
    so far, plus a plot of true vs released counts at the busiest location. Private: compares with true counts.
    A partition's figures are kept between runs until its files change (``reports.partition_rows``): a weekly
    report computes the new partitions only."""
    keys = materialised(true_cells, *released.values())
    kept = PartitionRows(storage.reports_dir / "utility_rows.json")
    files = {key: (true_cells.path(key), {m.name: released[m.name].path(key) for m in MARGINALS}) for key in keys}
    by_key = kept.rows_of({key: version_of([cells, *tables.values()]) for key, (cells, tables) in files.items()},
                          lambda stale: map_calls(utility_rows, [(*files[k], date_and_mode(k)[1]) for k in stale],
                                                  workers.count))
    rows = [row for key in keys for row in by_key[key]]
    kept.save()
    summary = UtilitySummary.validate(summarise(rows))
    plot = None
    for key in (k for k in keys if date_and_mode(k)[1] == "train"):  # the first train day with a released cell
        frame = released[PLOTTED][key]
        if len(frame):
            truth = histograms_from_cells(true_cells[key])[PLOTTED]
            plot = busiest_location_plot(truth, frame, f"{date_and_mode(key)[0]} train tap-on")
            break
    metadata = {"summary": dg.MetadataValue.md(summary.to_markdown(index=False, floatfmt=".4f")),
                "partitions_computed": len(kept.computed)}
    if plot is not None:
        path = storage.reports_dir / "busiest_location.png"
        make_dirs(path.parent)
        reserve_private(path).write_bytes(plot)
        metadata["plot"] = dg.MetadataValue.md(f"![true vs released](data:image/png;base64,{base64.b64encode(plot).decode()})")
        metadata["plot_path"] = dg.MetadataValue.path(str(path))
    return dg.Output(summary, metadata=metadata)


@_internal_report(WorkloadScores, "Internal, NOT differentially private: a planner's queries (mode, district and "
                  "station by day and hour, 15-minute x station) answered from the latest released week's files as a "
                  "reader answers them, scored against the true counts before bounding. Never published.")
def planner_workload(true_cells: PartitionFrames, reference: ReferenceNetwork,
                     **released: PartitionFrames) -> dg.Output[pd.DataFrame]:
    """Per query class and tap, the share of trips answered and the errors (``reports.workload``) of the latest
    calendar week with released (date, mode) pieces: a fixed cost whatever the number of weeks released."""
    keys = materialised(true_cells, *released.values())
    if not keys:
        raise dg.Failure(description="no released week to score: materialise the release first")
    latest = max(week_of(date_and_mode(k)[0]) for k in keys)
    keys = [k for k in keys if week_of(date_and_mode(k)[0]) == latest]
    parts = ((date_and_mode(k)[1], true_cells[k], {name: frames[k] for name, frames in released.items()})
             for k in keys)
    table = WorkloadScores.validate(score_partitions(parts, time_loc_domains(reference.stops())))
    return dg.Output(table, metadata={
        "scores (internal, not DP)": dg.MetadataValue.md(table.to_markdown(index=False, floatfmt=".4f")),
        "week": latest, "partitions": len(keys)})


@dg.asset(
    group_name="report",
    io_manager_key="private_parquet",
    metadata=column_schema(UnitComparison),
    description="Internal, NOT differentially private: the three privacy units on the same data at the same "
                "nominal budget (trips in released cells, released cells, relative error of cells >= 100, "
                "suppressed mass). Never published.",
    **labels("internal", "parquet"),
)
def unit_comparison(
    binned_trips: PartitionFrames, privacy_budget: PrivacyBudget, storage: OpalStorage
) -> dg.Output[pd.DataFrame]:
    """Run trip, card_day and card_period on the same binned trips, drawing noise once per cell (not charged:
    nothing here is released)."""
    days = {day: (lambda day=day: binned_trips[day]) for day in binned_trips if day in binned_trips}
    table = UnitComparison.validate(compare_units(days, *privacy_budget.budget(),
                                                  privacy_budget.bounds, privacy_budget.key(storage, "bounding")))
    plot = comparison_plot(table)
    return dg.Output(table, metadata={
        "comparison (internal, not DP)": dg.MetadataValue.md(table.to_markdown(index=False, floatfmt=".4f")),
        "plot": dg.MetadataValue.md(f"![units](data:image/png;base64,{base64.b64encode(plot).decode()})"),
        "days": len(days),
    })


@dg.asset(
    group_name="report",
    io_manager_key="private_parquet",
    ins={"trip_partitions": dg.AssetIn(), TRUE_CELLS: dg.AssetIn()},
    metadata=column_schema(DesignComparison),
    description="Internal, NOT differentially private: the sbh and public_domain release designs on the same "
                "bounded trips, unit and budget (trips in listed cells, relative error of cells >= 100, one-way "
                "RMSE, false cells per day, differencing residual, presence risk). Both designs are drawn in "
                "memory: nothing is stored, published or charged to the privacy ledger. Never published.",
    **labels("internal", "parquet"),
)
def design_comparison(
    trip_partitions: PartitionFrames, true_cells: PartitionFrames, privacy_budget: PrivacyBudget,
    reference: ReferenceNetwork,
) -> dg.Output[pd.DataFrame]:
    """Release every materialised partition under both designs in memory and compare with its true cells (not
    charged: nothing here is released)."""
    stops = reference.stops()
    plans = {design: privacy_budget.plan(stops, design) for design in COMPARED}
    keys = materialised(trip_partitions, true_cells)
    parts = ((key, trip_partitions[key], true_cells[key]) for key in keys)
    table = DesignComparison.validate(compare_designs(parts, plans))
    plot = design_plot(table)
    return dg.Output(table, metadata={
        "comparison (internal, not DP)": dg.MetadataValue.md(table.to_markdown(index=False, floatfmt=".4g")),
        "plot": dg.MetadataValue.md(f"![designs](data:image/png;base64,{base64.b64encode(plot).decode()})"),
        "partitions": len(keys),
        "privacy_unit": privacy_budget.unit.value,
        "tau": plans["public_domain"].tau,
    })
