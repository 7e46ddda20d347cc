"""The person-level section of a release's statement, from the ledger's person account (``core.ledger``).

Over any horizon of service dates, one person's loss across every card-level file published is at most the
person cap; the section states that cap, what the worst horizon window covering the release's dates has
spent (every card-level charge touching it, of every product, this release included), and this release's
own share (the composition of its card-level charges). A trip-unit release has no person-level bound: its
charges are outside the person account, and the section says so first.
"""

from __future__ import annotations

from collections.abc import Collection

from opal_dp.core.accounting import compose
from opal_dp.core.ledger import Charge, PrivacyLedger
from opal_dp.core.units import PrivacyUnit
from opal_dp.release.statement.runs import int_runs


def person_section(ledger: PrivacyLedger, dates: Collection[str], charges: Collection[Charge]) -> dict:
    """The ``person`` section for a release over ``dates`` made of ``charges`` (its own ledger charges)."""
    spend = ledger.person_window(dates)
    cap = spend.cap
    mine = [c for c in charges if PrivacyUnit(c.unit).bounds_cards]
    share = compose([c.cost for c in mine], delta_target=cap.delta)
    trips = ledger.trip_charges(min(dates), max(dates))
    unbounded = [c for c in charges if not PrivacyUnit(c.unit).bounds_cards]
    if unbounded:  # a trip-unit release: its marginals bound nothing per person, whatever else it holds
        added = (f"; its card-level files add (epsilon = {share.epsilon:.4g}, delta = {share.delta:.3g}) to a person "
                 f"cap of (epsilon = {cap.epsilon:g}, delta = {cap.delta:g}) over any {cap.horizon_days} days") if mine else (
                 f"; card-level files on these dates count against a person cap of (epsilon = {cap.epsilon:g}, "
                 f"delta = {cap.delta:g}) over any {cap.horizon_days} days, this release's trip files are not part of it")
        sentence = ("This release protects single trips: it has no person-level bound (a card's trips are not "
                    f"bounded){added}.")
    else:
        others = sorted({c.first_date for c in trips})
        sentence = (f"Over any {cap.horizon_days} consecutive days of releases, one person's total privacy loss across "
                    f"every card-level file published is at most (epsilon = {cap.epsilon:g}, delta = {cap.delta:g}); "
                    f"the {cap.horizon_days} days around this release have spent (epsilon = "
                    f"{spend.guarantee.epsilon:.4g}, delta = {spend.guarantee.delta:.3g}) of it, and this release adds "
                    f"(epsilon = {share.epsilon:.4g}, delta = {share.delta:.3g}).")
        if others:
            sentence += (f" Trip-level files were also published for {len(others)} of these dates "
                         f"({others[0]} to {others[-1]}): they have no person-level bound and are not covered.")
    return {
        "sentence": sentence,
        "bounded": not unbounded,
        "horizon_days": cap.horizon_days,
        "cap": {"epsilon": cap.epsilon, "delta": cap.delta, "set_at": cap.set_at, "action": cap.action,
                "reason": cap.reason},
        "window": {"first": spend.window[0], "last": spend.window[1]},
        "spent": spend.guarantee.describe(),
        "charges": int_runs(c.id for c in spend.charges),
        "this_release": share.describe(),
        "this_release_charges": int_runs(c.id for c in mine),
        "trip_unit_charges": int_runs(c.id for c in trips),
    }


def person_account(ledger: PrivacyLedger) -> dict | None:
    """The person account as it stands, for operators (``ledger show``, the UI's numeric metadata): the worst horizon
    window over every card-level charge the ledger holds, what it has spent, the cap, and the headroom left (the cap's
    epsilon minus the window's; compositions are not additive, so the headroom is a guide, the ledger the judge).
    None before the first card-level charge."""
    charges = [c for c in ledger.charges() if PrivacyUnit(c.unit).bounds_cards]
    if not charges:
        return None
    spend = ledger.person_spend(min(c.first_date for c in charges), max(c.last_date for c in charges))
    cap, spent = spend.cap, spend.guarantee
    return {"window": f"{spend.window[0]}..{spend.window[1]}", "horizon_days": cap.horizon_days,
            "epsilon_spent": spent.epsilon, "delta_spent": spent.delta, "rho_spent": spent.rho,
            "cap_epsilon": cap.epsilon, "cap_delta": cap.delta,
            "epsilon_remaining": max(cap.epsilon - spent.epsilon, 0.0), "share_of_cap": spent.epsilon / cap.epsilon}
