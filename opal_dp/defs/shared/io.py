"""Parquet IO manager for private intermediates, one file per partition, multi-partition runs included.

Files are replaced atomically but not fsynced: an intermediate lost to an OS crash is recomputed.
The release store the ledger points at is written durably by the release engine.

Assets return a mapping {partition key: DataFrame}, so one run can materialise a whole backfill
(``BackfillPolicy.single_run``) and still store, and later load, each partition on its own. Inputs
load lazily: a downstream run over 56 partitions never holds more than the frames it is using.
"""


from collections.abc import Iterator, Mapping
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.storage import write_parquet_atomic


class PartitionFrames(Mapping[str, pd.DataFrame]):
    """Read-only, lazily loaded {partition key: DataFrame}."""

    def __init__(self, paths: Mapping[str, Path]):
        self._paths = dict(paths)

    def __getitem__(self, key: str) -> pd.DataFrame:
        return pd.read_parquet(self._paths[str(key)])

    def __contains__(self, key: object) -> bool:
        """Registered and materialised (a partition that was never written is not "in" the mapping)."""
        return str(key) in self._paths and self._paths[str(key)].exists()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def materialised(*frames: PartitionFrames) -> list[str]:
    """The partition keys (sorted) materialised in every one of ``frames``: what a roll-up can use when some
    registered partitions are late, failed or still running."""
    keys = set(frames[0])
    return sorted(k for k in keys if all(k in f for f in frames))


class PartitionedParquetIOManager(dg.IOManager):
    """Stores each partition at ``<root>/<asset key>/<dimension values...>.parquet``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, asset_key: dg.AssetKey, partition: str | None) -> Path:
        folder = self.root.joinpath(*asset_key.path)
        if partition is None:
            return folder.with_suffix(".parquet")
        *dirs, leaf = str(partition).split("|")
        return folder.joinpath(*dirs, f"{leaf}.parquet")

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        if not context.has_asset_partitions:
            if not isinstance(obj, pd.DataFrame):
                raise TypeError(f"{context.asset_key.to_user_string()}: expected a DataFrame, got {type(obj)}")
            write_parquet_atomic(obj, self._path(context.asset_key, None), durable=False)
            return
        keys = {str(k) for k in context.asset_partition_keys}
        if not isinstance(obj, Mapping) or {str(k) for k in obj} != keys:
            raise TypeError(
                f"{context.asset_key.to_user_string()}: expected a mapping with exactly the run's "
                f"partitions {sorted(keys)}, got {sorted(map(str, obj)) if isinstance(obj, Mapping) else type(obj)}"
            )
        for key, frame in obj.items():
            write_parquet_atomic(frame, self._path(context.asset_key, str(key)), durable=False)

    def load_input(self, context: dg.InputContext) -> pd.DataFrame | PartitionFrames:
        key = context.asset_key
        if not context.has_asset_partitions:
            return pd.read_parquet(self._path(key, None))
        return PartitionFrames({str(k): self._path(key, str(k)) for k in context.asset_partition_keys})


@dg.io_manager(required_resource_keys={"storage"},
               description="Private Parquet files under the storage resource's private folder.")
def private_parquet(init_context: dg.InitResourceContext) -> PartitionedParquetIOManager:
    """Resolved from the ``storage`` resource at run time, so the one storage setting moves everything."""
    storage: OpalStorage = init_context.resources.storage
    return PartitionedParquetIOManager(storage.private_dir)
