"""Dagster entry point: every module under ``opal_dp/defs`` is loaded, and every asset links to its source."""

import warnings
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    loaded = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # code references are beta in 1.13
        assets = dg.with_source_code_references(list(loaded.assets or []))
    return dg.Definitions(
        assets=assets,
        asset_checks=loaded.asset_checks,
        jobs=loaded.jobs,
        schedules=loaded.schedules,
        sensors=loaded.sensors,
        resources=loaded.resources,
        loggers=loaded.loggers,
    )
