"""The data location survives as a URI from the command line and the environment to every folder, and reading the
ledger never creates one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from upath import UPath

from opal_dp.defs.shared.storage import default_storage
from opal_dp.locations import DataLocation, resolve_data_dir
from opal_dp.settings import DATA_DIR_ENV, LEDGER_URL_ENV
from opal_dp.simulate.trips import generate_days

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opal_dp.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "OPAL_DP_WORKERS": "1", **(env or {})}, timeout=900)


def test_a_file_uri_is_the_local_folder_and_a_relative_path_becomes_absolute(tmp_path, monkeypatch):
    uri = tmp_path.as_uri()
    assert resolve_data_dir(uri) == uri  # kept as given, never <cwd>/file:/...
    assert DataLocation(data_dir=uri).root == tmp_path
    monkeypatch.chdir(tmp_path)
    assert resolve_data_dir("data") == str(tmp_path / "data")
    monkeypatch.setenv(DATA_DIR_ENV, uri)
    assert default_storage().raw_dir == tmp_path / "raw"


def test_a_given_folder_wins_over_the_environment_and_the_ledger_url_comes_from_it(tmp_path, monkeypatch):
    """``--data-dir`` (a caller's folder) over ``$OPAL_DP_DATA_DIR``; the ledger's URL is read with it, in one place."""
    monkeypatch.setenv(DATA_DIR_ENV, "memory://elsewhere")
    monkeypatch.setenv(LEDGER_URL_ENV, "postgresql://ledger.example/opal")
    location = DataLocation.resolved(tmp_path)
    assert location.root == tmp_path and location.ledger_location == "postgresql://ledger.example/opal"
    assert DataLocation.resolved().data_dir == "memory://elsewhere"


def test_another_filesystem_stays_on_it(monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, "memory://opal-test")
    storage = default_storage()
    assert isinstance(storage.private_dir, UPath) and storage.private_dir.protocol == "memory"
    assert str(storage.published_dir).startswith("memory://")


def test_ledger_show_on_an_empty_folder_creates_nothing(tmp_path):
    run = _cli("ledger", "--data-dir", str(tmp_path), "show")
    assert run.returncode != 0 and "no privacy ledger" in run.stderr
    assert list(tmp_path.iterdir()) == []  # no ledger, no private folder, no cap recorded


@pytest.mark.slow
@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_release_into_a_file_uri(tmp_path, how):
    """Before: Path(...).absolute() turned file:///<tmp> into <cwd>/file:/<tmp> and released there."""
    list(generate_days([date(2016, 8, 8)], tmp_path / "raw", seed=3, scale=0.001))
    uri = tmp_path.as_uri()
    args = ["release", "--privacy-unit", "trip", *(f"--without=2016-08-{d:02d}" for d in range(9, 15))] + (
        ["--data-dir", uri] if how == "flag" else [])  # one day, its week released without the others
    run = _cli(*args, env={DATA_DIR_ENV: uri} if how == "env" else {})
    assert run.returncode == 0, run.stderr[-2000:]
    latest = json.loads((tmp_path / "published" / "latest.json").read_text())
    assert (tmp_path / "published" / latest["folder"] / "privacy.json").exists()
    assert not (REPO / "file:").exists()
