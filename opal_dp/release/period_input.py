"""What a week's release reads: its days, each ingested and cut with the settings the release calibrates on, and the
input version of every ledger scope it charges, taken from the days' records (``prep.day_records``).

A week is released once every one of its days has a clean ingest; a day that failed, was never ingested or was cut
with other settings holds its own week (``PeriodNotReady``, raised before anything is charged) and no other. An
operator who must publish a week without one of its days names that day (``without``): the week's charges then
cover the days present, its card_period scope is still the whole week (the sensitivity counts seven days, so the
noise is never below the full week's), and the statement lists the day as left out.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path

from opal_dp.core.input_version import combined
from opal_dp.core.units import PrivacyUnit
from opal_dp.permissions import make_dirs, reserve_private
from opal_dp.prep.day_records import DayCut, read_record, stale_days
from opal_dp.release.periods import name, week_days

ABSENT = "absent"
RECORDS = "periods"
WITHOUT_TAG = "opal_dp/without_days"
"""Run tag naming the days (comma-separated ISO dates) a run may release their weeks without."""


class PeriodNotReady(Exception):
    """A week's release would read a day that cannot be released (its message names the days and what to do;
    ``held``: date -> why)."""

    def __init__(self, message: str, held: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.held = held or {}


@dataclass(frozen=True)
class PeriodInput:
    """One week's input: the days read (``days``), those left out by the operator (``without``), each day's input
    version (its record's: the bytes its private stages were built from) and the settings they were cut with."""

    period: str
    days: tuple[str, ...]
    without: tuple[str, ...]
    versions: dict[str, str]
    settings: str = ""  # the release settings' fingerprint, once released (``PrivacySettings.fingerprint``)

    @property
    def name(self) -> str:
        return name(week_days(self.period))

    def scope_versions(self, unit: PrivacyUnit) -> dict[str, str]:
        """Date -> the input version of the ledger scope it is charged in: for ``card_period`` every day of the week
        together (a left-out day as absent), else its own day's."""
        if unit is PrivacyUnit.CARD_PERIOD:
            whole = combined({**self.versions, **{d: ABSENT for d in self.without}}, week_days(self.period))
            return {day: whole for day in self.days}
        return {day: combined(self.versions, [day]) for day in self.days}

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PeriodInput:
        data = json.loads(text)
        return cls(data["period"], tuple(data["days"]), tuple(data["without"]), dict(data["versions"]),
                   data.get("settings", ""))


def without_days(tag: str | None) -> tuple[str, ...]:
    """The dates of a ``WITHOUT_TAG`` value."""
    return tuple(sorted({d.strip() for d in (tag or "").split(",") if d.strip()}))


def period_input(private_dir: Path, period: str, cut: DayCut, without: Collection[str] = ()) -> PeriodInput:
    """The week ``period`` (its Monday) as its days' records stand, or ``PeriodNotReady`` naming each day that holds
    it and why, with the two ways on: fix the file, or name the day."""
    days = week_days(period)
    left_out = tuple(d for d in days if d in set(without))
    records = {d: read_record(private_dir, d) for d in days if d not in left_out}
    held = stale_days(records, cut)
    if held or not records:
        lines = "\n".join(f"  {day}: {why}" for day, why in held.items()) or "  every day is left out"
        raise PeriodNotReady(
            f"the week {name(days)} is not released (nothing charged), it waits for:\n{lines}\nFix or add the raw "
            f"files and run again, or release the week without a day: python -m opal_dp.cli release --without DATE",
            held)
    return PeriodInput(period, tuple(records), left_out, {d: r.input_version for d, r in records.items()})


def store_period_input(private_dir: Path, found: PeriodInput) -> None:
    """Record what the week's release reads (private): later steps of the same release read exactly these days. An
    unchanged record is left as it is, so its modification time is when the week's input or settings last changed."""
    if released_period_input(private_dir, found.period) == found:
        return
    path = reserve_private(make_dirs(Path(private_dir) / RECORDS) / f"{found.period}.json")
    path.write_text(found.to_json(), encoding="utf-8")


def stored_period_input(private_dir: Path, period: str) -> PeriodInput:
    found = released_period_input(private_dir, period)
    if found is None:
        raise PeriodNotReady(f"the week of {period} has no stored input: materialise its trip_partitions first")
    return found


def released_period_input(private_dir: Path, period: str) -> PeriodInput | None:
    """What the week's last release read, or None if it was never released."""
    path = Path(private_dir) / RECORDS / f"{period}.json"
    return PeriodInput.from_json(path.read_text(encoding="utf-8")) if path.exists() else None
