"""Daily totals per (mode, tap): one discrete Gaussian count per cell of a public domain, never suppressed.

Setting. A date's public cells are every (mode, tap) of the stop list's modes, tap in (on, off): a trip counts once
in its mode's ``on`` cell and, when its tap-off is recorded, once in its ``off`` cell. The unit is the card-day
(as the OD releases' ``core.hierarchy``): it holds at most ``m`` trips (``max_items``, the stored sequences'
length) and counts at most ``c`` of them in one mode (``max_per_mode``: the first ``c`` in tap-on order, a rule on
the card-day's own trips, so the bound holds for any neighbour).

Sensitivity (``totals_l2_squared``). Adding or removing a card-day changes mode ``k``'s ``on`` count by ``a_k`` and
its ``off`` count by ``b_k <= a_k``, with ``a_k <= c`` and ``sum a_k <= m``. ``sum_k (a_k² + b_k²) <= 2 sum_k
a_k²``, largest with the trips piled up as much as allowed: ``2 (floor(m/c) c² + (m mod c)²)``. One mode's two cells
and the other modes' are parts of one vector: the bound covers the whole date.

Privacy. Every cell gets independent discrete Gaussian noise ``N_Z(0, sigma²)`` (``core.discrete_gaussian``: exact,
OS CSPRNG), ``sigma`` the smallest float with ``l2² / (2 sigma²) <= rho`` (``gaussian_threshold.sigma_for``), so the
date's totals are ``rho``-zCDP (Canonne, Kamath & Steinke 2020, Prop. 5; Bun & Steinke 2016) with delta 0: every
cell of the public domain is measured, zero or not, so no event depends on which cells are occupied. Publishing
``max(0, noisy)`` is post-processing.

Why a measurement of its own and not sums of published marginal cells: a sum of the bins that survived a threshold
is biased low by every suppressed bin (threefold and more for the small modes), and no error bar covers a bias; a
total measured on its own public cell has a known error and only the bias of its own bound (a card-day's trips past
``m`` or past ``c`` of a mode are not counted), which the page and the statement name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.discrete_gaussian import MAX_SIGMA, DiscreteGaussian, error_bound
from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.core.hierarchy import first_per_row

TAPS = ("on", "off")
TOTALS_PER_MODE = 2
"""Trips of one card-day counted per mode: 0.15% of the sample's bus and train trips are a card-day's third or
fourth of one mode, none of its ferry or light rail trips; a bound of 4 would double the sensitivity."""


def totals_l2_squared(max_items: int, max_per_mode: int) -> int:
    """``sum d²`` bound of one card-day's change to a date's (mode, tap) totals (module docstring)."""
    for name, value in (("max_items", max_items), ("max_per_mode", max_per_mode)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    per_mode = min(max_per_mode, max_items)
    return 2 * ((max_items // per_mode) * per_mode**2 + (max_items % per_mode) ** 2)


@dataclass(frozen=True)
class TotalsBudget:
    """The public parameters of a date's totals: ``rho`` (zCDP) and the card-day's bounds."""

    rho: float
    max_items: int
    max_per_mode: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise ValueError(f"rho must be finite and > 0, got {self.rho!r}")
        totals_l2_squared(self.max_items, self.max_per_mode)

    @property
    def l2_squared(self) -> int:
        return totals_l2_squared(self.max_items, self.max_per_mode)

    @property
    def sigma(self) -> float:
        sigma = sigma_for(self.rho, self.l2_squared)
        if sigma > MAX_SIGMA:
            raise ValueError(f"rho {self.rho} is too small for these bounds: sigma {sigma:.0f} > {MAX_SIGMA}")
        return sigma

    @property
    def error_bound_95(self) -> int:
        """The 95% bound of one total's noise: ``P(|Z| <= e) >= 0.95``."""
        return error_bound(self.sigma, 0.95)

    def cost(self) -> PrivacyCost:
        return PrivacyCost.zcdp(self.rho, 0.0)

    def describe(self) -> dict:
        return {"mechanism": "discrete_gaussian_totals", "rho": self.rho, "l2_squared": self.l2_squared,
                "sigma": self.sigma, "max_items": self.max_items, "max_per_mode": self.max_per_mode,
                "error_bound_95": self.error_bound_95}



def date_cost(levels: PrivacyCost, totals: TotalsBudget | None) -> PrivacyCost:
    """One date's charge of the OD hierarchy: its levels' zCDP cost (``core.hierarchy.HierarchyBudget.cost``) and,
    when measured with them, the totals' rho, delta 0 (zCDP composition adds rho)."""
    return PrivacyCost.zcdp(levels.rho + (totals.rho if totals else 0.0), 0.0)

def card_day_totals(modes: np.ndarray, tapped_off: np.ndarray, max_per_mode: int, n_modes: int) -> np.ndarray:
    """The true (mode, tap) counts of card-days' trips, shape ``(n_modes, 2)``: ``modes`` (card-days x slots, a mode
    index per trip, ``-1`` for an empty slot, in tap-on order) and ``tapped_off`` (same shape, whether the trip's
    tap-off is recorded); each card-day counts only its first ``max_per_mode`` trips of a mode."""
    modes = np.asarray(modes)
    if modes.ndim != 2:
        raise ValueError(f"modes must be card-days x slots, got shape {modes.shape}")
    if modes.size and (modes.min() < -1 or modes.max() >= n_modes):
        raise ValueError(f"modes must be mode indices below {n_modes} or -1 (an empty slot)")
    kept = first_per_row(modes, max_per_mode, -1)
    kept_off = kept & np.asarray(tapped_off, dtype=bool)
    of_mode = [modes == k for k in range(n_modes)]  # a count per mode: no index array of every kept trip
    return np.array([[np.count_nonzero(kept & m), np.count_nonzero(kept_off & m)] for m in of_mode],
                    dtype=np.int64).reshape(n_modes, 2)


def measure_totals(truth: np.ndarray, budget: TotalsBudget, noise: DiscreteGaussian | None = None) -> np.ndarray:
    """Every cell of ``truth`` plus fresh discrete Gaussian noise at ``budget.sigma`` (zeros included)."""
    truth = np.asarray(truth, dtype=np.int64)
    noise = DiscreteGaussian() if noise is None else noise
    return truth + noise.sample(budget.sigma, truth.size).reshape(truth.shape)
