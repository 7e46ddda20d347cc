"""Per-partition rows kept between runs (an internal report's figures; the publisher's standing draws): a weekly
run computes the partitions that are new or whose inputs changed and combines them with the kept rows of the
others, instead of recomputing or rereading the whole history every week.

A partition's rows are reused only while its input files are the same (path, size, modification time): a
re-released partition (a correction, a fresh draw) is computed again. Rows are JSON (numbers round-trip
exactly), so the combined report is the one a full recomputation gives. Private, like every internal report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from opal_dp.permissions import make_dirs, reserve_private


def version_of(paths: Iterable[Path]) -> str:
    """The identity of a partition's input files: path, size and modification time of each."""
    return "|".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in paths)


class PartitionRows:
    """{partition: rows} of one report, loaded from and saved to ``path`` (module docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._kept = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
        self._now: dict[str, dict] = {}
        self.computed: list[str] = []

    def rows(self, key: str, version: str, compute: Callable[[], list[dict]]) -> list[dict]:
        """The rows of ``key``: the kept ones if its input ``version`` is unchanged, else ``compute()``'s."""
        return self.rows_of({key: version}, lambda stale: [compute()])[key]

    def rows_of(self, versions: Mapping[str, str],
                compute: Callable[[list[str]], Iterable[list[dict]]]) -> dict[str, list[dict]]:
        """The rows of every key of ``versions`` (key -> its input version): the kept ones where the version is
        unchanged; the others from one ``compute(stale keys)``, which gives their rows in the keys' order (so that
        it can compute them in worker processes, ``opal_dp.parallel``)."""
        stale = [key for key, version in versions.items() if self._kept.get(key, {}).get("version") != version]
        fresh = dict(zip(stale, compute(stale), strict=True)) if stale else {}
        for key, version in versions.items():
            self._now[key] = {"version": version, "rows": fresh[key]} if key in fresh else self._kept[key]
        self.computed += stale
        return {key: self._now[key]["rows"] for key in versions}

    def save(self) -> None:
        """Keep the rows of the partitions asked for in this run (others are gone from the report)."""
        make_dirs(self.path.parent)
        staging = self.path.with_name(f".{self.path.name}.tmp")
        staging.unlink(missing_ok=True)
        reserve_private(staging).write_text(json.dumps(self._now, sort_keys=True), encoding="utf-8")
        staging.replace(self.path)
