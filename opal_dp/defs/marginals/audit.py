"""The built-in empirical privacy audit, run against the configured unit and mechanism before publishing."""

import dagster as dg

from opal_dp.audit import audit_mechanism, membership_game
from opal_dp.audit.card_level import audit_card_level, audit_mechanism_for
from opal_dp.audit.privacy_loss import trip_sensitivity
from opal_dp.core import PrivacyUnit, Relation, StabilityHistogram
from opal_dp.defs.shared.automation import ROLLUP
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.metadata import labels

AUDIT_RUNS = 10**6
PUBLIC_DOMAIN_AUDIT = (
    "not run: this audit plays the thresholded (SBH and Gaussian-threshold) mechanisms, whose delta events it "
    "bounds. The public-domain design adds unthresholded discrete Laplace or Gaussian noise to every cell of a "
    "public domain; its epsilon and rho are confirmed against OpenDP's privacy maps and its sampler and least "
    "squares by statistical tests (opal_dp_tests/release/test_public_domain.py)."
)


@dg.asset(group_name="report", automation_condition=ROLLUP, **labels("internal"))
def privacy_audit(privacy_budget: PrivacyBudget) -> dg.MaterializeResult:
    """10^6 releases on every neighbouring pair of the configured unit, with production noise and, for card
    units, the production contribution bounding in the path.

    Fails (and so blocks publishing) if any event shows P[M(D) in S] - e^eps P[M(D') in S] > delta at
    1 - 1e-6 confidence. Runs at relaxed (eps, delta) (the audit's own, e.g. (1, 0.01)); the formulas,
    bounding and samplers are those of the release.
    """
    if privacy_budget.release_design != "sbh":
        return dg.MaterializeResult(metadata={"skipped": PUBLIC_DOMAIN_AUDIT, "release_design": privacy_budget.release_design})
    plan = privacy_budget.plan()
    if plan.unit is PrivacyUnit.TRIP:
        report = audit_mechanism(StabilityHistogram, plan.relation, runs=AUDIT_RUNS)
        mech = StabilityHistogram(report.epsilon, report.delta, trip_sensitivity(Relation(plan.relation)))
        membership = membership_game(mech, runs=AUDIT_RUNS)
        extra = {"membership_release_rate": membership.rate, "membership_upper_bound": membership.upper,
                 "membership_allowed": membership.bound, "membership_exact": membership.exact}
        passed, seconds = report.passed and membership.passed, report.seconds + membership.seconds
    else:
        mech, epsilon, delta = audit_mechanism_for(plan.mechanism, plan.bounds)
        report = audit_card_level(mech, plan.bounds, epsilon=epsilon, delta=delta, runs=AUDIT_RUNS)
        extra, passed, seconds = {"card_level_bounds": dg.MetadataValue.json(plan.bounds.describe())}, report.passed, report.seconds
    metadata = {
        "privacy_unit": plan.unit.value,
        "mechanism": report.mechanism["mechanism"],
        "relation": report.relation.value,
        "audit_epsilon": report.epsilon,
        "audit_delta": report.delta,
        "runs_per_input": report.runs,
        "empirical_epsilon_lower_bound": report.epsilon_lower,
        "worst_event_pair": report.worst.pair.name,
        "worst_violation_upper": report.worst.violation_upper,
        **extra,
        "seconds": seconds,
    }
    if not passed:
        raise dg.Failure(description="privacy audit FAILED: the mechanism leaks more than stated", metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)
