"""CLI: ``python -m opal_dp.simulate`` writes synthetic raw trip files, one per service day."""

from __future__ import annotations

import argparse
import resource
import time
from datetime import date, timedelta
from pathlib import Path

from tqdm import tqdm

from opal_dp.locations import DataLocation
from opal_dp.simulate.trips import DEFAULT_SEED, FORMATS, generate_days


def _dates(args: argparse.Namespace) -> list[date]:
    if args.dates:
        return [date.fromisoformat(d.strip()) for d in args.dates.split(",") if d.strip()]
    start = date.fromisoformat(args.start)
    return [start + timedelta(days=i) for i in range(args.days)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m opal_dp.simulate",
        description="Generate synthetic Opal smart-card trips as daily raw files trips_YYYY-MM-DD.<format>.",
    )
    parser.add_argument("--scale", type=float, default=1.0,
                        help="volume relative to the real network (1.0 = about 2.35 M trips per weekday)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--start", default="2016-07-25", help="first service day, YYYY-MM-DD (default %(default)s)")
    when.add_argument("--dates", help="explicit comma-separated service days YYYY-MM-DD (instead of --start)")
    parser.add_argument("--days", type=int, default=14, help="consecutive days from --start (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: $OPAL_DP_DATA_DIR/raw or ./data/raw)")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="file format (default %(default)s)")
    args = parser.parse_args(argv)
    if args.scale <= 0 or args.days < 1:
        parser.error("--scale must be positive and --days at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = args.out or DataLocation.resolved().raw_dir
    started = time.perf_counter()
    rows = 0
    days = _dates(args)
    with tqdm(total=len(days), unit="day", desc="synth") as bar:
        for path, n in generate_days(days, out, seed=args.seed, scale=args.scale, fmt=args.format):
            rows += n
            bar.set_postfix_str(f"{path.name} {n:,} trips")
            bar.update()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows written: {rows:,} in {len(days)} files under {out}")
    print(f"wall seconds: {time.perf_counter() - started:.1f}")
    print(f"peak RSS: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
