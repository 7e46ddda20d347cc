"""Empirical audit of the hierarchical OD measurement (``core.hierarchy.measure``) against its ledger charge.

The fit reads only the measurement, so the privacy of the release is that of the measurement: per level, every
cell of the public domain plus independent discrete Gaussian noise, and the charge must cover
``sum_l l2_squared_l / (2 sigma_l²)``. The audit runs the measurement ``runs`` times on an all-zero input over a
small public tree, so every output is pure noise, and checks two things:

1. *domain*: every cell of every level is in the output and carries noise. A cell that is 0 in every run is
   flagged (a correct cell is 0 in every run with probability ``P(Z = 0)**runs``; ``false_alarm_bound`` adds
   ``cells * P(Z = 0)**runs`` to ``alpha``). A measurement whose domain comes from the data (noise only on
   occupied cells) fails here with certainty on an empty input.
2. *charge*: for each level, the share of runs with ``|noise| >= k`` (``k`` the level's claimed sigma, rounded)
   gives, by Hoeffding's inequality at ``alpha / levels``, an upper confidence bound ``sigma_up`` on the level's
   sigma (``P(|Z| >= k)`` grows with sigma); ``rho_low = sum_l l2_squared_l / (2 sigma_up_l²)`` is then a lower
   bound on the measurement's real zCDP loss, with probability at least ``1 - alpha``. It is flagged when it
   exceeds the charged rho: a level left out of the charge, or noise smaller than its level's budget, shows
   here. A correct release is flagged with probability at most ``alpha``.

The date's totals (``core.totals``), measured under the same charge, are audited with the levels as one more
"level" of two cells (``l2_squared`` of the totals, their claimed sigma): their loss is in ``rho_low`` too.

``audit_charges`` runs it against the ledger's own records (``privacy_audit`` before publishing): the parameters and
cost each hierarchy charge states, so a release that charges less than its levels cost is caught whatever the
configuration says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.discrete_gaussian import pmf
from opal_dp.core.hierarchy import HierarchyBudget, Measurement, Tree
from opal_dp.core.hierarchy import measure as production_measure
from opal_dp.core.ledger_records import Charge
from opal_dp.core.totals import TAPS, TotalsBudget, date_cost
from opal_dp.core.totals import measure_totals as production_totals

Measure = Callable[[Tree, np.ndarray, HierarchyBudget], Measurement]
MeasureTotals = Callable[[np.ndarray, TotalsBudget], np.ndarray]


def tail_share(sigma: float, k: int) -> float:
    """``P(|Z| >= k)`` for ``Z ~ N_Z(0, sigma²)`` (float64, from the normalised pmf)."""
    k0, mass = pmf(float(sigma))
    z = np.arange(k0, -k0 + 1)
    return float(mass[np.abs(z) >= k].sum())


def sigma_upper(share: float, k: int) -> float:
    """The largest sigma with ``P(|Z| >= k) <= share`` (bisection; ``inf`` when no sigma exceeds it)."""
    lo, hi = 1e-3, 1.0
    while tail_share(hi, k) <= share:
        hi *= 2
        if hi > 2**16:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail_share(mid, k) <= share else (lo, mid)
    return hi


@dataclass(frozen=True)
class HierarchyAudit:
    rho_lower: float  # lower confidence bound on the measurement's zCDP loss
    charged_rho: float
    silent_cells: int  # cells that were 0 in every run (no noise: a data-dependent domain)
    missing_cells: int  # cells of the public domain absent from the output
    sigma_upper: tuple[float, ...]
    false_alarm_bound: float
    level_rho_lower: tuple[float, ...] = ()  # per level: l2_squared / (2 sigma_upper²), their sum is rho_lower

    @property
    def passed(self) -> bool:
        return self.rho_lower <= self.charged_rho and self.silent_cells == 0 and self.missing_cells == 0


def audit_measurement(measure: Measure, budget: HierarchyBudget, charged: PrivacyCost, tree: Tree | None = None,
                      runs: int = 100_000, alpha: float = 1e-6, totals: TotalsBudget | None = None,
                      measure_totals: MeasureTotals = production_totals) -> HierarchyAudit:
    """Audit ``measure`` (production: ``core.hierarchy.measure``) under ``budget``, and ``measure_totals`` under
    ``totals`` when the charge covers totals, against the ``charged`` cost (module docstring). Each is called once,
    on ``runs`` independent all-zero inputs."""
    tree = Tree((np.zeros(2, dtype=np.int64), np.array([0, 0, 1, 1]))) if tree is None else tree
    samples = list(measure(tree, np.zeros((runs, tree.sizes[-1]), dtype=np.int64), budget).levels)  # all runs at once
    sizes, l2s, sigmas = list(tree.sizes), list(budget.l2_squared), list(budget.sigmas)
    if totals is not None:
        samples.append(measure_totals(np.zeros((runs, len(TAPS)), dtype=np.int64), totals))
        sizes, l2s, sigmas = [*sizes, len(TAPS)], [*l2s, totals.l2_squared], [*sigmas, totals.sigma]
    for size, values in zip(sizes, samples):
        if values.shape != (runs, size):
            return HierarchyAudit(math.inf, charged.rho, 0, size - values.shape[-1], (), alpha)
    silent = sum(int((~s.any(axis=0)).sum()) for s in samples)
    uppers, levels = [], []
    for s, l2, claimed in zip(samples, l2s, sigmas):
        k = max(1, round(claimed))
        share = float((np.abs(s) >= k).mean())
        slack = math.sqrt(math.log(2 * len(samples) / alpha) / (2 * s.size))
        uppers.append(sigma_upper(min(1.0, share + slack), k))
        levels.append(l2 / (2 * uppers[-1] ** 2))
    zero = sum(size * float(pmf(float(sigma))[1][-pmf(float(sigma))[0]]) ** runs
               for size, sigma in zip(sizes, sigmas))
    return HierarchyAudit(math.fsum(levels), charged.rho, silent, 0, tuple(uppers), alpha + zero, tuple(levels))


def recorded_budget(mechanism: str) -> HierarchyBudget:
    """The ``HierarchyBudget`` a ledger charge of the hierarchy records (``HierarchyPlan.mechanism``), checked to
    rebuild the recorded sigmas and sensitivities (a parameter read back wrong would audit other noise)."""
    recorded = json.loads(mechanism)
    caps = recorded.get("coarse_caps")
    budget = HierarchyBudget(recorded["rho"], tuple(recorded["shares"]), recorded["max_items"],
                             recorded["max_per_cell"], recorded["false_cells"], None if caps is None else tuple(caps),
                             recorded.get("groups", 1))
    rebuilt = budget.describe()
    if any(rebuilt[k] != recorded[k] for k in ("sigma", "l2_squared") if k in recorded):
        raise ValueError("the recorded hierarchy parameters do not rebuild its recorded noise (sigma, l2_squared)")
    return budget


def recorded_totals(mechanism: str) -> TotalsBudget | None:
    """The ``TotalsBudget`` a hierarchy charge records, if it measured totals."""
    recorded = json.loads(mechanism).get("totals")
    return None if recorded is None else TotalsBudget(recorded["rho"], recorded["max_items"], recorded["max_per_mode"])


def audit_charges(charges: Sequence[Charge], fallback: HierarchyBudget, measure: Measure = production_measure,
                  runs: int = 100_000, alpha: float = 1e-6, fallback_totals: TotalsBudget | None = None,
                  measure_totals: MeasureTotals = production_totals) -> dict[str, HierarchyAudit]:
    """The measurement audited against what the ledger actually charged: once per distinct (recorded parameters,
    charged cost) among ``charges`` (the hierarchy's, ``release.od.hierarchy.OD_HIERARCHY``), each at
    ``alpha / audits``; with no charge yet, the configured ``fallback`` budget (and ``fallback_totals``) against
    its own cost. Keyed by ``rho <charged>``, ``sigma <claimed sigmas>``."""
    pairs = sorted({(c.mechanism, c.cost) for c in charges}, key=lambda p: (p[0], p[1].rho))
    own = date_cost(fallback.cost(), fallback_totals)
    audits = ([(recorded_budget(m), recorded_totals(m), cost) for m, cost in pairs] if pairs
              else [(fallback, fallback_totals, own)])
    return {f"rho {cost.rho:.6g}, sigma {', '.join(f'{s:.4g}' for s in budget.sigmas)}"
            + (f", totals sigma {totals.sigma:.4g}" if totals else ""):
            audit_measurement(measure, budget, cost, runs=runs, alpha=alpha / len(audits), totals=totals,
                              measure_totals=measure_totals) for budget, totals, cost in audits}
