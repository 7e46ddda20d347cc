"""The public page of a real release in a real browser: after a small end-to-end release (a Friday and a Saturday
of synthetic trips, raw files -> published), ``index.html`` opened over file:// shows its guarantee, catalogue
entry, trend and time-of-day charts and map, its links resolve to the release's files, it requests nothing but
itself, it reads at 390 px wide without scrolling sideways, no table cell or chart label of it is cut off at desktop
or phone width, and axe-core (shipped by the axe-playwright-python package) finds nothing serious or critical at
either width. Screenshots: test-artifacts/public-page*.png.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

import dagster as dg
import pandas as pd
import pytest

from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.published_folder import LATEST, files_of
from opal_dp.release.settings import DEFAULT_DELTA
from opal_dp.network import load_stops
from opal_dp.release.marginals.open_data import TABLE_NOTES
from opal_dp.release.page.common import MODE_NAMES
from opal_dp.release.page.render import PAGE, render_index
from opal_dp.settings import DATA_DIR_ENV, PUBLISHER_ENV
from opal_dp.simulate.trips import generate_days
from opal_dp.release.statement.runs import partition_keys, partitions_section
from opal_dp_tests.conftest import other_days
from opal_dp_tests.browser.chromium import (
    BROWSER_MARKS,
    CHROMIUM,
    CHROMIUM_ARGS,
    expect,
    require_chromium,
    screenshot,
    sync_playwright,
)

pytestmark = BROWSER_MARKS
SCALE = 0.02  # about 4,000 trips a day: bus and train always publish time counts, the small modes by chance
DAYS = [date(2016, 7, 29), date(2016, 7, 30)]  # a weekday and a weekend day
PUBLISHER = "Example Transport Agency"
DESKTOP, PHONE = 1280, 390
SERIOUS = ("serious", "critical")
# What a reader cannot see or must scroll sideways for, measured in the browser with every <details> open: a table
# cell outside the viewport or cut off by an ancestor that clips (overflow other than visible), an HTML element wider
# inside than its box (a sideways scroll box; a screen-reader-only element, clipped, is meant to be), an SVG text
# outside its svg (an axis label clipped). Half a pixel of rounding is allowed in box edges.
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' ? el.className.split(' ').filter(c => c).map(c => '.' + c).join('') : '');
  const drawn = el => { const box = el.getBoundingClientRect(); return box.width > 0 && box.height > 0; };
  const outside = (inner, outer) => inner.left < outer.left - 0.5 || inner.right > outer.right + 0.5;
  const span = box => `x ${box.left.toFixed(1)}..${box.right.toFixed(1)}`;
  const text = el => JSON.stringify(el.textContent.trim().slice(0, 40));
  const viewport = {left: 0, right: document.documentElement.clientWidth};
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  for (const cell of document.querySelectorAll('td, th')) {
    if (!drawn(cell)) continue;
    const box = cell.getBoundingClientRect();
    const where = `${name(cell.closest('table'))} cell ${text(cell)} (${span(box)})`;
    if (outside(box, viewport)) problems.push(`${where} is outside the viewport (${span(viewport)})`);
    for (let up = cell.parentElement; up !== document.documentElement; up = up.parentElement) {
      const clip = up.getBoundingClientRect();
      if (getComputedStyle(up).overflowX !== 'visible' && outside(box, clip))
        problems.push(`${where} is cut off by ${name(up)} (${span(clip)})`);
    }
  }
  for (const el of document.querySelectorAll('*')) {  // an SVG element's widths are not a box's: its text's are below
    if (el instanceof HTMLElement && getComputedStyle(el).clip === 'auto' && el.scrollWidth > el.clientWidth)
      problems.push(`${name(el)} scrolls sideways: ${el.scrollWidth} px of content in ${el.clientWidth} px`);
  }
  for (const label of document.querySelectorAll('svg text')) {
    const box = label.getBoundingClientRect(), svg = label.ownerSVGElement.getBoundingClientRect();
    if (drawn(label) && (outside(box, svg) || box.top < svg.top - 0.5 || box.bottom > svg.bottom + 0.5))
      problems.push(`${name(label.ownerSVGElement)} text ${text(label)} (${span(box)}, y ${box.top.toFixed(1)}..`
                    + `${box.bottom.toFixed(1)}) is clipped by its svg (${span(svg)}, y ${svg.top.toFixed(1)}..`
                    + `${svg.bottom.toFixed(1)})`);
  }
  return problems;
}"""


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The folder of a release published end to end from two synthetic raw days."""
    from opal_dp.cli import run_release

    root = tmp_path_factory.mktemp("public-page")
    list(generate_days(DAYS, root / "raw", seed=11, scale=SCALE))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(DATA_DIR_ENV, str(root))
        env.setenv(PUBLISHER_ENV, PUBLISHER)
        # card-level as by default, the week released without its five other days, at the 2016 budgets (8 a week:
        # two days at the weekly share would publish no count of the small modes, which the page must show)
        run_release(dg.DagsterInstance.ephemeral(), data_dir=root, log_file=root / "runs.log",
                    without=other_days(d.isoformat() for d in DAYS),
                    budget={"epsilon": {m.name: m.default_epsilon for m in MARGINALS},
                            "delta": {m.name: DEFAULT_DELTA for m in MARGINALS}})
    return (root / "published" / LATEST).resolve()


@pytest.fixture(scope="module")
def three_weeks(release: Path, tmp_path_factory) -> Path:
    """A folder with the release's page as it would be after three weeks of dates (the Friday's tables on each) and
    without its OD files: the trend chart then labels every fourth date, the last one at the right edge."""
    friday = f"{DAYS[0]:%Y%m%d}"
    dates = [f"{DAYS[0] + timedelta(n):%Y%m%d}" for n in range(21)]
    tables = {}
    for name in TABLE_NOTES:
        table = pd.read_csv(release / f"{name}.csv", dtype=str, keep_default_na=False)
        tables[name] = pd.concat([table[table["date"] == friday].assign(date=d) for d in dates], ignore_index=True)
    statement = json.loads((release / "privacy.json").read_text(encoding="utf-8"))
    modes = {k["mode"] for k in partition_keys(statement) if k["date"] == friday}
    statement = {k: v for k, v in statement.items() if k != "od"} | {
        "partitions": partitions_section((d, m) for d in dates for m in modes)}
    folder = tmp_path_factory.mktemp("three-weeks")
    (folder / PAGE).write_text(render_index(tables, statement, load_stops()), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, release: Path, width: int, requests: list[str]):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.on("request", lambda request: requests.append(request.url))
    context.route("http*://**", lambda route: route.abort())  # nothing may go out, even if asked
    page = context.new_page()
    page.goto((release / PAGE).as_uri())
    return page


def test_public_page_is_self_contained_and_shows_the_release(release: Path, browser) -> None:
    statement = json.loads((release / "privacy.json").read_text(encoding="utf-8"))
    time = pd.read_csv(release / "time.csv", dtype=str)
    modes = sorted({k["mode"] for k in partition_keys(statement)})  # every released mode gets its section
    days = {m: sum(k["mode"] == m for k in partition_keys(statement)) for m in modes}
    # The design (SBH) leaves out counts under its threshold: the page averages a window or a place only where its
    # days without a count can lower its average by no more than its ± (over these two days: published on both), and
    # says so for a mode that has none.
    windows = time[time["time"].str.fullmatch(r"\d{1,2}:\d{2}")]
    with_windows = set(windows["mode"])  # a small mode's 15-minute counts may all fall below the threshold
    counted = every_day(windows, ["mode", "tap", "time"], days)
    assert {"bus", "train"} <= counted, "a large mode published no time count on both days: raise SCALE"
    loc = pd.read_csv(release / "loc.csv", dtype=str)
    located = every_day(loc[loc["tap"] == "on"], ["mode", "loc"], days)
    requests: list[str] = []
    page = open_page(browser, release, DESKTOP, requests)

    guarantee = page.locator("p.guarantee")
    expect(guarantee).to_be_visible()
    expect(guarantee).to_contain_text(f"protect {statement['privacy_unit']['protects']}")
    expect(guarantee).to_contain_text(f"epsilon = {statement['guarantee']['epsilon']:.4g}")
    expect(guarantee).to_contain_text(f"delta = {statement['guarantee']['delta']:.3g}")
    lead = page.locator("#plain-guarantee")
    expect(lead).to_be_visible()
    assert lead.bounding_box()["y"] < page.locator("#dataset").bounding_box()["y"]  # the guarantee comes first
    expect(page.locator("#licence")).to_have_text("Creative Commons Attribution 4.0 International (CC BY 4.0)")
    expect(page.locator("#dataset")).to_contain_text(PUBLISHER)
    expect(page.locator("#coverage")).to_have_text("2016-07-29 to 2016-07-30 (2 service dates)")
    charts = page.locator("svg.time-chart")
    expect(charts).to_have_count(len(counted))
    for mode in modes:
        if mode in located:
            expect(page.locator(f"table#top-{mode}")).to_be_visible()
        elif mode in set(loc["mode"]):
            expect(page.locator("#locations")).to_contain_text(
                f"No location of this mode was published on enough of its {days[mode]} days.")
        else:
            expect(page.locator("#locations")).to_contain_text("No location count of this mode was published.")
        if mode not in counted:  # said in words, never drawn as zero
            expect(page.locator(f"svg#time-{mode}")).to_have_count(0)
            expect(page.locator("#time-of-day")).to_contain_text(
                f"No 15-minute window of this mode was published on enough of its {days[mode]} days."
                if mode in with_windows else "No time-of-day count of this mode was published.")
            if (release / "totals.csv").exists():  # its measured daily totals are drawn all the same
                expect(page.locator(f"svg#trend-{mode}")).to_be_visible()
            else:
                expect(page.locator(f"svg#trend-{mode}")).to_have_count(0)
                expect(page.locator("#trend")).to_contain_text("No time count of this mode was published in these "
                                                               "weeks.")
            continue
        chart = page.locator(f"svg#time-{mode}")
        expect(chart).to_be_visible()
        assert chart.locator("rect").count() > 0, f"no bars for {mode}"
        trend = page.locator(f"svg#trend-{mode}")
        expect(trend).to_be_visible()
        marked = {t.split(", ")[0].split()[-1] for t in trend.locator("title").all_text_contents() if "tap-ons" in t}
        # the trend's points: the measured daily totals (totals.csv, one a date and mode) when published
        totals = pd.read_csv(release / "totals.csv", dtype=str) if (release / "totals.csv").exists() else time
        published = set(totals.loc[(totals["tap"] == "on") & (totals["mode"] == mode), "date"])
        assert marked == {"(weekday)" if d == "20160729" else "(weekend)" for d in published}, mode
    assert page.locator("path.error-bars").count() == len(counted)
    for view in ("svg#map", "svg#map-centre"):
        site_map = page.locator(view)
        expect(site_map).to_be_visible()
        assert site_map.locator("circle").count() > 0 and site_map.locator("g.scale-bar").count() == 1
        box = site_map.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 100
    drawn = {t.split(",")[0] for t in page.locator("svg#map circle title").all_text_contents()}
    assert {"Bus", "Train"} <= drawn <= {MODE_NAMES[m] for m in located}  # only places published on both days
    sizes = page.locator("span.size").evaluate_all("s => s.map(e => [e.dataset.file, Number(e.dataset.bytes)])")
    assert dict(sizes) == {name: (release / name).stat().st_size for name in files_of(statement) if name != PAGE}

    hrefs = page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
    targets = {Path(unquote(urlparse(href).path)) for href in hrefs}
    assert {t.name for t in targets} == set(files_of(statement))  # the other files, and the page's own sections
    assert all(t.parent == release and t.is_file() for t in targets), targets
    screenshot(page, "public-page", full_page=True)
    assert requests == [(release / PAGE).as_uri()], f"the page requested more than itself: {requests}"


def every_day(rows: pd.DataFrame, key: list[str], days: dict[str, int]) -> set[str]:
    """The modes of ``rows`` with a ``key`` published on every one of the mode's ``days``."""
    dates = rows.groupby(key)["date"].nunique().reset_index()
    return set(dates.loc[dates["date"] == dates["mode"].map(days), "mode"])


