"""Release the six marginals of one (date, mode) partition, charged to the privacy ledger.

Order of operations, which is the privacy argument for the ledger:
1. compute the six true histograms and a fingerprint of them (exactly the mechanisms' input);
2. ask the ledger about all six *before any noise is drawn*: reuse a stored release of the same input
   (no noise, no charge), resume a charge whose draw was never stored, or charge anew (failing here,
   before any noise, if the partition's cap would be exceeded);
3. draw, store the release atomically, and only then mark the charge complete.
A run killed between 2 and 3 leaves a charge without a stored release; the rerun resumes it, so the
ledger is never under-charged and never charged twice for one stored release.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import HistogramMechanism, PrivacyLedger
from opal_dp.release.marginals import BY_NAME, COUNT, LOC, TIME, Marginal, histogram
from opal_dp.storage import write_parquet_atomic


@dataclass(frozen=True)
class ReleasedMarginal:
    marginal: Marginal
    frame: pd.DataFrame  # released bins only, canonical order, integer counts
    truth: pd.DataFrame  # the true histogram it was drawn from (private: for checks only)
    entry_id: int
    reused: bool  # True: an identical earlier release was returned, no noise drawn, nothing charged


def fingerprint(histograms: Mapping[str, pd.DataFrame]) -> str:
    """SHA-256 of the true histograms: equal fingerprints mean identical mechanism inputs."""
    digest = hashlib.sha256()
    for name in sorted(histograms):
        frame = histograms[name]
        digest.update(name.encode())
        if TIME in frame:
            digest.update(frame[TIME].to_numpy("int16").tobytes())
        if LOC in frame:
            digest.update("\x1f".join(frame[LOC].astype(str)).encode())
        digest.update(frame[COUNT].to_numpy("int64").tobytes())
    return digest.hexdigest()


def mechanism_id(mechanism: HistogramMechanism) -> str:
    return json.dumps(mechanism.describe(), sort_keys=True)


def release_partition(
    partition_key: str,
    partition: pd.DataFrame,
    mechanisms: Mapping[str, HistogramMechanism],
    ledger: PrivacyLedger,
    store: Path,
    run_id: str,
    fresh: bool = False,
) -> dict[str, ReleasedMarginal]:
    """Release ``mechanisms`` (marginal name -> mechanism) over one partition; see module docstring."""
    truths = {name: histogram(partition, BY_NAME[name]) for name in mechanisms}
    input_print = fingerprint(truths)
    decisions = {
        name: ledger.begin(
            partition_key,
            name,
            epsilon=mechanism.epsilon,
            delta=mechanism.delta,
            mechanism=mechanism_id(mechanism),
            fingerprint=input_print,
            run_id=run_id,
            fresh=fresh,
        )
        for name, mechanism in mechanisms.items()
    }
    released = {}
    for name, decision in decisions.items():
        entry = decision.entry
        if decision.kind == "reuse":
            frame = pd.read_parquet(entry.release_ref)
        else:
            frame = _draw(truths[name], mechanisms[name])
            path = store.joinpath(*partition_key.split("|"), f"{name}-{entry.id}.parquet")
            write_parquet_atomic(frame, path)
            standing = ledger.complete(entry.id, str(path), run_id=run_id)
            if standing != str(path):  # a concurrent run stored first: publish its draw, not ours
                frame = pd.read_parquet(standing)
        released[name] = ReleasedMarginal(BY_NAME[name], frame, truths[name], entry.id, decision.kind == "reuse")
    return released


def _draw(truth: pd.DataFrame, mechanism: HistogramMechanism) -> pd.DataFrame:
    noisy = mechanism.release(truth[COUNT].to_numpy("int64"))
    kept = noisy > 0
    return truth.loc[kept].assign(**{COUNT: noisy[kept]}).reset_index(drop=True)
