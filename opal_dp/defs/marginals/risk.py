"""Internal disclosure-risk report (never published): the 2017 assessment's attacks run on our own release."""

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.automation import ROLLUP
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames, materialised
from opal_dp.defs.shared.metadata import labels
from opal_dp.defs.shared.partitions import date_and_mode
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.reports.attacks import (
    AUTO_TAP_OFF_MODES,
    any_marginal,
    differencing_in_chunks,
    duplicated_pairs,
    duplication_effect,
    pair_noise_bound,
    pair_noise_rms,
    presence_probability,
)

WORST = 20  # rows shown in the metadata tables
PAIR_FALSE_ALARM = 1e-3


def _table(frame: pd.DataFrame) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.head(WORST).to_markdown(index=False) if len(frame) else "none")


@dg.asset(
    group_name="report",
    ins={m.name: dg.AssetIn(key=dg.AssetKey(["release", m.name])) for m in MARGINALS},
    description="Internal: the differencing (§4.1), duplicated-measurement (§2) and presence (§3) attacks of the "
                "2017 assessment, run on the released marginals; figures as metadata only, never published.",
    automation_condition=ROLLUP,
    **labels("internal"),
)
def disclosure_risk(
    context: dg.AssetExecutionContext, privacy_budget: PrivacyBudget, **released: PartitionFrames
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

    # A day's partitions in memory at a time; the pairs attack needs every date, but of two small modes only.
    residuals = differencing_in_chunks(map(load, by_day.values()), mechanisms)
    flagged = residuals.loc[residuals["residual"] >= residuals["threshold"]]
    pairs = duplicated_pairs(load([k for k in keys if date_and_mode(k)[1] in AUTO_TAP_OFF_MODES]), mechanisms,
                             false_alarm=PAIR_FALSE_ALARM)
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
            "differencing_bins_checked": len(residuals),
            "differencing_exposed_bins": len(flagged),
            "differencing_max_residual": int(residuals["residual"].max()) if len(residuals) else 0,
            "differencing_worst": _table(flagged),
            "duplicated_pairs": len(pairs),
            "duplicated_pair_noise_bound": pair_noise_bound(mechanisms, PAIR_FALSE_ALARM),
            "duplicated_pair_noise_rms": pair_noise_rms(mechanisms),
            "duplicated_pair_modes_searched": ", ".join(AUTO_TAP_OFF_MODES),
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
