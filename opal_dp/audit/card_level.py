"""Empirical privacy audit at card level: neighbouring datasets differ by every trip of one card.

What is audited is the whole path a card's trips take: contribution bounding (``prep.bounding``, the real
code, on trips built for the purpose), the true histogram of a marginal, and the mechanism calibrated to the
unit's sensitivity. For each scenario below the dataset D holds other cards (one trip each) plus the card
under audit; D' is D without that card. Bounding is run once per dataset (it is deterministic given its key
and depends on each card's own trips only, so the guarantee must hold for every key); the histograms of
the bounded D and D' are then released ``runs`` times each by ``privacy_loss.audit_pairs``, which bounds
P[M(D) in S] - e^epsilon P[M(D') in S] over level-set events with Clopper-Pearson and Bonferroni.

Scenarios, with m = max trips per card-day and b = the per-bin bound (``h`` is a busy count, 3x the
release threshold, so busy bins are always released):

- ``spread``: the card has one trip in each of m busy bins (L1 = m, every bin stable): tests the scale;
- ``pile``: the card has 3m trips in one busy bin; bounding leaves b: tests bounding and Linf in the scale;
- ``fresh bins``: the card has one trip in each of m bins no one else used (L0 = m unstable bins): tests the
  threshold's ln(L0/delta);
- ``fresh pile``: the card has 3m trips in one otherwise empty bin; bounding leaves b: tests bounding and
  Linf in the threshold.

For a ``card_period`` plan the mechanism is calibrated to the period's sensitivity and one more scenario runs:

- ``period spread``: the card travels on every day of the period, ``spread`` on each day, and keeps the days the
  production day cap (``select_card_days``) keeps. The period histogram's bins include the date, so the card
  moves D*m busy bins. Its output is too large for level sets, so the audited output is the sum of the
  released counts: post-processing of the release, so any event on it is an event on the release, and a
  mechanism calibrated to fewer days than the period's shows a shift of D*m against too little noise. It runs
  ``runs // PERIOD_RUNS_DIVISOR`` releases (each is D*m draws); the two audits share alpha (Bonferroni).
"""

from __future__ import annotations

from collections.abc import Callable
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import date

import numpy as np
import pandas as pd

from opal_dp.audit.privacy_loss import CHUNK, AuditReport, NeighbouringPair, Sample, audit_pairs, audit_samples
from opal_dp.core import (
    ContributionBounds,
    HistogramMechanism,
    PrivacyUnit,
    Relation,
    StabilityHistogram,
    sensitivity,
)
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.core.gaussian_threshold import GaussianThresholdHistogram
from opal_dp.network import MODES
from opal_dp.prep.bounding import CARD, bound_day, select_card_days
from opal_dp.release.marginals.tables import BY_NAME, histograms
from opal_dp.release.options import Mechanism

MARGINAL = BY_NAME["tap_on_time_loc"]
DAY = date(2016, 7, 25)
Bounding = Callable[[pd.DataFrame, ContributionBounds], pd.DataFrame]
"""Binned trips with card ids and the bounds -> the bounded trips (card ids dropped)."""


def real_bounding(trips: pd.DataFrame, bounds: ContributionBounds) -> pd.DataFrame:
    """The production bounding (a fresh random key each call: the guarantee must hold for every key)."""
    return bound_day(trips, DAY, PrivacyUnit.CARD_DAY, bounds, os.urandom(32)).kept


@dataclass(frozen=True)
class CardScenario:
    """Per bin: trips of other cards (one trip each) and trips of the card under audit."""

    name: str
    others: tuple[int, ...]
    card: tuple[int, ...]


def scenarios(bounds: ContributionBounds, min_released_count: int) -> tuple[CardScenario, ...]:
    """The scenarios of the module docstring for these bounds and release threshold."""
    m, h = bounds.max_trips_per_card_day, 3 * max(min_released_count, 2)
    return (
        CardScenario("spread", (h,) * m, (1,) * m),
        CardScenario("pile", (h,), (3 * m,)),
        CardScenario("fresh bins", (0,) * m, (1,) * m),
        CardScenario("fresh pile", (0,), (3 * m,)),
    )


