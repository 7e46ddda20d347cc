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
    """The guarantee in plain words, first: the person-level sentence of the ``person`` section (built from the
    ledger, ``release.statement.person``); for a release without a person-level bound (trip unit) followed by
    what one trip gets; a statement without that section (older releases) says what one privacy unit gets."""
    unit, g = statement["privacy_unit"], statement["guarantee"]
    per_unit = (f"Whatever else anyone knows, these files reveal almost nothing about {unit['protects']}: adding, "
                f"removing or changing it multiplies the chance of any published result by at most e^epsilon, plus "
                f"delta, where epsilon = {g['epsilon']:.4g} and delta = {g['delta']:.3g} per "
                f"{g['per']}.")
    person = statement.get("person")
    if isinstance(person, Mapping) and isinstance(person.get("sentence"), str) and person["sentence"].strip():
        sentence = person["sentence"].strip()
        return sentence if person.get("bounded", True) else f"{sentence} {per_unit}"
    return per_unit
