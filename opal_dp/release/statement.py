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

from opal_dp.core import PrivacyUnit, Relation
from opal_dp.core import discrete_gaussian as gaussian_tail
from opal_dp.core import sbh as laplace_tail
from opal_dp.core.ledger import Cap, Charge, Draw, PrivacyLedger, ScopeSpend
from opal_dp.network import MODES
from opal_dp.release.marginals import MARGINALS
from opal_dp.release.od_publish import od_markdown

SCHEMA_VERSION = 3  # 3: the release design ("design"); a statement without it is an SBH release
STATEMENT_JSON, STATEMENT_MD = "privacy.json", "PRIVACY.md"
TRUE_COUNTS = (1, 2, 5, 10, 18, 20, 30, 40, 50, 100, 200)
CONFIDENCE = 0.95
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
PACKAGES = ("opal_dp", "dagster", "numpy", "pandas", "pyarrow", "opendp", "cryptography")
COMMUTER_DAYS, COMMUTER_TRIPS = 10, 2  # a commuter: 2 trips on each of 10 weekdays, one mode
OCCASIONAL_DAYS = 3  # an occasional rider: 1 trip on each of 3 days

TAILS = {"discrete_laplace": laplace_tail, "discrete_gaussian": gaussian_tail}  # noise -> its closed-form figures
MECHANISMS = {
    "stability_based_histogram": {
        "reference": (
            "Stability-based histogram (SBH), Algorithm 1 of the Data61 Opal release document (2016), after "
            "Bun, Nissim & Stemmer, ITCS 2016, and Vadhan, The Complexity of Differential Privacy, 2016, §7.1; "
            "calibrated to bounded contributions (L0 bins, L1 in total, at most Linf per bin)."
        ),
        "algorithm": (
            "Only bins present in the data (true count > 0) are considered; no new bin is ever published. Each "
            "gets a = count + Z with Z discrete Laplace of scale L1/epsilon; the bin is published with count a "
            "iff a >= threshold = Linf + scale·ln(L0/delta), i.e. iff a >= min_released_count = ceil(threshold). "
            "A bin absent from the data and a suppressed bin look the same."
        ),
        "noise": (
            "Discrete Laplace, P(Z = z) proportional to exp(-|z|/scale), sampled exactly (difference of two "
            "geometric variables drawn by integer inversion, no floating point)."
        ),
    },
    "gaussian_threshold_histogram": {
        "reference": (
            "Thresholded discrete Gaussian histogram (as OpenDP's make_gaussian_threshold), accounted in "
            "zero-concentrated DP (Bun & Steinke 2016); discrete Gaussian of Canonne, Kamath & Steinke 2020."
        ),
        "algorithm": (
            "Only bins present in the data (true count > 0) are considered; no new bin is ever published. Each "
            "gets a = count + Z with Z discrete Gaussian of standard deviation sigma = sqrt(L2²/(2 rho)); the bin "
            "is published iff a >= min_released_count, the smallest integer m with L0·P(Z >= m - Linf) <= delta. "
            "A bin absent from the data and a suppressed bin look the same."
        ),
        "noise": (
            "Discrete Gaussian, P(Z = z) proportional to exp(-z²/(2 sigma²)), sampled exactly (rejection from "
            "an exact discrete Laplace with exact acceptance decisions, no floating point)."
        ),
    },
    "public_domain_histogram": {
        "reference": (
            "Public-domain histogram with consistent marginals (the 2017 assessment's recommendations): noise on "
            "every cell of a public domain (Montreal prefix tree, Theorem 4.1; Cormode et al. 2012), marginals made "
            "consistent by weighted least squares (Hay et al. 2010)."
        ),
        "algorithm": (
            "For each (date, mode, tap), the domain is every (15-minute window, location of the mode in the public "
            "stop list) cell, plus the unknown cell (-1, -1) for tap-off: it comes from public data only. The joint "
            "time x location table and both one-way tables get independent noise on every cell, zeros included "
            "(discrete Laplace of scale L1/epsilon: pure epsilon-DP, delta = 0; or discrete Gaussian of "
            "sigma = sqrt(L2²/(2 rho)): rho-zCDP). Weighted least squares makes each one-way count the sum of its "
            "joint cells; rounding keeps every sum exact. A cell is listed if its estimate rounds to at least tau "
            "(min_released_count); the others are summed into remainder rows. The least squares, the rounding and "
            "the threshold are post-processing: they cost no privacy."
        ),
        "noise": (
            "Discrete Laplace or discrete Gaussian, sampled exactly from the operating system's random words, on "
            "every cell of the domain."
        ),
    },
}
DESIGNS = {
    "sbh": {
        "description": (
            "Stability-based histograms (the 2016 design): only bins present in the data are considered, each "
            "table is drawn on its own and thresholded, so the files do not add up exactly."
        ),
    },
    "public_domain": {
        "description": (
            "Public domain with zeros perturbed: every cell of the public domain gets noise, the one-way tables are "
            "derived consistently from the same measurements, and cells below tau are published as remainder rows, "
            "so every file adds up exactly."
        ),
        "post_processing": (
            "The least-squares consistency step, the rounding to non-negative integers with exact sums and the "
            "publication threshold tau are post-processing of the noisy measurements: they cost no privacy."
        ),
        "remainder_rows": (
            "time-loc.csv lists the cells with at least tau trips one by one; the others are summed into remainder "
            "rows: 'time = T, loc = other' (the unlisted cells of window T) and 'time = other, loc = L' (the "
            "unlisted cells of location L). For each (date, mode, tap), a count in time.csv equals the sum of the "
            "time-loc.csv rows of its window, its 'loc = other' row included, and a count in loc.csv the sum of "
            "the rows of its location, its 'time = other' row included. An unlisted cell is counted once in its "
            "window's remainder and once in its location's: summing all of time-loc.csv double-counts the unlisted "
            "mass. Use the totals below (from time.csv, equal to those of loc.csv) instead."
        ),
        "false_cells": (
            "An empty cell is listed when its noisy estimate reaches tau; expected_false_cells_per_day is the "
            "expected number of such cells over every (mode, tap) domain of one day, from the noise and the domain "
            "size alone (up to the small least-squares correction). A listed cell therefore does not prove that "
            "anyone travelled there. The release probabilities below are those of the noisy measurement at tau."
        ),
    },
}
RANDOMNESS = {
    False: "operating system CSPRNG (os.urandom); no seed exists",
    True: "SEEDED pseudo-random generator: anyone who knows the seed can remove the noise",
}
RELATIONS = {
    Relation.REPLACE_ONE.value: "one {unit}'s data replaced with another's",
    Relation.ADD_REMOVE.value: "one {unit}'s data added or removed",
}
UNIT_NOUN = {"trip": "trip", "card_day": "card-day", "card_period": "card's period"}
COMPOSITION = {
    "trip": (
        "Trips are split into disjoint partitions by (service date = tap-on date, mode). Within a partition the "
        "six marginals are computed from the same trips and compose sequentially; a trip lies in exactly one "
        "partition, so partitions compose in parallel: the whole release protects one trip at its partition's "
        "(epsilon, delta)."
    ),
    "card_day": (
        "All trips of one card on one service day, in every mode, are bounded together before the card id is "
        "dropped. The four (date, mode) partitions of a date are pieces of one histogram over (mode, time, "
        "location) per marginal, released with one noise draw whose sensitivity covers the whole card-day; so "
        "each date is one ledger scope, the six marginals compose sequentially within it, and dates compose in "
        "parallel (a card-day lies in one date). A card travelling on k days is protected, for all those days "
        "together, at the sum of those dates' (epsilon, delta)."
    ),
    "card_period": (
        "All trips of one card over the release period are bounded together before the card id is dropped. "
        "Every (date, mode) partition of the period is a piece of one histogram over (date, mode, time, "
        "location) per marginal, released with one noise draw whose sensitivity covers the card's whole "
        "period; the period is one ledger scope and its marginals compose in zero-concentrated DP (rho adds "
        "up) before one conversion to (epsilon, delta) by OpenDP. The period's (epsilon, delta) holds for "
        "each card, whatever it did in the period."
    ),
}
LEDGER = (
    "A persistent ledger records every noise draw and what it cost each scope, across runs. A draw that would "
    "take a scope over the cap in force is refused before any noise is drawn; publishing a stored draw again "
    "costs nothing. The cap is ledger state, fixed when the ledger was created: it can only be raised by an "
    "explicit, recorded command, and every raise is listed in the statements of later releases (this one "
    "lists the history up to its own creation). The per-scope totals above include everything the ledger had "
    "charged to those scopes when this release was made; anything released from them later is added there "
    "and stated by that release."
)
ACCURACY = (
    "Figures follow from the parameters alone. release_probability[n] = P(n + Z >= min_released_count), where "
    "n is the count of the mechanism's input (after contribution bounding). error_bound_95: |Z| <= e with "
    "probability >= 95% for each noisy count; a published count of a bin whose true count is near the "
    "threshold is biased upwards by the selection, and contribution bounding can only lower a count."
)


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


