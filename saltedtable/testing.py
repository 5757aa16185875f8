"""Run Google's official Bigtable emulator (``cbtemulator``) for tests.

The helpers here find the emulator binary, start it on a free loopback port, wait
until it really answers gRPC, create and delete tables through the admin API, and
make sure the process never outlives the Python process that started it::

    from saltedtable.testing import create_table, emulator_env, start_emulator

    with start_emulator() as emulator:
        create_table(emulator.address, "events", ["cf"])
        os.environ.update(emulator_env(emulator))
        ...  # BigtableDataClientAsync(project=PROJECT) now talks to the emulator

From the shell, ``saltedtable emulator`` runs it; in a pytest suite, the fixtures of
``saltedtable.pytest_plugin`` (installed with the package) start it for the session.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final, final

import grpc  # type: ignore[import-untyped,unused-ignore]
from google.api_core import exceptions as api_exceptions
from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient, types
from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
    BigtableTableAdminGrpcTransport,
)

from saltedtable._exceptions import EmulatorError, EmulatorNotFoundError

__all__ = [
    "EMULATOR_HOST_ENV",
    "ENV_VAR",
    "INSTANCE",
    "PROJECT",
    "Emulator",
    "ExternalEmulator",
    "connect_emulator",
    "create_table",
    "delete_table",
    "emulator_env",
    "find_emulator",
    "list_tables",
    "start_emulator",
]

PROJECT: Final = "test-project"
"""Default project id; the emulator accepts any."""

INSTANCE: Final = "test-instance"
"""Default instance id; the emulator accepts any and needs no instance to be created."""

ENV_VAR: Final = "SALTEDTABLE_CBTEMULATOR"
"""Environment variable naming the ``cbtemulator`` binary; overrides every other lookup."""

EMULATOR_HOST_ENV: Final = "BIGTABLE_EMULATOR_HOST"
"""Environment variable the Bigtable data client reads to connect to an emulator."""

HOST: Final = "127.0.0.1"

_SDK_RELATIVE_PATH: Final = Path("platform", "bigtable-emulator", "cbtemulator")
_ADMIN_TIMEOUT: Final = 30.0
_STOP_TIMEOUT: Final = 5.0
_PORT_ATTEMPTS: Final = 3
_OUTPUT_TAIL: Final = 4000

_INSTALL_HINT: Final = f"""\
Install the official Bigtable emulator in one of these ways:
  * Google Cloud SDK:      gcloud components install bigtable
  * apt / dnf package:     sudo apt-get install google-cloud-cli-bigtable-emulator
                           (or: sudo dnf install google-cloud-cli-bigtable-emulator)
  * Docker:                docker compose -f emulator/docker-compose.yml up
                           then export {EMULATOR_HOST_ENV}=127.0.0.1:8086
