"""The built-in empirical privacy audit, run against the configured unit and mechanism before publishing, and each
other product's audit of its ledger charges (``release.products.PRODUCTS``)."""

import json
import time
from collections.abc import Callable

import dagster as dg

from opal_dp.audit import audit_mechanism, early, membership_game
from opal_dp.audit.card_level import audit_plan
from opal_dp.audit.privacy_loss import trip_sensitivity
from opal_dp.audit.public_domain import audit_table
from opal_dp.core import PrivacyUnit, Relation, StabilityHistogram
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.metadata import labels
from opal_dp.defs.shared.resources import PerDayWorkers, ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.marginals.hierarchy_design import audit_taps
from opal_dp.release.audit_call import audit_alpha, card_audit_call, product_audits
from opal_dp.release.options import Design
from opal_dp.settings import audit_runs_from_env


def _product_audits(audits: list[Callable], privacy_budget: PrivacyBudget, storage: OpalStorage,
                    reference: ReferenceNetwork, alpha: float) -> tuple[bool, dict]:
    """The other products' audits of their ledger charges (the OD hierarchy's measurement per level,
    ``audit.hierarchy``), at ``alpha`` each: whether all pass, and their figures."""
    if not audits:
        return True, {}
    ledger, stops = privacy_budget.ledger(storage), reference.stops()
    results = [audit(ledger, stops, alpha) for audit in audits]
    return all(passed for passed, _ in results), {name: dg.MetadataValue.json(value) for _, figures in results
                                                  for name, value in figures.items()}


@dg.asset(group_name="report", **labels("internal"))
def privacy_audit(privacy_budget: PrivacyBudget, storage: OpalStorage, reference: ReferenceNetwork,
                  workers: PerDayWorkers) -> dg.MaterializeResult:
    """``$OPAL_DP_AUDIT_RUNS`` (default 10^6) releases on every neighbouring pair of the configured unit, with
    production noise and, for card units, the production contribution bounding in the path. Under the public-domain design, the measurement
    of each table (``opal_dp.audit.public_domain``) against the epsilon (delta 0) or rho charged for it.

    Fails (and so blocks publishing) if any event shows P[M(D) in S] - e^eps P[M(D') in S] > delta at
    confidence 1 - alpha, alpha = ``$OPAL_DP_AUDIT_FALSE_ALARM`` (default 1e-6, ``settings``) shared by the
    audits it runs: a correct release fails with probability at most alpha. Runs at relaxed (eps, delta) (the
    audit's own, e.g. (1, 0.01)); the formulas, bounding and samplers are those of the release. With the OD
    hierarchy on (``od.csv``), its measurement per level against each of its ledger charges (``audit.hierarchy``):
    alpha is split evenly between the marginals' audit and each product's (``release.audit_call``). The neighbouring
    pairs are audited a pair per worker process (``workers``). A card unit's audit is a call of the plan's public
    parameters only: when the command line's release started that same call beside the week's steps
    (``audit.early``), its report is taken here (metadata ``started_early``; ``seconds`` is then the audit's own time
    in its process), else the call is made here.
    """
    plan = privacy_budget.plan()
    alpha, runs = audit_alpha(privacy_budget), audit_runs_from_env()
    audits = product_audits(privacy_budget)
    products_passed, products = _product_audits(audits, privacy_budget, storage, reference, alpha)
    if plan.design is Design.HIERARCHY:  # the measurement of each tap against its charges (audit.hierarchy)
        started = time.perf_counter()
        passed, figures = audit_taps(plan.hierarchy, plan.mechanisms, alpha)
        metadata = {"privacy_unit": plan.unit.value, "release_design": plan.design.value,
                    "mechanism": "time_loc_hierarchy", "relation": plan.relation.value,
                    "false_alarm_probability": alpha, "hierarchy_audit": dg.MetadataValue.json(figures), **products,
                    "seconds": time.perf_counter() - started}
        if not (passed and products_passed):
            raise dg.Failure(description="privacy audit FAILED: the mechanism leaks more than stated",
                             metadata=metadata)
        return dg.MaterializeResult(metadata=metadata)
    if plan.design.consistent:
        distinct = {json.dumps(noise.describe(), sort_keys=True): tap for tap, noise in plan.noise.items()}
        # taps noised alike are audited once
        audited = [(tap, table) for tap in sorted(distinct.values()) for table in pd_design.TABLES]
        reports = {f"tap_{tap}_{table}": audit_table(plan.noise[tap], table, plan.relation, runs=runs,
                                                     alpha=alpha / len(audited)) for tap, table in audited}
        report = max(reports.values(), key=lambda r: r.worst.violation_lower - r.delta)
        extra = {"release_design": "public_domain", "tables_audited": len(reports),
                 "empirical_epsilon_lower_bound_by_table": dg.MetadataValue.json(
                     {name: {"claimed": r.epsilon, "lower_bound": r.epsilon_lower} for name, r in reports.items()})}
        passed, seconds = all(r.passed for r in reports.values()), sum(r.seconds for r in reports.values())
    elif plan.unit is PrivacyUnit.TRIP:
        report = audit_mechanism(StabilityHistogram, plan.relation, runs=runs, alpha=alpha / 2, workers=workers.count)
        mech = StabilityHistogram(report.epsilon, report.delta, trip_sensitivity(Relation(plan.relation)))
        membership = membership_game(mech, runs=runs, alpha=alpha / 2)
        extra = {"membership_release_rate": membership.rate, "membership_upper_bound": membership.upper,
                 "membership_allowed": membership.bound, "membership_exact": membership.exact}
        passed, seconds = report.passed and membership.passed, report.seconds + membership.seconds
    else:  # a card unit: at the plan's sensitivity, with its period; the report of the call started early if any
        report, started_early = early.result(audit_plan, *card_audit_call(privacy_budget, plan), workers=workers.count)
        extra = {"card_level_bounds": dg.MetadataValue.json(plan.bounds.describe()), "started_early": started_early}
        passed, seconds = report.passed, report.seconds
    metadata = {
        "privacy_unit": plan.unit.value,
        "mechanism": report.mechanism["mechanism"],
        "relation": report.relation.value,
        "audit_epsilon": report.epsilon,
        "audit_delta": report.delta,
        "runs_per_input": report.runs,
        "false_alarm_probability": alpha,
        "empirical_epsilon_lower_bound": report.epsilon_lower,
        "worst_event_pair": report.worst.pair.name,
        "worst_violation_upper": report.worst.violation_upper,
        **extra,
        **products,
        "seconds": seconds,
    }
    if not (passed and products_passed):
        raise dg.Failure(description="privacy audit FAILED: the mechanism leaks more than stated", metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)
