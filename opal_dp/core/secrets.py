"""The deployment's secret key (private, mode 0600) and the keys derived from it.

One 256-bit key is drawn from the OS CSPRNG the first time it is needed and kept under the private
folder; each use gets its own key, ``HMAC-SHA256(secret, purpose)``, so no two uses share a key:

- ``fingerprint``: keyed fingerprints of a release's input in the ledger. Unkeyed, a hash of the true
  histograms would let anyone who knows every trip but one confirm a guess about the last; keyed, a
  fingerprint says nothing without the secret.
- ``bounding``: the pseudo-random order in which contribution bounding keeps a card's trips.

Losing the secret fails closed: every input then looks new to the ledger and is charged again.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from opal_dp.permissions import create_file, make_dirs

SECRET_BYTES = 32
PURPOSES = ("fingerprint", "bounding")


def load_or_create_secret(path: Path) -> bytes:
    """The secret at ``path``, created (0600, exclusively: two processes never make two) if absent."""
    path = Path(path)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    make_dirs(path.parent)
    secret = os.urandom(SECRET_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = create_file(tmp)
    try:
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process created it first: then use theirs
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _read(path)


def _read(path: Path) -> bytes:
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"{path}: the secret must be {SECRET_BYTES} bytes, found {len(secret)}")
    return secret


def derive_key(secret: bytes, purpose: str) -> bytes:
    """The 32-byte key for ``purpose`` (one of ``PURPOSES``)."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
    return hmac.new(secret, f"opal_dp/{purpose}/v1".encode(), hashlib.sha256).digest()
