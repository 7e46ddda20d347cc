"""The benchmark's input: the synthetic fortnight as daily Parquet files, cached per (scale, seed).

A cache entry is ``<cache>/scale-<s>-seed-<n>/raw/trips_*.parquet`` plus ``manifest.json``. It is
reused only while the manifest matches the request and a digest of the generator's sources and the
reference network (the generator is still evolving: a change to it invalidates the cache).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from opal_dp import settings
from opal_dp.network import STOPS_FILE

START = "2016-07-25"
DAYS = 14
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Fortnight:
    scale: float
    seed: int
    start: str
    days: int
    rows: int
    generator_digest: str
    raw_dir: Path

    def files(self) -> list[Path]:
        return sorted(self.raw_dir.glob("trips_*.parquet"))


def generator_digest() -> str:
    """SHA-256 over the synthetic generator's sources and the reference stop list."""
    digest = hashlib.sha256()
    synth = Path(__file__).resolve().parent.parent / "opal_dp" / "synth"
    for path in [*sorted(synth.glob("*.py")), settings.reference_dir() / STOPS_FILE]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def ensure_fortnight(cache: Path, scale: float, seed: int) -> Fortnight:
    """The cached fortnight for (scale, seed), generated first (in a subprocess) if missing or stale."""
    entry = cache / f"scale-{scale:g}-seed-{seed}"
    wanted = {"scale": scale, "seed": seed, "start": START, "days": DAYS, "generator_digest": generator_digest()}
    manifest = entry / MANIFEST
    if manifest.exists():
        stored = json.loads(manifest.read_text())
        if {k: stored.get(k) for k in wanted} == wanted:
            return Fortnight(**{**stored, "raw_dir": entry / "raw"})
    shutil.rmtree(entry, ignore_errors=True)
    partial = entry / "raw.partial"
    partial.mkdir(parents=True)
    print(f"generating the fortnight at scale {scale:g} (seed {seed}) into {entry}", file=sys.stderr)
    done = subprocess.run(
        [sys.executable, "-m", "opal_dp.simulate", "--scale", str(scale), "--start", START, "--days", str(DAYS),
         "--seed", str(seed), "--out", str(partial), "--format", "parquet"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the synthetic generator failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    partial.rename(entry / "raw")
    rows = sum(pq.read_metadata(p).num_rows for p in (entry / "raw").glob("trips_*.parquet"))
    fortnight = Fortnight(**wanted, rows=rows, raw_dir=entry / "raw")
    manifest.write_text(json.dumps({k: v for k, v in asdict(fortnight).items() if k != "raw_dir"}, indent=2) + "\n")
    return fortnight
