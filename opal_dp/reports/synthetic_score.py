"""Score synthetic trips as the NIST DeID2 challenge scored them, against the true trips and two baselines.

Rows compared (one per trip, raw input contract -> public coarsening): ``date``, ``mode``, tap-on ``hour``,
``on_district``, ``off_district`` (``release.synthetic.archetypes``) and ``card_day_trips`` (trips of the row's
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
  ``release.synthetic.queries``), discrete Gaussian of the same total rho split evenly, sampled
  independently;
- ``sbh``: our marginal release (``release.marginals.plan`` for ``card_period``, sbh design) of the bounded trips, and
  trips drawn from it: tap-on (window, location) from the tap-on time x location table, tap-off likewise
  and independently. It carries no card information: ``card_day_trips`` is drawn from the public prior
  ``SBH_TRIPS_PRIOR`` (most card-days are a return journey).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date

import numpy as np
import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.gaussian_threshold import sigma_for
from opal_dp.network import MODES
from opal_dp.prep.binning import bin_trips, location_labels, stop_labels
from opal_dp.prep.bounding import CARD, keep_mask
from opal_dp.release.synthetic.archetypes import HOURS, Districts, districts
from opal_dp.release.marginals.tables import BY_NAME, COUNT, MARGINALS, histograms
from opal_dp.release.marginals.plan import build_plan
from opal_dp.reports.plots import figure, png
from opal_dp.release.periods import Periods

COLUMNS = ("date", "mode", "hour", "on_district", "off_district", "card_day_trips")
SBH_TRIPS_PRIOR = {1: 0.25, 2: 0.55, 3: 0.1, 4: 0.1}


def features(trips: pd.DataFrame, stops: pd.DataFrame, max_trips: int, dates: Sequence[str],
             dist: Districts | None = None) -> pd.DataFrame:
    """Raw-contract trips (ingested or synthetic) -> the scored columns, small integer codes; ``date`` is the
    index of the tap-on date in ``dates`` (ISO, sorted)."""
    dist = dist or districts(stops, location_labels(stops))
    code = {label: i for i, label in enumerate(dist.labels)}
    stop_ids = stops["stop_id"].to_numpy(np.int64)
    stop_mode = np.array([MODES.index(m) for m in stops["mode"].astype(str)])
    stop_district = dist.lookup[stop_mode, [code[label] for label in stop_labels(stops).to_numpy()]]
    lookup = np.full(int(stop_ids.max()) + 1, -1, dtype=np.int64)
    lookup[stop_ids] = stop_district
    on_s = trips["tap_on_time"].to_numpy("datetime64[s]").astype(np.int64)
    off_stop = trips["tap_off_stop"].astype("Int64")
    off = np.where(off_stop.isna().to_numpy(), dist.none, lookup[off_stop.fillna(0).to_numpy(np.int64)])
    day = np.searchsorted(np.array(dates, dtype="datetime64[D]").astype(np.int64), on_s // 86_400)
    card = trips["card_id"].to_numpy(np.int64)
    order = np.lexsort((card, day))
    starts = np.flatnonzero(np.r_[True, (card[order][1:] != card[order][:-1]) | (day[order][1:] != day[order][:-1])])
    sizes = np.diff(np.r_[starts, len(card)])
    per_card_day = np.empty(len(card), dtype=np.int64)
    per_card_day[order] = np.repeat(sizes, sizes)  # trips of the row's (card, date)
    return pd.DataFrame({
        "date": day,
        "mode": pd.Categorical(trips["mode"], categories=list(MODES)).codes.astype(np.int64),
        "hour": on_s % 86_400 // 3600,
        "on_district": lookup[trips["tap_on_stop"].to_numpy(np.int64)],
        "off_district": off,
        "card_day_trips": np.minimum(per_card_day, max_trips),
    }).astype(np.int16)


def k_marginal(true: pd.DataFrame, synthetic: pd.DataFrame, k: int = 3) -> float:
    """The SDNist k-marginal score (module docstring) over every k-subset of ``COLUMNS``."""
    distances = [marginal_l1(true, synthetic, list(cols)) for cols in itertools.combinations(COLUMNS, k)]
    return 1000.0 - 500.0 * float(np.mean(distances))


def marginal_l1(true: pd.DataFrame, synthetic: pd.DataFrame, columns: Sequence[str]) -> float:
    """``sum |p - q|`` between the two normalised histograms over ``columns`` (2 if either is empty)."""
    if not len(true) or not len(synthetic):
        return 2.0
    size = [int(max(true[c].max(), synthetic[c].max())) + 1 for c in columns]
    p, q = (np.bincount(np.ravel_multi_index([f[c].to_numpy(np.int64) for c in columns], size),
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
            noisy = np.bincount(frame[c].to_numpy(np.int64), minlength=size) + noise.sample(sigma, size)
            day[c] = np.clip(noisy, 0, None).astype(float)
        day["card_day_trips"][0] = 0.0  # a card-day has at least one trip (public)
        n = int(max(np.mean([v.sum() for v in day.values()]), 0))
        sampled = {c: rng.choice(len(w), size=n, p=w / w.sum()) if w.sum() > 0 else np.zeros(n, np.int64)
                   for c, w in day.items()}
        date = int(frame["date"].iloc[0]) if len(frame) else 0
        out.append(pd.DataFrame({"date": np.full(n, date, dtype=np.int64), **sampled}))
    return pd.concat(out, ignore_index=True)[list(COLUMNS)]


def sbh_baseline(bounded: Mapping[str, pd.DataFrame], epsilon: float, delta: float, bounds: ContributionBounds,
                 stops: pd.DataFrame, dates: Sequence[str], rng: np.random.Generator,
                 noise: DiscreteGaussian | None = None) -> pd.DataFrame:
    """Trips drawn from our card_period marginal release at the same budget (module docstring).
    ``bounded``: per date, the bounded trips (``BinnedTrips``, as ``prep.bounding.bound_day`` keeps them)."""
    period = tuple(sorted(bounded))
    weights = {m.name: m.default_epsilon for m in MARGINALS}
    total = math.fsum(weights.values())
    plan = build_plan(PrivacyUnit.CARD_PERIOD, {k: epsilon * v / total for k, v in weights.items()},
                      {k: delta / len(weights) for k in weights}, bounds=bounds, periods=Periods(period), gaussian=noise)
    dist = districts(stops, location_labels(stops))
    out = []
    for day, trips in bounded.items():
        date_code = list(dates).index(day)
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
                                     "off_district": off_d,
                                     "card_day_trips": np.minimum(trips_k, bounds.max_trips_per_card_day)}))
    if not out:  # at a small budget and scale no released cell may survive its threshold: no rows
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in COLUMNS})
    return pd.concat(out, ignore_index=True)[list(COLUMNS)]


def card_day_shapes(trips: pd.DataFrame, stops: pd.DataFrame, dates: Sequence[str],
                    dist: Districts | None = None) -> pd.DataFrame:
    """Raw-contract trips -> one row per card-day: ``card_id``, ``date`` (ISO), ``week`` (its calendar week),
    ``trips`` and ``returns`` (1 if two or more trips and the last, in tap-on order, ends in the district where the
    first began: ``release.synthetic.archetypes.card_days``)."""
    scored = features(trips, stops, len(trips) + 1, dates, dist)
    frame = pd.DataFrame({"card_id": trips["card_id"].to_numpy(np.int64), "date": scored["date"].to_numpy(),
                          "on_s": trips["tap_on_time"].to_numpy("datetime64[s]").astype(np.int64),
                          "on": scored["on_district"].to_numpy(), "off": scored["off_district"].to_numpy()})
    frame = frame.sort_values(["card_id", "date", "on_s"], kind="stable")
    days = frame.groupby(["card_id", "date"], sort=False).agg(trips=("on", "size"), first_on=("on", "first"),
                                                              last_off=("off", "last")).reset_index()
    iso = np.array(dates)[days["date"].to_numpy()]
    return pd.DataFrame({"card_id": days["card_id"], "date": iso, "week": [Periods().name_of(d) for d in iso],
                         "trips": days["trips"],
                         "returns": ((days["trips"] >= 2) & (days["last_off"] == days["first_on"])).astype(np.int64)})


def travel_days_per_card(shapes: pd.DataFrame) -> pd.Series:
    """Per (card, calendar week): the number of dates the card travels on (``card_day_shapes`` rows)."""
    return shapes.groupby(["card_id", "week"]).size()


def period_scores(dates: Sequence[str], load: Callable[[str], pd.DataFrame], synthetic: pd.DataFrame,
                  stops: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Internal, NOT DP: the multi-day structure, true vs synthetic. Returns the distributions (``measure``:
    ``travel_days`` = share of (card, week) by dates travelled, ``returns`` = share of card-days of two or more
    trips that come back where they began, by ``value`` 0/1; columns ``true`` and ``synthetic``) and their L1
    distances (``travel_days_l1``, ``returns_l1``)."""
    dist = districts(stops, location_labels(stops))
    true = pd.concat([card_day_shapes(load(day), stops, dates, dist) for day in dates], ignore_index=True)
    shapes = {"true": true, "synthetic": card_day_shapes(synthetic, stops, dates, dist)}
    rows, l1 = [], {}
    for measure in ("travel_days", "returns"):
        shares = {}
        for name, frame in shapes.items():
            values = (travel_days_per_card(frame) if measure == "travel_days"
                      else frame.loc[frame["trips"] >= 2, "returns"])
            shares[name] = values.value_counts(normalize=True)
        table = pd.DataFrame(shares).fillna(0.0).sort_index().rename_axis("value").reset_index()
        l1[f"{measure}_l1"] = float((table["true"] - table["synthetic"]).abs().sum())
        rows.append(table.assign(measure=measure))
    return pd.concat(rows, ignore_index=True)[["measure", "value", "true", "synthetic"]], l1


