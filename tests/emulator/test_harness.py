"""The emulator harness itself: finding, starting, stopping and scripting cbtemulator."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell

from saltedtable import testing
from saltedtable._cli.main import main as cli
from saltedtable._exceptions import EmulatorError, EmulatorNotFoundError
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    ENV_VAR,
    INSTANCE,
    Emulator,
    create_table,
    emulator_env,
    find_emulator,
    list_tables,
    start_emulator,
)

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINT = "gcloud components install bigtable"


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _child_emulators() -> set[int]:
    """Pids of cbtemulator processes that this test process started and has not reaped."""
    me = os.getpid()
    found: set[int] = set()
    if Path("/proc").is_dir():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat_line[stat_line.index("(") + 1 : stat_line.rindex(")")]
            ppid = int(stat_line[stat_line.rindex(")") + 2 :].split()[1])
            if ppid == me and comm.startswith("cbtemulator"):
                found.add(int(entry.name))
        return found
    listing = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,comm="], capture_output=True, text=True, check=True
    ).stdout
    for line in listing.splitlines():
        pid_text, ppid_text, command = line.split(None, 2)
        if int(ppid_text) == me and "cbtemulator" in command:
            found.add(int(pid_text))
    return found


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def no_new_emulators(emulator: Emulator) -> Iterator[None]:
    """Asserts after the test that it left no cbtemulator process behind."""
    yield None
    assert _child_emulators() <= {emulator.pid}


# --------------------------------------------------------------------------- find_emulator


def test_find_emulator_honours_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SALTEDTABLE_CBTEMULATOR names the binary, ahead of the SDK and PATH."""
    fake = _script(tmp_path / "my-emulator", "exit 0")
    monkeypatch.setenv(ENV_VAR, str(fake))
    assert find_emulator() == fake


def test_find_emulator_prefers_explicit_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit binary wins over the environment variable."""
    explicit = _script(tmp_path / "explicit", "exit 0")
    monkeypatch.setenv(ENV_VAR, str(_script(tmp_path / "from-env", "exit 0")))
    assert find_emulator(explicit) == explicit
    assert find_emulator(str(explicit)) == explicit


def test_find_emulator_finds_the_installed_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without overrides the real cbtemulator is found (SDK or PATH)."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    found = find_emulator()
    assert found.name == "cbtemulator"
    assert os.access(found, os.X_OK)


def test_bogus_env_var_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong SALTEDTABLE_CBTEMULATOR fails with install hints instead of using another binary."""
    bogus = tmp_path / "no-such-cbtemulator"
    monkeypatch.setenv(ENV_VAR, str(bogus))
    with pytest.raises(EmulatorNotFoundError, match=INSTALL_HINT) as caught:
        find_emulator()
    assert str(bogus) in str(caught.value)


def test_bogus_explicit_path_is_an_error(tmp_path: Path) -> None:
    """An explicit path that is not an executable file raises EmulatorNotFoundError."""
    not_executable = tmp_path / "cbtemulator"
    not_executable.write_text("")
    with pytest.raises(EmulatorNotFoundError, match=INSTALL_HINT):
        find_emulator(not_executable)


def test_missing_everywhere_lists_places_and_install_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no env var, no gcloud and no cbtemulator on PATH, the error says where and how."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulatorNotFoundError) as caught:
        find_emulator()
    message = str(caught.value)
    assert INSTALL_HINT in message
    assert "google-cloud-cli-bigtable-emulator" in message
    assert "docker-compose.yml" in message
    assert ENV_VAR in message
    assert "no gcloud on PATH" in message
    assert str(tmp_path) in message


# --------------------------------------------------------------------------- start / stop


