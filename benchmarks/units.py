"""The internal unit comparison at benchmark scale: trip, card_day and card_period on the same fortnight, at the
default nominal budget and bounds (``opal_dp.release.unit_comparison``), one day in memory at a time."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from opal_dp.core import ContributionBounds
from opal_dp.network import load_stops
from opal_dp.prep.binning import bin_trips
from opal_dp.prep.ingest import ingest_file, raw_files
from opal_dp.release.marginals import MARGINALS
from opal_dp.release.unit_comparison import compare_units

DEFAULT_DELTA = 1 / 8_000_000


def run_comparison(raw_dir: Path) -> dict:
    """The comparison table as records, plus its wall time (ingest and binning included)."""
    stops = load_stops()
    files = raw_files(raw_dir)
    days = {day: (lambda path=path: bin_trips(ingest_file(path, stops).accepted, stops)) for day, path in files.items()}
    started = time.perf_counter()
    table = compare_units(days, {m.name: m.default_epsilon for m in MARGINALS},
                          {m.name: DEFAULT_DELTA for m in MARGINALS}, ContributionBounds(), os.urandom(32))
    seconds = time.perf_counter() - started
    print(table.to_string(index=False), file=sys.stderr)
    return {"seconds": seconds, "rows": table.to_dict(orient="records")}
