"""Where data lives, decided once.

One setting, ``OPAL_DP_DATA_DIR`` (default: ``data/`` in the working directory), read by ``data_dir_from_env``
when the Dagster definitions or the command line start; from then on every asset, IO manager, sensor and
publisher takes its paths from the ``storage`` resource (``opal_dp.defs.storage``):

- ``raw/``       daily raw trip files (input, private)
- ``private/``   intermediates, rejected rows, the privacy ledger and its secret, stored draws (never published)
- ``published/`` differentially private outputs only

Reference data (the public stop list) ships inside the package (``opal_dp/reference/``; ``data/reference`` in
the repository points there), so an installed opal_dp finds it without a checkout.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

DATA_DIR_ENV = "OPAL_DP_DATA_DIR"


def data_dir_from_env() -> Path:
    """``$OPAL_DP_DATA_DIR``, else ``./data``, as an absolute path."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.cwd() / "data").absolute()


def reference_dir() -> Path:
    return Path(str(files("opal_dp") / "reference"))
