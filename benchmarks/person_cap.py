"""Utility under a person cap: what a weekly card-level release can publish when one person's loss over a year of
52 weekly releases must stay within an annual cap.

Two parts.

- Budget (``weekly_budget``): for an annual cap (epsilon, delta), the largest nominal per-week epsilon E such that
  52 weekly releases, each one ``card_period`` scope of 7 days (every person is in all 52), composed by the
  ledger's accountant (``core.accounting.compose``) stay within the cap. The weekly costs are those of the
  release plan itself (``build_plan``: one cost per marginal), so the figure is what the ledger would charge.
  A weekly release may also publish one OD tree per date (pure epsilon per card-day, 7 a week): ``od_epsilon``
  adds them to the composition.
- Utility (``measure``): at each weekly budget, the six marginals of one week drawn in memory with production
  noise (``reports.design_comparison.release_in_memory``: nothing charged, nothing stored; internal, never
  published, not DP), compared with the true time x location cells of both taps (truth before bounding, so
  the bounding bias counts): share of trips in released cells, weighted relative error
  (sum |released - true| / sum true over released cells) and median relative error on released cells with a
  true count >= 100. ``bins="hour-district"`` repeats the release on coarser cells (1-hour windows; the first
  three digits of the postcode instead of the stop or postcode), to measure what coarser bins buy.

``python -m benchmarks.person_cap --scale 1.0 --out DIR`` (the week is generated into ``DIR/raw`` unless
``--raw`` names existing daily files).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.core.accounting import PrivacyCost, compose
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import bin_trips, split_by_mode, stop_labels
from opal_dp.prep.bounding import CARD, bound_day, select_card_days
from opal_dp.prep.ingest import ingest_file, raw_files
from opal_dp.prep.schemas import UNKNOWN_LABEL, WINDOW_MINUTES
from opal_dp.release.marginals.plan import ReleasePlan, build_plan
from opal_dp.release.marginals.public_domain import OTHER
from opal_dp.release.marginals.schemas import OTHER_WINDOW
from opal_dp.release.marginals.tables import COUNT, LOC, TAPS, TIME, histograms, true_cells
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.share import split, scope_delta, share_epsilon
from opal_dp.reports.design_comparison import _plain, release_in_memory  # _plain: loc as text, to merge on
from opal_dp.reports.unit_comparison import LARGE
from opal_dp.release.periods import Periods

START = "2016-07-25"
WEEK_DAYS = 7
WEEKS = 52
CAPS = (10.0, 20.0, 50.0)
CAP_DELTA = 1e-6
WEEK_DELTA = scope_delta(CAP_DELTA, WEEKS)
"""Nominal delta of one weekly release: half of the annual delta goes to the 52 releases' own delta (threshold
events, per-release conversion), half is left to the composition across weeks."""
EIE_EPSILON = 2.0  # Google's Environmental Insights Explorer: about epsilon 2 per user-week
EIE_DELTA = CAP_DELTA / WEEKS  # a year of such weeks adds up to the annual delta 1e-6
OD_EPSILONS = (0.0, 0.05, 0.1)  # per-date OD tree epsilon folded into the weekly budget
MECHANISMS = ((Mechanism.GAUSSIAN, Design.SBH), (Mechanism.GAUSSIAN, Design.PUBLIC_DOMAIN),
              (Mechanism.LAPLACE, Design.SBH))
FINE, HOUR_STOP, HOUR_DISTRICT = "15min-stop", "hour-stop", "hour-district"
COARSE = (HOUR_STOP, HOUR_DISTRICT)
HOUR = 60 // WINDOW_MINUTES


@dataclass(frozen=True)
class Config:
    """One measured release: weekly budget, mechanism, design, contribution bounds and bins."""

    budget: str  # what the budget is: "cap 20", "EIE"
    epsilon: float  # nominal per-week epsilon
    delta: float  # nominal per-week delta
    mechanism: Mechanism
    design: Design
    bounds: ContributionBounds
    bins: str = FINE

    def label(self) -> dict:
        return {"budget": self.budget, "week_epsilon": self.epsilon, "scope_delta": self.delta,
                "mechanism": self.mechanism.value, "design": self.design.value,
                "max_trips_per_card_day": self.bounds.max_trips_per_card_day,
                "max_days_per_card": self.bounds.days(WEEK_DAYS), "max_per_bin": self.bounds.per_bin,
                "bins": self.bins}


def week(start: str = START) -> tuple[str, ...]:
    first = date.fromisoformat(start)
    return tuple((first + timedelta(days=i)).isoformat() for i in range(WEEK_DAYS))


def weekly_plan(epsilon: float, delta: float, mechanism: Mechanism, design: Design, bounds: ContributionBounds,
                period: tuple[str, ...], stops: pd.DataFrame) -> ReleasePlan:
    eps, dlt = split(epsilon, delta)
    return build_plan(PrivacyUnit.CARD_PERIOD, eps, dlt, mechanism=mechanism, design=design, bounds=bounds,
                      periods=Periods(period), stops=stops)


def weekly_costs(plan: ReleasePlan) -> list[PrivacyCost]:
    """What one weekly release of the six marginals charges each card (one cost per marginal)."""
    return [mechanism.cost() for mechanism in plan.mechanisms.values()]


def week_trees(od_epsilon: float) -> list[PrivacyCost]:
    """One pure-DP OD tree per date of a week at ``od_epsilon`` (none if 0)."""
    return [PrivacyCost.approx_dp(od_epsilon, 0.0)] * WEEK_DAYS if od_epsilon > 0 else []


def year_costs(scope_costs: Sequence[PrivacyCost], od_epsilon: float = 0.0) -> list[PrivacyCost]:
    """52 weeks of ``scope_costs``, plus the week's OD trees at ``od_epsilon``."""
    return [*scope_costs, *week_trees(od_epsilon)] * WEEKS


