"""The public page of a release (``index.html``): what the data is, its privacy guarantee, charts and a map.

Built only from what the release publishes (its three tables and its privacy statement) and the public stop
list, never from anything private. Self-contained: inline CSS and SVG, no script, nothing fetched, links
relative to the release folder, so it opens offline. ``external_references`` lists anything in a page that
would load or link from elsewhere; the publisher refuses a page that has any.

Charts show the average tap-ons per day of each mode (tap-on: every trip has exactly one). An error bar is
the 95% bound on the noise in that average: the published counts it sums got independent noise of the kind
and scale ``privacy.json`` states, so the bound is that of a sum of as many draws, divided by the days.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from opal_dp.core.accuracy import error_bound_of_sum
from opal_dp.network import MODES
from opal_dp.prep.binning import location_points, window_label
from opal_dp.prep.schemas import UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.release.statement.build import CONFIDENCE, STATEMENT_JSON, STATEMENT_MD, TAILS, stated_design

PAGE = "index.html"
TABLE_NOTES = {  # published table -> what a row counts
    "time-loc": "trips per mode, date, tap, 15-minute window and location",
    "time": "trips per mode, date, tap and 15-minute window (loc is -)",
    "loc": "trips per mode, date, tap and location (time is -)",
}
MODE_NAMES = {"bus": "Bus", "ferry": "Ferry", "light_rail": "Light rail", "train": "Train"}
COLOURS = {"bus": "#c0392b", "ferry": "#138d75", "light_rail": "#7d3c98", "train": "#d68910"}
TOP_LOCATIONS = 10
WINDOW_INDEX = {window_label(w): w for w in range(WINDOWS_PER_DAY)}
CHART = {"width": 760, "height": 220, "left": 60, "right": 24, "top": 10, "bottom": 30}
MAP_WIDTH, MAP_PAD, MAX_RADIUS = 760, 24, 16.0

_URL = re.compile(r"""\s(?:href|src|srcset|action|formaction|poster|data|background|cite|ping|manifest|xlink:href)"""
                  r"""\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
_LOADS = re.compile(r"<\s*(?:script|link|iframe|frame|object|embed|base|img|image|video|audio|source|track|use"
                    r"|meta\s+http-equiv)\b|url\s*\(|@import|\b[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_LOCAL = re.compile(r"#[\w-]*|\w[\w.-]*")  # an in-page fragment or a file beside the page

STYLE = """
body{font-family:system-ui,sans-serif;max-width:800px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}h3{margin-bottom:.3em}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.15em .6em;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}tr:nth-child(even){background:#f6f6f6}
td.bar{width:14em}td.bar span{display:block;height:.8em}
.warning{background:#fdecea;border:2px solid #c0392b;padding:.6em;font-weight:bold}
.guarantee{background:#eef6ee;border-left:4px solid #2e7d32;padding:.6em}
svg{display:block;max-width:100%;height:auto}svg text{font-size:11px;fill:#444}
.legend span{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin:0 .3em 0 1em}
.note{color:#555;font-size:.9em}
"""


def render_index(tables: Mapping[str, pd.DataFrame], statement: Mapping, stops: pd.DataFrame) -> str:
    """``index.html`` of a release: ``tables`` are the published ``time-loc``, ``time`` and ``loc`` tables (as
    built or as read from their CSVs), ``statement`` what ``privacy.json`` holds, ``stops`` the public stop list."""
    if sorted(tables) != sorted(TABLE_NOTES):
        raise ValueError(f"tables must be exactly {sorted(TABLE_NOTES)}, got {sorted(tables)}")
    published = {name: _text(frame) for name, frame in tables.items()}
    days = {m: sorted(k["date"] for k in statement["partitions"]["keys"] if k["mode"] == m) for m in MODES}
    modes = [m for m in MODES if days[m]]
    marginals = {m["name"]: m for m in statement["marginals"]}
    release = html.escape(statement["release"]["id"])
    parts = [
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Trips by tap, release {release}'
        f"</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>Public-transport trips by smart-card tap</h1>\n"
        f'<p class="note">Release {release}, created {html.escape(statement["release"]["created_at"])}.</p>\n',
        _seeded_warning(statement),
        _about(published, days, modes, statement),
        _guarantee(statement),
        _files(published, statement),
        _time_charts(published["time"], days, modes, marginals["tap_on_time"]),
        _top_locations(published["loc"], days, modes, marginals["tap_on_loc"]),
        _map(published["loc"], days, stops),
        _parameters(statement),
        "</body>\n</html>\n",
    ]
    return "".join(parts)


def links(page: str) -> list[str]:
    """Every URL held by an attribute of ``page``, unescaped, in order."""
    return [html.unescape(next(g for g in m.groups() if g is not None)) for m in _URL.finditer(page)]


def stated_guarantee(page: str) -> tuple[float, float] | None:
    """The (epsilon, delta) a page states, exactly as it was given, or None if it states none."""
    values = [re.search(rf'<span class="{name}" data-value="([^"]+)">', page) for name in ("epsilon", "delta")]
    return None if None in values else (float(values[0][1]), float(values[1][1]))


def external_references(page: str) -> list[str]:
    """What in ``page`` would load or link anything outside its own folder: elements and CSS that load
    (script, link, img, iframe, url(), @import...), any ``scheme://`` text, and attribute URLs that are not a
    ``#fragment`` or a plain file name beside the page. Empty for a self-contained page."""
    return [m.group(0) for m in _LOADS.finditer(page)] + [u for u in links(page) if not _LOCAL.fullmatch(u)]


def _text(frame: pd.DataFrame) -> pd.DataFrame:
    """A published table with text labels and integer counts, whether categorical (built) or read from CSV."""
    return frame.astype({c: str for c in frame.columns if c != "count"}).astype({"count": "int64"})


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _date(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:]}"


