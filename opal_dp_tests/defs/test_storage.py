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


def test_partition_frames_list_their_keys_only_when_iterated_and_hold_only_what_is_materialised(tmp_path):
    """A roll-up's partitioned inputs must not ask Dagster for every key of the history unless iterated (its cost
    grows with the history), and a piece of a partition without a file is neither "in" the frames nor listed: a
    week's asset lists the days it stored, never every week since the first date."""
    import pandas as pd

    from opal_dp.defs.shared.io import PartitionFrames, materialised

    for key in ("2016-07-25|bus", "2016-07-26|bus"):
        pd.DataFrame({"n": [1]}).to_parquet(tmp_path / f"{key.replace('|', '_')}.parquet")
    listed = []

    def keys():
        listed.append(1)
        return ["2016-07-26|bus", "2016-07-25|bus", "2016-07-27|bus"]

    frames = PartitionFrames(lambda k: tmp_path / f"{k.replace('|', '_')}.parquet", keys)
    assert "2016-07-25|bus" in frames and "2016-07-27|bus" not in frames
    assert frames["2016-07-26|bus"]["n"].tolist() == [1] and not listed
    with pytest.raises(KeyError):
        frames["2016-07-27|bus"]
    assert list(frames) == ["2016-07-25|bus", "2016-07-26|bus"] and len(frames) == 2
    assert listed == [1]
    other = PartitionFrames.of_paths({"2016-07-25|bus": tmp_path / "2016-07-25_bus.parquet"})
    assert materialised(frames, other) == ["2016-07-25|bus"] and "2016-07-26|bus" not in other


def test_the_stored_partitions_are_listed_at_once_and_are_those_whose_file_exists(tmp_path):
    """``PartitionStore.stored`` inverts ``path`` (a writer's temporary file is not a partition), so the IO manager's
    frames list their stored pieces from one walk and give what asking each path gives."""
    import pandas as pd

    from opal_dp.defs.shared.io import PartitionFrames
    from opal_dp.private_files import PartitionStore

    store, asset = PartitionStore(tmp_path), ("release", "tap_on_time")
    for key in ("2016-07-25|bus", "2016-07-25|train", "2016-07-26|ferry"):
        store.write(asset, key, pd.DataFrame({"n": [1]}))
    store.write(("trips",), "2016-07-25", pd.DataFrame({"n": [1]}))
    (store.path(asset, "2016-07-27|bus").parent / ".bus.parquet.123.tmp").parent.mkdir(parents=True)
    (store.path(asset, "2016-07-27|bus").parent / ".bus.parquet.123.tmp").write_bytes(b"half")
    assert store.stored(asset) == {"2016-07-25|bus", "2016-07-25|train", "2016-07-26|ferry"}
    assert store.stored(("trips",)) == {"2016-07-25"} and store.stored(("missing",)) == set()
    registered = [f"{day}|{mode}" for day in ("2016-07-25", "2016-07-26", "2016-07-27")
                  for mode in ("bus", "ferry", "train")]
    listed = PartitionFrames(lambda k: store.path(asset, k), lambda: registered, lambda: store.stored(asset))
    asked = PartitionFrames(lambda k: store.path(asset, k), lambda: registered)
    assert list(listed) == list(asked) == ["2016-07-25|bus", "2016-07-25|train", "2016-07-26|ferry"]
