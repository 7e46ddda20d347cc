"""An audit started before the step that publishes on it: the card-level audit of a plan depends on the plan only,
never on the data, so the command line's release (``runs.run_release``) starts it in a process of its own when a
week's release begins, and the ``privacy_audit`` step, in the release's process, takes its report instead of making
the same call again; the release's steps meanwhile run beside it (3.4-4 s of a release, on the core they leave idle).

What is taken is the report of exactly the call the step would make (the same function and arguments; the worker
count aside, which splits the audited releases between processes and is no argument of what they are), drawn from
the OS CSPRNG in that process as in the step's own: the audit is the same, started earlier. A report is taken once,
so every release is audited afresh; a call nobody took is stopped when the release ends (``discard``). A step with
no started call (a run of the UI or the daemon, another process) audits itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from opal_dp.parallel import exit_with_parent, forkserver

_STARTED: dict[tuple, _Started] = {}
_LOCK = threading.Lock()


class _Started:
    """One call running in a daemonic process of its own (it may start no workers: it audits in one process)."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        context = forkserver()  # the per-day workers' server: a process forked from it starts in milliseconds
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_call, args=(send, fn, args), name="opal_dp-early-audit", daemon=True)
        self._process.start()
        send.close()

    def result(self) -> Any:
        try:
            failed, value = self._receive.recv()
        except EOFError:  # the process died without an answer (killed, out of memory)
            self._process.join()
            raise RuntimeError(f"the audit started early ended without a report (exit code "
                               f"{self._process.exitcode})") from None
        finally:
            self._receive.close()
        self._process.join()
        if failed:
            raise value
        return value

    def stop(self) -> None:
        self._process.terminate()
        self._process.join()
        self._receive.close()


def _call(send, fn: Callable[..., Any], args: tuple) -> None:
    exit_with_parent()
    try:
        outcome = (False, fn(*args))
    except Exception as err:  # noqa: BLE001 - handed to the step that takes the report, which raises it
        outcome = (True, err)
    send.send(outcome)
    send.close()


def _key(fn: Callable[..., Any], args: tuple) -> tuple:
    if not all(isinstance(a, Hashable) for a in args):
        raise TypeError(f"{fn.__qualname__}: an early call's arguments must be hashable (they are its key)")
    return (fn.__module__, fn.__qualname__, args)


def start(fn: Callable[..., Any], *args: Any) -> None:
    """Start ``fn(*args)`` in a process of its own, unless the same call is started already. ``fn`` is a
    module-level function (pickled by name) whose arguments are hashable."""
    key = _key(fn, args)
    with _LOCK:
        if key not in _STARTED:
            _STARTED[key] = _Started(fn, args)


def result(fn: Callable[..., Any], *args: Any, workers: int | None = None) -> tuple[Any, bool]:
    """``fn(*args, workers=workers)``: the report of the same call started early (waited for, and taken: a second
    ask calls again), else the call made here; and whether it was started early. A call that failed in its process
    raises its error here."""
    with _LOCK:
        started = _STARTED.pop(_key(fn, args), None)
    if started is None:
        return fn(*args, workers=workers), False
    return started.result(), True


def discard() -> None:
    """Stop every call started and not taken (its report would be of a release that no step published)."""
    with _LOCK:
        pending = list(_STARTED.values())
        _STARTED.clear()
    for started in pending:
        started.stop()