def period_plot(distribution: pd.DataFrame, l1: Mapping[str, float]) -> bytes:
    """PNG: travel days per card-week and the return share of card-days, true vs synthetic."""
    fig, axes = figure(2, (10, 3.4))
    titles = {"travel_days": "share of cards (per week) by days travelled",
              "returns": "card-days of 2+ trips: 1 = last trip ends where the first began"}
    for ax, measure in zip(axes, titles):
        part = distribution[distribution["measure"] == measure]
        for i, column in enumerate(("true", "synthetic")):
            ax.bar(part["value"] + (i - 0.5) * 0.4, part[column], width=0.4, label=column)
        ax.set_xticks(part["value"])
        ax.set_title(f"{titles[measure]}\nL1 = {l1[measure + '_l1']:.3f}", fontsize=9)
        ax.legend(fontsize=7)
    return png(fig, "Internal, not DP: synthetic cards over the week vs the true cards")


METHODS = ("archetype_synthesizer", "one_way", "sbh")


Peers = Callable[[Mapping[str, pd.DataFrame]], Mapping[str, pd.DataFrame]]
"""More methods on the same bounded trips: {date: kept ``CardBinnedTrips``} -> {method: rows in ``COLUMNS``}."""


def evaluate(
    dates: Sequence[str], load: Callable[[str], pd.DataFrame], synthetic: pd.DataFrame, epsilon: float,
    delta: float, bounds: ContributionBounds, key: bytes, stops: pd.DataFrame, rng: np.random.Generator,
    peers: Peers | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Internal, NOT DP: the synthetic trips and both baselines (and ``peers``, if given, fitted on the same
    bounded trips) scored against the true trips.

    ``dates``: ISO, sorted; ``load(date)``: that date's ingested trips (private, one day in memory at a time);
    ``synthetic``: the synthetic rows of the same dates. Returns (scores: one row per method with ``k_marginal``
    (3-way), ``k_marginal_2way``, ``od_top100_l1`` and ``trips_per_card_day_l1``; the trips-per-card-day
    distribution by method, true included).
    """
    m = bounds.max_trips_per_card_day
    dist = districts(stops, location_labels(stops))
    true, kept_features, kept_binned, kept_cards = [], {}, {}, {}
    for day in dates:
        ingested = load(day)
        true.append(features(ingested, stops, m, dates, dist))
        binned = bin_trips(ingested, stops)
        keep = keep_mask(binned, date.fromisoformat(day), PrivacyUnit.CARD_PERIOD, bounds, key)
        kept_features[day] = features(ingested.loc[keep], stops, m, dates, dist)
        kept_binned[day] = binned.loc[keep].drop(columns=CARD)
        if peers is not None:
            kept_cards[day] = binned.loc[keep]
    truth = pd.concat(true, ignore_index=True)
    frames = {
        "archetype_synthesizer": features(synthetic, stops, m, dates, dist),
        "one_way": one_way_baseline(kept_features, epsilon, delta, bounds, DiscreteGaussian(), rng),
        "sbh": sbh_baseline(kept_binned, epsilon, delta, bounds, stops, dates, rng),
        **(peers(kept_cards) if peers is not None else {}),
    }
    shares = {"true": trips_per_card_day(truth), **{k: trips_per_card_day(v) for k, v in frames.items()}}
    distribution = pd.DataFrame(shares).fillna(0.0).rename_axis("card_day_trips").reset_index()
    rows = [{"method": name, "k_marginal": k_marginal(truth, frame), "k_marginal_2way": k_marginal(truth, frame, 2),
             "od_top100_l1": od_top100(truth, frame)["l1_on_top100"],
             "trips_per_card_day_l1": float((distribution[name] - distribution["true"]).abs().sum()),
             "rows": len(frame)} for name, frame in frames.items()]
    return pd.DataFrame(rows), distribution


def score_plot(scores: pd.DataFrame, distribution: pd.DataFrame) -> bytes:
    """PNG: k-marginal score per method; trips per card-day, true and by method."""
    fig, axes = figure(2, (10, 3.4))
    axes[0].bar(scores["method"], scores["k_marginal"], color="#1c7ed6")
    axes[0].axhline(800, color="#868e96", linestyle="--", linewidth=1)
    axes[0].set_ylim(0, 1000)
    axes[0].set_title("k-marginal score (3-way)")
    columns = [c for c in distribution.columns if c != "card_day_trips"]
    width = 0.8 / len(columns)
    for i, column in enumerate(columns):
        axes[1].bar(distribution["card_day_trips"] + (i - len(columns) / 2) * width, distribution[column],
                    width=width, label=column)
    axes[1].set_title("share of card-days by trips (m = m or more)")
    axes[1].legend(fontsize=7)
    return png(fig, "Internal, not DP: synthetic card-day trips vs the true trips")
