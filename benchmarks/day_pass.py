"""One day's private pass against the floor's day, and against the least work any pass that bounds contributions does.

Issue 48 asks the day pass for at most 2x the floor's per-day cost. The floor (``benchmarks.floor``) reads, bins,
counts and adds noise; it never bounds, so it needs no card id, no keyed order, no sort by card and no shuffle. The
release's privacy argument needs all four whatever code surrounds them (``prep.bounding``): the card ids read, a
keyed pseudo-random priority for every trip (AES-256), the trips sorted by (card, priority) for the greedy keep, and
the kept and dropped rows put in a uniformly random order from the OS CSPRNG (a 64-bit word a row, then their
argsort). This times, on one day of the cached fortnight, each best of ``--repeat`` in this one process:

- the floor on that day alone (``run_floor``, its set-up included);
- those primitives, each on the day's trips;
- the whole ``day_pass`` as the default release runs it (its unit, bounds and cut; every partition written), and from one profiled run its parts.

    python -m benchmarks.day_pass --scale 1.0 --out OUT
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from benchmarks.dataset import ensure_fortnight
from benchmarks.floor import run_floor
from benchmarks.samplers import best_of
from opal_dp.core import SecureBits
from opal_dp.network import load_stops
from opal_dp.prep import bounding
from opal_dp.prep.binning import bin_trips, card_codes
from opal_dp.prep.day_files import Bounding, DayPaths, day_pass
from opal_dp.prep.ingest import ingest_file
from opal_dp.release.settings import PrivacySettings

KEY = b"\x07" * 32  # a benchmark's key: the timings do not depend on it
PARTS = {  # the day pass's parts, by the function that does each (cumulative time in the profiled run)
    "ingest": "ingest_file", "binning": "bin_trips", "card codes": "card_codes",
    "card-day sequences": "card_day_sequences", "bounding": "bound_day", "the seven writes": "write_parquet_atomic",
}


def primitives(path: Path, day: date, repeat: int) -> tuple[int, dict[str, float]]:
    """The trips of the day and the seconds of each primitive the bounding cannot do without."""
    stops = load_stops()
    binned = bin_trips(ingest_file(path, stops).accepted, stops)
    codes, _ = card_codes(binned)
    card = binned[bounding.CARD].to_numpy(np.int64)
    priority = bounding._prf(KEY, card, bounding._pack(binned, day))
    by_card = (codes.astype(np.uint64) << np.uint64(32)) | (priority >> np.uint64(32))
    n = len(binned)
    return n, {
        "read the card ids": best_of(lambda: pq.read_table(path, columns=[bounding.CARD]), repeat),
        "keyed priority (AES-256)": best_of(lambda: bounding._prf(KEY, card, bounding._pack(binned, day)), repeat),
        "sort by (card, priority)": best_of(lambda: np.argsort(by_card, kind="stable"), repeat),
        "CSPRNG shuffle": best_of(lambda: np.argsort(SecureBits().words(n)), repeat),
    }


def whole_pass(raw_dir: Path, day: str, repeat: int) -> tuple[float, dict[str, float]]:
    """Seconds of ``day_pass`` (best of ``repeat``, after one warm-up) and of its parts in one profiled run."""
    stops = load_stops()
    with tempfile.TemporaryDirectory() as tmp:
        paths = DayPaths(*(Path(tmp) / f"{name}.parquet" for name in
                           ("accepted", "rejected", "binned", "cards", "sequences", "kept", "over_bound")))
        settings = PrivacySettings()  # the default release's unit, bounds and cut
        args = (raw_dir, day, stops, Bounding(settings.unit, settings.bounds, KEY), settings.day_cut(stops), KEY,
                paths, Path(tmp) / "private")
        day_pass(*args)
        seconds = best_of(lambda: day_pass(*args), repeat)
        profile = cProfile.Profile()
        profile.runcall(day_pass, *args)
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (calls, primitive calls, own, cumulative, callers)
    cumulative = {}
    for (_, _, name), (_, _, _, total, _) in stats.items():
        cumulative[name] = cumulative.get(name, 0.0) + total
    return seconds, {part: cumulative.get(name, 0.0) for part, name in PARTS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.day_pass", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=20160725)
    parser.add_argument("--day", default="2016-07-26", help="a date of the fortnight (a Tuesday: a full working day)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    fortnight = ensure_fortnight(args.out / "cache", args.scale, args.seed)
    path = fortnight.raw_dir / f"trips_{args.day}.parquet"
    if not path.exists():
        parser.error(f"no raw file for {args.day} in the fortnight ({fortnight.start}, {fortnight.days} days)")
    floor = best_of(lambda: run_floor([path]), args.repeat)
    trips, needed = primitives(path, date.fromisoformat(args.day), args.repeat)
    seconds, parts = whole_pass(fortnight.raw_dir, args.day, args.repeat)
    result = {"command": "python -m benchmarks.day_pass " + " ".join(sys.argv[1:] if argv is None else argv),
              "scale": args.scale, "day": args.day, "trips": trips, "floor_s": floor, "primitives_s": needed,
              "primitives_total_s": sum(needed.values()), "day_pass_s": seconds, "day_pass_parts_s": parts}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "day_pass.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.day} at scale {args.scale:g}, {trips:,} trips (best of {args.repeat}):")
    print(f"  the floor's day {floor:.3f} s; 2x of it {2 * floor:.3f} s")
    for name, value in needed.items():
        print(f"  {name:28} {value:.3f} s")
    print(f"  the bounding's primitives  {sum(needed.values()):.3f} s, {sum(needed.values()) / floor:.1f}x the floor's day")
    print(f"  day_pass                   {seconds:.3f} s, {seconds / floor:.1f}x the floor's day; its parts, profiled:")
    for name, value in parts.items():
        print(f"    {name:26} {value:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