or point {ENV_VAR} at an existing cbtemulator binary:
  export {ENV_VAR}=/path/to/cbtemulator"""


# --------------------------------------------------------------------------- finding


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _not_found(message: str, looked: Sequence[str]) -> EmulatorNotFoundError:
    where = "\n".join(f"  - {place}" for place in looked) or "  (nowhere)"
    return EmulatorNotFoundError(f"{message}\nLooked in:\n{where}\n{_INSTALL_HINT}")


def _gcloud_sdk_roots(looked: list[str]) -> Iterator[Path]:
    """Cloud SDK roots that the ``gcloud`` on PATH belongs to, cheapest guess first."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        looked.append("Cloud SDK: no gcloud on PATH")
        return
    # .../google-cloud-sdk/bin/gcloud -> .../google-cloud-sdk, after resolving the usual
    # /usr/bin/gcloud symlink. Tried first: `gcloud info` costs most of a second.
    guessed = Path(gcloud).resolve().parent.parent
    yield guessed
    try:
        # gcloud itself knows where its SDK lives, even behind wrapper scripts and snaps.
        result = subprocess.run(
            [gcloud, "info", "--format=value(installation.sdk_root)"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        looked.append(f"Cloud SDK: `{gcloud} info` failed")
        return
    reported = result.stdout.strip()
    if reported and Path(reported) != guessed:
        yield Path(reported)


def find_emulator(binary: str | os.PathLike[str] | None = None) -> Path:
    """Find the ``cbtemulator`` binary.

    Looks, in order, at: ``binary``; the ``SALTEDTABLE_CBTEMULATOR`` environment
    variable; the Cloud SDK that the ``gcloud`` on ``PATH`` belongs to (its
    ``platform/bigtable-emulator/cbtemulator``, with the SDK root taken from the
    resolved ``gcloud`` symlink, else from ``gcloud info``); and ``cbtemulator``
    on ``PATH``.
    An explicit ``binary`` or environment variable that does not name an executable
    is an error rather than a reason to keep looking, so a typo never silently
    runs some other emulator.

    Args:
        binary: Path of the binary to use, overriding every other lookup.

    Returns:
        The absolute path of an executable ``cbtemulator``.

    Raises:
        EmulatorNotFoundError: The binary was not found. The message lists where
            it looked and how to install the emulator.
    """
    if binary is not None:
        path = Path(binary).expanduser()
        if _executable(path):
            return path.absolute()
        raise _not_found(
            f"cbtemulator not found: {str(path)!r} is not an executable file.",
            [f"explicit path: {path}"],
        )

    override = os.environ.get(ENV_VAR)
    if override:
        path = Path(override).expanduser()
        if _executable(path):
            return path.absolute()
        raise _not_found(
            f"cbtemulator not found: {ENV_VAR}={override!r} is not an executable file.",
            [f"${ENV_VAR}: {path}"],
        )

    looked = [f"${ENV_VAR}: not set"]
    for root in _gcloud_sdk_roots(looked):
        candidate = root / _SDK_RELATIVE_PATH
        if _executable(candidate):
            return candidate.absolute()
        looked.append(f"Cloud SDK: {candidate}")

    on_path = shutil.which("cbtemulator")
    if on_path is not None:
        return Path(on_path).absolute()
    looked.append(f"PATH: {os.environ.get('PATH', '')!r}")
    raise _not_found("cbtemulator (the Bigtable emulator) was not found.", looked)


# --------------------------------------------------------------------------- running

# Every emulator still running; stopped at interpreter exit so none can linger.
_RUNNING: set[Emulator] = set()


@atexit.register
def _stop_all() -> None:
    for emulator in list(_RUNNING):
        emulator.stop()


@final
class Emulator:
    """A running ``cbtemulator`` process, listening on ``127.0.0.1``.

    Obtain one from :func:`start_emulator`. Use it as a context manager or call
    :meth:`stop`; it is also stopped when the Python process exits normally.
    """

    __slots__ = ("_log", "_port", "_process", "_stopped")

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: IO[bytes]) -> None:
        self._process = process
        self._port = port
        self._log = log
        self._stopped = False

    @property
    def host(self) -> str:
        """The loopback address the emulator listens on."""
        return HOST

    @property
    def port(self) -> int:
        """The TCP port the emulator listens on."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port``, the value for ``BIGTABLE_EMULATOR_HOST``."""
        return f"{HOST}:{self._port}"

    @property
    def pid(self) -> int:
        """The emulator's process id."""
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether the emulator process is still alive."""
        return self._process.poll() is None

    def output(self) -> str:
        """Everything the emulator has written to stdout and stderr so far."""
        if self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the emulator process to exit and return its exit code.

        Args:
            timeout: Seconds to wait; ``None`` waits forever.

        Returns:
            The process's exit code (negative: killed by that signal).

        Raises:
            subprocess.TimeoutExpired: The process was still running after ``timeout``.
        """
        return self._process.wait(timeout)

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Stop the emulator: terminate it, then kill it if it ignores that.

        Calling it again, or on an emulator that already exited, does nothing.

        Args:
            timeout: Seconds to wait after SIGTERM before sending SIGKILL.
        """
        if self._stopped:
            return
        self._stopped = True
        _RUNNING.discard(self)
        _close_admin(self.address)
        try:
            self._signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._process.wait()
        finally:
            self._log.close()

    def _signal(self, signum: signal.Signals) -> None:
        # Only while unreaped: after wait() the pid (and its group id) may be reused.
        if self._process.poll() is not None:
            return
        try:
            # The emulator leads its own process group; signal all of it.
            os.killpg(self._process.pid, signum)
        except ProcessLookupError:
            pass
        except OSError:  # pragma: no cover - e.g. platforms without process groups
            self._process.send_signal(signum)

    def __enter__(self) -> Emulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<Emulator {self.address} pid={self.pid} {state}>"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option as the emulator's own listener (Go sets it), so TIME_WAIT is no obstacle.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
        return False


def _tail(text: str) -> str:
    text = text.strip()
    if not text:
        return "(no output)"
    return text if len(text) <= _OUTPUT_TAIL else "..." + text[-_OUTPUT_TAIL:]


def _wait_until_serving(emulator: Emulator, binary: Path, deadline: float) -> None:
    """Block until the emulator accepts TCP, gRPC and an admin ListTables call."""

    def failed(reason: str) -> EmulatorError:
        return EmulatorError(
            f"Bigtable emulator {binary} on {emulator.address} {reason}.\n"
            f"Emulator output:\n{_tail(emulator.output())}"
        )

    # Poll the port first: a gRPC channel that finds nothing listening backs off for
    # a second or more before retrying, which would dominate startup time.
    while True:
        code = emulator._process.poll()
        if code is not None:
            raise failed(f"exited with code {code} during startup")
        try:
            with socket.create_connection((HOST, emulator.port), timeout=0.25):
                break
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise failed("did not open its port in time")
        time.sleep(0.02)

    last_error: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise failed(f"did not answer gRPC in time (last error: {last_error!r})")
        code = emulator._process.poll()
        if code is not None:
            raise failed(f"exited with code {code} during startup")
        try:
            with grpc.insecure_channel(emulator.address) as channel:
                grpc.channel_ready_future(channel).result(timeout=remaining)
            list_tables(emulator.address, timeout=max(deadline - time.monotonic(), 0.1))
        except (grpc.FutureTimeoutError, api_exceptions.GoogleAPIError) as error:
            last_error = error
            time.sleep(0.05)
            continue
        # Whoever answered must be our process: if the port was taken after we checked
        # it, the probes above reached the other server while ours died failing to bind
        # (cbtemulator exits within milliseconds of that, well before a probe finishes).
        code = emulator._process.poll()
        if code is not None:
            raise failed(f"exited with code {code} during startup")
        return


def _spawn(binary: Path, port: int) -> Emulator:
    # Owned by the Emulator from here on; closed in Emulator.stop().
    log = tempfile.TemporaryFile(prefix="cbtemulator-")  # noqa: SIM115
    try:
        process = subprocess.Popen(
            [str(binary), "-host", HOST, "-port", str(port)],
            stdin=subprocess.DEVNULL,
            # A file, not a pipe: nobody reads it while the emulator runs, and a
            # full pipe would block the emulator.
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: the terminal's Ctrl-C goes to us, and we stop it in order.
            start_new_session=True,
        )
    except OSError as error:
        log.close()
        raise EmulatorError(f"could not run the Bigtable emulator {binary}: {error}") from error
    emulator = Emulator(process, port, log)
    _RUNNING.add(emulator)
    return emulator


def start_emulator(
    *,
    binary: str | os.PathLike[str] | None = None,
    port: int | None = None,
    startup_timeout: float = 30.0,
) -> Emulator:
    """Start the Bigtable emulator on ``127.0.0.1`` and wait until it serves requests.

    The emulator is ready when it accepts a gRPC connection and answers an admin
    ``ListTables`` call. It runs in its own process group and is stopped at
    interpreter exit if nobody stopped it earlier.

    Args:
        binary: The ``cbtemulator`` to run; see :func:`find_emulator`.
        port: TCP port to listen on; a free one is picked when ``None``.
        startup_timeout: Seconds to wait for the emulator to become ready.

    Returns:
        The running emulator. Stop it with :meth:`Emulator.stop` or a ``with`` block.

    Raises:
        EmulatorNotFoundError: The binary was not found.
        EmulatorError: The emulator exited or did not become ready in time; the
            message includes its output.
    """
    path = find_emulator(binary)
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        chosen = port if port is not None else _free_port()
        # Checked first because a probe of a taken port would reach the server that
        # holds it, not ours.
        if _port_in_use(chosen):
            if attempt < attempts:
                continue
            raise EmulatorError(f"cannot start the Bigtable emulator: {HOST}:{chosen} is in use")
        emulator = _spawn(path, chosen)
        try:
            _wait_until_serving(emulator, path, time.monotonic() + startup_timeout)
        except EmulatorError as error:
            emulator.stop()
            # A free port can be taken by someone else between probing and binding.
            if attempt < attempts and "address already in use" in str(error).lower():
                continue
            raise
        except BaseException:
            emulator.stop()
            raise
        return emulator
    raise AssertionError("unreachable")  # pragma: no cover


@final
@dataclass(frozen=True, slots=True)
class ExternalEmulator:
    """An emulator that something else runs (Docker, another shell), reached at ``host:port``.

    Obtain one from :func:`connect_emulator`, which checks that it answers. Nothing
    here starts or stops it.
    """

    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``, the value for ``BIGTABLE_EMULATOR_HOST``."""
        return f"{self.host}:{self.port}"


def connect_emulator(address: str, *, timeout: float = 10.0) -> ExternalEmulator:
    """Check that a Bigtable emulator answers at ``address`` and return it.

    Args:
        address: ``host:port`` of a running emulator, as in ``BIGTABLE_EMULATOR_HOST``.
        timeout: Seconds to wait for it to answer an admin ``ListTables`` call.

    Returns:
        The emulator at ``address``.

    Raises:
        EmulatorError: ``address`` is not ``host:port``, or nothing there answers
            like a Bigtable emulator within ``timeout``.
    """
    host, _, port_text = address.strip().rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        port = 0
    if not host or not 0 < port < 65536:
        raise EmulatorError(f"expected the emulator's address as HOST:PORT, got {address!r}")
    emulator = ExternalEmulator(host, port)
    try:
        list_tables(emulator.address, timeout=timeout)
    except api_exceptions.GoogleAPIError as error:
        raise EmulatorError(
            f"no Bigtable emulator answers at {emulator.address}: {error}\n"
            "Start one there (for example `saltedtable emulator --port "
            f"{port}` or the Docker image in emulator/docker-compose.yml), or leave the "
            "address out to have a fresh emulator started."
        ) from error
    return emulator


def emulator_env(emulator: Emulator | ExternalEmulator | str) -> dict[str, str]:
    """Environment variables that point Bigtable clients at ``emulator``.

    Args:
        emulator: A running emulator, or its ``host:port`` address.

    Returns:
        ``{"BIGTABLE_EMULATOR_HOST": address}``.
    """
    address = emulator if isinstance(emulator, str) else emulator.address
    return {EMULATOR_HOST_ENV: address}


# --------------------------------------------------------------------------- admin


#: One admin channel per emulator address, opened on first use and closed when that
#: emulator stops (a channel per call cost about 6 ms of the 7 ms a table's create and
#: delete took, measured over test_parity's tables).
_ADMIN: dict[str, tuple[grpc.Channel, BigtableTableAdminClient]] = {}
_ADMIN_LOCK: Final = threading.Lock()


@contextlib.contextmanager
def _admin_client(address: str) -> Iterator[BigtableTableAdminClient]:
    # The generated admin client ignores BIGTABLE_EMULATOR_HOST; hand it a plaintext channel.
    with _ADMIN_LOCK:
        opened = _ADMIN.get(address)
        if opened is None:
            channel = grpc.insecure_channel(address)
            client = BigtableTableAdminClient(
                transport=BigtableTableAdminGrpcTransport(channel=channel)
            )
            opened = _ADMIN[address] = (channel, client)
    yield opened[1]


def _close_admin(address: str) -> None:
    """Close the admin channel to ``address``, if one is open (its emulator stopped)."""
    with _ADMIN_LOCK:
        opened = _ADMIN.pop(address, None)
    if opened is not None:
        opened[0].close()  # all the transport's close() would do, and typed-context safe


def _instance_name(project: str, instance: str) -> str:
    return f"projects/{project}/instances/{instance}"


def list_tables(
    address: str,
    *,
    project: str = PROJECT,
    instance: str = INSTANCE,
    timeout: float = _ADMIN_TIMEOUT,
) -> list[str]:
    """List the table ids of an instance on the emulator.

    Args:
        address: The emulator's ``host:port``.
        project: Project id.
        instance: Instance id.
        timeout: Seconds to wait for the call.

    Returns:
        The table ids (not full resource names), sorted.

    Raises:
        google.api_core.exceptions.GoogleAPIError: The admin call failed.
    """
    with _admin_client(address) as client:
        pager = client.list_tables(
            parent=_instance_name(project, instance), retry=None, timeout=timeout
        )
        return sorted(table.name.rsplit("/", 1)[-1] for table in pager)


def create_table(
    address: str,
    table_id: str,
    families: Iterable[str] = ("cf",),
    *,
    project: str = PROJECT,
    instance: str = INSTANCE,
    exist_ok: bool = False,
) -> None:
    """Create a table on the emulator through the admin API.

    Args:
        address: The emulator's ``host:port``.
        table_id: Id of the table to create.
        families: Column family ids to create, with no garbage-collection rule.
        project: Project id.
        instance: Instance id; the emulator needs no instance to exist.
        exist_ok: Succeed without changes if the table already exists.

    Raises:
        google.api_core.exceptions.AlreadyExists: The table exists and ``exist_ok``
            is false.
        google.api_core.exceptions.GoogleAPIError: The admin call failed.
    """
    table = types.Table(column_families={family: types.ColumnFamily() for family in families})
    with _admin_client(address) as client:
        try:
            client.create_table(
                parent=_instance_name(project, instance),
                table_id=table_id,
                table=table,
                timeout=_ADMIN_TIMEOUT,
            )
        except api_exceptions.AlreadyExists:
            if not exist_ok:
                raise


def delete_table(
    address: str,
    table_id: str,
    *,
    project: str = PROJECT,
    instance: str = INSTANCE,
    missing_ok: bool = False,
) -> None:
    """Delete a table on the emulator through the admin API.

    Args:
        address: The emulator's ``host:port``.
        table_id: Id of the table to delete.
        project: Project id.
        instance: Instance id.
        missing_ok: Succeed if the table does not exist.

    Raises:
        google.api_core.exceptions.NotFound: The table does not exist and
            ``missing_ok`` is false.
        google.api_core.exceptions.GoogleAPIError: The admin call failed.
    """
    with _admin_client(address) as client:
        try:
            client.delete_table(
                name=f"{_instance_name(project, instance)}/tables/{table_id}",
                timeout=_ADMIN_TIMEOUT,
            )
        except api_exceptions.NotFound:
            if not missing_ok:
                raise
