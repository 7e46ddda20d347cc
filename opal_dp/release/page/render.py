"""The public page of a release (``index.html``): what the data is, its privacy guarantee in plain words first,
the dataset's catalogue entry (publisher, licence, coverage, citation), charts, the busiest places, a map, a data
dictionary and the files with their sizes.

Built only from what the release publishes (the additive ``PageSummary`` of its tables, its privacy statement and
the sizes of its files), the
public stop list and the publisher's settings (``PageSettings``), never from anything private. Self-contained:
inline CSS and SVG, no script, nothing fetched, links relative to the release folder, so it opens offline.
``external_references`` lists anything in a page that would load or link from elsewhere; the publisher refuses a
page that has any. Values show on hover through SVG ``<title>`` elements; the layout reads on a 390 px phone.

Error bars and ± figures are 95% bounds on the noise of a sum of published counts (``page.common.per_day``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

import pandas as pd

from opal_dp.network import MODES
from opal_dp.release.marginals.open_data import TABLES
from opal_dp.release.page.catalogue import (
    TITLE,
    PageSettings,
    coverage,
    dataset_section,
    dictionary_section,
    files_section,
)
from opal_dp.release.page.charts import time_of_day_section, trend_section
from opal_dp.release.page.common import (COLOURS, MODE_NAMES, e, iso, marginal_of, per_day, place, rows_of,
                                      stacked_table, suppresses)
from opal_dp.release.page.map import map_section
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.statement.build import CONFIDENCE, STATEMENT_JSON, STATEMENT_MD, stated_design
from opal_dp.release.statement.plain import SYNTHETIC_SAMPLE, plain_guarantee, synthetic_sample
from opal_dp.release.statement.runs import dates_of

PAGE = "index.html"
TOP_LOCATIONS = 10

_URL = re.compile(r"""\s(?:href|src|srcset|action|formaction|poster|data|background|cite|ping|manifest|xlink:href)"""
                  r"""\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
