"""Parquet IO manager for private intermediates, one file per piece, multi-partition runs included.

A piece is a service date's share of a partition (``partitions.pieces``): a day is its own piece, a week's asset
stores one piece per date, a (week, mode) asset one per (date, mode), the published layout's unit. Files are
replaced atomically but not fsynced: an intermediate lost to an OS crash is recomputed. The release store the
ledger points at is written durably by the release engine.

Assets return a mapping {piece: DataFrame}, so one run can materialise a whole backfill
(``BackfillPolicy.single_run``) and still store, and later load, each piece on its own. Inputs load lazily: a
downstream run over many weeks never holds more than the frames it is using, and iterates only the pieces that
are stored. A step that streams (one day at a time, in worker processes: ``opal_dp.parallel``) writes each piece
through the same ``PartitionStore`` as soon as it is computed and returns ``StoredPartitions``: then nothing is
held until the step ends, and memory does not grow with the number of days.
"""


from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.partitions import pieces
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.private_files import PartitionStore


class PartitionFrames(Mapping[str, pd.DataFrame]):
    """Read-only {piece: DataFrame}: a frame is read when asked for, and the pieces are listed only when the mapping
    is iterated or counted: those of its partitions that are stored. A roll-up takes ten partitioned inputs and
    iterates one of them, so the other nine are never listed. A piece is "in" the mapping when its file is
    materialised."""

    def __init__(self, path_of: Callable[[str], Path], keys: Callable[[], Iterable[str]],
                 stored: Callable[[], set[str] | None] = lambda: None):
        """``stored``: the keys that have a file, listed at once (``PartitionStore.stored``), or None: ask each."""
        self._path_of, self._list, self._stored, self._keys = path_of, keys, stored, None

    @classmethod
    def of_paths(cls, paths: Mapping[str, Path]) -> PartitionFrames:
        """The frames stored at ``paths`` (partition key -> file)."""
        known = {str(k): Path(p) for k, p in paths.items()}
        return cls(known.__getitem__, known.keys)

    def __getitem__(self, key: str) -> pd.DataFrame:
        if key not in self:
            raise KeyError(key)
        return pd.read_parquet(self.path(key))

    def path(self, key: str) -> Path:
        """Where the partition is stored (for a worker process that reads it itself)."""
        return self._path_of(str(key))

    def __contains__(self, key: object) -> bool:
        """Materialised: a partition that was never written is not "in" the mapping."""
        try:
            return self.path(str(key)).exists()
        except KeyError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._registered())

    def __len__(self) -> int:
        return len(self._registered())

    def _registered(self) -> list[str]:
        if self._keys is None:
            stored = self._stored()
            self._keys = sorted(k for k in map(str, self._list()) if (k in stored if stored is not None else k in self))
        return self._keys


class StoredPartitions(dict):
    """{partition key: path} of partitions a step has already written through the ``PartitionStore``."""


def stored(storage: OpalStorage, asset: str, keys: list[str]) -> StoredPartitions:
    """Where a streaming step stores each of its partitions of ``asset`` (the IO manager's places; what the step
    then returns)."""
    store = PartitionStore(Path(storage.private_dir))
    return StoredPartitions({key: store.path((asset,), key) for key in keys})


def materialised(*frames: PartitionFrames) -> list[str]:
    """The partition keys (sorted) materialised in every one of ``frames``: what a roll-up can use when some
    registered partitions are late, failed or still running."""
    keys = set(frames[0])
    return sorted(k for k in keys if all(k in f for f in frames))


def _pieces(partitions_def: dg.PartitionsDefinition, keys: Iterable[str]) -> list[str]:
    return [piece for key in keys for piece in pieces(partitions_def, str(key))]


class PartitionedParquetIOManager(dg.IOManager):
    """Stores each piece at its ``PartitionStore`` path."""

    def __init__(self, root: Path) -> None:
        self.store = PartitionStore(Path(root))

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        asset = context.asset_key.path
        if not context.has_asset_partitions:
            if not isinstance(obj, pd.DataFrame):
                raise TypeError(f"{context.asset_key.to_user_string()}: expected a DataFrame, got {type(obj)}")
            self.store.write(asset, None, obj)
            return
        keys = set(_pieces(context.asset_partitions_def, context.asset_partition_keys))
        if not isinstance(obj, Mapping) or not {str(k) for k in obj} <= keys:
            raise TypeError(
                f"{context.asset_key.to_user_string()}: expected a mapping of pieces of the run's partitions "
                f"{sorted(keys)}, got {sorted(map(str, obj)) if isinstance(obj, Mapping) else type(obj)}"
            )
        if isinstance(obj, StoredPartitions):
            missing = [k for k in sorted(obj) if obj[k] != self.store.path(asset, k) or not obj[k].exists()]
            if missing:
                raise RuntimeError(f"{context.asset_key.to_user_string()}: partitions {missing} were not stored")
            return
        for key, frame in obj.items():
            self.store.write(asset, str(key), frame)

    def load_input(self, context: dg.InputContext) -> pd.DataFrame | PartitionFrames:
        key = context.asset_key.path
        if not context.has_asset_partitions:
            return pd.read_parquet(self.store.path(key, None))
        return PartitionFrames(lambda k: self.store.path(key, k),
                               lambda: _pieces(context.asset_partitions_def, context.asset_partition_keys),
                               lambda: self.store.stored(key))


@dg.io_manager(required_resource_keys={"storage"},
               description="Private Parquet files under the storage resource's private folder.")
def private_parquet(init_context: dg.InitResourceContext) -> PartitionedParquetIOManager:
    """Resolved from the ``storage`` resource at run time, so the one storage setting moves everything."""
    storage: OpalStorage = init_context.resources.storage
    return PartitionedParquetIOManager(storage.private_dir)