def test_public_page_reads_on_a_phone(release: Path, browser) -> None:
    requests: list[str] = []
    page = open_page(browser, release, PHONE, requests)
    widths = page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth]")
    assert max(widths) <= PHONE, f"the page scrolls sideways at {PHONE} px: {widths}"
    for locator in ("#plain-guarantee", "#licence", "#coverage", "svg.trend-chart >> nth=0", "svg#map-centre"):
        element = page.locator(locator)
        expect(element).to_be_visible()
        box = element.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE, f"{locator} does not fit: {box}"
    expect(page.locator("#dataset")).to_contain_text(PUBLISHER)
    screenshot(page, "public-page-phone", full_page=True)


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("folder", ["release", "three_weeks"])
def test_nothing_is_cut_off_or_scrolls_sideways(request, browser, folder: str, width: int) -> None:
    """Every table cell, every element's content and every chart label fits where it is drawn (``LAYOUT_PROBLEMS``),
    on the release's page and on one whose trend chart has a date label at its right edge."""
    page = open_page(browser, request.getfixturevalue(folder), width, [])
    problems = page.evaluate(LAYOUT_PROBLEMS)
    assert not problems, f"{folder} at {width} px:\n" + "\n".join(problems)


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_public_page_passes_axe_core(release: Path, browser, width: int) -> None:
    from axe_playwright_python.sync_playwright import Axe

    page = open_page(browser, release, width, [])
    results = Axe().run(page)
    assert results.response["testEngine"]["name"] == "axe-core"
    serious = [v for v in results.response["violations"] if v["impact"] in SERIOUS]
    assert not serious, results.generate_report()


def test_the_accessibility_check_finds_a_planted_problem(release: Path, browser) -> None:
    """The check can fail: an image without alternative text and an unlabelled form field are critical."""
    from axe_playwright_python.sync_playwright import Axe

    page = open_page(browser, release, DESKTOP, [])
    page.evaluate("document.querySelector('main').insertAdjacentHTML('afterbegin', "
                  "'<svg role=\"img\" width=\"9\" height=\"9\"></svg><input type=\"text\">')")
    found = {v["id"] for v in Axe().run(page).response["violations"] if v["impact"] in SERIOUS}
    assert {"svg-img-alt", "label"} <= found, found
