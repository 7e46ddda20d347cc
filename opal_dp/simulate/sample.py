"""The bundled sample: the real release's fortnight at one tenth of real volume."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

from opal_dp.simulate.trips import DEFAULT_SEED, day_path, generate_days

SAMPLE_DATES = tuple(date(2016, 7, 25) + timedelta(days=i) for i in range(7)) + tuple(
    date(2016, 8, 8) + timedelta(days=i) for i in range(7)
)
SAMPLE_SCALE = 0.1
SAMPLE_SEED = DEFAULT_SEED


def ensure_sample(raw_dir: Path) -> list[Path]:
    """Generate any missing sample day files (parquet) in ``raw_dir``; return all of them.

    Each day depends only on (seed, date, scale), so regenerating a missing day
    reproduces exactly the file it would have been.
    """
    paths = [day_path(raw_dir, d) for d in SAMPLE_DATES]
    missing = [d for d, p in zip(SAMPLE_DATES, paths) if not p.exists()]
    if missing:
        for _ in generate_days(missing, raw_dir, seed=SAMPLE_SEED, scale=SAMPLE_SCALE):
            pass
    return paths
