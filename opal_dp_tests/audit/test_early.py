"""``audit.early``: a call started before the step that needs it is made in a process of its own, taken once by the
same call, and stopped when nobody takes it."""

import multiprocessing
import os
import time

import pytest

from opal_dp.audit import early


def where(tag: str, workers: int | None = None) -> tuple[int, str]:
    return os.getpid(), tag


def planted_failure(tag: str, workers: int | None = None) -> None:
    raise ValueError(f"planted failure {tag}")


def dies(code: int, workers: int | None = None) -> None:
    os._exit(code)


def sleeps(seconds: float, workers: int | None = None) -> float:
    time.sleep(seconds)
    return seconds


def early_processes() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "opal_dp-early-audit"]


@pytest.fixture(autouse=True)
def nothing_left_started():
    yield
    early.discard()
    assert not early_processes()


def test_a_started_call_is_made_in_its_own_process_and_taken_once():
    early.start(where, "a")
    early.start(where, "a")  # the same call again: still one
    assert len(early._STARTED) == 1
    (pid, tag), started = early.result(where, "a", workers=2)  # the worker count is no part of the call
    assert started and tag == "a" and pid != os.getpid()
    (pid, _), started = early.result(where, "a")  # taken: asked again, the call is made here
    assert not started and pid == os.getpid()


def test_another_call_is_made_here_and_the_started_one_is_stopped_by_discard():
    early.start(sleeps, 60.0)
    assert early.result(sleeps, 0.0) == (0.0, False)
    assert early._STARTED[next(iter(early._STARTED))].running() and len(early_processes()) == 1
    begun = time.monotonic()
    early.discard()
    assert not early_processes() and time.monotonic() - begun < 30


def test_a_failure_in_the_started_call_is_raised_by_the_step_that_takes_it():
    early.start(planted_failure, "x")
    with pytest.raises(ValueError, match="planted failure x"):
        early.result(planted_failure, "x")


def test_a_started_call_whose_process_dies_is_an_error_not_a_report():
    early.start(dies, 3)
    with pytest.raises(RuntimeError, match="exit code 3"):
        early.result(dies, 3)


def test_arguments_must_be_hashable_because_they_are_the_key():
    with pytest.raises(TypeError, match="hashable"):
        early.start(where, ["a"])


class Unpicklable(Exception):
    def __init__(self, tag: str, extra: object) -> None:
        super().__init__(tag)
        self.extra = extra


def fails_unpicklably(tag: str, workers: int | None = None) -> None:
    raise Unpicklable(tag, lambda: None)  # a lambda in the error: it cannot be sent back


def test_an_error_that_cannot_be_sent_back_still_fails_the_step_with_its_text():
    early.start(fails_unpicklably, "y")
    with pytest.raises(RuntimeError, match="Unpicklable"):
        early.result(fails_unpicklably, "y")


def test_a_daemonic_process_starts_nothing_and_the_call_is_made_where_asked(monkeypatch):
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    early.start(where, "b")
    monkeypatch.undo()
    assert not early._STARTED
    assert early.result(where, "b")[1] is False
