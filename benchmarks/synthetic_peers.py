"""MST and AIM (``smartnoise-synth``) on the same bounded card-day table and budget as the archetype synthesizer.

The table (private, internal scoring only): one row per kept card-day of the period, after the same bounding
(``prep.bounding.keep_mask``, ``card_period``: at most m trips per card-day, D card-days per card), with the
columns the archetype queries use: ``date``, ``archetype``, ``trips``, and for each trip slot j = 1..m in tap-on
order ``mode_j``, ``hour_j``, ``on_j``, ``off_j`` (districts, ``release.synthetic.archetypes``); an empty slot
holds the extra code ``EMPTY`` of each (its size - 1). Every domain is public.

Budget: the peers guarantee zCDP per *row*; one card has at most D rows, so by group privacy (zCDP: k rows
cost k² rho) a peer fitted at ``rho / D²`` per row is ``rho``-zCDP per card, ``rho`` being the same
``zcdp_rho_for(epsilon, delta)`` our queries share: the same (epsilon, delta) per card over the period.

The peers run in their own environment (``make synth-peers``; smartnoise-synth pins ``opendp<0.15``, the project
``opendp==0.16``), one subprocess per fit (``benchmarks/synthetic_peer_child.py``), measured with ``os.wait4``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.network import MODES
from opal_dp.release.synthetic.archetypes import ARCHETYPES, HOURS, Districts, card_days, trip_features

REPO = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "synthetic_peer_child.py"
PEERS = ("mst", "aim")
SLOT = ("mode", "hour", "on", "off")


def peer_python() -> Path | None:
    """The peer environment's interpreter (``$OPAL_DP_SYNTH_PEERS_PYTHON`` or ``.venv-synth-peers``), if built."""
    path = Path(os.environ.get("OPAL_DP_SYNTH_PEERS_PYTHON", REPO / ".venv-synth-peers" / "bin" / "python"))
    return path if path.exists() else None


def cardinality(n_dates: int, dist: Districts, m: int) -> dict[str, int]:
    """Public size of every column (module docstring); the last code of a slot column is ``EMPTY``."""
    sizes = {"date": n_dates, "archetype": len(ARCHETYPES), "trips": m + 1}
    for j in range(1, m + 1):
        sizes |= {f"mode_{j}": len(MODES) + 1, f"hour_{j}": HOURS + 1, f"on_{j}": len(dist.names),
                  f"off_{j}": len(dist.names) + 1}
    return sizes


def card_day_table(kept: Mapping[str, pd.DataFrame], dates: list[str], dist: Districts, m: int) -> pd.DataFrame:
    """The bounded card-day table (module docstring) of ``kept`` ({date: kept ``CardBinnedTrips``})."""
    sizes = cardinality(len(dates), dist, m)
    frames = []
    for day, trips in kept.items():
        features = trip_features(trips, dist).sort_values(["card_id", "window"], kind="stable", ignore_index=True)
        per_day = card_days(features, pd.Timestamp(day).date(), m)
        card = features["card_id"].to_numpy()
        slot = np.arange(len(card)) - np.searchsorted(card, card)  # 0-based rank of the trip in its card-day
        at = np.searchsorted(per_day["card_id"].to_numpy(), card)
        table = {"date": np.full(len(per_day), dates.index(day)), "archetype": per_day["archetype"].to_numpy(),
                 "trips": per_day["trips"].to_numpy()}
        for j in range(m):
            mine = slot == j
            for name, source in zip(SLOT, ("mode", "hour", "on_district", "off_district")):
                column = np.full(len(per_day), sizes[f"{name}_{j + 1}"] - 1)
                column[at[mine]] = features[source].to_numpy()[mine]
                table[f"{name}_{j + 1}"] = column
        frames.append(pd.DataFrame(table))
    return pd.concat(frames, ignore_index=True).astype(np.int64)[list(sizes)]


