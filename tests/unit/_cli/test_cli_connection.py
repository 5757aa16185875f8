"""Commands that cannot reach Bigtable, or have no credentials: one line, exit 1, in time.

Every request here goes to 127.0.0.1: a closed port, or a socket that accepts TCP
and never speaks HTTP/2. Credentials come from a bad file, with the metadata
server pointed at a closed local port too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core.exceptions import (
    DeadlineExceeded,
    NotFound,
    RetryError,
    ServiceUnavailable,
    Unauthenticated,
)
from google.auth.exceptions import DefaultCredentialsError, RefreshError
from google.cloud.bigtable.data.exceptions import RetryExceptionGroup

from saltedtable._connection import (
    connection_failure,
    credential_source,
    data_timeouts,
    endpoint_label,
)
from tests.cli_helpers import assert_one_line_error, run

EMULATOR = {"BIGTABLE_EMULATOR_HOST": "127.0.0.1:9"}
CLOUD: dict[str, str] = {}
#: Generous: the deadline is 1 s, and before --timeout these ran 50 s and more.
SLACK = 20.0

# -- the line (pure) ---------------------------------------------------------------------------


def test_the_endpoint_is_the_emulator_host_or_clouds_hosts() -> None:
    """Messages name $BIGTABLE_EMULATOR_HOST, or Cloud Bigtable's data and admin hosts."""
    assert endpoint_label(EMULATOR) == (
        "the Bigtable emulator at 127.0.0.1:9 ($BIGTABLE_EMULATOR_HOST)"
    )
    assert "bigtable.googleapis.com:443" in endpoint_label(CLOUD)
    assert "bigtableadmin.googleapis.com:443" in endpoint_label(CLOUD)


