"""The one storage setting: every asset, IO manager, sensor and publisher takes its paths from here."""

from pathlib import Path

import dagster as dg

from opal_dp import settings


class OpalStorage(dg.ConfigurableResource):
    """The data directory: ``raw/`` (input), ``private/`` (intermediates, ledger, draws) and ``published/``
    (DP outputs only). Defaults to ``$OPAL_DP_DATA_DIR`` (or ``./data``), read once when the definitions load."""

    data_dir: str

    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    @property
    def raw_dir(self) -> Path:
        return self.root / "raw"

    @property
    def private_dir(self) -> Path:
        return self.root / "private"

    @property
    def published_dir(self) -> Path:
        return self.root / "published"


def default_storage() -> OpalStorage:
    return OpalStorage(data_dir=str(settings.data_dir_from_env()))
