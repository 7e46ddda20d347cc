"""What ``run_release`` says of a failed step: the step, the innermost error's class and the deepest line of
opal_dp that raised it (in a per-day worker too, and through ``raise ... from``), never the error's message (it may
quote the data); a ``dg.Failure``'s own description as it is."""

import dagster as dg
import pandas as pd
from dagster._utils.error import SerializableErrorInfo

from opal_dp.parallel import map_calls
from opal_dp.release.periods import week_of
from opal_dp.runs import _raised, failure_message

SECRET = "card 4242 at 2016-07-29T08:15"  # as a value of the data would appear in an error's message
DETAILS = " (the run's event log has the details)"


@dg.asset
def weeks_of_a_bad_day() -> None:
    week_of(SECRET)


@dg.asset
def weeks_in_workers() -> None:
    list(map_calls(week_of, [("2016-07-29",), (SECRET,)], workers=2))


@dg.asset
def a_missing_card() -> None:
    pd.Series([1], index=["card 1"]).loc[SECRET]  # pandas raises KeyError(key) from the index's own KeyError


@dg.asset
def refused() -> None:
    raise dg.Failure(description="publishing refused: the gate failed")


def failure_line(asset) -> str:
    result = dg.materialize([asset], raise_on_error=False)
    message = failure_message("release", result)
    assert message.startswith(f"run {result.run_id} of job release failed:\n")
    assert "4242" not in message and SECRET not in message
    return message.splitlines()[1]


def test_a_failed_step_is_named_with_its_error_class_and_opal_dp_line_and_no_message():
    line = failure_line(weeks_of_a_bad_day)
    assert line.startswith("step weeks_of_a_bad_day: ValueError at opal_dp/release/periods.py:")
    assert line.endswith(" in of" + DETAILS)  # Periods.of, which week_of calls
    assert "isoformat" not in line


def test_an_error_in_a_per_day_worker_is_named_with_the_workers_line():
    """The worker's traceback comes back as text: its frames are read, its message is not."""
    line = failure_line(weeks_in_workers)
    assert line.startswith("step weeks_in_workers: ValueError at opal_dp/release/periods.py:")
    assert line.endswith(" in of" + DETAILS)


def frame(path: str, line: int, function: str) -> str:
    return f'  File "{path}", line {line}, in {function}\n    source\n'


PERIODS = week_of.__code__.co_filename


def test_an_error_raised_from_another_is_named_with_the_line_of_opal_dp_in_its_chain():
    """pandas raises ``KeyError(key) from`` its index's own: the innermost error's stack holds no frame of opal_dp,
    the next one's does."""
    inner = SerializableErrorInfo("KeyError: 'x'", [frame(pd.__file__, 3812, "get_loc")], "KeyError")
    outer = SerializableErrorInfo("KeyError: 'x'", [frame(PERIODS, 62, "of"), frame(pd.__file__, 1191, "__getitem__")],
                                  "KeyError", cause=inner)
    step = SerializableErrorInfo("Error occurred", [], "DagsterExecutionStepExecutionError", cause=outer)
    assert _raised(step) == "KeyError at opal_dp/release/periods.py:62 in of"
    assert failure_line(a_missing_card) == "step a_missing_card: KeyError" + DETAILS  # no line of the package: the class


def test_only_files_of_the_package_are_its_lines(tmp_path):
    """A checkout named opal_dp holds its virtual environment: a path that merely contains /opal_dp/ is not ours."""
    venv = tmp_path / "opal_dp" / ".venv" / "lib" / "site-packages" / "pandas" / "frame.py"
    venv.parent.mkdir(parents=True)
    venv.write_text("")
    error = SerializableErrorInfo("KeyError: 'x'", [frame(str(venv), 4102, "__getitem__")], "KeyError")
    assert _raised(error) == "KeyError"
    ours = SerializableErrorInfo("ValueError", [frame(PERIODS, 96, "week_of")], "ValueError")
    assert _raised(ours) == "ValueError at opal_dp/release/periods.py:96 in week_of"


def test_a_failure_with_a_description_is_said_as_it_is():
    result = dg.materialize([refused], raise_on_error=False)
    assert failure_message("rollup", result).splitlines()[1:] == ["publishing refused: the gate failed"]
