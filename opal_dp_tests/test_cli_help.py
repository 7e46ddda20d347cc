"""The command line explains itself: every flag of every command has a help line, and no help text carries markup
or an internal module path."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from opal_dp.cli import _parser

COMMANDS = [[], ["release"], ["ledger"], ["ledger", "show"], ["ledger", "raise-cap"], ["dagster-home"]]


def _subparser(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for name in path:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "top")
def test_every_flag_has_a_plain_help_line(path):
    parser = _subparser(_parser(), path)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            assert all(choice.help for choice in action._choices_actions), path
            continue
        assert action.help and action.help is not argparse.SUPPRESS, f"{' '.join(path)}: {action.option_strings} has no help"
    text = parser.format_help()
    assert "`" not in text and not re.search(r"opal_dp\.(?!cli\b)\w", text), text  # the command is its own name


def test_help_prints_from_the_command_line_and_data_dir_goes_before_or_after_the_command():
    done = subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--without DATE" in done.stdout and "--person-cap EPSILON[,DELTA]" in done.stdout
    parse = _parser().parse_args
    assert parse(["--data-dir", "/a", "ledger", "show"]).data_dir == "/a"
    assert parse(["ledger", "show", "--data-dir", "/b"]).data_dir == "/b"
    assert parse(["release", "--data-dir", "/c"]).data_dir == "/c"
