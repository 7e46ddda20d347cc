"""Per-day work in worker processes: the same results as in process, in the calls' order, errors raised in the
caller; and the private stages' file-to-file functions give the same partitions either way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.parallel import PRELOAD, _pool, _preload, map_calls, start_in_background
from opal_dp.prep.day_records import DayCut
from opal_dp.prep.day_files import Bounding, DayFailure, DayPaths, day_pass, split_day
from opal_dp.settings import WORKERS_ENV, workers_from_env
from opal_dp_tests.conftest import write_csv

DAYS = ["2016-07-25", "2016-07-26", "2016-07-27"]


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad {x}")
    return x


def fail_once_the_other_runs_or_write_late(folder: str, fail: bool) -> None:
    started, late = Path(folder, "started"), Path(folder, "late")
    if fail:  # only once the other call runs: otherwise map_calls may rightly cancel it before it starts
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise ValueError("refused")
    started.write_text("started")
    time.sleep(1.0)
    late.write_text("written")


def test_results_come_back_in_call_order_from_other_processes():
    results = list(map_calls(square_and_pid, [(x,) for x in range(20)], workers=2))
    assert [r for r, _ in results] == [x * x for x in range(20)]
    assert {pid for _, pid in results} - {os.getpid()}  # the work ran elsewhere


def test_workers_started_in_the_background_serve_the_calls(monkeypatch):
    """All of them, also when a started worker has finished its first call before the next is submitted (the pool
    then hands that call to the idle worker instead of starting one): submits slowed down here."""
    submit = ProcessPoolExecutor.submit

    def slow_submit(pool, *args):
        future = submit(pool, *args)
        time.sleep(0.5)
        return future

    monkeypatch.setattr(ProcessPoolExecutor, "submit", slow_submit)
    start_in_background(3)  # a pool size no other test uses
    deadline = time.monotonic() + 60
    while len(_pool(3)._processes) < 3:
        assert time.monotonic() < deadline, "the background start never started the workers"
        time.sleep(0.05)
    monkeypatch.undo()
    started = set(_pool(3)._processes)
    assert {pid for _, pid in map_calls(square_and_pid, [(x,) for x in range(9)], workers=3)} <= started


def test_the_forkserver_preloads_what_the_main_module_uses_but_not_the_module(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="opal_dp.parallel")  # as if run as python -m opal_dp.parallel
    main.json, main.workers_from_env, main.Path, main.map_calls, main.text = json, workers_from_env, Path, map_calls, "x"
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert _preload() == PRELOAD + ["json", "opal_dp.settings", "pathlib"]  # its own functions' module left out
    for name in ("pytest.__main__", None):  # a __main__ module is never re-run in a worker; nor is a script
        main.__spec__ = types.SimpleNamespace(name=name) if name else None
        assert _preload() == PRELOAD


RUN_AS_MODULE = """
import os
from opal_dp.parallel import map_calls
if __name__ == "__main__":
    print(os.getpid() not in set(map_calls(os.getpid, [()] * 4, workers=2)))
