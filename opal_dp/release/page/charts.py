"""The charts of the public page, as inline SVG with no script: a value shows on hover through a ``<title>``
element, and each chart has a title for screen readers and axis titles.

- Daily trend (``totals.csv``, when published): the measured trips of each date and mode over the latest
  ``TREND_DAYS`` days, tap-on and tap-off, weekends shaded and marked with squares; a table of the same figures for
  readers who cannot hover; and a table of every week since the first published date, as trips per published day
  of the week (a week with a date withheld compares with full weeks). The page grows by a table row a week, not by
  a chart point a day: after years of weekly releases it is as quick to write and to read. Without ``totals.csv``
  (the trip-level release) the trend sums ``time.csv``'s published counts and says that they are lower bounds.
- Time of day (``time.csv``): average tap-ons and tap-offs per day in each 15-minute window, with error bars (by
  hour under the hierarchy design, with the fit's error: ``time_of_day_section``).

Tap-off totals count trips with a recorded tap-off, so tap-on minus tap-off shows how many trips had none. Each
figure is a sum of published counts; its ± is the 95% bound on the noise of that sum (``page.common.per_day``).
The totals of ``totals.csv`` carry no suppression's bias (each measured on its own, never suppressed), only that of
their per-card-day bound, which the trend's text states; sums of ``time.csv``'s counts leave out the suppressed ones,
which no ± covers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

import numpy as np
import pandas as pd

from opal_dp.prep.binning import window_label
from opal_dp.prep.schemas import WINDOWS_PER_DAY
from opal_dp.release.marginals.time_loc_hierarchy import HOURS, WINDOWS_PER_HOUR
from opal_dp.release.statement.build import CONFIDENCE
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.page.common import (
    COLOURS,
    MODE_NAMES,
    TAP_NAMES,
    day,
    e,
    is_weekend,
    marginal_of,
    nice_axis,
    per_day,
    rows_of,
    suppresses,
)

WINDOW_INDEX = {window_label(w): w for w in range(WINDOWS_PER_DAY)}
FRAME = {"width": 560, "height": 250, "left": 80, "right": 24, "top": 12, "bottom": 52}
WEEKEND_FILL = "#e8e8e8"
TREND_DAYS = 56  # eight weeks of daily points
# Of a 13 px axis label, for keeping labels inside their chart: generous, as DejaVu Sans (a common default font)
# takes up to 8 px a character of a date label.
LABEL_CHAR_WIDTH = 8.5


def totals_noise(statement: Mapping) -> Mapping | None:
    """The noise of ``totals.csv``'s counts as ``per_day`` reads a marginal's, or None without ``totals.csv``."""
    totals = statement.get("od", {}).get("hierarchy", {}).get("totals")
    return None if totals is None else {"noise": "discrete_gaussian", "scale": totals["sigma"]}


def daily_totals(summary: PageSummary, mode: str, statement: Mapping, key: str = "date",
                 dates: Callable[[pd.Series], pd.Series] | None = None) -> pd.DataFrame:
    """Per published date (or ``key``, a column ``dates`` makes of the date column) of ``mode``: trips by tap and the
    95% bound of each: ``totals.csv``'s when published (``totals_noise``), else sums of ``time.csv``'s counts
    (tap-offs without ``-1``)."""
    noise = totals_noise(statement)
    columns = {}
    for tap in ("on", "off"):
        if noise is not None:
            rows = rows_of(summary.measured, mode, tap)
        else:
            rows = rows_of(summary.daily, mode, tap)
            rows = rows[~rows["unknown"]]
        if dates is not None:
            rows = rows.assign(**{key: dates(rows["date"].astype(str))})
        totals = per_day(rows, key, 1, noise or marginal_of(statement, "time.csv", tap))
        columns |= {tap: totals["average"], f"{tap}_error": totals["error"]}
    return pd.DataFrame(columns).sort_index()


def _recent(summary: PageSummary, start: str) -> PageSummary:
    return PageSummary(daily=summary.daily[summary.daily["date"].astype(str) >= start],
                       measured=summary.measured[summary.measured["date"].astype(str) >= start])


def trend_section(summary: PageSummary, days: Mapping[str, list[str]], modes: list[str], statement: Mapping) -> str:
    """The daily trend of each mode over the dates it was published on: its marginals' dates and, when measured, its
    totals' (``totals.csv`` has every mode of a week's OD release, also a (week, mode) whose marginals were not
    released)."""
    measured = totals_noise(statement) is not None
    counted = ({m: sorted(set(rows_of(summary.measured, m, "on")["date"].astype(str))) for m in modes} if measured
               else days)  # the dates the figures add up: totals.csv's, else the mode's published dates
    days = {m: sorted(set(days[m]) | set(counted[m])) for m in modes}
    dates = sorted({d for m in modes for d in days[m]})
    first, last = day(dates[0]), day(dates[-1])
    start = max(first, last - timedelta(TREND_DAYS - 1))
    calendar = [start + timedelta(n) for n in range((last - start).days + 1)]
    recent = _recent(summary, f"{start:%Y%m%d}")
    blocks = []
    for mode in modes:
        totals = daily_totals(recent, mode, statement)
        if totals.empty:
            blocks.append(f"<h3>{MODE_NAMES[mode]}</h3>\n<p class=\"note\">No time count of this mode was published "
                          "in these weeks.</p>\n")
            continue
        weekly = daily_totals(summary, mode, statement, "week", lambda d: d.map(week_of_date))
        blocks.append(f"<h3>{MODE_NAMES[mode]}</h3>\n{_trend_chart(mode, totals, calendar)}{_trend_table(mode, totals)}"
                      f"{_weekly_table(mode, weekly, counted[mode])}")
    since = "" if start == first else f", the latest {TREND_DAYS // 7} weeks"
    source = (_measured_source(statement["od"]["hierarchy"]["totals"]) if measured else
              "time.csv, summing the counts that were published (suppressed counts count as 0: the figures are lower "
              "bounds, most of all for the small modes)")
    return (
        f'<section id="trend" aria-labelledby="trend-title">\n<h2 id="trend-title">Trips per day{since}</h2>\n<p>The '
        f"trips of each service date from {start:%d %B %Y} to {last:%d %B %Y}, from {source}: tap-ons (solid line) and "
        "recorded tap-offs (dashed line; trips without a tap-off are left out). Weekends are shaded and marked with "
        f"squares. Under each chart, every week since {first:%d %B %Y} as trips per published day of the week.</p>\n"
        f"{_trend_legend()}{''.join(blocks)}"
        f'<p class="note">Hover over a point, or open the tables, for its value and its {CONFIDENCE:.0%} noise bound '
        "(the bound of the sum of the noise of the counts it adds up). A date without a point has no published "
        "figure.</p>\n</section>\n"
    )


def _measured_source(totals: Mapping) -> str:
    """Where the measured trend comes from and what its counts leave out: the trips past the per-card-day bound,
    a bias no ± covers (``core.totals``)."""
    return (f"totals.csv, where each is measured on its own and never suppressed; a card counts with its first "
            f"{totals['max_items']} trips of a day, at most {totals['max_per_mode']} of them in one mode, so a card's "
            "further trips that day are not counted and the figures run low by those few trips, which the ± does not "
            "cover")


def week_of_date(text: str) -> str:
    """The Monday (``YYYYMMDD``) of a published date's week."""
    return f"{day(text) - timedelta(day(text).weekday()):%Y%m%d}"


