"""``make ui``'s ``dg dev`` under a supervisor, so that SIGTERM or Ctrl-C to the whole process group stops it cleanly
and at once, as one Ctrl-C to ``dg dev`` alone does.

Why: ``dg dev`` restarts its code server whenever the code server exits before ``dg dev`` itself has begun to shut
down (a monitor polls every 5 s). A signal to the whole group (``kill -- -PGID``, a terminal's Ctrl-C) ends the code
server at once, while ``dg dev`` spends seconds stopping its webserver and daemon; a code server restarted in that
window outlives everything until its 45 s heartbeat runs out (CI measured ``make ui`` still running 53 s after SIGTERM).

Here the command runs in its own session. The first SIGTERM, SIGINT or SIGHUP to this process reaches the command as
one SIGINT to it alone: it stops its webserver and daemon, then its code server, in that order. Further signals change
nothing (make passes its own SIGTERM on too); a command not ended ``STOP_S`` after the first is killed with its group.
Whatever of the group is left ``GRACE_S`` after the command has exited is killed. If this process
is killed, the command gets SIGINT (Linux's parent-death signal). The exit status is the command's.

Usage: ``python -m opal_dp.supervise COMMAND [ARGS...]``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 10.0  # after the command has exited, for what it started (its code server) to finish
STOP_S = 60.0  # after the first stop signal, for the command's own shutdown
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    """Linux's prctl, where there is one (elsewhere the supervisor works without it)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _in_the_child() -> None:
    """Before the command starts: the stop signals at their defaults (a background shell starts jobs with SIGINT
    ignored, and Dagster maps SIGTERM to whatever SIGINT does), and SIGINT when this supervisor dies."""
    for signo in STOP_SIGNALS:
        signal.signal(signo, signal.SIG_DFL)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


def _reap(child: subprocess.Popen) -> None:
    """Wait for every ended process this supervisor is parent of: the command (its exit status into
    ``child.returncode``) and, as subreaper, whatever it started that outlived it (else zombies under a PID 1 that
    does not reap would look alive)."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(wait_status)


def _group_ended(child: subprocess.Popen, seconds: float) -> bool:
    """Whether every process of the command's group has ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        _reap(child)
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def supervise(command: list[str], grace_s: float = GRACE_S, stop_s: float = STOP_S) -> int:
    """Run ``command`` in its own session until it and everything it started have ended; the command's exit status
    (128 + the signal's number if a signal ended it)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    child = subprocess.Popen(command, start_new_session=True, preexec_fn=_in_the_child)
    asked_at: list[float] = []

    def stop(_signo: int, _frame: object) -> None:
        if not asked_at:
            asked_at.append(time.monotonic())
            child.send_signal(signal.SIGINT)

    for signo in STOP_SIGNALS:
        signal.signal(signo, stop)
    while child.returncode is None:
        _reap(child)
        if asked_at and time.monotonic() - asked_at[0] > stop_s:
            _kill_group(child.pid)
        time.sleep(0.1)
    if not _group_ended(child, grace_s):
        _kill_group(child.pid)
        _group_ended(child, grace_s)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(supervise(sys.argv[1:]))
