"""The storage resource: local paths and URIs, and where the ledger is."""

from __future__ import annotations

from pathlib import Path

import pytest
from upath import UPath

from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.locations import LEDGER_FILE


def test_local_paths_and_file_uris_are_the_same_plain_local_folder(tmp_path):
    for data_dir in (str(tmp_path), f"file://{tmp_path}"):
        storage = OpalStorage(data_dir=data_dir)
        assert type(storage.private_dir) is type(tmp_path) and storage.private_dir == tmp_path / "private"
        assert storage.ledger_location == tmp_path / "private" / LEDGER_FILE


def test_other_uris_are_universal_paths_on_their_filesystem():
    storage = OpalStorage(data_dir="memory://opal/data")
    assert isinstance(storage.published_dir, UPath) and not isinstance(storage.published_dir, Path)
    assert (storage.published_dir.protocol, storage.published_dir.path) == ("memory", "/opal/data/published")


def test_the_ledger_url_must_be_postgres(tmp_path):
    url = "postgresql://opal@db.internal/opal"
    assert OpalStorage(data_dir=str(tmp_path), ledger_url=url).ledger_location == url
    with pytest.raises(Exception, match="ledger_url must be a postgresql:// URI"):
        OpalStorage(data_dir=str(tmp_path), ledger_url="sqlite:///x.db")
