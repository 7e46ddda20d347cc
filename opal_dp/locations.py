"""Where a deployment's data lives: the one catalogue of paths (Dagster-free; the ``storage`` resource wraps it).

``data_dir`` is a local path, a ``file://`` URI (the same local folder), or any fsspec URI (``s3://``, ``gs://``,
``memory://``...): the folders below are then universal-pathlib paths on that filesystem. Local folders are plain
``pathlib`` paths. The setting is kept as the string it was given, end to end, so a URI is never turned into a
relative local path.

- ``raw/``        daily raw trip files (input, private)
- ``private/``    intermediates, rejected rows, the ledger and its secret, stored draws (``releases/``), internal
                  reports (``reports/``): never published
- ``published/``  differentially private outputs only
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, field_validator
from upath import UPath

from opal_dp import settings
from opal_dp.core.ledger_backends import POSTGRES_SCHEMES

LEDGER_FILE = "ledger.sqlite"
SECRET_FILE = "secret.key"
REPORTS = "reports"


def resolve_data_dir(given: str | Path | None = None) -> str:
    """The data directory as the storage resource keeps it, resolved here only: ``given`` (``--data-dir``, a caller's
    folder), else ``$OPAL_DP_DATA_DIR``, else ``data/`` in the working directory; a URI as given, a local path made
    absolute."""
    text = str(given or os.environ.get(settings.DATA_DIR_ENV) or Path.cwd() / "data")
    return text if UPath(text).protocol else str(Path(text).absolute())


class DataLocation(BaseModel):
    """The data directory and the ledger's location (module docstring). ``ledger_url``: a ``postgresql://`` URI
    for the privacy ledger (``$OPAL_DP_LEDGER_URL``); default: the SQLite file ``private/ledger.sqlite``."""

    data_dir: str
    ledger_url: str | None = None

    @classmethod
    def resolved(cls, data_dir: str | Path | None = None) -> Self:
        """The location asked for: the data directory ``resolve_data_dir`` gives for ``data_dir``, the ledger's URL
        from ``$OPAL_DP_LEDGER_URL``."""
        return cls(data_dir=resolve_data_dir(data_dir), ledger_url=settings.ledger_url_from_env())

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

    @property
    def reports_dir(self) -> Path | UPath:
        """Internal, non-DP report files (plots)."""
        return self.private_dir / REPORTS

    @property
    def secret_file(self) -> Path | UPath:
        return self.private_dir / SECRET_FILE

    @property
    def logs_dir(self) -> Path | UPath:
        """Run logs of the command line (Dagster's event log: internal figures)."""
        return self.private_dir / "logs"

    @property
    def dagster_home(self) -> Path | UPath:
        """The command line's Dagster home when ``$DAGSTER_HOME`` is not set."""
        return self.private_dir / "dagster_home"