async def test_emulator_serves_admin_and_data_apis(
    emulator: Emulator, make_table: Callable[..., str], data_client: BigtableDataClientAsync
) -> None:
    """A table created through the admin API takes a write and returns it to the data client."""
    assert emulator.host == "127.0.0.1"
    assert emulator.address == f"127.0.0.1:{emulator.port}"
    assert os.environ[EMULATOR_HOST_ENV] == emulator.address
    assert emulator_env(emulator) == {EMULATOR_HOST_ENV: emulator.address}
    table_id = make_table(["cf", "other"])
    assert table_id in list_tables(emulator.address)

    async with data_client.get_table(INSTANCE, table_id) as table:
        await table.mutate_row(b"row-1", SetCell("cf", b"q", b"value"))
        row = await table.read_row(b"row-1")
    assert row is not None
    assert row.row_key == b"row-1"
    assert [(c.family, c.qualifier, c.value) for c in row.cells] == [("cf", b"q", b"value")]


def test_create_table_exist_ok(emulator: Emulator) -> None:
    """create_table raises on a duplicate unless exist_ok, and delete_table honours missing_ok."""
    from google.api_core.exceptions import AlreadyExists, NotFound

    from saltedtable.testing import delete_table

    create_table(emulator.address, "dup-table")
    try:
        with pytest.raises(AlreadyExists):
            create_table(emulator.address, "dup-table")
        create_table(emulator.address, "dup-table", exist_ok=True)
    finally:
        delete_table(emulator.address, "dup-table")
    with pytest.raises(NotFound):
        delete_table(emulator.address, "dup-table")
    delete_table(emulator.address, "dup-table", missing_ok=True)


def test_stop_ends_the_process_and_is_idempotent(no_new_emulators: object) -> None:
    """stop() terminates and reaps the emulator, closes its port, and can be called again."""
    running = start_emulator()
    pid, port = running.pid, running.port
    assert running.running
    assert _port_open(port)
    running.stop()
    assert not running.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not _port_open(port)
    running.stop()  # idempotent
    assert "stopped" in repr(running)


def test_context_manager_stops_on_error(no_new_emulators: object) -> None:
    """Leaving a with-block through an exception still stops the emulator."""
    with pytest.raises(RuntimeError, match="boom"), start_emulator() as running:  # noqa: PT012
        pid = running.pid
        raise RuntimeError("boom")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_start_fails_with_output_when_the_binary_exits(tmp_path: Path) -> None:
    """An emulator that dies during startup raises EmulatorError carrying its output."""
    broken = _script(tmp_path / "cbtemulator", "echo 'kaboom: bad flag' >&2; exit 3")
    with pytest.raises(EmulatorError, match="exited with code 3") as caught:
        start_emulator(binary=broken)
    assert "kaboom: bad flag" in str(caught.value)


