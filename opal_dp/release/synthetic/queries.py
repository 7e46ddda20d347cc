"""The synthetic data's private queries: per-archetype card-day counts and trip marginals, card-level DP.

Unit: ``card_period`` (every trip of one card over the release period, add/remove), whatever unit the
marginal release uses: one ledger scope, the period, shared with any card_period marginal release.
Contribution bounds are the release's (``core.units.ContributionBounds``, enforced by
``prep.bounding.keep_mask``, the same bounding the marginals get): at most ``m`` trips per card-day and
``D = bounds.days(period_days)`` card-days per card.

Queries, each a histogram over a **public domain** (every cell, zero or not: no threshold, no delta of its
own), per service date, with the date part of every cell:

- ``counts``: card-days per (archetype, trips, returns) for trips 1..m, returns 0..1 (0 only for one trip).
  Every card-day lies in exactly one cell (``release.synthetic.archetypes``), so one card changes at most D
  cells, each by 1 (its card-days are on distinct dates): ``l2² = D``. The per-archetype count is the sum over
  trips (post-processing).
- ``time_origin``: kept trips per (archetype, mode, tap-on hour, tap-on district);
- ``od``: kept trips per (archetype, mode, tap-on district, tap-off district or none).
  One card-day adds at most m trips, possibly all to one cell: per date ``sum d² <= m²``, ``l2² = D m²``.

One more query per calendar week of the period (``release.periods``), the multi-day behaviour of a card:

- ``travel_days``: cards per set of the week's dates on which they have a kept card-day (a bit mask over
  Monday..Sunday, every non-empty subset of the week's dates in the period: the travel days per card and the
  weekday/weekend pattern). One card lies in one cell of each week it travels in, and in no more weeks than it
  has card-days: ``l2² = min(W, D)`` for W weeks.

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
from opal_dp.core.input_version import stand_ins
from opal_dp.core.ledger_records import Charge, Draw, Request
from opal_dp.network import MODES
from opal_dp.prep.binning import location_labels
from opal_dp.release.synthetic.archetypes import ARCHETYPES, HOURS, Districts, card_days, districts, trip_features
from opal_dp.release.charged import release_charged, serve_each
from opal_dp.release.periods import WEEK_DAYS, Periods, name

DAY_QUERIES = ("counts", "time_origin", "od")
WEEK_QUERY = "travel_days"
QUERIES = (*DAY_QUERIES, WEEK_QUERY)
RHO_SHARES = {"counts": 0.1, "time_origin": 0.4, "od": 0.4, WEEK_QUERY: 0.1}
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
    counts = pd.MultiIndex.from_product([archetypes, np.arange(1, max_trips + 1), [0, 1]],
                                        names=["archetype", "trips", "returns"])
    counts = counts[(counts.get_level_values("trips") > 1) | (counts.get_level_values("returns") == 0)]
    time_origin, od = [], []
    for code, mode in enumerate(MODES):
        on = dist.of_mode[mode]
        if not len(on):
            continue
        time_origin.append(pd.MultiIndex.from_product([archetypes, [code], np.arange(HOURS), on],
                                                      names=["archetype", "mode", "hour", "on_district"]))
        od.append(pd.MultiIndex.from_product([archetypes, [code], on, np.append(on, dist.none)],
                                             names=["archetype", "mode", "on_district", "off_district"]))
    frames = {"counts": counts.to_frame(index=False), WEEK_QUERY: pd.DataFrame({"days": np.arange(1, 2**WEEK_DAYS)}),
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


def true_travel_days(kept_cards: Mapping[str, np.ndarray], plan: SyntheticPlan) -> dict[str, np.ndarray]:
    """The ``travel_days`` query's true counts per week of the period ({week name: counts over the domain}) from
    the card ids with a kept card-day on each date (``kept_cards``: {date: ids}). Private: the mechanism's input."""
    out = {}
    for week, days in plan.weeks.items():
        ids = [np.unique(np.asarray(kept_cards.get(d, ()), dtype=np.int64)) for d in days]
        bits = [np.full(len(i), 1 << date.fromisoformat(d).weekday(), dtype=np.int64) for i, d in zip(ids, days)]
        per_card = pd.Series(np.concatenate([np.zeros(0, np.int64), *bits])).groupby(
            np.concatenate([np.zeros(0, np.int64), *ids])).agg(np.bitwise_or.reduce)
        rows = pd.DataFrame({"days": per_card.to_numpy(np.int64)})
        out[week] = np.bincount(plan.domain.index(WEEK_QUERY, rows),
                                minlength=len(plan.domain.cells[WEEK_QUERY])).astype(np.int64)
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

    @property
    def weeks(self) -> dict[str, list[str]]:
        """Calendar week name (``first..last``, Monday to Sunday) -> the period's dates in it: a synthetic card
        lives one week."""
        return {name(week): days for week, days in Periods().group(self.period).items()}

    def cost(self, query: str) -> PrivacyCost:
        return PrivacyCost.zcdp(self.rho[query], 0.0)

    def describe(self, query: str) -> dict:
        per = "cells_per_week" if query == WEEK_QUERY else "cells_per_date"
        return {"mechanism": MECHANISM, "query": query, "sigma": self.sigma[query], "rho": self.rho[query],
                "sensitivity": self.sensitivity[query].describe(), per: len(self.domain.cells[query]),
                "seeded": self.noise.seeded}

    def bounds_json(self) -> str:
        return json.dumps({"unit": self.unit.value, **self.bounds.describe(), "period_days": len(self.period)},
                          sort_keys=True)


