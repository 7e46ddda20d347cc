"""Which service dates form one ``card_period`` ledger scope: a public calendar rule, never the data.

- ``weekly`` (the pipeline's rule): each calendar week, Monday to Sunday, is one period, and one Dagster partition
  (``defs.shared.partitions.release_periods``). A date belongs to the week it falls in whatever happened on it, so
  the scope of every release is known before any data is read.
- explicit dates (``"2016-07-25..2016-07-31,2016-08-08..2016-08-14"``: ranges and single dates), for the plans'
  own tests and tools: the listed dates are one period, and a date outside it is refused.

The sensitivity of a card_period release depends on how many days a period has (``core.units``): every weekly
period has 7, whichever of its days have data, so every week's release has the same calibration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

WEEKLY = "weekly"
WEEK_DAYS = 7


def parse_dates(text: str) -> tuple[str, ...]:
    """``"2016-07-25..2016-07-31,2016-08-08"`` (ranges and single dates) -> sorted ISO dates."""
    days: set[str] = set()
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        first, _, last = piece.partition("..")
        start, end = date.fromisoformat(first), date.fromisoformat(last or first)
        if end < start:
            raise ValueError(f"period range {piece!r} ends before it starts")
        days.update(date.fromordinal(o).isoformat() for o in range(start.toordinal(), end.toordinal() + 1))
    if not days:
        raise ValueError("a period needs at least one date")
    return tuple(sorted(days))


@dataclass(frozen=True)
class Periods:
    """The period rule: ``dates`` empty means calendar weeks, otherwise the one period of those dates."""

    dates: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Periods:
        """``None`` or ``"weekly"``: calendar weeks; anything else: explicit dates (``parse_dates``)."""
        if text is None or text.strip() == WEEKLY:
            return cls()
        return cls(parse_dates(text))

    @property
    def weekly(self) -> bool:
        return not self.dates

    @property
    def days(self) -> int:
        """Days in every period: what the card_period sensitivity is calibrated to."""
        return WEEK_DAYS if self.weekly else len(self.dates)

    def of(self, day: str) -> tuple[str, ...]:
        """The dates of the period ``day`` belongs to; refuses a date outside an explicit period."""
        if self.weekly:
            monday = date.fromisoformat(day) - timedelta(days=date.fromisoformat(day).weekday())
            return tuple((monday + timedelta(days=i)).isoformat() for i in range(WEEK_DAYS))
        if day not in self.dates:
            raise ValueError(f"{day} is not a date of the card_period period {name(self.dates)}")
        return self.dates

    def name_of(self, day: str) -> str:
        """The ledger scope name of ``day``'s period: ``first..last``."""
        return name(self.of(day))

    def group(self, days: Iterable[str]) -> dict[tuple[str, ...], list[str]]:
        """The periods ``days`` fall in -> those of ``days`` in each, both sorted."""
        out: dict[tuple[str, ...], list[str]] = {}
        for day in sorted(set(days)):
            out.setdefault(self.of(day), []).append(day)
        return out

    def describe(self) -> str:
        return "calendar weeks (Monday to Sunday)" if self.weekly else f"the dates {name(self.dates)}"


def name(dates: tuple[str, ...]) -> str:
    return f"{dates[0]}..{dates[-1]}"


def week_days(monday: str) -> tuple[str, ...]:
    """The seven dates of the calendar week that starts on ``monday`` (refused if it is not a Monday)."""
    if date.fromisoformat(monday).weekday() != 0:
        raise ValueError(f"a release week is named by its Monday, got {monday!r}")
    return Periods().of(monday)


def week_of(day: str) -> str:
    """The Monday of ``day``'s calendar week: the week's partition key."""
    return Periods().of(day)[0]


def missing_week_days(days: Iterable[str]) -> list[str]:
    """The dates of ``days``' calendar weeks that are not among ``days`` (ISO, sorted): what a release of part of a
    week names as left out (``release --without``), since a week is released once all its days are in."""
    chosen = set(days)
    return sorted({d for day in chosen for d in week_days(week_of(day))} - chosen)
