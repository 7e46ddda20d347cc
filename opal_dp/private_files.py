"""Private Parquet files written atomically: a reader (or a crash) never sees half a file; folders 0700, files 0600.

Paths are local ``pathlib`` paths, or universal-pathlib paths on any fsspec filesystem (``OpalStorage``):
there an object is written whole when it is closed, and an exclusive write is the filesystem's exclusive
create (``open(..., "xb")``), which refuses to replace an object; a filesystem without it raises rather
than risk two draws at one place. Permissions are the filesystem's (bucket policies, ACLs).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opal_dp.permissions import make_dirs, reserve_private

_TEMPORARY = re.compile(r"^\..+\.(?P<pid>\d+)\.tmp$")


def write_parquet_atomic(frame: pd.DataFrame, path: Path, durable: bool = True, grouped_by: str | None = None) -> None:
    """Write next to ``path`` then rename over it: a killed process never leaves half a file.

    ``durable`` also fsyncs before the rename, so the file survives an OS crash or power loss too:
    needed for what the privacy ledger points at, not for intermediates that can be recomputed.
    ``grouped_by``: a categorical column; the rows are stored in the order of its categories (stably, so each
    value's rows keep their order), one row group per value with that column's statistics, so that
    ``read_parquet_group`` reads one value's rows without the others.
    """
    if not isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            handle.write(_parquet_bytes(frame, grouped_by))
        return
    tmp = _write_temporary(frame, path, durable, grouped_by)
    os.replace(tmp, path)


def read_parquet_group(path: Path, column: str, value: str) -> pd.DataFrame:
    """The rows of ``path`` whose ``column`` is ``value``, as a filtered ``pd.read_parquet`` gives them: only the
    value's row groups when the file was written ``grouped_by`` that column (every row group's statistics name one
    value), else (and when there are no such rows: a filtered read keeps the categories) a filtered read of the
    whole file."""
    with path.open("rb") as handle:
        file = pq.ParquetFile(handle)
        index = file.schema_arrow.get_field_index(column)
        stats = [file.metadata.row_group(i).column(index).statistics for i in range(file.metadata.num_row_groups)]
        if all(s is not None and s.has_min_max and s.min == s.max for s in stats):
            groups = [i for i, s in enumerate(stats) if s.min == value]
            if groups:
                return file.read_row_groups(groups).to_pandas()
    return pd.read_parquet(path, filters=[(column, "==", value)])


class PartitionStore:
    """Where private intermediates live: ``<root>/<asset key...>/<partition dimensions...>.parquet``, one file per
    partition (``<root>/<asset key...>.parquet`` for an unpartitioned asset). The Dagster IO manager and the
    per-day workers (``opal_dp.parallel``) both read and write through it, so a worker can store its day itself."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, asset: Sequence[str], partition: str | None = None) -> Path:
        folder = self.root.joinpath(*asset)
        if partition is None:
            return folder.with_suffix(".parquet")
        *dirs, leaf = str(partition).split("|")
        return folder.joinpath(*dirs, f"{leaf}.parquet")

    def stored(self, asset: Sequence[str]) -> set[str] | None:
        """The partitions of ``asset`` that have a file (``path``'s inverse), from one walk of its folder instead of a
        question per partition; ``None`` off the local disk (an fsspec store: ask ``path(...).exists()``)."""
        folder = self.root.joinpath(*asset)
        if not isinstance(folder, Path):
            return None
        found = set()
        for where, _, files in os.walk(folder):
            dirs = Path(where).relative_to(folder).parts
            found.update("|".join((*dirs, name.removesuffix(".parquet"))) for name in files
                         if name.endswith(".parquet") and not name.startswith("."))  # not a writer's temporary
        return found

    def write(self, asset: Sequence[str], partition: str | None, frame: pd.DataFrame) -> None:
        """Atomic, not fsynced: an intermediate lost to an OS crash is recomputed."""
        write_parquet_atomic(frame, self.path(asset, partition), durable=False)


def write_parquet_exclusive(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Durably store ``frame`` at ``path`` unless a file is already there; return the frame that stands.

    The file is linked into place only if none exists (``os.link`` fails otherwise), so of two writers
    racing for one path exactly one wins and the other gets the winner's content back: a ledger draw is
    stored once, never replaced.
    """
    if not isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("xb") as handle:
                handle.write(_parquet_bytes(frame))
        except FileExistsError:
            return read_parquet(path)
        return frame
    tmp = _write_temporary(frame, path, durable=True)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return read_parquet(path)
    finally:
        os.unlink(tmp)
    fsync_folder(path.parent)
    return frame


def read_parquet(path: Path) -> pd.DataFrame:
    if not isinstance(path, Path):
        with path.open("rb") as handle:
            return pd.read_parquet(handle)
    return pd.read_parquet(path)


def remove_stale_temporaries(folder: Path) -> None:
    """Delete temporary files left under ``folder`` by writers that died (their process is gone). Only local
    writers leave temporaries."""
    if not isinstance(folder, Path) or not folder.exists():
        return
    for path in folder.rglob(".*.tmp"):
        match = _TEMPORARY.match(path.name)
        if match and not _alive(int(match["pid"])):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_temporary(frame: pd.DataFrame, path: Path, durable: bool, grouped_by: str | None = None) -> Path:
    make_dirs(path.parent)
    tmp = reserve_private(path.with_name(f".{path.name}.{os.getpid()}.tmp"))
    _write_table(frame, tmp, grouped_by)
    if durable:
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    return tmp


def _write_table(frame: pd.DataFrame, where, grouped_by: str | None = None) -> None:
    table = _table(frame)
    # Private intermediates favour speed over size: no compression, dictionaries only for categoricals, and no
    # column statistics (min/max of dictionary strings cost most of a write) but the grouping column's.
    categorical = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    if grouped_by is None:
        pq.write_table(table, where, compression="none", use_dictionary=categorical, write_statistics=False)
        return
    codes = frame[grouped_by].cat.codes.to_numpy()
    order = np.argsort(codes, kind="stable")
    table, ends = table.take(pa.array(order)), np.flatnonzero(np.diff(codes[order])) + 1
    with pq.ParquetWriter(where, table.schema, compression="none", use_dictionary=categorical,
                          write_statistics=[grouped_by]) as writer:
        for start, stop in zip([0, *ends], [*ends, len(table)]):  # no rows: one empty group keeps the dictionaries
            writer.write_table(table.slice(start, stop - start), row_group_size=max(stop - start, 1))


def _parquet_bytes(frame: pd.DataFrame, grouped_by: str | None = None) -> bytes:
    buffer = io.BytesIO()
    _write_table(frame, buffer, grouped_by)
    return buffer.getvalue()


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _table(frame: pd.DataFrame) -> pa.Table:
    """Arrow table of ``frame``. Parquet keeps no dictionary for a column without rows, so an empty
    categorical comes back with no categories, typed null; it is stored as string-valued, so that it
    reads back as an (empty) categorical again rather than decaying to object on the next round."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
        if pa.types.is_dictionary(f.type) and pa.types.is_null(f.type.value_type)
        else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))
