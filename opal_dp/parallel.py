"""Per-day work on all the machine's cores: the same plain function, one call per day, in worker processes.

The calls read their inputs and write their outputs themselves (private files, ``opal_dp.private_files``) and return
only small summaries, so the caller never holds a day's trips: memory is bounded by ``workers`` days, whatever
the number of days. ``$OPAL_DP_WORKERS`` (``opal_dp.settings``) says how many processes; with one, or one call,
everything runs in the calling process, in order, as it does in a daemonic process (a Celery worker's
child: there the executor spreads the steps). Workers fork from a forkserver that has imported the prep
modules, and the pool lives as long as the process, so a run pays its start once. As with any forkserver or spawn
pool, a *script* that releases at top level needs the ``if __name__ == "__main__":`` guard (a worker re-imports
the script's ``__main__``); the CLI, the benchmarks and Dagster's entry points have it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import cache
from typing import TypeVar

from opal_dp import settings

R = TypeVar("R")
PRELOAD = ["opal_dp.prep.day_files"]


@cache
def _pool(workers: int) -> ProcessPoolExecutor:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context)


def map_calls(fn: Callable[..., R], calls: Sequence[tuple], workers: int | None = None) -> Iterator[R]:
    """``fn(*call)`` for every call, yielded in the calls' order; an exception in a call is raised here (the
    calls not yet started are cancelled). ``fn`` must be a module-level function (it is pickled by name)."""
    workers = min(workers or settings.workers_from_env(), len(calls))
    if workers <= 1 or multiprocessing.current_process().daemon:  # a daemonic process may not have children
        yield from (fn(*call) for call in calls)
        return
    pool = _pool(workers)
    futures = [pool.submit(fn, *call) for call in calls]
    try:
        for future in futures:
            yield future.result()
    except BrokenProcessPool:
        _pool.cache_clear()  # a worker died (killed, out of memory): the next call starts a fresh pool
        raise
    finally:
        for future in futures:
            future.cancel()
