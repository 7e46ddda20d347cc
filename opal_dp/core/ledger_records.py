"""What the ledger holds and answers with (``core.ledger``): caps, charges, draws, requests, decisions, spends,
the errors it raises, and the checks of what it is given."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Literal

from opal_dp.core.accounting import Guarantee, PrivacyCost
from opal_dp.core.units import PrivacyUnit

DEFAULT_HORIZON_DAYS = 365
DEFAULT_PERSON_CAP = (20.0, 1e-6)
"""One person's loss over any 365 consecutive service dates, across every product and period (module docstring)."""
CARD_UNITS = tuple(u for u in PrivacyUnit if u.bounds_cards)
REL_TOL = 1e-9
"""Relative slack on the cap, only to absorb float rounding in sums such as 6 × 1/8e6."""
RELEASES = "releases"
"""Folder of stored draws, relative to the storage root."""


class LedgerError(Exception):
    """Misuse of the ledger, or a ledger this code cannot trust."""


class BudgetExceeded(LedgerError):
    """A new charge would take a scope over its unit's cap; nothing was recorded."""

    def __init__(self, message: str, *, scope: str, spent: Guarantee, requested: PrivacyCost, cap: tuple) -> None:
        super().__init__(message)
        self.scope = scope
        self.spent = spent
        self.requested = requested
        self.cap = cap