def trips_of(others: tuple[int, ...], card: tuple[int, ...]) -> pd.DataFrame:
    """Binned trips: bin j is tap-on (window 10 + j, label j), tap-off (window 40 + j, label j), by bus;
    other cards have ids from 2 up, one trip each; the audited card is card 1."""
    labels = [f"L{j}" for j in range(len(others))]
    rows = [(2 + i, j) for i, j in enumerate(j for j, n in enumerate(others) for _ in range(n))]
    rows += [(1, j) for j, n in enumerate(card) for _ in range(n)]
    card_id = np.array([r[0] for r in rows], dtype=np.int64)
    bins = np.array([r[1] for r in rows], dtype=np.int64)
    return pd.DataFrame({
        "tap_on_window": (10 + bins).astype("int16"),
        "tap_on_loc": pd.Categorical.from_codes(bins, categories=labels),
        "tap_off_window": (40 + bins).astype("int16"),
        "tap_off_loc": pd.Categorical.from_codes(bins, categories=labels),
        "mode": pd.Categorical.from_codes(np.zeros(len(rows), dtype=np.int64), categories=list(MODES)),
        "card_id": card_id,
    })


def neighbouring_histograms(
    scenario: CardScenario, bounds: ContributionBounds, bounding: Bounding = real_bounding
) -> NeighbouringPair:
    """(D, D') of a scenario as histograms of the audited marginal over the scenario's bins, after bounding."""

    def counts(trips: pd.DataFrame) -> tuple[int, ...]:
        bounded = bounding(trips, bounds)
        hist = histograms(bounded.drop(columns=["mode"], errors="ignore"), [MARGINAL])[MARGINAL.name]
        out = np.zeros(len(scenario.others), dtype=np.int64)
        out[hist["loc"].cat.codes.to_numpy()] = hist["count"].to_numpy()
        return tuple(int(c) for c in out)

    with_card = trips_of(scenario.others, scenario.card)
    return NeighbouringPair(scenario.name, counts(with_card), counts(with_card[with_card["card_id"] != 1]))


LAPLACE_CLAIM = (1.0, 0.01)
"""The audit's relaxed (epsilon, delta) for the thresholded Laplace (as the trip-level audit's)."""
GAUSSIAN_CLAIM = (3.0, 0.02)
"""For the thresholded Gaussian: half the delta for the threshold, half for OpenDP's zCDP conversion. The
conversion is loose for one Gaussian, so a smaller epsilon would leave room for bugs to hide."""


def audit_mechanism_for(
    kind: Mechanism | str, bounds: ContributionBounds, noise=None, *, unit: PrivacyUnit = PrivacyUnit.CARD_DAY,
    period_days: int | None = None,
) -> tuple[HistogramMechanism, float, float]:
    """The mechanism of family ``kind`` (``Mechanism``) calibrated to one ``unit`` (a card-day, or a card over a
    period of ``period_days`` days) under ``bounds`` at the audit's relaxed claim, with that claim (epsilon,
    delta). The audited plan's unit and period: the audit checks the sensitivity the release uses."""
    sens = sensitivity(unit, Relation.ADD_REMOVE, bounds, period_days)
    if Mechanism.parse(kind).pure:
        epsilon, delta = LAPLACE_CLAIM
        return StabilityHistogram(epsilon, delta, sens, noise), epsilon, delta
    epsilon, delta = GAUSSIAN_CLAIM
    rho = zcdp_rho_for(epsilon, delta / 2)
    return GaussianThresholdHistogram(rho, delta / 2, sens, noise), epsilon, delta


