"""Command errors and exit statuses: the one place a refusal becomes a status (pure).

Every ``saltedtable`` command (``key``, ``explain``, ``advise``, ``create``,
``guard``, ``inspect``, ``read``, ``lookup``, ``count``, ``emulator``, ``migrate``)
raises its refusals, and its entry point prints one line and returns
:func:`exit_status` of the error::

    0    done
    1    a data problem: an unreadable input, a table that refuses, a layout
         that differs (``DataError`` and every other ``SaltedTableError``)
    2    a usage problem: bad arguments, a scheme or cutoff that cannot work,
         a missing emulator binary (``UsageError``, ``SaltSchemeError``,
         ``CutoffError``, ``EmulatorNotFoundError``)
    127  a command to run could not be started (``emulator -- CMD``)
    130  interrupted (Ctrl-C); 128 + N for another signal N
    141  stdout was closed by its reader (``... | head``)

:class:`~saltedtable._exceptions.CommandError` carries its own status
(``exit_status``), so a command that needs another one raises
``CommandError(message, exit_status=...)``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Final, TextIO

from .._exceptions import (
    CommandError,
    CutoffError,
    EmulatorNotFoundError,
    SaltSchemeError,
)

__all__ = [
    "EXIT_CANNOT_RUN",
    "EXIT_DATA",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_USAGE",
    "exit_status",
    "fail",
    "one_line",
    "signalled",
]

EXIT_OK: Final = 0
EXIT_DATA: Final = 1
EXIT_USAGE: Final = 2
EXIT_CANNOT_RUN: Final = 127
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
EXIT_PIPE_CLOSED: Final = 128 + signal.SIGPIPE

#: Errors that mean the arguments were wrong, whoever raised them.
_USAGE: Final = (argparse.ArgumentTypeError, SaltSchemeError, CutoffError, EmulatorNotFoundError)


def signalled(signum: int) -> int:
    """The status of a command stopped by signal ``signum`` (as a shell reports it)."""
    return 128 + signum


def exit_status(error: BaseException) -> int:
    """The exit status a command returns for ``error``."""
    if isinstance(error, CommandError):
        return error.exit_status
    if isinstance(error, _USAGE):
        return EXIT_USAGE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, BrokenPipeError):
        return EXIT_PIPE_CLOSED
    return EXIT_DATA  # every other refusal: saltedtable's own, or the API's


def one_line(text: str) -> str:
    """A message on one line (a command's error is one line of stderr)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def fail(prog: str, error: BaseException, *, stream: TextIO | None = None) -> int:
    """Print ``error`` as ``prog`` reports it, and return its exit status.

    An interruption says so; a closed stdout says nothing (its reader left).
    """
    out = sys.stderr if stream is None else stream
    status = exit_status(error)
    if isinstance(error, KeyboardInterrupt):
        print(f"{prog}: interrupted", file=out)
    elif not isinstance(error, BrokenPipeError):
        print(f"{prog}: error: {error}", file=out)
    return status
