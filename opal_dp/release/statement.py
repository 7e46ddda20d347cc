"""The published privacy statement (privacy.json and PRIVACY.md) of a release.

Everything in it follows from the mechanisms' parameters, the public partition keys and the release
id: no figure is computed from the data (the 2016 release's parameters had to be inferred by an
outside assessment; here they are published, together with what they do and do not protect).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date
from importlib.metadata import version
from typing import Protocol

from opal_dp.core import HistogramMechanism, Relation
from opal_dp.network import MODES
from opal_dp.release.marginals import MARGINALS, Marginal

SCHEMA_VERSION = 1
TRUE_COUNTS = (1, 5, 10, 18, 20, 30, 35, 40, 50, 100)
CONFIDENCE = 0.95
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
PACKAGES = ("opal_dp", "dagster", "numpy", "pandas", "pyarrow")

MECHANISM = {
    "name": "stability_based_histogram",
    "reference": (
        "Stability-based histogram (SBH), Algorithm 1 of the Data61 Opal release document (2016), after "
        "Bun, Nissim & Stemmer, ITCS 2016, and Vadhan, The Complexity of Differential Privacy, 2016, §7.1."
    ),
    "algorithm": (
        "Only bins present in the data (true count > 0) are considered; no new bin is ever published. "
        "Each gets a = count + Z with Z discrete Laplace of scale k/epsilon_j, k = bins one trip changes "
        "under the neighbouring relation; the bin is published with count a iff a >= threshold = "
        "1 + (k/epsilon_j)·ln(k/delta_j), i.e. iff a >= min_released_count = ceil(threshold). "
        "A bin absent from the data and a suppressed bin look the same."
    ),
    "noise": (
        "Discrete Laplace, P(Z = z) proportional to exp(-|z|/scale), sampled exactly (difference of two "
        "geometric variables drawn by integer inversion, no floating point)."
    ),
}
RANDOMNESS = {
    False: "operating system CSPRNG (os.urandom); no seed exists",
    True: "SEEDED pseudo-random generator: anyone who knows the seed can remove the noise",
}
RELATIONS = {
    Relation.REPLACE_ONE.value: (
        "Neighbouring datasets differ by one trip replaced with another: at most two bins of each "
        "marginal change, each by 1 (k = 2)."
    ),
    Relation.ADD_REMOVE.value: (
        "Neighbouring datasets differ by one trip added or removed: one bin of each marginal changes, "
        "by 1 (k = 1)."
    ),
}
COMPOSITION = (
    "Trips are split into disjoint partitions by (service date = tap-on date, mode). Within a partition "
    "the six marginals are computed from the same trips: sequential composition gives "
    "(sum epsilon_j, sum delta_j). A trip lies in exactly one partition, so by parallel composition the "
    "whole release protects one trip at that same per-partition (epsilon, delta). Under replace_one a trip "
    "replaced by one of another partition changes one bin per marginal in each of the two partitions, "
    "which costs no more than two bins of one partition (each bin costs epsilon_j/k, delta_j/k)."
)
LEDGER = (
    "A persistent ledger records every noise draw per (date, mode) partition across runs; a draw that "
    "would take a partition's cumulative spend (basic composition) above the cap is refused before any "
    "noise is drawn. Publishing a stored draw again costs nothing. Over all releases of a partition the "
    "spend is therefore at most the cap."
)
NOT_PROTECTED = (
    "The unit is one trip, not one person or card. A card with trips in k different (date, mode) "
    "partitions is protected, for all those trips together, only at (k·epsilon, k·delta).",
    "Several trips of the same card within one partition compose too, by group privacy: m trips are "
    "protected together only at (m·epsilon, m·exp((m-1)·epsilon)·delta), as is any group of m trips.",
    "Presence: a published bin proves its true count was > 0. A single trip alone in an otherwise empty "
    "bin is published with the presence probability given per marginal (at most delta_j/k; this is the event "
    "delta bounds).",
    "Public by design: the (date, mode) partition keys and the location labels (from the public stop list).",
    "Timing and other side channels (run time, resource use) are out of scope.",
)
ACCURACY = (
    "Figures follow from the parameters alone. release_probability[n] = P(n + Z >= min_released_count), "
    "exact closed form. error_bound_95: |Z| <= e with probability >= 95% for each noisy count; a published "
    "count of a bin whose true count is near the threshold is biased upwards by the selection."
)


class AccountableMechanism(HistogramMechanism, Protocol):
    """A histogram mechanism whose accuracy follows from its parameters."""

    def release_probability(self, n: int) -> float: ...

    def error_bound(self, confidence: float = 0.95) -> int: ...


def open_data_partition(key: str) -> tuple[str, str]:
    """Partition key ``"2016-07-25|bus"`` -> published ``("20160725", "bus")``; raises on a bad key."""
    day, sep, mode = str(key).partition("|")
    if not (sep and ISO_DATE.fullmatch(day) and mode in MODES):
        raise ValueError(f"partition key must be '<YYYY-MM-DD>|<mode>' with mode in {MODES}, got {key!r}")
    return date.fromisoformat(day).strftime("%Y%m%d"), mode


def privacy_statement(
    mechanisms: Mapping[str, AccountableMechanism],
    partitions: list[str],
    relation: str,
    cap: tuple[float, float],
    release_id: str,
    created_at: str,
) -> dict:
    """JSON-ready statement of a release; raises if a mechanism is not the SBH under ``relation``."""
    expected = [m.name for m in MARGINALS]
    if sorted(mechanisms) != sorted(expected):
        raise ValueError(f"mechanisms must be exactly the marginals {expected}, got {sorted(mechanisms)}")
    relation = Relation(relation).value
    params = {name: mechanisms[name].describe() for name in expected}
    for name, p in params.items():
        if (p["mechanism"], p["noise"], p["relation"]) != (MECHANISM["name"], "discrete_laplace", relation):
            raise ValueError(f"{name}: statement covers SBH with discrete Laplace under {relation}, got {p}")
    seeded = any(p["seeded"] for p in params.values())
    return {
        "schema_version": SCHEMA_VERSION,
        "release": {"id": release_id, "created_at": created_at},
        "noise_seeded": seeded,
        "mechanism": {**MECHANISM, "randomness": RANDOMNESS[seeded]},
        "privacy_unit": {"unit": "one trip", "relation": relation, "meaning": RELATIONS[relation]},
        "partitions": {
            "by": ["date", "mode"],
            "keys": [dict(zip(("date", "mode"), open_data_partition(k))) for k in sorted(partitions)],
            "composition": COMPOSITION,
        },
        "per_partition": {
            "epsilon": math.fsum(p["epsilon"] for p in params.values()),
            "delta": math.fsum(p["delta"] for p in params.values()),
        },
        "ledger_cap": {"epsilon": cap[0], "delta": cap[1], "meaning": LEDGER},
        "marginals": [_marginal(m, params[m.name], mechanisms[m.name]) for m in MARGINALS],
        "accuracy_note": ACCURACY,
        "not_protected": list(NOT_PROTECTED),
        "software": {package: version(package) for package in PACKAGES},
    }


def _marginal(marginal: Marginal, params: dict, mechanism: AccountableMechanism) -> dict:
    return {
        "name": marginal.name,
        "file": f"{marginal.table}.csv",
        "tap": marginal.tap,
        "epsilon": params["epsilon"],
        "delta": params["delta"],
        "scale": params["scale"],
        "threshold": params["threshold"],
        "min_released_count": params["min_released_count"],
        "presence_probability": mechanism.release_probability(1),
        "release_probability": {str(n): mechanism.release_probability(n) for n in TRUE_COUNTS},
        "error_bound_95": mechanism.error_bound(CONFIDENCE),
    }


def render_markdown(statement: Mapping) -> str:
    """PRIVACY.md: the same statement for people, with a loud warning if the noise was seeded."""
    s = statement
    per, cap = s["per_partition"], s["ledger_cap"]
    lines = [f"# Privacy statement: release {s['release']['id']}", ""]
    if s["noise_seeded"]:
        lines += [
            "> **WARNING: THE NOISE OF THIS RELEASE WAS SEEDED. IT IS NOT DIFFERENTIALLY PRIVATE:",
            "> ANYONE WHO KNOWS THE SEED CAN REMOVE THE NOISE. FOR TESTS ONLY - NEVER PUBLISH IT.**",
            "",
        ]
    lines += [
        f"Created {s['release']['created_at']}. Each (date, mode) partition is "
        f"**({per['epsilon']:g}, {per['delta']:.3g})-differentially private for one trip** "
        f"({s['privacy_unit']['relation']}).",
        "",
        "## Presence probability",
        "",
        "Probability that a single trip alone in an otherwise empty bin becomes visible:",
        "",
        *(f"- {m['name']}: **{m['presence_probability']:.3g}**" for m in s["marginals"]),
        "",
        "## Mechanism",
        "",
        s["mechanism"]["reference"],
        "",
        s["mechanism"]["algorithm"],
        "",
        f"Noise: {s['mechanism']['noise']} Randomness: {s['mechanism']['randomness']}.",
        "",
        "## Privacy unit",
        "",
        f"One trip. Relation `{s['privacy_unit']['relation']}`: {s['privacy_unit']['meaning']}",
        "",
        "## Parameters per marginal",
        "",
        "| marginal | file | tap | epsilon | delta | scale | threshold | min released count | 95% error bound |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {m['name']} | {m['file']} | {m['tap']} | {m['epsilon']:g} | {m['delta']:.6g} | {m['scale']:g} "
            f"| {m['threshold']:.2f} | {m['min_released_count']} | {m['error_bound_95']} |"
            for m in s["marginals"]
        ),
        "",
        "## Partitions and composition",
        "",
        s["partitions"]["composition"],
        "",
        f"Per partition: epsilon = {per['epsilon']:g}, delta = {per['delta']:.6g}. Partitions: "
        + ", ".join(f"{k['date']} {k['mode']}" for k in s["partitions"]["keys"])
        + ".",
        "",
        f"Ledger cap per partition: epsilon = {cap['epsilon']:g}, delta = {cap['delta']:.6g}. {cap['meaning']}",
        "",
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


def _probability(p: float) -> str:
    """Three significant figures, without rounding a probability below 1 up to "1"."""
    if p < 0.999:
        return f"{p:.3g}"
    return f"1 - {1 - p:.2g}" if p < 1 else "1 - <1e-16"
