"""Service days whose raw file could not be used, with the reason: recorded by ingest, read by the roll-up (which
lists them as pending) and by the command line's summary. One private file per day (``private/failed_days/``), so
ingest runs of different days never write the same file; a day's record is removed when it ingests.

A reason names the file and the column or line at fault, never a raw value (``opal_dp.prep.ingest``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from opal_dp.permissions import make_dirs, reserve_private

FOLDER = "failed_days"


def record_failure(private_dir: Path, day: str, reason: str) -> None:
    folder = make_dirs(Path(private_dir) / FOLDER)
    tmp = reserve_private(folder / f".{day}.json.tmp")
    tmp.write_text(json.dumps({"date": day, "reason": reason}), encoding="utf-8")
    os.replace(tmp, folder / f"{day}.json")


def clear_failure(private_dir: Path, day: str) -> None:
    (Path(private_dir) / FOLDER / f"{day}.json").unlink(missing_ok=True)


def failed_days(private_dir: Path) -> dict[str, str]:
    """Service date -> why its raw file could not be used, for every day whose last ingest failed."""
    folder = Path(private_dir) / FOLDER
    records = (json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json")))
    return {r["date"]: r["reason"] for r in records}
