"""Synthetic card-day trips at benchmark scale: synthesis measured in a fresh subprocess, then scored.

Synthesis (the measured part, ``python -m benchmarks.synthetic child RAW RUN_DIR RESULT EPSILON``): each day
ingested, binned and bounded (``card_period``, default bounds), the card-level queries released through a fresh
ledger (``release.synthetic.queries``), then the synthetic trips generated and written as Parquet and CSV
(``release.synthetic.generator``) - what the ``synthetic`` job does, without Dagster. The parent measures wall
time, and peak RSS and CPU with ``os.wait4``, under an address-space cap.

Scoring (not measured: internal, reads the true trips): ``reports.synthetic_score.evaluate``, the synthesizer,
both baselines and the maintained peers MST and AIM (``benchmarks.synthetic_peers``, when ``make synth-peers`` has
built their environment) at the same budget against every true trip of the fortnight; and
``reports.synthetic_score.period_scores``, the multi-day structure (travel days per card-week, return journeys).

Standalone: ``python -m benchmarks.synthetic --scale 1.0`` (also ``python -m benchmarks --synthetic``);
``--peers mst,aim`` (the default when their environment exists) or ``--peers none``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DELTA = 6 / 8_000_000  # the default card_period cap's delta


def run_synthetic(raw_dir: Path, run_dir: Path, memory_limit_bytes: int, epsilon: float = 8.0,
                  peers: tuple[str, ...] = (), peer_timeout_s: float | None = None) -> dict:
    """Synthesise once from ``raw_dir`` in a subprocess (measured), then score, with ``peers`` (``mst``, ``aim``)
    fitted on the same bounded card-day table; private files removed after."""
    from benchmarks import synthetic_peers
    from opal_dp.core import ContributionBounds
    from opal_dp.network import load_stops
    from opal_dp.prep.binning import location_labels
    from opal_dp.prep.ingest import ingest_file, raw_files
    from opal_dp.release.synthetic.archetypes import districts
    from opal_dp.release.synthetic.generator import PARQUET
    from opal_dp.reports.synthetic_score import evaluate, period_plot, period_scores

    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    result_file, log = run_dir / "child.json", run_dir / "synthetic.log"
    started = time.perf_counter()
    with open(log, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.synthetic", "child", str(raw_dir), str(run_dir), str(result_file),
             str(epsilon)], stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes,) * 2))
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if not result_file.exists():
        raise RuntimeError(f"synthetic subprocess died with exit code {os.waitstatus_to_exitcode(status)} "
                           f"(peak RSS {usage.ru_maxrss / 2**20:.1f} GiB); see {log}")
    measured = json.loads(result_file.read_text())
    stops = load_stops()
    files = raw_files(raw_dir)
    started = time.perf_counter()
    import pandas as pd

    synthetic = pd.read_parquet(run_dir / "synthetic" / PARQUET)
    dates, bounds, measured_peers = sorted(files), ContributionBounds(), {}
    fit_peers = None
    if peers:
        python = synthetic_peers.peer_python()
        if python is None:
            raise RuntimeError("the peers' environment is missing: run `make synth-peers` (or --peers none)")
        fit_peers = synthetic_peers.peers(peers, epsilon, DELTA, bounds.days(len(dates)),
                                          bounds.max_trips_per_card_day, dates,
                                          districts(stops, location_labels(stops)), run_dir / "private" / "peers",
                                          python, measured_peers, peer_timeout_s)
    load = lambda d: ingest_file(files[d], stops).accepted  # noqa: E731
    scores, distribution = evaluate(dates, load, synthetic, epsilon, DELTA, bounds, os.urandom(32), stops,
                                    np.random.default_rng(), fit_peers)
    period, period_l1 = period_scores(dates, load, synthetic, stops)
    (run_dir.parent / f"synthetic_period_eps{epsilon:g}.png").write_bytes(period_plot(period, period_l1))
    scoring_s = time.perf_counter() - started
    shutil.rmtree(run_dir / "private", ignore_errors=True)
    return {
        "epsilon": epsilon, "delta": DELTA, "wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
        "cpu_user_s": usage.ru_utime, "cpu_system_s": usage.ru_stime, **measured,
        "scoring_s": scoring_s, "scores": scores.to_dict(orient="records"),
        "trips_per_card_day": distribution.to_dict(orient="records"),
        "peers": measured_peers, "period": period.to_dict(orient="records"), **period_l1,
    }


def _child(raw_dir: Path, run_dir: Path, result_file: Path, epsilon: float) -> None:
    """In the subprocess: the synthesis, timed by stage."""
    from opal_dp.core import ContributionBounds, PrivacyLedger, PrivacyUnit
    from opal_dp.network import load_stops
    from opal_dp.prep.binning import bin_trips
    from opal_dp.prep.bounding import keep_mask
    from opal_dp.prep.ingest import ingest_file, raw_files
    from opal_dp.release.synthetic import queries as sq
    from opal_dp.release.synthetic.generator import generate, write_synthetic

    started = time.perf_counter()
    stops, bounds, key = load_stops(), ContributionBounds(), os.urandom(32)
    files = raw_files(raw_dir)
    plan = sq.synthetic_plan(epsilon, DELTA, bounds, sorted(files), stops)
    truths, travelling, rows_in = {}, {}, 0
    for day, path in files.items():
        binned = bin_trips(ingest_file(path, stops).accepted, stops)
        rows_in += len(binned)
        keep = keep_mask(binned, date.fromisoformat(day), PrivacyUnit.CARD_PERIOD, bounds, key)
        truths[day] = sq.true_histograms(binned.loc[keep], date.fromisoformat(day), plan.domain)
        travelling[day] = binned.loc[keep, "card_id"].unique()
    queries_s = time.perf_counter() - started
    private = run_dir / "private"
    ledger = PrivacyLedger(private / "ledger.sqlite", {PrivacyUnit.CARD_PERIOD.value: (epsilon, DELTA)})
    release = sq.release_queries(truths, sq.true_travel_days(travelling, plan), plan, ledger, private, "benchmark",
                                 os.urandom(32))
    noise_s = time.perf_counter() - started - queries_s
    rows = write_synthetic(generate(release, stops), run_dir / "synthetic")
    spent = ledger.spend(PrivacyUnit.CARD_PERIOD.value, plan.scope)
    result_file.write_text(json.dumps({
        "synthesis_s": time.perf_counter() - started, "ingest_bin_bound_count_s": queries_s, "noise_ledger_s": noise_s,
        "generate_write_s": time.perf_counter() - started - queries_s - noise_s, "trips_in": rows_in,
        "synthetic_trips": sum(rows.values()), "ledger_epsilon": spent.epsilon, "ledger_delta": spent.delta,
        "sigma": dict(plan.sigma),
    }))


def markdown(result: dict, scale: float) -> list[str]:
    """Lines for RESULTS.md."""
    lines = [
        f"Scale {scale:g}: {result['trips_in']:,} trips in, {result['synthetic_trips']:,} synthetic trips out; "
        f"synthesis {result['synthesis_s']:.1f} s in the child ({result['wall_s']:.1f} s with interpreter start), "
        f"peak RSS {result['peak_rss_bytes'] / 1e9:.2f} GB; ledger (epsilon, delta) per card over the fortnight = "
        f"({result['ledger_epsilon']:.4g}, {result['ledger_delta']:.3g}); sigma "
        + ", ".join(f"{k} {v:.3g}" for k, v in result["sigma"].items()) + ".",
        "",
        "| method | k-marginal (3-way) | k-marginal (2-way) | OD top-100 L1 | trips per card-day L1 | rows | "
        "fit + sample s | peak RSS GB |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {r['method']} | {r['k_marginal']:.1f} | {r['k_marginal_2way']:.1f} | {r['od_top100_l1']:.3f} | "
          f"{r['trips_per_card_day_l1']:.3f} | {r['rows']:,} | {_cost(result, r['method'])} |"
          for r in result["scores"]),
        "",
        f"Synthetic cards over the week: travel days per card-week L1 {result['travel_days_l1']:.3f}, return "
        f"share of card-days with 2+ trips L1 {result['returns_l1']:.3f} (true vs synthetic).",
        *(f"{method}: stopped after {p['timed_out_s']:g} s (`--peer-timeout-s`), not scored."
          for method, p in result["peers"].items() if "timed_out_s" in p),
    ]
    return lines


def _cost(result: dict, method: str) -> str:
    """Fit + sample seconds and peak RSS of a method: the child's for ours, the peer subprocess's for a peer."""
    if method == "archetype_synthesizer":
        return f"{result['synthesis_s']:.1f} | {result['peak_rss_bytes'] / 1e9:.2f}"
    peer = result["peers"].get(method)
    if peer is None:
        return "- | -"
    return f"{peer['fit_s']:.1f} + {peer['sample_s']:.1f} | {peer['peak_rss_bytes'] / 1e9:.2f}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        _child(Path(argv[1]), Path(argv[2]), Path(argv[3]), float(argv[4]))
        return 0
    from benchmarks import report
    from benchmarks.dataset import ensure_fortnight
    from opal_dp.simulate.trips import DEFAULT_SEED

    parser = argparse.ArgumentParser(prog="python -m benchmarks.synthetic", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--epsilon", type=float, default=8.0, help="per card over the fortnight (default 8)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--memory-limit-gb", type=float, default=min(16.0, 0.75 * report.memory_gib()))
    parser.add_argument("--peers", default=None,
                        help="comma-separated peers among mst,aim, or none (default: both if `make synth-peers` ran)")
    parser.add_argument("--peer-timeout-s", type=float, default=None,
                        help="stop a peer's fit after this many seconds and leave it out (default: no limit)")
    args = parser.parse_args(argv)
    from benchmarks.synthetic_peers import PEERS, peer_python

    chosen = args.peers or (",".join(PEERS) if peer_python() else "none")
    peers = () if chosen == "none" else tuple(chosen.split(","))
    if set(peers) - set(PEERS):
        parser.error(f"--peers: choose among {', '.join(PEERS)} or none")
    fortnight = ensure_fortnight(args.out / "cache", args.scale, DEFAULT_SEED)
    result = run_synthetic(fortnight.raw_dir, args.out / "runs" / f"scale-{args.scale:g}" / "synthetic",
                           int(args.memory_limit_gb * 2**30), args.epsilon, peers, args.peer_timeout_s)
    result["machine"] = report.machine()
    (args.out / f"synthetic_eps{args.epsilon:g}.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(markdown(result, args.scale)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
