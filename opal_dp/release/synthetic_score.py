"""Score synthetic trips as the NIST DeID2 challenge scored them, against the true trips and two baselines.

Rows compared (one per trip, raw input contract -> public coarsening): ``date``, ``mode``, tap-on ``hour``,
``on_district``, ``off_district`` (``release.archetypes``) and ``card_day_trips`` (trips of the row's
card-day, ``m`` standing for m or more).

- ``k_marginal``: the SDNist k-marginal score, ``1000 - 500 * mean_M L1(p_M, q_M)`` over 3-way marginals M,
  where ``L1`` is the total-variation distance counted as ``sum |p - q|`` (0 to 2), so the score runs from 0
  (disjoint) to 1000 (equal). With six columns there are only 20 triples: all of them are used.
- ``trips_per_card_day``: the distribution of ``card_day_trips`` over card-days, true vs synthetic.
- ``od_top100``: of the 100 most frequent true (mode, on_district, off_district) pairs, the share of true
  trips they hold, the synthetic share, and the L1 distance between the two distributions on them.

Baselines on the same (epsilon, delta) per card over the period, both internal (nothing charged, never
published):
- ``one_way``: each column's one-way histogram per date (the date is part of every bin, as in
  ``release.synthetic_queries``), discrete Gaussian of the same total rho split evenly, sampled
  independently;
- ``sbh``: our marginal release (``release.plan`` for ``card_period``, sbh design) of the bounded trips, and
  trips drawn from it: tap-on (window, location) from the tap-on time x location table, tap-off likewise
  and independently. It carries no card information: ``card_day_trips`` is drawn from the public prior
  ``SBH_TRIPS_PRIOR`` (most card-days are a return journey).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.network import MODES
from opal_dp.prep.binning import location_labels, stop_labels
from opal_dp.release.archetypes import HOURS, Districts, districts
from opal_dp.release.marginals import BY_NAME, COUNT, histograms
from opal_dp.release.plan import build_plan

COLUMNS = ("date", "mode", "hour", "on_district", "off_district", "card_day_trips")
SBH_TRIPS_PRIOR = {1: 0.25, 2: 0.55, 3: 0.1, 4: 0.1}


def features(trips: pd.DataFrame, stops: pd.DataFrame, max_trips: int, dist: Districts | None = None) -> pd.DataFrame:
    """Raw-contract trips (ingested or synthetic) -> the scored columns, small integer codes."""
    dist = dist or districts(stops, location_labels(stops))
    code = {label: i for i, label in enumerate(dist.labels)}
    stop_ids = stops["stop_id"].to_numpy(np.int64)
    stop_mode = np.array([MODES.index(m) for m in stops["mode"].astype(str)])
    stop_district = dist.lookup[stop_mode, [code[label] for label in stop_labels(stops).to_numpy()]]
    lookup = np.full(int(stop_ids.max()) + 1, -1, dtype=np.int64)
    lookup[stop_ids] = stop_district
    on_time = pd.to_datetime(trips["tap_on_time"])
    off_stop = trips["tap_off_stop"].astype("Int64")
    off = np.where(off_stop.isna().to_numpy(), dist.none, lookup[off_stop.fillna(0).to_numpy(np.int64)])
    day = on_time.dt.normalize()
    per_card_day = trips.groupby([trips["card_id"].to_numpy(), day.to_numpy()])["card_id"].transform("size")
    return pd.DataFrame({
        "date": (day - day.min()).dt.days.to_numpy(np.int64) if len(day) else np.zeros(0, np.int64),
        "mode": pd.Categorical(trips["mode"].astype(str), categories=list(MODES)).codes.astype(np.int64),
        "hour": on_time.dt.hour.to_numpy(np.int64),
        "on_district": lookup[trips["tap_on_stop"].to_numpy(np.int64)],
        "off_district": off,
        "card_day_trips": np.minimum(per_card_day.to_numpy(np.int64), max_trips),
    })


def k_marginal(true: pd.DataFrame, synthetic: pd.DataFrame, k: int = 3) -> float:
    """The SDNist k-marginal score (module docstring) over every k-subset of ``COLUMNS``."""
    distances = [marginal_l1(true, synthetic, list(cols)) for cols in itertools.combinations(COLUMNS, k)]
    return 1000.0 - 500.0 * float(np.mean(distances))


def marginal_l1(true: pd.DataFrame, synthetic: pd.DataFrame, columns: Sequence[str]) -> float:
    """``sum |p - q|`` between the two normalised histograms over ``columns`` (2 if either is empty)."""
    if not len(true) or not len(synthetic):
        return 2.0
    size = [int(max(true[c].max(), synthetic[c].max())) + 1 for c in columns]
    p, q = (np.bincount(np.ravel_multi_index([f[c].to_numpy() for c in columns], size),
                        minlength=math.prod(size)) / len(f) for f in (true, synthetic))
    return float(np.abs(p - q).sum())


def trips_per_card_day(frame: pd.DataFrame) -> pd.Series:
    """Share of card-days by ``card_day_trips`` (a card-day of k trips has k rows)."""
    per_day = frame["card_day_trips"].value_counts() / frame["card_day_trips"].value_counts().index.to_series()
    return (per_day / per_day.sum()).sort_index()


def od_top100(true: pd.DataFrame, synthetic: pd.DataFrame) -> dict:
    """Agreement on the 100 most frequent true (mode, on, off) pairs (module docstring)."""
    keys = ["mode", "on_district", "off_district"]
    p = true.groupby(keys).size() / len(true)
    q = synthetic.groupby(keys).size() / max(len(synthetic), 1)
    top = p.sort_values(ascending=False).index[:100]
    q_top = q.reindex(top, fill_value=0.0)
    return {"true_share": float(p[top].sum()), "synthetic_share": float(q_top.sum()),
            "l1_on_top100": float((p[top] - q_top).abs().sum())}


def one_way_baseline(true_bounded: Mapping[str, pd.DataFrame], epsilon: float, delta: float,
                     bounds: ContributionBounds, noise: DiscreteGaussian, rng: np.random.Generator) -> pd.DataFrame:
    """Independent one-way marginals at the same budget (module docstring). ``true_bounded``: per date, the
    ``features`` of the bounded trips (at most m per card-day, date codes as in the true frame)."""
    columns = [c for c in COLUMNS if c != "date"]
    days = bounds.days(len(true_bounded))
    m = bounds.max_trips_per_card_day
    sigma = sigma_for(zcdp_rho_for(epsilon, delta) / len(columns), days * m * m)
    out = []
    for frame in true_bounded.values():
        day = {}
        for c in columns:
            size = {"hour": HOURS, "card_day_trips": m + 1}.get(c, int(frame[c].max()) + 1 if len(frame) else 1)
            size = max(size, int(frame[c].max()) + 1 if len(frame) else 1)
            noisy = np.bincount(frame[c].to_numpy(), minlength=size) + noise.sample(sigma, size)
            day[c] = np.clip(noisy, 0, None).astype(float)
        n = int(max(np.mean([v.sum() for v in day.values()]), 0))
        sampled = {c: rng.choice(len(w), size=n, p=w / w.sum()) if w.sum() > 0 else np.zeros(n, np.int64)
                   for c, w in day.items()}
        date = int(frame["date"].iloc[0]) if len(frame) else 0
        out.append(pd.DataFrame({"date": np.full(n, date, dtype=np.int64), **sampled}))
    return pd.concat(out, ignore_index=True)[list(COLUMNS)]


def sbh_baseline(bounded: Mapping[str, pd.DataFrame], epsilon: float, delta: float, bounds: ContributionBounds,
                 stops: pd.DataFrame, first_date: str, rng: np.random.Generator,
                 noise: DiscreteGaussian | None = None) -> pd.DataFrame:
    """Trips drawn from our card_period marginal release at the same budget (module docstring).
    ``bounded``: per date, the bounded trips (``BinnedTrips``, as ``prep.bounding.bound_day`` keeps them)."""
    from opal_dp.release.marginals import MARGINALS

    period = tuple(sorted(bounded))
    weights = {m.name: m.default_epsilon for m in MARGINALS}
    total = math.fsum(weights.values())
    plan = build_plan(PrivacyUnit.CARD_PERIOD, {k: epsilon * v / total for k, v in weights.items()},
                      {k: delta / len(weights) for k in weights}, bounds=bounds, period=period, gaussian=noise)
    dist = districts(stops, location_labels(stops))
    out = []
    for day, trips in bounded.items():
        date_code = (pd.Timestamp(day) - pd.Timestamp(first_date)).days
        for code, mode in enumerate(MODES):
            part = trips[trips["mode"] == mode]
            if part.empty:
                continue
            drawn = {}
            for tap in ("on", "off"):
                name = f"tap_{tap}_time_loc"
                truth = histograms(part.drop(columns="mode"), [BY_NAME[name]])[name]
                released = plan.mechanisms[name].release(truth[COUNT].to_numpy("int64"))
                drawn[tap] = truth.assign(**{COUNT: np.clip(released, 0, None)})
            n = int(drawn["on"][COUNT].sum())
            if n == 0:
                continue
            rows = {}
            for tap, frame in drawn.items():
                w = frame[COUNT].to_numpy(float)
                pick = frame.iloc[rng.choice(len(frame), size=n, p=w / w.sum())] if w.sum() > 0 else None
                rows[tap] = pick
            on = rows["on"]
            hour = on[BY_NAME["tap_on_time_loc"].dimensions[0]].to_numpy(np.int64) // 4
            on_d = dist.lookup[code, on[BY_NAME["tap_on_time_loc"].dimensions[1]].cat.codes.to_numpy(np.int64)]
            if rows["off"] is None:
                off_d = np.full(n, dist.none)
            else:
                off = rows["off"]
                window = off[BY_NAME["tap_off_time_loc"].dimensions[0]].to_numpy(np.int64)
                loc = dist.lookup[code, off[BY_NAME["tap_off_time_loc"].dimensions[1]].cat.codes.to_numpy(np.int64)]
                off_d = np.where(window < 0, dist.none, loc)
            trips_k = rng.choice(list(SBH_TRIPS_PRIOR), size=n, p=list(SBH_TRIPS_PRIOR.values()))
            out.append(pd.DataFrame({"date": date_code, "mode": code, "hour": hour, "on_district": on_d,
                                     "off_district": off_d, "card_day_trips": np.minimum(trips_k, bounds.max_trips_per_card_day)}))
    return pd.concat(out, ignore_index=True)[list(COLUMNS)]
