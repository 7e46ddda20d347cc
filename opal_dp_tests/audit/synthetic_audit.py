"""Empirical privacy audit of the synthetic data's card-level queries (``release.synthetic_queries``).

The whole private path is audited: the production bounding (``prep.bounding.keep_mask``), the archetype
rules and coarsening (``true_histograms``) and the full-domain discrete Gaussian (``draw``'s noise at the
plan's sigma). D holds ``OTHERS`` other cards (one trip each, all in the audited cells) plus one card whose
card-day piles ``m`` trips into one cell of ``time_origin`` and ``od`` (different stations of one
district, so bounding keeps all of them) and so counts once in ``counts``; D' is D without that card.

Each query's noise is independent per cell, so the cells where D and D' agree are released identically
under both: the audit releases only the cells that differ (a projection, post-processing), shifted by the
public ``OFFSET`` and clipped to at least 1 (post-processing again: the audit's output encoding needs positive
counts). Each query is audited against its own claim:
``rho_q``-zCDP converted by OpenDP at ``AUDIT_DELTA`` (``privacy_loss.audit_pairs``: Clopper-Pearson with
Bonferroni, a correct mechanism is flagged with probability at most ``alpha``).
"""

from __future__ import annotations

import dataclasses
from datetime import date

import numpy as np
import pandas as pd

from opal_dp.audit.privacy_loss import AuditReport, NeighbouringPair, audit_pairs
from opal_dp.core import ContributionBounds, PrivacyUnit, Sensitivity
from opal_dp.core.accounting import zcdp_epsilon
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import bin_trips
from opal_dp.prep.bounding import keep_mask
from opal_dp.prep.ingest import RAW_COLUMNS
from opal_dp.release.synthetic import queries as sq

DAY = date(2016, 7, 25)  # a Monday
AUDIT_DELTA = 0.01
OTHERS = 60
OFFSET = 1000
"""A public constant added to every audited count (post-processing of the release): the full-domain mechanism
releases empty cells too, which the audit's encoding would read as suppressed."""
ON_STOPS = (200010, 200011, 200012, 200013)  # Central, Town Hall, Wynyard, Martin Place: postcode 2000
OFF_STOPS = (200014, 200015, 200016, 201610)  # Museum, St James, Circular Quay, Redfern: 2000-2019


def scenario_trips(max_trips: int) -> pd.DataFrame:
    """Raw-contract trips of ``DAY`` (module docstring): card 1 is audited, cards 2.. are the others."""
    n_card = min(max_trips, len(ON_STOPS))
    card = np.concatenate([np.ones(n_card, np.int64), np.arange(2, 2 + OTHERS)])
    slot = np.concatenate([np.arange(n_card), np.arange(OTHERS) % n_card])
    on = pd.Timestamp(DAY) + pd.Timedelta(hours=8) + pd.to_timedelta(slot * 15 * 60 + card % 600, unit="s")
    return pd.DataFrame({
        "card_id": card,
        "mode": pd.Categorical(["train"] * len(card), categories=list(MODES)),
        "tap_on_time": on,
        "tap_on_stop": np.array(ON_STOPS, dtype=np.int32)[slot],
        "tap_off_time": on + pd.Timedelta(minutes=10),
        "tap_off_stop": pd.array(np.array(OFF_STOPS)[slot], dtype="Int32"),
    })[list(RAW_COLUMNS)]


def neighbouring_histograms(plan: sq.SyntheticPlan, query: str, key: bytes, count_trips: bool = False
                            ) -> NeighbouringPair:
    """(D, D') of ``query`` over the cells where they differ, through the production path. ``count_trips``
    plants a query bug: ``counts`` counting a card-day once per trip instead of once."""
    stops = load_stops()

    def counts(trips: pd.DataFrame) -> np.ndarray:
        binned = bin_trips(trips, stops)
        kept = binned.loc[keep_mask(binned, DAY, PrivacyUnit.CARD_PERIOD, plan.bounds, key)]
        hists = sq.true_histograms(kept, DAY, plan.domain)
        if count_trips and query == "counts":
            return hists["counts"] * plan.domain.cells["counts"]["trips"].to_numpy()
        return hists[query]

    with_card = scenario_trips(plan.bounds.max_trips_per_card_day)
    d, d_prime = counts(with_card), counts(with_card[with_card["card_id"] != 1])
    differ = np.flatnonzero(d != d_prime)
    return NeighbouringPair(f"{query}: one card-day", tuple(OFFSET + int(c) for c in d[differ]),
                            tuple(OFFSET + int(c) for c in d_prime[differ]))


@dataclasses.dataclass
class AuditedQuery:
    """``HistogramMechanism`` view of one query's noise, for ``audit_pairs``: every cell passed gets the
    plan's discrete Gaussian, released counts clipped to at least 1."""

    plan: sq.SyntheticPlan
    query: str
    name: str = "synthetic_query"

    @property
    def sensitivity(self) -> Sensitivity:
        return self.plan.sensitivity[self.query]

    def release(self, counts: np.ndarray) -> np.ndarray:
        noisy = counts + self.plan.noise.sample(self.plan.sigma[self.query], len(counts))
        return np.maximum(noisy, 1)

    def describe(self) -> dict:
        return self.plan.describe(self.query)


def claim(plan: sq.SyntheticPlan, query: str) -> tuple[float, float]:
    """What the query alone is claimed to be: its rho, converted by OpenDP at ``AUDIT_DELTA``."""
    return zcdp_epsilon(plan.rho[query], AUDIT_DELTA), AUDIT_DELTA


def audit_query(plan: sq.SyntheticPlan, query: str, key: bytes, *, count_trips: bool = False, runs: int = 10**6,
                alpha: float = 1e-6) -> AuditReport:
    """Audit one query of ``plan`` (its sigma as calibrated, or as a planted bug left it) against its claim."""
    epsilon, delta = claim(plan, query)
    pair = neighbouring_histograms(plan, query, key, count_trips)
    return audit_pairs(AuditedQuery(plan, query), [pair], epsilon=epsilon, delta=delta, runs=runs, alpha=alpha)


def audit_plan(epsilon: float, bounds: ContributionBounds, noise=None) -> sq.SyntheticPlan:
    """The production plan for one date at ``epsilon`` (the audit's period is the scenario's day)."""
    return sq.synthetic_plan(epsilon, 1e-6, bounds, [DAY.isoformat()], load_stops(), noise)
