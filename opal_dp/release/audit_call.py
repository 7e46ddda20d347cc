"""The audits a release's settings get before publishing (``defs.marginals.audit``), as plain calls of public
parameters: the marginals' own audit and each enabled product's audit of its ledger charges share the false-alarm
probability evenly; a card unit's marginals are audited by ``audit.card_level.audit_plan``, one call that
``audit.early`` can start before the step."""

from __future__ import annotations

from collections.abc import Callable

from opal_dp.core import PrivacyUnit
from opal_dp.release.marginals.plan import ReleasePlan
from opal_dp.release.options import Design
from opal_dp.release.products import PRODUCTS
from opal_dp.settings import audit_false_alarm_from_env, audit_runs_from_env


def product_audits(settings) -> list[Callable]:
    """Each enabled product's audit of its ledger charges (``Product.audit``)."""
    return [audit for product in PRODUCTS if (audit := product.audit(settings)) is not None]


def audit_alpha(settings) -> float:
    """The false-alarm probability of each audit: ``$OPAL_DP_AUDIT_FALSE_ALARM`` split evenly between the marginals'
    audit and the products' (Bonferroni: a correct release fails any of them with at most that probability)."""
    return audit_false_alarm_from_env() / (1 + len(product_audits(settings)))


def card_audit_call(settings, plan: ReleasePlan) -> tuple | None:
    """The arguments of ``audit_plan`` for the plan's card-level audit (a card unit under the SBH design): mechanism
    family, bounds, unit, period length, ``$OPAL_DP_AUDIT_RUNS`` runs and ``audit_alpha``; None for a plan audited
    otherwise (the trip unit, the consistent designs)."""
    if plan.unit is PrivacyUnit.TRIP or plan.design is not Design.SBH:
        return None
    period_days = plan.periods.days if plan.periods else None  # card_period: audited with its period
    return (plan.mechanism, plan.bounds, plan.unit, period_days, audit_runs_from_env(), audit_alpha(settings))
