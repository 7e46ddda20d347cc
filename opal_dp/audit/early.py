"""An audit started before the step that publishes on it: the card-level audit of a plan depends on the plan only,
never on the data, so the command line's release (``runs.run_release``, when the roll-up runs in its process and
may use more than one) starts it in a process of its own when a week's release begins, and the ``privacy_audit``
step, in the release's process, takes its report instead of making the same call again; the release's steps
meanwhile run beside it (the audit is 3.4-4 s of a release; the steps of a small release leave a core idle).

What is taken is the report of exactly the call the step would make (the same function and arguments; the worker
count aside, which splits the audited releases between processes and is no argument of what they are), drawn from
the OS CSPRNG in that process as in the step's own: the audit is the same, started earlier. A report is taken once,
so every release is audited afresh; a call nobody took is stopped when the release ends (``discard``). A step with
no started call (a run of the UI or the daemon, another process) audits itself.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from collections.abc import Callable, Hashable
from typing import Any

from opal_dp.parallel import exit_with_parent, forkserver

_STARTED: dict[tuple, _Started] = {}
_LOCK = threading.Lock()


class _Started:
    """One call in a daemonic process of its own (it may start no workers: it audits in one process), started from a
    thread so that the caller never waits for the process server to come up."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self._process: multiprocessing.Process | None = None
        self._receive = None
        self._starting = threading.Thread(target=self._start, args=(fn, args), name="opal_dp-early-start", daemon=True)
        self._starting.start()

    def _start(self, fn: Callable[..., Any], args: tuple) -> None:
        context = forkserver()  # the per-day workers' server: a process forked from it starts in milliseconds
        receive, send = context.Pipe(duplex=False)
        try:
            process = context.Process(target=_call, args=(send, fn, args), name="opal_dp-early-audit", daemon=True)
            process.start()
        except Exception:  # noqa: BLE001 - no process (none left, a server that would not start): the step calls
            receive.close()
            return
        finally:
            send.close()
        self._process, self._receive = process, receive

    def running(self) -> bool:
        """Whether its process started (after waiting for the start)."""
        self._starting.join()
        return self._process is not None

    def result(self) -> Any:
        """Its report, waited for; its error raised; a process that died without one, or any failure to read it,
        raises (and the process is stopped): never a report that is not the call's."""
        try:
            failed, value = self._receive.recv()
        except EOFError:  # the process died without an answer (killed, out of memory)
            self._process.join()
            raise RuntimeError(f"the audit started early ended without a report (exit code "
                               f"{self._process.exitcode})") from None
        except BaseException:
            self.stop()
            raise
        self._receive.close()
        self._process.join()
        if failed:
            raise value
        return value

    def stop(self) -> None:
        if self.running():
            self._process.terminate()
            self._process.join()
            self._receive.close()


def _call(send, fn: Callable[..., Any], args: tuple) -> None:
    exit_with_parent()
    try:
        outcome = (False, fn(*args))
    except Exception as err:  # noqa: BLE001 - handed to the step that takes the report, which raises it
        outcome = (True, err)
    try:
        send.send(outcome)
    except Exception:  # noqa: BLE001 - an error (or report) that does not pickle: its text, as an error
        failed, value = outcome
        text = "".join(traceback.format_exception(value)) if failed else type(value).__name__
        send.send((True, RuntimeError(f"the audit started early could not send back its "
                                      f"{'error' if failed else 'report'}:\n{text}")))
    send.close()


def _key(fn: Callable[..., Any], args: tuple) -> tuple:
    if not all(isinstance(a, Hashable) for a in args):
        raise TypeError(f"{fn.__qualname__}: an early call's arguments must be hashable (they are its key)")
    return (fn.__module__, fn.__qualname__, args)


def start(fn: Callable[..., Any], *args: Any) -> None:
    """Start ``fn(*args)`` in a process of its own, unless the same call is started already or this process may have
    no children (a daemonic one). ``fn`` is a module-level function (pickled by name) whose arguments are hashable.
    The process runs the code its server imported: a change made in this process (a test's monkeypatch) does not
    reach it, so a test that plants a bug in this process calls the step without an early start."""
    key = _key(fn, args)
    if multiprocessing.current_process().daemon:
        return
    with _LOCK:
        if key not in _STARTED:
            _STARTED[key] = _Started(fn, args)


def result(fn: Callable[..., Any], *args: Any, workers: int | None = None) -> tuple[Any, bool]:
    """``fn(*args, workers=workers)``: the report of the same call started early (waited for, and taken: a second
    ask calls again), else the call made here; and whether it was started early. A call that failed in its process
    raises its error here; a call whose process could not start is made here."""
    with _LOCK:
        started = _STARTED.pop(_key(fn, args), None)
    if started is None or not started.running():
        return fn(*args, workers=workers), False
    return started.result(), True


def discard() -> None:
    """Stop every call started and not taken (its report would be of a release that no step published)."""
    with _LOCK:
        pending = list(_STARTED.values())
        _STARTED.clear()
    for started in pending:
        started.stop()
