"""Real local services for tests: throwaway PostgreSQL and Redis servers (Debian packages).

The server runs from a temporary data directory on a free localhost port with trust authentication, as
the ``postgres`` user when the tests run as root (PostgreSQL refuses to run as root), and is stopped and
deleted afterwards. ``make test`` installs the package; without it the tests that need it are skipped.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

INSTALL_HINT = "install Debian's postgresql package (`make test` does: apt-get install postgresql)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bindir() -> Path | None:
    """The server binaries: Debian keeps them out of PATH, under /usr/lib/postgresql/<version>/bin."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).resolve().parent if pg_ctl else None


class PostgresServer:
    """A running server; ``new_url()`` gives a ledger-ready URL in a schema of its own."""

    def __init__(self) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError(f"no PostgreSQL server binaries: {INSTALL_HINT}")
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="opal-pg-"))
        self.data = self.dir / "data"
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "opal", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        self.url = f"postgresql://opal@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([str(self.bindir / tool), *args], check=True, capture_output=True, user=self._user,
                       cwd=self.dir)

    def execute(self, sql: str) -> None:
        import psycopg2

        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        try:
            conn.cursor().execute(sql)
        finally:
            conn.close()

    def new_url(self) -> str:
        """A fresh, empty schema on the server, as a libpq URL whose search_path points at it."""
        schema = f"s_{secrets.token_hex(6)}"
        self.execute(f"CREATE SCHEMA {schema}")
        return f"{self.url}?options=-csearch_path%3D{schema}"

    def new_database(self) -> str:
        name = f"d_{secrets.token_hex(6)}"
        self.execute(f"CREATE DATABASE {name}")
        return f"postgresql://opal@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer:
    """Debian's ``redis-server`` on a free localhost port, in memory only (no snapshots), as this user."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("no redis-server: install Debian's redis-server package (`make test` does)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="opal-redis-"))
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=open(self.dir / "log", "wb"), stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {(self.dir / 'log').read_text()}") from None
                time.sleep(0.1)
        self.url = f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
