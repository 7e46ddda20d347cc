"""Loggers for people at a terminal: the whole event log to a file, and step progress to whoever listens.

The command line picks them in its run configuration instead of Dagster's console logger (``--verbose`` adds
the console back), so a release prints progress bars and a summary, not hundreds of DEBUG lines.
"""

import logging
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from opal_dp.permissions import reserve_private

STEP_LISTENERS: list[Callable[[str, str | None], None]] = []
"""Called with (event type, step key) for every Dagster event of an in-process run (set by the CLI)."""


class _StepEvents(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None)
        event = meta.get("dagster_event") if isinstance(meta, dict) else None
        if event is not None:
            for listener in STEP_LISTENERS:
                listener(event.event_type_value, event.step_key)


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"opal_dp.{name}")
    logger.setLevel(logging.DEBUG)
    logger.handlers = [handler]
    logger.propagate = False
    return logger


@dg.logger(config_schema={"path": str}, description="Every event of the run, appended to a file (private).")
def event_log_file(init_context: dg.InitLoggerContext) -> logging.Logger:
    handler = logging.FileHandler(reserve_private(Path(init_context.logger_config["path"])), encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    return _logger("event_log_file", handler)


@dg.logger(description="Step starts and ends, for the command line's progress bars.")
def step_progress(init_context: dg.InitLoggerContext) -> logging.Logger:
    return _logger("step_progress", _StepEvents())


@dg.definitions
def loggers() -> dg.Definitions:
    return dg.Definitions(loggers={"event_log_file": event_log_file, "step_progress": step_progress})
