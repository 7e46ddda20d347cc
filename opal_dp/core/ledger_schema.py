"""The ledger's tables (schema version 3, ``core.ledger``)."""

from __future__ import annotations

SCHEMA_VERSION = 3

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
