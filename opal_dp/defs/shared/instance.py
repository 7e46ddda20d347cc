"""The Dagster instance of one machine: the ``dagster.yaml`` that ``python -m opal_dp.cli dagster-home`` (and every
CLI release, ``make release``, the UI and the daemon of the Makefile and of deploy/systemd) writes into a new
Dagster home. PostgreSQL deployments bring their own (deploy/dagster.yaml)."""

from __future__ import annotations

from pathlib import Path

import yaml

from opal_dp.defs.shared.event_log import KeptConnectionSqliteEventLogStorage
from opal_dp.permissions import make_dirs, reserve_private

HEADER = ("# Written by opal_dp: no telemetry (a privacy product phones nobody), one run at a time on the ledger,\n"
          "# and Dagster's SQLite event log keeping its connections (opal_dp.defs.shared.event_log).\n")


def instance_settings(home: Path) -> dict:
    """The settings of a Dagster home at ``home``: telemetry off, a limit of one run per concurrency pool (the
    ledger's, ``defs.shared.metadata.LEDGER_POOL``), the kept-connection event log in Dagster's own place
    (``history/runs/``, so that a home keeps its history whichever of the two storages wrote it)."""
    storage = KeptConnectionSqliteEventLogStorage
    return {
        "telemetry": {"enabled": False},
        "concurrency": {"pools": {"default_limit": 1}},
        "event_log_storage": {"module": storage.__module__, "class": storage.__name__,
                              "config": {"base_dir": str(home.resolve() / "history" / "runs")}},
    }


def dagster_yaml(settings: dict) -> str:
    return HEADER + yaml.safe_dump(settings, sort_keys=False)


def ensure_dagster_home(path: Path) -> Path:
    """A Dagster home at ``path`` with opal_dp's ``dagster.yaml`` (``instance_settings``), created if missing;
    private (0700: its event log holds non-DP figures). An existing ``dagster.yaml`` is left as it is."""
    file = make_dirs(path) / "dagster.yaml"
    if not reserve_private(file).read_text().strip():
        file.write_text(dagster_yaml(instance_settings(path)))
    return path
