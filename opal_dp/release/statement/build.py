"""The published privacy statement (privacy.json and PRIVACY.md) of a release, built from the ledger.

Every claim is what the ledger recorded for the draws that produced the published numbers: the privacy
unit, the neighbouring relation, the contribution bounds, the release design, each marginal's mechanism and
parameters, what each ledger scope (a partition, a date or the period) costs one person in total, the cap in
force and its history. Nothing comes from the publishing run's configuration, and no figure is computed
from the data, except the public-domain design's totals per (date, mode, tap), read from the published
``time.csv`` (DP output). A release whose draws disagree (two units, two relations, two parameter sets for one
marginal) gets no statement: ``StatementError``, and the publish gate refuses it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from importlib.metadata import version

import pandas as pd

from opal_dp.core import PrivacyUnit
from opal_dp.core import discrete_gaussian as gaussian_tail
from opal_dp.core import sbh as laplace_tail
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import Cap, Charge, Draw, ScopeSpend
from opal_dp.release.statement.person import person_section
from opal_dp.release.statement.runs import draws_section, partitions_section
from opal_dp.release.page.summary import PageSummary
from opal_dp.network import MODES
from opal_dp.release.marginals.time_loc_errors import fit_errors_of
from opal_dp.release.options import Design

SCHEMA_VERSION = 4  # 4: partitions, dates and draws stated as runs (``runs``); 3: the release design ("design")
STATEMENT_JSON, STATEMENT_MD = "privacy.json", "PRIVACY.md"
TRUE_COUNTS = (1, 2, 5, 10, 18, 20, 30, 40, 50, 100, 200)
COUNT_STEP = 100  # beyond TRUE_COUNTS, the accuracy table goes on in steps of 100 up to where a bin is published
PUBLISHED_SURELY = 0.99  # ... with at least this probability
CONFIDENCE = 0.95
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
PACKAGES = ("opal_dp", "dagster", "numpy", "pandas", "pyarrow", "opendp", "cryptography")
COMMUTER_DAYS, COMMUTER_TRIPS = 10, 2  # a commuter: 2 trips on each of 10 weekdays, one mode
OCCASIONAL_DAYS = 3  # an occasional rider: 1 trip on each of 3 days

TAILS = {"discrete_laplace": laplace_tail, "discrete_gaussian": gaussian_tail}  # noise -> its closed-form figures
from opal_dp.release.statement.prose import MECHANISMS, DESIGNS, RANDOMNESS, RELATIONS, UNIT_NOUN, COMPOSITION, LEDGER, ACCURACY

class StatementError(ValueError):
    """The ledger draws of a release do not support one honest statement."""


@dataclass(frozen=True)
class LedgerEvidence:
    """What the ledger holds about the draws that produced a release."""

    ledger_id: str
    draws: Mapping[tuple[str, str], Draw]  # (partition, marginal) -> the draw published
    charges: Mapping[int, Charge]  # charge id -> charge, for those draws
    scopes: Sequence[ScopeSpend]  # every scope those draws belong to
    cap_history: Sequence[Cap]  # of the release's unit
    other_units: Mapping[str, Sequence[str]]  # other unit -> dates of this release it also drew on
    resets: Sequence[Mapping]
    person: Mapping | None = None  # ``release.statement.person.person_section``
    corrections: Sequence[Mapping] = ()  # ``corrections``: published partitions drawn before, and what replaced it


def ledger_evidence(ledger: PrivacyLedger, draw_ids: dict[tuple[str, str], int],
                    with_person: bool = True) -> LedgerEvidence:
    """The ledger's records of the draws (partition, marginal) -> draw id, and of everything they touch; the person
    section too unless ``with_person`` is false (the publish gate, which checks draws, not statements, and a
    statement whose person section must also count the OD files: each reads every horizon window of the
    person account, a cost that grows with the dates published)."""
    draws = {d.id: d for d in ledger.draws(draw_ids.values())}
    missing = sorted(set(draw_ids.values()) - set(draws))
    if missing:
        raise StatementError(f"the ledger has no draws {missing[:5]}: the release assets do not come from this ledger")
    wanted = {d.charge_id for d in draws.values()}
    charges = {c.id: c for c in ledger.charges(ids=wanted)}
    units = {c.unit for c in charges.values()}
    scopes = {(c.unit, c.scope) for c in charges.values()}
    dates = {d.date for d in draws.values()}
    other: dict[str, set[str]] = {}
    earlier: dict[tuple[str, str], list[tuple[Draw, Charge]]] = {}
    for draw, charge in ledger.draws_on(dates):
        if charge.unit not in units:
            other.setdefault(charge.unit, set()).add(draw.date)
        elif draw.status == "complete":
            earlier.setdefault((draw.part, charge.marginal), []).append((draw, charge))
    unit = sorted(units)[0]
    return LedgerEvidence(
        ledger_id=ledger.ledger_id,
        draws={pair: draws[i] for pair, i in draw_ids.items()},
        charges=charges,
        scopes=ledger.summary(scopes=scopes),
        cap_history=ledger.cap_history(unit),
        other_units={u: sorted(d) for u, d in other.items()},
        resets=ledger.resets(),
        person=person_section(ledger, dates, charges.values()) if with_person else None,
        corrections=_corrections(draw_ids, draws, charges, earlier),
    )


def _corrections(draw_ids: Mapping[tuple[str, str], int], draws: Mapping[int, Draw], charges: Mapping[int, Charge],
                 earlier: Mapping[tuple[str, str], list[tuple[Draw, Charge]]]) -> list[dict]:
    """Per published partition the ledger had drawn before (a corrected raw file: a new input version; or a fresh
    draw): the draws published now and those they replace, with the input versions. From the ledger alone, so a
    publication rebuilt from scratch states the same corrections."""
    out: dict[str, dict] = {}
    for (part, marginal), draw_id in sorted(draw_ids.items()):
        charge = charges[draws[draw_id].charge_id]
        replaced = [(d, c) for d, c in earlier.get((part, marginal), []) if d.id < draw_id and c.id != charge.id]
        if replaced:
            day, mode = open_data_partition(part)
            entry = out.setdefault(part, {"date": day, "mode": mode, "input_version": charge.input_version,
                                          "draws": [], "replaced_draws": [], "replaced_input_versions": set()})
            entry["draws"].append(draw_id)
            entry["replaced_draws"] += [d.id for d, _ in replaced]
            entry["replaced_input_versions"] |= {c.input_version for _, c in replaced}
    return [{**e, "draws": sorted(e["draws"]), "replaced_draws": sorted(e["replaced_draws"]),
             "replaced_input_versions": sorted(e["replaced_input_versions"])} for _, e in sorted(out.items())]


def stated_design(statement: Mapping) -> Design:
    """The release design a published statement names (a statement without one is an SBH release)."""
    return Design.parse(statement.get("design", {}).get("name", Design.SBH))


def open_data_partition(key: str) -> tuple[str, str]:
    """Partition key ``"2016-07-25|bus"`` -> published ``("20160725", "bus")``; raises on a bad key."""
    day, sep, mode = str(key).partition("|")
    if not (sep and ISO_DATE.fullmatch(day) and mode in MODES):
        raise ValueError(f"partition key must be '<YYYY-MM-DD>|<mode>' with mode in {MODES}, got {key!r}")
    return date.fromisoformat(day).strftime("%Y%m%d"), mode


def privacy_statement(
    evidence: LedgerEvidence, partitions: list[str], release_id: str, created_at: str,
    tables: PageSummary | Mapping[str, pd.DataFrame] | None = None, data: Mapping | None = None, *,
    marginals: Sequence, sections: Mapping[str, dict] | None = None, person: dict | None = None,
) -> dict:
    """JSON-ready statement of a release of ``partitions``, from the ledger ``evidence`` alone; ``marginals``: the
    published marginals (``name``, ``table``, ``tap``; the caller's: the statement names no product); ``tables``: the
    ``PageSummary`` of the published tables, or the tables (the public-domain design states its totals from
    ``time``); ``data``: where the trips came from (``synthetic_sample``, ``synthetic_sample_dates``), the dates
    not (yet) released (``pending_dates``) and those left out of a released week (``left_out_dates``). Published
    partitions the ledger had drawn before under another input version or a fresh draw are listed under
    ``corrections``. ``sections``: what the other published products and files state (e.g. ``od``, ``coverage``),
    after the marginals' body, in their order; ``person``: the person section when it must count more charges than
    the marginals' (every file of the release), else the evidence's. The statement is complete when returned."""
    names = [m.name for m in marginals]
    wanted = {(p, n) for p in partitions for n in names}
    if set(evidence.draws) != wanted:
        raise StatementError("the ledger evidence must name exactly one draw per published (partition, marginal)")
    charges = [evidence.charges[d.charge_id] for d in evidence.draws.values()]
    unit = _one({c.unit for c in charges}, "privacy units")  # a PrivacyUnit: records carry it
    relation = _one({c.relation for c in charges}, "neighbouring relations")
    bounds = json.loads(_one({c.bounds for c in charges}, "contribution bounds"))
    params = {
        name: json.loads(_one({evidence.charges[evidence.draws[p, name].charge_id].mechanism for p in partitions},
                              f"parameter sets for {name}"))
        for name in names
    }
    seeded = any(p["seeded"] for p in params.values())
    design = _design(params, tables)
    scopes = sorted(evidence.scopes, key=lambda s: s.scope)
    worst = max(scopes, key=lambda s: (s.guarantee.epsilon, s.guarantee.delta))
    cap = evidence.cap_history[-1]
    return {
        "schema_version": SCHEMA_VERSION,
        "person": evidence.person if person is None else person,
        "release": {"id": release_id, "created_at": created_at},
        "noise_seeded": seeded,
        "data": dict(data or {"synthetic_sample": False, "synthetic_sample_dates": [], "pending_dates": [],
                              "left_out_dates": []}),
        "design": design,
        "privacy_unit": {
            "unit": unit.value,
            "protects": unit.protects,
            "relation": relation,
            "meaning": "Neighbouring datasets differ by " + RELATIONS[relation].format(unit=UNIT_NOUN[unit.value]) + ".",
            "contribution_bounds": {k: v for k, v in bounds.items() if k != "unit"},
            "scope": unit.scope_kind,
        },
        "guarantee": {
            "epsilon": worst.guarantee.epsilon,
            "delta": worst.guarantee.delta,
            "per": unit.scope_kind,
            "composition": COMPOSITION[unit.value],
            "scopes": [_scope(s) for s in scopes],
        },
        "worked_examples": _worked_examples(unit, scopes),
        "mechanisms": {name: {**MECHANISMS[name], "randomness": RANDOMNESS[seeded]}
                       for name in sorted({p["mechanism"] for p in params.values()})},
        "marginals": [_marginal(m.name, m.table, m.tap, params[m.name]) for m in marginals],
        "partitions": partitions_section(open_data_partition(k) for k in partitions),
        "ledger": {
            "id": evidence.ledger_id,
            "draws": draws_section(d.id for d in evidence.draws.values()),
            "cap_in_force": _cap(cap),
            "cap_history": [_cap(c) for c in evidence.cap_history],
            "acknowledged_resets": list(evidence.resets),
            "meaning": LEDGER,
        },
        "corrections": list(evidence.corrections),
        "also_released_under_other_units": {u: sorted(d) for u, d in sorted(evidence.other_units.items())},
        "accuracy_note": ACCURACY,
        "not_protected": _not_protected(unit, evidence.other_units, design["name"]),
        "software": {package: version(package) for package in PACKAGES},
        **(sections or {}),
    }


def _design(params: Mapping[str, dict], tables: PageSummary | Mapping[str, pd.DataFrame] | None) -> dict:
    """The release design, from the charged mechanisms; the public-domain design's tau, false cells and totals."""
    name = Design.parse(_one({p.get("design", Design.SBH) for p in params.values()}, "release designs"))
    out = {"name": name.value, **DESIGNS[name]}
    if name.consistent:
        if tables is None:
            raise StatementError("a public-domain statement states its totals from time.csv: give the tables")
        summary = tables if isinstance(tables, PageSummary) else PageSummary.of_tables(tables)
        out |= {
            "tau": int(_one({str(p["tau"]) for p in params.values()}, "thresholds tau")),
            "expected_false_cells_per_day": float(
                _one({repr(p["expected_false_cells_per_day"]) for p in params.values()}, "false-cell figures")),
            "pure_dp": all(p["noise"] == "discrete_laplace" for p in params.values()),
            "totals": summary.totals(),
        }
    return out


def _one(values: set[str], what: str) -> str:
    if len(values) != 1:
        raise StatementError(f"the draws of this release use {len(values)} different {what}; a release must be "
                             "made under one, so that one statement is true of all of it")
    return next(iter(values))


def _scope(s: ScopeSpend) -> dict:
    return {"scope": s.scope, "epsilon": s.guarantee.epsilon, "delta": s.guarantee.delta, "rho": s.guarantee.rho,
            "composition": s.guarantee.composition, "charges": s.charges}


def _cap(cap: Cap) -> dict:
    return {"epsilon": cap.epsilon, "delta": cap.delta, "set_at": cap.set_at, "action": cap.action,
            "reason": cap.reason}


def _worked_examples(unit: PrivacyUnit, scopes: Sequence[ScopeSpend]) -> list[dict]:
    """The commuter and the occasional rider, from the worst scope's guarantee (everyone is at most that)."""
    g = max(scopes, key=lambda s: (s.guarantee.epsilon, s.guarantee.delta)).guarantee
    eps, delta = g.epsilon, g.delta
    if unit is PrivacyUnit.TRIP:  # group privacy for 2 trips in one partition, then 10 partitions
        k = COMMUTER_TRIPS
        day = (k * eps, k * math.exp((k - 1) * eps) * delta)
        commuter = (COMMUTER_DAYS * day[0], min(1.0, COMMUTER_DAYS * day[1]))
        how = (f"{k} trips in each of {COMMUTER_DAYS} partitions: group privacy (k·epsilon, k·e^((k-1)·epsilon)·delta) "
               f"per partition, then basic composition over the {COMMUTER_DAYS} partitions")
        occasional = (OCCASIONAL_DAYS * eps, OCCASIONAL_DAYS * delta)
    elif unit is PrivacyUnit.CARD_DAY:
        commuter = (COMMUTER_DAYS * eps, COMMUTER_DAYS * delta)
        how = f"one card-day per date, basic composition over the {COMMUTER_DAYS} dates"
        occasional = (OCCASIONAL_DAYS * eps, OCCASIONAL_DAYS * delta)
    else:  # each period is one scope, whatever the card did in it; the days may fall in several periods
        periods = {who: min(days, len(scopes)) for who, days in (("commuter", COMMUTER_DAYS), ("rider", OCCASIONAL_DAYS))}
        commuter, occasional = ((n * eps, min(1.0, n * delta)) for n in periods.values())
        how = {who: "one period is one scope: the period's guarantee, whatever the card did" if n == 1 else
               f"its days can fall in up to {n} of the release's periods: basic composition over them"
               for who, n in periods.items()}
        return _examples(commuter, how["commuter"], occasional, how["rider"])
    return _examples(commuter, how, occasional, "one scope per day, basic composition")


def _examples(commuter: tuple[float, float], commuter_how: str, occasional: tuple[float, float],
              occasional_how: str) -> list[dict]:
    return [
        {"who": f"a commuter with {COMMUTER_TRIPS} train trips on each of {COMMUTER_DAYS} weekdays",
         "epsilon": commuter[0], "delta": commuter[1], "how": commuter_how},
        {"who": f"an occasional rider with one trip on each of {OCCASIONAL_DAYS} days",
         "epsilon": occasional[0], "delta": occasional[1], "how": occasional_how},
    ]


def _marginal(name: str, table: str, tap: str, p: dict) -> dict:
    tail = TAILS[p["noise"]]
    sens, m, scale = p["sensitivity"], p["min_released_count"], p["scale"]
    return {
        "name": name,
        "file": f"{table}.csv",
        "tap": tap,
        "mechanism": p["mechanism"],
        "noise": p["noise"],
        "epsilon": p.get("epsilon"),
        "rho": p.get("rho"),
        "delta": p["delta"],
        "scale": scale,
        "threshold": p["threshold"],
        "min_released_count": m,
        "sensitivity": sens,
        "presence_probability": tail.release_probability(sens["linf"], scale, m),
        "release_probability": {str(n): tail.release_probability(n, scale, m) for n in _counts(tail, scale, m)},
        "published_surely_from": _published_from(tail, scale, m),
        "error_bound_95": tail.error_bound(scale, CONFIDENCE),
        **({"root": p["root"], "fit_error_sd": fit_errors_of(p)} if "stations" in p else {}),  # the hierarchy's fit
    }


def _published_from(tail, scale: float, m: int) -> int:
    """The smallest true count published with probability at least ``PUBLISHED_SURELY``."""
    n = max(1, m)
    while tail.release_probability(n, scale, m) < PUBLISHED_SURELY:
        n += max(1, int(scale) // 4)
    while n > 1 and tail.release_probability(n - 1, scale, m) >= PUBLISHED_SURELY:
        n -= 1
    return n


def _counts(tail, scale: float, m: int) -> list[int]:
    """``TRUE_COUNTS``, then steps of ``COUNT_STEP`` up to the first count published with probability at least
    ``PUBLISHED_SURELY``: the accuracy table shows where a bin is reliably published, whatever the threshold."""
    top = -(-_published_from(tail, scale, m) // COUNT_STEP) * COUNT_STEP
    return sorted({*TRUE_COUNTS, *range(COUNT_STEP, top + 1, COUNT_STEP)})


def _not_protected(unit: PrivacyUnit, other_units: Mapping[str, Sequence[str]], design: str) -> list[str]:
    items = []
    if unit is PrivacyUnit.TRIP:
        items += [
            "The unit is one trip, not one person or card. A card with trips in k different (date, mode) partitions "
            "is protected, for all those trips together, only at (k·epsilon, k·delta).",
            "Several trips of the same card within one partition compose too, by group privacy: m trips are "
            "protected together only at (m·epsilon, m·exp((m-1)·epsilon)·delta).",
        ]
    elif unit is PrivacyUnit.CARD_DAY:
        items.append("The unit is one card on one day: a card's different days compose (see the worked examples).")
    else:
        items.append("The unit is one card over this period: other periods' releases compose with this one.")
    if unit is not PrivacyUnit.TRIP:
        items.append("Contribution bounding drops a card's trips beyond the public bounds; the counts of busy cards "
                     "are therefore slightly low. The card id is used for nothing but bounding.")
    if other_units:
        items.append("The same dates were also released under other privacy units (listed above). Their losses add "
                     "up for the people in them, and a trip-unit release bounds nothing per card: for those dates "
                     "this statement's per-card figures hold only if the other releases are disregarded.")
    items.append(
        "Presence: a published bin proves its count after bounding was > 0. A unit alone in an otherwise empty "
        "bin is published with the presence probability given per marginal (at most delta/L0)." if not Design.parse(design).consistent
        else "Presence: a listed cell does not prove its count was > 0 (empty cells are listed too, see the expected "
        "false cells per day); a unit alone in an otherwise empty cell gets it listed with the presence probability "
        "given per marginal, and that event is covered by the guarantee above."
    )
    items += [
        "Public by design: the (date, mode) partition keys and the location labels (from the public stop list).",
        "Timing and other side channels (run time, resource use) are out of scope.",
        "Internal figures the data team sees in the Dagster UI and event log (true counts, suppressed mass, the "
        "share of trips removed by bounding) are not differentially private and are not part of this release. "
        "The Dagster home that holds that event log is protected like the private data folder: readable by its "
        "owner only.",
    ]
    return items


