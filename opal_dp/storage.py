"""Atomic file writes: a reader (or a crash) never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write next to ``path``, fsync, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.to_parquet(tmp, index=False)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