def synthetic_week_cost(epsilon: float, delta: float) -> PrivacyCost:
    """What the queries of one week charge a card together: the largest rho within (``epsilon``, ``delta``), delta 0
    (the plan splits it ``RHO_SHARES`` over the queries; zCDP composition adds them back)."""
    return PrivacyCost.zcdp(zcdp_rho_for(epsilon, delta), 0.0)


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
    weeks = min(len(Periods().group(period)), days)
    sens[WEEK_QUERY] = Sensitivity(l0=weeks, l1=weeks, l2_squared=weeks, linf=1)
    rho_total = synthetic_week_cost(epsilon, delta).rho
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
    district_names: tuple[str, ...]  # public: ``release.synthetic.archetypes.Districts.names``
    draws: tuple[Draw, ...] = ()
    charges: tuple[Charge, ...] = ()
    travel_days: Mapping[str, pd.DataFrame] = field(default_factory=dict)  # week name -> cells + ``count``

    @property
    def dates(self) -> list[str]:
        return sorted(self.noisy)


def week_of(day: str) -> str:
    """The name of the calendar week (``first..last``) ``day`` falls in: the part a ``travel_days`` draw covers."""
    return Periods().name_of(day)


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
    travel_days: Mapping[str, np.ndarray],
    plan: SyntheticPlan,
    ledger: PrivacyLedger,
    root: Path,
    run_id: str,
    fingerprint_key: bytes,
    fresh: bool = False,
    input_versions: Mapping[str, str] | None = None,
) -> SyntheticRelease:
    """Charge, draw and store the queries over ``truths`` ({date: {query: counts}}) and ``travel_days`` ({week
    name: counts}, ``true_travel_days``) under the protocol every product shares (``release.charged``): every
    part is charged before any noise is drawn. ``input_versions`` as in
    ``release.marginals.engine.release_partitions`` (a week's draw takes that of its first date)."""
    outside = sorted(set(truths) - set(plan.period))
    if outside:
        raise ValueError(f"dates {outside} are outside the synthetic period {plan.scope}")
    weeks = {week: [d for d in days if d in truths] for week, days in plan.weeks.items()}
    weeks = {week: days for week, days in weeks.items() if days}
    if set(travel_days) != set(weeks):
        raise ValueError(f"travel_days must cover exactly the weeks {sorted(weeks)}, got {sorted(travel_days)}")
    parts = {**{(day, q): truths[day][q] for day in truths for q in DAY_QUERIES},
             **{(week, WEEK_QUERY): travel_days[week] for week in weeks}}
    date_of = {**{day: day for day in truths}, **{week: days[0] for week, days in weeks.items()}}
    prints = {**{day: fingerprint({q: truths[day][q] for q in DAY_QUERIES}, fingerprint_key) for day in truths},
              **{week: fingerprint({WEEK_QUERY: travel_days[week]}, fingerprint_key) for week in weeks}}
    if input_versions is None:
        versions = stand_ins({part: plan.scope for part in date_of}, prints)
    else:
        versions = {part: input_versions[day] for part, day in date_of.items()}
    requests = [Request(plan.unit, plan.scope, part, date_of[part], MARGINAL_PREFIX + q, plan.relation.value,
                        plan.cost(q), json.dumps(plan.describe(q), sort_keys=True), plan.bounds_json(),
                        prints[part], versions[part])
                for part, q in sorted(parts, key=lambda k: (date_of[k[0]], k[1]))]
    serve = serve_each(lambda r: draw(parts[r.part, _query(r)], plan, _query(r)))
    served = release_charged(requests, serve, ledger, root, run_id, fresh)
    noisy: dict[str, dict[str, pd.DataFrame]] = {day: {} for day in truths}
    weekly = {}
    for s in served:
        if _query(s.request) == WEEK_QUERY:
            weekly[s.request.part] = s.value
        else:
            noisy[s.request.part][_query(s.request)] = s.value
    return SyntheticRelease(noisy, plan.bounds.max_trips_per_card_day, dict(plan.sigma), plan.domain.districts.names,
                            tuple(s.draw for s in served), tuple({s.charge.id: s.charge for s in served}.values()),
                            weekly)


def _query(request: Request) -> str:
    return request.marginal.removeprefix(MARGINAL_PREFIX)
