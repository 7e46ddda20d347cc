"""Private files and folders get exact modes whatever the umask; the start-up check warns or refuses."""

from __future__ import annotations

import os
import sqlite3
import stat

import pandas as pd
import pytest

from opal_dp import permissions, settings
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.secrets import load_or_create_secret
from opal_dp.permissions import (
    PUBLIC_DIR, PUBLIC_FILE, ExposedDataError, check_folders, create_file, exposed, make_dirs, private_umask,
    reserve_private,
)
from opal_dp.private_files import write_parquet_atomic, write_parquet_exclusive


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def forget_warnings(monkeypatch):
    monkeypatch.setattr(permissions, "_warned", set())


def test_make_dirs_gives_every_new_folder_the_mode_and_leaves_existing_ones(tmp_path, umask_022):
    (tmp_path / "old").mkdir(mode=0o755)
    make_dirs(tmp_path / "old" / "a" / "b")
    assert [mode(tmp_path / p) for p in ("old", "old/a", "old/a/b")] == [0o755, 0o700, 0o700]
    with private_umask():
        make_dirs(tmp_path / "pub" / "lic", PUBLIC_DIR)
    assert [mode(tmp_path / p) for p in ("pub", "pub/lic")] == [0o755, 0o755]


def test_create_file_has_the_exact_mode_and_never_opens_an_existing_file_or_link(tmp_path, umask_022):
    os.close(create_file(tmp_path / "secret"))
    assert mode(tmp_path / "secret") == 0o600
    with private_umask():
        os.close(create_file(tmp_path / "public", PUBLIC_FILE))
    assert mode(tmp_path / "public") == 0o644
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    for existing in ("secret", "link"):
        with pytest.raises(FileExistsError):
            create_file(tmp_path / existing)
    assert not (tmp_path / "elsewhere").exists()


def test_reserve_private_creates_a_private_empty_file_and_leaves_an_existing_one(tmp_path, umask_022):
    assert reserve_private(tmp_path / "new").read_bytes() == b""
    assert mode(tmp_path / "new") == 0o600
    (tmp_path / "kept").write_text("data")
    reserve_private(tmp_path / "kept")
    assert (tmp_path / "kept").read_text() == "data" and mode(tmp_path / "kept") == 0o644


def test_private_umask_is_restored(umask_022):
    with private_umask():
        assert os.umask(0o077) == 0o077
    assert os.umask(0o022) == 0o022


def test_parquet_intermediates_and_draws_are_private(tmp_path, umask_022):
    frame = pd.DataFrame({"count": [1, 2]})
    write_parquet_atomic(frame, tmp_path / "private" / "asset" / "2016-07-25.parquet", durable=False)
    write_parquet_exclusive(frame, tmp_path / "private" / "releases" / "1.parquet")
    for folder in ("private", "private/asset", "private/releases"):
        assert mode(tmp_path / folder) == 0o700
    assert mode(tmp_path / "private/asset/2016-07-25.parquet") == mode(tmp_path / "private/releases/1.parquet") == 0o600


def test_ledger_its_wal_and_the_secret_are_private(tmp_path, umask_022):
    ledger = PrivacyLedger(tmp_path / "private" / "ledger.sqlite", {"trip": (8.0, 1e-6)})
    with sqlite3.connect(ledger.location) as conn:  # while open, SQLite keeps its -wal and -shm files
        conn.execute("SELECT count(*) FROM charges").fetchone()
        files = sorted(p.name for p in (tmp_path / "private").iterdir())
        assert files == ["ledger.sqlite", "ledger.sqlite-shm", "ledger.sqlite-wal"]
        assert {mode(tmp_path / "private" / f) for f in files} == {0o600}
    load_or_create_secret(tmp_path / "keys" / "secret.key")
    assert (mode(tmp_path / "keys"), mode(tmp_path / "keys" / "secret.key")) == (0o700, 0o600)


def test_exposed_names_each_readable_folder_and_the_fix(tmp_path):
    for name, folder_mode in [("raw", 0o755), ("private", 0o700), ("home", 0o710)]:
        (tmp_path / name).mkdir()
        os.chmod(tmp_path / name, folder_mode)
    found = exposed([tmp_path / "raw", tmp_path / "private", tmp_path / "home", tmp_path / "missing"])
    assert list(found) == [tmp_path / "raw", tmp_path / "home"]
    assert f"chmod -R go-rwx {tmp_path / 'raw'}" in found[tmp_path / "raw"] and "mode 0755" in found[tmp_path / "raw"]


def test_check_warns_once_per_folder_and_refuses_under_strict(tmp_path, capsys):
    (tmp_path / "raw").mkdir(mode=0o755)
    os.chmod(tmp_path / "raw", 0o755)
    assert len(check_folders([tmp_path / "raw"])) == 1
    assert len(check_folders([tmp_path / "raw"])) == 1
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"chmod -R go-rwx {tmp_path / 'raw'}" in err
    with pytest.raises(ExposedDataError, match=r"refusing to run .*" + str(tmp_path / "raw")):
        check_folders([tmp_path / "raw"], strict=True)
    os.chmod(tmp_path / "raw", 0o700)
    assert check_folders([tmp_path / "raw"], strict=True) == []


@pytest.mark.parametrize("value, strict", [("", False), ("0", False), ("1", True), ("TRUE", True), ("no", False)])
def test_strict_setting(monkeypatch, value, strict):
    monkeypatch.setenv(settings.STRICT_PERMISSIONS_ENV, value)
    assert settings.strict_permissions_from_env() is strict


def test_a_bad_strict_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(settings.STRICT_PERMISSIONS_ENV, "maybe")
    with pytest.raises(ValueError, match="OPAL_DP_STRICT_PERMISSIONS must be"):
        settings.strict_permissions_from_env()