def weekly_budget(cap_epsilon: float, mechanism: Mechanism, design: Design, od_epsilon: float = 0.0,
                  cap_delta: float = CAP_DELTA) -> float:
    """The largest nominal per-week epsilon whose 52 weekly releases (and OD trees) compose within the cap: the
    production share (``release.share.share_epsilon``) over a year of 52 weeks; 0 when the OD trees alone
    exceed it."""
    try:
        return share_epsilon(cap_epsilon, cap_delta, WEEKS, mechanism, design, others=tuple(week_trees(od_epsilon)))
    except ValueError:
        return 0.0


def annual(scope_costs: Sequence[PrivacyCost], od_epsilon: float = 0.0, cap_delta: float = CAP_DELTA) -> float:
    """One person's epsilon at ``cap_delta`` over 52 weeks of ``scope_costs`` (and OD trees)."""
    return compose(year_costs(scope_costs, od_epsilon), delta_target=cap_delta).epsilon


def week_rho(epsilon: float, mechanism: Mechanism, design: Design, stops: pd.DataFrame) -> float:
    """The total rho one weekly release at nominal ``epsilon`` spends (0 for Laplace): what sets the noise."""
    if epsilon == 0:
        return 0.0
    plan = weekly_plan(epsilon, WEEK_DELTA, mechanism, design, ContributionBounds(1, 1, 1), week(),
                       stops.groupby("mode", observed=True).head(1))
    return math.fsum(c.rho for c in weekly_costs(plan))


def budget_table(stops: pd.DataFrame, caps: Sequence[float] = CAPS,
                 od_epsilons: Sequence[float] = OD_EPSILONS) -> pd.DataFrame:
    """Per cap, mechanism and OD share: the per-week budget, what it gives the time x location marginals
    (epsilon, or rho for zCDP), and the annual epsilon the OD trees alone would cost."""
    rows = []
    for cap in caps:
        for mechanism, design in MECHANISMS:
            for od in od_epsilons:
                epsilon = weekly_budget(cap, mechanism, design, od)
                rows.append({"cap_epsilon": cap, "cap_delta": CAP_DELTA, "mechanism": mechanism.value,
                             "design": design.value, "od_epsilon_per_date": od, "week_epsilon": epsilon,
                             "scope_delta": WEEK_DELTA, "week_rho": week_rho(epsilon, mechanism, design, stops),
                             "od_alone_annual_epsilon": annual([], od) if od else 0.0})
    return pd.DataFrame(rows)


def configs(budgets: Mapping[str, tuple[float, float]], mechanism: Mechanism, design: Design,
            bounds: Iterable[ContributionBounds], coarse_bounds: Iterable[ContributionBounds] = ()) -> list[Config]:
    """Every (budget, bounds) on the production bins, and on the coarse bins at ``coarse_bounds`` (SBH only: the
    public-domain design's domains are the stops')."""
    out = [Config(name, eps, dlt, mechanism, design, b) for name, (eps, dlt) in budgets.items() for b in bounds]
    return out + [Config(name, eps, dlt, mechanism, design, b, bins)
                  for bins in COARSE for name, (eps, dlt) in budgets.items() for b in coarse_bounds]


