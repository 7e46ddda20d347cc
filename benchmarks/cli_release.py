"""The release as ``make release`` runs it, against Dagster's own floor on the same kind of instance (issue 48: "at
most 2x the Dagster-only floor measured in the same run").

Each repeat: ``python -m opal_dp.cli release --data-dir D`` in a fresh process, ``D`` a new data folder whose
``raw/`` links to the cached fortnight, ``DAGSTER_HOME`` unset, so that the CLI makes its own persistent home
(``opal_dp.defs.shared.instance``: opal_dp's ``dagster.yaml`` and kept-connection SQLite event log) and runs the
default release on it; then the runs it made (``release_plan``) replayed through the floor's do-nothing steps on a new
persistent home of the same settings, in a fresh process (``benchmarks.dagster_floor``).

    python -m benchmarks.cli_release --scale 0.001 --repeat 3 --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from benchmarks import report
from benchmarks.dagster_floor import dagster_floor_run, release_plan
from benchmarks.dataset import ensure_fortnight
from opal_dp import settings
from opal_dp.defs.shared.storage import OpalStorage

REPO = Path(__file__).resolve().parent.parent


def one_repeat(raw_dir: Path, run_dir: Path) -> dict:
    """The CLI's release of ``raw_dir`` in a new data folder under ``run_dir``, then its plan through the floor."""
    shutil.rmtree(run_dir, ignore_errors=True)
    data = run_dir / "data"
    data.mkdir(parents=True)
    (data / "raw").symlink_to(raw_dir.resolve(), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # the CLI makes its own home
    started = time.perf_counter()
    with open(run_dir / "cli.log", "wb") as log:
        subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--data-dir", str(data)], env=env, cwd=REPO,
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - started
    home = OpalStorage.resolved(data).dagster_home
    with dg.DagsterInstance.from_config(str(home)) as instance:
        plan = release_plan(instance)
        events = sum(len(instance.all_logs(run.run_id)) for run in instance.get_runs())
    shutil.rmtree(data / "private", ignore_errors=True)  # the microdata and the CLI's home: its plan is read
    floor = dagster_floor_run(plan, run_dir, env, home=run_dir / "floor_home")
    return {"wall_s": wall, "runs": len(plan), "events": events, "dagster_floor": floor}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=20160725)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if os.environ.get(settings.LEDGER_URL_ENV):  # one shared ledger would return the first repeat's stored release
        parser.error(f"unset {settings.LEDGER_URL_ENV}: each repeat releases into a fresh data folder and its ledger")
    fortnight = ensure_fortnight(args.out / "cache", args.scale, args.seed)
    repeats = []
    for i in range(args.repeat):
        repeats.append(one_repeat(fortnight.raw_dir, args.out / "cli" / f"repeat-{i}"))
        r = repeats[-1]
        print(f"repeat {i}: CLI {r['wall_s']:.1f} s ({r['runs']} runs, {r['events']} events), Dagster-only floor "
              f"{r['dagster_floor']['wall_s']:.1f} s ({r['dagster_floor']['events']} events)", file=sys.stderr)
    cli, floor = (report.median(values) for values in zip(*[(r["wall_s"], r["dagster_floor"]["wall_s"])
                                                             for r in repeats]))
    result = {"command": "python -m benchmarks.cli_release " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": report.machine(), "environment": {k: v for k, v in os.environ.items() if k.startswith("OPAL_DP_")},
              "scale": args.scale, "trips": fortnight.rows, "repeats": repeats,
              "cli_median_s": cli, "dagster_floor_median_s": floor, "ratio": cli / floor}
    (args.out / "cli_release.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"scale {args.scale:g}, {fortnight.rows:,} trips: the CLI's release {cli:.1f} s against Dagster's floor "
          f"{floor:.1f} s on the same kind of instance, {cli / floor:.1f}x (medians of {args.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
