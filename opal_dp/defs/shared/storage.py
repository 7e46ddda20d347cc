"""The one storage setting: every asset, IO manager, sensor and publisher takes its paths from here."""

import dagster as dg

from opal_dp.locations import DataLocation


class OpalStorage(dg.ConfigurableResource, DataLocation):
    """The data directory: ``raw/`` (input), ``private/`` (intermediates, ledger, draws) and ``published/``
    (DP outputs only), a local path or any fsspec URI (``opal_dp.locations``). Defaults to ``$OPAL_DP_DATA_DIR``
    (or ``./data``), read once when the definitions load. ``ledger_url``: a ``postgresql://`` URI for the privacy
    ledger (``$OPAL_DP_LEDGER_URL``); default: the SQLite file ``private/ledger.sqlite``."""


def default_storage() -> OpalStorage:
    return OpalStorage.resolved()
