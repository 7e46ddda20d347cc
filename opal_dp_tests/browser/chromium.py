"""Debian's Chromium driven by Playwright (which cannot download its browsers here): where it is, how to launch
it, the marks of a browser test, and where screenshots go (``test-artifacts/`` at the repository root).

Outside CI a browser test skips when /usr/bin/chromium or Playwright is missing; in CI (env ``CI`` set) it
always runs. Importing this module skips the importing test module when Playwright is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opal_dp_tests.browser.dagster_dev import REPO_ROOT

CHROMIUM = Path(os.environ.get("OPAL_DP_CHROMIUM", "/usr/bin/chromium"))
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO_ROOT / "test-artifacts"

BROWSER_MARKS = [pytest.mark.browser, pytest.mark.slow]
if not CHROMIUM.exists() and not IN_CI:
    BROWSER_MARKS.append(
        pytest.mark.skip(
            reason=f"{CHROMIUM} not found (apt-get install -y chromium); this test is required when CI is set"
        )
    )

try:
    from playwright.sync_api import Page, expect, sync_playwright  # noqa: F401 - re-exported
except ImportError:  # pragma: no cover - the [test] extra installs it
    if IN_CI:
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)


def require_chromium() -> None:
    """Fail (in CI, where the test is not skipped) if Chromium is missing."""
    if not CHROMIUM.exists():
        pytest.fail(f"CI is set but {CHROMIUM} is missing: install it (apt-get install -y chromium)")


def screenshot(page: Page, name: str, full_page: bool = False) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    return path
