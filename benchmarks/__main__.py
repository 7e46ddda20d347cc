"""``python -m benchmarks``: the default release (card_period, weekly, with its OD hierarchy) and the 2016 trip unit,
against the hand-written floor, Dagster's own floor for the same asset graph and run plan, OpenDP and PipelineDP."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from benchmarks import peers, report
from benchmarks.dataset import ensure_fortnight
from benchmarks.floor import run_floor
from benchmarks.od import run_od
from benchmarks.pipeline import run_pipeline
from benchmarks.synthetic import run_synthetic
from benchmarks.units import run_comparison, run_design_comparison
from opal_dp.core import PrivacyUnit
from opal_dp.release.options import Design
from opal_dp.simulate.trips import DEFAULT_SEED

DEFAULT_OUT = Path(__file__).resolve().parent / "out"
NOTES = [
    "End to end = wall time of a fresh `python -m benchmarks.pipeline` subprocess (interpreter start, "
    "imports, definitions, the run plan of a UI backfill in process: one private_stages run, one release run per mode, one rollup; a job's seconds sum its runs); CPU via `os.wait4` on that child; peak RSS of that child and "
    "its per-day worker processes together, sampled every 0.1 s from /proc (`benchmarks.memory`; at least the largest "
    "single process `os.wait4` reports). "
    "Per-run and per-step seconds from the runs' event logs; an ephemeral instance and a fresh data directory per "
    "repeat, so the ledger never reuses a stored release.",
    "Floor: pyarrow read of 5 columns, integer binning, one `np.bincount` per tap per day (one-way "
    "marginals summed from the joint), then `StabilityHistogram.release` with our exact discrete Laplace "
    "(`opal_dp.core.DiscreteLaplace`, OS CSPRNG) and the parameters of the trip-unit pipeline run; nothing written.",
    "opendp_threshold: `make_laplace_threshold` (replace-one, d_in=(2,2,1), scale 2/ε, our integer "
    "threshold; privacy map checked) on the floor's counts, one call per partition × marginal.",
    "opendp_polars: `dp.Context.compositor` per partition, `unit_of(changes=1)`, (8, 6/8e6) split 1,1,1,1,2,2, "
    "six `group_by().agg(dp.len())` queries; OpenDP chooses the thresholds. Installed with "
    "`opendp[polars]==0.16.0`, which pins polars 1.36.1 (our dependencies do not use polars, so no conflict).",
    "pipelinedp: PipelineDP 0.3.1 `LocalBackend`, one trip per privacy id, `PRIVACY_ID_COUNT`, "
    "`LAPLACE_THRESHOLDING` with `post_aggregation_thresholding` (add/remove neighbours only; float output).",
    "Each pipeline subprocess runs under an address-space cap (`--memory-limit-gb`): a step that needs more "
    "fails that scale's pipeline row instead of invoking the OOM killer.",
    "`--compare-designs`: the trip-unit pipeline once more under `release_design=public_domain` (its own fresh "
    "data directory and ledger), and the internal design comparison (`benchmarks.units.run_design_comparison`): "
    "each day ingested, binned and bounded once, then released in memory under both designs (nothing charged) "
    "and compared with the true cells.",
    "`--synthetic` (`benchmarks.synthetic`): synthesis of card-day trips in a fresh subprocess (ingest, bin, "
    "card_period bounding, the card-level queries through a fresh ledger at epsilon 8 per card over the fortnight, "
    "generation, Parquet and CSV written), measured like the pipeline; then, unmeasured, the 3-way k-marginal score "
    "of it and of two baselines at the same budget against every true trip.",
    "Profile: the median repeat's end to end split into interpreter start (spawn to the child's first line after "
    "the standard library), imports, each Dagster step (STEP_START to STEP_SUCCESS in the run's event log, summed "
    "over the runs), Dagster inside runs outside steps (RUN_START to RUN_SUCCESS less the steps), run_release outside "
    "runs (definitions, partitions, run set-up) and the exit; the parts add up to the end to end (`benchmarks.profile`).",
    "Dagster-only floor (`benchmarks.dagster_floor`): the headline repeat's run plan (the same jobs, tags and checks "
    "evaluated) replayed in a fresh process on an ephemeral instance through the same asset keys, partitions, "
    "dependencies, check specs, backfill policies and jobs with steps that do nothing: Dagster's own cost of this "
    "graph, interpreter start, imports and definitions included; the same events by type but for the values stored "
    "and loaded (the floor stores none) and the steps' outputs (`opal_dp_tests/defs/test_dagster_floor.py`).",
    "Row-level peers run on the leading `--peer-days` day(s) and are extrapolated: PipelineDP by rows, "
    "OpenDP Polars by partitions (its per-query threshold search dominates, not the rows).",
]


def _scales(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive comma-separated scales, got {text!r}")
    return values


def _units(text: str) -> list[str]:
    units = [u.strip() for u in text.split(",") if u.strip()]
    known = [u.value for u in PrivacyUnit]
    if not units or any(u not in known for u in units):
        raise argparse.ArgumentTypeError(f"expected comma-separated units among {known}, got {text!r}")
    return units


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="volume scale (1.0 = about 28 M trips a fortnight)")
    parser.add_argument("--scales", type=_scales, help="comma-separated scales, e.g. 0.25,0.5,1 (overrides --scale)")
    parser.add_argument("--repeat", type=int, default=1, help="pipeline and floor repeats per scale (medians reported)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="synthetic data seed (default %(default)s)")
    parser.add_argument("--no-peers", action="store_true", help="skip OpenDP and PipelineDP")
    parser.add_argument("--peer-days", type=int, default=1,
                        help="leading days the row-level peers run on before extrapolation (default %(default)s)")
    parser.add_argument("--memory-limit-gb", type=float, default=min(16.0, 0.75 * report.memory_gib()),
                        help="address-space cap of each pipeline subprocess (default %(default).1f)")
    parser.add_argument("--units", type=_units, default=["card_period", "trip"],
                        help="privacy units to run the pipeline under, the headline first (default card_period,trip: "
                             "the default weekly release with its OD hierarchy, then the 2016 trip unit)")
    parser.add_argument("--compare-units", action="store_true",
                        help="also run the internal unit comparison (utility of the three units on the same data)")
    parser.add_argument("--compare-designs", action="store_true",
                        help="also run the pipeline under the public_domain release design (trip unit) and the internal "
                             "design comparison (sbh vs public_domain on the same data)")
    parser.add_argument("--od", action="store_true",
                        help="also build the OD prefix tree of every day and evaluate it as in the seed's §5 "
                             "(benchmarks.od; --od-queries count queries per cell)")
    parser.add_argument("--od-queries", type=int, default=40_000)
    parser.add_argument("--synthetic", action="store_true",
                        help="also synthesise card-day trips (card_period, epsilon 8 per card over the fortnight) and "
                             "score them and two baselines (benchmarks.synthetic)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.peer_days < 1:
        parser.error("--repeat and --peer-days must be at least 1")
    if args.scale <= 0:
        parser.error("--scale must be positive")
    return args


def bench_scale(args: argparse.Namespace, scale: float) -> dict:
    fortnight = ensure_fortnight(args.out / "cache", scale, args.seed)
    files = fortnight.files()
    millions = fortnight.rows / 1e6
    print(f"scale {scale:g}: {fortnight.rows:,} trips in {len(files)} files", file=sys.stderr)
    floors = [run_floor(files) for _ in range(args.repeat)]
    floor = {
        "seconds": report.median([f.seconds for f in floors]),
        "read_bin_s": report.median([f.read_bin_s for f in floors]),
        "count_s": report.median([f.count_s for f in floors]),
        "noise_s": report.median([f.noise_s for f in floors]),
        "rows": floors[0].rows,
        "bins_present": floors[0].bins_present,
        "bins_released": floors[0].bins_released,
        "all_s": [f.seconds for f in floors],
    }
    print(f"  floor {floor['seconds']:.2f} s", file=sys.stderr)
    entry = {"scale": scale, "seed": args.seed, "trips": fortnight.rows, "raw_dir": str(fortnight.raw_dir),
             "floor": floor, "pipeline": None, "pipeline_error": None, "units": {}, "peers": {}, "ratios": {}}
    headline = entry["headline_unit"] = args.units[0]
    for unit in args.units:
        result = _pipeline(args, fortnight, scale, unit, millions, floor, dagster_floor=unit == headline)
        entry["units"][unit] = result
        if result.get("error"):
            entry["pipeline_error"] = f"{unit}: {result['error']}"
    if not entry["units"][headline].get("error"):
        entry["pipeline"] = entry["units"][headline]
        entry["ratios"]["pipeline_over_floor"] = entry["pipeline"]["wall_s"] / floor["seconds"]
        entry["ratios"]["pipeline_over_dagster_floor"] = (entry["pipeline"]["wall_s"]
                                                          / entry["pipeline"]["dagster_floor"]["wall_s"])
        for unit, result in entry["units"].items():
            if unit != headline and not result.get("error"):
                entry["ratios"][f"{unit}_over_{headline}"] = result["wall_s"] / entry["pipeline"]["wall_s"]
    if args.compare_units:
        entry["unit_comparison"] = run_comparison(fortnight.raw_dir)
    if args.compare_designs:
        _compare_designs(args, fortnight, scale, millions, floor, entry)
    if args.od:
        entry["od"] = run_od(fortnight.raw_dir, queries=args.od_queries)
    if args.synthetic:
        entry["synthetic"] = run_synthetic(fortnight.raw_dir, args.out / "runs" / f"scale-{scale:g}" / "synthetic",
                                           int(args.memory_limit_gb * 2**30))
        print(f"  synthetic: {entry['synthetic']['synthesis_s']:.1f} s", file=sys.stderr)
    if not args.no_peers:
        for name, peer in peers.PEERS.items():
            subset = files[: args.peer_days] if name in peers.EXTRAPOLATE_BY else files
            result = peer(subset)
            full = result.full_seconds(fortnight.rows, len(files))
            like = entry["units"].get("trip") or entry["pipeline"] or {}  # the peers count trips: the trip unit
            pipeline_wall = None if like.get("error") else like.get("wall_s")
            entry["peers"][name] = {
                "seconds": result.seconds,
                "rows": result.rows,
                "days": result.days,
                "released_bins": result.released_bins,
                "full_seconds": full,
                "extrapolated_by": peers.EXTRAPOLATE_BY[name] if result.days < len(files) else None,
                "over_pipeline": full / pipeline_wall if pipeline_wall else None,
                "over_floor": full / floor["seconds"],
            }
            print(f"  {name}: {result.seconds:.1f} s on {result.days} day(s), {full:.1f} s for the fortnight",
                  file=sys.stderr)
    return entry


def _compare_designs(args: argparse.Namespace, fortnight, scale: float, millions: float, floor: dict,
                     entry: dict) -> None:
    """The trip-unit pipeline under both release designs (sbh reused from ``--units`` when it ran there), the
    ratio of their ``release_marginals`` steps, and the internal design comparison on the same data."""
    sbh = entry["units"].get("trip") or _pipeline(args, fortnight, scale, "trip", millions, floor)
    public = _pipeline(args, fortnight, scale, "trip", millions, floor, design="public_domain")
    for design, result in (("sbh", sbh), ("public_domain", public)):
        if result.get("error") and not entry["pipeline_error"]:
            entry["pipeline_error"] = f"trip/{design}: {result['error']}"
    if not (sbh.get("error") or public.get("error")):
        entry["ratios"]["public_domain_release_over_sbh"] = (public["steps"]["release_marginals"]
                                                             / sbh["steps"]["release_marginals"])
    entry["designs"] = {"pipelines": {"sbh": sbh, "public_domain": public},
                        "comparison": run_design_comparison(fortnight.raw_dir)}


def _pipeline(args: argparse.Namespace, fortnight, scale: float, unit: str, millions: float, floor: dict,
              design: str = "sbh", dagster_floor: bool = False) -> dict:
    """``--repeat`` runs of the pipeline under ``unit`` and ``design`` (each with its Dagster-only floor, with
    ``dagster_floor``): medians, or the error of the first failed repeat."""
    repeats = []
    name = unit if Design.parse(design) is Design.SBH else f"{unit}-{design}"
    for i in range(args.repeat):
        run_dir = args.out / "runs" / f"scale-{scale:g}" / name / f"repeat-{i}"
        try:
            repeats.append(run_pipeline(fortnight.raw_dir, run_dir, int(args.memory_limit_gb * 2**30), unit, design,
                                        dagster_floor))
        except RuntimeError as err:
            return {"error": str(err)}
        if repeats[-1]["error"]:
            print(f"  {name} pipeline FAILED: {repeats[-1]['error']}", file=sys.stderr)
            return {"error": repeats[-1]["error"],
                    "partial": {job: run["wall_s"] for job, run in repeats[-1]["runs"].items()}}
        print(f"  {name} pipeline repeat {i}: {repeats[-1]['wall_s']:.1f} s, "
              f"peak RSS {repeats[-1]['peak_rss_bytes'] / 1e9:.2f} GB", file=sys.stderr)
    wall = report.median([r["wall_s"] for r in repeats])
    steps = {k for r in repeats for run in r["runs"].values() for k in run["steps"]}
    result = {
        "wall_s": wall,
        "s_per_m_trips": wall / millions,
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in repeats),
        "runs": {job: report.median([r["runs"][job]["wall_s"] for r in repeats]) for job in repeats[0]["runs"]},
        "steps": {k: report.median([run["steps"][k] for r in repeats for run in r["runs"].values()
                                    if k in run["steps"]]) for k in sorted(steps)},
        "repeats": repeats,
        "profile": sorted(repeats, key=lambda r: r["wall_s"])[len(repeats) // 2]["profile"],  # the median repeat's
        "blocking_checks_passed": all(r["blocking_checks_passed"] for r in repeats),
        "ledger": repeats[-1]["ledger"],
        "dagster_floor": _median_floor([r["dagster_floor"] for r in repeats]) if dagster_floor else None,
    }
    if repeats[0]["rows_accepted"] != floor["rows"]:
        result["error"] = (f"pipeline accepted {repeats[0]['rows_accepted']:,} trips, the floor counted "
                           f"{floor['rows']:,}: the two did not release the same data")
    return result


def _median_floor(floors: list[dict]) -> dict:
    """The Dagster-only floor of the repeats: median seconds, the events of the last."""
    return {"wall_s": report.median([f["wall_s"] for f in floors]), "runs_s": report.median([f["runs_s"] for f in floors]),
            "events": floors[-1]["events"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scales = args.scales or [args.scale]
    results = {
        "command": "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv),
        "repeat": args.repeat,
        "machine": report.machine(),
        "scales": [bench_scale(args, scale) for scale in scales],
        "notes": NOTES,
    }
    as_json, as_md = report.write(results, args.out)
    print(as_md.read_text())
    print(f"wrote {as_json} and {as_md}", file=sys.stderr)
    return 1 if any(s["pipeline_error"] for s in results["scales"]) else 0


if __name__ == "__main__":
    sys.exit(main())