_LOADS = re.compile(r"<\s*(?:script|link|iframe|frame|object|embed|base|img|image|video|audio|source|track|use"
                    r"|meta\s+http-equiv)\b|url\s*\(|@import|\b[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_LOCAL = re.compile(r"#[\w-]*|\w[\w.-]*")  # an in-page fragment or a file beside the page
_SIZE = re.compile(r'<span class="size" data-file="([^"]+)" data-bytes="(\d+)">')

STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;max-width:820px;margin:0 auto;padding:1em;color:#222;line-height:1.45;
overflow-wrap:break-word}
h1{font-size:1.6em;margin-top:.3em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}h3{margin-bottom:.3em}
nav ul{padding:0;margin:.5em 0;list-style:none;display:flex;flex-wrap:wrap;gap:.3em 1em}
a{color:#0b57a4}
table{border-collapse:collapse;font-size:.9em;width:100%}td,th{padding:.15em .6em;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}
tr:nth-child(even){background:#f3f3f3}td.bar{width:10em}td.bar span{display:block;height:.8em}
.warning{background:#fdecea;border:2px solid #b03a2e;padding:.6em;font-weight:bold}
.sample{background:#fff4d6;border:2px solid #8a6d00;padding:.6em;font-weight:bold}
.lead{font-size:1.15em;background:#eef6ee;border-left:4px solid #2e7d32;padding:.6em}
.guarantee{background:#f4f8f4;border-left:4px solid #2e7d32;padding:.6em}
dl.meta{display:grid;grid-template-columns:minmax(7em,max-content) 1fr;gap:.3em 1em}dl.meta dt{font-weight:bold}
dl.meta dd{margin:0}
svg.chart,svg.map{display:block;width:100%;max-width:640px;height:auto}
svg text{font-size:13px;fill:#333}svg text.axis-title{font-weight:bold}
svg text.halo{stroke:#fff;stroke-width:3px;paint-order:stroke;fill:#111}
svg.key{display:inline-block;vertical-align:middle}
svg text.place{font-size:15px}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.95em}
.legend span{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin:0 .3em 0 .6em}
.note{color:#555;font-size:.9em}
.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
details{margin:.3em 0 1em}summary{cursor:pointer;color:#0b57a4}
footer{margin-top:2em;border-top:1px solid #ccc;font-size:.9em;color:#555}
@media (max-width:600px){body{padding:.6em}h1{font-size:1.3em}td.bar,th.bar{display:none}table{font-size:.85em}
td,th{padding:.15em .3em}td.num{white-space:normal}dl.meta{grid-template-columns:1fr}dl.meta dd{margin-bottom:.4em}}
@media (max-width:720px){table.stack,table.stack tbody,table.stack tr,table.stack td{display:block}
table.stack tr:first-child{display:none}table.stack td{text-align:left}
table.stack td:first-child{font-weight:bold;padding-top:.4em}table.stack td:empty{display:none}
table.stack td[data-label]::before{content:attr(data-label) ": ";color:#555}}
"""
SECTIONS = {"dataset": "About this dataset", "trend": "Trips per day", "time-of-day": "Time of day",
            "locations": "Busiest locations", "map": "Map", "guarantee": "Privacy", "dictionary": "Data dictionary",
            "files": "Files"}


def render_index(published: PageSummary | Mapping[str, pd.DataFrame], statement: Mapping, stops: pd.DataFrame,
                 sizes: Mapping[str, int] | None = None, settings: PageSettings = PageSettings()) -> str:
    """``index.html`` of a release: ``published`` is the ``PageSummary`` of its tables (or the published
    ``time-loc``, ``time`` and ``loc`` tables themselves, as built or as read from their CSVs), ``statement`` what
    ``privacy.json`` holds, ``stops`` the public stop list, ``sizes`` the bytes of each other published file (a
    file without one is listed without a size), ``settings`` the publisher's catalogue settings."""
    if not isinstance(published, PageSummary):
        if sorted(published) != sorted(TABLES):
            raise ValueError(f"tables must be exactly {sorted(TABLES)}, got {sorted(published)}")
        published = PageSummary.of_tables(published)
    runs = statement["partitions"]["date_runs_by_mode"]
    days = {m: dates_of(runs.get(m, [])) for m in MODES}
    modes = [m for m in MODES if days[m]]
    dates = sorted({d for m in modes for d in days[m]})
    release = e(statement["release"]["id"])
    nav = "".join(f'<li><a href="#{k}">{v}</a></li>' for k, v in SECTIONS.items())
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{e(TITLE)}, release {release}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n"
        f"<h1>{e(TITLE)}</h1>\n"
        f'<p class="note">Release {release}, created {e(statement["release"]["created_at"])}; covers '
        f"{e(coverage(dates))}.</p>\n",
        _seeded_warning(statement),
        _sample_notice(statement),
        f'<p class="lead" id="plain-guarantee">{e(plain_guarantee(statement))}</p>\n'
        f'<nav aria-label="Sections"><ul>{nav}</ul></nav>\n</header>\n<main>\n',
        dataset_section(settings, statement, dates),
        _about(days, modes, statement),
        trend_section(published, days, modes, statement),
        time_of_day_section(published.time, days, modes, statement),
        _top_locations(published.loc, days, modes, statement),
        map_section(published.loc, days, stops, marginal_of(statement, "loc.csv", "on"), suppresses(statement)),
        _guarantee(statement),
        dictionary_section(statement),
        files_section(published.rows, statement, sizes or {}),
        _parameters(statement),
        f'</main>\n<footer>\n<p>Licence: {e(settings.licence_name)}. Publisher: {e(settings.publisher)}. Contact: '
        f"{e(settings.contact)}.</p>\n</footer>\n</body>\n</html>\n",
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


def stated_sizes(page: str) -> dict[str, int]:
    """The size in bytes a page states for each file it lists with one."""
    return {html.unescape(name): int(n) for name, n in _SIZE.findall(page)}


def _seeded_warning(statement: Mapping) -> str:
    if not statement["noise_seeded"]:
        return ""
    return ('<p class="warning" id="seeded">WARNING: the noise of this release was seeded. It is NOT differentially '
            "private: anyone who knows the seed can remove the noise. For tests only; never hand it out.</p>\n")


def _sample_notice(statement: Mapping) -> str:
    if not synthetic_sample(statement):
        return ""
    return f'<p class="sample" id="synthetic-sample">{e(SYNTHETIC_SAMPLE)}</p>\n'


def _about(days: Mapping[str, list[str]], modes: list[str], statement: Mapping) -> str:
    covered = ", ".join(f"{MODE_NAMES[m].lower()} ({len(days[m])} day{'s' * (len(days[m]) > 1)})" for m in modes)
    floors = sorted({m["min_released_count"] for m in statement["marginals"]})
    return (
        '<section id="about" aria-labelledby="about-title">\n<h2 id="about-title">What this data is</h2>\n<p>Counts of '
        "public-transport trips recorded by smart-card taps (Opal-like data): for each mode, service date, tap (on or "
        "off), 15-minute window of the day and location. The location is the postcode for bus and the stop name "
        f"for train, ferry and light rail (see the data dictionary). Modes covered: {covered}.</p>\n"
        + _missing_dates(statement.get("data"))
        + (_remainders(statement["design"]) if stated_design(statement).consistent else
           "<p>Every count carries random noise, and a count is published only if its noisy value reaches a "
           f"threshold (the smallest published count is {' or '.join(map(str, floors))}, by table): a combination "
           "missing from a file had no trips or too few. Each file gets its own noise, so the files do not add up "
           "exactly to one another.</p>\n")
        + "</section>\n"
    )


def _missing_dates(data: object) -> str:
    """The service dates this release does not hold, named: withheld by the publisher (its week released without
    them; the week's guarantee still covers them) and pending (not ready or not usable yet)."""
    if not isinstance(data, Mapping):
        return ""
    named = [(data.get("left_out_dates") or [], "Withheld by the publisher (its week was released without it; the "
                                                "week's guarantee covers the whole week)"),
             (data.get("pending_dates") or [], "Not in this release yet (data not ready or not usable)")]
    return "".join(f'<p class="note" id="{"withheld" if i == 0 else "pending"}-dates">{why}: '
                   f"{', '.join(iso(d) for d in dates)}.</p>\n" for i, (dates, why) in enumerate(named) if dates)


LISTED_IF = {"hierarchy": "noisy count reached"}  # the public-domain design lists a cell by its rounded estimate


def _remainders(design: Mapping) -> str:
    """The public-domain design's convention: remainder rows, exact sums, and where the totals are."""
    return (
        "<p>Every count carries random noise, including those of combinations nobody travelled: about "
        f"{design['expected_false_cells_per_day']:.3g} listed cells per day had no trips at all. In time-loc.csv a "
        f"combination is listed on its own if its {LISTED_IF.get(design['name'], 'count is at least')} "
        f"{design['tau']}; the others are summed into "
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
        listed = ", ".join(f"{e(k)} = {'all days' if v is None else e(v)}" for k, v in bounds.items())
        bounding = f" Before release each card's trips were cut to public bounds ({listed})."
    examples = "".join(f"<li>{e(x['who'])}: epsilon = {x['epsilon']:.4g}, delta = {x['delta']:.3g} "
                       f"({e(x['how'])}).</li>\n" for x in statement["worked_examples"])
    return (
        '<section id="guarantee" aria-labelledby="guarantee-title">\n<h2 id="guarantee-title">Privacy guarantee</h2>\n'
        '<p class="guarantee">These counts are differentially '
        f"private. They protect <strong>{e(unit['protects'])}</strong> at <strong>epsilon = "
        f'<span class="epsilon" data-value="{g["epsilon"]!r}">{g["epsilon"]:.4g}</span>, delta = '
        f'<span class="delta" data-value="{g["delta"]!r}">{g["delta"]:.3g}</span></strong> per '
        f"<span class=\"per\">{e(g['per'])}</span>. {e(unit['meaning'])} Whatever else anyone knows, such a change "
        "alters the probability of any published result by at most a factor e<sup>epsilon</sup>, plus delta. The "
        f"figures are those the privacy ledger recorded for this release.{bounding}</p>\n"
        f"<p>{e(g['composition'])}</p>\n<p>People travel more than once, so they are protected less than one "
        f"unit is:</p>\n<ul>\n{examples}</ul>\n"
        f'<p>The full statement, with what is not protected: <a href="{STATEMENT_MD}">{STATEMENT_MD}</a> '
        f'(machine-readable: <a href="{STATEMENT_JSON}">{STATEMENT_JSON}</a>).</p>\n</section>\n'
    )


def _top_locations(loc: pd.DataFrame, days: Mapping[str, list[str]], modes: list[str], statement: Mapping) -> str:
    """The busiest locations of each mode by average tap-ons per day, with their tap-offs per day; under a design that
    suppresses small counts, of the locations published on enough days only (``per_day``'s ``whole``)."""
    whole = suppresses(statement)
    blocks = []
    for mode in modes:
        on, off = (per_day(rows_of(loc, mode, tap), "loc", len(days[mode]), _station_noise(statement, tap, mode),
                           whole) for tap in ("on", "off"))
        partial = int(on["average"].isna().sum())
        top = on.dropna().reset_index().sort_values(["average", "loc"], ascending=[False, True]).head(TOP_LOCATIONS)
        peak = top["average"].max() if len(top) else 0.0
        rows = "".join(
            f'<tr><td>{e(place(mode, r.loc))}</td><td class="num">{r.average:,.1f} ± {r.error:,.1f}</td>'
            f'<td class="num">{_off(off, r.loc)}</td><td class="bar"><span style="width:'
            f'{100 * r.average / peak:.1f}%;background:{COLOURS[mode]}"></span></td></tr>\n'
            for r in top.itertuples()
        )
        body = (f'<table class="top-locations" id="top-{mode}">\n<tr><th>location</th><th class="num">tap-ons per day'
                f'</th><th class="num">tap-offs per day</th><th class="bar"><span class="visually-hidden">tap-ons, '
                f"as a bar</span></th></tr>\n{rows}</table>\n") if rows else (
            f'<p class="note">No location of this mode was published on enough of its {len(days[mode])} days.</p>\n'
            if partial else '<p class="note">No location count of this mode was published.</p>\n')
        if partial:
            body += (f'<p class="note">{partial} other location{"s" * (partial > 1)} of this mode '
                     f"{'were' if partial > 1 else 'was'} published on too few days to average (in loc.csv).</p>\n")
        blocks.append(f"<h3>{MODE_NAMES[mode]}</h3>\n{body}")
    on = marginal_of(statement, "loc.csv", "on")
    if "fit_error_sd" in on:
        sds = "; ".join(f"{MODE_NAMES[m].lower()} {on['fit_error_sd'][m]['station_day']:,.1f}" for m in modes
                        if m in on["fit_error_sd"])
        source = ("each count in loc.csv is a station's day fitted from the hierarchy's noisy levels; its error has "
                  f"standard deviation (tap-on) {sds} (privacy.json, fit_error_sd: exact for the fit before rounding, "
                  "approximate where estimates near 0 were raised to 0)")
    else:
        source = (f"each published count in loc.csv got {e(on['noise']).replace('_', ' ')} noise of scale "
                  f"{on['scale']:.4g} (privacy.json), ±{on['error_bound_95']} for one count")
    listed = (f"A count that was not published counts as 0, though its noisy value may have been up to "
              f"{on['min_released_count'] - 1} (the threshold, less 1): a location is listed only where its days "
              "without a published count can lower its average by no more than its ±, so a place under the threshold "
              "on many days is left out." if whole else
              "Counts that were not published (estimates under 1) count as 0.")
    return (
        '<section id="locations" aria-labelledby="locations-title">\n<h2 id="locations-title">Busiest locations</h2>\n'
        f"<p>The {TOP_LOCATIONS} locations of each mode with the most tap-ons per day on average, with their tap-offs "
        f"per day, from loc.csv.</p>\n{''.join(blocks)}"
        f'<p class="note">± is the {CONFIDENCE:.0%} bound on the noise in the average: {source}; an average over days '
        f"has the bound of the sum of its counts' noise, divided by the days. {listed}</p>\n</section>\n"
    )


def _station_noise(statement: Mapping, tap: str, mode: str) -> Mapping:
    """The noise of one count of loc.csv: its marginal's, or under the hierarchy design the fit's error of a
    station's day in ``mode``."""
    marginal = marginal_of(statement, "loc.csv", tap)
    if "fit_error_sd" not in marginal:
        return marginal
    return {**marginal, "scale": marginal["fit_error_sd"][mode]["station_day"]}


def _off(off: pd.DataFrame, label: str) -> str:
    if label not in off.index or pd.isna(off.at[label, "average"]):  # none, or not on every day
        return "-"
    return f"{off.at[label, 'average']:,.1f} ± {off.at[label, 'error']:,.1f}"


def _parameters(statement: Mapping) -> str:
    rows = [(e(m["name"]), e(m["file"]), e(m["tap"]), e(m["noise"]), f"{m['scale']:.4g}", m["min_released_count"],
             f"±{m['error_bound_95']}") for m in statement["marginals"]]
    table = stacked_table(("marginal", "file", "tap", "noise", "scale", "smallest published count",
                           "95% error of one count"), rows, numeric=3)
    return ('<section id="parameters" aria-labelledby="parameters-title">\n<h2 id="parameters-title">Noise and '
            f"thresholds</h2>\n{table}</section>\n")
