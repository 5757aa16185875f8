"""``saltedtable emulator``: run the official Bigtable emulator from the shell.

Without a command the emulator runs in the foreground until Ctrl-C or SIGTERM,
after printing the ``export`` lines for another shell: ``BIGTABLE_EMULATOR_HOST``,
and the project and instance the tables were created in as the other commands
read them (``SALTEDTABLE_PROJECT``, ``SALTEDTABLE_INSTANCE``). With a command it
starts the emulator, creates the tables, runs the command with those variables
set, stops the emulator and returns the command's exit code. ``main`` parses
the arguments; this module does the running.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Final

from google.api_core import exceptions as api_exceptions

from .._exceptions import CommandError, EmulatorError
from ..testing import EMULATOR_HOST_ENV, Emulator, create_table, emulator_env, start_emulator
from .commands import EXIT_CANNOT_RUN, EXIT_DATA, fail, signalled

__all__ = ["INSTANCE_ENV", "PROJECT_ENV", "emulator_exports", "run_emulator"]

#: Where ``create``, ``inspect``, ``guard`` and ``advise --table`` look for the
#: project and instance when ``--project`` and ``--instance`` are not given.
PROJECT_ENV: Final = "SALTEDTABLE_PROJECT"
INSTANCE_ENV: Final = "SALTEDTABLE_INSTANCE"

_CHILD_STOP_TIMEOUT: Final = 5.0
_OUTPUT_TAIL: Final = 4000
_PROG: Final = "saltedtable emulator"


class _Terminated(BaseException):
    """Raised by the SIGTERM handler so ``finally`` blocks stop the emulator."""


def _finish(child: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    """Pass ``signum`` on to ``child`` and reap it, killing it if it does not exit."""
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
        try:
            child.wait(_CHILD_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def emulator_exports(address: str, project: str, instance: str) -> dict[str, str]:
    """The environment the other commands need to reach the emulator's tables.

    ``BIGTABLE_EMULATOR_HOST`` for the Bigtable clients, and the project and
    instance the tables were created in, which ``saltedtable create``,
    ``inspect``, ``guard`` and ``advise --table`` read when not given
    ``--project`` and ``--instance``.
    """
    return {EMULATOR_HOST_ENV: address, PROJECT_ENV: project, INSTANCE_ENV: instance}


def _run_command(emulator: Emulator, command: Sequence[str], project: str, instance: str) -> int:
    env = {
        **os.environ,
        **emulator_env(emulator),
        **emulator_exports(emulator.address, project, instance),
    }
    try:
        child = subprocess.Popen(list(command), env=env)
    except OSError as error:
        why = f"cannot run {command[0]!r}: {error}"
        return fail(_PROG, CommandError(why, exit_status=EXIT_CANNOT_RUN))
    try:
        return child.wait()
    except KeyboardInterrupt:
        # The terminal sent SIGINT to the child as well; give it time to exit cleanly.
        _finish(child, signal.SIGINT)
        return signalled(signal.SIGINT)
    except _Terminated:
        _finish(child, signal.SIGTERM)
        return signalled(signal.SIGTERM)


def _run_foreground(emulator: Emulator, lines: Sequence[str]) -> int:
    # Serving starts with the first line printed: a stop from then on is a normal one
    # (a caller that read the export line may stop it before the last line is out).
    try:
        print("\n".join(lines), flush=True)
        code = emulator.wait()
    except (KeyboardInterrupt, _Terminated):
        print("stopping the Bigtable emulator", file=sys.stderr)
        return 0
    output = emulator.output().strip()[-_OUTPUT_TAIL:] or "(no output)"
    print(
        f"{_PROG}: error: the Bigtable emulator exited with code {code}:\n{output}",
        file=sys.stderr,
    )
    return EXIT_DATA


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM (docker stop, CI cancellation) into an exception, so cleanup runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        # Once is enough: a second SIGTERM must not interrupt the cleanup it started.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Terminated(signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signal handling is the caller's business
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(
    *,
    port: int | None,
    tables: Sequence[tuple[str, Sequence[str]]],
    command: Sequence[str],
    project: str,
    instance: str,
    binary: str | None,
    startup_timeout: float,
) -> int:
    try:
        emulator = start_emulator(binary=binary, port=port, startup_timeout=startup_timeout)
    except EmulatorError as error:  # not installed: 2 (a usage problem); failed: 1
        return fail(_PROG, error)
    with emulator:
        try:
            for table_id, families in tables:
                create_table(
                    emulator.address,
                    table_id,
                    families,
                    project=project,
                    instance=instance,
                    exist_ok=True,
                )
        except api_exceptions.GoogleAPIError as error:
            return fail(_PROG, CommandError(f"creating tables failed: {error}"))
        if command:
            return _run_command(emulator, command, project, instance)
        exports = emulator_exports(emulator.address, project, instance)
        lines = [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]
        for table_id, families in tables:
            name = f"projects/{project}/instances/{instance}/tables/{table_id}"
            lines.append(f"# created table {name} (families: {', '.join(families)})")
        lines.append("# Bigtable emulator running; press Ctrl-C to stop.")
        return _run_foreground(emulator, lines)


def run_emulator(
    *,
    port: int | None = None,
    tables: Sequence[tuple[str, Sequence[str]]] = (),
    command: Sequence[str] = (),
    project: str,
    instance: str,
    binary: str | None = None,
    startup_timeout: float = 30.0,
) -> int:
    """Run the emulator in the foreground, or around ``command``.

    Args:
        port: Port on 127.0.0.1; a free one when ``None``.
        tables: ``(table_id, families)`` to create before anything runs.
        command: The program and its arguments; empty runs in the foreground.
        project: Project id the tables are created in.
        instance: Instance id the tables are created in.
        binary: The ``cbtemulator`` to run (see ``saltedtable.testing.find_emulator``).
        startup_timeout: Seconds to wait for the emulator to serve.

    Returns:
        With a command, the command's exit code (127 if it cannot be run). Without
        one, 0 after Ctrl-C or SIGTERM. 2 if the emulator is not installed, 1 if it
        failed; 130/143 if interrupted during startup.
    """
    with _sigterm_unwinds():
        try:
            return _serve(
                port=port,
                tables=tables,
                command=command,
                project=project,
                instance=instance,
                binary=binary,
                startup_timeout=startup_timeout,
            )
        except KeyboardInterrupt:
            return signalled(signal.SIGINT)
        except _Terminated:
            return signalled(signal.SIGTERM)