"""


def test_a_program_run_as_a_module_starts_its_workers_without_warnings(tmp_path):
    """Its workers re-run it (multiprocessing does): preloading the module itself would make runpy warn in each."""
    (tmp_path / "released_as_module.py").write_text(RUN_AS_MODULE)
    done = subprocess.run([sys.executable, "-m", "released_as_module"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 0 and done.stdout.strip() == "True" and done.stderr == "", done.stderr


def test_one_worker_runs_in_this_process():
    assert {pid for _, pid in map_calls(square_and_pid, [(1,), (2,)], workers=1)} == {os.getpid()}


def test_a_calls_own_count_wins_over_the_environments(monkeypatch):
    """A step passes its run's configured count (``--workers``) down as an argument; the environment's count
    applies only to calls that give none."""
    monkeypatch.setenv(WORKERS_ENV, "2")
    assert {pid for _, pid in map_calls(square_and_pid, [(1,), (2,)], workers=1)} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in map_calls(square_and_pid, [(1,), (2,)])}
    monkeypatch.setenv(WORKERS_ENV, "1")
    assert os.getpid() not in {pid for _, pid in map_calls(square_and_pid, [(1,), (2,)], workers=2)}


def test_an_error_in_a_worker_is_raised_to_the_caller():
    with pytest.raises(ValueError, match="bad 3"):
        list(map_calls(fail_on_three, [(x,) for x in range(6)], workers=2))


def test_an_error_is_raised_only_once_the_calls_running_beside_it_have_ended(tmp_path):
    """A caller cleans up when a call fails (the publish step removes its staging folder): no other call may still
    be writing then."""
    with pytest.raises(ValueError, match="refused"):
        list(map_calls(fail_once_the_other_runs_or_write_late, [(str(tmp_path), True), (str(tmp_path), False)],
                       workers=2))
    assert (tmp_path / "started").exists() and (tmp_path / "late").read_text() == "written"


def write_started(folder: str, name: str) -> str:
    Path(folder, name).write_text("started")
    time.sleep(0.5)
    Path(folder, name).write_text("written")
    return name


def test_calls_made_as_asked_for_start_before_the_last_is_made(tmp_path):
    """The publish step gates each date here while the workers stage the dates gated before it."""
    seen_before_last = []

    def calls():
        for name in ("a", "b", "c"):
            if name == "c":  # by now the first call has started in a worker
                deadline = time.monotonic() + 60
                while not (tmp_path / "a").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen_before_last.append((tmp_path / "a").exists())
            yield str(tmp_path), name

    assert list(map_calls(write_started, calls(), workers=2, count=3)) == ["a", "b", "c"]
    assert seen_before_last == [True]


def test_a_failure_in_making_a_call_is_raised_once_the_calls_made_have_ended(tmp_path):
    def calls():
        yield str(tmp_path), "a"
        deadline = time.monotonic() + 60
        while not (tmp_path / "a").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise ValueError("refused while making the second call")

    with pytest.raises(ValueError, match="refused while making"):
        list(map_calls(write_started, calls(), workers=2, count=2))
    assert (tmp_path / "a").read_text() == "written"


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("made", "count"), [(3, 2), (1, 2), (2, 0)])
def test_calls_made_other_than_announced_are_refused(made, count, workers):
    with pytest.raises(ValueError, match="announced"):
        list(map_calls(square_and_pid, ((x,) for x in range(made)), workers=workers, count=count))


def test_in_one_process_every_call_is_made_before_any_runs():
    """As with workers (all submitted before any result is read), so that a failure in making a call is raised
    before any call has run, whatever the worker count."""
    events = []

    def calls():
        for x in range(3):
            events.append(f"made {x}")
            yield (x,)

    for result, _ in map_calls(square_and_pid, calls(), workers=1, count=3):
        events.append(f"ran {result}")
    assert events == ["made 0", "made 1", "made 2", "ran 0", "ran 1", "ran 4"]


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_worker_count_is_refused(monkeypatch, value):
    monkeypatch.setenv(WORKERS_ENV, value)
    with pytest.raises(ValueError, match=WORKERS_ENV):
        workers_from_env()


def _raw_days(folder: Path) -> list[Path]:
    folder.mkdir()
    rng = np.random.default_rng(7)
    paths = []
    for day in DAYS:
        rows = []
        for i in range(400):
            on = pd.Timestamp(day) + pd.Timedelta(minutes=int(rng.integers(0, 1400)))
            mode, stop, off_stop = [("bus", 1, 3), ("train", 10, 12), ("ferry", 20, 21)][i % 3]
            rows.append({"card_id": int(rng.integers(1, 60)), "mode": mode, "tap_on_time": on.isoformat(sep=" "),
                         "tap_on_stop": stop, "tap_off_time": (on + pd.Timedelta(minutes=20)).isoformat(sep=" "),
                         "tap_off_stop": off_stop})
        rows.append({"card_id": "x", "mode": "bus"})  # one rejected row per day
        paths.append(write_csv(folder, day, rows))
    return paths


def _stages(tmp: Path, raw: list[Path], stops: pd.DataFrame, workers: int) -> dict[str, list[pd.DataFrame]]:
    """One pass per day (ingest, bin, bound (card_day), sequences), then the split, each over the days with
    ``workers``."""
    p = {name: [tmp / name / f"{d}.parquet" for d in DAYS] for name in
         ("accepted", "rejected", "binned", "cards", "sequences", "kept", "over", "bus")}
    bounding = Bounding(PrivacyUnit.CARD_DAY, ContributionBounds(max_trips_per_card_day=2, max_per_bin=1), b"k" * 32)
    paths = [DayPaths(*(p[name][i] for name in ("accepted", "rejected", "binned", "cards", "sequences", "kept",
                                                "over"))) for i in range(len(DAYS))]
    cut = DayCut((2, 1), 3, "stop list version")
    summaries = list(map_calls(day_pass, [(raw[0].parent, d, stops, bounding, cut, b"f" * 32, paths[i], tmp / "private")
                                          for i, d in enumerate(DAYS)], workers))
    assert all(s.ingest.rows_read == s.ingest.rows_accepted + s.ingest.rows_rejected == 401
               and s.ingest.rows_rejected >= 1 for s in summaries)
    list(map_calls(split_day, [(k, d, {"bus": s}) for k, d, s in zip(p["kept"], DAYS, p["bus"])], workers))
    return {name: [pd.read_parquet(path) for path in paths] for name, paths in p.items()}


def _multiset(frame: pd.DataFrame) -> Counter:
    return Counter(map(tuple, frame.astype(str).to_numpy()))


def test_worker_processes_store_the_same_partitions_as_one_process(tmp_path, stops):
    raw = _raw_days(tmp_path / "raw")
    inline = _stages(tmp_path / "inline", raw, stops, workers=1)
    spread = _stages(tmp_path / "spread", raw, stops, workers=2)
    for name in ("accepted", "binned", "cards"):  # deterministic stages: equal frames
        for a, b in zip(inline[name], spread[name]):
            pd.testing.assert_frame_equal(a, b)
    for name in ("kept", "over", "bus", "sequences"):  # rows in CSPRNG-random order: equal multisets
        for a, b in zip(inline[name], spread[name]):
            assert len(a) and _multiset(a) == _multiset(b)
    assert sum(map(len, inline["kept"])) < sum(map(len, inline["accepted"]))  # the bounds did bind


def test_a_raw_file_error_in_a_worker_names_the_file(tmp_path, stops):
    bad = tmp_path / "trips_2016-07-25.csv"
    bad.write_text("card_id,mode\n1,bus\n")
    paths = DayPaths(*(tmp_path / f"{i}.parquet" for i in range(7)))
    bounding = Bounding(PrivacyUnit.TRIP, ContributionBounds(), b"k" * 32)
    results = list(map_calls(day_pass, [(tmp_path, "2016-07-25", stops, bounding, DayCut(None, 3, "v"), b"f" * 32,
                                         paths, tmp_path / "private")] * 2, workers=2))
    assert all(isinstance(r, DayFailure) and "trips_2016-07-25.csv" in r.reason
               and "missing required column" in r.reason for r in results)


KILLED_WITH_WORKERS = """
import os, signal, sys
from opal_dp.parallel import map_calls
if __name__ == "__main__":
    print(" ".join(str(pid) for pid in map_calls(os.getpid, [()] * 8, workers=2)), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    """A SIGKILLed release leaves no worker behind (one would hold the release's pipes open and wait forever)."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED_WITH_WORKERS)
    # run returns once every holder of the child's pipes is gone: a lingering worker would time it out
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    workers = {int(pid) for pid in done.stdout.split()}
    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 30  # each worker's watcher wakes on its parent's end: give a loaded machine time
    while not all(gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and all(gone(pid) for pid in workers)
