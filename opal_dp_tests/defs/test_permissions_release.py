"""Acceptance: `make release`'s path under the usual umask 022 leaves raw data, private data, the ledger and
the Dagster home readable by their owner only, and the published release readable by everyone; the
start-up check warns about, or refuses, a raw folder others can read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from opal_dp.cli import ensure_dagster_home, main
from opal_dp.settings import STRICT_PERMISSIONS_ENV
from opal_dp.simulate.trips import generate_days
from opal_dp_tests.conftest import other_days
from opal_dp_tests.defs.conftest import DAYS, SCALE

pytestmark = pytest.mark.slow


def modes(root: Path) -> dict[str, int]:
    """{path relative to ``root``: permission bits} of ``root`` and everything under it, links excepted."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink():
                found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def wrong(root: Path, folder_mode: int, file_mode: int) -> dict[str, str]:
    return {p: oct(m) for p, m in modes(root).items()
            if m != (folder_mode if (root / p).is_dir() else file_mode)}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """(data dir, Dagster home) after the sample generator, `dagster-home` and `release`, all under umask 022."""
    previous = os.umask(0o022)
    try:
        root = tmp_path_factory.mktemp("umask022")
        data, home = root / "data", root / "dagster_home"
        data.mkdir()  # as in a checkout: data/ exists and is 0755
        list(generate_days(DAYS, data / "raw", seed=7, scale=SCALE))
        main(["dagster-home", str(home)])
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DAGSTER_HOME", str(home))
            patch.delenv(STRICT_PERMISSIONS_ENV, raising=False)
            main(["release", "--data-dir", str(data), "--privacy-unit", "trip",
                  *(f"--without={d}" for d in other_days(d.isoformat() for d in DAYS))])
        yield data, home
    finally:
        os.umask(previous)


def test_raw_private_ledger_and_dagster_home_are_the_owners_only(released):
    data, home = released
    private = modes(data / "private")
    assert {"ledger.sqlite", "secret.key", "releases", "logs"} <= {p.split("/")[0] for p in private}
    assert any(p.startswith("reports/") for p in private) and any(p.endswith(".parquet") for p in private)
    assert {"dagster.yaml", "history"} <= set(modes(home))  # Dagster's own storage is there too
    assert len(modes(data / "raw")) == 1 + len(DAYS)
    for root in (data / "raw", data / "private", home):
        assert wrong(root, 0o700, 0o600) == {}, root


def test_published_release_is_world_readable(released):
    data, _ = released
    published = data / "published"
    assert (published / "latest" / "privacy.json").exists()
    assert wrong(published, 0o755, 0o644) == {}


@pytest.fixture
def exposed_raw(tmp_path, monkeypatch):
    """A data dir whose raw folder others can read, with no raw file (a run stops right after the check)."""
    (tmp_path / "raw").mkdir()
    os.chmod(tmp_path / "raw", 0o755)
    monkeypatch.setenv("DAGSTER_HOME", str(ensure_dagster_home(tmp_path / "home")))
    monkeypatch.delenv(STRICT_PERMISSIONS_ENV, raising=False)
    monkeypatch.setattr("opal_dp.permissions._warned", set())
    return tmp_path


def test_a_world_readable_raw_folder_is_warned_about(exposed_raw, capsys):
    with pytest.raises(SystemExit, match="no raw files"):
        main(["release", "--data-dir", str(exposed_raw)])
    err = capsys.readouterr().err
    assert f"warning: {exposed_raw / 'raw'} holds private data" in err
    assert f"fix: chmod -R go-rwx {exposed_raw / 'raw'}" in err


@pytest.mark.parametrize("how", ["flag", "setting"])
def test_strict_refuses_to_run(exposed_raw, monkeypatch, how):
    if how == "setting":
        monkeypatch.setenv(STRICT_PERMISSIONS_ENV, "1")
    with pytest.raises(SystemExit, match=f"refusing to run .*{exposed_raw / 'raw'}.*chmod -R go-rwx") as refused:
        main(["release", "--data-dir", str(exposed_raw)] + (["--strict"] if how == "flag" else []))
    assert "no raw files" not in str(refused.value)
    assert not (exposed_raw / "private").exists()
