"""Release the six marginals of (date, mode) partitions under a release plan, charged to the privacy ledger.

Order of operations, which is the privacy argument for the ledger:
1. compute the six true histograms of each partition's bounded trips (exactly the mechanisms' input) and
   a keyed fingerprint of them;
2. ask the ledger about every (partition, marginal) *before any noise is drawn*: reuse a stored draw of the
   same input (no noise, no charge), resume a charged draw, join an open charge of the same scope
   histogram, or charge anew (failing here, before any noise, if a scope's cap would be exceeded); the
   ledger records where each new draw will be stored;
3. draw, store each draw at its recorded place (exclusively: if another run stored it first, theirs
   stands and ours is discarded unseen), and only then mark the draws complete.
A run killed between 2 and 3 leaves charged draws; the rerun resumes them, loading any that were stored,
so the ledger is never under-charged and a charge never holds two draws of one part.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import HistogramMechanism, PrivacyLedger
from opal_dp.core.ledger import Charge, Draw, Request
from opal_dp.release.marginals import BY_NAME, COUNT, LOC, TIME, Marginal, histograms
from opal_dp.release.plan import ReleasePlan
from opal_dp.storage import read_parquet, remove_stale_temporaries, write_parquet_exclusive


@dataclass(frozen=True)
class ReleasedMarginal:
    marginal: Marginal
    frame: pd.DataFrame  # released bins only, canonical order, integer counts
    truth: pd.DataFrame  # the mechanism's input: true counts of the bounded trips (private: checks only)
    draw: Draw  # the ledger draw that stands for ``frame``
    charge: Charge
    decision: str  # reuse | resume | join | charge

    @property
    def reused(self) -> bool:
        return self.decision == "reuse"


def fingerprint(truths: Mapping[str, pd.DataFrame], key: bytes) -> str:
    """HMAC-SHA256 under ``key`` of the true histograms: equal fingerprints mean identical mechanism inputs,
    and without the key a fingerprint reveals nothing about them."""
    digest = hmac.new(key, digestmod=hashlib.sha256)
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
    plan: ReleasePlan,
    ledger: PrivacyLedger,
    root: Path,
    run_id: str,
    fingerprint_key: bytes,
    fresh: bool = False,
) -> dict[str, dict[str, ReleasedMarginal]]:
    """Release every marginal of ``plan`` over ``partitions`` ({"YYYY-MM-DD|mode": bounded trips}); see the
    module docstring. ``root`` is the storage root the ledger's ``release_ref``s are relative to."""
    names = list(plan.mechanisms)
    truths = {key: histograms(partitions[key], [BY_NAME[name] for name in names]) for key in partitions}
    bounds = plan.bounds_json()
    requests = []
    for key, hists in truths.items():
        day, mode = key.split("|")
        prints = fingerprint(hists, fingerprint_key)
        for name in names:
            mech = plan.mechanisms[name]
            requests.append(Request(plan.unit.value, plan.scope(day, mode), key, day, name, plan.relation.value,
                                    mech.cost(), mechanism_id(mech), bounds, prints))
    decisions = ledger.begin_many(requests, run_id=run_id, fresh=fresh)
    remove_stale_temporaries(root / "releases")
    frames = {}
    for request, decision in zip(requests, decisions):
        path = root / decision.draw.release_ref
        if decision.kind == "reuse" or (decision.kind == "resume" and path.exists()):
            frames[request.part, request.marginal] = read_parquet(path)
        else:
            drawn = _draw(truths[request.part][request.marginal], plan.mechanisms[request.marginal])
            frames[request.part, request.marginal] = write_parquet_exclusive(drawn, path)
    ledger.complete_many([d.draw.id for d in decisions if d.kind != "reuse"], run_id=run_id)
    stored = {d.id: d for d in ledger.draws([d.draw.id for d in decisions])}
    out: dict[str, dict[str, ReleasedMarginal]] = {key: {} for key in truths}
    for request, decision in zip(requests, decisions):
        out[request.part][request.marginal] = ReleasedMarginal(
            BY_NAME[request.marginal], frames[request.part, request.marginal], truths[request.part][request.marginal],
            stored[decision.draw.id], decision.charge, decision.kind,
        )
    return out


def _draw(truth: pd.DataFrame, mechanism: HistogramMechanism) -> pd.DataFrame:
    noisy = mechanism.release(truth[COUNT].to_numpy("int64"))
    kept = noisy > 0
    return truth.loc[kept].assign(**{COUNT: noisy[kept]}).reset_index(drop=True)
