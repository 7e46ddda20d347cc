"""Run ``dagster dev`` for a test: a throwaway DAGSTER_HOME and data directory, a free port,
readiness polling, a clean stop, and the server log for failure messages."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import dagster as dg
import pandas as pd

from opal_dp import settings
from opal_dp.defs.shared.instance import dagster_yaml, instance_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_LOCATION = "opal_dp"

# Runs that automation starts on its own (sensors on by default, schedules, declarative automation)
# carry one of these tags; a limit of 0 keeps them queued, so only what the test launches executes.
AUTOMATION_TAGS = (
    "dagster/sensor_name",
    "dagster/schedule_name",
    "dagster/auto_materialize",
    "dagster/from_automation_condition",
)


def instance_yaml(home: Path) -> str:
    """The project's own instance (``defs.shared.instance``: telemetry off, the ledger's pool, the kept-connection
    event log) with the runs automation starts kept queued."""
    config = instance_settings(home)
    config["concurrency"]["runs"] = {"tag_concurrency_limits": [{"key": tag, "limit": 0} for tag in AUTOMATION_TAGS]}
    return dagster_yaml(config)


ASSET_NODES_QUERY = """
query { assetNodes { assetKey { path } groupName } }
"""

RUNS_QUERY = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId status tags { key value } assetSelection { path } } }
    ... on PythonError { message }
  }
}
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_raw_day(raw_dir: Path, day: date) -> Path:
    """One small raw day file: the synthetic generator if present, otherwise a hand-made one."""
    try:
        from opal_dp.simulate.trips import generate_days
    except ImportError:  # the generator is optional for this test
        return _write_handmade_day(raw_dir, day)
    ((path, _rows),) = list(generate_days([day], raw_dir, seed=7, scale=0.002))
    return path


def _write_handmade_day(raw_dir: Path, day: date, per_mode: int = 25) -> Path:
    from opal_dp.network import load_stops

    stops = load_stops()
    rows = []
    card = 3_085_220_000_000_000
    start = pd.Timestamp(day) + pd.Timedelta(hours=7)
    for mode, group in stops.groupby("mode", observed=True):
        ids = group["stop_id"].to_numpy()
        for i in range(per_mode):
            on = start + pd.Timedelta(minutes=7 * i)
            rows.append(
                {
                    "card_id": card + len(rows),
                    "mode": str(mode),
                    "tap_on_time": on,
                    "tap_on_stop": int(ids[i % len(ids)]),
                    "tap_off_time": on + pd.Timedelta(minutes=20) if i % 5 else pd.NaT,
                    "tap_off_stop": int(ids[(i + 1) % len(ids)]) if i % 5 else None,
                }
            )
    frame = pd.DataFrame(rows).astype(
        {"card_id": "int64", "mode": str, "tap_on_stop": "int32", "tap_off_stop": "Int32"}
    )
    raw_dir.mkdir(parents=True, exist_ok=True)
    path = raw_dir / f"trips_{day.isoformat()}.parquet"
    frame.to_parquet(path, index=False)
    return path


def proc_stat(pid: int) -> list[str]:
    """The fields after the command name in /proc/PID/stat (state, ppid, pgid, ...); [] once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie has ended: only its parent's wait is missing)."""
    fields = proc_stat(pid)
    return bool(fields) and fields[0] != "Z"


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def running_in_group(pgid: int) -> list[int]:
    """The processes of a process group that still run."""
    return [pid for pid in _pids() if (fields := proc_stat(pid)) and int(fields[2]) == pgid and alive(pid)]


def running_with_home(home: Path) -> list[int]:
    """The processes that still run with ``DAGSTER_HOME=home`` in their environment, whatever their process group
    (``make ui`` starts ``dg dev`` in a session of its own)."""
    marker = b"\0DAGSTER_HOME=" + os.fsencode(home) + b"\0"
    found = []
    for pid in _pids():
        try:
            environ = b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ and alive(pid):
            found.append(pid)
    return found


def kill_on_home(home: Path) -> None:
    """SIGKILL to every process still running on ``home`` (none may outlive the test)."""
    for pid in running_with_home(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_group(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop a Dagster process started with ``start_new_session=True`` (it stops cleanly on SIGINT), then SIGKILL its
    whole process group: code servers and runs are in it, and none may outlive the test."""
    if proc.poll() is None:
        for sig, wait_s in ((signal.SIGINT, timeout), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class DagsterDev:
    """``make ui`` (``dg dev``, the project of the repository root) on a throwaway home and port."""

    home: Path
    data_dir: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------
    def prepare_instance(self) -> None:
        """Create the instance (service dates are time partitions: nothing to register)."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(instance_yaml(self.home), encoding="utf-8")
        previous = os.environ.get("DAGSTER_HOME")
        os.environ["DAGSTER_HOME"] = str(self.home)
        try:
            dg.DagsterInstance.get().dispose()
        finally:
            if previous is None:
                os.environ.pop("DAGSTER_HOME", None)
            else:
                os.environ["DAGSTER_HOME"] = previous

    def start(self) -> None:
        env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            settings.DATA_DIR_ENV: str(self.data_dir),
            "PYTHONUNBUFFERED": "1",
        }
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child owns it until stop()
        try:
            self.proc = subprocess.Popen(  # what an operator runs (a background pytest may hand it SIGINT ignored)
                ["make", "-s", "-o", ".venv/.installed-stamp", "ui", f"DAGSTER_HOME={self.home}",
                 "UI_HOST=127.0.0.1", f"UI_PORT={self.port}"],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def terminate(self, timeout: float = 60.0) -> float:
        """SIGTERM to the UI's process group, as a service manager or ``kill`` stops it: the seconds until every
        process of the group and every process on this Dagster home has exited (``timeout`` if some have not; then
        they are killed)."""
        proc, self.proc = self.proc, None
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        while time.monotonic() - start < timeout:
            proc.poll()
            if not running_in_group(proc.pid) and not running_with_home(self.home):
                return time.monotonic() - start
            time.sleep(0.2)
        stop_group(proc)
        kill_on_home(self.home)
        return timeout

    def stop(self, timeout: float = 30.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, timeout)
        kill_on_home(self.home)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            return f"(no server log: {err})"
        return text[-chars:]

    # -- HTTP ------------------------------------------------------------------------------
    def _get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            return resp.read()

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 15.0) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(
            self.url + "/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = json.loads(resp.read())
        if payload.get("errors"):
            raise RuntimeError(f"GraphQL errors: {payload['errors']}")
        return payload["data"]

    def wait_ready(self, timeout: float = 120.0) -> list[dict]:
        """Wait for the webserver, then for the code location's assets; return the asset nodes."""
        deadline = time.monotonic() + timeout
        last = "nothing yet"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited early with code {self.proc.returncode}")
            try:
                self._get("/server_info")
                nodes = self.graphql(ASSET_NODES_QUERY)["assetNodes"]
                if nodes:
                    return nodes
                last = "server up, code location has no assets loaded yet"
            except (urllib.error.URLError, ConnectionError, TimeoutError, RuntimeError, OSError) as err:
                last = f"{type(err).__name__}: {err}"
            time.sleep(1.0)
        raise TimeoutError(f"dagster dev not ready after {timeout:.0f} s ({last})")

    def runs(self, **filters) -> list[dict]:
        data = self.graphql(RUNS_QUERY, {"filter": filters or None})["runsOrError"]
        if data["__typename"] != "Runs":
            raise RuntimeError(f"runsOrError: {data}")
        return data["results"]