class Tally:
    """The figures of one configuration, accumulated one partition and tap at a time (module docstring)."""

    def __init__(self) -> None:
        self.trips = {tap: 0 for tap in TAPS}
        self.in_released = {tap: 0 for tap in TAPS}
        self.abs_error = {tap: 0 for tap in TAPS}
        self.cells = {tap: 0 for tap in TAPS}
        self.errors: dict[str, list[np.ndarray]] = {tap: [] for tap in TAPS}
        self.dropped = self.rows = 0

    def add(self, tap: str, truth: pd.DataFrame, released: pd.DataFrame) -> None:
        """``truth``: the tap's true cells (time, loc as text, count before bounding); ``released``: the tap's
        time x location table as published (remainder rows of the public-domain design left out)."""
        listed = _plain(released)
        listed = listed.loc[(listed[TIME] != OTHER_WINDOW) & (listed[LOC] != OTHER) & (listed[COUNT] > 0)]
        both = listed.merge(truth, on=[TIME, LOC], how="left", suffixes=("", "_true"), validate="1:1")
        true = both[f"{COUNT}_true"].fillna(0).to_numpy("int64")
        out = both[COUNT].to_numpy("int64")
        self.trips[tap] += int(truth[COUNT].sum())
        self.in_released[tap] += int(true.sum())
        self.abs_error[tap] += int(np.abs(out - true).sum())
        self.cells[tap] += len(both)
        large = true >= LARGE
        self.errors[tap].append(np.abs(out[large] - true[large]) / true[large])

    def figures(self) -> dict:
        out = {}
        for tap in TAPS:
            errors = np.concatenate(self.errors[tap]) if self.errors[tap] else np.zeros(0)
            inside = self.in_released[tap]
            out.update({
                f"{tap}_share_in_released": inside / self.trips[tap] if self.trips[tap] else math.nan,
                f"{tap}_weighted_rel_error": self.abs_error[tap] / inside if inside else math.nan,
                f"{tap}_median_rel_error_100": float(np.median(errors)) if errors.size else math.nan,
                f"{tap}_released_cells": self.cells[tap],
            })
        out["share_dropped_by_bounding"] = self.dropped / self.rows if self.rows else 0.0
        return out


def district_map(stops: pd.DataFrame) -> dict[str, str]:
    """Published location label -> its district: the first three digits of the stop's postcode (Australian
    postcodes are allocated by area, so a prefix groups neighbouring suburbs)."""
    postcode = stops["postcode"].astype(str).str.slice(0, 3).to_numpy()
    labels = stop_labels(stops).to_numpy()
    mapping = dict(zip(labels, postcode, strict=True))
    mapping[UNKNOWN_LABEL] = UNKNOWN_LABEL
    return mapping


def coarsen(binned: pd.DataFrame, districts: Mapping[str, str] | None) -> pd.DataFrame:
    """The same trips on coarse bins: 1-hour windows (an hour's first window), and districts if given."""
    out = binned.copy()
    for tap in TAPS:
        window = out[f"tap_{tap}_window"].to_numpy()
        out[f"tap_{tap}_window"] = np.where(window >= 0, window - window % HOUR, window).astype(window.dtype)
        if districts is None:
            continue
        loc = out[f"tap_{tap}_loc"]
        out[f"tap_{tap}_loc"] = pd.Categorical(loc.astype(str).map(districts),
                                               categories=sorted(set(districts.values())))
    return out


