"""The deployment secret: drawn from the OS CSPRNG, exactly 32 bytes, created once even by racing processes,
and one distinct key per purpose. (Its file mode is tested in ``test_permissions``.)"""

from __future__ import annotations

import hashlib
import hmac
import multiprocessing as mp
import os

import pytest

from opal_dp.core.secrets import PURPOSES, SECRET_BYTES, derive_key, load_or_create_secret


def test_the_secret_is_os_urandom_output(tmp_path, monkeypatch):
    """Kills a secret from anything but ``os.urandom`` (a constant, a hash, a seeded generator)."""
    drawn = []

    def urandom(n):
        drawn.append(bytes(range(100, 100 + n)))
        return drawn[-1]

    monkeypatch.setattr(os, "urandom", urandom)
    assert load_or_create_secret(tmp_path / "secret.key") == drawn[0] and len(drawn[0]) == SECRET_BYTES


def test_fresh_secrets_differ_and_an_existing_one_is_kept(tmp_path):
    first = load_or_create_secret(tmp_path / "a" / "secret.key")
    assert len(first) == SECRET_BYTES and first != load_or_create_secret(tmp_path / "b" / "secret.key")
    assert load_or_create_secret(tmp_path / "a" / "secret.key") == first  # read back, never redrawn


@pytest.mark.parametrize("length", [0, 16, SECRET_BYTES - 1, SECRET_BYTES + 1])
def test_a_secret_of_the_wrong_length_is_refused_without_echoing_it(tmp_path, length):
    """Kills a missing length check: a truncated or padded secret would weaken or change every key."""
    path = tmp_path / "secret.key"
    path.write_bytes(b"\x7f" * length)
    with pytest.raises(ValueError, match=f"must be {SECRET_BYTES} bytes, found {length}") as err:
        load_or_create_secret(path)
    assert str(path) in str(err.value) and "\x7f" not in str(err.value)
    assert path.read_bytes() == b"\x7f" * length  # never replaced


def _racer(path, barrier, out):
    """Draw a secret, wait until the other process has drawn one too, then go on creating the file."""
    real = os.urandom

    def urandom_then_wait(n):
        drawn = real(n)
        barrier.wait(timeout=30)
        return drawn

    os.urandom = urandom_then_wait  # this child process only
    out.put(load_or_create_secret(path))


def test_two_racing_processes_get_one_secret(tmp_path):
    """Both processes draw a secret before either creates the file; both must return the same one, the one the
    file holds, and no temporary file is left. Kills a non-exclusive create (a plain write, or ``os.replace`` in
    place of ``os.link``): the later writer then replaces the secret the earlier one already returned."""
    ctx = mp.get_context("fork")
    for round_ in range(10):
        path = tmp_path / str(round_) / "secret.key"
        barrier, out = ctx.Barrier(2), ctx.Queue()
        racers = [ctx.Process(target=_racer, args=(path, barrier, out)) for _ in range(2)]
        for p in racers:
            p.start()
        got = [out.get(timeout=60) for _ in racers]
        for p in racers:
            p.join(timeout=60)
        assert got[0] == got[1] == path.read_bytes(), f"round {round_}: two secrets were made"
        assert [p.name for p in path.parent.iterdir()] == ["secret.key"]


def test_each_purpose_has_its_own_key():
    """Kills a key that ignores the purpose or the secret, or is the secret itself."""
    secret, other = bytes(range(32)), bytes(range(1, 33))
    keys = {purpose: derive_key(secret, purpose) for purpose in PURPOSES}
    assert len(set(keys.values())) == len(PURPOSES) and secret not in keys.values()
    for purpose, key in keys.items():
        assert key == hmac.new(secret, f"opal_dp/{purpose}/v1".encode(), hashlib.sha256).digest()
        assert derive_key(other, purpose) != key and derive_key(secret, purpose) == key
    with pytest.raises(ValueError, match="purpose must be one of"):
        derive_key(secret, "anything")
