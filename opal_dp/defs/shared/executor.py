"""How a run's steps execute: in the run's own process on one machine (the default), Celery workers when the
deployment says so.

One machine: ``OPAL_DP_EXECUTOR`` unset (or ``in_process``) runs every step of a run in the run's own process, one
process start per run; the days of a step still go to the per-day worker processes (``opal_dp.parallel``).
``multiprocess`` is Dagster's own default, a process per step (here forked from a server that built the definitions
once, ``MULTIPROCESS``): on one machine it only adds process starts (``benchmarks.executors``: one week of
14,159 trips through the four jobs on 2 cores, 53.2 s against 32.2 s in process, 1.65x the wall time;
docs/benchmarks.md). ``celery`` (deploy/README.md) sends every step of every run to the Celery workers listening
on ``$OPAL_DP_CELERY_BROKER`` (results on ``$OPAL_DP_CELERY_BACKEND``), for several hosts. The definitions are
otherwise the same.
"""

import os

import dagster as dg

EXECUTOR_ENV = "OPAL_DP_EXECUTOR"
BROKER_ENV, BACKEND_ENV = "OPAL_DP_CELERY_BROKER", "OPAL_DP_CELERY_BACKEND"
EXECUTORS = ("", "in_process", "multiprocess", "celery")
MULTIPROCESS = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["opal_dp.step_server"]}}}, name="multiprocess")
"""Dagster's process per step, each forked from a server that has imported the job's module and built the
definitions once (``opal_dp.step_server``), instead of a fresh interpreter that imports and builds them again for
every step (Dagster's default, ``spawn``)."""


def _choice() -> str:
    choice = os.environ.get(EXECUTOR_ENV, "").strip()
    if choice not in EXECUTORS:
        raise ValueError(f"{EXECUTOR_ENV} must be one of {EXECUTORS[1:]} (unset: in_process), got {choice!r}")
    return choice


def in_process() -> bool:
    """Whether a run's steps execute in the process that executes the run (the one-machine default)."""
    return _choice() in ("", "in_process")


@dg.definitions
def executor() -> dg.Definitions:
    if in_process():
        return dg.Definitions(executor=dg.in_process_executor)
    choice = _choice()
    if choice == "multiprocess":
        return dg.Definitions(executor=MULTIPROCESS)
    from dagster_celery import celery_executor  # the `cluster` extra

    return dg.Definitions(executor=celery_executor.configured(
        {"broker": {"env": BROKER_ENV}, "backend": {"env": BACKEND_ENV}}, name="celery"))