def load_week(raw_dir: Path, stops: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The week's binned trips with card ids, by service date."""
    return {day: bin_trips(ingest_file(path, stops).accepted, stops) for day, path in raw_files(raw_dir).items()}


def kept_cards(days: Mapping[str, pd.DataFrame], max_days: int, key: bytes) -> dict[str, np.ndarray]:
    """For a day cap: per date, the sorted card ids for which this date is one of their kept days."""
    card_days = pd.concat([pd.DataFrame({CARD: np.unique(trips[CARD].to_numpy(np.int64)), "date": day})
                           for day, trips in days.items()], ignore_index=True)
    chosen = select_card_days(card_days, max_days, key)
    return {day: np.sort(chosen.loc[chosen["date"] == day, CARD].to_numpy(np.int64)) for day in days}


def measure(days: Mapping[str, pd.DataFrame], wanted: Sequence[Config], stops: pd.DataFrame,
            key: bytes) -> pd.DataFrame:
    """One row per configuration (module docstring); bounding is done once per (bins, bounds)."""
    period = tuple(sorted(days))
    plans = {c: weekly_plan(c.epsilon, c.delta, c.mechanism, c.design, c.bounds, period, stops) for c in wanted}
    tallies = {c: Tally() for c in wanted}
    districts = district_map(stops)
    groups: dict[tuple[str, ContributionBounds], list[Config]] = {}
    for c in wanted:
        groups.setdefault((c.bins, c.bounds), []).append(c)
    for (bins, bounds), members in groups.items():
        cards = (kept_cards(days, bounds.max_days_per_card, key)
                 if bounds.days(len(period)) < len(period) else {})
        for day in period:
            trips = days[day] if bins == FINE else coarsen(days[day], districts if bins == HOUR_DISTRICT else None)
            bounded = bound_day(trips, date.fromisoformat(day), PrivacyUnit.CARD_PERIOD, bounds, key, cards.get(day))
            for c in members:
                tallies[c].dropped += len(bounded.over_bound)
                tallies[c].rows += len(trips)
            for mode in MODES:
                partition = split_by_mode(bounded.kept, mode)
                cells = true_cells(histograms(partition), split_by_mode(bounded.over_bound, mode))
                truth = {tap: _plain(cells.loc[cells["tap"] == tap]) for tap in TAPS}
                for c in members:
                    released = release_in_memory(partition, plans[c], mode)
                    for tap in TAPS:
                        tallies[c].add(tap, truth[tap], released[f"tap_{tap}_time_loc"])
            print(f"{bins} {bounds.max_trips_per_card_day}/{bounds.days(len(period))} {day} done", file=sys.stderr)
    return pd.DataFrame([{**c.label(), **tallies[c].figures()} for c in wanted])


def measured_budgets(budgets: pd.DataFrame, mechanism: Mechanism, design: Design) -> dict[str, tuple[float, float]]:
    """The budgets the utility is measured at: each cap's per-week budget for the marginals alone (no OD share),
    plus the EIE point (but not for Laplace, whose year of EIE weeks is far over every cap)."""
    mine = budgets.loc[(budgets["mechanism"] == mechanism.value) & (budgets["design"] == design.value)
                       & (budgets["od_epsilon_per_date"] == 0)]
    out = {f"cap {r.cap_epsilon:g}": (r.week_epsilon, WEEK_DELTA) for r in mine.itertuples()}
    if mechanism is Mechanism.GAUSSIAN:
        out["EIE"] = (EIE_EPSILON, EIE_DELTA)
    return out


def week_arguments(parser: argparse.ArgumentParser, outputs: str) -> None:
    """The options of a benchmark of one week: ``--scale``, ``--out`` (for ``outputs``) and ``--raw``."""
    parser.add_argument("--scale", type=float, default=1.0, help="volume of the generated week (1.0: about 14 M trips)")
    parser.add_argument("--out", type=Path, required=True, help=f"directory for {outputs}")
    parser.add_argument("--raw", type=Path, help="existing daily raw files of one week (default: generate into OUT/raw)")


def week_raw(args: argparse.Namespace) -> Path:
    """The week's raw files: ``--raw``, or generated into ``OUT/raw`` at ``--scale`` unless already there."""
    raw_dir = args.raw or args.out / "raw"
    if args.raw is None and not any(raw_dir.glob("trips_*")):
        generate(raw_dir, args.scale)
    return raw_dir


def generate(raw_dir: Path, scale: float, start: str = START) -> None:
    """One week of synthetic trips into ``raw_dir`` (a subprocess, as ``benchmarks.dataset`` does)."""
    done = subprocess.run([sys.executable, "-m", "opal_dp.simulate", "--scale", str(scale), "--start", start,
                           "--days", str(WEEK_DAYS), "--out", str(raw_dir)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the synthetic generator failed (exit {done.returncode}):\n{done.stderr[-4000:]}")


def parse_bounds(text: str) -> list[ContributionBounds]:
    """``"2x5,3x5,4x7x2"``: max trips per card-day x max days per card (of the 7) [x max trips per bin, default 1]."""
    out = []
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        trips, days, *per_bin = (int(v) for v in piece.split("x"))
        out.append(ContributionBounds(max_trips_per_card_day=trips, max_days_per_card=days,
                                      max_per_bin=per_bin[0] if per_bin else 1))
    return out


def markdown(result: dict) -> str:
    """The RESULTS.md section: budgets, then utility."""
    budgets = pd.DataFrame(result["budgets"])
    lines = ["## Utility under a person cap", "", f"`{result['command']}` ({result['trips']:,} trips in "
             f"{WEEK_DAYS} days, scale {result['scale']:g}; measured in {result['seconds']:.0f} s).", "",
             "### Per-week budget that 52 weekly card_period releases allow (composed by `core.accounting.compose`)",
             "", "| annual cap ε (δ 1e-6) | mechanism | design | OD ε per date | per-week ε (δ "
             f"{WEEK_DELTA:.1e}) | per-week ρ | OD trees alone, annual ε |", "|---|---|---|---|---|---|---|"]
    for r in budgets.itertuples():
        lines.append(f"| {r.cap_epsilon:g} | {r.mechanism} | {r.design} | {r.od_epsilon_per_date:g} | "
                     f"{r.week_epsilon:.3f} | {r.week_rho:.4f} | {r.od_alone_annual_epsilon:.2f} |")
    lines += ["", f"EIE point: ε {EIE_EPSILON:g} per card-week at δ {EIE_DELTA:.2e} composes over 52 weeks to "
              + ", ".join(f"ε {v:.1f} ({k})" for k, v in result["eie_annual"].items()) + " at δ 1e-6.", "",
              "### Weekly release in memory against the truth (internal, not DP)", "",
              "Time x location cells per (date, mode); released cells only; truth before bounding.", "",
              "| budget | week ε | mechanism | design | bins | trips/card-day | days/card | trips/bin | tap-on trips in released "
              "cells | tap-on weighted rel. error | tap-on median rel. error (≥100) | tap-off trips in released cells"
              " | tap-off weighted rel. error | dropped by bounding |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in pd.DataFrame(result["utility"]).itertuples():
        lines.append(f"| {r.budget} | {r.week_epsilon:.3f} | {r.mechanism} | {r.design} | {r.bins} | "
                     f"{r.max_trips_per_card_day} | {r.max_days_per_card} | {r.max_per_bin} | {r.on_share_in_released:.3f} | "
                     f"{r.on_weighted_rel_error:.4f} | {r.on_median_rel_error_100:.4f} | "
                     f"{r.off_share_in_released:.3f} | {r.off_weighted_rel_error:.4f} | "
                     f"{r.share_dropped_by_bounding:.2%} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.person_cap", description=__doc__.split("\n\n")[0])
    week_arguments(parser, "person_cap.json and person_cap.md")
    parser.add_argument("--bounds", default="2x3,2x5,3x5,4x5,3x7", help="trips per card-day x days per card, comma-separated")
    parser.add_argument("--pd-bounds", default="3x5", help="bounds at which the public-domain design and Laplace run")
    parser.add_argument("--coarse-bounds", default="2x5,3x5", help="bounds of the coarse-bin runs (Gaussian SBH)")
    parser.add_argument("--od-epsilons", default=",".join(f"{e:g}" for e in OD_EPSILONS),
                        help="per-date OD tree epsilons folded into the budget table")
    parser.add_argument("--caps", default=",".join(f"{c:g}" for c in CAPS), help="annual person caps (epsilon)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    stops = load_stops()
    raw_dir = week_raw(args)
    caps = [float(c) for c in args.caps.split(",")]
    budgets = budget_table(stops, caps, [float(e) for e in args.od_epsilons.split(",")])
    bounds = {(Mechanism.GAUSSIAN, Design.SBH): (args.bounds, args.coarse_bounds),
              (Mechanism.GAUSSIAN, Design.PUBLIC_DOMAIN): (args.pd_bounds, ""),
              (Mechanism.LAPLACE, Design.SBH): (args.pd_bounds, "")}
    wanted = [c for (mechanism, design), (fine, coarse) in bounds.items()
              for c in configs(measured_budgets(budgets, mechanism, design), mechanism, design,
                               parse_bounds(fine), parse_bounds(coarse))]
    days = load_week(raw_dir, stops)
    trips = sum(len(t) for t in days.values())
    utility = measure(days, wanted, stops, os.urandom(32))
    eie = {f"{m.value} {d.value}": annual(weekly_costs(weekly_plan(EIE_EPSILON, EIE_DELTA, m, d, ContributionBounds(),
                                                                    week(), stops)))
           for m, d in MECHANISMS}
    command = " ".join(["python -m benchmarks.person_cap", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": command, "scale": args.scale, "trips": trips, "seconds": time.perf_counter() - started,
              "budgets": budgets.to_dict(orient="records"), "eie_annual": eie,
              "utility": utility.to_dict(orient="records")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "person_cap.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (args.out / "person_cap.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