def ledger_evidence(ledger: PrivacyLedger, draw_ids: dict[tuple[str, str], int]) -> LedgerEvidence:
    """The ledger's records of the draws (partition, marginal) -> draw id, and of everything they touch."""
    draws = {d.id: d for d in ledger.draws(draw_ids.values())}
    missing = sorted(set(draw_ids.values()) - set(draws))
    if missing:
        raise StatementError(f"the ledger has no draws {missing[:5]}: the release assets do not come from this ledger")
    charges = {c.id: c for c in ledger.charges() if c.id in {d.charge_id for d in draws.values()}}
    units = {c.unit for c in charges.values()}
    scopes = {(c.unit, c.scope) for c in charges.values()}
    dates = {d.date for d in draws.values()}
    other: dict[str, set[str]] = {}
    for draw, charge in ledger.draws_on(dates):
        if charge.unit not in units:
            other.setdefault(charge.unit, set()).add(draw.date)
    unit = sorted(units)[0]
    return LedgerEvidence(
        ledger_id=ledger.ledger_id,
        draws={pair: draws[i] for pair, i in draw_ids.items()},
        charges=charges,
        scopes=[s for s in ledger.summary() if (s.unit, s.scope) in scopes],
        cap_history=ledger.cap_history(unit),
        other_units={u: sorted(d) for u, d in other.items()},
        resets=ledger.resets(),
    )


