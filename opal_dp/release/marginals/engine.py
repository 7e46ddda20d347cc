"""Release the six marginals of (date, mode) partitions under a release plan, charged to the privacy ledger.

The six true histograms of each partition's bounded trips (exactly the mechanisms' input) and a keyed
fingerprint of them make one ledger request per (partition, marginal); ``release.charged`` charges them all before
any noise is drawn, then draws or loads, stores and completes (the protocol every product shares).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opal_dp.core import HistogramMechanism, PrivacyLedger
from opal_dp.core.input_version import stand_ins
from opal_dp.core.ledger_records import Charge, Draw, LedgerError, Request
from opal_dp.release.charged import Pending, Serve, release_charged, serve_each
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.hierarchy_design import frames_of, levels_path
from opal_dp.release.marginals.time_loc_tables import LEVELS_TABLE, level_rows
from opal_dp.release.marginals.time_loc_hierarchy import release_tree
from opal_dp.release.options import Design
from opal_dp.prep.binning import split_by_mode
from opal_dp.release.marginals.schemas import TrueCells
from opal_dp.release.marginals.tables import BY_NAME, COUNT, LOC, TIME, Marginal, histograms, true_cells
from opal_dp.release.marginals.plan import ReleasePlan
from opal_dp.private_files import read_parquet, write_parquet_exclusive


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
    truths: Mapping[str, Mapping[str, pd.DataFrame]] | None = None,
    totals: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, dict[str, ReleasedMarginal]]:
    """Release every marginal of ``plan`` over ``partitions`` ({"YYYY-MM-DD|mode": bounded trips}); see the
    module docstring. ``root`` is the storage root the ledger's ``release_ref``s are relative to.
    ``input_versions``: date -> input version of its scope (``core.input_version``); without it (callers with
    no raw files) a stand-in per scope of the batch (``core.input_version.stand_ins``). ``truths``: the
    partitions' true histograms of the plan's marginals when already made (``partition_truths``, in the per-day
    workers), else made here. ``totals``: the published (tap-on, tap-off) daily totals of each partition, to which the
    hierarchy design pins its trees (``time_loc_hierarchy.totals_pins``)."""
    names = list(plan.mechanisms)
    if truths is None:
        truths = {key: histograms(partitions[key], [BY_NAME[name] for name in names]) for key in partitions}
    elif sorted(truths) != sorted(partitions) or any(sorted(t) != sorted(names) for t in truths.values()):
        raise ValueError("truths must hold the histograms of every marginal of the plan for exactly the partitions")
    bounds = plan.bounds_json()
    requests = []
    prints = {key: fingerprint(hists, fingerprint_key) for key, hists in truths.items()}
    versions = ({key: input_versions[key.split("|")[0]] for key in truths} if input_versions is not None else
                stand_ins({key: plan.scope(*key.split("|")) for key in truths}, prints))
    for key in truths:
        day, mode = key.split("|")
        for name in names:
            mech = plan.mechanisms[name]
            requests.append(Request(plan.unit, plan.scope(day, mode), key, day, name, plan.relation.value,
                                    mech.cost(), mechanism_id(mech), bounds, prints[key], versions[key]))
    if plan.design.consistent:
        serve = _serve_taps(partitions, plan, totals or {})
    else:
        serve = serve_each(lambda r: draw(truths[r.part][r.marginal], plan.mechanisms[r.marginal]))
    out: dict[str, dict[str, ReleasedMarginal]] = {key: {} for key in truths}
    for s in release_charged(requests, serve, ledger, root, run_id, fresh):
        r = s.request
        out[r.part][r.marginal] = ReleasedMarginal(BY_NAME[r.marginal], s.value, truths[r.part][r.marginal], s.draw,
                                                   s.charge, s.decision)
    return out


def partition_truths(trips: Path, over_bound: Path, mode: str, names: Sequence[str]
                     ) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """One partition's true histograms of the marginals ``names`` (the mechanisms' input: its bounded trips, stored
    at ``trips``) and its true cells (``TrueCells``: with its day's trips over the bound, stored at ``over_bound``).
    A plain function of files, for the per-day workers; nothing charged, nothing drawn."""
    truths = histograms(pd.read_parquet(trips), [BY_NAME[name] for name in names])
    return truths, TrueCells.validate(true_cells(truths, split_by_mode(pd.read_parquet(over_bound), mode)))


def _serve_taps(partitions: Mapping[str, pd.DataFrame], plan: ReleasePlan,
                totals: Mapping[str, tuple[int, int]]) -> Serve:
    """The public-domain design's draws, a whole tap at a time (module docstring)."""

    def serve(pending: Sequence[Pending]) -> list[pd.DataFrame]:
        taps: dict[tuple[str, str], list[Pending]] = {}
        for p in pending:
            taps.setdefault((p.request.part, BY_NAME[p.request.marginal].tap), []).append(p)
        for (part, tap), members in taps.items():  # refuse any partial tap before any noise is drawn
            stored = [p.stored for p in members]
            runs = {p.decision.draw.run_id for p in members}
            whole = all(stored) and len(runs) == 1
            if (any(stored) and not whole) or len(members) != len(pd_design.TABLES):
                raise PartialTap(
                    f"{part} tap-{tap}: the public-domain tables {', '.join(p.request.marginal for p in members)} are "
                    f"one measurement, but only some of them are stored draws of one run ({sum(stored)} of "
                    f"{len(members)}, runs {sorted(runs)}); drawing the others again would break their consistency and "
                    "measure the same counts twice. Nothing was drawn. Release this partition with a fresh draw "
                    "(privacy_budget.fresh_draw), which is charged anew."
                )
        frames: dict[tuple[str, str], pd.DataFrame] = {}
        for (part, tap), members in taps.items():
            if all(p.stored for p in members):
                frames.update({(p.request.part, p.request.marginal): read_parquet(p.path) for p in members})
                continue
            drawn = draw_tap(partitions[part], plan, part.split("|")[1], tap, totals.get(part))
            ours = [drawn[BY_NAME[p.request.marginal].table] for p in members]
            stood = [write_parquet_exclusive(frame, p.path) for frame, p in zip(ours, members)]
            if any(a is not b for a, b in zip(ours, stood)) and any(a is b for a, b in zip(ours, stood)):
                raise PartialTap(f"{part} tap-{tap}: another run stored some of its tables concurrently; the stored "
                                 "tap is not one measurement")
            frames.update({(p.request.part, p.request.marginal): frame for p, frame in zip(members, stood)})
            if LEVELS_TABLE in drawn:  # the tap's coarser rows, after its tables (a missing file refuses the tap)
                joint = next(p for p in members if BY_NAME[p.request.marginal].table == "time-loc")
                write_parquet_exclusive(drawn[LEVELS_TABLE], levels_path(joint.path))
        return [frames[p.request.part, p.request.marginal] for p in pending]

    return serve


def draw_tap(partition: pd.DataFrame, plan: ReleasePlan, mode: str, tap: str,
             totals: tuple[int, int] | None = None) -> dict[str, pd.DataFrame]:
    """A consistent design's three tables of one tap (``time-loc``, ``time``, ``loc``), drawn from the partition's
    bounded trips (the hierarchy pinned to the day's published ``totals`` when given); nothing stored, nothing charged
    (the caller is)."""
    labels = partition[f"tap_{tap}_loc"].cat.categories
    if plan.design is Design.HIERARCHY:
        taps = plan.hierarchy[tap]
        if (taps.root_sd is None) != (totals is None):
            raise ValueError(f"{mode} tap-{tap}: the plan {'pins' if totals is None else 'does not pin'} its trees to "
                             "the published daily totals, and the draw was given "
                             f"{'none' if totals is None else 'some'}")
        dom = taps.domains[mode]
        finest = dom.finest_counts(partition[f"tap_{tap}_window"].to_numpy("int64"),
                                   partition[f"tap_{tap}_loc"].astype(str).to_numpy(object))
        released = release_tree(dom, finest, taps.budget, taps.taus, noise=taps.noise, totals=totals)
        return frames_of(released, labels) | {LEVELS_TABLE: level_rows(released)}
    dom = plan.domains[mode, tap]
    return pd_design.released_frames(dom, pd_design.release_tap(partition, dom, plan.noise[tap], plan.tau), labels)


def draw(truth: pd.DataFrame, mechanism: HistogramMechanism) -> pd.DataFrame:
    """An SBH draw of one marginal: the noisy bins that stay positive; nothing stored, nothing charged."""
    noisy = mechanism.release(truth[COUNT].to_numpy("int64"))
    kept = noisy > 0
    return truth.loc[kept].assign(**{COUNT: noisy[kept]}).reset_index(drop=True)
