"""The ledger's reads (``core.ledger``): its charges, draws, caps, resets and per-scope summaries, each read in one
connection without locks. A mixin of ``PrivacyLedger``, which owns the connection and the row readers; every
mutation, and every check it needs, stays in ``core.ledger`` under one transaction and one set of locks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from opal_dp.core.accounting import Guarantee
from opal_dp.core.ledger_records import _CAP_COLUMNS, Cap, Charge, Draw, ScopeSpend, _name
from opal_dp.core.units import PrivacyUnit


class LedgerReads:
    """The read-only queries of ``PrivacyLedger`` (module docstring)."""

    def cap(self, unit: PrivacyUnit) -> Cap:
        with self._connect() as conn:
            return self._cap(conn, unit)

    def spend(self, unit: PrivacyUnit, scope: str) -> Guarantee:
        """What everything charged to ``scope`` costs one unit together, pending charges included."""
        with self._connect() as conn:
            return self._spend(conn, unit, _name("scope", scope))

    def cap_history(self, unit: PrivacyUnit) -> list[Cap]:
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {_CAP_COLUMNS} FROM caps WHERE unit = ? ORDER BY id", (unit,))
            return [Cap(*row) for row in rows]

    def resets(self) -> list[dict]:
        with self._connect() as conn:
            rows = conn.execute("SELECT acknowledged_at, reason, ledger_ids, missing_draws FROM resets ORDER BY id")
            return [{"acknowledged_at": a, "reason": r, "ledger_ids": json.loads(i), "missing_draws": m}
                    for a, r, i, m in rows]

    def charges(self, unit: PrivacyUnit | None = None, scope: str | None = None,
                ids: Collection[int] | None = None) -> list[Charge]:
        """The charges (by id), all of them or those of ``unit``, ``scope`` or with the given ``ids``: a reader that
        needs a few charges asks for them, so its cost does not grow with the ledger's history."""
        with self._connect() as conn:
            where, params = self._filter(unit, scope)
            if ids is None:
                return self._charges(conn, f"{where} ORDER BY id", params)
            return _by_ids(ids, lambda chunk, marks: self._charges(conn, f"{where} AND id IN ({marks}) ORDER BY id",
                                                                   params + chunk))

    def draws(self, ids: Collection[int] | None = None) -> list[Draw]:
        with self._connect() as conn:
            if ids is None:
                return self._draws(conn, "1 = 1 ORDER BY id", ())
            return _by_ids(ids, lambda chunk, marks: self._draws(conn, f"id IN ({marks}) ORDER BY id", chunk))

    def draws_on(self, dates: Collection[str]) -> list[tuple[Draw, Charge]]:
        """Every draw of the given dates, with its charge (whatever the unit)."""
        with self._connect() as conn:
            out, charges = [], {}  # a weekly charge covers every draw of its week: each is read once
            for day in sorted(set(dates)):
                for draw in self._draws(conn, "date = ? ORDER BY id", (day,)):
                    if draw.charge_id not in charges:
                        charges[draw.charge_id] = self._charge(conn, draw.charge_id)
                    out.append((draw, charges[draw.charge_id]))
            return out

    @staticmethod
    def _filter(unit: PrivacyUnit | None, scope: str | None) -> tuple[str, tuple]:
        clauses, params = ["1 = 1"], []
        if unit is not None:
            clauses.append("unit = ?")
            params.append(unit)
        if scope is not None:
            clauses.append("scope = ?")
            params.append(_name("scope", scope))
        return " AND ".join(clauses), tuple(params)

    def summary(self, unit: PrivacyUnit | None = None,
                scopes: Collection[tuple[PrivacyUnit, str]] | None = None) -> list[ScopeSpend]:
        """Per (unit, scope), sorted: what it costs one unit, its cap, charges, draws, pending draws; of every scope,
        of ``unit``'s, or of the (unit, scope) pairs in ``scopes`` only (what a date's gate needs, whatever the
        history)."""
        wanted = None if scopes is None else set(scopes)
        with self._connect() as conn:
            where, params = self._filter(unit, None)
            found = conn.execute(
                f"SELECT unit, scope, COUNT(*), MAX(created_at) FROM charges WHERE {where} GROUP BY unit, scope"
                " ORDER BY unit, scope", params,
            ).fetchall()
            rows = []
            for u, scope, n_charges, last in found:
                if wanted is not None and (u, scope) not in wanted:
                    continue
                n_draws, pending = conn.execute(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), 0) AS INTEGER) FROM draws WHERE charge_id IN"
                    " (SELECT id FROM charges WHERE unit = ? AND scope = ?)", (u, scope),
                ).fetchone()
                rows.append(ScopeSpend(u, scope, self._spend(conn, u, scope), self._cap(conn, u), n_charges,
                                       n_draws, pending, last))
            return rows


def _by_ids(ids: Collection[int], read: Callable[[tuple, str], list]) -> list:
    """``read(chunk, placeholders)`` over the distinct ``ids`` in sorted chunks of 500 (a statement's parameter
    limit), concatenated."""
    wanted = sorted({int(i) for i in ids})
    out: list = []
    for start in range(0, len(wanted), 500):
        chunk = tuple(wanted[start : start + 500])
        out += read(chunk, ", ".join("?" * len(chunk)))
    return out
