"""The synthetic data's private queries: per-archetype card-day counts and trip marginals, card-level DP.

Unit: ``card_period`` (every trip of one card over the release period, add/remove), whatever unit the
marginal release uses: one ledger scope, the period, shared with any card_period marginal release.
Contribution bounds are the release's (``core.units.ContributionBounds``, enforced by
``prep.bounding.keep_mask``, the same bounding the marginals get): at most ``m`` trips per card-day and
``D = bounds.days(period_days)`` card-days per card.

Queries, each a histogram over a **public domain** (every cell, zero or not: no threshold, no delta of its
own), per service date, with the date part of every cell:

- ``counts``: card-days per (archetype, trips) for trips 1..m. Every card-day lies in exactly one cell
  (``release.synthetic.archetypes``), so one card changes at most D cells, each by 1 (its card-days are on distinct
  dates): ``l2² = D``. The per-archetype count is the sum over trips (post-processing).
- ``time_origin``: kept trips per (archetype, mode, tap-on hour, tap-on district);
- ``od``: kept trips per (archetype, mode, tap-on district, tap-off district or none).
  One card-day adds at most m trips, possibly all to one cell: per date ``sum d² <= m²``, ``l2² = D m²``.

Mechanism: the exact discrete Gaussian (``core.discrete_gaussian``, OS CSPRNG) of ``sigma_j =
sqrt(l2²_j / (2 rho_j))`` added to every cell: rho_j-zCDP (Canonne, Kamath & Steinke 2020, Prop. 5;
independent cells add up). The total ``rho`` is the largest whose OpenDP conversion at ``delta`` stays
within ``epsilon`` (``accounting.zcdp_rho_for``), split ``RHO_SHARES``. The ledger charges each query once
for the period (each date is one part of it, one draw); composed with anything else charged to the period,
the accountant states (epsilon, delta) per card over the period. Noisy counts can be negative; they are
released as drawn and only the generator (post-processing) clips them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyLedger, PrivacyUnit, Relation, Sensitivity
from opal_dp.core.accounting import PrivacyCost, zcdp_rho_for
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.core.ledger import Charge, Draw, Request
from opal_dp.network import MODES
from opal_dp.prep.binning import location_labels
from opal_dp.release.synthetic.archetypes import ARCHETYPES, HOURS, Districts, card_days, districts, trip_features
from opal_dp.release.charged import release_charged, serve_each

QUERIES = ("counts", "time_origin", "od")
RHO_SHARES = {"counts": 0.1, "time_origin": 0.45, "od": 0.45}
MARGINAL_PREFIX = "synthetic:"
COUNT = "count"
MECHANISM = "discrete_gaussian_full_domain"


@dataclass(frozen=True)
class SyntheticDomain:
    """The public cells of each query (one table of integer codes per query) and the districts."""

    districts: Districts
    max_trips: int
    cells: Mapping[str, pd.DataFrame]

    def index(self, query: str, rows: pd.DataFrame) -> np.ndarray:
        """Cell index of every row (``rows`` has the query's columns); raises if a row lies outside."""
        cells = self.cells[query]
        shape = tuple(int(cells[c].max()) + 1 for c in cells.columns)
        dense = np.full(shape, -1, dtype=np.int64)
        dense[tuple(cells[c].to_numpy() for c in cells.columns)] = np.arange(len(cells))
        codes = [rows[c].to_numpy(np.int64) for c in cells.columns]
        inside = np.logical_and.reduce([(v >= 0) & (v < n) for v, n in zip(codes, shape)])
        at = np.full(len(rows), -1, dtype=np.int64)
        at[inside] = dense[tuple(v[inside] for v in codes)]
        if (at < 0).any():
            raise ValueError(f"{int((at < 0).sum())} rows lie outside the public domain of {query}")
        return at


def synthetic_domain(stops: pd.DataFrame, max_trips: int) -> SyntheticDomain:
    """The public domains over the reference network ``stops`` (module docstring)."""
    dist = districts(stops, location_labels(stops))
    archetypes = np.arange(len(ARCHETYPES))
    counts = pd.MultiIndex.from_product([archetypes, np.arange(1, max_trips + 1)], names=["archetype", "trips"])
    time_origin, od = [], []
    for code, mode in enumerate(MODES):
        on = dist.of_mode[mode]
        if not len(on):
            continue
        time_origin.append(pd.MultiIndex.from_product([archetypes, [code], np.arange(HOURS), on],
                                                      names=["archetype", "mode", "hour", "on_district"]))
        od.append(pd.MultiIndex.from_product([archetypes, [code], on, np.append(on, dist.none)],
                                             names=["archetype", "mode", "on_district", "off_district"]))
    frames = {"counts": counts.to_frame(index=False),
              "time_origin": pd.concat([i.to_frame(index=False) for i in time_origin], ignore_index=True),
              "od": pd.concat([i.to_frame(index=False) for i in od], ignore_index=True)}
    frames = {k: v.sort_values(list(v.columns), ignore_index=True).astype(np.int64) for k, v in frames.items()}
    return SyntheticDomain(dist, max_trips, frames)


def true_histograms(kept: pd.DataFrame, day: date, domain: SyntheticDomain) -> dict[str, np.ndarray]:
    """The three queries' true counts over their domains for one date's kept trips (``CardBinnedTrips``,
    bounded by ``prep.bounding.keep_mask``). Private: the mechanism's input only."""
    features = trip_features(kept, domain.districts)
    per_day = card_days(features, day, domain.max_trips)
    at = np.searchsorted(per_day["card_id"].to_numpy(), features["card_id"].to_numpy())  # card_days is sorted
    features = features.assign(archetype=per_day["archetype"].to_numpy()[at])
    out = {}
    for query, rows in (("counts", per_day), ("time_origin", features), ("od", features)):
        out[query] = np.bincount(domain.index(query, rows), minlength=len(domain.cells[query])).astype(np.int64)
    return out


@dataclass(frozen=True)
class SyntheticPlan:
    """Budget, bounds, period and one calibrated sigma per query (module docstring)."""

    epsilon: float
    delta: float
    bounds: ContributionBounds
    period: tuple[str, ...]
    domain: SyntheticDomain
    rho: Mapping[str, float]
    sensitivity: Mapping[str, Sensitivity]
    sigma: Mapping[str, float]
    unit: PrivacyUnit = PrivacyUnit.CARD_PERIOD
    relation: Relation = Relation.ADD_REMOVE
    noise: DiscreteGaussian = field(default_factory=DiscreteGaussian, compare=False)

    @property
    def scope(self) -> str:
        return f"{self.period[0]}..{self.period[-1]}"

    @property
    def days_per_card(self) -> int:
        return self.bounds.days(len(self.period))

    def cost(self, query: str) -> PrivacyCost:
        return PrivacyCost.zcdp(self.rho[query], 0.0)

    def describe(self, query: str) -> dict:
        return {"mechanism": MECHANISM, "query": query, "sigma": self.sigma[query], "rho": self.rho[query],
                "sensitivity": self.sensitivity[query].describe(), "cells_per_date": len(self.domain.cells[query]),
                "seeded": self.noise.seeded}

    def bounds_json(self) -> str:
        return json.dumps({"unit": self.unit.value, **self.bounds.describe(), "period_days": len(self.period)},
                          sort_keys=True)


def synthetic_plan(
    epsilon: float, delta: float, bounds: ContributionBounds, period: Sequence[str], stops: pd.DataFrame,
    noise: DiscreteGaussian | None = None,
) -> SyntheticPlan:
    """Calibrate the three queries to (``epsilon``, ``delta``) per card over ``period`` (module docstring)."""
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got ({epsilon!r}, {delta!r})")
    period = tuple(sorted(set(period)))
    if not period:
        raise ValueError("the synthetic data need at least one date")
    days, m = bounds.days(len(period)), bounds.max_trips_per_card_day
    sens = {"counts": Sensitivity(l0=days, l1=days, l2_squared=days, linf=1)}
    sens["time_origin"] = sens["od"] = Sensitivity(l0=days * m, l1=days * m, l2_squared=days * m * m, linf=m)
    rho_total = zcdp_rho_for(epsilon, delta)
    rho = {q: rho_total * RHO_SHARES[q] for q in QUERIES}
    sigma = {q: sigma_for(rho[q], sens[q].l2_squared) for q in QUERIES}
    return SyntheticPlan(float(epsilon), float(delta), bounds, period, synthetic_domain(stops, m), rho, sens, sigma,
                         noise=noise or DiscreteGaussian())


@dataclass(frozen=True)
class SyntheticRelease:
    """The DP outputs: per date and query, the noisy count of every public cell (may be negative), and the
    ledger draws that stand for them. The only thing the generator may read."""

    noisy: Mapping[str, Mapping[str, pd.DataFrame]]  # date -> query -> cells + ``count``
    max_trips: int
    sigma: Mapping[str, float]  # public: the noise scale of each query
    district_names: tuple[str, ...]  # public: ``release.archetypes.Districts.names``
    draws: tuple[Draw, ...] = ()
    charges: tuple[Charge, ...] = ()

    @property
    def dates(self) -> list[str]:
        return sorted(self.noisy)


def draw(truth: np.ndarray, plan: SyntheticPlan, query: str) -> pd.DataFrame:
    """One noisy histogram: every cell of the query's domain plus discrete Gaussian noise; nothing charged."""
    cells = plan.domain.cells[query]
    if truth.shape != (len(cells),):
        raise ValueError(f"{query}: expected {len(cells)} counts, got shape {truth.shape}")
    noisy = truth + plan.noise.sample(plan.sigma[query], len(cells))
    return cells.assign(**{COUNT: noisy.astype(np.int64)})


def fingerprint(truths: Mapping[str, np.ndarray], key: bytes) -> str:
    """Keyed HMAC of one date's true histograms: equal inputs, equal fingerprints; nothing without the key."""
    digest = hmac.new(key, digestmod=hashlib.sha256)
    for query in sorted(truths):
        digest.update(query.encode())
        digest.update(np.ascontiguousarray(truths[query], dtype=np.int64).tobytes())
    return digest.hexdigest()


def release_queries(
    truths: Mapping[str, Mapping[str, np.ndarray]],
    plan: SyntheticPlan,
    ledger: PrivacyLedger,
    root: Path,
    run_id: str,
    fingerprint_key: bytes,
    fresh: bool = False,
) -> SyntheticRelease:
    """Charge, draw and store the queries over ``truths`` ({date: {query: counts}}) under the protocol every
    product shares (``release.charged``): every (date, query) is charged before any noise is drawn."""
    outside = sorted(set(truths) - set(plan.period))
    if outside:
        raise ValueError(f"dates {outside} are outside the synthetic period {plan.scope}")
    requests = []
    for day in sorted(truths):
        prints = fingerprint(truths[day], fingerprint_key)
        for query in QUERIES:
            requests.append(Request(plan.unit.value, plan.scope, day, day, MARGINAL_PREFIX + query,
                                    plan.relation.value, plan.cost(query), json.dumps(plan.describe(query),
                                                                                      sort_keys=True),
                                    plan.bounds_json(), prints))
    noisy: dict[str, dict[str, pd.DataFrame]] = {day: {} for day in truths}
    serve = serve_each(lambda r: draw(truths[r.part][_query(r)], plan, _query(r)))
    served = release_charged(requests, serve, ledger, root, run_id, fresh)
    for s in served:
        noisy[s.request.part][_query(s.request)] = s.value
    return SyntheticRelease(noisy, plan.bounds.max_trips_per_card_day, dict(plan.sigma), plan.domain.districts.names,
                            tuple(s.draw for s in served), tuple({s.charge.id: s.charge for s in served}.values()))


def _query(request: Request) -> str:
    return request.marginal.removeprefix(MARGINAL_PREFIX)
