"""The error of the figures a reader takes from the default time x location hierarchy (``time_loc_hierarchy.LEVELS``:
mode-day > station-day > station-hour > 15-minute x station), in closed form from public parameters only.

The fit (``core.hierarchy.fit``) is linear in the noisy measurements where no estimate is raised to 0: bottom-up,
each cell's estimate combines its own measurement with the sum of its children's by inverse variance; top-down,
each parent's fitted count minus its children's estimates is shared among them in proportion to their variances.
With ``S`` stations of equal shape (24 hours of 4 windows; tap-off adds one unknown cell under the root), the error
of a station's day and of the mode's hour (the sum of every station's fitted count in one hour: ``time.csv``'s four
windows of the hour, or ``time-loc-levels.csv``'s ``district_hour`` rows of the hour summed) are sums of
independent Gaussian measurement errors with the coefficients below; their variances follow. Rounding moves each
count by less than 1 and is not included; where estimates near 0 are raised to 0 (quiet stations, night hours),
the linear figure is an approximation. The reader's figures are post-processing: no privacy cost. A tree pinned to
the published daily totals (``totals.csv``) takes their noise at the root instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opal_dp.release.marginals.time_loc_hierarchy import HOURS, WINDOWS_PER_HOUR


@dataclass(frozen=True)
class FitError:
    """Standard deviations of the fit's error (module docstring)."""

    station_day: float
    hour: float

    def describe(self) -> dict:
        return {"station_day": self.station_day, "hour": self.hour}


def _combined(own: float, below: float) -> tuple[float, float]:
    """(variance of the inverse-variance combination, weight of the cell's own measurement)."""
    return own * below / (own + below), below / (own + below)


def fit_error(sigmas: tuple[float, ...], stations: int, unknown: int, root_sd: float | None = None) -> FitError:
    """The fit's error for one (mode, tap) tree of ``stations`` stations (``unknown``: 1 for tap-off's unknown
    cell) measured at the levels' ``sigmas``. Bottom-up variances: a station-hour ``v2`` (its measurement and its
    windows' sum), a station ``v1`` (weight ``a1`` on its own measurement), the unknown chain ``u1``, the root's
    children ``V = S v1 + u1`` (weight ``a0 = V / (s0 + V)`` on their sum). The root's residual reaches a station in
    share ``v1 / V`` and a station's residual each of its hours in share 1/24, so a station's error is ``(1 - q)``
    its own estimate's minus ``q`` every other child's plus ``q`` the root's measurement's, ``q = a0 v1 / V``; the
    hour's is ``(1 + b)`` its hour's estimates, ``b`` the other hours', ``g`` the stations' own measurements and
    ``k a0 / 24`` the root's measurement and minus the unknown chain's, ``k = S v1 / V``. Pinned to published daily
    totals of noise ``root_sd`` (``time_loc_hierarchy.totals_pins``): the stations share the known total exactly
    (``a0 = 1``, ``s0 = root_sd²``, the unknown cell fixed)."""
    if len(sigmas) != 4 or stations < 1:
        raise ValueError("the fit's error is given for the four default levels and at least one station")
    s0, s1, s2, s3 = (s * s for s in sigmas)
    v2, _ = _combined(s2, WINDOWS_PER_HOUR * s3)
    v1, a1 = _combined(s1, HOURS * v2)
    u1 = _combined(s1, _combined(s2, s3)[0])[0] if unknown and root_sd is None else 0.0
    children = stations * v1 + u1
    if root_sd is None:
        a0 = children / (s0 + children)
    else:
        a0, s0 = 1.0, root_sd * root_sd
    q, k = a0 * v1 / children, stations * v1 / children
    station = (1 - q) ** 2 * v1 + q * q * ((stations - 1) * v1 + u1 + s0)
    b, g = (-1 + (1 - k * a0) * (1 - a1)) / HOURS, (1 - k * a0) * a1 / HOURS
    hour = (((1 + b) ** 2 + (HOURS - 1) * b * b) * stations * v2 + g * g * stations * s1
            + (k * a0 / HOURS) ** 2 * (s0 + u1))
    return FitError(math.sqrt(station), math.sqrt(hour))


def fit_errors_of(record: dict) -> dict[str, dict]:
    """Per mode, the fit's error (``fit_error``) of a hierarchy table's ledger record (``LevelMeasurement.describe``:
    its levels' sigmas, the mode's stations, its tap and ``root_sd``): derived for the statement and the page from the
    recorded parameters, not part of the mechanism."""
    sigmas = tuple(record["hierarchy"]["sigma"])
    return {mode: fit_error(sigmas, n, int(record["tap"] == "off"), record.get("root_sd")).describe()
            for mode, n in sorted(record["stations"].items())}
