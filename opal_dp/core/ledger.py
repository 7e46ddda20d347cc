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

Protocol, per run::

    decisions = ledger.begin_many(requests, run_id=...)    # BEFORE drawing any noise
    for each decision: "reuse": load draw.release_ref (no noise, no charge); "resume": load
        draw.release_ref if it was stored, else draw and store it there; "join"/"charge": draw and store
        at draw.release_ref (exclusively: if another run stored it first, load theirs)
    ledger.complete_many(draw ids, run_id=...)
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

from opal_dp.core.accounting import Guarantee, PrivacyCost, compose, within
from opal_dp.core.ledger_backends import open_backend
from opal_dp.core.units import PrivacyUnit

SCHEMA_VERSION = 3
DEFAULT_HORIZON_DAYS = 365
DEFAULT_PERSON_CAP = (20.0, 1e-6)
"""One person's loss over any 365 consecutive service dates, across every product and period (module docstring)."""
CARD_UNITS = (PrivacyUnit.CARD_DAY.value, PrivacyUnit.CARD_PERIOD.value)
UNVERSIONED = "unversioned (charged before schema 3)"
"""The input version of charges carried over from a schema-2 ledger: no request ever has it."""
REL_TOL = 1e-9
"""Relative slack on the cap, only to absorb float rounding in sums such as 6 × 1/8e6."""
RELEASES = "releases"
"""Folder of stored draws, relative to the storage root."""

_PERSON_CAPS = """
CREATE TABLE person_caps (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    horizon_days INTEGER NOT NULL CHECK (horizon_days >= 1),
    epsilon      REAL NOT NULL CHECK (epsilon > 0),
    delta        REAL NOT NULL CHECK (delta > 0 AND delta < 1),
    set_at       TEXT NOT NULL,
    action       TEXT NOT NULL CHECK (action IN ('create', 'raise')),
    reason       TEXT NOT NULL CHECK (reason <> '')
)"""
_MIGRATE_2_TO_3 = (  # a schema-2 charge covers its scope's dates; it has no input version (UNVERSIONED)
    "ALTER TABLE charges ADD COLUMN first_date TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE charges ADD COLUMN last_date TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE charges ADD COLUMN input_version TEXT NOT NULL DEFAULT ''",
    "UPDATE charges SET first_date = substr(scope, 1, 10), last_date = CASE WHEN unit = 'card_period'"
    " THEN substr(scope, 13, 10) ELSE substr(scope, 1, 10) END, input_version = ?",
    _PERSON_CAPS,
    "CREATE INDEX charges_dates ON charges (last_date, first_date)",
)

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """
CREATE TABLE caps (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    unit     TEXT NOT NULL,
    epsilon  REAL NOT NULL CHECK (epsilon > 0),
    delta    REAL NOT NULL CHECK (delta > 0 AND delta < 1),
    set_at   TEXT NOT NULL,
    action   TEXT NOT NULL CHECK (action IN ('create', 'raise')),
    reason   TEXT NOT NULL CHECK (reason <> '')
)""",
    """
CREATE TABLE resets (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    acknowledged_at TEXT NOT NULL,
    reason          TEXT NOT NULL CHECK (reason <> ''),
    ledger_ids      TEXT NOT NULL,
    missing_draws   INTEGER NOT NULL
)""",
    """
CREATE TABLE charges (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    unit       TEXT NOT NULL,
    scope      TEXT NOT NULL CHECK (scope <> ''),
    marginal   TEXT NOT NULL CHECK (marginal <> ''),
    relation   TEXT NOT NULL CHECK (relation <> ''),
    measure    TEXT NOT NULL CHECK (measure IN ('approx_dp', 'zcdp')),
    epsilon    REAL NOT NULL CHECK (epsilon >= 0),
    rho        REAL NOT NULL CHECK (rho >= 0),
    delta      REAL NOT NULL CHECK (delta >= 0 AND delta < 1),
    mechanism  TEXT NOT NULL CHECK (mechanism <> ''),
    bounds     TEXT NOT NULL,
    run_id     TEXT NOT NULL CHECK (run_id <> ''),
    created_at TEXT NOT NULL,
    first_date TEXT NOT NULL CHECK (first_date <> ''),
    last_date  TEXT NOT NULL CHECK (last_date >= first_date),
    input_version TEXT NOT NULL CHECK (input_version <> '')
)""",
    """
CREATE TABLE draws (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    charge_id    INTEGER NOT NULL REFERENCES charges (id),
    part         TEXT NOT NULL CHECK (part <> ''),
    date         TEXT NOT NULL CHECK (date <> ''),
    fingerprint  TEXT NOT NULL CHECK (fingerprint <> ''),
    release_ref  TEXT NOT NULL UNIQUE,
    run_id       TEXT NOT NULL CHECK (run_id <> ''),
    created_at   TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'complete')),
    completed_at TEXT,
    completed_by TEXT,
    UNIQUE (charge_id, part),
    CHECK ((status = 'pending' AND completed_at IS NULL AND completed_by IS NULL)
        OR (status = 'complete' AND completed_at IS NOT NULL AND completed_by IS NOT NULL))
)""",
    _PERSON_CAPS,
    "CREATE INDEX charges_scope ON charges (unit, scope, marginal)",
    "CREATE INDEX charges_dates ON charges (last_date, first_date)",
    "CREATE INDEX draws_part ON draws (part, fingerprint)",
    "CREATE INDEX draws_date ON draws (date)",
)


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


