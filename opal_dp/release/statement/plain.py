"""The guarantee in plain words, shared by PRIVACY.md and the public page: one sentence a member of the public
understands, and whether the data is the bundled synthetic sample."""

from __future__ import annotations

from collections.abc import Mapping


SYNTHETIC_SAMPLE = ("This release is built from the bundled SYNTHETIC SAMPLE, not from real trips: it shows what a "
                    "release looks like and says nothing about real travel.")


def synthetic_sample(statement: Mapping) -> bool:
    """Whether the statement says its data is the bundled synthetic sample (``"data": {"synthetic_sample": true}``)."""
    data = statement.get("data")
    return isinstance(data, Mapping) and data.get("synthetic_sample") is True


def plain_guarantee(statement: Mapping) -> str:
    """The guarantee in one plain sentence: the person-level total when the statement has a ``person`` section
    (its ``sentence``, or its figures), else what one privacy unit gets per scope."""
    person = statement.get("person")
    if isinstance(person, Mapping):
        if isinstance(person.get("sentence"), str) and person["sentence"].strip():
            return person["sentence"].strip()
        if all(isinstance(person.get(k), (int, float)) for k in ("epsilon", "delta")):
            days = person.get("window_days", 365)
            added = person.get("this_release")
            tail = (f"; this release adds at most (epsilon = {added['epsilon']:.4g}, delta = {added['delta']:.3g})"
                    if isinstance(added, Mapping) and all(isinstance(added.get(k), (int, float))
                                                          for k in ("epsilon", "delta")) else "")
            return (f"Over any {days} days, one person's total privacy loss across every file published is at most "
                    f"(epsilon = {person['epsilon']:.4g}, delta = {person['delta']:.3g}){tail}.")
    unit, g = statement["privacy_unit"], statement["guarantee"]
    return (f"Whatever else anyone knows, these files reveal almost nothing about {unit['protects']}: adding, removing "
            f"or changing it multiplies the chance of any published result by at most e^epsilon, except with "
            f"probability delta, where epsilon = {g['epsilon']:.4g} and delta = {g['delta']:.3g} per {g['per']}.")
