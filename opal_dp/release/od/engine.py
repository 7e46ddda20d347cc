"""The OD prefix tree of one date, charged to the privacy ledger under the protocol of ``release.charged``: ask the
ledger before any noise is drawn (reuse a stored tree of the same input, resume, or charge), build and store the
noisy tree at the recorded place, then complete the draw.

How OD composes with the marginals (``OdPlan``). One tree protects a card-day at ``epsilon_od`` (pure DP,
``core.prefix_tree``), and every trip of the card-day is in it, so it composes with every other release about
those trips:

- unit ``card_day``: the tree is one more charge on the date's scope, next to the six marginals; the ledger adds
  them up against the same cap, and refuses a tree that would take the date over it;
- unit ``trip``: the marginals protect one trip only and make no card-day claim; the tree is charged to the
  ``card_day`` scope of its date (its own cap), so repeated trees of a date still add up there;
- unit ``card_period``: a card's period holds one card-day per date, and each date's tree is its own mechanism:
  each is charged separately (``od <date>``) to the period's scope, which therefore pays ``epsilon_od`` per date
  on top of the marginals (basic composition; conservative when a card travels on fewer days).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp.core import PrivacyCost, PrivacyLedger, PrivacyUnit
from opal_dp.core.input_version import stand_ins
from opal_dp.core.ledger_records import Charge, Draw, Request
from opal_dp.core.prefix_tree import NoisyTree, Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.parallel import map_calls
from opal_dp.prep.sequences import from_frame
from opal_dp.private_files import read_parquet, write_parquet_exclusive
from opal_dp.release.charged import Pending, release_charged
from opal_dp.release.od.placement import OdPlacement
from opal_dp.release.periods import Periods

OD = "od"


def tree_budget(settings) -> TreeBudget:
    """One date's tree parameters from the release's ``PrivacySettings``: ``od_budget`` (epsilon), ``od_height``."""
    return TreeBudget(settings.od_budget, settings.od_height)


def tree_date_cost(budget: TreeBudget) -> PrivacyCost:
    """What one date's tree charges a card: pure ``epsilon``-DP (the module docstring's argument)."""
    return PrivacyCost.approx_dp(budget.epsilon, 0.0)


@dataclass(frozen=True)
class OdPlan(OdPlacement):
    """Unit, scope and cost of the OD trees under the marginals' configured ``unit`` (module docstring)."""

    NAME = OD
    unit: PrivacyUnit  # the marginals' unit
    budget: TreeBudget
    taxonomy: Taxonomy
    periods: Periods = field(default_factory=Periods)  # card_period: which dates form one period

    def cost(self) -> PrivacyCost:
        return tree_date_cost(self.budget)

    def mechanism(self) -> str:
        digest = hashlib.sha256(self.taxonomy.first.tobytes() + self.taxonomy.size.tobytes()).hexdigest()
        return json.dumps({"mechanism": "noisy_prefix_tree", "taxonomy_sha256": digest,
                           **self.budget.describe(self.taxonomy)}, sort_keys=True)

    def bounds(self) -> str:
        return json.dumps({"unit": PrivacyUnit.CARD_DAY.value, "max_trips": self.budget.height}, sort_keys=True)


@dataclass(frozen=True)
class OdDraw:
    tree: pd.DataFrame  # the noisy tree (``TREE_COLUMNS``), as stored at the draw's release_ref
    draw: Draw
    charge: Charge
    decision: str


