"""Per-day work on all the machine's cores: the same plain function, one call per day, in worker processes.

The calls read their inputs and write their outputs themselves (private files, ``opal_dp.private_files``) and return
only small summaries, so the caller never holds a day's trips: memory is bounded by ``workers`` days, whatever
the number of days. How many processes: the caller's ``workers`` (a step passes its run's ``workers`` resource,
which the command line's ``--workers`` configures, down as an argument), else ``$OPAL_DP_WORKERS``
(``opal_dp.settings``) or the CPUs; with one, or one call,
everything runs in the calling process, in order, as it does in a daemonic process (a Celery worker's
child: there the executor spreads the steps). Workers fork from a forkserver that has imported the prep
modules and what the program's main module uses (a worker re-runs the main module, which then finds its imports
done), and the pool lives as long as the process, so a run pays its start once; ``start_in_background`` pays it
while the caller does other work. As with any forkserver or spawn pool, a *script* that releases at top level needs the
``if __name__ == "__main__":`` guard (a worker re-imports the script's ``__main__``); the CLI, the benchmarks and
Dagster's entry points have it.
"""

from __future__ import annotations

import inspect
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from functools import cache
from pathlib import Path
from typing import TypeVar

from opal_dp import settings

R = TypeVar("R")
PRELOAD = ["opal_dp.prep.day_files"]


_POOL_LOCK = threading.Lock()


def _workers(workers: int | None) -> int:
    """``workers`` if given, else ``$OPAL_DP_WORKERS`` or the CPUs."""
    return workers or settings.workers_from_env()


def _preload() -> list[str]:
    """The prep modules and, when the program was started as ``python -m NAME``, the modules NAME uses (those of
    its global modules, functions and classes): imported once in the forkserver, so that a worker re-running NAME
    (as multiprocessing does) finds them done. NAME itself is left out: runpy warns when the module it runs is
    already imported; so is a ``__main__`` module, never re-run in a worker."""
    main = sys.modules["__main__"]
    name = getattr(main.__spec__, "name", None)
    if not name or name.endswith("__main__"):
        return PRELOAD
    used = {value.__name__ if isinstance(value, types.ModuleType) else value.__module__
            for key, value in vars(main).items()
            if not key.startswith("__") and (isinstance(value, types.ModuleType) or inspect.isclass(value)
                                             or inspect.isfunction(value))}
    return PRELOAD + sorted(m for m in used if m in sys.modules and m not in (name, "__main__") and m not in PRELOAD)


def _pool(workers: int) -> ProcessPoolExecutor:
    with _POOL_LOCK:  # one pool per size, also when a background start races the first calls
        return _new_pool(workers)


@cache
def _new_pool(workers: int) -> ProcessPoolExecutor:
    """A pool shut down as its process exits, before ``multiprocessing`` joins that process's children: a Dagster
    step's own process (the multiprocess executor's, a UI launch) ends through ``multiprocessing``'s exit function,
    which joins every child before the pool's own exit hook runs, and would wait on the idle workers forever."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=forkserver(), initializer=exit_with_parent)
    # before the queues' own exit finalizers (priority 10), which stop the thread that feeds the workers
    multiprocessing.util.Finalize(pool, pool.shutdown, kwargs={"cancel_futures": True}, exitpriority=100)
    return pool


def forkserver() -> multiprocessing.context.ForkServerContext:
    """The context of the worker processes: forked from a server that imported ``_preload()`` once."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preload())
    return context


def exit_with_parent() -> None:
    """In a worker (or the process of an audit started early, ``audit.early``): end it when the process that started
    it ends, however it ends (a SIGKILL included), so that none outlives it, idle, holding its pipes and files."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="opal_dp-exit-with-parent", daemon=True).start()


def start_in_background(workers: int | None = None) -> None:
    """Start the worker processes of ``map_calls`` in a background thread, so that their imports overlap the
    caller's own start (e.g. loading the Dagster definitions) instead of delaying the first per-day call."""
    workers = _workers(workers)
    if workers <= 1 or multiprocessing.current_process().daemon:
        return

    def start() -> None:
        pool = _pool(workers)
        with tempfile.TemporaryDirectory(prefix="opal_dp-start-") as folder:
            try:
                for future in [pool.submit(_arrive, folder, workers) for _ in range(workers)]:
                    future.result()
            except (RuntimeError, CancelledError, BrokenProcessPool):
                pass  # the process ended first (nothing to release) or the pool broke: a real call says so itself

    threading.Thread(target=start, name="opal_dp-workers-start", daemon=True).start()


def _arrive(folder: str, workers: int, timeout: float = 60.0) -> None:
    """In a worker: say so in ``folder`` and wait until ``workers`` workers have. The pool starts a process for a
    call only when no worker is idle, so a call that returned at once could leave the next one to a started worker
    and some workers unstarted; calls that wait for each other make the pool start them all."""
    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while len(os.listdir(folder)) < workers and time.monotonic() < deadline:
        time.sleep(0.01)


def map_calls(fn: Callable[..., R], calls: Iterable[tuple], workers: int | None = None,
              count: int | None = None) -> Iterator[R]:
    """``fn(*call)`` for every call, yielded in the calls' order; an exception in a call is raised here, after the
    calls not yet started are cancelled and those running have ended (so that no call still writes when the caller
    cleans up). ``fn`` must be a module-level function (it is pickled by name). ``calls`` may be an iterator that
    makes each call as it is asked for (``count``: how many it makes, else an error once they are made), so that the
    workers start on the first calls while the caller makes the others; an exception in making one is raised here
    likewise. In one process every call is made before any runs, as with workers a failure in making one is
    raised before any result."""
    if count is not None:
        calls = _counted(calls, count)
    workers = min(_workers(workers), len(calls) if count is None else count)
    if workers <= 1 or multiprocessing.current_process().daemon:  # a daemonic process may not have children
        yield from (fn(*call) for call in list(calls))
        return
    pool = _pool(workers)
    futures = []
    try:
        for call in calls:  # one by one: if making a call fails, those submitted are in ``futures``
            futures.append(pool.submit(fn, *call))
        for future in futures:
            yield future.result()
    except BrokenProcessPool:
        _new_pool.cache_clear()  # a worker died (killed, out of memory): the next call starts a fresh pool
        raise
    finally:
        for future in futures:
            future.cancel()
        wait(futures)


def _counted(calls: Iterable[tuple], count: int) -> Iterator[tuple]:
    """``calls``, refused once they are more or fewer than ``count``."""
    made = 0
    for call in calls:
        made += 1
        if made > count:
            raise ValueError(f"more calls were made than the {count} announced")
        yield call
    if made != count:
        raise ValueError(f"{made} calls were made, not the {count} announced")
