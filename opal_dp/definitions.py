"""Dagster entry point: every module under ``opal_dp/defs`` is loaded, and every asset links to its source.

The project root is the package's parent, given explicitly: an installed (non-editable) opal_dp has no
pyproject.toml above it for Dagster to find (``project_root`` is deprecated for Dagster 2.0, which
pyproject's ``dagster<1.14`` keeps us away from; ``path_within_project`` alone needs that pyproject.toml).
"""

import warnings
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = dg.load_from_defs_folder(project_root=Path(__file__).resolve().parent.parent)
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