def open_data_partition(key: str) -> tuple[str, str]:
    """Partition key ``"2016-07-25|bus"`` -> published ``("20160725", "bus")``; raises on a bad key."""
    day, sep, mode = str(key).partition("|")
    if not (sep and ISO_DATE.fullmatch(day) and mode in MODES):
        raise ValueError(f"partition key must be '<YYYY-MM-DD>|<mode>' with mode in {MODES}, got {key!r}")
    return date.fromisoformat(day).strftime("%Y%m%d"), mode


def privacy_statement(
    evidence: LedgerEvidence, partitions: list[str], release_id: str, created_at: str,
    tables: Mapping[str, pd.DataFrame] | None = None, data: Mapping | None = None,
) -> dict:
    """JSON-ready statement of a release of ``partitions``, from the ledger ``evidence`` alone; ``tables``: the
    published tables (the public-domain design states its totals from ``time``); ``data``: where the trips came
    from (``synthetic_sample``, ``synthetic_sample_dates``) and the dates not (yet) released (``pending_dates``)."""
    names = [m.name for m in MARGINALS]
    wanted = {(p, n) for p in partitions for n in names}
    if set(evidence.draws) != wanted:
        raise StatementError("the ledger evidence must name exactly one draw per published (partition, marginal)")
    charges = [evidence.charges[d.charge_id] for d in evidence.draws.values()]
    unit = PrivacyUnit(_one({c.unit for c in charges}, "privacy units"))
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
        "release": {"id": release_id, "created_at": created_at},
        "noise_seeded": seeded,
        "data": dict(data or {"synthetic_sample": False, "synthetic_sample_dates": [], "pending_dates": []}),
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
        "marginals": [_marginal(m.name, m.table, m.tap, params[m.name]) for m in MARGINALS],
        "partitions": {
            "by": ["date", "mode"],
            "keys": [dict(zip(("date", "mode"), open_data_partition(k))) for k in sorted(partitions)],
        },
        "ledger": {
            "id": evidence.ledger_id,
            "draws": sorted(d.id for d in evidence.draws.values()),
            "cap_in_force": _cap(cap),
            "cap_history": [_cap(c) for c in evidence.cap_history],
            "acknowledged_resets": list(evidence.resets),
            "meaning": LEDGER,
        },
        "also_released_under_other_units": {u: sorted(d) for u, d in sorted(evidence.other_units.items())},
        "accuracy_note": ACCURACY,
        "not_protected": _not_protected(unit, evidence.other_units, design["name"]),
        "software": {package: version(package) for package in PACKAGES},
    }


