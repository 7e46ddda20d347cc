"""``opal_dp.supervise`` (``make ui``'s supervisor): a signal to its whole process group reaches the command as one
SIGINT to it alone, and nothing the command started outlives it. The command here stands in for ``dg dev``: it records
the signals it gets and leaves behind a process that ignores SIGTERM and SIGINT (as a restarted code server lingers)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMAND = """
import signal, subprocess, sys, time
from pathlib import Path
record = Path(sys.argv[1])
lingering = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "time.sleep(600)"])
Path(sys.argv[2]).write_text(str(lingering.pid))
def note(signo, _frame):
    with record.open("a") as f:
        f.write(signal.Signals(signo).name + "\\n")
    if signo == signal.SIGINT:
        time.sleep(0.5)  # an orderly shutdown takes a while: the second SIGTERM arrives during it
        sys.exit(0)
signal.signal(signal.SIGTERM, note)
signal.signal(signal.SIGINT, note)
record.write_text("")
while True:
    time.sleep(0.05)
"""


def _supervised(*command: str, stop_s: float = 30.0, **popen) -> subprocess.Popen:
    """The supervisor in a session of its own, as ``make ui`` runs in one (a short grace period: the tests wait it)."""
    runner = f"import sys; from opal_dp.supervise import supervise; sys.exit(supervise(sys.argv[1:], 0.5, {stop_s}))"
    return subprocess.Popen([sys.executable, "-c", runner, *command], start_new_session=True, **popen)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_signal_to_the_whole_group_reaches_the_command_as_one_sigint_and_nothing_outlives_it(tmp_path):
    record, lingering_pid = tmp_path / "signals", tmp_path / "lingering"
    supervisor = _supervised(sys.executable, "-c", COMMAND, str(record), str(lingering_pid))
    deadline = time.monotonic() + 30
    while not (record.exists() and lingering_pid.exists() and lingering_pid.read_text()):
        assert time.monotonic() < deadline and supervisor.poll() is None, "the command never started"
        time.sleep(0.05)
    lingering = int(lingering_pid.read_text())

    os.killpg(supervisor.pid, signal.SIGTERM)  # as `kill -- -PGID` or a terminal's Ctrl-C (SIGINT) reaches everyone
    os.kill(supervisor.pid, signal.SIGTERM)  # and again, as make passes its own SIGTERM on to its recipe
    assert supervisor.wait(timeout=30) == 0  # the command's own status: it ended through its SIGINT handler
    assert record.read_text() == "SIGINT\n"  # one SIGINT, no SIGTERM: the group's signal did not reach it
    assert not _alive(lingering)  # killed after the grace period, although it ignores SIGTERM and SIGINT


def test_the_exit_status_is_the_commands():
    assert _supervised(sys.executable, "-c", "raise SystemExit(3)").wait(timeout=30) == 3
    killed_by_signal = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert _supervised(sys.executable, "-c", killed_by_signal).wait(timeout=30) == 128 + signal.SIGKILL


def test_a_command_that_does_not_stop_is_killed_with_its_group():
    deaf = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(flush=True); time.sleep(600)"
    supervisor = _supervised(sys.executable, "-c", deaf, stop_s=1.0, stdout=subprocess.PIPE)
    supervisor.stdout.readline()  # the command runs, SIGINT ignored
    os.killpg(supervisor.pid, signal.SIGINT)
    assert supervisor.wait(timeout=30) == 128 + signal.SIGKILL
