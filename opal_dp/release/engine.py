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

Public-domain design: the three tables of a tap (joint and both one-ways) are one measurement, made consistent
together, but three ledger draws (each table has its own charge, as in SBH, so the statement and the publish gate
read both designs alike). A tap is therefore served as a whole (``_serve_taps``): every table loaded from its
stored draw (all from one run), or every table drawn anew; anything in between is refused (``PartialTap``).
Why refuse rather than redraw the missing tables: the stored ones cannot be redrawn under their charge, and new
one-way tables drawn against an old joint would be inconsistent with it, and measure the same counts twice
for a single charge. Why not store the three as one file: the ledger gives each draw its own ``release_ref``,
and the publish gate compares each released table with its own stored draw. A partial tap can only come from a
crash between the three exclusive writes; the operator's way out is ``fresh_draw``, charged like any fresh draw.
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
from opal_dp.core.input_version import stand_ins
from opal_dp.core.ledger import Charge, Decision, Draw, LedgerError, Request
from opal_dp.release import public_domain as pd_design
from opal_dp.release.marginals import BY_NAME, COUNT, LOC, TIME, Marginal, histograms
from opal_dp.release.plan import ReleasePlan
from opal_dp.storage import read_parquet, remove_stale_temporaries, write_parquet_exclusive


class PartialTap(LedgerError):
    """Some tables of a public-domain tap are stored and others are not (module docstring)."""


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
    input_versions: Mapping[str, str] | None = None,
) -> dict[str, dict[str, ReleasedMarginal]]:
    """Release every marginal of ``plan`` over ``partitions`` ({"YYYY-MM-DD|mode": bounded trips}); see the
    module docstring. ``root`` is the storage root the ledger's ``release_ref``s are relative to.
    ``input_versions``: date -> input version of its scope (``core.input_version``); without it (callers with
    no raw files) a stand-in per scope of the batch (``core.input_version.stand_ins``)."""
    names = list(plan.mechanisms)
    truths = {key: histograms(partitions[key], [BY_NAME[name] for name in names]) for key in partitions}
    bounds = plan.bounds_json()
    requests = []
    prints = {key: fingerprint(hists, fingerprint_key) for key, hists in truths.items()}
    versions = ({key: input_versions[key.split("|")[0]] for key in truths} if input_versions is not None else
                stand_ins({key: plan.scope(*key.split("|")) for key in truths}, prints))
    for key in truths:
        day, mode = key.split("|")
        for name in names:
            mech = plan.mechanisms[name]
            requests.append(Request(plan.unit.value, plan.scope(day, mode), key, day, name, plan.relation.value,
                                    mech.cost(), mechanism_id(mech), bounds, prints[key], versions[key]))
    decisions = ledger.begin_many(requests, run_id=run_id, fresh=fresh)
    remove_stale_temporaries(root / "releases")
    if plan.design == "public_domain":
        frames = _serve_taps(requests, decisions, partitions, plan, root)
    else:
        frames = {}
        for request, decision in zip(requests, decisions):
            path = root / decision.draw.release_ref
            if _stored(decision, path):
                frames[request.part, request.marginal] = read_parquet(path)
            else:
                drawn = draw(truths[request.part][request.marginal], plan.mechanisms[request.marginal])
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


def _stored(decision: Decision, path: Path) -> bool:
    return decision.kind == "reuse" or (decision.kind == "resume" and path.exists())


def _serve_taps(
    requests: list[Request], decisions: list[Decision], partitions: Mapping[str, pd.DataFrame], plan: ReleasePlan,
    root: Path,
) -> dict[tuple[str, str], pd.DataFrame]:
    """The public-domain design's draws, a whole tap at a time (module docstring)."""
    taps: dict[tuple[str, str], list[tuple[Request, Decision]]] = {}
    for request, decision in zip(requests, decisions):
        taps.setdefault((request.part, BY_NAME[request.marginal].tap), []).append((request, decision))
    stored = {}
    for (part, tap), members in taps.items():  # refuse any partial tap before any noise is drawn
        paths = [root / d.draw.release_ref for _, d in members]
        stored[part, tap] = [_stored(d, path) for (_, d), path in zip(members, paths)]
        runs = {d.draw.run_id for _, d in members}
        whole = all(stored[part, tap]) and len(runs) == 1
        if (any(stored[part, tap]) and not whole) or len(members) != len(pd_design.TABLES):
            raise PartialTap(
                f"{part} tap-{tap}: the public-domain tables {', '.join(r.marginal for r, _ in members)} are one "
                f"measurement, but only some of them are stored draws of one run ({sum(stored[part, tap])} of "
                f"{len(members)}, runs {sorted(runs)}); drawing the others again would break their consistency and "
                "measure the same counts twice. Nothing was drawn. Release this partition with a fresh draw "
                "(privacy_budget.fresh_draw), which is charged anew."
            )
    frames = {}
    for (part, tap), members in taps.items():
        paths = [root / d.draw.release_ref for _, d in members]
        if all(stored[part, tap]):
            frames.update({(r.part, r.marginal): read_parquet(path) for (r, _), path in zip(members, paths)})
            continue
        drawn = draw_tap(partitions[part], plan, part.split("|")[1], tap)
        ours = [drawn[BY_NAME[r.marginal].table] for r, _ in members]
        stood = [write_parquet_exclusive(frame, path) for frame, path in zip(ours, paths)]
        if any(a is not b for a, b in zip(ours, stood)) and any(a is b for a, b in zip(ours, stood)):
            raise PartialTap(f"{part} tap-{tap}: another run stored some of its tables concurrently; the stored tap "
                             "is not one measurement")
        frames.update({(r.part, r.marginal): frame for (r, _), frame in zip(members, stood)})
    return frames


def draw_tap(partition: pd.DataFrame, plan: ReleasePlan, mode: str, tap: str) -> dict[str, pd.DataFrame]:
    """The public-domain design's three tables of one tap (``time-loc``, ``time``, ``loc``), drawn from the
    partition's bounded trips; nothing stored, nothing charged (the caller is)."""
    dom = plan.domains[mode, tap]
    labels = partition[f"tap_{tap}_loc"].cat.categories
    return pd_design.released_frames(dom, pd_design.release_tap(partition, dom, plan.noise[tap], plan.tau), labels)


def draw(truth: pd.DataFrame, mechanism: HistogramMechanism) -> pd.DataFrame:
    """An SBH draw of one marginal: the noisy bins that stay positive; nothing stored, nothing charged."""
    noisy = mechanism.release(truth[COUNT].to_numpy("int64"))
    kept = noisy > 0
    return truth.loc[kept].assign(**{COUNT: noisy[kept]}).reset_index(drop=True)