def _place(mode: str, label: str) -> str:
    if label == UNKNOWN_LABEL:
        return "unknown"
    return f"postcode {label}" if mode == "bus" else label


def _seeded_warning(statement: Mapping) -> str:
    if not statement["noise_seeded"]:
        return ""
    return ('<p class="warning" id="seeded">WARNING: the noise of this release was seeded. It is NOT differentially '
            "private: anyone who knows the seed can remove the noise. For tests only; never hand it out.</p>\n")


def _about(published: Mapping[str, pd.DataFrame], days: Mapping[str, list[str]], modes: list[str],
           statement: Mapping) -> str:
    dates = sorted({d for m in modes for d in days[m]})
    span = _date(dates[0]) if len(dates) == 1 else f"{_date(dates[0])} to {_date(dates[-1])}"
    covered = ", ".join(f"{MODE_NAMES[m].lower()} ({len(days[m])} day{'s' * (len(days[m]) > 1)})" for m in modes)
    floors = sorted({m["min_released_count"] for m in statement["marginals"]})
    return (
        '<section id="about">\n<h2>What this data is</h2>\n<p>Counts of public-transport trips recorded by '
        "smart-card taps (Opal-like data): for each mode, service date, tap (on or off), 15-minute window of the "
        "day and location. The location is the postcode for bus and the stop name for train, ferry and light rail; "
        f"<code>-1</code> means unknown (a trip without a tap-off). This release covers {len(dates)} "
        f"date{'s' * (len(dates) > 1)}, {span}: {covered}.</p>\n"
        + (_remainders(statement["design"]) if stated_design(statement).consistent else
           "<p>Every count carries random noise, and a count is published only if its noisy value reaches a "
           f"threshold (the smallest published count is {' or '.join(map(str, floors))}, by table): a combination "
           "missing from a file had no trips or too few. Each file gets its own noise, so the files do not add up "
           "exactly to one another.</p>\n")
        + "</section>\n"
    )


def _remainders(design: Mapping) -> str:
    """The public-domain design's convention: remainder rows, exact sums, and where the totals are."""
    return (
        "<p>Every count carries random noise, including those of combinations nobody travelled: about "
        f"{design['expected_false_cells_per_day']:.3g} listed cells per day had no trips at all. In time-loc.csv a "
        f"combination is listed on its own if its count is at least {design['tau']}; the others are summed into "
        "remainder rows (<code>loc = other</code> per window, <code>time = other</code> per location), so the "
        "files add up exactly: a count in time.csv or loc.csv equals the sum of its time-loc.csv rows, remainder "
        "included. An unlisted combination is in two remainders, so do not add up all of time-loc.csv: the "
        "trips per day are the totals of time.csv (listed in PRIVACY.md).</p>\n"
    )


