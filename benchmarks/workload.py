"""A planner's workload, scored: the time x location hierarchy against today's default (the thresholded Gaussian
per 2016 marginal, SBH) and the public-domain design, on the same week, the same bounds and the same budget.

Internal, never published, not DP: every release is drawn in memory with production noise and compared with the
truth before bounding (so the bounding bias counts). The budget is what the default release gives the six
marginals of one ``card_period`` week (``PrivacySettings`` defaults: the weekly share of the person cap beside the
OD hierarchy and the daily totals); the hierarchy gets the same zCDP ``rho`` (not their threshold deltas: it has
none).

Queries, answers and figures: ``opal_dp.reports.workload`` (the 2016 files read as a reader reads them). The
hierarchy is read from its levels instead: each class from the level that holds it (coarser classes summed from the
finest level that holds them: ``station_day`` from hour x location, ``district_day`` from hour x district).

``python -m benchmarks.workload --scale 1.0 --out DIR`` (the week is generated into ``DIR/raw`` unless ``--raw``
names existing daily files of one week).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import date

import numpy as np
import pandas as pd

from benchmarks.person_cap import kept_cards, load_week, week_arguments, week_raw
from opal_dp.core import PrivacyUnit
from opal_dp.core.totals import measure_totals
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import split_by_mode
from opal_dp.prep.bounding import bound_day
from opal_dp.prep.sequences import card_day_sequences, trip_alphabet
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.tables import TAPS
from opal_dp.release.marginals.time_loc_hierarchy import (FALSE_CELLS, LEVELS, SHARES, TreeRelease, period_budget,
                                                          release_period, time_loc_domains)
from opal_dp.release.marginals.time_loc_tables import open_data_blocks, resolution_rows
from opal_dp.release.od.hierarchy import hierarchy_budgets, od_domain
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import Periods
from opal_dp.release.settings import PrivacySettings
from opal_dp.reports.design_comparison import release_in_memory
from opal_dp.reports.plots import true_vs_released
from opal_dp.reports.workload import CLASSES, Score, query_answers, table_answers

DEFAULT, PUBLIC_DOMAIN = "default (sbh)", "public_domain"


def hierarchy_answers(release: TreeRelease) -> dict[str, np.ndarray]:
    """What a reader takes from the hierarchy's published rows (``time_loc_tables``), per class: the coarser
    resolutions' cells with rows of their own, and ``time-loc``'s listed cells (0 where a cell has no row)."""
    out = {c: cells for c, (cells, _, _) in resolution_rows(release).items()}
    out["window_station"] = np.concatenate([block.cells.ravel() for block in open_data_blocks(release)])
    return out


Levels = tuple[tuple[str, ...], tuple[float, ...]]  # a hierarchy's levels and their rho shares


def design_name(design: Levels) -> str:
    return " > ".join(f"{level} {share:g}" for level, share in zip(*design))


def published_totals(days: Mapping[str, pd.DataFrame], stops: pd.DataFrame, settings: PrivacySettings
                     ) -> dict[tuple[str, str], tuple[int, int]]:
    """The daily totals as the default release publishes them (``totals.csv``: the OD hierarchy's card-day sequences
    and their per-mode bound, production noise, floored at 0), for the hierarchy to be pinned to."""
    domain, (_, budget) = od_domain(stops), hierarchy_budgets(settings)
    out = {}
    for day, trips in days.items():
        truth = domain.totals(card_day_sequences(trips, trip_alphabet(stops), settings.od_height), budget.max_per_mode)
        for mode, counts in truth.items():
            out[day, mode] = tuple(max(0, int(n)) for n in measure_totals(counts, budget))
    return out


def measure(days: Mapping[str, pd.DataFrame], stops: pd.DataFrame, settings: PrivacySettings, key: bytes,
            designs: Sequence[Levels] = ((LEVELS, SHARES),), rho: float | None = None,
            false_cells: float = FALSE_CELLS, pinned: bool = False) -> tuple[pd.DataFrame, dict, dict]:
    """One row per (method, class, tap); the budgets used; and per method (the hierarchies and the default) and
    class, the tap-on (truth, answer) pairs of the listed queries (``true_vs_released``). ``rho``: the hierarchies'
    weekly rho instead of the default marginals' (what a larger share of the person cap would buy);
    ``false_cells``: the hierarchies' expected empty cells listed per level and period (a smaller figure lists
    fewer, larger cells); ``pinned``: the hierarchies pinned to the published daily totals (``published_totals``),
    as a release with the OD hierarchy pins them."""
    period = tuple(sorted(days))
    bounds = settings.bounds
    epsilon, delta = settings.budget()
    plans = {name: build_plan(PrivacyUnit.CARD_PERIOD, epsilon, delta, mechanism=Mechanism.GAUSSIAN, design=design,
                              bounds=bounds, periods=Periods(period), stops=stops)
             for name, design in ((DEFAULT, Design.SBH), (PUBLIC_DOMAIN, Design.PUBLIC_DOMAIN))}
    marginals_rho = math.fsum(m.cost().rho for m in plans[DEFAULT].mechanisms.values())
    rho = marginals_rho if rho is None else rho
    domains = time_loc_domains(stops)
    days_per_card = bounds.days(len(period))
    budgets = {design_name(d): (d[0], period_budget(rho, bounds, days_per_card, *d, false_cells)) for d in designs}
    scores = {(m, c, t): Score() for m in (*budgets, *plans) for c in CLASSES for t in TAPS}
    finest, truths = {}, {}
    cards = kept_cards(days, bounds.max_days_per_card, key) if days_per_card < len(period) else {}  # the day cap
    for day in period:
        bounded = bound_day(days[day], date.fromisoformat(day), PrivacyUnit.CARD_PERIOD, bounds, key, cards.get(day))
        for mode in MODES:
            kept, over = split_by_mode(bounded.kept, mode), split_by_mode(bounded.over_bound, mode)
            tables = {name: release_in_memory(kept, plan, mode) for name, plan in plans.items()}
            for tap in TAPS:
                dom = domains[mode, tap]
                cells = [dom.finest_counts(part[f"tap_{tap}_window"].to_numpy("int64"),
                                           part[f"tap_{tap}_loc"].astype(str).to_numpy(object))
                         for part in (kept, over)]
                finest[day, mode, tap] = cells[0]
                truths[day, mode, tap] = query_answers(cells[0] + cells[1], dom)
                for name, released in tables.items():
                    for c, answer in table_answers(released, tap, dom).items():
                        scores[name, c, tap].add(answer, truths[day, mode, tap][c])
        print(f"{day} done", file=sys.stderr)
    totals = published_totals(days, stops, settings) if pinned else None
    for name, (levels, budget) in budgets.items():
        for (day, mode, tap), release in release_period(period, finest, domains, budget, levels,
                                                         totals=totals).items():
            for c, answer in hierarchy_answers(release).items():
                scores[name, c, tap].add(answer, truths[day, mode, tap][c])
    rows = [{"method": m, "class": c, "tap": t, **s.figures()} for (m, c, t), s in scores.items()]
    points = {m: {c: np.concatenate(scores[m, c, "on"].points, axis=1) for c in CLASSES} for m in (*budgets, DEFAULT)}
    return pd.DataFrame(rows), {"rho": rho, "marginals_rho": marginals_rho,
                                **{name: b.describe() for name, (_, b) in budgets.items()}}, points


def markdown(result: dict) -> str:
    frame = pd.DataFrame(result["scores"])
    lines = ["## A planner's workload", "", f"`{result['command']}` ({result['trips']:,} trips in one week; "
             f"measured in {result['seconds']:.0f} s). Budget: the default release's marginals, rho "
             f"{result['budgets']['marginals_rho']:.4f} a week; the hierarchy: rho {result['budgets']['rho']:.4f}, "
             "delta 0. Tap-on. share: trips in the queries listed in rows of their own (a level of the hierarchy, a "
             "2016 file's rows) or, for a class summed from rows, answered above 0; wre: weighted relative error over "
             "them; median and p90: relative error over every query with truth >= 100 (unanswered: 1).", "",
             "| class | method | share | wre | median | p90 | queries >= 100 |",
             "|---|---|---|---|---|---|---|"]
    for c in CLASSES:
        for r in frame.loc[(frame["class"] == c) & (frame["tap"] == "on")].itertuples():
            lines.append(f"| {c} | {r.method} | {r.share:.3f} | {r.wre:.4f} | {r.median:.4f} | {r.p90:.4f} | "
                         f"{r.queries_100:,} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workload", description=__doc__.split("\n\n")[0])
    week_arguments(parser, "workload.json, workload.md and workload.png")
    parser.add_argument("--hierarchy", action="append", metavar="LEVEL=SHARE,...",
                        help="a hierarchy's levels, root first, each with its rho share (repeat to compare several; "
                        "default: " + ",".join(f"{level}={share:g}" for level, share in zip(LEVELS, SHARES)) + ")")
    parser.add_argument("--rho", type=float, help="the hierarchies' weekly rho (default: the default marginals')")
    parser.add_argument("--pinned", action="store_true",
                        help="pin the hierarchies to the published daily totals, as a release with the OD hierarchy "
                             "does (default: each tree's own measured root)")
    parser.add_argument("--false-cells", type=float, default=FALSE_CELLS,
                        help="the hierarchies' expected empty cells listed per level and week")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    stops = load_stops()
    days = load_week(week_raw(args), stops)
    designs = [tuple(zip(*((level, float(share)) for level, share in (p.split("=") for p in option.split(",")))))
               for option in args.hierarchy] if args.hierarchy else [(LEVELS, SHARES)]
    scores, budgets, points = measure(days, stops, PrivacySettings(), os.urandom(32), designs, args.rho,
                                      args.false_cells, args.pinned)
    command = " ".join(["python -m benchmarks.workload", *(argv if argv is not None else sys.argv[1:])])
    result = {"command": command, "scale": args.scale, "trips": sum(len(t) for t in days.values()),
              "seconds": time.perf_counter() - started, "budgets": budgets, "scores": scores.to_dict(orient="records")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "workload.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (args.out / "workload.md").write_text(markdown(result))
    rng = np.random.default_rng(0)  # at most 20,000 points a panel: the figure stays readable
    labels = {m: m if m == DEFAULT else f"hierarchy {i + 1}" for i, m in enumerate(points)}
    sampled = {labels[m]: {c: tuple(p[:, rng.permutation(p.shape[1])[:20_000]]) for c, p in by_class.items()}
               for m, by_class in points.items()}
    (args.out / "workload.png").write_bytes(true_vs_released(
        sampled, "Internal, not DP: a planner's queries, released (listed) against the truth, tap-on"))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
