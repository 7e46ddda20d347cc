"""The internal comparisons at benchmark scale, one day in memory at a time, at the default nominal budget and
bounds: trip, card_day and card_period on the same fortnight (``opal_dp.reports.unit_comparison``), and the two
release designs under the trip unit (``opal_dp.reports.design_comparison``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from datetime import date

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import bin_trips, split_by_mode
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.ingest import ingest_file, raw_files
from opal_dp.reports.design_comparison import COMPARED, compare_designs
from opal_dp.release.marginals.tables import MARGINALS, histograms, true_cells
from opal_dp.release.marginals.plan import build_plan
from opal_dp.reports.unit_comparison import compare_units

DEFAULT_DELTA = 1 / 8_000_000
EPSILON = {m.name: m.default_epsilon for m in MARGINALS}
DELTA = {m.name: DEFAULT_DELTA for m in MARGINALS}


def run_comparison(raw_dir: Path) -> dict:
    """The comparison table as records, plus its wall time (ingest and binning included)."""
    stops = load_stops()
    files = raw_files(raw_dir)
    days = {day: (lambda path=path: bin_trips(ingest_file(path, stops).accepted, stops)) for day, path in files.items()}
    started = time.perf_counter()
    table = compare_units(days, EPSILON, DELTA, ContributionBounds(), os.urandom(32))
    seconds = time.perf_counter() - started
    print(table.to_string(index=False), file=sys.stderr)
    return {"seconds": seconds, "rows": table.to_dict(orient="records")}


def run_design_comparison(raw_dir: Path) -> dict:
    """The design comparison table as records, plus its wall time (ingest, binning and bounding included): sbh
    and public_domain on the same trips under the trip unit, both drawn in memory (nothing charged or stored)."""
    stops = load_stops()
    plans = {d: build_plan(PrivacyUnit.TRIP, EPSILON, DELTA, design=d, stops=stops) for d in COMPARED}
    key = os.urandom(32)

    def parts():
        for day, path in raw_files(raw_dir).items():
            binned = bin_trips(ingest_file(path, stops).accepted, stops)
            bounded = bound_day(binned, date.fromisoformat(day), PrivacyUnit.TRIP, ContributionBounds(), key)
            for mode in MODES:
                partition = split_by_mode(bounded.kept, mode)
                cells = true_cells(histograms(partition), split_by_mode(bounded.over_bound, mode))
                yield f"{day}|{mode}", partition, cells

    started = time.perf_counter()
    table = compare_designs(parts(), plans)
    seconds = time.perf_counter() - started
    print(table.to_string(index=False), file=sys.stderr)
    return {"seconds": seconds, "unit": PrivacyUnit.TRIP.value, "tau": plans["public_domain"].tau,
            "rows": table.to_dict(orient="records")}
