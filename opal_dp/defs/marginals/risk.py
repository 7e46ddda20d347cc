"""Internal disclosure-risk report (never published): the 2017 assessment's attacks run on our own release."""

import json

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import labels
from opal_dp.defs.shared.partitions import date_and_mode
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.resources import PerDayWorkers
from opal_dp.parallel import map_calls
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.reports.partition_rows import PartitionRows, version_of
from opal_dp.reports.attacks import (
    AUTO_TAP_OFF_MODES,
    any_marginal,
    DIFFERENCING_COLUMNS,
    combined_residuals,
    day_differencing,
    duplicated_pairs,
    duplication_effect,
    pair_noise_bound,
    pair_noise_rms,
    presence_probability,
)

WORST = 20  # rows shown in the metadata tables
PAIR_WINDOW_DAYS = 28  # the duplicated-pairs attack looks at the last four weeks of published dates
PAIR_FALSE_ALARM = 1e-3


def _table(frame: pd.DataFrame) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.head(WORST).to_markdown(index=False) if len(frame) else "none")


@dg.asset(
    group_name="report",
    ins={m.name: dg.AssetIn(key=dg.AssetKey(["release", m.name])) for m in MARGINALS},
    description="Internal: the differencing (§4.1, every released day; a day's rows kept until its release "
                "changes), duplicated-measurement (§2, the last 28 published dates) and presence (§3) attacks of the "
                "2017 assessment, run on the released marginals; figures as metadata only, never published.",
    **labels("internal"),
)
def disclosure_risk(
    context: dg.AssetExecutionContext, privacy_budget: PrivacyBudget, storage: OpalStorage, workers: PerDayWorkers,
    **released: PartitionFrames,
) -> dg.MaterializeResult:
    """What an outsider can compute from our released counts and public parameters, under either design: the
    public-domain design's one-way tables are sums of its joint with the remainder rows, so its differencing
    residual is 0 by construction (measured here), and its presence figure is the chance that a cell is listed
    at all, zeros included (``DomainMeasurement.release_probability``)."""
    mechanisms = privacy_budget.plan().mechanisms
    keys = materialised(*released.values())
    by_day: dict[str, list[str]] = {}
    for key in keys:
        by_day.setdefault(date_and_mode(key)[0], []).append(key)

    def load(chosen: list[str]) -> dict[str, dict[str, pd.DataFrame]]:
        return {name: {key: frames[key] for key in chosen} for name, frames in released.items()}

    # Differencing involves one partition at a time: a day's summary is kept between runs (computed again only when
    # its release files change), so a weekly report computes the new days. The pairs attack needs several dates:
    # it covers the last PAIR_WINDOW_DAYS published dates of two small modes, and says which.
    settings = json.dumps({name: m.describe() for name, m in sorted(mechanisms.items())}, sort_keys=True, default=str)
    kept = PartitionRows(storage.reports_dir / "differencing_rows.json")
    files = {day: {name: {key: frames.path(key) for key in chosen} for name, frames in released.items()}
             for day, chosen in sorted(by_day.items())}
    by_day_rows = kept.rows_of(
        {day: f"summary|{settings}" + version_of(files[day][name][k] for k in chosen for name in released)
         for day, chosen in sorted(by_day.items())},
        lambda stale: ([summary] for summary in map_calls(day_differencing, [(files[d], mechanisms, WORST)
                                                                             for d in stale], workers.count)))
    days = [rows[0] for rows in by_day_rows.values()]
    kept.save()
    residuals = combined_residuals(pd.DataFrame.from_records(d["shown"], columns=DIFFERENCING_COLUMNS) for d in days)
    flagged = residuals.loc[residuals["residual"] >= residuals["threshold"]]
    window = sorted(by_day)[-PAIR_WINDOW_DAYS:]
    pairs = duplicated_pairs(load([k for d in window for k in by_day[d] if date_and_mode(k)[1] in AUTO_TAP_OFF_MODES]),
                             mechanisms, false_alarm=PAIR_FALSE_ALARM)
    effect = duplication_effect(mechanisms)
    presence = presence_probability(mechanisms)
    if len(flagged):
        context.log.warning(f"differencing exposes suppressed mass in {len(flagged)} one-way bins")
    if len(pairs):
        context.log.warning(f"{len(pairs)} duplicated tap-on/tap-off cell pairs found (Manly-ferry effect)")

    return dg.MaterializeResult(
        metadata={
            "release_design": privacy_budget.release_design,
            "partitions": len(keys),
            "differencing_bins_checked": sum(day["checked"] for day in days),
            "differencing_exposed_bins": sum(d["exposed"] for d in days),
            "differencing_max_residual": int(residuals["residual"].max()) if len(residuals) else 0,
            "differencing_worst": _table(flagged),
            "duplicated_pairs": len(pairs),
            "duplicated_pair_noise_bound": pair_noise_bound(mechanisms, PAIR_FALSE_ALARM),
            "duplicated_pair_noise_rms": pair_noise_rms(mechanisms),
            "duplicated_pair_modes_searched": ", ".join(AUTO_TAP_OFF_MODES),
            "duplicated_pair_window": f"{window[0]}..{window[-1]} ({len(window)} dates)" if window else "none",
            "differencing_days_computed": len(kept.computed),
            "duplicated_pairs_table": _table(pairs),
            **{f"duplication_{key}": value for key, value in effect.items()},
            "duplication_explained": dg.MetadataValue.md(
                f"A trip in a duplicated pair is counted by two cells holding the same count: the loss on that count "
                f"({effect['loss_measure']}) is {effect['loss_share_tap_on_cell']:g} + "
                f"{effect['loss_share_tap_off_cell']:g} = {effect['loss_on_duplicated_count']:g}, not the "
                f"{effect['loss_share_tap_on_cell']:g} one cell suggests. The stated per-scope guarantee already "
                f"composes all six marginals, so it is not exceeded; but averaging the two views shrinks the noise "
                f"standard deviation on that count from {effect['noise_std_one_view']:.3f} to "
                f"{effect['noise_std_pair_average']:.3f} (÷{effect['noise_std_reduction']:.3f})."
            ),
            **{f"presence_probability_{name}": p for name, p in presence.items()},
            "presence_probability_any_marginal": any_marginal(presence),
        }
    )