def _design(params: Mapping[str, dict], tables: Mapping[str, pd.DataFrame] | None) -> dict:
    """The release design, from the charged mechanisms; the public-domain design's tau, false cells and totals."""
    name = _one({p.get("design", "sbh") for p in params.values()}, "release designs")
    out = {"name": name, **DESIGNS[name]}
    if name == "public_domain":
        if tables is None:
            raise StatementError("a public-domain statement states its totals from time.csv: give the tables")
        time = tables["time"].astype({c: str for c in ("mode", "date", "tap")})
        totals = time.groupby(["date", "mode", "tap"], sort=True)["count"].sum()
        out |= {
            "tau": int(_one({str(p["tau"]) for p in params.values()}, "thresholds tau")),
            "expected_false_cells_per_day": float(
                _one({repr(p["expected_false_cells_per_day"]) for p in params.values()}, "false-cell figures")),
            "pure_dp": all(p["noise"] == "discrete_laplace" for p in params.values()),
            "totals": [{"date": d, "mode": m, "tap": t, "trips": int(n)} for (d, m, t), n in totals.items()],
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
    else:
        commuter = occasional = (eps, delta)
        how = "the whole period is one scope: the period's guarantee, whatever the card did"
    return [
        {"who": f"a commuter with {COMMUTER_TRIPS} train trips on each of {COMMUTER_DAYS} weekdays",
         "epsilon": commuter[0], "delta": commuter[1], "how": how},
        {"who": f"an occasional rider with one trip on each of {OCCASIONAL_DAYS} days",
         "epsilon": occasional[0], "delta": occasional[1],
         "how": "one scope per day, basic composition" if unit is not PrivacyUnit.CARD_PERIOD else how},
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
        "release_probability": {str(n): tail.release_probability(n, scale, m) for n in TRUE_COUNTS},
        "error_bound_95": tail.error_bound(scale, CONFIDENCE),
    }


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
        "bin is published with the presence probability given per marginal (at most delta/L0)." if design == "sbh"
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


def render_markdown(statement: Mapping) -> str:
    """PRIVACY.md: the same statement for people, with a loud warning if the noise was seeded."""
    s = statement
    unit, g, ledger = s["privacy_unit"], s["guarantee"], s["ledger"]
    cap = ledger["cap_in_force"]
    lines = [f"# Privacy statement: release {s['release']['id']}", ""]
    if s["noise_seeded"]:
        lines += [
            "> **WARNING: THE NOISE OF THIS RELEASE WAS SEEDED. IT IS NOT DIFFERENTIALLY PRIVATE:",
            "> ANYONE WHO KNOWS THE SEED CAN REMOVE THE NOISE. FOR TESTS ONLY - NEVER PUBLISH IT.**",
            "",
        ]
    design, data = s["design"], s["data"]
    lines += [
        f"Created {s['release']['created_at']}.",
        "",
        *_data_lines(data, len({k["date"] for k in s["partitions"]["keys"]})),
        f"## Release design: {design['name']}",
        "",
        design["description"],
        "",
    ]
    if design["name"] == "public_domain":
        lines += [
            f"Pure differential privacy (delta = 0): **{'yes' if design['pure_dp'] else 'no (zCDP, converted)'}**. "
            f"Publication threshold tau = **{design['tau']}**; expected cells listed although their true count is "
            f"0: **{design['expected_false_cells_per_day']:.3g} per day**.",
            "",
            design["post_processing"],
            "",
            design["false_cells"],
            "",
            "### Remainder rows",
            "",
            design["remainder_rows"],
            "",
            "| date | mode | tap | trips (from time.csv) |",
            "|---|---|---|---|",
            *(f"| {t['date']} | {t['mode']} | {t['tap']} | {t['trips']} |" for t in design["totals"]),
            "",
        ]
    lines += [
        "## Who is protected, and how much",
        "",
        f"Protected: **{unit['protects']}**, at **(epsilon = {g['epsilon']:.4g}, delta = {g['delta']:.3g})** per "
        f"{g['per']} (relation `{unit['relation']}`: {unit['meaning']})",
        "",
        g["composition"],
        "",
        "### Worked examples",
        "",
        *(f"- {e['who']}: (epsilon = {e['epsilon']:.4g}, delta = {e['delta']:.3g}), {e['how']}."
          for e in s["worked_examples"]),
        "",
    ]
    if unit["contribution_bounds"]:
        lines += [
            "### Contribution bounds",
            "",
            "Applied before the card id was dropped, and public:",
            "",
            *(f"- {k}: {'all days of the period' if v is None else v}" for k, v in unit["contribution_bounds"].items()),
            "",
        ]
    lines += [
        "### Per scope",
        "",
        "| scope | epsilon | delta | rho | charges | composition |",
        "|---|---|---|---|---|---|",
        *(f"| {sc['scope']} | {sc['epsilon']:.4g} | {sc['delta']:.3g} | "
          f"{'-' if sc['rho'] is None else format(sc['rho'], '.4g')} | {sc['charges']} | {sc['composition']} |"
          for sc in g["scopes"]),
        "",
        "## Presence probability",
        "",
        "Probability that one unit alone in an otherwise empty bin (with its largest allowed count there) becomes "
        "visible:",
        "",
        *(f"- {m['name']}: **{m['presence_probability']:.3g}**" for m in s["marginals"]),
        "",
        "## Mechanisms",
        "",
    ]
    for name, mech in s["mechanisms"].items():
        lines += [f"### {name}", "", mech["reference"], "", mech["algorithm"], "",
                  f"Noise: {mech['noise']} Randomness: {mech['randomness']}.", ""]
    lines += [
        "## Parameters per marginal",
        "",
        "| marginal | file | tap | noise | epsilon | rho | delta | scale | threshold | min released count | L0 | L1 | L2² | Linf | 95% error bound |",
        "|---" * 15 + "|",
        *(
            f"| {m['name']} | {m['file']} | {m['tap']} | {m['noise']} | {_num(m['epsilon'])} | {_num(m['rho'])} "
            f"| {m['delta']:.6g} | {m['scale']:.4g} | {m['threshold']:.2f} | {m['min_released_count']} "
            f"| {m['sensitivity']['l0']} | {m['sensitivity']['l1']} | {m['sensitivity']['l2_squared']} "
            f"| {m['sensitivity']['linf']} | {m['error_bound_95']} |"
            for m in s["marginals"]
        ),
        "",
        "## Partitions",
        "",
        ", ".join(f"{k['date']} {k['mode']}" for k in s["partitions"]["keys"]) + ".",
        "",
        "## Ledger",
        "",
        f"Ledger {ledger['id']}; draws {', '.join(map(str, ledger['draws']))}.",
        "",
        f"Cap in force per {g['per']}: epsilon = {cap['epsilon']:g}, delta = {cap['delta']:.6g} "
        f"({cap['action']} {cap['set_at']}: {cap['reason']}). {ledger['meaning']}",
        "",
        "Cap history:",
        "",
        *(f"- {c['set_at']} {c['action']}: epsilon = {c['epsilon']:g}, delta = {c['delta']:.6g} ({c['reason']})"
          for c in ledger["cap_history"]),
        "",
    ]
    if ledger["acknowledged_resets"]:
        lines += ["Acknowledged ledger resets:", "",
                  *(f"- {r['acknowledged_at']}: {r['reason']} (ledgers {', '.join(r['ledger_ids'])})"
                    for r in ledger["acknowledged_resets"]), ""]
    if s["also_released_under_other_units"]:
        lines += ["## Also released under other units", "",
                  *(f"- {u}: {', '.join(d)}" for u, d in s["also_released_under_other_units"].items()), ""]
    if "od" in s:
        lines += od_markdown(s["od"])
    lines += [
        "## What is not protected",
        "",
        *(f"- {item}" for item in s["not_protected"]),
        "",
        "## Accuracy",
        "",
        s["accuracy_note"],
        "",
        "| marginal | " + " | ".join(f"n={n}" for n in s["marginals"][0]["release_probability"]) + " |",
        "|---" * (1 + len(s["marginals"][0]["release_probability"])) + "|",
        *(
            f"| {m['name']} | " + " | ".join(map(_probability, m["release_probability"].values())) + " |"
            for m in s["marginals"]
        ),
        "",
        "## Software",
        "",
        *(f"- {package} {v}" for package, v in s["software"].items()),
        "",
    ]
    return "\n".join(lines)


def _data_lines(data: Mapping, dates: int) -> list[str]:
    """Said first: whether the trips are the bundled synthetic sample, and which dates are not released."""
    lines = []
    if data["synthetic_sample"]:
        which = data["synthetic_sample_dates"]
        behind = "this release" if len(which) == dates else "dates " + ", ".join(which)
        lines += [f"**Synthetic data: the trips behind {behind} are the bundled synthetic sample, generated by "
                  "software, not real travel.**", ""]
    if data["pending_dates"]:
        lines += [f"Not in this release (data not ready or not usable): {', '.join(data['pending_dates'])}.", ""]
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _probability(p: float) -> str:
    """Three significant figures, without rounding a probability below 1 up to "1"."""
    if p < 0.999:
        return f"{p:.3g}"
    return f"1 - {1 - p:.2g}" if p < 1 else "1 - <1e-16"