def _trend_legend() -> str:
    line = '<svg class="key" width="34" height="12" aria-hidden="true"><line x1="1" x2="33" y1="6" y2="6" ' \
           'stroke="#333" stroke-width="2"{}/></svg>'
    solid, dashed = line.format(""), line.format(' stroke-dasharray="6 4"')
    return (
        f'<p class="legend">{solid} tap-on {dashed} tap-off '
        '<svg class="key" width="12" height="12" aria-hidden="true"><circle cx="6" cy="6" r="4.5" fill="#333"/></svg>'
        ' weekday <svg class="key" width="14" height="12" aria-hidden="true"><rect x="1" y="0" width="12" height="12" '
        f'fill="{WEEKEND_FILL}"/><rect x="3" y="2" width="8" height="8" fill="#333"/></svg> weekend</p>\n'
    )


def _trend_chart(mode: str, totals: pd.DataFrame, calendar: list) -> str:
    f = FRAME
    width, height = f["width"] - f["left"] - f["right"], f["height"] - f["top"] - f["bottom"]
    step, top = nice_axis(max(float(np.nanmax(totals[["on", "off"]].to_numpy())), 4.0))
    slot = width / len(calendar)
    half = min(4.0, max(slot / 3, 1.5))  # a marker's half width: smaller when many dates share the axis
    index = {d.strftime("%Y%m%d"): i for i, d in enumerate(calendar)}

    def x(i: int) -> float:
        return f["left"] + (i + 0.5) * slot

    def y(value: float) -> float:
        return f["top"] + height * (1 - value / top)

    out = [f'<svg class="chart trend-chart" id="trend-{mode}" viewBox="0 0 {f["width"]} {f["height"]}" role="img" '
           f'aria-label="{MODE_NAMES[mode]}: trips per day, tap-on and tap-off, {calendar[0]:%d %b %Y} to '
           f'{calendar[-1]:%d %b %Y}">']
    out += [f'<rect x="{x(i) - slot / 2:.1f}" y="{f["top"]}" width="{slot:.1f}" height="{height}" fill="{WEEKEND_FILL}"/>'
            for i, d in enumerate(calendar) if is_weekend(d)]
    out.append(_y_grid(step, top, y, f["left"], f["left"] + width))
    every = max(1, -(-len(calendar) // 6))
    out.append(_x_labels([(x(i), f"{d:%a} {d.day} {d:%b}") for i, d in enumerate(calendar) if i % every == 0], f))
    out.append(_axis_titles("Service date", "Trips per day", f))
    for tap, dash in (("on", ""), ("off", ' stroke-dasharray="6 4"')):
        points = [(index[d], v, err) for d, v, err in zip(totals.index, totals[tap], totals[f"{tap}_error"])
                  if not np.isnan(v)]
        path = "".join(f"{'L' if k and i == points[k - 1][0] + 1 else 'M'}{x(i):.1f} {y(v):.1f}"
                       for k, (i, v, _) in enumerate(points))
        out.append(f'<path d="{path}" fill="none" stroke="{COLOURS[mode]}" stroke-width="2"{dash}/>')
        for i, v, err in points:
            d = calendar[i]
            label = (f"{d:%a %d %b %Y} ({'weekend' if is_weekend(d) else 'weekday'}), {TAP_NAMES[tap]}s: "
                     f"{v:,.0f} ± {err:,.0f}")
            fill = COLOURS[mode] if tap == "on" else "#fff"
            shape = (f'<rect x="{x(i) - half:.1f}" y="{y(v) - half:.1f}" width="{2 * half:.1f}" height="{2 * half:.1f}"'
                     if is_weekend(d) else f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{half + 0.5:.1f}"')
            out.append(f'{shape} fill="{fill}" stroke="{COLOURS[mode]}" stroke-width="2"><title>{e(label)}</title>'
                       f'{"</rect>" if is_weekend(d) else "</circle>"}')
    out.append(f'<line x1="{f["left"]}" x2="{f["left"] + width}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#444"/>')
    return "".join(out) + "</svg>\n"


def _trend_table(mode: str, totals: pd.DataFrame) -> str:
    rows = "".join(
        f'<tr><td>{day(d):%a %Y-%m-%d}</td><td class="num">{_figure(r.on, r.on_error)}</td>'
        f'<td class="num">{_figure(r.off, r.off_error)}</td></tr>\n'
        for d, r in zip(totals.index, totals.itertuples())
    )
    return (f"<details><summary>{MODE_NAMES[mode]}: the figures as a table</summary>\n<table>\n<tr><th>date</th>"
            f'<th class="num">tap-ons</th><th class="num">tap-offs</th></tr>\n{rows}</table>\n</details>\n')


def _weekly_table(mode: str, totals: pd.DataFrame, dates: list[str]) -> str:
    """Each week (Monday to Sunday) since the first published date: the dates published in it and its trips per
    published day (the week's sum and its bound divided by its dates), so a week with a date withheld compares with
    full weeks. ``dates``: the dates the figures add up (``trend_section``: those of ``totals.csv`` when measured)."""
    published = pd.Series([week_of_date(d) for d in dates]).value_counts()
    rows = "".join(
        f'<tr><td>{day(w):%Y-%m-%d}</td><td class="num">{published.get(w, 0)}</td>'
        f'<td class="num">{_figure(r.on / published[w], r.on_error / published[w])}</td>'
        f'<td class="num">{_figure(r.off / published[w], r.off_error / published[w])}</td></tr>\n'
        for w, r in zip(totals.index, totals.itertuples())
    )
    return (f"<details><summary>{MODE_NAMES[mode]}: trips per day of each week since the first published date"
            f"</summary>\n<table>\n"
            f'<tr><th>week from Monday</th><th class="num">dates published</th><th class="num">tap-ons a day</th>'
            f'<th class="num">tap-offs a day</th></tr>\n{rows}</table>\n</details>\n')


def _figure(value: float, error: float) -> str:
    return "-" if np.isnan(value) else f"{value:,.0f} ± {error:,.0f}"


def time_of_day_section(time: pd.DataFrame, days: Mapping[str, list[str]], modes: list[str],
                        statement: Mapping) -> str:
    """Average trips per day by 15-minute window, or by hour under the hierarchy design: there a window is a sum of
    fitted cells whose error has no closed form, while an hour is the fitted station-hours' sum (``fit_error_sd``)."""
    on = marginal_of(statement, "time.csv", "on")
    fitted = "fit_error_sd" in on
    time = time[time["time"].isin(WINDOW_INDEX)]  # a tap-off of unknown time (-1) has no place on the day's axis
    whole = suppresses(statement)
    charts = []
    for mode in modes:
        n = len(days[mode])
        averages = {tap: _hourly(rows_of(time, mode, tap), n, marginal_of(statement, "time.csv", tap), mode) if fitted
                    else _windows(rows_of(time, mode, tap), n, marginal_of(statement, "time.csv", tap), whole)
                    for tap in ("on", "off")}
        if not len(rows_of(time, mode, "on")) + len(rows_of(time, mode, "off")):
            body = '<p class="note">No time-of-day count of this mode was published.</p>\n'
        elif whole and not any((a["average"] > 0).any() for a in averages.values()):  # each held back (per_day)
            body = f'<p class="note">No 15-minute window of this mode was published on enough of its {n} days.</p>\n'
        else:
            body = _time_chart(mode, averages, HOURS if fitted else WINDOWS_PER_DAY)
        charts.append(f"<h3>{MODE_NAMES[mode]}</h3>\n{body}")
    if fitted:
        lead = ("Average trips per day in each hour, from time.csv (the four 15-minute windows of the hour summed, "
                "which equals the hour's district_hour rows in time-loc-levels.csv)")
        sds = "; ".join(f"{MODE_NAMES[m].lower()} {on['fit_error_sd'][m]['hour']:,.1f}" for m in modes
                        if m in on["fit_error_sd"])
        source = (f"Each hour of a day is the sum of the hierarchy's fitted station-hour counts; its error is that of "
                  f"the fit of the noisy levels, with standard deviation (tap-on) {sds} (privacy.json, fit_error_sd: "
                  "exact for the fit before rounding, approximate where estimates near 0 were raised to 0). For an "
                  "average over days the bound is that of the sum of the days' errors, divided by the days.")
    else:
        lead = "Average trips per day in each 15-minute window, from time.csv"
        source = (f"Each published count in time.csv got {e(on['noise']).replace('_', ' ')} noise of scale "
                  f"{on['scale']:.4g} (privacy.json); for one count the bound is ±{on['error_bound_95']}, and for an "
                  "average over days it is the bound of the sum of the counts' noise, divided by the days. "
                  + (f"A count that was not published counts as 0, though its noisy value may have been up to "
                     f"{on['min_released_count'] - 1} (the threshold, less 1): a window has a bar only where its days "
                     "without a published count can lower its average by no more than its bar. time.csv has every "
                     "published count." if whole else "Counts that were not published (estimates under 1) "
                     "count as 0."))
    return (
        '<section id="time-of-day" aria-labelledby="time-of-day-title">\n<h2 id="time-of-day-title">Trips by time of '
        f"day</h2>\n<p>{lead}: tap-ons (dark bars) and tap-offs (light bars), each with its error bar.</p>\n"
        f"{''.join(charts)}"
        f'<p class="note">Error bars: with {CONFIDENCE:.0%} probability the noise in the average lies within the '
        f"bar. {source}</p>\n</section>\n"
    )


def _windows(rows: pd.DataFrame, days: int, marginal: Mapping, whole: bool) -> pd.DataFrame:
    """Per 15-minute window, each published count with its own noise; ``whole``: only windows published on enough
    days (``per_day``)."""
    return per_day(rows.assign(window=rows["time"].map(WINDOW_INDEX)), "window", days, marginal, whole).reindex(
        range(WINDOWS_PER_DAY), fill_value=0.0)


def _hourly(rows: pd.DataFrame, days: int, marginal: Mapping, mode: str) -> pd.DataFrame:
    """Per hour, one fitted figure a day with the fit's error (``fit_error_sd``) over the mode's published days."""
    hours = rows.assign(hour=rows["time"].map(WINDOW_INDEX) // WINDOWS_PER_HOUR).dropna(subset=["hour"])
    sums = hours.groupby("hour")["count"].sum().rename("count").reset_index().assign(n=days)
    scale = marginal["fit_error_sd"][mode]["hour"]
    return per_day(sums, "hour", days, {**marginal, "scale": scale}).reindex(range(HOURS), fill_value=0.0)


def _time_chart(mode: str, averages: Mapping[str, pd.DataFrame], slots: int = WINDOWS_PER_DAY) -> str:
    """Bars per 15-minute window (``slots`` 96) or per hour (24)."""
    f = FRAME
    width, height = f["width"] - f["left"] - f["right"], f["height"] - f["top"] - f["bottom"]
    peak = max(float((a["average"] + a["error"]).fillna(0.0).max()) for a in averages.values())  # NaN: no bar
    step, top = nice_axis(max(peak, 4.0))
    slot = width / slots
    bar = slot / 2
    per_hour = slots // HOURS
    what = "15-minute window" if per_hour > 1 else "hour"

    def y(value: float) -> float:
        return f["top"] + height * (1 - value / top)

    def label(w: int) -> str:
        return window_label(w) if per_hour > 1 else f"{w}:00-{w + 1}:00"

    out = [f'<svg class="chart time-chart" id="time-{mode}" viewBox="0 0 {f["width"]} {f["height"]}" role="img" '
           f'aria-label="{MODE_NAMES[mode]}: average tap-ons and tap-offs per day by {what}">',
           _y_grid(step, top, y, f["left"], f["left"] + width)]
    out.append(_x_labels([(f["left"] + w * slot, f"{w // per_hour}:00") for w in range(0, slots + 1, 4 * per_hour)],
                         f))
    out.append(_axis_titles(f"Time of day (start of the {what})", "Trips per day (average)", f))
    whiskers = []
    for offset, (tap, opacity) in enumerate((("on", "1"), ("off", "0.45"))):
        average, error = averages[tap]["average"].to_numpy(), averages[tap]["error"].to_numpy()
        for w in np.flatnonzero(average > 0):
            x, a, err = f["left"] + w * slot + offset * bar, average[w], error[w]
            out.append(f'<rect x="{x:.2f}" y="{y(a):.1f}" width="{bar:.2f}" height="{y(0) - y(a):.1f}" '
                       f'fill="{COLOURS[mode]}" fill-opacity="{opacity}"><title>{label(w)}, {TAP_NAMES[tap]}s: '
                       f"{a:,.1f} ± {err:,.1f} per day</title></rect>")
            mid, low, high = x + bar / 2, y(max(a - err, 0.0)), y(a + err)
            whiskers.append(f"M{mid:.1f} {low:.1f}V{high:.1f}")
    out.append(f'<path class="error-bars" d="{"".join(whiskers)}" stroke="#222" stroke-width="0.8" fill="none"/>')
    out.append(f'<line x1="{f["left"]}" x2="{f["left"] + width}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#444"/>')
    return "".join(out) + "</svg>\n"


def _y_grid(step: float, top: float, y, left: float, right: float) -> str:
    return "".join(f'<line x1="{left}" x2="{right}" y1="{y(k * step):.1f}" y2="{y(k * step):.1f}" stroke="#d0d0d0"/>'
                   f'<text x="{left - 5}" y="{y(k * step) + 4:.1f}" text-anchor="end">{k * step:,.0f}</text>'
                   for k in range(round(top / step) + 1))


def _x_labels(ticks: list[tuple[float, str]], f: Mapping[str, int]) -> str:
    """The x axis's labels, each centred under its tick, except one that would then pass the right edge of the
    chart (the last date of a dense trend): that one ends at the edge."""
    y, edge = f["height"] - f["bottom"] + 16, f["width"] - 2
    return "".join(f'<text x="{x:.1f}" y="{y}" text-anchor="middle">{label}</text>'
                   if x + LABEL_CHAR_WIDTH * len(label) / 2 <= edge else
                   f'<text x="{edge}" y="{y}" text-anchor="end">{label}</text>' for x, label in ticks)


def _axis_titles(x_title: str, y_title: str, f: Mapping[str, int]) -> str:
    middle = f["top"] + (f["height"] - f["top"] - f["bottom"]) / 2
    return (f'<text class="axis-title" x="{f["left"] + (f["width"] - f["left"] - f["right"]) / 2:.1f}" '
            f'y="{f["height"] - 8}" text-anchor="middle">{e(x_title)}</text>'
            f'<text class="axis-title" transform="translate(14 {middle:.1f}) rotate(-90)" text-anchor="middle">'
            f"{e(y_title)}</text>")