def test_start_times_out_and_kills_a_silent_binary(tmp_path: Path) -> None:
    """An emulator that never listens times out, and its process is stopped."""
    pid_file = tmp_path / "pid"
    silent = _script(tmp_path / "cbtemulator", f"echo $$ > {pid_file}; exec sleep 60")
    with pytest.raises(EmulatorError, match="did not open its port in time"):
        start_emulator(binary=silent, startup_timeout=0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_start_on_a_taken_port_fails_fast(emulator: Emulator, no_new_emulators: object) -> None:
    """Asking for a port already in use fails before spawning anything."""
    with pytest.raises(EmulatorError, match=r"127\.0\.0\.1:\d+ is in use"):
        start_emulator(port=emulator.port, startup_timeout=10)


def test_start_is_not_fooled_by_another_server_on_the_port(
    emulator: Emulator, no_new_emulators: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the port is taken after the check, the other server's answers are not taken as ours."""
    monkeypatch.setattr(testing, "_port_in_use", lambda port: False)
    with pytest.raises(EmulatorError, match="address already in use"):
        start_emulator(port=emulator.port, startup_timeout=10)


# --------------------------------------------------------------------------- CLI


def test_cli_runs_a_command_with_the_emulator_env(no_new_emulators: object) -> None:
    """`saltedtable emulator -- cmd` runs cmd with BIGTABLE_EMULATOR_HOST set and returns 0."""
    check = "import os,sys; sys.exit(0 if os.environ.get('BIGTABLE_EMULATOR_HOST') else 3)"
    assert cli(["emulator", "--", sys.executable, "-c", check]) == 0


def test_cli_propagates_a_failing_exit_code(no_new_emulators: object) -> None:
    """A command's non-zero exit code is the CLI's exit code, and the emulator still stops."""
    assert cli(["emulator", "--", sys.executable, "-c", "import sys; sys.exit(7)"]) == 7


def test_cli_creates_tables_before_the_command(
    no_new_emulators: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--table ID:FAMS tables exist, with their families, when the command runs."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    check = (
        "import os, sys\n"
        "from saltedtable.testing import list_tables\n"
        "tables = list_tables(os.environ['BIGTABLE_EMULATOR_HOST'])\n"
        "sys.exit(0 if tables == ['plain', 'wide'] else 5)\n"
    )
    argv = ["--table", "plain", "--table", "wide:a,b", "--", sys.executable, "-c", check]
    assert cli(["emulator", *argv]) == 0


def test_cli_exports_the_project_and_instance_the_other_commands_read(
    no_new_emulators: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command sees the emulator's project and instance as SALTEDTABLE_PROJECT and
    SALTEDTABLE_INSTANCE, so `saltedtable create` needs no --project or --instance there."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("SALTEDTABLE_PROJECT", raising=False)
    monkeypatch.delenv("SALTEDTABLE_INSTANCE", raising=False)
    check = (
        "import os, sys\n"
        "from saltedtable._cli.main import main\n"
        "assert os.environ['SALTEDTABLE_PROJECT'] == 'p-1', os.environ\n"
        "assert os.environ['SALTEDTABLE_INSTANCE'] == 'i-1', os.environ\n"
        "sys.exit(main(['create', 'salted', '-n', '4']) or main(['inspect', 'salted']))\n"
    )
    argv = ["--project", "p-1", "--instance", "i-1", "--", sys.executable, "-c", check]
    assert cli(["emulator", *argv]) == 0


def test_cli_reports_a_missing_emulator_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No emulator: the CLI prints the install hints to stderr and returns 2."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    assert cli(["emulator", "--", sys.executable, "-c", "pass"]) == 2
    captured = capsys.readouterr()
    assert INSTALL_HINT in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_foreground_mode_stops_the_emulator_on_sigterm(emulator: Emulator) -> None:
    """`saltedtable emulator` prints the export lines, serves, and exits 0 on SIGTERM."""
    script = shutil.which("saltedtable", path=str(Path(sys.executable).parent))
    assert script is not None, "the saltedtable console script is not installed (make install)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(EMULATOR_HOST_ENV, None)
    with subprocess.Popen(
        [script, "emulator", "--table", "events:cf,meta"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,  # its own process group: the emulator it starts is in it
    ) as cli:
        try:
            assert cli.stdout is not None
            export = cli.stdout.readline().strip()
            assert export.startswith(f"export {EMULATOR_HOST_ENV}=127.0.0.1:"), export
            address = export.split("=", 1)[1]
            assert cli.stdout.readline() == "export SALTEDTABLE_PROJECT=test-project\n"
            assert cli.stdout.readline() == "export SALTEDTABLE_INSTANCE=test-instance\n"
            assert "tables/events" in cli.stdout.readline()
            assert list_tables(address) == ["events"]
            cli.send_signal(signal.SIGTERM)
            _, err = cli.communicate(timeout=30)
        finally:
            if cli.poll() is None:
                # A failed test must not leave the emulator behind: end the whole group.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(cli.pid, signal.SIGKILL)
                cli.wait()
    assert cli.returncode == 0, err
    assert not _port_open(int(address.rsplit(":", 1)[1]))
