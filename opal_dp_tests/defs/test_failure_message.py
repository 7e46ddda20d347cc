"""What ``run_release`` says of a failed step: the step, the error's class and the line of opal_dp that raised it,
never the error's message (it may quote the data); a ``dg.Failure``'s own description as it is."""

import dagster as dg

from opal_dp.release.periods import week_of
from opal_dp.runs import failure_message

SECRET = "card 4242 at 2016-07-29T08:15"  # as a value of the data would appear in an error's message


@dg.asset
def weeks_of_a_bad_day() -> None:
    week_of(SECRET)


@dg.asset
def refused() -> None:
    raise dg.Failure(description="publishing refused: the gate failed")


def test_a_failed_step_is_named_with_its_error_class_and_opal_dp_line_and_no_message():
    result = dg.materialize([weeks_of_a_bad_day], raise_on_error=False)
    message = failure_message("release", result)
    assert message.startswith(f"run {result.run_id} of job release failed:\n")
    line = message.splitlines()[1]
    assert line.startswith("step weeks_of_a_bad_day: ValueError at opal_dp/release/periods.py:")
    assert line.endswith(" in of (the run's event log has the details)")  # Periods.of, which week_of calls
    assert "4242" not in message and "Invalid isoformat" not in message


def test_a_failure_with_a_description_is_said_as_it_is():
    result = dg.materialize([refused], raise_on_error=False)
    assert failure_message("rollup", result).splitlines()[1:] == ["publishing refused: the gate failed"]
