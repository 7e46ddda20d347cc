"""How much of the travel each published file covers: the share of the period's trips in its published rows.

Computed from published DP figures only (post-processing): the numerator is the sum of a file's published counts
(``page.summary``'s ``covered`` part), the denominator the measured daily totals of ``totals.csv`` over the same
dates (tap-on and tap-off for the files that count both, tap-on for ``od.csv``'s trips). Without ``totals.csv``
(the trip-level release) no unbiased denominator exists, and the statement says so instead of guessing. Shares
are estimates: the noise of both sums can put one a little above 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from opal_dp.release.page.summary import PageSummary

TAPS = ("on", "off")
MARGINAL_FILES = ("time-loc", "time", "loc")
BASIS = ("the sum of the file's published counts over the release's dates, divided by the trips totals.csv measures "
         "for the same dates (tap-on and tap-off; tap-on for od.csv, whose figure is the trips in individually listed "
         "origin-destination pairs): published figures only, never the true counts")


def coverage_section(summary: PageSummary) -> dict | None:
    """The statement's ``coverage``: per published file, the share of the trips its rows cover; None without
    measured totals."""
    measured = summary.measured
    if measured.empty:
        return None
    trips = {tap: int(measured.loc[measured["tap"] == tap, "count"].sum()) for tap in TAPS}
    covered = {(str(r.file), str(r.part)): int(r.count) for r in summary.covered.itertuples()}
    files = {f"{name}.csv": sum(covered.get((name, tap), 0) for tap in TAPS) / max(1, sum(trips.values()))
             for name in MARGINAL_FILES}
    if ("od", "listed") in covered:
        files["od.csv"] = covered["od", "listed"] / max(1, trips["on"])
    files["totals.csv"] = 1.0
    return {"basis": BASIS, "trips": trips, "files": {name: round(share, 4) for name, share in files.items()}}


def coverage_markdown(coverage: Mapping | None) -> list[str]:
    if not coverage:
        return ["## How much of the travel each file covers", "",
                "Not stated: this release publishes no measured daily totals (totals.csv) to compare with, and a sum "
                "of thresholded counts would understate it.", ""]
    return ["## How much of the travel each file covers", "", f"Share of the trips: {coverage['basis']}.", "",
            *(f"- {name}: {share:.0%}" for name, share in coverage["files"].items()), ""]
