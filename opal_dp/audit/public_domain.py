"""Empirical privacy audit of the public-domain design's measurements (``opal_dp.release.marginals.public_domain``).

What is audited. A tap's three tables are each measured once by ``public_domain.noisy`` (every cell of the
public domain plus noise from the table's law, zeros included); least squares and rounding then read only
those measurements and public parameters, so they are post-processing and cannot raise the privacy loss. The
audit therefore runs the production ``noisy`` with the laws of a production ``DesignNoise`` and checks each
table against the cost that the ledger charges for it (``DesignNoise.cost``): pure ``epsilon``-DP with
``delta = 0`` for the discrete Laplace, and for the discrete Gaussian the (epsilon, delta) that OpenDP converts
its ``rho`` to.

Neighbours. One unit changes a table in the cells it touches, by at most ``linf`` each and ``l1`` in all
(``Sensitivity``); under replace-one half the change is an addition and half a removal. Untouched cells have
the same counts in both inputs and independent noise, so they are simulated from the touched ones
(post-processing) and left out. Two pairs per table: ``interior`` (the touched cells hold ``BUSY`` other
trips) and ``fresh`` (they are empty without the unit: a design that skipped the noise of zeros would show
it here, with certainty).

Output. Two sums of noisy counts: over the cells the unit adds to, and over those it removes from (none under
add/remove). They are a post-processing of the measurement, so any loss they show is a real loss; together
they move by exactly ``l1`` between the neighbours, which keeps the audit's power on at most two integers
instead of a sparse vector, and an unnoised empty cell shows as a sum that is exactly 0. ``privacy_loss.audit_samples`` then bounds ``P(S) - e^epsilon Q(S)`` over level-set events with
Clopper-Pearson and Bonferroni: a correct table is flagged with probability at most ``alpha``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from opal_dp.audit.privacy_loss import AuditReport, NeighbouringPair, Sample, audit_samples
from opal_dp.core.accounting import zcdp_epsilon
from opal_dp.core.mechanism import Relation
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.core.sparse_noise import ThresholdNoise
from opal_dp.release.marginals.public_domain import DesignNoise, noisy

BUSY = 50
"""Other trips in each touched cell of the ``interior`` pair."""
GAUSSIAN_DELTA = 0.01
"""The delta at which a Gaussian table's rho is converted to the (epsilon, delta) the audit checks."""
Measure = Callable[[np.ndarray, ThresholdNoise], np.ndarray]
"""(true counts, law) -> noisy counts: ``public_domain.noisy`` in production."""


def unit_change(sens: Sensitivity, relation: Relation) -> np.ndarray:
    """One unit's change to the cells it touches: ``l1`` in all, at most ``linf`` per cell, in at most ``l0``
    cells; under replace-one, half removed from some cells and half added to others."""
    sides = Relation(relation).units_changed
    per_side = sens.l1 // sides
    cells = [sens.linf] * (per_side // sens.linf) + ([per_side % sens.linf] if per_side % sens.linf else [])
    change = np.array(cells + [-c for c in cells] * (sides - 1), dtype=np.int64)
    if change.size > sens.l0:
        raise ValueError(f"{sens} cannot spread l1 over at most l0 cells of at most linf each")
    return change


def measurement_pairs(sens: Sensitivity, relation: Relation) -> tuple[NeighbouringPair, ...]:
    """The ``interior`` and ``fresh`` neighbours of one table (module docstring)."""
    change = unit_change(sens, relation)
    with_unit, without = np.maximum(change, 0), np.maximum(-change, 0)
    return (
        NeighbouringPair("interior", tuple(int(c) for c in BUSY + with_unit), tuple(int(c) for c in BUSY + without)),
        NeighbouringPair("fresh", tuple(int(c) for c in with_unit), tuple(int(c) for c in without)),
    )


def claim(noise: DesignNoise, table: str) -> tuple[float, float]:
    """The (epsilon, delta) a table's measurement must meet: its charged epsilon with delta 0 (Laplace), or its
    charged rho converted at ``GAUSSIAN_DELTA`` (Gaussian)."""
    budget = noise.budget[table]
    if noise.mechanism.pure:
        return budget, 0.0
    return zcdp_epsilon(budget, GAUSSIAN_DELTA), GAUSSIAN_DELTA


def audit_table(
    noise: DesignNoise,
    table: str,
    relation: Relation,
    *,
    measure: Measure = noisy,
    runs: int = 10**6,
    alpha: float = 1e-6,
) -> AuditReport:
    """Audit the measurement of ``table`` (``time-loc``, ``time`` or ``loc``) under ``noise`` against what
    the ledger charges for it, for one unit under ``relation`` (module docstring)."""
    change = unit_change(noise.sensitivity, relation)
    sides = np.stack([change > 0, change < 0], axis=1).astype(np.int64)
    law = noise.laws[table]

    def sample(counts: tuple[int, ...], n: int) -> Sample:
        added, removed = (measure(np.tile(np.asarray(counts, dtype=np.int64), (n, 1)), law) @ sides).T
        if np.abs(np.concatenate([added, removed])).max(initial=0) >= 2**30:
            raise ValueError("noisy sums too large for the audit's output encoding")
        return np.unique(added * 2**31 + removed, return_counts=True)  # exact: |removed| < 2**30

    epsilon, delta = claim(noise, table)
    description = {**noise.describe(), "table": table}
    return audit_samples(sample, measurement_pairs(noise.sensitivity, relation), description,
                         epsilon=epsilon, delta=delta, runs=runs, alpha=alpha, relation=relation)
