"""``python -m benchmarks.od`` (or ``python -m benchmarks --od``): the OD prefix tree on a cached fortnight.

Build: per day, the card-day sequences from the binned trips (the assets' input), the noisy hybrid tree, inference
and od.csv rows, timed apart from the shared ingest and binning (which the pipeline runs for the marginals anyway);
peak RSS of this process. Evaluation (seed §5) on the first day: the paper's 40,000 count queries per budget and
query length, epsilon 0.5-1.5, heights 2, 4 and 6, hybrid vs plain tree, top-100 trip chains.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path


from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.network import load_stops
from opal_dp.prep.binning import bin_trips
from opal_dp.prep.ingest import ingest_file
from opal_dp.prep.sequences import TripAlphabet, card_day_sequences
from opal_dp.release.od.generate import consistent_tree, od_counts
from opal_dp.reports.od_evaluation import EPSILONS, evaluate

HEIGHTS = (2, 4, 6)
PAPER = ("Chen et al. (KDD 2012) on STM data, h = 12: worst case (epsilon 0.5, max |Q| = 3) average relative error "
         "< 8.2% on both datasets; hybrid granularity 33-48% below the plain tree.")


def run_od(raw_dir: Path, *, epsilon: float = 1.0, height: int = 4, queries: int = 40_000, evaluate_first: bool = True
           ) -> dict:
    stops = load_stops()
    alphabet = TripAlphabet.from_stops(stops)
    taxonomy = Taxonomy(alphabet.groups["first"].to_numpy(), alphabet.groups["size"].to_numpy())
    shared_s = build_s = 0.0
    days, first = [], None
    for path in sorted(Path(raw_dir).glob("trips_*.parquet")):
        t0 = time.perf_counter()
        binned = bin_trips(ingest_file(path, stops).accepted, stops)
        t1 = time.perf_counter()
        seqs = card_day_sequences(binned, alphabet, max(HEIGHTS) if first is None else height)
        tree = consistent_tree(build_noisy_prefix_tree(seqs[:, :height], taxonomy, TreeBudget(epsilon, height)))
        od = od_counts(tree, alphabet.symbols, path.stem)
        t2 = time.perf_counter()
        shared_s, build_s = shared_s + t1 - t0, build_s + t2 - t1
        days.append({"day": path.stem, "trips": len(binned), "card_days": len(seqs), "nodes": len(tree) - 1,
                     "od_rows": len(od), "od_trips": int(od["count"].sum()), "build_s": t2 - t1})
        first = seqs if first is None else first
        del binned
        print(f"  od {path.stem}: {t2 - t1:.1f} s", file=sys.stderr)
    out = {"epsilon": epsilon, "height": height, "days": days, "ingest_bin_s": shared_s, "build_s": build_s,
           "trips": sum(d["trips"] for d in days), "card_days": sum(d["card_days"] for d in days),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if evaluate_first and first is not None:
        t0 = time.perf_counter()
        table = evaluate(first, taxonomy, epsilons=EPSILONS, heights=HEIGHTS, queries=queries, k=100)
        out["evaluation"] = {"day": days[0]["day"], "queries": queries, "seconds": time.perf_counter() - t0,
                             "rows": table.to_dict(orient="records")}
    return out


def markdown(od: dict, command: str) -> str:
    lines = ["## OD prefix tree (issue 12)", "", f"`{command}`", "",
             f"Build from binned trips (card-day sequences, hybrid tree at epsilon {od['epsilon']}, h {od['height']}, "
             f"inference, od.csv rows), {len(od['days'])} days, {od['trips']:,} trips, {od['card_days']:,} card-days: "
             f"**{od['build_s']:.1f} s**; shared ingest + binning {od['ingest_bin_s']:.1f} s; peak RSS of the process "
             f"{od['peak_rss_bytes'] / 1e9:.2f} GB. Trips in od.csv / trips: "
             f"{sum(d['od_trips'] for d in od['days']) / od['trips']:.3f}.", ""]
    ev = od.get("evaluation")
    if ev:
        rows = ev["rows"]
        lines += [f"Evaluation on {ev['day']} ({ev['queries']:,} queries per cell, {ev['seconds']:.0f} s): average "
                  "relative error (sanity bound 0.1% of |D|), hybrid / plain, and top-100 true positives.", "",
                  "| h | max \\|Q\\| | " + " | ".join(f"eps {e}" for e in EPSILONS) + " |",
                  "|---|---|" + "---|" * len(EPSILONS)]
        for h in HEIGHTS:
            for n in sorted({r["max_query_length"] for r in rows if r["height"] == h}):
                cells = []
                for e in EPSILONS:
                    pick = {r["tree"]: r for r in rows if r["height"] == h and r["epsilon"] == e
                            and r["max_query_length"] == n}
                    cells.append(f"{pick['hybrid']['average_relative_error']:.4f} / "
                                 f"{pick['plain']['average_relative_error']:.4f}")
                lines.append(f"| {h} | {n} | " + " | ".join(cells) + " |")
        tp = [f"eps {r['epsilon']} h {r['height']}: {r['true_positives']} (hybrid)" for r in rows
              if r["tree"] == "hybrid" and r["max_query_length"] == 1]
        lines += ["", "Top-100 true positives: " + "; ".join(tp) + ".", "", f"Paper: {PAPER}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.dataset import ensure_fortnight
    from opal_dp.simulate.trips import DEFAULT_SEED

    parser = argparse.ArgumentParser(prog="python -m benchmarks.od", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=40_000)
    parser.add_argument("--compare", action="store_true",
                        help="only the hierarchical OD release vs InfTDA vs the tree's od.csv (benchmarks.od_compare)")
    parser.add_argument("--rho", type=float, default=0.5, help="--compare: the budget per card-day (zCDP)")
    parser.add_argument("--tree-epsilon", type=float, default=None,
                        help="--compare: the tree's pure epsilon (default sqrt(2 rho), which implies rho-zCDP)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    fortnight = ensure_fortnight(args.out / "cache", args.scale, DEFAULT_SEED)
    command = "python -m benchmarks.od " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.compare:
        from benchmarks.od_compare import run_compare, write_compare

        result = run_compare(fortnight.raw_dir, rho=args.rho, tree_epsilon=args.tree_epsilon, scale=args.scale)
        print(write_compare(result, command, args.out))
        return 0
    od = run_od(fortnight.raw_dir, queries=args.queries)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "od.json").write_text(json.dumps(od, indent=2) + "\n")
    (args.out / "OD.md").write_text(markdown(od, command))
    print(markdown(od, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
