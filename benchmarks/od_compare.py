"""Hierarchical OD release vs InfTDA vs today's prefix-tree ``od.csv``, on the same trips and budget per card-day
(``python -m benchmarks.od --compare``).

Input per day: the card-day sequences the pipeline stores (every trip of a card-day in tap-on order, truncated
to ``h`` trips). The truth is their location-pair counts (every trip of the first ``h``).

- ``hierarchy`` (``release.od.hierarchy``): rho per date, shares ``SHARES``, at most ``h`` trips per card-day and
  2 (``od_hierarchy_max_per_pair``'s default) in one location pair, threshold from the noise scale;
  ``hierarchy_1`` with at most 1 per pair (location sensitivity ``h`` instead of ``2h``, but out-and-back trips
  within one postcode are cut); ``hierarchy_h`` without a pair bound (``h²``: sigma twice ``hierarchy_1``'s).
- ``inftda`` (``inf-tda`` 0.1, Boninsegna & Silvestri 2024): the same counts, no pair bound, over the same public
  domain as a Series indexed (mode, district pair, location pair), three levels at rho/3 each (its design), the
  (epsilon, delta) handed to it chosen so that its ``get_rho_from_budget`` gives our rho. Its sensitivity is one
  number for every level: ``h`` under add/remove (all of a card-day's trips in one mode / district pair), which
  the package cannot state itself (its ``unbounded`` case raises), so the benchmark sets it. It releases the
  grand total of the date exactly (no noise): a small advantage, stated.
- ``tree``: today's hybrid prefix tree at pure epsilon ``sqrt(2 rho)`` (epsilon-DP implies epsilon²/2-zCDP, so the
  tree spends at most the same rho), ``od_counts`` per trip symbol.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core.hierarchy import HierarchyBudget
from opal_dp.core.prefix_tree import Taxonomy
from opal_dp.network import load_stops
from opal_dp.prep.binning import bin_trips
from opal_dp.prep.ingest import ingest_file
from opal_dp.prep.sequences import TripAlphabet, card_day_sequences
from opal_dp.release.od.hierarchy import FALSE_CELLS, SHARES, OdDomain, tau_for
from opal_dp.reports.od_hierarchy_evaluation import (
    LevelCounts,
    evaluate,
    hierarchy_counts,
    scatter_points,
    tree_counts,
    true_vs_released_plot,
    truth_counts,
)

VARIANTS = {"hierarchy": 2, "hierarchy_1": 1, "hierarchy_h": None}
"""Hierarchy variants: trips of one card-day kept per location pair (None: ``h``, no bound)."""
METHODS = (*VARIANTS, "inftda", "tree")
INFTDA_DELTA = 1e-6  # only the key of InfTDA's (epsilon, delta) -> rho conversion; rho is what is compared


def inftda_epsilon(rho: float, delta: float = INFTDA_DELTA) -> float:
    """The epsilon for which ``InfTDA.differential_privacy.get_rho_from_budget((epsilon, delta))`` is ``rho``."""
    log = math.log(1 / delta)
    return log * ((1 + math.sqrt(rho / log)) ** 2 - 1)


class InfTda:
    """``inf_tda`` over the whole public domain of a date (module docstring)."""

    def __init__(self, domain: OdDomain, height: int) -> None:
        import InfTDA.mechanism as mechanism  # the bench extra: pip install -e .[bench]

        mechanism.get_sensitivity = lambda *_: float(height)  # add/remove, every level (module docstring)
        gaussian = mechanism.make_gaussian_noise  # OpenDP 0.16 reads atom_domain(T=int) as i32: hand it int32
        mechanism.make_gaussian_noise = lambda d_in, rho: (lambda m: lambda v: m(np.asarray(v, np.int32)))(
            gaussian(d_in, rho))
        self._run = mechanism.inf_tda
        keys, self._offsets = [], {}
        offset = 0
        for mode, dom in domain.modes.items():
            o, d = np.divmod(np.arange(dom.cells), len(dom.destinations))
            pair = dom.tree.parents[1]
            names = np.array([f"{a}>{b}" for a in dom.origin_districts for b in dom.destination_districts], object)
            cells = np.char.add(np.char.add(np.array(dom.origins)[o], ">"), np.array(dom.destinations)[d])
            keys.append(pd.MultiIndex.from_arrays([np.full(dom.cells, mode, object), names[pair], cells]))
            self._offsets[mode] = (offset, dom.cells)
            offset += dom.cells
        self.index = keys[0].append(keys[1:])

    def release(self, counts: dict[str, np.ndarray], rho: float) -> dict[str, np.ndarray]:
        values = np.concatenate([counts[m] for m in self._offsets]).astype(int)
        out = self._run(pd.Series(values, index=self.index), budget=(inftda_epsilon(rho), INFTDA_DELTA),
                        contribution=1, privacy_type="bounded")
        flat = np.zeros(len(self.index), dtype=np.int64)
        flat[self.index.get_indexer(out.index)] = out.to_numpy(np.int64)
        return {m: flat[start:start + size] for m, (start, size) in self._offsets.items()}


def projected_listed_share(truth: list[LevelCounts], days: int, scale: float, tau: int) -> float:
    """A projection, not a measurement: the share of trips in location pairs whose mean daily count over the run,
    scaled to scale 1.0 (``/ scale``), reaches ``tau``: what the listed share would be at scale 1.0 if every pair
    drew its mean and the noise were 0 (pairs near ``tau`` are listed about half of the time either way)."""
    finest = np.concatenate([t.finest for t in truth]).astype(np.float64)  # day by day, the same cells each day
    mean = finest.reshape(days, -1).sum(axis=0) / days / scale
    return float(mean[mean >= tau].sum() / mean.sum())


def run_compare(raw_dir: Path, *, rho: float = 0.5, height: int = 4, days: int | None = None,
                tree_epsilon: float | None = None, scale: float = 1.0) -> dict:
    """The comparison over the fortnight's days; ``tree_epsilon`` defaults to ``sqrt(2 rho)`` (module docstring);
    ``scale``: the fortnight's, for ``projected_listed_share``."""
    tree_epsilon = math.sqrt(2 * rho) if tree_epsilon is None else tree_epsilon
    stops = load_stops()
    alphabet = TripAlphabet.from_stops(stops)
    domain = OdDomain.from_stops(stops, alphabet)
    taxonomy = Taxonomy(alphabet.groups["first"].to_numpy(), alphabet.groups["size"].to_numpy())
    budgets = {name: HierarchyBudget(rho, SHARES, height, per_pair or height, FALSE_CELLS)
               for name, per_pair in VARIANTS.items()}
    taus = {name: tau_for(domain, b) for name, b in budgets.items()}
    inftda = InfTda(domain, height)
    truth, released, dropped = [], {m: [] for m in METHODS}, dict.fromkeys(VARIANTS, 0)
    seconds = dict.fromkeys(("hierarchy", "inftda", "tree"), 0.0)
    files = sorted(Path(raw_dir).glob("trips_*.parquet"))[:days]
    for path in files:
        seqs = card_day_sequences(bin_trips(ingest_file(path, stops).accepted, stops), alphabet, height)
        day_truth = truth_counts(domain, seqs)
        t0 = time.perf_counter()
        for name, budget in budgets.items():
            released[name] += hierarchy_counts(domain, seqs, budget, taus[name])
            kept = domain.counts(seqs, budget.max_per_cell)
            dropped[name] += sum(t.total for t in day_truth) - sum(int(c.sum()) for c in kept.values())
        t1 = time.perf_counter()
        for mode, counts in inftda.release(domain.counts(seqs, height), rho).items():
            released["inftda"].append(LevelCounts.from_finest(domain.modes[mode].tree, counts))
        t2 = time.perf_counter()
        released["tree"] += tree_counts(domain, seqs, taxonomy, tree_epsilon)
        t3 = time.perf_counter()
        truth += day_truth
        for method, start, end in (("hierarchy", t0, t1), ("inftda", t1, t2), ("tree", t2, t3)):  # both hierarchies
            seconds[method] += end - start
        print(f"  compare {path.stem}: {t1 - t0:.1f} / {t2 - t1:.1f} / {t3 - t2:.1f} s", file=sys.stderr)
    n_days = len(files)
    return {"rho": rho, "height": height, "tau": taus, "max_per_pair": {n: b.max_per_cell for n, b in budgets.items()},
            "sigmas": {name: list(b.sigmas) for name, b in budgets.items()}, "dropped_by_pair_bound": dropped,
            "tree_epsilon": tree_epsilon, "inftda_epsilon": inftda_epsilon(rho), "days": n_days,
            "trips": int(sum(t.total for t in truth)), "seconds": seconds,
            "methods": {m: evaluate(truth, released[m], n_days) for m in METHODS}, "scale": scale,
            "projected_listed_share_at_scale_1": {n: projected_listed_share(truth, n_days, scale, taus[n])
                                                  for n in VARIANTS},
            "points": {m: scatter_points(truth, released[m]) for m in METHODS}}


