"""``make ui``'s ``dg dev`` under a supervisor, so that SIGTERM or Ctrl-C, to ``make`` or to its whole process group,
stops it cleanly and at once, as one Ctrl-C to ``dg dev`` alone does.

Why: ``dg dev`` restarts its code server whenever the code server exits before ``dg dev`` itself has begun to shut
down (a monitor polls every 5 s). A signal to the whole group (``kill -- -PGID``, a terminal's Ctrl-C) ends the code
server at once, while ``dg dev`` spends seconds stopping its webserver and daemon; a code server restarted in that
window outlives everything until its 45 s heartbeat runs out (CI measured ``make ui`` still running 53 s after SIGTERM).

Here the command runs in its own session (so it has no controlling terminal: Ctrl-Z stops only ``make``, and code that
opens ``/dev/tty`` cannot). The first SIGTERM, SIGINT or SIGHUP reaches the command as one SIGINT to it alone: it stops
its webserver and daemon, then its code server, in that order. Further SIGTERMs change nothing (``make`` passes its own
on); a second SIGINT (a second Ctrl-C), or a command not ended ``STOP_S`` after the first signal, stops the command's
whole group. Whatever of the group is left ``GRACE_S`` after the command has exited (a run still going) is stopped:
SIGTERM, which Dagster records as an interrupted run, then SIGKILL. A signal ignored when the supervisor starts
(``nohup``'s SIGHUP) stays ignored. On Linux, the command gets SIGINT if the supervisor dies, and the supervisor reaps
what the command leaves behind (child subreaper); elsewhere both are left to the system. The exit status is the
command's (128 + the signal's number if a signal ended it).

Usage: ``python -m opal_dp.supervise COMMAND [ARGS...]``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 10.0  # after the command has exited, for what it started (its code server, runs) to finish
STOP_S = 60.0  # after the first stop signal, for the command's own shutdown
TERM_S = 5.0  # between SIGTERM and SIGKILL to what is left of the command's group
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    """Linux's prctl; a no-op where there is none."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")


def _ignored_at_start() -> set[int]:
    """The stop signals this process was started with ignored, except SIGINT (a shell starts background jobs with it
    ignored, yet ``make ui &`` must stop on it)."""
    return {s for s in STOP_SIGNALS if s != signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN}


def _start(command: list[str], ignored: set[int]) -> subprocess.Popen:
    """The command in a session of its own, the stop signals at their defaults (Dagster maps SIGTERM to whatever
    SIGINT does) unless ignored at start, and SIGINT to it if the supervisor dies."""
    supervisor = os.getpid()

    def in_the_child() -> None:
        for signo in STOP_SIGNALS:
            signal.signal(signo, signal.SIG_IGN if signo in ignored else signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != supervisor:  # the supervisor died before the parent-death signal was set
            os._exit(128 + signal.SIGINT)

    return subprocess.Popen(command, start_new_session=True, preexec_fn=in_the_child)


def _reap(child: subprocess.Popen) -> None:
    """Wait for every ended process this supervisor is parent of: the command (its exit status into
    ``child.returncode``, which Popen then keeps) and, as subreaper, whatever the command left behind (else zombies
    under a PID 1 that does not reap would look alive)."""
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


def _stop_group(child: subprocess.Popen, term_s: float) -> None:
    """SIGTERM to the command's group, then SIGKILL to what is left after ``term_s``."""
    for signo, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, term_s)):
        try:
            os.killpg(child.pid, signo)
        except ProcessLookupError:
            return
        if _group_ended(child, wait_s):
            return


def supervise(command: list[str], grace_s: float = GRACE_S, stop_s: float = STOP_S, term_s: float = TERM_S) -> int:
    """Run ``command`` in its own session until it and everything it started have ended; its exit status."""
    received: list[tuple[int, float]] = []  # (signal, when): the handler only records, the loop below acts

    def record(signo: int, _frame: object) -> None:
        received.append((signo, time.monotonic()))

    ignored = _ignored_at_start()
    for signo in set(STOP_SIGNALS) - ignored:
        signal.signal(signo, record)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    child = _start(command, ignored)
    interrupted = group_stopped = False
    while child.returncode is None:
        _reap(child)
        if received and not interrupted:
            child.send_signal(signal.SIGINT)
            interrupted = True
        second_ctrl_c = [s for s, _ in received].count(signal.SIGINT) > 1
        if received and not group_stopped and (second_ctrl_c or time.monotonic() - received[0][1] > stop_s):
            _stop_group(child, term_s)
            group_stopped = True
        time.sleep(0.05)
    if not _group_ended(child, grace_s):
        _stop_group(child, term_s)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(supervise(sys.argv[1:]))
