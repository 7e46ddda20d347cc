"""How a run's steps execute: Dagster's default on one machine, Celery workers when the deployment says so.

``OPAL_DP_EXECUTOR=celery`` (deploy/README.md) sends every step of every run to the Celery workers listening
on ``$OPAL_DP_CELERY_BROKER`` (results on ``$OPAL_DP_CELERY_BACKEND``); the definitions are otherwise the
same. ``OPAL_DP_EXECUTOR=in_process`` runs every step of a run in the run's own process (one process start per
run instead of one per step: the cheaper choice for a small machine's daemon). ``make release`` runs in process
whatever this says.
"""

import os

import dagster as dg

EXECUTOR_ENV = "OPAL_DP_EXECUTOR"
BROKER_ENV, BACKEND_ENV = "OPAL_DP_CELERY_BROKER", "OPAL_DP_CELERY_BACKEND"
EXECUTORS = ("", "default", "in_process", "celery")


@dg.definitions
def executor() -> dg.Definitions:
    choice = os.environ.get(EXECUTOR_ENV, "").strip()
    if choice not in EXECUTORS:
        raise ValueError(f"{EXECUTOR_ENV} must be one of {EXECUTORS[1:]}, got {choice!r}")
    if choice == "in_process":
        return dg.Definitions(executor=dg.in_process_executor)
    if choice != "celery":
        return dg.Definitions()
    from dagster_celery import celery_executor  # the `cluster` extra

    return dg.Definitions(executor=celery_executor.configured(
        {"broker": {"env": BROKER_ENV}, "backend": {"env": BACKEND_ENV}}, name="celery"))
