"""Resources: the private Parquet store, the public reference network, the privacy budget, and the processes for
per-day work."""


from functools import lru_cache
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import private_parquet
from opal_dp.defs.shared.storage import default_storage
from opal_dp.network import load_stops


@lru_cache(maxsize=4)
def _stops(path: str | None) -> pd.DataFrame:
    return load_stops(Path(path) if path else None)


class ReferenceNetwork(dg.ConfigurableResource):
    """The public stop list (stop_id, mode, name, postcode): fixes the location domain."""

    path: str | None = None  # default: the stop list shipped in opal_dp/reference/stops.csv

    def stops(self) -> pd.DataFrame:
        return _stops(self.path)


class PerDayWorkers(dg.ConfigurableResource):
    """Processes for a step's per-day work (``opal_dp.parallel``): ``count`` as a run's configuration gives it (the
    command line's ``--workers``); unset, as in a run from the UI or the daemon, ``$OPAL_DP_WORKERS`` or the CPUs."""

    count: int | None = None


@dg.definitions
def resources() -> dg.Definitions:
    storage = default_storage()  # $OPAL_DP_DATA_DIR, read once here
    return dg.Definitions(
        resources={
            "storage": storage,
            "private_parquet": private_parquet,
            "reference": ReferenceNetwork(),
            "privacy_budget": PrivacyBudget(),
            "workers": PerDayWorkers(),
        }
    )
