"""Who may read what opal_dp writes: private data is its owner's alone, published data is everyone's.

Private (the raw files opal_dp generates, everything under ``private/``, the ledger and its secret, the
Dagster home): folders 0700, files 0600. Published: folders 0755, files 0644. The mode is set when a file
or folder is created, whatever the caller's umask; an existing one is left as it is (``check_folders``
tells the owner about a readable one). SQLite gives a database's ``-wal``/``-shm`` files the database's
mode. What other libraries write (Dagster's own storage in the Dagster home) follows the umask: the
command line holds ``private_umask`` for a whole release, and ``make ui`` starts Dagster under umask 077.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600
PUBLIC_DIR, PUBLIC_FILE = 0o755, 0o644
_OTHERS = stat.S_IRWXG | stat.S_IRWXO
_warned: set[Path] = set()


class ExposedDataError(PermissionError):
    """A private folder can be read by group or others, and the run was told to refuse (strict)."""


def make_dirs(path: Path, mode: int = PRIVATE_DIR) -> Path:
    """``path`` and its missing parents, each created with exactly ``mode``; existing folders are left as they are."""
    path = Path(path)
    missing = []
    folder = path
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:  # made meanwhile by a concurrent writer
            continue
        os.chmod(folder, mode)  # mkdir applied the umask
    return path


def create_file(path: Path, mode: int = PRIVATE_FILE) -> int:
    """A new file at ``path`` with exactly ``mode``, open for writing: its descriptor. Never opens an existing
    file nor follows a link (``FileExistsError``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.fchmod(fd, mode)  # open applied the umask
    return fd


def reserve_private(path: Path) -> Path:
    """Create ``path`` empty with mode 0600 if it is missing, so that a writer that opens it by name (pyarrow,
    SQLite, logging) keeps that mode. An existing file is left as it is."""
    try:
        os.close(create_file(path))
    except FileExistsError:
        pass
    return Path(path)


@contextmanager
def private_umask() -> Iterator[None]:
    """Umask 077 for the block: what libraries create meanwhile (Dagster's storage, its compute logs) is the
    owner's only."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def exposed(folders: Iterable[Path]) -> dict[Path, str]:
    """{folder: message with the fix} for every existing folder of ``folders`` that group or others may read or
    enter."""
    messages = {}
    for folder in map(Path, folders):
        mode = stat.S_IMODE(folder.stat().st_mode) if folder.exists() else 0
        if mode & _OTHERS:
            messages[folder] = (f"{folder} holds private data but group or others can read or enter it "
                                f"(mode {mode:04o}); fix: chmod -R go-rwx {shlex.quote(str(folder))}")
    return messages


def check_folders(folders: Iterable[Path], strict: bool = False) -> list[str]:
    """The start-up check: warn on stderr, once per folder per process, about every exposed folder; under
    ``strict`` refuse instead (``ExposedDataError``). Returns the messages."""
    messages = exposed(Path(f).absolute() for f in folders)
    if messages and strict:
        raise ExposedDataError("refusing to run (strict permissions): " + "; ".join(messages.values()))
    for folder, message in messages.items():
        if folder not in _warned:
            _warned.add(folder)
            print(f"warning: {message}", file=sys.stderr)
    return list(messages.values())
