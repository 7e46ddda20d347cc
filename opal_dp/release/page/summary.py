"""What the public page and the statement need from the published tables, as small additive summaries.

A ``PageSummary`` holds, per key, the sum of the published counts and how many counts it adds up (``n``): per
(date, mode, tap) split by unknown time (the public-domain totals), per (mode, tap, time window) and per (mode, tap,
location) over all dates, the measured daily totals of ``totals.csv`` per (date, mode, tap) when it is published
(the daily trend), and the rows of each table. Every figure of the page
is a function of those sums (an average is a sum divided by the days, its noise bound a function of ``n``).

Sums of integers add and subtract exactly, so the summary of a publication is the sum of its dates' summaries,
kept up to date by adding the new dates' and subtracting the replaced ones': the weekly page costs the new
dates, not the history, and never reads a published CSV back. Post-processing of published counts only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from opal_dp.prep.schemas import UNKNOWN_LABEL

KEYS = {"daily": ["date", "mode", "tap", "unknown"], "time": ["mode", "tap", "time"], "loc": ["mode", "tap", "loc"],
        "measured": ["date", "mode", "tap"], "covered": ["file", "part"]}


def _empty(part: str) -> pd.DataFrame:
    return pd.DataFrame({**{k: pd.Series(dtype=bool if k == "unknown" else object) for k in KEYS[part]},
                         "count": pd.Series(dtype="int64"), "n": pd.Series(dtype="int64")})


@dataclass(frozen=True)
class PageSummary:
    """Additive summary of published marginal tables (module docstring)."""

    daily: pd.DataFrame = field(default_factory=lambda: _empty("daily"))
    time: pd.DataFrame = field(default_factory=lambda: _empty("time"))
    loc: pd.DataFrame = field(default_factory=lambda: _empty("loc"))
    measured: pd.DataFrame = field(default_factory=lambda: _empty("measured"))  # totals.csv
    covered: pd.DataFrame = field(default_factory=lambda: _empty("covered"))  # per file: its counts' sum (coverage)
    rows: Mapping[str, int] = field(default_factory=dict)  # published file stem -> rows

    @classmethod
    def of_tables(cls, tables: Mapping[str, pd.DataFrame]) -> PageSummary:
        """The summary of published tables (as built, categorical, or as read from their CSVs): ``time`` and ``loc``,
        and ``totals`` when published."""
        text = {name: tables[name].astype({c: str for c in ("mode", "date", "tap", "time", "loc") if c in tables[name]})
                .astype({"count": "int64"}).assign(n=1) for name in ("time", "loc", "totals") if name in tables}
        time = text["time"].assign(unknown=text["time"]["time"] == UNKNOWN_LABEL)
        sources = {"daily": time, "time": time, "loc": text["loc"], "measured": text.get("totals"),
                   "covered": _covered(tables)}
        parts = {part: _empty(part) if frame is None else _grouped(frame, part) for part, frame in sources.items()}
        return cls(**parts, rows={name: len(frame) for name, frame in tables.items()})

    def combine(self, add: Iterable[PageSummary] = (), subtract: Iterable[PageSummary] = ()) -> PageSummary:
        """This summary plus ``add`` minus ``subtract`` (exact: integer sums)."""
        add, subtract = list(add), list(subtract)
        parts = {}
        for part in KEYS:
            frames = [getattr(self, part), *(getattr(s, part) for s in add)]
            frames += [getattr(s, part).assign(count=lambda f: -f["count"], n=lambda f: -f["n"]) for s in subtract]
            summed = _grouped(pd.concat([f for f in frames if len(f)] or [_empty(part)], ignore_index=True), part)
            parts[part] = summed[summed["n"] != 0].reset_index(drop=True)
        rows = {}
        for name in sorted({k for s in [self, *add, *subtract] for k in s.rows}):
            rows[name] = self.rows.get(name, 0) + sum(s.rows.get(name, 0) for s in add) \
                - sum(s.rows.get(name, 0) for s in subtract)
        return PageSummary(**parts, rows=rows)

    def totals(self) -> list[dict]:
        """Published trips per (date, mode, tap), from ``time.csv`` (the public-domain statement's totals)."""
        per = self.daily.groupby(["date", "mode", "tap"], sort=True)["count"].sum()
        return [{"date": d, "mode": m, "tap": t, "trips": int(n)} for (d, m, t), n in per.items()]

    def to_json(self) -> str:
        return json.dumps({**{part: getattr(self, part).to_dict(orient="split", index=False) for part in KEYS},
                           "rows": dict(sorted(self.rows.items()))}, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PageSummary:
        data = json.loads(text)
        parts = {}
        for part in KEYS:
            if part not in data:  # a summary stored before the part existed: that date published none
                parts[part] = _empty(part)
                continue
            frame = pd.DataFrame(data[part]["data"], columns=data[part]["columns"])
            parts[part] = frame.astype({"count": "int64", "n": "int64", **({"unknown": bool} if part == "daily" else {})})
        return cls(**parts, rows=data["rows"])


def _covered(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per published file and part, the sum of its counts: by tap for the marginal files and ``totals``; for a
    hierarchy's ``od``, its mode rows (``all``) and its individually listed location pairs (``listed``)."""
    rows = []
    for name, frame in tables.items():
        counts = frame["count"].astype("int64") if "count" in frame else None
        if name == "od" and "level" in frame:
            listed = (frame["level"] == "location") & (frame["origin"] != "other")
            rows += [(name, "all", int(counts[frame["level"] == "mode"].sum())), (name, "listed", int(counts[listed].sum()))]
        elif "tap" in frame:
            taps = frame["tap"].astype(str)
            rows += [(name, tap, int(counts[taps == tap].sum())) for tap in ("on", "off")]
    return pd.DataFrame(rows, columns=["file", "part", "count"]).astype({"count": "int64"}).assign(n=1)


def _grouped(frame: pd.DataFrame, part: str) -> pd.DataFrame:
    return frame.groupby(KEYS[part], sort=True, as_index=False)[["count", "n"]].sum()
