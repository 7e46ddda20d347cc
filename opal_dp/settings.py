"""Where data lives. One setting, ``OPAL_DP_DATA_DIR`` (default: the repository's ``data/``).

- ``raw/``       daily raw trip files (input, private)
- ``private/``   intermediates, rejected rows, the privacy ledger, stored releases (never published)
- ``published/`` differentially private outputs only
Reference data (the public stop list) is always read from the repository's ``data/reference/``.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "OPAL_DP_DATA_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or REPO_ROOT / "data")


def raw_dir() -> Path:
    return data_dir() / "raw"


def private_dir() -> Path:
    return data_dir() / "private"


def published_dir() -> Path:
    return data_dir() / "published"


def reference_dir() -> Path:
    return REPO_ROOT / "data" / "reference"