def fingerprint(sequences: np.ndarray, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` of the multiset of sequences (row order does not matter): of the rows in
    lexicographic order."""
    rows = np.ascontiguousarray(sequences.astype(np.int32))
    return hmac.new(key, sorted_rows(rows).tobytes() + str(rows.shape).encode(), hashlib.sha256).hexdigest()


DENSE_SPAN = 1 << 24
"""Columns whose values span fewer than this are ranked with a table of that size (``sorted_rows``)."""


def sorted_rows(rows: np.ndarray) -> np.ndarray:
    """The rows of a 2-D integer array in lexicographic order (``rows[np.lexsort(rows.T[::-1])]``).

    Each column's values are replaced by their rank among the column's distinct values (which keeps the order);
    when the ranks of a row fit in 64 bits, rows are sorted as single integers (a sort of values, several times
    faster than the ``lexsort``, which is the fallback, as it is for a column spanning more than ``DENSE_SPAN``
    values: symbol ids span the public alphabet)."""
    if len(rows) == 0:
        return rows
    columns = []
    for column in rows.T:
        low = int(column.min())
        shifted = column.astype(np.int64) - low
        if shifted.max() >= DENSE_SPAN:
            return rows[np.lexsort(rows.T[::-1])]
        present = np.zeros(int(shifted.max()) + 1, dtype=bool)
        present[shifted] = True
        values = np.flatnonzero(present) + low
        columns.append((np.cumsum(present)[shifted] - 1, values, max(1, (len(values) - 1).bit_length())))
    if sum(bits for *_, bits in columns) > 64:
        return rows[np.lexsort(rows.T[::-1])]
    packed = np.zeros(len(rows), dtype=np.uint64)
    for rank, _, bits in columns:
        packed = (packed << np.uint64(bits)) | rank.astype(np.uint64)
    packed.sort()
    out = np.empty_like(rows)
    for j in reversed(range(len(columns))):
        rank, values, bits = columns[j]
        out[:, j] = values[(packed & np.uint64((1 << bits) - 1)).astype(np.int64)]
        packed >>= np.uint64(bits)
    return out


def release_od_days(sequences: Mapping[str, Path], plan: OdPlan, ledger: PrivacyLedger, root: Path, run_id: str,
                    fingerprint_key: bytes, fresh: bool = False,
                    input_versions: Mapping[str, str] | None = None,
                    workers: int | None = None) -> Iterator[tuple[str, OdDraw]]:
    """The noisy tree of each date's stored card-day sequences (``{date: path}``), charged first (module docstring).

    Every date is asked of the ledger before any noise is drawn; the fingerprints and the trees are computed a
    date per worker process (``workers`` of them, ``opal_dp.parallel``), which reads its sequences and stores its
    tree itself. Yields ``(date, OdDraw)`` in the given order, one tree in memory at a time. ``input_versions`` as
    in ``release.marginals.engine.release_partitions``."""
    days = list(sequences)
    prints = list(map_calls(sequences_fingerprint, [(sequences[day], fingerprint_key) for day in days], workers))
    versions = (input_versions if input_versions is not None else
                stand_ins({day: plan.scope(day) for day in days}, dict(zip(days, prints))))
    requests = [Request(plan.ledger_unit, plan.scope(day), day, day, plan.marginal(day), "add_remove",
                        plan.cost(), plan.mechanism(), plan.bounds(), print_, versions[day])
                for day, print_ in zip(days, prints)]

    def serve(pending: Sequence[Pending]) -> list[Path]:
        """Build every tree not yet stored, a date per worker (each stores its own), and hand back the paths."""
        builds = [(sequences[p.request.part], plan.taxonomy, plan.budget, p.path) for p in pending if not p.stored]
        for _ in map_calls(build_tree, builds, workers):
            pass
        return [p.path for p in pending]

    for served in release_charged(requests, serve, ledger, root, run_id, fresh):
        yield served.request.part, OdDraw(read_parquet(served.value), served.draw, served.charge, served.decision)


def sequences_fingerprint(path: Path, key: bytes) -> str:
    """``fingerprint`` of the sequences stored at ``path`` (in a worker)."""
    return fingerprint(from_frame(read_parquet(path)), key)


def build_tree(path: Path, taxonomy: Taxonomy, budget: TreeBudget, out: Path) -> None:
    """The noisy tree of the sequences at ``path``, noise from the OS CSPRNG, stored once at ``out`` (in a
    worker; a tree already there stands, as ``write_parquet_exclusive`` keeps it)."""
    noisy: NoisyTree = build_noisy_prefix_tree(from_frame(read_parquet(path)), taxonomy, budget)
    write_parquet_exclusive(pd.DataFrame(noisy.columns()), out)
