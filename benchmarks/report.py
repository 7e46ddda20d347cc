"""The machine description and the results as JSON and as a small Markdown report (``RESULTS.md``)."""

from __future__ import annotations

import json
import os
import platform
import statistics
from importlib import metadata
from pathlib import Path

from benchmarks.profile import markdown as profile_markdown
from benchmarks.synthetic import markdown as synthetic_markdown

PACKAGES = ("numpy", "pandas", "pyarrow", "dagster", "opendp", "polars", "pipeline-dp")
TARGETS = ("Targets at scale 1.0 on the 2-core machine: end to end through Dagster <= 60 s wall and "
           "peak RSS <= 6 GB; <= 3x the floor; >= 10x faster than OpenDP's Polars front end and PipelineDP; "
           "s/M trips roughly constant from 0.25 to 1.0.")


def memory_gib() -> float:
    return _meminfo_kib("MemTotal") / 2**20


def machine() -> dict:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory_gib(), 1),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        **{name: _version(name) for name in PACKAGES},
    }


def _meminfo_kib(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def median(values: list[float]) -> float:
    return statistics.median(values)


def write(results: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    as_json, as_md = out / "results.json", out / "RESULTS.md"
    as_json.write_text(json.dumps(results, indent=2) + "\n")
    as_md.write_text(markdown(results))
    return as_json, as_md


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# opal_dp benchmark",
        "",
        f"`{results['command']}` — {results['repeat']} repeat(s) per scale, medians shown. {TARGETS}",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB memory; Python {m['python']}, "
        + ", ".join(f"{name} {m[name]}" for name in PACKAGES if m[name]) + ".",
        "",
        "## Pipeline (Dagster, `opal_dp.cli.run_release`, every partition of the fortnight; the headline unit)",
        "",
        "| scale | unit | trips | end to end s | s/M trips | peak RSS GB | private_stages s | release s | rollup s | "
        "floor s | pipeline / floor | Dagster floor s | pipeline / Dagster floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["scales"]:
        p, unit = s["pipeline"], s["headline_unit"]
        if p is None:
            done = s.get("units", {}).get(unit, {}).get("partial", {})
            lines.append(f"| {s['scale']:g} | {unit} | {s['trips']:,} | FAILED (see below) | | | "
                         + " | ".join(_fmt(done.get(job)) for job in ("private_stages", "release", "rollup"))
                         + f" | {_fmt(s['floor']['seconds'], 2)} | | | |")
            continue
        runs = p["runs"]
        lines.append(
            f"| {s['scale']:g} | {unit} | {s['trips']:,} | {_fmt(p['wall_s'])} | {_fmt(p['s_per_m_trips'], 2)} | "
            f"{_fmt(p['peak_rss_bytes'] / 1e9, 2)} | "
            + " | ".join(_fmt(runs.get(job)) for job in ("private_stages", "release", "rollup"))
            + f" | {_fmt(s['floor']['seconds'], 2)} | {_fmt(s['ratios'].get('pipeline_over_floor'), 1, '×')} | "
            f"{_fmt(p['dagster_floor']['wall_s'])} | {_fmt(s['ratios'].get('pipeline_over_dagster_floor'), 1, '×')} |"
        )
    lines += [f"\n**scale {s['scale']:g}: {s['pipeline_error']}**" for s in results["scales"] if s["pipeline_error"]]
    lines += ["", "Release integrity (from the last repeat): blocking checks, ledger charges per (partition, marginal).", ""]
    for s in results["scales"]:
        if s["pipeline"]:
            ledger = s["pipeline"]["ledger"]
            lines.append(
                f"- scale {s['scale']:g}: blocking checks {'all passed' if s['pipeline']['blocking_checks_passed'] else 'FAILED'}; "
                f"{ledger['draws']} draws for {ledger['distinct_partition_marginal']} (partition, marginal) pairs, "
                f"{ledger['complete']} complete, {ledger['charges']} charges over {ledger['scopes']} scopes"
            )
    lines += ["", "Slowest steps (seconds, median over repeats; of the completed runs where the pipeline failed):", ""]
    for s in results["scales"]:
        steps = s["pipeline"]["steps"] if s["pipeline"] else {}
        if steps:
            ranked = sorted(steps.items(), key=lambda kv: -kv[1])
            lines.append(f"- scale {s['scale']:g}: " + ", ".join(f"{k} {v:.1f}" for k, v in ranked))
    for s in results["scales"]:
        if s["pipeline"]:
            lines += ["", f"## Profile of the pipeline, scale {s['scale']:g} (median repeat, {s['headline_unit']} unit)", "",
                      *profile_markdown(s["pipeline"]["profile"], s["floor"]["seconds"])]
    unit_rows = [(s, unit, r) for s in results["scales"] for unit, r in s.get("units", {}).items() if len(s["units"]) > 1]
    if unit_rows:
        lines += [
            "",
            "## Privacy units (same fortnight, default nominal budget per scope)",
            "",
            "| scale | unit | end to end s | vs headline | peak RSS GB | private_stages s | release s | rollup s | checks | "
            "charges / scopes | max ε per unit | max δ per unit |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s, unit, r in unit_rows:
            if r.get("error"):
                lines.append(f"| {s['scale']:g} | {unit} | FAILED: {r['error'][:80]} | | | | | | | | | |")
                continue
            ratio = s["ratios"].get(f"{unit}_over_{s['headline_unit']}", 1.0 if unit == s["headline_unit"] else None)
            ledger, runs = r["ledger"], r["runs"]
            lines.append(
                f"| {s['scale']:g} | {unit} | {_fmt(r['wall_s'])} | {_fmt(ratio, 2, '×')} | "
                f"{_fmt(r['peak_rss_bytes'] / 1e9, 2)} | "
                + " | ".join(_fmt(runs.get(job)) for job in ("private_stages", "release", "rollup"))
                + f" | {'passed' if r['blocking_checks_passed'] else 'FAILED'} | {ledger['charges']} / {ledger['scopes']} | "
                f"{ledger['max_epsilon_per_unit']:.4g} | {ledger['max_delta_per_unit']:.3g} |"
            )
    comparisons = [(s, s["unit_comparison"]) for s in results["scales"] if s.get("unit_comparison")]
    if comparisons:
        lines += [
            "",
            "## Utility of the units on the same data (internal, not DP; time x location cells, both taps)",
            "",
            "| scale | unit | mechanism | trips in released cells | vs trip | released cells | mean rel. error (≥100) | "
            "median rel. error (≥100) | suppressed trips | dropped by bounding |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s, comparison in comparisons:
            rows = {row["unit"]: row for row in comparison["rows"]}
            base = rows.get("trip", {}).get("share_of_trips_in_released_cells")
            for unit, row in rows.items():
                share = row["share_of_trips_in_released_cells"]
                lines.append(
                    f"| {s['scale']:g} | {unit} | {row['mechanism']} | {share:.3f} | "
                    f"{_fmt(share / base if base else None, 2, '×')} | {row['released_cells']:,} | "
                    f"{row['mean_relative_error']:.4f} | {row['median_relative_error']:.4f} | "
                    f"{row['suppressed_trips']:,} | {row['share_dropped_by_bounding']:.4%} |"
                )
    designs = [(s, s["designs"]) for s in results["scales"] if s.get("designs")]
    if designs:
        lines += [
            "",
            "## Release designs (trip unit, same fortnight, same epsilon per partition)",
            "",
            "Release step: `release_marginals` seconds summed over the release runs (target: public_domain <= 1.5× "
            "sbh). Utility and risk are internal, not DP: both designs drawn in memory on the same trips and compared "
            "with the true cells (`opal_dp.reports.design_comparison`; a suppressed bin counts as 0, relative error "
            "over every true cell >= 100). Targets for public_domain: trips in listed cells >= sbh, lower one-way "
            "RMSE, differencing residual 0, <= 20 false cells per day.",
            "",
            "| scale | design | release step s | vs sbh | end to end s | trips in listed cells | listed cells | "
            "mean rel. error (≥100) | median rel. error (≥100) | RMSE time | RMSE loc | false cells / day | "
            "expected false cells / day | differencing residual | listed cells with true 0 | P(lone trip listed) | "
            "P(empty cell listed) |",
            "|---" * 17 + "|",
        ]
        for s, found in designs:
            rows = {row["design"]: row for row in found["comparison"]["rows"]}
            for design, row in rows.items():
                run = found["pipelines"][design]
                step = None if run.get("error") else run["steps"].get("release_marginals")
                ratio = s["ratios"].get("public_domain_release_over_sbh") if design == "public_domain" else 1.0
                lines.append(
                    f"| {s['scale']:g} | {design} | {_fmt(step, 2)} | {_fmt(ratio, 2, '×')} | "
                    f"{'FAILED' if run.get('error') else _fmt(run['wall_s'])} | "
                    f"{row['share_of_trips_in_listed_cells']:.3f} | {row['listed_cells']:,} | "
                    f"{row['mean_relative_error']:.4f} | {row['median_relative_error']:.4f} | {row['rmse_time']:.2f} | "
                    f"{row['rmse_loc']:.2f} | {row['false_cells_per_day']:.2f} | "
                    f"{row['expected_false_cells_per_day']:.2f} | {row['differencing_residual']:,} | "
                    f"{row['listed_true_zero_share']:.4f} | {row['lone_trip_listed_probability']:.3g} | "
                    f"{row['empty_cell_listed_probability']:.3g} |"
                )
            lines.append(f"\nscale {s['scale']:g}: public-domain threshold tau = {found['comparison']['tau']}; "
                         f"comparison took {found['comparison']['seconds']:.1f} s.")
    peer_rows = [(s, name, peer) for s in results["scales"] for name, peer in s["peers"].items()]
    if peer_rows:
        lines += [
            "",
            "## References on the same files",
            "",
            "| scale | reference | ran on | measured s | full fortnight s | vs pipeline | vs floor |",
            "|---|---|---|---|---|---|---|",
        ]
        for s, name, peer in peer_rows:
            ran = f"{peer['days']} day(s), {peer['rows']:,} trips"
            full = _fmt(peer["full_seconds"]) + (f" (extrapolated by {peer['extrapolated_by']})"
                                                 if peer["extrapolated_by"] else "")
            lines.append(
                f"| {s['scale']:g} | {name} | {ran} | {_fmt(peer['seconds'])} | {full} | "
                f"{_fmt(peer['over_pipeline'], 2, '×')} | {_fmt(peer['over_floor'], 1, '×')} |"
            )
        lines += ["", "`vs pipeline` > 1 means the reference is slower than our pipeline under the trip unit (the same counts)."]
    for entry in results["scales"]:
        if entry.get("od"):
            from benchmarks.od import markdown as od_markdown

            lines += ["", f"Scale {entry['scale']:g}:", "", od_markdown(entry["od"], results["command"])]
    for s in results["scales"]:
        if s.get("synthetic"):
            lines += ["", "## Synthetic card-day trips (`--synthetic`)", "", *synthetic_markdown(s["synthetic"], s["scale"])]
    lines += ["", "## Notes", "", *[f"- {note}" for note in results["notes"]], ""]
    return "\n".join(lines)