def _guarantee(statement: Mapping) -> str:
    unit, g = statement["privacy_unit"], statement["guarantee"]
    bounds = unit["contribution_bounds"]
    bounding = ""
    if bounds:
        listed = ", ".join(f"{_e(k)} = {'all days' if v is None else _e(v)}" for k, v in bounds.items())
        bounding = f" Before release each card's trips were cut to public bounds ({listed})."
    examples = "".join(f"<li>{_e(e['who'])}: epsilon = {e['epsilon']:.4g}, delta = {e['delta']:.3g} "
                       f"({_e(e['how'])}).</li>\n" for e in statement["worked_examples"])
    return (
        '<section id="guarantee">\n<h2>Privacy guarantee</h2>\n<p class="guarantee">These counts are differentially '
        f"private. They protect <strong>{_e(unit['protects'])}</strong> at <strong>epsilon = "
        f'<span class="epsilon" data-value="{g["epsilon"]!r}">{g["epsilon"]:.4g}</span>, delta = '
        f'<span class="delta" data-value="{g["delta"]!r}">{g["delta"]:.3g}</span></strong> per '
        f"<span class=\"per\">{_e(g['per'])}</span>. {_e(unit['meaning'])} Whatever else anyone knows, such a change "
        "alters the probability of any published result by at most a factor e<sup>epsilon</sup>, except with "
        f"probability delta. The figures are those the privacy ledger recorded for this release.{bounding}</p>\n"
        f"<p>{_e(g['composition'])}</p>\n<p>People travel more than once, so they are protected less than one "
        f"unit is:</p>\n<ul>\n{examples}</ul>\n"
        f'<p>The full statement, with what is not protected: <a href="{STATEMENT_MD}">{STATEMENT_MD}</a> '
        f'(machine-readable: <a href="{STATEMENT_JSON}">{STATEMENT_JSON}</a>).</p>\n</section>\n'
    )


def _files(published: Mapping[str, pd.DataFrame], statement: Mapping) -> str:
    rows = "".join(f'<li><a href="{name}.csv">{name}.csv</a>: {note}, {len(published[name]):,} rows.</li>\n'
                   for name, note in TABLE_NOTES.items())
    if "od" in statement:
        od = statement["od"]
        rows += (f'<li><a href="od.csv">od.csv</a>: trips by (date, mode, origin, destination), from a noisy prefix '
                 f"tree per date, epsilon {od['epsilon_per_tree']} per card-day (pure DP).</li>\n"
                 '<li><a href="od-sequences.csv">od-sequences.csv</a>: the most frequent card-day trip chains of '
                 "each date, from the same trees.</li>\n")
    return (
        '<section id="files">\n<h2>Files</h2>\n<p>Columns <code>mode,date,tap,time,loc,count</code>, as in the '
        f"2016 Opal open data.</p>\n<ul>\n{rows}"
        f'<li><a href="{STATEMENT_JSON}">{STATEMENT_JSON}</a>: the privacy statement, machine-readable.</li>\n'
        f'<li><a href="{STATEMENT_MD}">{STATEMENT_MD}</a>: the privacy statement for people.</li>\n</ul>\n</section>\n'
    )


def _per_day(rows: pd.DataFrame, key: str, days: int, marginal: Mapping) -> pd.DataFrame:
    """Average per day of the tap-on counts by ``key``, with the 95% noise bound of that average."""
    grouped = rows.groupby(key, sort=False)["count"].agg(["sum", "size"])
    mass = TAILS[marginal["noise"]].pmf(marginal["scale"])[1]
    bound = {n: error_bound_of_sum(mass, n, CONFIDENCE) for n in sorted(set(grouped["size"]))}
    return pd.DataFrame({"average": grouped["sum"] / days, "error": grouped["size"].map(bound) / days})


def _tap_ons(table: pd.DataFrame, mode: str) -> pd.DataFrame:
    return table[(table["mode"] == mode) & (table["tap"] == "on")]


def _error_note(marginal: Mapping, file: str) -> str:
    return (
        f'<p class="note">Error bars: with {CONFIDENCE:.0%} probability the noise in the average lies within the '
        f"bar. Each published count in {file} got {_e(marginal['noise']).replace('_', ' ')} noise of scale "
        f"{marginal['scale']:.4g} (privacy.json); for one count the bound is ±{marginal['error_bound_95']}, and for "
        "an average over days it is the bound of the sum of the counts' noise, divided by the days. Counts that "
        "were not published count as 0: the bars do not cover them.</p>\n"
    )