def compare_markdown(result: dict, command: str) -> str:
    rows = [("trips in listed location pairs", "listed_share", "{:.3f}"),
            ("trips accounted (listed + remainder)", "accounted_share", "{:.3f}"),
            ("median rel. error, pairs with true >= 200", "median_200", "{:.3f}"),
            ("p90 rel. error, true >= 200", "p90_200", "{:.3f}"),
            ("median rel. error, true >= 50", "median_50", "{:.3f}"),
            ("p90 rel. error, true >= 50", "p90_50", "{:.3f}"),
            ("weighted relative error (location pairs)", "weighted_relative_error", "{:.3f}"),
            ("false location pairs per day", "false_cells_per_day", "{:.1f}")]
    methods = result["methods"]
    lines = [f"## Hierarchical OD vs InfTDA vs prefix tree (issue 27), scale {result['scale']:g}", "", f"`{command}`", "",
             f"{result['days']} days, {result['trips']:,} trips (first {result['height']} per card-day; errors are "
             f"against all of them); budget per card-day: rho {result['rho']} for the hierarchy and InfTDA. "
             "Hierarchy variants (sigma of mode / district / location pairs, listing threshold, "
             "trips of a card-day kept per location pair, trips that bound drops): "
             + "; ".join(f"{n}: {', '.join(f'{s:.2f}' for s in result['sigmas'][n])}, tau {result['tau'][n]}, "
                         f"{result['max_per_pair'][n]} per pair, {result['dropped_by_pair_bound'][n]:,} dropped"
                         for n in VARIANTS)
             + f". InfTDA: every trip, rho/3 per level, sensitivity "
             f"{result['height']}, epsilon {result['inftda_epsilon']:.3f} at delta 1e-6 for its conversion; tree: "
             f"pure epsilon {result['tree_epsilon']:.3f}"
             + (", which implies rho" if result["tree_epsilon"] ** 2 / 2 <= result["rho"] * (1 + 1e-12) else "")
             + f". Pairs with true >= 200: "
             f"{methods['hierarchy']['cells_200']}, >= 50: {methods['hierarchy']['cells_50']}.", "",
             "| | " + " | ".join(METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for label, key, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(methods[m][key]) for m in METHODS) + " |")
    for level in ("mode", "district", "location"):
        lines.append(f"| max abs error, {level} level | "
                     + " | ".join(f"{methods[m]['max_abs_error'][level]:.0f}" for m in METHODS) + " |")
    projected = result["projected_listed_share_at_scale_1"]
    lines += ["", "Projection, not a measurement: share of trips in location pairs whose mean daily count over these "
              f"days, scaled to scale 1.0 (x {1 / result['scale']:g}), reaches the listing threshold: "
              + ", ".join(f"{n} {projected[n]:.3f}" for n in VARIANTS) + "."]
    seconds = result["seconds"]
    lines += ["", "Release time over all days (s): " + ", ".join(f"{m} {seconds[m]:.1f}" for m in seconds)
              + " (hierarchy: its three variants). True vs released per level: `od-compare.png`.", ""]
    return "\n".join(lines)


def write_compare(result: dict, command: str, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "od-compare.png").write_bytes(true_vs_released_plot(result["points"]))
    text = compare_markdown(result, command)
    (out / "OD-COMPARE.md").write_text(text)
    return text
