"""Persistent privacy ledger: what every noise draw cost each privacy unit, across runs and processes.

DP libraries forget what they spent when the process exits; re-running a release draws fresh noise,
and publishing both draws spends the budget twice. The ledger records every charge in a database:
SQLite (embedded, the default) or PostgreSQL (workers on many hosts), ``core.ledger_backends``. Every
mutation runs in one transaction that first locks the scopes it touches, so concurrent processes charging
a scope serialise and a killed process leaves either the whole change or none of it.

Model.
- A *scope* is what one unit's privacy loss accumulates over (``core.units``): a (date, mode)
  partition for ``trip``, a date for ``card_day``, a period for ``card_period``.
- A *charge* is one application of a mechanism to one marginal's histogram over a scope; it costs a
  ``PrivacyCost`` once. A scope's histogram is released in *parts* (its (date, mode) partitions); a
  *draw* is the noise of one part under one charge. Parts of one histogram drawn under one charge are
  one mechanism application (the noise of each bin is independent of every other bin), so a new part
  joins an open charge for free; drawing a part again (fresh noise, or changed input) opens a new
  charge. Never two draws of one part under one charge (UNIQUE).
- A scope's spend is the composition (``core.accounting.compose``) of its charges, pending ones
  included. A charge that would take it over the unit's cap is refused before any noise is drawn.
- The cap per unit is ledger state, fixed when the ledger is created; ``raise_cap`` changes it, and
  every change is recorded with its reason (``cap_history``).
- A charge covers service dates (``first_date``..``last_date``: its date; a card_period its whole period)
  and one *input version* (``core.input_version``: the public versions of the raw files of its scope's
  dates). A part joins a charge, or reuses a stored draw, only under the same input version and release
  configuration (mechanism, bounds, cost): public events, never the data. Reusing on the fingerprint of
  the true input would let two statements reveal whether a corrected raw file changed the bounded
  histogram; joining across versions would put two inputs under one charge calibrated for one. The keyed
  fingerprint is kept as an integrity check: one version giving two inputs raises ``InputVersionMismatch``.
- Person account. Every card-level charge (``card_day``, ``card_period``; marginals, OD trees, synthetic
  queries alike) is also a charge on one person's account over the dates it covers. For every window of
  ``horizon_days`` consecutive service dates, the composition (``core.accounting``) of all card-level
  charges touching the window stays within the *person cap*; a charge that would break it is refused
  before any noise is drawn (``PersonBudgetExceeded``, naming the window, its spend and the cap). Horizon
  and cap are ledger state fixed at creation; ``raise_person_cap`` raises the cap, recorded. Default: 20
  and 1e-6 over 365 days, the annual budget of the benchmark's middle target (weekly card-level
  releases at about epsilon 0.4 each; production peers spend epsilon 1-2 per user-day or -week and
  state no yearly total).
- Trip-unit charges stay out of the person account: a trip-level release bounds nothing per card (a card's
  trips are unbounded), so it has no person-level loss to add. ``trip_charges`` lists those on given dates,
  so that a statement over them says there is no person-level bound.
- Where a draw will be stored (``release_ref``, relative to the storage root) is recorded with its
  pending charge, before any noise is drawn: a resumed run finds it, and no draw is ever orphaned.
- Fingerprints of the mechanism input are keyed (HMAC, by the caller) and never appear in a message.
- The ledger has a random id. Published releases name it and the draws they contain; opening a ledger
  that lacks either (missing, replaced or emptied ledger: a budget reset) is refused unless the reset
  is acknowledged, and the acknowledgement is recorded.

Layout: its records are ``core.ledger_records``, its tables ``core.ledger_schema``, the person account and the
read-only queries mixins (``core.person_account``, ``core.ledger_reads``). Every mutation and the checks it needs
(caps, periods, person account, input versions) run here in one transaction under one set of locks.

Protocol, per run (``release.charged`` is the one caller)::

    decisions = ledger.begin_many(requests, run_id=...)    # BEFORE drawing any noise
    for each decision: "reuse": load draw.release_ref (no noise, no charge); "resume": load
        draw.release_ref if it was stored, else draw and store it there; "join"/"charge": draw and store
        at draw.release_ref (exclusively: if another run stored it first, load theirs)
    ledger.complete_many(draw ids, run_id=...)
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from opal_dp.core.accounting import Guarantee, PrivacyCost, compose, within
from opal_dp.core.ledger_backends import open_backend
from opal_dp.core.ledger_records import (
    BudgetExceeded,
    Cap,
    Charge,
    DEFAULT_HORIZON_DAYS,
    DEFAULT_PERSON_CAP,
    Decision,
    Draw,
    InputVersionMismatch,
    LedgerError,
    LedgerResetRefused,
    RELEASES,
    REL_TOL,
    Request,
    _CAP_COLUMNS,
    _CHARGE_COLUMNS,
    _DRAW_COLUMNS,
    _PERSON_CAP_COLUMNS,
    _SAME_RELEASE,
    _covered,
    _lock_keys,
    _name,
    _now,
    _positive,
)
from opal_dp.core.ledger_schema import _SCHEMA, SCHEMA_VERSION
from opal_dp.core.ledger_reads import LedgerReads
from opal_dp.core.person_account import PersonAccount
from opal_dp.core.units import PrivacyUnit


class PrivacyLedger(PersonAccount, LedgerReads):
    """The ledger at ``location`` (module docstring): the path of a SQLite file, or a ``postgresql://`` URI
    (``core.ledger_backends``; the accounting is the same on both).

    ``initial_caps``: unit -> (epsilon, delta) per scope, recorded as the caps when the ledger is created
    (and for a unit the ledger has never had a cap for); ignored afterwards: the cap is ledger state.
    ``published``: ledger id -> draw ids, for every release already published (``privacy.json``).
    ``acknowledge_reset``: a reason; only then may a ledger that lacks those be used, and the reset is
    recorded. ``person_cap`` (epsilon, delta) and ``horizon_days``: the person account's cap and horizon,
    recorded when the ledger is created; ignored afterwards, like the caps.
    """

    def __init__(
        self,
        location: str | Path,
        initial_caps: Mapping[PrivacyUnit | str, tuple[float, float]],
        *,
        published: Mapping[str, Collection[int]] | None = None,
        acknowledge_reset: str | None = None,
        person_cap: tuple[float, float] = DEFAULT_PERSON_CAP,
        horizon_days: int = DEFAULT_HORIZON_DAYS,
    ) -> None:
        self._backend = open_backend(location)
        self.location = self._backend.location
        caps = {PrivacyUnit(u): (_positive("cap epsilon", e), _positive("cap delta", d, True))
                for u, (e, d) in initial_caps.items()}
        published = {_name("published ledger id", k): set(v) for k, v in (published or {}).items()}
        if acknowledge_reset is not None:
            _name("acknowledge_reset", acknowledge_reset)
        person = (_positive("person cap epsilon", person_cap[0]), _positive("person cap delta", person_cap[1], True))
        if isinstance(horizon_days, bool) or not isinstance(horizon_days, int) or horizon_days < 1:
            raise LedgerError(f"horizon_days must be an integer >= 1, got {horizon_days!r}")
        if published and acknowledge_reset is None and not self._backend.exists():
            raise LedgerResetRefused(
                f"no privacy ledger at {self.location}, but {len(published)} ledger(s) "
                f"({', '.join(sorted(published))}) stand behind releases already published: starting a new "
                "ledger would reset their budget. Restore the ledger, or acknowledge the reset explicitly "
                "(privacy_budget.acknowledge_ledger_reset / --acknowledge-ledger-reset) with a reason."
            )
        self._backend.prepare()
        with self._connect() as conn, self._transaction(conn, init=True):
            version = self._backend.schema_version(conn)
            if version == 0:
                self._create(conn)
            elif version != SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.location} has schema version {version}; this code reads version "
                    f"{SCHEMA_VERSION}. An older ledger cannot be carried forward: keep it as the record of the releases it "
                    "made, move it aside, and start a new ledger with an acknowledged reset."
                )
            self.ledger_id = conn.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()[0]
            for unit, (eps, delta) in caps.items():
                if not conn.execute("SELECT 1 FROM caps WHERE unit = ?", (unit,)).fetchone():
                    conn.execute(f"INSERT INTO caps ({_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'create', ?)",
                                 (unit, eps, delta, _now(), "cap at ledger creation (first use of the unit)"))
            if not conn.execute("SELECT 1 FROM person_caps").fetchone():
                conn.execute(f"INSERT INTO person_caps ({_PERSON_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'create', ?)",
                             (horizon_days, *person, _now(), "person cap at ledger creation"))
            self._check_published(conn, published, acknowledge_reset)

    def _create(self, conn: Any) -> None:
        self._backend.create_schema(conn, _SCHEMA, SCHEMA_VERSION)
        conn.execute("INSERT INTO meta VALUES ('ledger_id', ?), ('created_at', ?)", (secrets.token_hex(16), _now()))

    def _check_published(
        self, conn: Any, published: dict[str, set[int]], acknowledge_reset: str | None
    ) -> None:
        """Refuse (unless acknowledged, then record) published releases this ledger does not account for."""
        acknowledged = set()
        for (ids,) in conn.execute("SELECT ledger_ids FROM resets"):
            acknowledged.update(json.loads(ids))
        foreign = sorted(set(published) - {self.ledger_id} - acknowledged)
        cited = published.get(self.ledger_id, set())
        known = {row[0] for row in conn.execute("SELECT id FROM draws")} if cited else set()
        missing = sorted(cited - known)
        if not foreign and not missing:
            return
        if acknowledge_reset is None:
            what = []
            if foreign:
                what.append(f"releases published under other ledger(s) {', '.join(foreign)}")
            if missing:
                what.append(f"{len(missing)} draws cited by published releases are gone from this ledger")
            raise LedgerResetRefused(
                f"the privacy ledger {self.location} does not account for what was published: {'; '.join(what)}. "
                "Using it would reset the budget of those releases. Restore the right ledger, or acknowledge "
                "the reset explicitly with a reason."
            )
        conn.execute(
            "INSERT INTO resets (acknowledged_at, reason, ledger_ids, missing_draws) VALUES (?, ?, ?, ?)",
            (_now(), acknowledge_reset, json.dumps(foreign + ([self.ledger_id] if missing else [])), len(missing)),
        )

    # -- connections (the backend's) ---------------------------------------------------

    def _connect(self) -> Any:
        return self._backend.connect()

    def _transaction(self, conn: Any, *, init: bool = False) -> Any:
        return self._backend.transaction(conn, init=init)

    @staticmethod
    def _charges(conn: Any, where: str, params: tuple) -> list[Charge]:
        return [Charge(*row) for row in conn.execute(f"SELECT {_CHARGE_COLUMNS} FROM charges WHERE {where}", params)]

    @staticmethod
    def _draws(conn: Any, where: str, params: tuple) -> list[Draw]:
        return [Draw(*row) for row in conn.execute(f"SELECT {_DRAW_COLUMNS} FROM draws WHERE {where}", params)]

    @staticmethod
    def _cap(conn: Any, unit: PrivacyUnit) -> Cap:
        row = conn.execute(f"SELECT {_CAP_COLUMNS} FROM caps WHERE unit = ? ORDER BY id DESC LIMIT 1", (unit,)).fetchone()
        if row is None:
            raise LedgerError(f"the ledger has no cap for unit {str(unit)!r}")
        return Cap(*row)

    def _spend(self, conn: Any, unit: PrivacyUnit, scope: str, extra: Sequence[PrivacyCost] = ()) -> Guarantee:
        costs = [c.cost for c in self._charges(conn, "unit = ? AND scope = ?", (unit, scope))] + list(extra)
        return compose(costs, delta_target=self._cap(conn, unit).delta)

    # -- mutations ---------------------------------------------------------------------

    def begin_many(self, requests: Sequence[Request], *, run_id: str, fresh: bool = False) -> list[Decision]:
        """Decide, before any noise is drawn, how each request is served (``Decision``).

        The draw key is (unit, scope, part, marginal, fingerprint, mechanism). Unless ``fresh``: a complete
        draw of the key is reused (the latest), else a pending one is resumed (the oldest). Otherwise the
        request joins the latest charge of the same histogram (unit, scope, marginal, relation, mechanism,
        bounds, cost) that has no draw of this part, or opens a new charge if the scope stays within its
        cap. One transaction for all requests: if any would exceed its cap, ``BudgetExceeded`` is raised and
        nothing is recorded.
        """
        _name("run_id", run_id)
        if not isinstance(fresh, bool):
            raise LedgerError(f"fresh must be a bool, got {fresh!r}")
        for r in requests:
            for label in ("scope", "part", "date", "marginal", "relation", "mechanism", "bounds", "fingerprint",
                          "input_version"):
                _name(label, getattr(r, label))
            if not isinstance(r.cost, PrivacyCost):
                raise LedgerError(f"cost must be a PrivacyCost, got {r.cost!r}")
        with self._connect() as conn, self._transaction(conn):
            self._backend.lock(conn, [key for r in requests for key in _lock_keys(r)])
            return [self._decide(conn, r, run_id, fresh) for r in requests]

    def _decide(self, conn: Any, r: Request, run_id: str, fresh: bool) -> Decision:
        """Reuse and joins are decided from public events only: the input version and the release configuration
        (``_SAME_RELEASE``); the fingerprint of the true input only checks that one version gave one input."""
        first, last = _covered(r)
        same_release = (r.unit, r.scope, r.marginal, r.relation, r.mechanism, r.bounds, r.cost.measure, r.cost.epsilon,
                        r.cost.rho, r.cost.delta, r.input_version)
        if not fresh:
            same = self._draws(conn, f"part = ? AND charge_id IN (SELECT id FROM charges WHERE {_SAME_RELEASE}) ORDER BY id",
                               (r.part, *same_release))
            changed = [d for d in same if d.fingerprint != r.fingerprint]
            if changed:
                raise InputVersionMismatch(
                    f"{r.part} {r.marginal}: input version {r.input_version!r} was already released from a different "
                    "mechanism input (another bounding key, code or configuration?). Nothing was drawn. Release it "
                    "with a fresh draw (privacy_budget.fresh_draw), which is charged anew."
                )
            done = [d for d in same if d.status == "complete"]
            if done:
                return Decision("reuse", done[-1], self._charge(conn, done[-1].charge_id))
            if same:
                return Decision("resume", same[0], self._charge(conn, same[0].charge_id))
        self._check_period(conn, r)
        open_charges = self._charges(
            conn, f"{_SAME_RELEASE} AND id NOT IN (SELECT charge_id FROM draws WHERE part = ?) ORDER BY id DESC LIMIT 1",
            (*same_release, r.part),
        )
        if open_charges:
            return Decision("join", self._insert_draw(conn, open_charges[0], r, run_id), open_charges[0])
        self._check_cap(conn, r)
        self._check_person(conn, r, first, last)
        cur = conn.execute(
            f"INSERT INTO charges ({_CHARGE_COLUMNS.replace('id, ', '', 1)}) VALUES ({', '.join('?' * 15)})"
            " RETURNING id",
            (r.unit, r.scope, r.marginal, r.relation, r.cost.measure, r.cost.epsilon, r.cost.rho, r.cost.delta,
             r.mechanism, r.bounds, run_id, _now(), first, last, r.input_version),
        )
        charge = self._charge(conn, cur.fetchone()[0])
        return Decision("charge", self._insert_draw(conn, charge, r, run_id), charge)

    def _charge(self, conn: Any, charge_id: int) -> Charge:
        return self._charges(conn, "id = ?", (charge_id,))[0]

    def _insert_draw(self, conn: Any, charge: Charge, r: Request, run_id: str) -> Draw:
        ref = f"{RELEASES}/{r.unit}/{r.marginal}/{secrets.token_hex(16)}.parquet"
        cur = conn.execute(
            "INSERT INTO draws (charge_id, part, date, fingerprint, release_ref, run_id, created_at, status)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, 'pending') RETURNING id",
            (charge.id, r.part, r.date, r.fingerprint, ref, run_id, _now()),
        )
        return self._draws(conn, "id = ?", (cur.fetchone()[0],))[0]

    def _check_period(self, conn: Any, r: Request) -> None:
        """A date belongs to one card_period scope only: periods must not overlap."""
        if r.unit is not PrivacyUnit.CARD_PERIOD:
            return
        other = conn.execute(
            "SELECT c.scope FROM draws d JOIN charges c ON c.id = d.charge_id WHERE d.date = ? AND c.unit = ?"
            " AND c.scope <> ? LIMIT 1",
            (r.date, r.unit, r.scope),
        ).fetchone()
        if other:
            raise LedgerError(
                f"{r.date} was already released in the card_period scope {other[0]!r}; a date can belong to one "
                f"period only, so {r.scope!r} cannot include it (periods must not overlap)"
            )

    def _check_cap(self, conn: Any, r: Request) -> None:
        cap = self._cap(conn, r.unit)
        scope_costs = [c.cost for c in self._charges(conn, "unit = ? AND scope = ?", (r.unit, r.scope))]
        if within(scope_costs + [r.cost], cap.epsilon, cap.delta, REL_TOL):
            return
        before = self._spend(conn, r.unit, r.scope)
        after = self._spend(conn, r.unit, r.scope, [r.cost])
        charged = "\n".join(
            f"  - {c.marginal}: {_parameters(c.cost)}, run {c.run_id},"
            f" {c.created_at}"
            for c in self._charges(conn, "unit = ? AND scope = ? ORDER BY id", (r.unit, r.scope))
        )
        raise BudgetExceeded(
            f"privacy budget exceeded for {r.unit} scope {r.scope!r}: it already holds\n{charged or '  (nothing)'}\n"
            f"for (ε, δ) = ({before.epsilon!r}, {before.delta!r}); this release of {r.marginal} would take it to "
            f"({after.epsilon!r}, {after.delta!r}) against the cap ({cap.epsilon!r}, {cap.delta!r}) set {cap.set_at}. "
            "Nothing was drawn, and what this scope released before stays published. To release it again (a "
            "corrected raw file, a changed setting), raise the cap only if you accept the extra privacy loss: "
            f"`python -m opal_dp.cli ledger raise-cap --unit {r.unit} --epsilon {_at_least(after.epsilon)} --delta "
            f"{_at_least(after.delta)} --reason WHY`, then release again; every fresh draw and every changed input "
            "is charged.",
            scope=r.scope,
            spent=before,
            requested=r.cost,
            cap=(cap.epsilon, cap.delta),
        )

    def complete_many(self, draw_ids: Sequence[int], *, run_id: str) -> None:
        """Mark the draws stored (one transaction). A draw another run completed first stays as it is (both
        runs stored the one file at its ``release_ref``); completing an unknown draw, or one this run
        already completed, raises ``LedgerError`` and records nothing."""
        for draw_id in draw_ids:
            if isinstance(draw_id, bool) or not isinstance(draw_id, int):
                raise LedgerError(f"draw id must be an int, got {draw_id!r}")
        _name("run_id", run_id)
        with self._connect() as conn, self._transaction(conn):
            for draw_id in draw_ids:
                found = self._draws(conn, "id = ?", (draw_id,))
                if not found:
                    raise LedgerError(f"no draw with id {draw_id}")
                if found[0].status == "complete":
                    if found[0].completed_by == run_id:
                        raise LedgerError(f"draw {draw_id} was already completed by run {run_id}")
                    continue
                conn.execute("UPDATE draws SET status = 'complete', completed_at = ?, completed_by = ? WHERE id = ?"
                             " AND status = 'pending'",  # first wins, also when two runs race here
                             (_now(), run_id, draw_id))

    def raise_cap(self, unit: PrivacyUnit, epsilon: float, delta: float, reason: str) -> Cap:
        """Raise ``unit``'s cap per scope (both coordinates at least the current ones), recording why.

        Statements of earlier releases name the cap in force when they were made and say that it can
        only be raised this way; every later statement lists the raise.
        """
        epsilon, delta = _positive("epsilon", epsilon), _positive("delta", delta, True)
        _name("reason", reason)
        with self._connect() as conn, self._transaction(conn):
            self._backend.lock(conn, [f"cap|{unit}"])
            current = self._cap(conn, unit)
            if epsilon < current.epsilon or delta < current.delta or (epsilon, delta) == (current.epsilon, current.delta):
                raise LedgerError(
                    f"a new cap must raise the current one ({current.epsilon!r}, {current.delta!r}) for {unit}; "
                    f"got ({epsilon!r}, {delta!r})"
                )
            conn.execute(f"INSERT INTO caps ({_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'raise', ?)",
                         (unit, epsilon, delta, _now(), reason))
            return self._cap(conn, unit)


def _at_least(value: float) -> str:
    """``value`` to six significant digits, rounded up: a cap the refused charge fits."""
    text = f"{value:.6g}"
    return text if float(text) >= value else f"{value * (1 + 1e-5):.6g}"


def _parameters(cost: PrivacyCost) -> str:
    """A charge's own parameters: rho for zCDP, epsilon for approximate DP (the other is 0 and says nothing), delta."""
    return (f"zcdp ρ={cost.rho!r} δ={cost.delta!r}" if cost.measure == "zcdp" else
            f"{cost.measure} ε={cost.epsilon!r} δ={cost.delta!r}")