@dataclass(frozen=True)
class Cap:
    """The cap in force for one unit: per scope, (epsilon, delta) of everything released from it."""

    unit: str
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
class Charge:
    id: int
    unit: str
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
class Request:
    """One part of one marginal asking to be released under ``unit``."""

    unit: str
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
class ScopeSpend:
    unit: str
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
    if r.unit == PrivacyUnit.CARD_PERIOD.value:
        keys.append(f"date|{r.unit}|{r.date}")
    if r.unit in CARD_UNITS:
        keys.append("person")  # the person account reads every card-level charge near the request's dates
    return keys


def _covered(r: Request) -> tuple[str, str]:
    """The first and last service date a charge for ``r`` covers: its date, or for a card_period the whole
    period named by its scope ``first..last`` (a period with gaps is covered end to end: conservative)."""
    if r.unit != PrivacyUnit.CARD_PERIOD.value:
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


class PrivacyLedger:
    """The ledger at ``location`` (module docstring): the path of a SQLite file, or a ``postgresql://`` URI
    (``core.ledger_backends``; the accounting is the same on both).

    ``initial_caps``: unit -> (epsilon, delta) per scope, recorded as the caps when the ledger is created
    (and for a unit the ledger has never had a cap for); ignored afterwards: the cap is ledger state.
    ``published``: ledger id -> draw ids, for every release already published (``privacy.json``).
    ``acknowledge_reset``: a reason; only then may a ledger that lacks those be used, and the reset is
    recorded. ``person_cap`` (epsilon, delta) and ``horizon_days``: the person account's cap and horizon,
    recorded when the ledger is created (or migrated from schema 2); ignored afterwards, like the caps.
    """

    def __init__(
        self,
        location: str | Path,
        initial_caps: Mapping[str, tuple[float, float]],
        *,
        published: Mapping[str, Collection[int]] | None = None,
        acknowledge_reset: str | None = None,
        person_cap: tuple[float, float] = DEFAULT_PERSON_CAP,
        horizon_days: int = DEFAULT_HORIZON_DAYS,
    ) -> None:
        self._backend = open_backend(location)
        self.location = self._backend.location
        caps = {PrivacyUnit(u).value: (_positive("cap epsilon", e), _positive("cap delta", d, True))
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
            elif version == 2:
                self._backend.migrate(conn, _MIGRATE_2_TO_3, SCHEMA_VERSION, params={3: (UNVERSIONED,)})
            elif version != SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.location} has schema version {version}; this code reads version "
                    f"{SCHEMA_VERSION} (and migrates version 2). A version-1 ledger (trip unit, unkeyed fingerprints) cannot be "
                    "carried forward: keep it as the record of the releases it made, move it aside, and start "
                    "a new ledger with an acknowledged reset."
                )
            self.ledger_id = conn.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()[0]
            for unit, (eps, delta) in caps.items():
                if not conn.execute("SELECT 1 FROM caps WHERE unit = ?", (unit,)).fetchone():
                    conn.execute(f"INSERT INTO caps ({_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'create', ?)",
                                 (unit, eps, delta, _now(), "cap at ledger creation (first use of the unit)"))
            if not conn.execute("SELECT 1 FROM person_caps").fetchone():
                conn.execute(f"INSERT INTO person_caps ({_PERSON_CAP_COLUMNS}) VALUES (?, ?, ?, ?, 'create', ?)",
                             (horizon_days, *person, _now(), "person cap at ledger creation" if version == 0 else
                              f"person cap at the migration from schema {version}"))
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
    def _cap(conn: Any, unit: str) -> Cap:
        row = conn.execute(f"SELECT {_CAP_COLUMNS} FROM caps WHERE unit = ? ORDER BY id DESC LIMIT 1", (unit,)).fetchone()
        if row is None:
            raise LedgerError(f"the ledger has no cap for unit {unit!r}")
        return Cap(*row)

    @staticmethod
    def _person_cap(conn: Any) -> PersonCap:
        row = conn.execute(f"SELECT {_PERSON_CAP_COLUMNS} FROM person_caps ORDER BY id DESC LIMIT 1").fetchone()
        return PersonCap(*row)

    def _spend(self, conn: Any, unit: str, scope: str, extra: Sequence[PrivacyCost] = ()) -> Guarantee:
        costs = [c.cost for c in self._charges(conn, "unit = ? AND scope = ?", (unit, scope))] + list(extra)
        return compose(costs, delta_target=self._cap(conn, unit).delta)

    def _near(self, conn: Any, first: str, last: str) -> list[Charge]:
        """The card-level charges some horizon window touching [first, last] can hold."""
        h = self._person_cap(conn).horizon_days
        return self._charges(conn, f"unit IN ({', '.join('?' * len(CARD_UNITS))}) AND last_date >= ? AND "
                             "first_date <= ? ORDER BY id", (*CARD_UNITS, _shift(first, -(h - 1)), _shift(last, h - 1)))

    def _windows(self, conn: Any, first: str, last: str) -> list[tuple[tuple[str, str], list[Charge]]]:
        """Every horizon window that touches [first, last] and could be a worst one, with the card-level
        charges touching it. A window's charges only grow when its start moves to the earliest last date among
        them (or to ``last``), so windows starting at those dates are enough."""
        h = self._person_cap(conn).horizon_days
        lo, hi = _shift(first, -(h - 1)), last
        near = self._near(conn, first, last)
        starts = sorted({c.last_date for c in near if lo <= c.last_date <= hi} | {last})
        out, seen = [], set()
        for start in starts:
            end = _shift(start, h - 1)
            members = [c for c in near if c.last_date >= start and c.first_date <= end]
            key = frozenset(c.id for c in members)
            if key not in seen:
                seen.add(key)
                out.append(((start, end), members))
        return out

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
            PrivacyUnit(r.unit)
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
        if r.unit != PrivacyUnit.CARD_PERIOD.value:
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

    def _check_person(self, conn: Any, r: Request, first: str, last: str) -> None:
        """Refuse a card-level charge that would take any horizon window touching its dates past the person cap."""
        if r.unit not in CARD_UNITS:
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

    def _check_cap(self, conn: Any, r: Request) -> None:
        cap = self._cap(conn, r.unit)
        scope_costs = [c.cost for c in self._charges(conn, "unit = ? AND scope = ?", (r.unit, r.scope))]
        if within(scope_costs + [r.cost], cap.epsilon, cap.delta, REL_TOL):
            return
        before = self._spend(conn, r.unit, r.scope)
        after = self._spend(conn, r.unit, r.scope, [r.cost])
        charged = "\n".join(
            f"  - {c.marginal}: {c.cost.measure} ε={c.epsilon!r} ρ={c.rho!r} δ={c.delta!r}, run {c.run_id},"
            f" {c.created_at}"
            for c in self._charges(conn, "unit = ? AND scope = ? ORDER BY id", (r.unit, r.scope))
        )
        raise BudgetExceeded(
            f"privacy budget exceeded for {r.unit} scope {r.scope!r}: it already holds\n{charged or '  (nothing)'}\n"
            f"for (ε, δ) = ({before.epsilon!r}, {before.delta!r}); this release of {r.marginal} would take it to "
            f"({after.epsilon!r}, {after.delta!r}) against the cap ({cap.epsilon!r}, {cap.delta!r}) set {cap.set_at}. "
            "Publish the existing release instead, or raise the cap with `python -m opal_dp.cli ledger raise-cap` "
            "only if you accept the extra privacy loss; every fresh draw and every changed input is charged.",
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

    def raise_cap(self, unit: str, epsilon: float, delta: float, reason: str) -> Cap:
        """Raise ``unit``'s cap per scope (both coordinates at least the current ones), recording why.

        Statements of earlier releases name the cap in force when they were made and say that it can
        only be raised this way; every later statement lists the raise.
        """
        unit = PrivacyUnit(unit).value
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

    # -- reads -------------------------------------------------------------------------

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
                                 (PrivacyUnit.TRIP.value, _day(first), _day(last)))

    def cap(self, unit: str) -> Cap:
        with self._connect() as conn:
            return self._cap(conn, PrivacyUnit(unit).value)

    def cap_history(self, unit: str) -> list[Cap]:
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {_CAP_COLUMNS} FROM caps WHERE unit = ? ORDER BY id", (PrivacyUnit(unit).value,))
            return [Cap(*row) for row in rows]

    def resets(self) -> list[dict]:
        with self._connect() as conn:
            rows = conn.execute("SELECT acknowledged_at, reason, ledger_ids, missing_draws FROM resets ORDER BY id")
            return [{"acknowledged_at": a, "reason": r, "ledger_ids": json.loads(i), "missing_draws": m}
                    for a, r, i, m in rows]

    def spend(self, unit: str, scope: str) -> Guarantee:
        """What everything charged to ``scope`` costs one unit together, pending charges included."""
        with self._connect() as conn:
            return self._spend(conn, PrivacyUnit(unit).value, _name("scope", scope))

    def charges(self, unit: str | None = None, scope: str | None = None) -> list[Charge]:
        with self._connect() as conn:
            where, params = self._filter(unit, scope)
            return self._charges(conn, f"{where} ORDER BY id", params)

    def draws(self, ids: Collection[int] | None = None) -> list[Draw]:
        with self._connect() as conn:
            if ids is None:
                return self._draws(conn, "1 = 1 ORDER BY id", ())
            wanted = sorted({int(i) for i in ids})
            found = []
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                found += self._draws(conn, f"id IN ({', '.join('?' * len(chunk))}) ORDER BY id", tuple(chunk))
            return found

    def draws_on(self, dates: Collection[str]) -> list[tuple[Draw, Charge]]:
        """Every draw of the given dates, with its charge (whatever the unit)."""
        with self._connect() as conn:
            out = []
            for day in sorted(set(dates)):
                for draw in self._draws(conn, "date = ? ORDER BY id", (day,)):
                    out.append((draw, self._charge(conn, draw.charge_id)))
            return out

    @staticmethod
    def _filter(unit: str | None, scope: str | None) -> tuple[str, tuple]:
        clauses, params = ["1 = 1"], []
        if unit is not None:
            clauses.append("unit = ?")
            params.append(PrivacyUnit(unit).value)
        if scope is not None:
            clauses.append("scope = ?")
            params.append(_name("scope", scope))
        return " AND ".join(clauses), tuple(params)

    def summary(self, unit: str | None = None) -> list[ScopeSpend]:
        """Per (unit, scope), sorted: what it costs one unit, its cap, charges, draws, pending draws."""
        with self._connect() as conn:
            where, params = self._filter(unit, None)
            scopes = conn.execute(
                f"SELECT unit, scope, COUNT(*), MAX(created_at) FROM charges WHERE {where} GROUP BY unit, scope"
                " ORDER BY unit, scope", params,
            ).fetchall()
            rows = []
            for u, scope, n_charges, last in scopes:
                n_draws, pending = conn.execute(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), 0) AS INTEGER) FROM draws WHERE charge_id IN"
                    " (SELECT id FROM charges WHERE unit = ? AND scope = ?)", (u, scope),
                ).fetchone()
                rows.append(ScopeSpend(u, scope, self._spend(conn, u, scope), self._cap(conn, u), n_charges,
                                       n_draws, pending, last))
            return rows
