"""Input versions: which raw data a ledger charge was drawn from, as a public string.

A raw file's version is the keyed HMAC-SHA256 of its bytes (the deployment's fingerprint key, domain
separated): equal bytes, equal versions; any change, even one byte, a new version; without the key the
version says nothing about the content. A charge's input version combines the versions of the raw files of
every date its scope covers (a date for ``trip`` and ``card_day``, the whole period for ``card_period``),
so all parts of one scope histogram carry one version, and a raw file replaced between two parts makes the
second part a new charge (``core.ledger``). What a reader can infer from two releases is whether a raw
file was replaced between them (an operator's public act), never whether the counts changed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

_DOMAIN = b"opal_dp/raw-file-version/v1\0"
_CHUNK = 1 << 20
RACY_SECONDS = 2.0
"""A file changed less than this before it was hashed is hashed again next time (see ``file_version``)."""
_versions: dict[tuple, str] = {}


def file_version(path: Path, key: bytes) -> str:
    """Keyed HMAC-SHA256 of the file's bytes (read in chunks).

    A process hashes a file once while it stays the same file: the version is kept under the file's identity
    (device, inode, size, modification and change times in ns) and the key, and used again only if all of them
    are unchanged. Any write to a file, a rename onto it or a new file in its place changes its change time
    (set by the kernel, not settable from user space) or its inode, so a changed file is always hashed again.
    The one gap, a second write within the file system's clock tick of the first, is closed as git closes it:
    a file whose times are less than ``RACY_SECONDS`` before the hashing began, or whose identity moved while
    it was read, is not kept."""
    started = time.time()
    before = file_identity(path)
    cached = _versions.get((before, key))
    if cached is not None:
        return cached
    digest = hmac.new(key, _DOMAIN, hashlib.sha256)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    version = digest.hexdigest()
    settled = max(before[3], before[4]) / 1e9 < started - RACY_SECONDS
    if settled and file_identity(path) == before:
        _versions[before, key] = version
    return version


def file_identity(path: Path) -> tuple[str, int, int, int, int, int]:
    st = os.stat(path)
    return os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def combined(versions: Mapping[str, str], dates: Iterable[str]) -> str:
    """One version for the raw files of ``dates`` (``versions``: date -> file version); a missing date is an error."""
    days = sorted(set(dates))
    missing = [d for d in days if d not in versions]
    if missing:
        raise ValueError(f"no raw file version for service dates {missing}")
    text = "\n".join(f"{d}={versions[d]}" for d in days)
    return "raw:" + hashlib.sha256(text.encode()).hexdigest()


def input_versions(raw: Mapping[str, Path], dates: Collection[str], key: bytes,
                   period_of: Callable[[str], Collection[str]] | None = None) -> dict[str, str]:
    """For each of ``dates``, the input version of the ledger scope it is released in: the version of its own raw
    file (``raw``: date -> raw file), or with ``period_of`` (card_period: date -> the dates of its period) the
    combined version of every date of its period. A date of the scope without a raw file is an error (``combined``):
    a period is released whole."""
    scopes = {d: tuple(period_of(d)) if period_of else (d,) for d in dates}
    needed = sorted({d for scope in scopes.values() for d in scope})
    versions = {d: file_version(raw[d], key) for d in needed if d in raw}
    return {d: combined(versions, scope) for d, scope in scopes.items()}


def stand_ins(scopes: Mapping[str, str], prints: Mapping[str, str]) -> dict[str, str]:
    """For callers without raw files (tests, tools): each part's stand-in version, one per scope of the batch
    (``scopes``: part -> scope; ``prints``: part -> fingerprint): the hash of the scope's parts' fingerprints.
    Equal batches reuse; anything else is a new charge (never a join across inputs)."""
    by_scope: dict[str, list[str]] = {}
    for part, scope in scopes.items():
        by_scope.setdefault(scope, []).append(f"{part}={prints[part]}")
    whole = {s: "batch:" + hashlib.sha256("\n".join(sorted(v)).encode()).hexdigest() for s, v in by_scope.items()}
    return {part: whole[scope] for part, scope in scopes.items()}