class PersonBudgetExceeded(BudgetExceeded):
    """A new card-level charge would take one person's loss over some horizon window past the person cap;
    nothing was recorded. ``window``: its first and last service date."""

    def __init__(self, message: str, *, window: tuple[str, str], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.window = window


class InputVersionMismatch(LedgerError):
    """One input version gave two different mechanism inputs (fingerprints): the release is not reproducible."""


class LedgerResetRefused(LedgerError):
    """The ledger does not account for releases already published: it looks like a budget reset."""


class _OfUnit:
    """A record whose ``unit`` is a ``PrivacyUnit``, whatever it was built from (a ledger row, a caller's value): the
    one conversion, made when the record is."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", PrivacyUnit(self.unit))


@dataclass(frozen=True)
class Cap(_OfUnit):
    """The cap in force for one unit: per scope, (epsilon, delta) of everything released from it."""

    unit: PrivacyUnit
    epsilon: float
    delta: float
    set_at: str
    action: Literal["create", "raise"]
    reason: str


@dataclass(frozen=True)
class PersonCap:
    """The person cap in force: over any ``horizon_days`` consecutive service dates, one card's loss across
    every card-level charge touching them is at most (epsilon, delta)."""

    horizon_days: int
    epsilon: float
    delta: float
    set_at: str
    action: Literal["create", "raise"]
    reason: str


@dataclass(frozen=True)
class Charge(_OfUnit):
    id: int
    unit: PrivacyUnit
    scope: str
    marginal: str
    relation: str
    measure: str
    epsilon: float
    rho: float
    delta: float
    mechanism: str
    bounds: str
    run_id: str
    created_at: str
    first_date: str = ""  # the service dates the charge covers (a card_period: its whole period)
    last_date: str = ""
    input_version: str = ""

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.measure, self.epsilon, self.rho, self.delta)


@dataclass(frozen=True)
class Draw:
    id: int
    charge_id: int
    part: str
    date: str
    fingerprint: str
    release_ref: str
    run_id: str
    created_at: str
    status: Literal["pending", "complete"]
    completed_at: str | None
    completed_by: str | None


@dataclass(frozen=True)
class Request(_OfUnit):
    """One part of one marginal asking to be released under ``unit``."""

    unit: PrivacyUnit
    scope: str
    part: str
    date: str
    marginal: str
    relation: str
    cost: PrivacyCost
    mechanism: str  # JSON of the mechanism's describe(): two charges join only if equal
    bounds: str  # JSON of the contribution bounds
    fingerprint: str  # keyed HMAC of the mechanism input: an integrity check only, never a reuse decision
    input_version: str  # public version of the raw files of the scope's dates (``core.input_version``)


@dataclass(frozen=True)
class Decision:
    """What ``begin_many`` decided for a request.

    - ``reuse``: a stored draw of the same input exists; load it. No noise, no charge.
    - ``resume``: an earlier draw was charged but not completed; load it if it was stored, else draw.
    - ``join``: a new draw under an open charge of the same histogram (no new cost).
    - ``charge``: a new draw under a new charge.
    """

    kind: Literal["reuse", "resume", "join", "charge"]
    draw: Draw
    charge: Charge


@dataclass(frozen=True)
class PersonSpend:
    """The worst horizon window over some dates: its first and last date, what every card-level charge
    touching it costs one person together, the cap, and those charges."""

    window: tuple[str, str]
    guarantee: Guarantee
    cap: PersonCap
    charges: tuple[Charge, ...]


@dataclass(frozen=True)
class ScopeSpend(_OfUnit):
    unit: PrivacyUnit
    scope: str
    guarantee: Guarantee
    cap: Cap
    charges: int
    draws: int
    pending: int
    last_charge_at: str


_CHARGE_COLUMNS = ", ".join(Charge.__dataclass_fields__)
_DRAW_COLUMNS = ", ".join(Draw.__dataclass_fields__)
_CAP_COLUMNS = "unit, epsilon, delta, set_at, action, reason"
_PERSON_CAP_COLUMNS = "horizon_days, epsilon, delta, set_at, action, reason"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _name(label: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LedgerError(f"{label} must be a non-empty string, got {value!r}")
    return value


def _positive(label: str, value: object, below_one: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LedgerError(f"{label} must be a finite number > 0, got {value!r}")
    if below_one and value >= 1:
        raise LedgerError(f"{label} must be < 1, got {value!r}")
    return float(value)


_SAME_RELEASE = ("unit = ? AND scope = ? AND marginal = ? AND relation = ? AND mechanism = ? AND bounds = ? AND "
                 "measure = ? AND epsilon = ? AND rho = ? AND delta = ? AND input_version = ?")
"""One histogram of one input version released under one configuration: its parts share a charge."""


def _lock_keys(r: Request) -> list[str]:
    """The rows a request locks (PostgreSQL): its scope, and for card_period its date, which must belong to
    one period only (``_check_period`` reads other scopes)."""
    keys = [f"scope|{r.unit}|{r.scope}"]
    if r.unit is PrivacyUnit.CARD_PERIOD:
        keys.append(f"date|{r.unit}|{r.date}")
    if r.unit.bounds_cards:
        keys.append("person")  # the person account reads every card-level charge near the request's dates
    return keys


def _covered(r: Request) -> tuple[str, str]:
    """The first and last service date a charge for ``r`` covers: its date, or for a card_period the whole
    period named by its scope ``first..last`` (a period with gaps is covered end to end: conservative). A part
    whose date is not its scope's is refused: the person account reads a charge's dates from its scope, so a
    card_day part of another date would spend a day the account never sees."""
    if r.unit is not PrivacyUnit.CARD_PERIOD:
        scope_day = r.scope if r.unit is PrivacyUnit.CARD_DAY else r.scope.partition("|")[0]
        if _day(scope_day) != _day(r.date):
            raise LedgerError(f"a {r.unit.value} part is charged to its own date's scope, got part {r.part!r} of "
                              f"{r.date!r} for scope {r.scope!r}")
        return _day(r.date), _day(r.date)
    first, sep, last = r.scope.partition("..")
    if not sep or not _day(first) <= _day(r.date) <= _day(last):
        raise LedgerError(f"a card_period scope must be 'first..last' (ISO dates) around the part's date, got "
                          f"{r.scope!r} for {r.date!r}")
    return first, last


def _day(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise LedgerError(f"expected an ISO service date, got {text!r}") from None


def _shift(day: str, days: int) -> str:
    return date.fromordinal(date.fromisoformat(day).toordinal() + days).isoformat()


