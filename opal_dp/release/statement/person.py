"""The person-level section of a release's statement, from the ledger's person account (``core.ledger``).

Over any horizon of service dates, one person's loss across every card-level file published is at most the
person cap; the section states that cap, what the worst horizon window covering the release's dates has
spent (every card-level charge touching it, of every product, this release included), and this release's
own share (the composition of its card-level charges). A trip-unit release has no person-level bound: its
charges are outside the person account, and the section says so first.

The sentence (``sentence``) is what a reader repeats: one epsilon for the person over the horizon, in plain words
(a factor on the probability of any conclusion, plus delta: (epsilon, delta)-DP bounds P[M(x) in S] by
e^epsilon P[M(x') in S] + delta; delta is stated once, as part of the bound, never as a quantity used up), then
what the costliest horizon window overlapping this release's dates (named by its dates) and this release itself used of
that epsilon. The person is the card: the ledger accounts per card, so someone who travels on several cards has the
bound for each card, not for all of them together, and the sentence says so.
"""

from __future__ import annotations

from collections.abc import Collection

from opal_dp.core.accounting import compose
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import Charge
from opal_dp.release.statement.runs import int_runs


def person_section(ledger: PrivacyLedger, dates: Collection[str], charges: Collection[Charge]) -> dict:
    """The ``person`` section for a release over ``dates`` made of ``charges`` (its own ledger charges)."""
    spend = ledger.person_window(dates)
    cap = spend.cap
    mine = [c for c in charges if c.unit.bounds_cards]
    share = compose([c.cost for c in mine], delta_target=cap.delta)
    trips = ledger.trip_charges(min(dates), max(dates))
    unbounded = [c for c in charges if not c.unit.bounds_cards]
    if unbounded:  # a trip-unit release: its marginals bound nothing per person, whatever else it holds
        added = (f"; its card-level files use epsilon = {share.epsilon:.3g} of a person bound of epsilon = "
                 f"{cap.epsilon:g} over any {cap.horizon_days} days") if mine else (
                 f"; card-level files on these dates count against a person bound of epsilon = {cap.epsilon:g} over any "
                 f"{cap.horizon_days} days, this release's trip files are not part of it")
        sentence = ("This release protects single trips: it has no person-level bound (a card's trips are not "
                    f"bounded){added}.")
    else:
        others = sorted({c.first_date for c in trips})
        sentence = person_sentence(cap.horizon_days, cap.epsilon, cap.delta, spend.window, spend.guarantee.epsilon,
                                   share.epsilon)
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


def person_sentence(horizon_days: int, cap_epsilon: float, cap_delta: float, window: tuple[str, str],
                    window_epsilon: float, release_epsilon: float) -> str:
    """The person-level guarantee in one sentence (module docstring); ``window``: the first and last date of the
    costliest horizon window overlapping the release's dates."""
    return (f"Whatever one person does with their card, everything published about any {horizon_days} consecutive "
            f"days changes the probability of any conclusion about them by at most a factor of e^{cap_epsilon:g}, "
            f"plus {cap_delta:g} (epsilon = {cap_epsilon:g}, delta = {cap_delta:g}); the {horizon_days} days from "
            f"{window[0]} to {window[1]}, the costliest such stretch overlapping this release, used epsilon = "
            f"{window_epsilon:.3g} of it, this release epsilon = {release_epsilon:.3g}. Someone who travels on several "
            "cards has this protection for each card, not for all of them together.")


def person_account(ledger: PrivacyLedger) -> dict | None:
    """The person account as it stands, for operators (``ledger show``, the UI's numeric metadata): the worst horizon
    window over every card-level charge the ledger holds, what it has spent, the cap, and the headroom left (the cap's
    epsilon minus the window's; compositions are not additive, so the headroom is a guide, the ledger the judge).
    None before the first card-level charge."""
    charges = [c for c in ledger.charges() if c.unit.bounds_cards]
    if not charges:
        return None
    spend = ledger.person_spend(min(c.first_date for c in charges), max(c.last_date for c in charges))
    cap, spent = spend.cap, spend.guarantee
    return {"window": f"{spend.window[0]}..{spend.window[1]}", "horizon_days": cap.horizon_days,
            "epsilon_spent": spent.epsilon, "delta_spent": spent.delta, "rho_spent": spent.rho,
            "cap_epsilon": cap.epsilon, "cap_delta": cap.delta,
            "epsilon_remaining": max(cap.epsilon - spent.epsilon, 0.0), "share_of_cap": spent.epsilon / cap.epsilon}
