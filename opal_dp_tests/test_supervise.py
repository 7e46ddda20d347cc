"""``opal_dp.supervise`` (``make ui``'s supervisor): a signal to its whole process group reaches the command as one
SIGINT to it alone, nothing the command started outlives it, and the command stops if the supervisor dies. The command
here stands in for ``dg dev``: it records the signals it gets and leaves behind a process that ignores SIGINT (as a
run or a restarted code server outlives ``dg dev``). Linux only: the tests read ``/proc``."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opal_dp_tests.browser.dagster_dev import alive, proc_stat

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (the supervisor's prctls)")

COMMAND = """
import os, signal, subprocess, sys, time
from pathlib import Path
record, pids = Path(sys.argv[1]), Path(sys.argv[2])
lingering = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"])
def note(signo, _frame):
    with record.open("a") as f:
        f.write(signal.Signals(signo).name + "\\n")
    if signo == signal.SIGINT:
        time.sleep(0.5)  # an orderly shutdown takes a while: further signals arrive during it
        sys.exit(0)
signal.signal(signal.SIGTERM, note)
signal.signal(signal.SIGINT, note)
record.write_text("")
pids.write_text(f"{os.getpid()} {lingering.pid}")
while True:
    time.sleep(0.05)
"""
DEAF = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); {more}print(flush=True); time.sleep(600)"


def _supervised(*command: str, grace_s=1.0, stop_s=30.0, term_s=0.5, started_by=(), **popen) -> subprocess.Popen:
    """The supervisor in a session of its own, as ``make ui`` runs in one (``started_by``: e.g. ``nohup``)."""
    runner = f"import sys; from opal_dp.supervise import supervise; sys.exit(supervise(sys.argv[1:], {grace_s}, " \
             f"{stop_s}, {term_s}))"
    return subprocess.Popen([*started_by, sys.executable, "-c", runner, *command], start_new_session=True, **popen)


def _until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _with_command(tmp_path: Path, **options) -> tuple[subprocess.Popen, Path, int, int]:
    """The supervisor running ``COMMAND``: it, the signal record, the command's and the lingering process's pids."""
    record, pids = tmp_path / "signals", tmp_path / "pids"
    supervisor = _supervised(sys.executable, "-c", COMMAND, str(record), str(pids), **options)
    _until(lambda: pids.exists() and pids.read_text(), "the command never started")
    command, lingering = map(int, pids.read_text().split())
    return supervisor, record, command, lingering


def test_a_signal_to_the_whole_group_reaches_the_command_as_one_sigint_and_nothing_outlives_it(tmp_path):
    supervisor, record, command, lingering = _with_command(tmp_path, grace_s=1.5)
    os.killpg(supervisor.pid, signal.SIGTERM)  # as `kill -- -PGID` or a terminal's Ctrl-C (SIGINT) reaches everyone
    os.kill(supervisor.pid, signal.SIGTERM)  # and again, as make passes its own SIGTERM on to its recipe

    _until(lambda: not alive(command), "the command did not stop")
    assert alive(lingering) and int(proc_stat(lingering)[1]) == supervisor.pid  # the subreaper has the orphan
    assert supervisor.wait(timeout=30) == 0  # the command's own status: it ended through its SIGINT handler
    assert record.read_text() == "SIGINT\n"  # one SIGINT, no SIGTERM: the group's signal did not reach it
    assert not proc_stat(lingering)  # stopped after the grace period and reaped, although it ignores SIGINT


def test_the_command_gets_sigint_when_the_supervisor_dies(tmp_path):
    supervisor, record, command, lingering = _with_command(tmp_path)
    try:
        supervisor.kill()
        _until(lambda: record.read_text() == "SIGINT\n", "the command never heard of its supervisor's death")
        _until(lambda: not alive(command), "the command did not stop")
    finally:
        os.kill(lingering, signal.SIGKILL)


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """``nohup make ui &``: closing the terminal (SIGHUP) stops nothing; SIGTERM still does."""
    supervisor, record, command, _ = _with_command(tmp_path, started_by=("nohup",), stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL)
    os.killpg(supervisor.pid, signal.SIGHUP)
    time.sleep(0.5)
    assert supervisor.poll() is None and alive(command) and record.read_text() == ""
    os.killpg(supervisor.pid, signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0 and record.read_text() == "SIGINT\n"


def test_a_second_ctrl_c_stops_the_command_at_once():
    supervisor = _supervised(sys.executable, "-c", DEAF.format(more=""), stop_s=600.0, stdout=subprocess.PIPE)
    supervisor.stdout.readline()  # the command runs, SIGINT ignored
    os.killpg(supervisor.pid, signal.SIGINT)
    time.sleep(0.3)
    assert supervisor.poll() is None  # one Ctrl-C: the command's own shutdown, however long
    os.killpg(supervisor.pid, signal.SIGINT)
    assert supervisor.wait(timeout=30) == 128 + signal.SIGTERM


@pytest.mark.parametrize(("ignores_sigterm", "ended_by"), [(False, signal.SIGTERM), (True, signal.SIGKILL)])
def test_a_command_that_does_not_stop_is_stopped_with_its_group(ignores_sigterm, ended_by):
    more = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignores_sigterm else ""
    supervisor = _supervised(sys.executable, "-c", DEAF.format(more=more), stop_s=0.5, stdout=subprocess.PIPE)
    supervisor.stdout.readline()
    os.killpg(supervisor.pid, signal.SIGINT)
    assert supervisor.wait(timeout=30) == 128 + ended_by


def test_the_exit_status_is_the_commands():
    assert _supervised(sys.executable, "-c", "raise SystemExit(3)").wait(timeout=30) == 3
    killed_by_signal = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert _supervised(sys.executable, "-c", killed_by_signal).wait(timeout=30) == 128 + signal.SIGKILL
