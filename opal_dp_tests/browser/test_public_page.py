"""The public page of a real release in a real browser: after a small end-to-end release (one synthetic day,
raw file -> published), ``index.html`` opened over file:// shows its guarantee, charts and map, its links
resolve to the release's files, and it requests nothing but itself. Screenshot: test-artifacts/public-page.png.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from urllib.parse import unquote, urlparse

import dagster as dg
import pandas as pd
import pytest

from opal_dp.release.publish import LATEST, files_of
from opal_dp.release.site import PAGE
from opal_dp.settings import DATA_DIR_ENV
from opal_dp.simulate.trips import generate_days
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
SCALE = 0.01  # about 2,000 trips: every mode gets published counts


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The folder of a release published end to end from one synthetic raw day."""
    from opal_dp.cli import run_release

    root = tmp_path_factory.mktemp("public-page")
    list(generate_days([date(2016, 7, 25)], root / "raw", seed=11, scale=SCALE))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(DATA_DIR_ENV, str(root))
        run_release(dg.DagsterInstance.ephemeral(), data_dir=root, log_file=root / "runs.log")
    return (root / "published" / LATEST).resolve()


def test_public_page_is_self_contained_and_shows_the_release(release: Path) -> None:
    require_chromium()
    statement = json.loads((release / "privacy.json").read_text(encoding="utf-8"))
    time = pd.read_csv(release / "time.csv", dtype=str)
    modes = sorted(set(time.loc[time["tap"] == "on", "mode"]))  # modes with a published tap-on count
    assert modes, "the release published no tap-on time counts: raise SCALE"
    url = (release / PAGE).as_uri()
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1000, "height": 900})
            context.on("request", lambda request: requests.append(request.url))
            context.route("http*://**", lambda route: route.abort())  # nothing may go out, even if asked
            page = context.new_page()
            page.goto(url)

            guarantee = page.locator("p.guarantee")
            expect(guarantee).to_be_visible()
            expect(guarantee).to_contain_text(f"protect {statement['privacy_unit']['protects']}")
            expect(guarantee).to_contain_text(f"epsilon = {statement['guarantee']['epsilon']:.4g}")
            expect(guarantee).to_contain_text(f"delta = {statement['guarantee']['delta']:.3g}")
            charts = page.locator("svg.time-chart")
            expect(charts).to_have_count(len(modes))
            for mode in modes:
                chart = page.locator(f"svg#time-{mode}")
                expect(chart).to_be_visible()
                assert chart.locator("rect").count() > 0, f"no bars for {mode}"
                expect(page.locator(f"table#top-{mode}")).to_be_visible()
            assert page.locator("path.error-bars").count() == len(modes)
            site_map = page.locator("svg.map")
            expect(site_map).to_be_visible()
            assert site_map.locator("circle").count() > 0
            box = site_map.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100

            hrefs = page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
            targets = {Path(unquote(urlparse(href).path)) for href in hrefs}
            assert {t.name for t in targets} == set(files_of(statement)) - {PAGE}
            assert all(t.parent == release and t.is_file() for t in targets), targets
            screenshot(page, "public-page", full_page=True)
        finally:
            browser.close()
    assert requests == [url], f"the page requested more than itself: {requests}"
