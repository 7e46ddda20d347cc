"""``audit.hierarchy.audit_charges``, what ``privacy_audit`` runs for the OD hierarchy: it audits what the ledger
recorded, once per distinct (parameters, cost), and a domain taken from the data fails it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from opal_dp.audit.hierarchy import audit_charges, recorded_budget
from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import HierarchyBudget, Measurement, measure
from opal_dp.core.ledger_records import Charge
from opal_dp.release.settings import WEEKLY_OD_HIERARCHY_RHO

BUDGET = HierarchyBudget(0.5, (0.1, 0.3, 0.6), max_items=4, max_per_cell=2)


def charge(budget: HierarchyBudget, rho: float, id_: int = 1) -> Charge:
    mechanism = json.dumps({**budget.describe(), "tau": 9, "domain_sha256": "x"}, sort_keys=True)
    return Charge(id_, "card_day", "2016-07-25", "od_hierarchy", "add_remove", "zcdp", 0.0, rho, 0.0, mechanism, "{}",
                  "r", "t")


def test_the_recorded_parameters_are_read_back():
    assert recorded_budget(charge(BUDGET, 0.5).mechanism) == BUDGET


def test_one_audit_per_distinct_charge_and_the_configured_budget_without_charges():
    seen = []

    def spy(tree, finest, budget):
        seen.append(budget.rho)
        return measure(tree, finest, budget, DiscreteGaussian(SeededBits(len(seen))))

    other = HierarchyBudget(0.25, BUDGET.shares, 4, 2)
    reports = audit_charges([charge(BUDGET, 0.5, 1), charge(BUDGET, 0.5, 2), charge(other, 0.25, 3)], BUDGET, spy,
                            runs=50)
    assert len(reports) == 2 and sorted(set(seen)) == [0.25, 0.5] and len(seen) == 2  # all runs at once
    assert sorted(r.charged_rho for r in reports.values()) == [0.25, 0.5]
    (fallback,) = audit_charges([], other, spy, runs=10).values()
    assert fallback.charged_rho == 0.25
    assert len(fallback.level_rho_lower) == 3 and math.fsum(fallback.level_rho_lower) == fallback.rho_lower


def test_a_domain_taken_from_the_data_fails_the_audit_of_the_ledgers_charges():
    noise = DiscreteGaussian(SeededBits(3))

    def occupied_cells_only(tree, finest, budget):
        truth = tree.level_counts(finest)
        return Measurement(tuple(np.where(t > 0, t + noise.sample(s, t.size).reshape(t.shape), 0) for t, s in zip(truth, budget.sigmas)))

    (report,) = audit_charges([charge(BUDGET, 0.5)], BUDGET, occupied_cells_only, runs=200).values()
    assert not report.passed and report.silent_cells == 7


def test_the_audit_has_power_at_the_weekly_defaults_large_sigmas():
    """At the weekly default's rho (sigmas near 1,000 for the mode totals), every level's share of the loss shows
    in the lower bound, so a level left out of the charge (the mode totals: a tenth) is caught. Kills an upper
    search for sigma that gives up (``inf``, a zero lower bound) below the level's sigma."""
    weekly = HierarchyBudget(WEEKLY_OD_HIERARCHY_RHO, BUDGET.shares, max_items=28, max_per_cell=2)
    noise = DiscreteGaussian(SeededBits(5))
    (report,) = audit_charges([], weekly, lambda t, c, b: measure(t, c, b, noise)).values()
    assert report.passed and max(weekly.sigmas) > 512
    assert all(lower > 0.9 * rho for lower, rho in zip(report.level_rho_lower, weekly.level_rho))
    uncharged = sum(weekly.level_rho[1:])
    assert report.rho_lower > uncharged


def test_a_budget_with_cell_caps_and_groups_is_read_back_whole():
    """A time x location charge records its per-level caps and groups; the audit rebuilds exactly that budget (its
    sigmas and sensitivities), and a record whose parameters do not rebuild its own noise is refused."""
    capped = HierarchyBudget(0.05, (0.02, 0.25, 0.28, 0.45), max_items=4, max_per_cell=1, false_cells=0.001,
                             coarse_caps=(4, 1, 1), groups=14)
    assert recorded_budget(charge(capped, 0.05).mechanism) == capped
    tampered = json.loads(charge(capped, 0.05).mechanism) | {"groups": 7}
    with pytest.raises(ValueError, match="do not rebuild"):
        recorded_budget(json.dumps(tampered))
