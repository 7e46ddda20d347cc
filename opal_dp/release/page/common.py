"""What the parts of the public page share: mode names and colours, escaping, dates, place names, the average
per day of published counts with the 95% bound on its noise, and tables that stack on a phone.

A bound is that of a sum of as many independent draws of the noise ``privacy.json`` states (kind and scale of the
marginal the counts come from) as the average adds up, divided by the days: the noise is public, so the bound
is a function of published parameters only.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from functools import lru_cache

import pandas as pd

from opal_dp.core.accuracy import SumErrorBounds
from opal_dp.prep.schemas import UNKNOWN_LABEL
from opal_dp.release.statement.build import CONFIDENCE, TAILS, stated_design

MODE_NAMES = {"bus": "Bus", "ferry": "Ferry", "light_rail": "Light rail", "train": "Train"}
COLOURS = {"bus": "#b03a2e", "ferry": "#117a65", "light_rail": "#7d3c98", "train": "#9c640c"}
TAP_NAMES = {"on": "tap-on", "off": "tap-off"}


def e(value: object) -> str:
    """``value`` as HTML text or attribute value."""
    return html.escape(str(value), quote=True)


def day(text: str) -> date:
    """A published ``YYYYMMDD`` date."""
    return date(int(text[:4]), int(text[4:6]), int(text[6:]))


def iso(text: str) -> str:
    return day(text).isoformat()


def is_weekend(d: date) -> bool:
    return d.weekday() >= 5


def place(mode: str, label: str) -> str:
    """A published location label for people: bus labels are postcodes, others stop names."""
    if label == UNKNOWN_LABEL:
        return "unknown"
    return f"postcode {label}" if mode == "bus" else label


def marginal_of(statement: Mapping, file: str, tap: str) -> Mapping:
    """The statement's marginal published in ``file`` for ``tap``."""
    return next(m for m in statement["marginals"] if m["file"] == file and m["tap"] == tap)


def rows_of(table: pd.DataFrame, mode: str, tap: str) -> pd.DataFrame:
    return table[(table["mode"] == mode) & (table["tap"] == tap)]


@lru_cache(maxsize=8)
def sum_error_bounds(noise: str, scale: float) -> SumErrorBounds:
    """The 95% bounds of sums of draws of a marginal's noise, kept for the process: each render asks for sums of up
    to as many counts as there are published dates, and every step of the sum is computed once."""
    return SumErrorBounds(TAILS[noise].pmf(scale)[1], CONFIDENCE)


def per_day(rows: pd.DataFrame, key: str | list[str], days: int, marginal: Mapping, whole: bool = False
            ) -> pd.DataFrame:
    """Average per day of the counts of ``rows`` by ``key``, with the 95% noise bound of that average; ``rows`` are
    published counts (one count each) or sums of ``n`` published counts (``page.summary``).

    ``whole``: the table suppresses small noisy counts (``suppresses``) and a key has one count a day. A day a key's
    count was not published counts as 0, but its noisy count was anything up to ``min_released_count - 1``, so the
    average can understate the average of the key's noisy counts by up to (days not published) x (threshold - 1) /
    days: a key gets no average (NaN) where that exceeds its noise bound (a place under the threshold on most days
    would show a tenth of its trips), and keeps it where it does not (a year with a day or two missing)."""
    counted = rows if "n" in rows else rows.assign(n=1)
    grouped = counted.groupby(key, sort=False)[["count", "n"]].sum().rename(columns={"count": "sum", "n": "size"})
    bounds = sum_error_bounds(marginal["noise"], marginal["scale"])
    bound = {n: bounds(n) for n in sorted(set(grouped["size"]))}
    average, error = grouped["sum"] / days, grouped["size"].map(bound) / days
    if whole:
        understated = (days - grouped["size"]).clip(lower=0) * (marginal["min_released_count"] - 1) / days
        average = average.where(understated <= error)
    return pd.DataFrame({"average": average, "error": error})


def suppresses(statement: Mapping) -> bool:
    """Whether the release's design leaves out the counts whose noisy value is under a threshold (SBH), so that a
    count missing from ``time.csv`` or ``loc.csv`` is unknown, not 0; the consistent designs list every count of
    those tables that rounds to 1 or more (``stated_design``)."""
    return not stated_design(statement).consistent


def nice_axis(top: float, intervals: int = 5) -> tuple[float, float]:
    """A round tick step (1, 2 or 5 times a power of ten) giving at most ``intervals`` intervals, and the axis top."""
    raw = top / intervals
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return step, step * math.ceil(top / step)


def stacked_table(columns: Sequence[str], rows: Iterable[Sequence[object]], numeric: int = 0) -> str:
    """A table of HTML ``rows`` under ``columns`` (plain text) whose last ``numeric`` columns are numbers. On a phone
    (``table.stack`` in the page's style) each row stacks into a block: its first cell, then a line per other cell
    labelled with its column (``data-label``), so no column is cut off however many there are."""
    kinds = [""] * (len(columns) - numeric) + [' class="num"'] * numeric
    labels = [""] + [f' data-label="{e(c)}"' for c in columns[1:]]
    head = "".join(f"<th{kind}>{e(c)}</th>" for c, kind in zip(columns, kinds))
    body = "".join("<tr>" + "".join(f"<td{kind}{label}>{cell}</td>" for cell, kind, label in zip(row, kinds, labels))
                   + "</tr>\n" for row in rows)
    return f'<table class="stack">\n<tr>{head}</tr>\n{body}</table>\n'