def audit_card_level(
    mechanism: HistogramMechanism,
    bounds: ContributionBounds,
    *,
    epsilon: float,
    delta: float,
    bounding: Bounding = real_bounding,
    runs: int = 10**6,
    alpha: float = 1e-6,
    period_days: int | None = None,
    workers: int | None = None,
) -> AuditReport:
    """Audit ``mechanism`` (calibrated to the sensitivity of ``bounds`` for the audited unit) against the claim
    (epsilon, delta) on every scenario, with ``bounding`` in the path (module docstring). ``period_days``: the
    period of a ``card_period`` plan, which adds the ``period spread`` scenario. ``workers`` as in ``audit_pairs``."""
    started, description = time.perf_counter(), mechanism.describe()
    released = description["min_released_count"]
    pairs = [neighbouring_histograms(s, bounds, bounding) for s in scenarios(bounds, released)]
    share = alpha if period_days is None else alpha / 2
    if period_days is None:
        day = audit_pairs(mechanism, pairs, epsilon=epsilon, delta=delta, runs=runs, alpha=share, workers=workers)
        return replace(day, seconds=time.perf_counter() - started)

    def period_audit() -> AuditReport:
        return audit_samples(_released_total(mechanism), [period_pair(bounds, released, period_days, bounding)],
                             description, epsilon=epsilon, delta=delta, runs=max(runs // PERIOD_RUNS_DIVISOR, 1),
                             alpha=share)

    def day_audit() -> AuditReport:
        return audit_pairs(mechanism, pairs, epsilon=epsilon, delta=delta, runs=runs, alpha=share, workers=workers)

    if description.get("seeded", True):  # one seeded stream, drawn in order: the day pairs, then the period
        day, period = day_audit(), period_audit()
    else:  # OS noise: the period draws in a thread of this process beside the day pairs (in the worker processes, or
        # in this process when it has none), each draw from its own os.urandom call
        with ThreadPoolExecutor(1) as beside:
            pending = beside.submit(period_audit)
            day, period = day_audit(), pending.result()
    worst = max((day.worst, period.worst), key=lambda e: e.violation_lower)
    return replace(day, alpha=alpha, candidates=day.candidates + period.candidates, events=day.events + period.events,
                   worst=worst, epsilon_lower=max(day.epsilon_lower, period.epsilon_lower),
                   passed=day.passed and period.passed, seconds=time.perf_counter() - started)


def audit_plan(kind: Mechanism | str, bounds: ContributionBounds, unit: PrivacyUnit, period_days: int | None, runs: int,
               alpha: float, workers: int | None = None) -> AuditReport:
    """``audit_card_level`` of a card unit's plan (its mechanism family ``kind``, ``bounds``, ``unit`` and period) at
    the audit's claim (``audit_mechanism_for``), with production noise: a call of public parameters only, which
    ``audit.early`` can start before the step that publishes on it."""
    mechanism, epsilon, delta = audit_mechanism_for(kind, bounds, unit=unit, period_days=period_days)
    return audit_card_level(mechanism, bounds, epsilon=epsilon, delta=delta, runs=runs, alpha=alpha,
                            period_days=period_days, workers=workers)


PERIOD_RUNS_DIVISOR = 10
"""The ``period spread`` scenario runs this many times fewer releases than the day scenarios (module docstring)."""


def kept_days(bounds: ContributionBounds, period_days: int) -> int:
    """Days of a card travelling on every day of the period that the production day cap keeps."""
    if bounds.max_days_per_card is None:
        return period_days
    days = [date.fromordinal(DAY.toordinal() + i).isoformat() for i in range(period_days)]
    card_days = pd.DataFrame({CARD: np.ones(period_days, dtype=np.int64), "date": days})
    return len(select_card_days(card_days, bounds.max_days_per_card, os.urandom(32)))


def period_pair(
    bounds: ContributionBounds, min_released_count: int, period_days: int, bounding: Bounding = real_bounding
) -> NeighbouringPair:
    """(D, D') of the ``period spread`` scenario: the period histogram, the ``spread`` bins of each day in turn."""
    day = neighbouring_histograms(scenarios(bounds, min_released_count)[0], bounds, bounding)
    kept = kept_days(bounds, period_days)
    return NeighbouringPair("period spread", day.d * kept + day.d_prime * (period_days - kept),
                            day.d_prime * period_days)


def _released_total(mechanism: HistogramMechanism):
    """Sampler of the sum of the released counts of a histogram whose bins are all present."""

    def sample(counts: tuple[int, ...], n: int) -> Sample:
        present = np.asarray(counts, dtype=np.int64)
        per_call = max(CHUNK // present.size, 1)
        totals = [mechanism.release(np.tile(present, k)).reshape(k, present.size).sum(axis=1)
                  for k in (min(per_call, n - start) for start in range(0, n, per_call))]
        return np.unique(np.concatenate(totals), return_counts=True)

    return sample