def scored_rows(table: pd.DataFrame, m: int) -> pd.DataFrame:
    """A peer's synthetic card-days -> one row per trip in the scored columns (``reports.synthetic_score``): the
    filled slots of each card-day (a slot counts if its mode is not ``EMPTY``), ``card_day_trips`` their number."""
    empty_mode = len(MODES)
    filled = np.stack([table[f"mode_{j}"].to_numpy() != empty_mode for j in range(1, m + 1)], axis=1)
    n = filled.sum(axis=1)
    rows = []
    for j in range(1, m + 1):
        keep = filled[:, j - 1]
        part = table.loc[keep]
        rows.append(pd.DataFrame({"date": part["date"], "mode": part[f"mode_{j}"],
                                  "hour": np.minimum(part[f"hour_{j}"], HOURS - 1),
                                  "on_district": part[f"on_{j}"], "off_district": part[f"off_{j}"],
                                  "card_day_trips": n[keep]}))
    return pd.concat(rows, ignore_index=True).astype(np.int16)


def peer_rho(epsilon: float, delta: float, days_per_card: int) -> float:
    """zCDP per row that makes a peer ``zcdp_rho_for(epsilon, delta)``-zCDP per card (module docstring)."""
    return zcdp_rho_for(epsilon, delta) / days_per_card**2


def fit_peer(method: str, table: pd.DataFrame, sizes: Mapping[str, int], rho: float, delta: float, folder: Path,
             python: Path, timeout_s: float | None = None) -> tuple[pd.DataFrame | None, dict]:
    """Fit and sample one peer in its environment; returns its card-days and (fit, sample, wall) seconds with the
    subprocess's peak RSS, or ``None`` and ``{"timed_out_s": timeout_s}`` if it ran longer than ``timeout_s``
    (then stopped)."""
    folder.mkdir(parents=True, exist_ok=True)
    table.to_parquet(folder / "table.parquet", index=False)
    (folder / "domain.json").write_text(json.dumps({"cardinality": dict(sizes), "rho": rho, "delta": delta}))
    out = folder / f"{method}.parquet"
    started = time.perf_counter()
    with open(folder / f"{method}.log", "wb") as log:
        child = subprocess.Popen([str(python), str(CHILD), method, str(folder / "table.parquet"),
                                  str(folder / "domain.json"), str(out)], stdout=log, stderr=subprocess.STDOUT,
                                 env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        deadline = None if timeout_s is None else started + timeout_s
        while True:
            pid, status, usage = os.wait4(child.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                child.kill()
                os.wait4(child.pid, 0)
                (folder / "table.parquet").unlink()
                return None, {"timed_out_s": timeout_s}
            time.sleep(1.0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{method} failed with exit code {os.waitstatus_to_exitcode(status)}; see "
                           f"{folder / (method + '.log')}")
    timing = json.loads(Path(str(out) + ".json").read_text())
    sample = pd.read_parquet(out)
    (folder / "table.parquet").unlink()  # private
    return sample, {**timing, "wall_s": time.perf_counter() - started, "peak_rss_bytes": usage.ru_maxrss * 1024}


def peers(methods: tuple[str, ...], epsilon: float, delta: float, days_per_card: int, m: int, dates: list[str],
          dist: Districts, folder: Path, python: Path, measured: dict, timeout_s: float | None = None) -> Callable:
    """``reports.synthetic_score.Peers`` fitting ``methods`` on the bounded card-day table at (``epsilon``,
    ``delta``) per card; each fit's timing and peak RSS land in ``measured[method]``; a fit longer than
    ``timeout_s`` is stopped and left out of the scores."""

    def fit(kept: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
        table = card_day_table(kept, dates, dist, m)
        sizes = cardinality(len(dates), dist, m)
        rho = peer_rho(epsilon, delta, days_per_card)
        out = {}
        for method in methods:
            sample, measured[method] = fit_peer(method, table, sizes, rho, delta, folder, python, timeout_s)
            measured[method] |= {"rho_per_row": rho, "card_days_in": len(table)}
            if sample is not None:
                measured[method]["card_days_out"] = len(sample)
                out[method] = scored_rows(sample, m)
        return out

    return fit