def test_the_credential_source_is_the_file_or_the_default_ones() -> None:
    """Messages name $GOOGLE_APPLICATION_CREDENTIALS and its path, else the default credentials."""
    assert credential_source({"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}) == (
        "$GOOGLE_APPLICATION_CREDENTIALS (/k.json)"
    )
    assert "application default credentials" in credential_source({})


def test_data_timeouts_cap_every_operation_and_attempt() -> None:
    """Every data request's operation timeout is the --timeout; no attempt is longer."""
    assert data_timeouts(None) == {}
    capped = data_timeouts(5.0)
    assert capped["default_read_rows_operation_timeout"] == 5.0
    assert capped["default_mutate_rows_operation_timeout"] == 5.0
    assert capped["default_operation_timeout"] == 5.0
    assert max(capped.values()) == 5.0
    assert data_timeouts(100.0)["default_attempt_timeout"] == 20.0  # the client's own


def test_unreachable_and_timed_out_requests_name_the_endpoint() -> None:
    """Refused connections and deadlines, retried or not, name the endpoint and the timeout."""
    refused = ServiceUnavailable("failed to connect to all addresses; Connection refused")
    line = connection_failure(refused, timeout=2, environ=EMULATOR)
    assert line == (
        "cannot reach the Bigtable emulator at 127.0.0.1:9 ($BIGTABLE_EMULATOR_HOST): "
        "failed to connect to all addresses; Connection refused"
    )
    retried = DeadlineExceeded("operation_timeout of 2.0s exceeded")
    retried.__cause__ = RetryExceptionGroup([DeadlineExceeded("attempt"), refused])
    line = connection_failure(retried, timeout=2, environ=EMULATOR)
    assert line is not None
    assert line.startswith("cannot reach the Bigtable emulator at 127.0.0.1:9")
    assert "within --timeout 2 s: failed to connect" in line
    admin_retry = RetryError("Timeout of 2.0s exceeded", refused)
    assert connection_failure(admin_retry, timeout=2, environ=CLOUD) == (
        "cannot reach Cloud Bigtable at bigtable.googleapis.com:443 "
        "(admin: bigtableadmin.googleapis.com:443) within --timeout 2 s: "
        "failed to connect to all addresses; Connection refused"
    )
    silent = DeadlineExceeded("Deadline Exceeded")
    line = connection_failure(silent, timeout=1.5, environ=EMULATOR)
    assert line is not None
    assert "did not finish within --timeout 1.5 s" in line
    assert "127.0.0.1:9" in line


def test_credential_errors_name_the_source() -> None:
    """No usable credentials names where they came from; refused ones name the endpoint too."""
    environ = {"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}
    bad = DefaultCredentialsError("File /k.json is not a valid json file.", ValueError("x"))
    assert connection_failure(bad, timeout=15, environ=environ) == (
        "no usable Google Cloud credentials in $GOOGLE_APPLICATION_CREDENTIALS (/k.json): "
        "File /k.json is not a valid json file. (set BIGTABLE_EMULATOR_HOST to use the emulator)"
    )
    line = connection_failure(RefreshError("invalid_grant"), timeout=15, environ=environ)
    assert line == (
        "the credentials in $GOOGLE_APPLICATION_CREDENTIALS (/k.json) could not be used: "
        "invalid_grant"
    )
    line = connection_failure(Unauthenticated("bad token"), timeout=15, environ=environ)
    assert line is not None
    assert line.startswith("Cloud Bigtable at bigtable.googleapis.com:443")
    assert "refused the credentials in $GOOGLE_APPLICATION_CREDENTIALS (/k.json)" in line


def test_other_errors_are_left_to_the_command() -> None:
    """A missing table or a plain error is not a connection failure."""
    assert connection_failure(NotFound("table"), timeout=15, environ=EMULATOR) is None
    assert connection_failure(ValueError("x"), timeout=15, environ=EMULATOR) is None


# -- the commands, against 127.0.0.1 ------------------------------------------------------------

#: Every command that talks to Bigtable (the table need not exist: nothing answers).
COMMANDS = [
    ("create", "t", "-n", "4"),
    ("inspect", "t"),
    ("guard", "t", "-n", "4"),
    ("read", "t"),
    ("lookup", "t", "k"),
    ("count", "t"),
    ("key", "--table", "t", "k"),
    ("advise", "--table", "t"),
]
WHERE = ("--project", "p", "--instance", "i")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_waits_15_seconds_at_most_by_default(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    """--timeout defaults to 15 s (the clients' own default is 60 s, retries 600 s)."""
    code, out, _ = run(capsys, command[0], "--help")
    assert code == 0
    assert "(default 15)" in " ".join(out.split()).rsplit("--timeout SECONDS", 1)[1][:120]


@pytest.fixture
def closed_port() -> str:
    """host:port of a local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """host:port of a local socket that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def bad_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Cloud Bigtable (no emulator) with a credentials file that is not one."""
    path = tmp_path / "key.json"
    path.write_text('{"type": "service_account"')
    monkeypatch.delenv("BIGTABLE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    # Should anything look further, the metadata server is a closed local port.
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    return path


def _run_within(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], timeout: float
) -> tuple[int, str, str, float]:
    start = time.monotonic()
    code, out, err = run(capsys, *command, *WHERE, "--timeout", str(timeout))
    return code, out, err, time.monotonic() - start


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_closed_port_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    closed_port: str,
    command: tuple[str, ...],
) -> None:
    """Nothing listening: exit 1 within the timeout, one line naming the emulator host."""
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", closed_port)
    code, out, err, took = _run_within(capsys, command, 1)
    assert (code, out) == (1, "")
    assert_one_line_error(err, f"cannot reach the Bigtable emulator at {closed_port}")
    assert took < 1 + SLACK


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_an_endpoint_that_never_answers_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    silent_endpoint: str,
    command: tuple[str, ...],
) -> None:
    """TCP accepted, no HTTP/2: exit 1 within the timeout, one line naming host and timeout."""
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", silent_endpoint)
    code, out, err, took = _run_within(capsys, command, 1)
    assert (code, out) == (1, "")
    assert_one_line_error(err, silent_endpoint, "did not finish within --timeout 1 s")
    assert took < 1 + SLACK


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_bad_credentials_are_one_line_naming_the_file(
    capsys: pytest.CaptureFixture[str], bad_credentials: Path, command: tuple[str, ...]
) -> None:
    """A credentials file that is not one: exit 1, one line naming the variable and the file."""
    code, out, err, _ = _run_within(capsys, command, 15)
    assert (code, out) == (1, "")
    assert_one_line_error(
        err, f"$GOOGLE_APPLICATION_CREDENTIALS ({bad_credentials})", "not a valid json file"
    )


def test_the_process_prints_one_line_and_exits_in_time(closed_port: str, tmp_path: Path) -> None:
    """As a process too: stderr is the one line (no traceback at exit), status 1, in time."""
    root = str(Path(__file__).resolve().parents[3])  # this checkout's saltedtable
    env = {**os.environ, "BIGTABLE_EMULATOR_HOST": closed_port, "PYTHONPATH": root}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "from saltedtable._cli.main import main; raise SystemExit(main())",
         "inspect", "t", *WHERE, "--timeout", "1"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        check=False,
    )  # fmt: skip
    assert time.monotonic() - start < 1 + SLACK
    assert (done.returncode, done.stdout) == (1, "")
    assert_one_line_error(done.stderr, closed_port)
