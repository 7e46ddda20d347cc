"""Dagster entry point: every module under ``opal_dp/defs`` is loaded, and every asset links to its source.

The project root is the package's parent, given explicitly: an installed (non-editable) opal_dp has no
pyproject.toml above it for Dagster to find, and ``load_from_defs_folder`` needs one (with or without
``project_root``). ``load_defs`` takes the defs package and the root as they are; Dagster marks it
deprecated, and pyproject's ``dagster<1.14`` pins a version that has it.
"""

import os
import warnings
from pathlib import Path

import dagster as dg

import opal_dp.defs

EVENT_BATCH_ENV, EVENT_BATCH = "DAGSTER_EVENT_BATCH_SIZE", "1000"
"""Dagster stores the materialisations of one partitioned output together (up to this many at a time): on
PostgreSQL in one insert instead of one transaction per partition, the same release of 28,170 trips 62-67 s -> 50-51
s (``benchmarks/RESULTS.md``); SQLite stores them one by one either way. Set here, where every Dagster process of
opal_dp (the CLI, run workers, Celery workers) loads the definitions; an operator's own value, 0 included, wins."""
os.environ.setdefault(EVENT_BATCH_ENV, EVENT_BATCH)


@dg.definitions
def defs() -> dg.Definitions:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = dg.load_defs(opal_dp.defs, project_root=Path(__file__).resolve().parent.parent)
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
        executor=loaded.executor,
    )
