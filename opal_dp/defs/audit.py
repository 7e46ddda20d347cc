"""The built-in empirical privacy audit, run against the configured mechanism before publishing."""

import dagster as dg

from opal_dp.audit import audit_mechanism, membership_game
from opal_dp.audit.privacy_loss import trip_sensitivity
from opal_dp.core import Relation, StabilityHistogram
from opal_dp.defs.budget import PrivacyBudget

AUDIT_RUNS = 10**6


@dg.asset(group_name="report")
def privacy_audit(privacy_budget: PrivacyBudget) -> dg.MaterializeResult:
    """10^6 releases on every neighbouring pair of the configured relation, with production noise.

    Fails (and so blocks publishing) if any event shows P[M(D) in S] - e^eps P[M(D') in S] > delta at
    1 - 1e-6 confidence, or if a count-1 bin is released more often than delta/k allows. Runs at
    the audit's relaxed (eps, delta) = (1, 0.01); the formulas and sampler are those of the release.
    """
    relation = Relation(privacy_budget.plan().relation)
    report = audit_mechanism(StabilityHistogram, relation, runs=AUDIT_RUNS)
    mech = StabilityHistogram(report.epsilon, report.delta, trip_sensitivity(relation))
    membership = membership_game(mech, runs=AUDIT_RUNS)
    metadata = {
        "relation": relation.value,
        "audit_epsilon": report.epsilon,
        "audit_delta": report.delta,
        "runs_per_input": report.runs,
        "empirical_epsilon_lower_bound": report.epsilon_lower,
        "worst_event_pair": report.worst.pair.name,
        "worst_violation_upper": report.worst.violation_upper,
        "membership_release_rate": membership.rate,
        "membership_upper_bound": membership.upper,
        "membership_allowed": membership.bound,
        "membership_exact": membership.exact,
        "seconds": report.seconds + membership.seconds,
    }
    if not (report.passed and membership.passed):
        raise dg.Failure(description="privacy audit FAILED: the mechanism leaks more than stated", metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)
