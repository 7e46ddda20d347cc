"""The Dagster UI in a real browser: every stage is in the lineage graph; after a release on its instance the
publication's page shows the person account as numbers and the publication gate's checks, and a release asset's
page each checked property by name; several days of the first stage are materialised from the UI as the data team
does it (a backfill of a date range, one machine's default executor: the steps in the run's process, the per-day
worker processes under it) and the run finishes.

Runs ``dagster dev`` on a throwaway instance (temp DAGSTER_HOME, temp OPAL_DP_DATA_DIR holding one
small raw day) and drives Debian's Chromium through Playwright. Screenshots land in
``test-artifacts/`` at the repository root. Outside CI the test skips when /usr/bin/chromium is
missing (``apt-get install -y chromium``); in CI (env ``CI`` set) it always runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import date

import pandas as pd
import pytest

from opal_dp_tests.browser.chromium import (
    ARTIFACTS,
    BROWSER_MARKS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Page,
    expect,
    require_chromium,
    screenshot,
    sync_playwright,
)
from opal_dp.defs.marginals.gate_checks import GATE_CHECKS
from opal_dp.release.marginals.checks import DESIGN_CHECKS
from opal_dp_tests.browser.dagster_dev import AUTOMATION_TAGS, REPO_ROOT, DagsterDev, write_raw_day
from opal_dp_tests.conftest import other_days

SERVICE_DAYS = [date(2016, 7, 25), date(2016, 7, 26), date(2016, 7, 27)]
RELEASED_DAYS = [date(2016, 8, 1), date(2016, 8, 2)]  # another week: the UI's backfill of SERVICE_DAYS is unaffected
FIRST_STAGE_ASSET = "ingested_trips"  # group "ingest", partitioned by service date (daily time windows)
RUN_TIMEOUT_S = 300  # a backfill run: its steps in the run's process (the default executor), workers under it
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
UI_STOP_S = 15  # the UI and everything it started, after SIGTERM

pytestmark = BROWSER_MARKS


def defined_groups() -> set[str]:
    """Every asset group in ``opal_dp.definitions``: the stages the graph must show."""
    from opal_dp.definitions import defs

    return {node.group_name for node in defs().resolve_asset_graph().asset_nodes}


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory: pytest.TempPathFactory):
    require_chromium()  # only reachable in CI (skipped otherwise)
    root = tmp_path_factory.mktemp("dagster_ui")
    data_dir = root / "data"
    for day in SERVICE_DAYS:
        write_raw_day(data_dir / "raw", day)
    server = DagsterDev(home=root / "dagster_home", data_dir=data_dir, log_path=root / "dagster_dev.log")
    server.prepare_instance()
    _release_a_week_before(server.home, root / "released")
    server.start()
    try:
        server.wait_ready(timeout=120)
    except Exception as err:
        server.stop()
        pytest.fail(f"dagster dev did not come up: {err}\n--- dagster dev log (tail) ---\n{server.log_tail()}")
    try:
        yield server
    finally:
        if server.proc is not None:
            seconds = server.terminate()  # as `kill` or a service manager stops it
            assert seconds < UI_STOP_S, f"make ui still ran {seconds:.0f} s after SIGTERM:\n{server.log_tail()}"


def _release_a_week_before(home, data_dir) -> None:
    """A release on the UI's instance before it starts (the command line, the week of ``RELEASED_DAYS`` without its
    other days, its own data directory): its runs, metadata and checks are what the asset pages show."""
    for day in RELEASED_DAYS:
        write_raw_day(data_dir / "raw", day)
    others = [f"--without={d}" for d in other_days(day.isoformat() for day in RELEASED_DAYS)]
    done = subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--data-dir", str(data_dir), *others],
                          env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True, text=True, timeout=600,
                          cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def _check_asset_pages(page: Page, server: DagsterDev) -> None:
    """The person account's numbers on the publication's page, and each check by name: the publication gate's on
    ``published_release``, each property on a release asset."""
    page.goto(f"{server.url}/assets/published_release?view=events")
    for name in ("person_epsilon_spent", "person_share_of_cap", "person_epsilon_remaining"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    screenshot(page, "ui_publication_person_account")
    page.goto(f"{server.url}/assets/published_release?view=checks")
    for name in GATE_CHECKS:
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    screenshot(page, "ui_publication_gate_checks")
    page.goto(f"{server.url}/assets/release/tap_on_time?view=checks")
    for name in (*DESIGN_CHECKS["sbh"], "plausible_totals"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    screenshot(page, "ui_release_checks")


def _dismiss_community_modal(page: Page) -> None:
    """A fresh instance greets localhost with a "Join the Dagster community" dialog (after 1 s).

    Mark it dismissed in the browser up front (the UI's own ``communityNux`` localStorage flag) so
    that it can't pop up over a screenshot; the locator handler covers any version that ignores it.
    """
    page.add_init_script("window.localStorage.setItem('communityNux', JSON.stringify('1'))")

    def skip() -> None:
        print("community modal: skipped by the locator handler")
        page.get_by_role("button", name=re.compile(r"^Skip$")).click()

    page.add_locator_handler(page.get_by_text("Join the Dagster community"), skip)


def _no_community_modal(page: Page) -> None:
    # Runs the locator handler if the modal is up, then waits until it is gone.
    expect(page.get_by_text("Join the Dagster community")).to_be_hidden(timeout=15_000)


def _check_lineage_graph(page: Page, server: DagsterDev, groups: set[str]) -> None:
    page.goto(f"{server.url}/asset-groups")
    expect(page.get_by_text("Global asset lineage")).to_be_visible(timeout=30_000)
    graph = page.locator("svg")  # the graph canvas; the sidebar tree is not an svg
    for group in sorted(groups):
        expect(graph.get_by_text(group, exact=True).first, f"stage {group!r} in the lineage graph").to_be_visible(
            timeout=30_000
        )
    _no_community_modal(page)
    screenshot(page, "ui_asset_lineage")


def _launch_days(page: Page, server: DagsterDev, asset: str, first: str, last: str) -> None:
    page.goto(f"{server.url}/assets/{asset}")
    # The accessible name carries the icon's text ("materialization Materialize…").
    page.get_by_role("button", name=re.compile(r"(^|\s)Materialize…?$")).first.click()

    launch = page.get_by_role("dialog").filter(has_text=re.compile(r"Launch runs? to materialize"))
    extra = page.get_by_role("dialog").filter(has_text="Additional assets will be materialized")
    expect(launch.or_(extra)).to_be_visible(timeout=30_000)
    if extra.is_visible():  # ingest is a non-subsettable multi-asset: the day's other assets come along
        extra.get_by_role("button", name="Confirm").click()
    expect(launch).to_be_visible(timeout=30_000)
    show_all = launch.get_by_text("Show all partitions")  # 2016 is outside the last 90 days it offers first
    expect(show_all).to_be_visible(timeout=30_000)
    show_all.click()
    expect(show_all).to_be_hidden(timeout=10_000)
    selection = launch.get_by_role("textbox").first
    selection.fill(f"[{first}...{last}]")
    selection.press("Enter")
    expect(launch.get_by_text("3 partitions", exact=True)).to_be_visible(timeout=10_000)
    screenshot(page, "ui_launch_days")
    launch.get_by_role("button", name=re.compile(r"^Launch (backfill|3 runs?)$")).click()
    expect(launch).to_be_hidden(timeout=30_000)


def _wait_for_ui_runs(server: DagsterDev, before: set[str]) -> list[dict]:
    """The runs the UI launched (new, not started by a sensor, schedule or automation: those stay queued on this
    instance, see ``dagster_dev.instance_yaml``), once every one of them has ended."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    ours: list[dict] = []
    while time.monotonic() < deadline:
        ours = [r for r in server.runs() if r["runId"] not in before
                and not {t["key"] for t in r["tags"]} & set(AUTOMATION_TAGS)]
        if ours and all(r["status"] in TERMINAL for r in ours):
            return ours
        time.sleep(1.0)
    raise AssertionError(f"the UI's runs did not finish after {RUN_TIMEOUT_S} s: {ours}")


def test_lineage_graph_and_several_days_materialised_from_the_ui(dagster_ui: DagsterDev) -> None:
    server = dagster_ui
    groups = defined_groups()
    served = {node["groupName"] for node in server.graphql("{ assetNodes { groupName } }")["assetNodes"]}
    assert served == groups, f"dagster dev serves groups {sorted(served)}, definitions have {sorted(groups)}"
    days = [day.isoformat() for day in SERVICE_DAYS]
    written = [server.data_dir / "private" / FIRST_STAGE_ASSET / f"{day}.parquet" for day in days]
    assert not any(path.exists() for path in written)
    before = {r["runId"] for r in server.runs()}
    (ARTIFACTS / "ui_failure.png").unlink(missing_ok=True)  # only a failure of this run leaves one

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(30_000)
            _dismiss_community_modal(page)
            try:
                _check_lineage_graph(page, server, groups)
                _check_asset_pages(page, server)
                _launch_days(page, server, FIRST_STAGE_ASSET, days[0], days[-1])
                runs = _wait_for_ui_runs(server, before)
                assert all(r["status"] == "SUCCESS" for r in runs), [(r["runId"], r["status"]) for r in runs]
                run = runs[0]

                page.goto(f"{server.url}/runs/{run['runId']}")
                expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=30_000)
                expect(page.get_by_text(re.compile(r"Finished execution of run")).first).to_be_visible(
                    timeout=30_000
                )
                _no_community_modal(page)
                screenshot(page, "ui_run_success")
            except Exception as err:
                try:
                    screenshot(page, "ui_failure")
                except Exception:  # noqa: BLE001 - the original error matters more
                    pass
                raise AssertionError(
                    f"{type(err).__name__}: {err}\n--- dagster dev log (tail) ---\n{server.log_tail()}"
                ) from err
        finally:
            browser.close()

    assert [FIRST_STAGE_ASSET] in [key["path"] for key in run["assetSelection"] or []], run
    automated = [r for r in server.runs() if {t["key"] for t in r["tags"]} & set(AUTOMATION_TAGS)]
    assert all(r["status"] == "QUEUED" for r in automated), f"automation runs should stay queued: {automated}"
    for path in written:
        assert path.is_file(), f"{path} missing; private/ holds {sorted(server.data_dir.rglob('*.parquet'))}"
        assert len(pd.read_parquet(path)) > 0
