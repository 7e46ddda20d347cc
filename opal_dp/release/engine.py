"""Release the six marginals of (date, mode) partitions, charged to the privacy ledger.

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
from opal_dp.core.ledger import Request
from opal_dp.release.marginals import BY_NAME, COUNT, LOC, TIME, Marginal, histograms
from opal_dp.storage import write_parquet_atomic

PARTITION = "partition"


@dataclass(frozen=True)
class ReleasedMarginal:
    marginal: Marginal
    frame: pd.DataFrame  # released bins only, canonical order, integer counts
    truth: pd.DataFrame  # the true histogram it was drawn from (private: for checks only)
    entry_id: int
    reused: bool  # True: an identical earlier release was returned, no noise drawn, nothing charged


def fingerprint(truths: Mapping[str, pd.DataFrame]) -> str:
    """SHA-256 of the true histograms: equal fingerprints mean identical mechanism inputs."""
    digest = hashlib.sha256()
    for name in sorted(truths):
        frame = truths[name]
        digest.update(name.encode())
        if TIME in frame:
            digest.update(frame[TIME].to_numpy("int16").tobytes())
        if LOC in frame:  # codes into the public label universe, and the universe itself
            digest.update("\x1f".join(frame[LOC].cat.categories).encode())
            digest.update(frame[LOC].cat.codes.to_numpy("int32").tobytes())
        digest.update(frame[COUNT].to_numpy("int64").tobytes())
    return digest.hexdigest()


def mechanism_id(mechanism: HistogramMechanism) -> str:
    return json.dumps(mechanism.describe(), sort_keys=True)


def release_partitions(
    partitions: Mapping[str, pd.DataFrame],
    mechanisms: Mapping[str, HistogramMechanism],
    ledger: PrivacyLedger,
    store: Path,
    run_id: str,
    fresh: bool = False,
) -> dict[str, dict[str, ReleasedMarginal]]:
    """Release ``mechanisms`` (marginal name -> mechanism) over every partition; see module docstring.

    All charges are decided in one ledger transaction (all or nothing), all draws of one marginal
    are stored in one file per run, and all completions are recorded in one transaction.
    """
    truths = {key: histograms(partitions[key], [BY_NAME[name] for name in mechanisms]) for key in partitions}
    prints = {key: fingerprint(hists) for key, hists in truths.items()}
    requests = [
        Request(key, name, m.epsilon, m.delta, mechanism_id(m), prints[key])
        for key in truths
        for name, m in mechanisms.items()
    ]
    decisions = dict(zip(((r.partition, r.marginal) for r in requests), ledger.begin_many(requests, run_id=run_id, fresh=fresh)))
    frames = {pair: None for pair in decisions}
    for pair, decision in decisions.items():
        if decision.kind != "reuse":
            key, name = pair
            frames[pair] = _draw(truths[key][name], mechanisms[name])
    completions = []
    for name in mechanisms:
        drawn = {key: frames[(key, name)] for key in truths if decisions[(key, name)].kind != "reuse"}
        if drawn:
            path = store / run_id / f"{name}.parquet"
            _store(drawn, path)
            completions += [(decisions[(key, name)].entry.id, str(path)) for key in drawn]
    ours = dict(completions)
    standing = dict(zip(ours, ledger.complete_many(completions, run_id=run_id)))
    to_load = {}  # stored releases to use: reused ones, and another run's where it completed first
    for pair, decision in decisions.items():
        entry = decision.entry
        ref = entry.release_ref if decision.kind == "reuse" else standing[entry.id]
        if decision.kind == "reuse" or ref != ours[entry.id]:
            to_load.setdefault(ref, []).append(pair)
    for ref, pairs in to_load.items():
        stored = _load(ref, [key for key, _ in pairs])
        for pair in pairs:
            frames[pair] = stored[pair[0]]
    return {
        key: {
            name: ReleasedMarginal(BY_NAME[name], frames[(key, name)], truths[key][name],
                                   decisions[(key, name)].entry.id, decisions[(key, name)].kind == "reuse")
            for name in mechanisms
        }
        for key in truths
    }


def _draw(truth: pd.DataFrame, mechanism: HistogramMechanism) -> pd.DataFrame:
    noisy = mechanism.release(truth[COUNT].to_numpy("int64"))
    kept = noisy > 0
    return truth.loc[kept].assign(**{COUNT: noisy[kept]}).reset_index(drop=True)


def _store(drawn: Mapping[str, pd.DataFrame], path: Path) -> None:
    """All partitions' draws of one marginal in one file, tagged with their partition key."""
    keys = list(drawn)
    tagged = [drawn[k].assign(**{PARTITION: k}) for k in keys]
    stacked = pd.concat([t for t in tagged if len(t)] or tagged[:1], ignore_index=True)
    stacked[PARTITION] = pd.Categorical(stacked[PARTITION], categories=keys)
    write_parquet_atomic(stacked, path)


def _load(ref: str, partitions: list[str]) -> dict[str, pd.DataFrame]:
    """The stored draws of ``partitions`` (a partition with nothing released has no rows)."""
    stored = pd.read_parquet(ref)
    groups = {str(k): g for k, g in stored.groupby(PARTITION, observed=True, sort=False)}
    empty = stored.iloc[:0]
    return {p: groups.get(p, empty).drop(columns=[PARTITION]).reset_index(drop=True) for p in partitions}
