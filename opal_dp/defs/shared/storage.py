"""The one storage setting: every asset, IO manager, sensor and publisher takes its paths from here."""

from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg
from pydantic import field_validator
from upath import UPath

from opal_dp import settings
from opal_dp.core.ledger_backends import POSTGRES_SCHEMES

LEDGER_FILE = "ledger.sqlite"


class OpalStorage(dg.ConfigurableResource):
    """The data directory: ``raw/`` (input), ``private/`` (intermediates, ledger, draws) and ``published/``
    (DP outputs only). Defaults to ``$OPAL_DP_DATA_DIR`` (or ``./data``), read once when the definitions load.
    ``data_dir`` is a local path, a ``file://`` URI (the same local folder), or any fsspec URI (``s3://``,
    ``gs://``, ``memory://``...): the paths below are then universal-pathlib paths on that filesystem. Local
    folders are plain ``pathlib`` paths, so nothing changes for local users; what stores release draws
    (``opal_dp.private_files``) works on any of them.
    ``ledger_url``: a ``postgresql://`` URI for the privacy ledger (``$OPAL_DP_LEDGER_URL``); default: the
    SQLite file ``private/ledger.sqlite``."""

    data_dir: str
    ledger_url: str | None = None

    @field_validator("ledger_url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        if url is not None and urlsplit(url).scheme not in POSTGRES_SCHEMES:
            raise ValueError(f"ledger_url must be a postgresql:// URI, got scheme {urlsplit(url).scheme!r}")
        return url

    @property
    def ledger_location(self) -> str | Path:
        return self.ledger_url or self.private_dir / LEDGER_FILE

    @property
    def root(self) -> Path | UPath:
        path = UPath(self.data_dir)
        if not path.protocol:
            return Path(self.data_dir)
        return Path(path.path) if path.protocol in ("file", "local") else path

    @property
    def raw_dir(self) -> Path | UPath:
        return self.root / "raw"

    @property
    def private_dir(self) -> Path | UPath:
        return self.root / "private"

    @property
    def published_dir(self) -> Path | UPath:
        return self.root / "published"


def default_storage() -> OpalStorage:
    return OpalStorage(data_dir=str(settings.data_dir_from_env()), ledger_url=settings.ledger_url_from_env())
