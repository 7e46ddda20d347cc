"""Lists the statement states as runs, so that its size grows with the gaps in what is published, not its length.

A year of weekly releases publishes about 9,000 ledger draws and 1,456 (date, mode) partitions; listed one by
one they made ``privacy.json`` grow by almost a kilobyte a date, rewritten every week. Draw ids and dates come in
long runs (a week's draws are consecutive, and so are the dates of a mode), so each list is stated exactly as
its runs: ``[[first, last], ...]``, inclusive. Nothing is summarised away: expanding the runs gives the list
back, and each date's own draws and modes are also in its ``dates/<YYYYMMDD>/manifest.json``. In ``PRIVACY.md``
the scopes with identical figures (a year of equal weekly scopes) share one table row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, timedelta

from opal_dp.network import MODES

COMPACT = "%Y%m%d"


def int_runs(numbers: Iterable[int]) -> list[list[int]]:
    """Distinct integers as sorted inclusive runs of consecutive ones: ``[1, 2, 3, 7] -> [[1, 3], [7, 7]]``."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs


def ints_of(runs: Sequence[Sequence[int]]) -> list[int]:
    """The integers ``int_runs`` stated, in order."""
    return [n for first, last in runs for n in range(int(first), int(last) + 1)]


def date_runs(dates: Iterable[str]) -> list[list[str]]:
    """Distinct ``YYYYMMDD`` dates as sorted inclusive runs of consecutive days."""
    ordinals = int_runs(date(int(d[:4]), int(d[4:6]), int(d[6:])).toordinal() for d in dates)
    return [[date.fromordinal(a).strftime(COMPACT), date.fromordinal(b).strftime(COMPACT)] for a, b in ordinals]


def dates_of(runs: Sequence[Sequence[str]]) -> list[str]:
    """The ``YYYYMMDD`` dates ``date_runs`` stated, in order."""
    out = []
    for first, last in runs:
        day, end = date(int(first[:4]), int(first[4:6]), int(first[6:])), date(int(last[:4]), int(last[4:6]), int(last[6:]))
        while day <= end:
            out.append(day.strftime(COMPACT))
            day += timedelta(days=1)
    return out


def draws_section(ids: Iterable[int]) -> dict:
    """Ledger draw ids as the statement states them: how many, and their runs."""
    runs = int_runs(ids)
    return {"count": sum(b - a + 1 for a, b in runs), "runs": runs}


def draws_of(section: Mapping | Sequence[int]) -> list[int]:
    """The draw ids of a ``draws_section`` (or of a plain list: the statements of schema 3 and older)."""
    return ints_of(section["runs"]) if isinstance(section, Mapping) else sorted(int(i) for i in section)


def grouped_scopes(scopes: Iterable[Mapping], figures: Callable[[Mapping], tuple[str, ...]]) -> list[str]:
    """Markdown table rows, scopes whose ``figures`` are identical on one row (each scope is in privacy.json)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for sc in scopes:
        groups.setdefault(figures(sc), []).append(sc["scope"].replace("|", "\\|"))
    return [f"| {names[0] if len(names) == 1 else f'{len(names)} scopes, {names[0]} ... {names[-1]}'} | "
            + " | ".join(shown) + " |" for shown, names in groups.items()]


def partitions_section(keys: Iterable[tuple[str, str]]) -> dict:
    """Published (``YYYYMMDD``, mode) partitions as the statement states them: per mode, its dates' runs."""
    by_mode: dict[str, set[str]] = {}
    for day, mode in keys:
        by_mode.setdefault(mode, set()).add(day)
    dates = set().union(*by_mode.values()) if by_mode else set()
    return {"by": ["date", "mode"], "count": sum(map(len, by_mode.values())), "dates": len(dates),
            "date_runs_by_mode": {m: date_runs(by_mode[m]) for m in MODES if m in by_mode},
            "per_date": "dates/<YYYYMMDD>/manifest.json lists each date's modes, files and ledger draws"}


def partition_keys(statement: Mapping) -> list[dict]:
    """Every published partition of a statement as ``{"date": YYYYMMDD, "mode": ...}``, by date then mode."""
    runs = statement["partitions"]["date_runs_by_mode"]
    return [{"date": d, "mode": m} for d, m in sorted((d, m) for m, r in runs.items() for d in dates_of(r))]
