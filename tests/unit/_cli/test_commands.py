"""Command errors and exit statuses: one mapping, used by every command."""

from __future__ import annotations

import argparse
import io

import pytest

from saltedtable import (
    CutoffError,
    EmulatorError,
    EmulatorNotFoundError,
    LayoutError,
    RowKeyError,
    SaltSchemeError,
    SchemeMismatchError,
)
from saltedtable._cli.commands import (
    EXIT_CANNOT_RUN,
    EXIT_DATA,
    EXIT_INTERRUPTED,
    EXIT_PIPE_CLOSED,
    EXIT_USAGE,
    exit_status,
    fail,
    one_line,
    signalled,
)
from saltedtable._exceptions import CommandError, DataError, MissingInputError, UsageError


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (UsageError("x"), EXIT_USAGE),
        (DataError("x"), EXIT_DATA),
        (MissingInputError("x"), EXIT_USAGE),
        (CommandError("x"), EXIT_DATA),
        (CommandError("x", exit_status=EXIT_CANNOT_RUN), EXIT_CANNOT_RUN),
        (UsageError("x", exit_status=5), 5),
        (argparse.ArgumentTypeError("x"), EXIT_USAGE),
        (SaltSchemeError("x"), EXIT_USAGE),
        (CutoffError("x"), EXIT_USAGE),
        (EmulatorNotFoundError("x"), EXIT_USAGE),
        (EmulatorError("x"), EXIT_DATA),
        (LayoutError("x"), EXIT_DATA),
        (RowKeyError("x"), EXIT_DATA),
        (RuntimeError("x"), EXIT_DATA),
        (KeyboardInterrupt(), EXIT_INTERRUPTED),
        (BrokenPipeError(), EXIT_PIPE_CLOSED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_every_error_has_one_status(error: BaseException, status: int) -> None:
    """The documented table: 1 data, 2 usage, 127 not started, 130 Ctrl-C, 141 closed pipe."""
    assert exit_status(error) == status


def test_the_statuses_are_the_shell_s() -> None:
    """130 and 141 are 128 + SIGINT and 128 + SIGPIPE, as a shell reports them."""
    assert (EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, signalled(15)) == (130, 141, 143)


def test_fail_prints_one_line_and_returns_the_status() -> None:
    """An error prints ``prog: error: ...``; Ctrl-C says interrupted; a closed pipe says nothing."""
    out = io.StringIO()
    assert fail("saltedtable guard", UsageError("give --family"), stream=out) == EXIT_USAGE
    assert fail("saltedtable guard", KeyboardInterrupt(), stream=out) == EXIT_INTERRUPTED
    assert fail("saltedtable advise", BrokenPipeError(), stream=out) == EXIT_PIPE_CLOSED
    assert out.getvalue() == (
        "saltedtable guard: error: give --family\nsaltedtable guard: interrupted\n"
    )


def test_a_mismatch_is_a_data_problem_on_one_line() -> None:
    """A differing layout record exits 1; one_line folds its message."""
    from saltedtable import SaltScheme, describe_layout

    error = SchemeMismatchError(describe_layout(SaltScheme(4)), describe_layout(SaltScheme(8)))
    assert exit_status(error) == EXIT_DATA
    assert "\n" not in one_line(str(error))
    assert "buckets: stored 4, now 8" in one_line(str(error))
