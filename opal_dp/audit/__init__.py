"""Empirical privacy audit of the release mechanism (pure numpy/scipy; no Dagster)."""

from opal_dp.audit.bounds import clopper_pearson
from opal_dp.audit.membership import MembershipReport, membership_game
from opal_dp.audit.privacy_loss import (
    AUDIT_DELTA,
    AUDIT_EPSILON,
    AuditReport,
    EventBound,
    MechanismFactory,
    NeighbouringPair,
    Order,
    audit_mechanism,
    canonical_order,
    neighbouring_pairs,
)

__all__ = [
    "AUDIT_DELTA",
    "AUDIT_EPSILON",
    "AuditReport",
    "EventBound",
    "MechanismFactory",
    "MembershipReport",
    "NeighbouringPair",
    "Order",
    "audit_mechanism",
    "canonical_order",
    "clopper_pearson",
    "membership_game",
    "neighbouring_pairs",
]
