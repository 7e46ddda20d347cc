"""Deliberately broken variants of the release (test doubles: the audit must catch each one)."""

from __future__ import annotations

import math

import numpy as np

from opal_dp.core.discrete_gaussian import min_released_count
from opal_dp.core.gaussian_threshold import GaussianThresholdHistogram, sigma_for
from opal_dp.core.sbh import StabilityHistogram


class ScaleBug(StabilityHistogram):
    """Noise scale ``1/epsilon`` whatever the relation; threshold formula ``1 + scale*ln(k/delta)`` kept.

    Under replace-one each of the two touched bins is then epsilon-DP, 2*epsilon for the pair.
    Under add/remove it coincides with the real mechanism.
    """

    def __init__(self, epsilon, delta, sensitivity, noise=None):
        super().__init__(epsilon, delta, sensitivity, noise)
        self.scale = 1 / self.epsilon
        self.threshold = 1 + self.scale * math.log(self.sensitivity.l0 / self.delta)
        self.min_released_count = math.ceil(self.threshold)


class ThresholdBug(StabilityHistogram):
    """Threshold ``1 + ln(1/delta)/epsilon`` (the add/remove formula) whatever the relation.

    Under replace-one a count-1 bin is released with probability about 0.05 > delta/2 at
    (1, 0.01). Under add/remove it coincides with the real mechanism.
    """

    def __init__(self, epsilon, delta, sensitivity, noise=None):
        super().__init__(epsilon, delta, sensitivity, noise)
        self.threshold = 1 + math.log(1 / self.delta) / self.epsilon
        self.min_released_count = math.ceil(self.threshold)


def true_count_order(counts: np.ndarray) -> np.ndarray:
    """Bins by true count, descending (ties by label): a data-dependent output order (§3.3.1).

    Sorting by *noisy* count would not be a bug: the output carries the bin labels, so that order
    is post-processing of the canonical release.
    """
    return np.argsort(-counts, kind="stable")


class ThresholdIgnoresL0(StabilityHistogram):
    """Card level: threshold ``linf + scale*ln(1/delta)``, as if a card touched one bin; with L0 fresh bins
    the chance that one of them shows is about L0 times delta."""

    def __init__(self, epsilon, delta, sensitivity, noise=None):
        super().__init__(epsilon, delta, sensitivity, noise)
        self.threshold = sensitivity.linf + self.scale * math.log(1 / self.delta)
        self.min_released_count = math.ceil(self.threshold)


def skip_bounding(trips, bounds):
    """Card level: the card id is dropped but no contribution is bounded."""
    return trips.drop(columns="card_id")


class SigmaIgnoresLinf(GaussianThresholdHistogram):
    """The Gaussian's sigma from l0 instead of l2_squared, as if every bin moved by at most 1: a card piling
    linf trips into one bin costs linf times the stated rho."""

    def __init__(self, rho, delta, sensitivity, noise=None):
        super().__init__(rho, delta, sensitivity, noise)
        self.sigma = self.scale = sigma_for(self.rho, sensitivity.l0)
        self.min_released_count = min_released_count(self.sigma, sensitivity.l0, sensitivity.linf, self.delta)


class GaussianThresholdIgnoresL0(GaussianThresholdHistogram):
    """The Gaussian's threshold computed as if a card touched one bin."""

    def __init__(self, rho, delta, sensitivity, noise=None):
        super().__init__(rho, delta, sensitivity, noise)
        self.min_released_count = min_released_count(self.sigma, 1, sensitivity.linf, self.delta)


def zeros_not_noised(counts, law):
    """Public-domain design: noise only on cells with a true count, as SBH's habit would have it; an empty cell
    is then published as exactly 0, which proves that no unit was there."""
    return np.where(counts > 0, counts + law.draw(counts.size).reshape(counts.shape), counts)


def noise_ignoring_sensitivity(noise):
    """Public-domain design: every table's noise calibrated as if a unit changed one cell by one (scale
    1/epsilon), while the ledger still charges the stated budget for the real sensitivity."""
    from dataclasses import replace

    from opal_dp.core.sensitivity import Sensitivity
    from opal_dp.release.marginals.public_domain import calibrate

    one = calibrate(noise.mechanism, Sensitivity(1, 1, 1, 1), noise.budget, noise.laws["time"].bits)
    return replace(noise, laws=one.laws)


def joint_at_whole_budget(noise):
    """Public-domain design: the joint measured at the whole tap budget instead of its share of it."""
    from dataclasses import replace

    from opal_dp.release.marginals.public_domain import calibrate

    whole = sum(noise.budget.values())
    spent = calibrate(noise.mechanism, noise.sensitivity, {t: whole for t in noise.budget}, noise.laws["time"].bits)
    return replace(noise, laws={**noise.laws, "time-loc": spent.laws["time-loc"]})
