"""The person account of the ledger (``core.ledger``, module docstring "Person account"): every card-level charge,
whatever its product, unit or period, also charges one person's loss over the service dates it covers; for every
window of the horizon the composition of the charges touching it stays within the person cap. A mixin of
``PrivacyLedger``: the same connection, transaction and locks."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opal_dp.core.accounting import compose, within
from opal_dp.core.ledger_records import (
    _PERSON_CAP_COLUMNS,
    CARD_UNITS,
    REL_TOL,
    Charge,
    LedgerError,
    PersonBudgetExceeded,
    PersonCap,
    PersonSpend,
    Request,
    _day,
    _name,
    _now,
    _positive,
    _shift,
)
from opal_dp.core.units import PrivacyUnit


class PersonAccount:
    """The person-account part of ``PrivacyLedger`` (module docstring)."""

    @staticmethod
    def _person_cap(conn: Any) -> PersonCap:
        row = conn.execute(f"SELECT {_PERSON_CAP_COLUMNS} FROM person_caps ORDER BY id DESC LIMIT 1").fetchone()
        return PersonCap(*row)

    def _near(self, conn: Any, first: str, last: str) -> list[Charge]:
        """The card-level charges some horizon window touching [first, last] can hold."""
        h = self._person_cap(conn).horizon_days
        return self._charges(conn, f"unit IN ({', '.join('?' * len(CARD_UNITS))}) AND last_date >= ? AND "
                             "first_date <= ? ORDER BY id", (*CARD_UNITS, _shift(first, -(h - 1)), _shift(last, h - 1)))

    def _windows(self, conn: Any, first: str, last: str) -> list[tuple[tuple[str, str], list[Charge]]]:
        """Every horizon window that touches [first, last] and could be a worst one, with the card-level
        charges touching it. A window's charges only grow when its start moves to the earliest last date among
        them (or to ``last``), so windows starting at those dates are enough; and a window whose charges are all
        in the window kept before it is left out, since composing more charges never costs less (so a check that
        the kept windows fit, and the worst of them, hold for it too). Over a year of weekly releases under a
        one-year horizon that leaves one window, not one a week."""
        h = self._person_cap(conn).horizon_days
        lo, hi = _shift(first, -(h - 1)), last
        near = self._near(conn, first, last)
        starts = sorted({c.last_date for c in near if lo <= c.last_date <= hi} | {last})
        out, kept = [], None
        for start in starts:
            end = _shift(start, h - 1)
            members = [c for c in near if c.last_date >= start and c.first_date <= end]
            key = frozenset(c.id for c in members)
            if kept is None or not key <= kept:
                kept = key
                out.append(((start, end), members))
        return out

    def _check_person(self, conn: Any, r: Request, first: str, last: str) -> None:
        """Refuse a card-level charge that would take any horizon window touching its dates past the person cap."""
        if not r.unit.bounds_cards:
            return
        cap = self._person_cap(conn)
        if within([c.cost for c in self._near(conn, first, last)] + [r.cost], cap.epsilon, cap.delta, REL_TOL):
            return  # everything any window touching the charge can hold fits, so every window does
        for (start, end), members in self._windows(conn, first, last):
            costs = [c.cost for c in members]
            if within(costs + [r.cost], cap.epsilon, cap.delta, REL_TOL):
                continue
            before = compose(costs, delta_target=cap.delta)
            after = compose(costs + [r.cost], delta_target=cap.delta)
            raise PersonBudgetExceeded(
                f"person budget exceeded: over the {cap.horizon_days}-day window {start}..{end}, one person is already "
                f"charged (ε, δ) = ({before.epsilon!r}, {before.delta!r}) by {len(members)} card-level charges across "
                f"every product; this release of {r.marginal} ({r.unit} {r.scope!r}, {first}..{last}) would take it to "
                f"({after.epsilon!r}, {after.delta!r}) against the person cap ({cap.epsilon!r}, {cap.delta!r}) set "
                f"{cap.set_at}. Nothing was drawn. Publish the existing releases instead, or raise the person cap with "
                "`python -m opal_dp.cli ledger raise-cap --person` only if you accept the extra loss.",
                window=(start, end), scope=r.scope, spent=before, requested=r.cost, cap=(cap.epsilon, cap.delta),
            )

    def raise_person_cap(self, epsilon: float, delta: float, reason: str) -> PersonCap:
        """Raise the person cap (both coordinates at least the current ones; the horizon stays), recording why."""
        epsilon, delta = _positive("epsilon", epsilon), _positive("delta", delta, True)
        _name("reason", reason)
        with self._connect() as conn, self._transaction(conn):
            self._backend.lock(conn, ["person"])
            current = self._person_cap(conn)
            if epsilon < current.epsilon or delta < current.delta or (epsilon, delta) == (current.epsilon, current.delta):
                raise LedgerError(f"a new person cap must raise the current one ({current.epsilon!r}, {current.delta!r}); "
                                  f"got ({epsilon!r}, {delta!r})")
            conn.execute(f"INSERT INTO person_caps ({_PERSON_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'raise', ?)",
                         (current.horizon_days, epsilon, delta, _now(), reason))
            return self._person_cap(conn)

    def person_cap(self) -> PersonCap:
        with self._connect() as conn:
            return self._person_cap(conn)

    def person_cap_history(self) -> list[PersonCap]:
        with self._connect() as conn:
            return [PersonCap(*row) for row in conn.execute(f"SELECT {_PERSON_CAP_COLUMNS} FROM person_caps ORDER BY id")]

    def person_spend(self, first: str, last: str) -> PersonSpend:
        """The worst horizon window touching the service dates ``first..last``: what one person has lost in it
        across every card-level charge of every product (pending ones included), the cap, and those charges."""
        first, last = _day(first), _day(last)
        if last < first:
            raise LedgerError(f"empty date range {first}..{last}")
        with self._connect() as conn:
            cap = self._person_cap(conn)
            spends = [PersonSpend(window, compose([c.cost for c in members], delta_target=cap.delta), cap, tuple(members))
                      for window, members in self._windows(conn, first, last)]
        return max(spends, key=lambda s: (s.guarantee.epsilon, s.guarantee.delta, len(s.charges)))

    def person_window(self, dates: Collection[str]) -> PersonSpend:
        """``person_spend`` over the span of ``dates`` (a release's service dates)."""
        days = sorted(_day(d) for d in dates)
        if not days:
            raise LedgerError("person_window needs at least one date")
        return self.person_spend(days[0], days[-1])

    def trip_charges(self, first: str, last: str) -> list[Charge]:
        """Trip-unit charges on service dates ``first..last``: outside the person account (module docstring), so a
        statement over those dates must flag them."""
        with self._connect() as conn:
            return self._charges(conn, "unit = ? AND last_date >= ? AND first_date <= ? ORDER BY id",
                                 (PrivacyUnit.TRIP, _day(first), _day(last)))