def _time_charts(time: pd.DataFrame, days: Mapping[str, list[str]], modes: list[str], marginal: Mapping) -> str:
    charts = []
    for mode in modes:
        rows = _tap_ons(time, mode)
        per_day = _per_day(rows.assign(window=rows["time"].map(WINDOW_INDEX)), "window", len(days[mode]), marginal)
        per_day = per_day.reindex(range(WINDOWS_PER_DAY), fill_value=0.0)
        body = (_time_chart(mode, per_day["average"].to_numpy(), per_day["error"].to_numpy()) if len(rows) else
                '<p class="note">No time-of-day count of this mode was published.</p>\n')
        charts.append(f"<h3>{MODE_NAMES[mode]}</h3>\n{body}")
    return ('<section id="time-of-day">\n<h2>Trips by time of day</h2>\n<p>Average tap-ons per day in each '
            f"15-minute window, from time.csv.</p>\n{''.join(charts)}{_error_note(marginal, 'time.csv')}</section>\n")


def _time_chart(mode: str, average: np.ndarray, error: np.ndarray) -> str:
    c = CHART
    width, height = c["width"] - c["left"] - c["right"], c["height"] - c["top"] - c["bottom"]
    step, top = _axis(float(max((average + error).max(), 4.0)))
    bar = width / WINDOWS_PER_DAY

    def y(value: float) -> float:
        return c["top"] + height * (1 - value / top)

    out = [f'<svg class="time-chart" id="time-{mode}" viewBox="0 0 {c["width"]} {c["height"]}" role="img" '
           f'aria-label="{MODE_NAMES[mode]}: average tap-ons per day by 15-minute window">']
    for k in range(round(top / step) + 1):
        v = k * step
        out.append(f'<line x1="{c["left"]}" x2="{c["left"] + width}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#e0e0e0"/><text x="{c["left"] - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for w in range(0, WINDOWS_PER_DAY + 1, 12):
        x = c["left"] + w * bar
        out.append(f'<text x="{x:.1f}" y="{c["height"] - 10}" text-anchor="middle">{w // 4}:00</text>')
    whiskers = []
    for w in np.flatnonzero(average > 0):
        x, a, e = c["left"] + w * bar, average[w], error[w]
        out.append(f'<rect x="{x + 0.5:.1f}" y="{y(a):.1f}" width="{bar - 1:.1f}" height="{y(0) - y(a):.1f}" '
                   f'fill="{COLOURS[mode]}"><title>{window_label(w)}: {a:,.1f} ± {e:,.1f} per day</title></rect>')
        mid, low, high = x + bar / 2, y(max(a - e, 0.0)), y(a + e)
        whiskers.append(f"M{mid:.1f} {low:.1f}V{high:.1f}M{mid - 2:.1f} {high:.1f}h4M{mid - 2:.1f} {low:.1f}h4")
    out.append(f'<path class="error-bars" d="{"".join(whiskers)}" stroke="#222" stroke-width="1" fill="none"/>')
    out.append(f'<line x1="{c["left"]}" x2="{c["left"] + width}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#444"/>')
    return "".join(out) + "</svg>\n"


def _axis(top: float) -> tuple[float, float]:
    """A round tick step (1, 2 or 5 times a power of ten) giving at most 5 intervals, and the axis top."""
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return step, step * math.ceil(top / step)


def _top_locations(loc: pd.DataFrame, days: Mapping[str, list[str]], modes: list[str], marginal: Mapping) -> str:
    blocks = []
    for mode in modes:
        per_day = _per_day(_tap_ons(loc, mode), "loc", len(days[mode]), marginal)
        top = per_day.reset_index().sort_values(["average", "loc"], ascending=[False, True]).head(TOP_LOCATIONS)
        peak = top["average"].max() if len(top) else 0.0
        rows = "".join(
            f'<tr><td>{_e(_place(mode, r.loc))}</td><td class="num">{r.average:,.1f}</td>'
            f'<td class="num">± {r.error:,.1f}</td><td class="bar"><span style="width:{100 * r.average / peak:.1f}%;'
            f'background:{COLOURS[mode]}"></span></td></tr>\n'
            for r in top.itertuples()
        )
        body = (f'<table class="top-locations" id="top-{mode}">\n<tr><th>location</th><th class="num">tap-ons per day'
                f'</th><th class="num">95% error</th><th></th></tr>\n{rows}</table>\n') if rows else \
            '<p class="note">No location count of this mode was published.</p>\n'
        blocks.append(f"<h3>{MODE_NAMES[mode]}</h3>\n{body}")
    return ('<section id="locations">\n<h2>Busiest locations</h2>\n<p>The ten locations of each mode with the most '
            f"tap-ons per day on average, from loc.csv.</p>\n{''.join(blocks)}{_error_note(marginal, 'loc.csv')}"
            "</section>\n")


def _map(loc: pd.DataFrame, days: Mapping[str, list[str]], stops: pd.DataFrame) -> str:
    on = loc[loc["tap"] == "on"].groupby(["mode", "loc"], sort=True)["count"].sum().reset_index()
    on["average"] = on["count"] / on["mode"].map(lambda m: len(days[m]))
    placed = on.merge(location_points(stops), on=["mode", "loc"], how="inner")
    unplaced = len(on) - len(placed)
    if placed.empty:
        return ('<section id="map">\n<h2>Map</h2>\n<p class="note">No published location has coordinates in the '
                "stop list.</p>\n</section>\n")
    lon0, lon1, lat0, lat1 = placed["lon"].min(), placed["lon"].max(), placed["lat"].min(), placed["lat"].max()
    aspect = math.cos(math.radians((lat0 + lat1) / 2))  # equirectangular, true to scale at the middle latitude
    span = max((lon1 - lon0) * aspect, lat1 - lat0, 1e-3)
    scale = (MAP_WIDTH - 2 * MAP_PAD) / span
    height = round((lat1 - lat0) * scale + 2 * MAP_PAD)

    def xy(lon: pd.Series, lat: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        return (MAP_PAD + (lon.to_numpy() - lon0) * aspect * scale, MAP_PAD + (lat1 - lat.to_numpy()) * scale)

    sx, sy = xy(stops["lon"], stops["lat"])
    inside = (sx >= 0) & (sx <= MAP_WIDTH) & (sy >= 0) & (sy <= height)
    dots = sorted({(round(float(a)), round(float(b))) for a, b in zip(sx[inside], sy[inside])})
    network = "".join(f"M{a} {b}h0" for a, b in dots)
    px, py = xy(placed["lon"], placed["lat"])
    placed = placed.assign(x=px, y=py, r=2 + (MAX_RADIUS - 2) * np.sqrt(placed["average"] / placed["average"].max()))
    circles = "".join(
        f'<circle cx="{p.x:.1f}" cy="{p.y:.1f}" r="{p.r:.1f}" fill="{COLOURS[p.mode]}" fill-opacity="0.55" '
        f'stroke="{COLOURS[p.mode]}"><title>{MODE_NAMES[p.mode]}, {_e(_place(p.mode, p.loc))}: '
        f"{p.average:,.1f} tap-ons per day</title></circle>"
        for p in placed.sort_values(["average", "mode", "loc"], ascending=[False, True, True]).itertuples()
    )
    legend = "".join(f'<span style="background:{COLOURS[m]}"></span>{MODE_NAMES[m]}'
                     for m in MODES if m in set(placed["mode"]))
    missing = (f" {unplaced} published location{'s' * (unplaced > 1)} with no coordinates in the stop list "
               f"{'are' if unplaced > 1 else 'is'} not drawn." if unplaced else "")
    return (
        f'<section id="map">\n<h2>Map</h2>\n<svg class="map" viewBox="0 0 {MAP_WIDTH} {height}" role="img" '
        f'aria-label="Map of published locations, circle area by tap-ons per day">'
        f'<rect width="{MAP_WIDTH}" height="{height}" fill="#fbfbf8"/>'
        f'<path d="{network}" stroke="#bbb" stroke-width="2" stroke-linecap="round"/>{circles}</svg>\n'
        f'<p class="legend">{legend}</p>\n<p class="note">Circle area is proportional to the average tap-ons per '
        "day at a location, from loc.csv. Grey dots are the stops of the public stop list; a bus postcode is drawn "
        f"at the mean position of its bus stops (longitude scaled by the cosine of the latitude).{missing}</p>\n"
        "</section>\n"
    )


def _parameters(statement: Mapping) -> str:
    rows = "".join(
        f"<tr><td>{_e(m['name'])}</td><td>{_e(m['file'])}</td><td>{_e(m['tap'])}</td><td>{_e(m['noise'])}</td>"
        f'<td class="num">{m["scale"]:.4g}</td><td class="num">{m["min_released_count"]}</td>'
        f'<td class="num">±{m["error_bound_95"]}</td></tr>\n'
        for m in statement["marginals"]
    )
    return (
        '<section id="parameters">\n<h2>Noise and thresholds</h2>\n<table>\n<tr><th>marginal</th><th>file</th>'
        '<th>tap</th><th>noise</th><th class="num">scale</th><th class="num">smallest published count</th>'
        f'<th class="num">95% error of one count</th></tr>\n{rows}</table>\n</section>\n'
    )
