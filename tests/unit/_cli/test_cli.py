"""The command line through ``main([...])``: output, exit codes and one-line errors.

``saltedtable advise`` has its own file, tests/unit/advise/test_advise_cli.py.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

import saltedtable._cli.emulator as _emulator_cmd
from tests.cli_helpers import assert_one_line_error, run

# -- every command ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["key"], ["explain"], ["advise"], ["emulator"]])
def test_help_everywhere(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """--help works for the program and every command and exits 0."""
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith("usage: saltedtable")


def test_every_timeout_option_takes_seconds_with_the_shared_default() -> None:
    """--timeout of every command is a positive number of seconds, DEFAULT_TIMEOUT unless given."""
    from saltedtable._cli.main import _parser
    from saltedtable._connection import DEFAULT_TIMEOUT

    commands = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    with_timeout = sorted(
        name
        for name, parser in commands.items()
        if any("--timeout" in action.option_strings for action in parser._actions)
    )
    assert with_timeout == [
        "advise",
        "count",
        "create",
        "guard",
        "inspect",
        "key",
        "lookup",
        "read",
        "resalt",
        "split",
    ]
    for name in with_timeout:
        (action,) = (a for a in commands[name]._actions if "--timeout" in a.option_strings)
        assert action.default == DEFAULT_TIMEOUT
        assert action.type is not None
        assert action.type("2.5") == 2.5  # type: ignore[operator]
        with pytest.raises(argparse.ArgumentTypeError):
            action.type("0")  # type: ignore[operator]
        assert action.metavar == "SECONDS"
        assert action.help is not None
        assert action.help.endswith(f"(default {DEFAULT_TIMEOUT:g})")


def test_a_table_command_takes_its_table_and_reports_one_missing() -> None:
    """A command added with add_table_command takes TABLE and where it is, and a table the
    API does not find is a data error (exit 1) naming it, as every table command says it."""
    from google.api_core.exceptions import NotFound

    from saltedtable._cli.admin import add_table_command
    from saltedtable._exceptions import DataError

    def missing(args: argparse.Namespace) -> int:
        raise NotFound("no such table")

    sub = argparse.ArgumentParser(prog="t").add_subparsers(dest="command")
    add_table_command(sub, "probe", missing, help="a probe", description="A probe.")
    parser = sub.choices["probe"]
    args = parser.parse_args(["events", "--instance", "i", "--project", "p", "--timeout", "3"])
    assert (args.table, args.instance, args.project, args.timeout) == ("events", "i", "p", 3.0)
    with pytest.raises(DataError, match="not found: table 'events' in instance 'i'"):
        args.func(args)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("saltedtable ")


def test_no_command_and_unknown_option_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """No command, or an unknown option: exit 2 with one line on stderr."""
    code, _, err = run(capsys)
    assert code == 2
    assert_one_line_error(err, "COMMAND")
    code, _, err = run(capsys, "key", "-n", "4", "--frobnicate", "x")
    assert code == 2
    assert_one_line_error(err, "--frobnicate")


# -- key --------------------------------------------------------------------------------


def test_key_salts_and_unsalts(capsys: pytest.CaptureFixture[str]) -> None:
    """key prints logical, bucket and physical; --unsalt goes back."""
    code, out, _ = run(capsys, "key", "-n", "16", "user123")
    assert (code, out) == (0, "user123\tbucket 7\t07-user123\n")
    code, out, _ = run(capsys, "key", "-n", "16", "--unsalt", "07-user123")
    assert (code, out) == (0, "07-user123\tbucket 7\tuser123\n")
    code, out, _ = run(capsys, "key", "-n", "4", "--hash", "java", "user-site-1")
    assert (code, out) == (0, "user-site-1\tbucket -3\t-3-user-site-1\n")


def test_key_hex(capsys: pytest.CaptureFixture[str]) -> None:
    """--hex takes and shows keys as hex."""
    code, out, _ = run(capsys, "key", "-n", "16", "--hex", b"user123".hex())
    assert code == 0
    assert out == f"{b'user123'.hex()}\tbucket 7\t{b'07-user123'.hex()}\n"


def test_key_rejected_by_the_scheme_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A physical key with the wrong prefix: the good keys still print, exit 1."""
    code, out, err = run(capsys, "key", "-n", "16", "--unsalt", "07-user123", "03-user123")
    assert code == 1
    assert out == "07-user123\tbucket 7\tuser123\n"
    assert "03-user123" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["key", "-n", "0", "x"], "--buckets"),
        (["key", "-n", "four", "x"], "'four' is not an integer"),
        (["key", "-n", "4", "--hash", "md5", "x"], "unknown hash 'md5'"),
        (["key", "-n", "5000", "x"], "4096"),
        (["key", "-n", "4", "--hex", "zz"], "is not hex"),
        (["key", "-n", "4", "--key-part", "words:2", "x"], "unknown --key-part"),
        (["key", "-n", "4", "--key-part", "fields:x", "x"], "integer K"),
        (["key", "-n", "4", "--separator", "1", "x"], "digit"),
    ],
)
def test_key_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """Bad numbers, unknown hashes, bad hex and bad key parts exit 2 with one line."""
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, needle)


# -- explain ---------------------------------------------------------------------------


def test_explain_prefix_confined_to_one_bucket(capsys: pytest.CaptureFixture[str]) -> None:
    """A prefix inside one hashed part is one sub-query."""
    code, out, _ = run(capsys, "explain", "-n", "4", "--key-part", "fields:1", "--prefix", "user1#")
    assert code == 0
    assert out.splitlines()[0] == "1 sub-query"
    assert "bucket 1" in out


def test_explain_range_fans_out(capsys: pytest.CaptureFixture[str]) -> None:
    """A logical range with a limit becomes one sub-query per bucket."""
    code, out, _ = run(capsys, "explain", "-n", "4", "--start", "a", "--end", "b", "--limit", "10")
    assert code == 0
    assert out.splitlines()[0].startswith("4 sub-queries")
    assert "limit 10" in out


def test_explain_bad_limit_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """--limit 0 is a usage error."""
    code, _, err = run(capsys, "explain", "-n", "4", "--prefix", "a", "--limit", "0")
    assert code == 2
    assert_one_line_error(err, "--limit")


# -- emulator ----------------------------------------------------------------------------


def test_emulator_passes_every_option_and_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """emulator parses --port, every --table and the command after -- for run_emulator."""
    seen: list[dict[str, Any]] = []

    def fake_run(**options: Any) -> int:
        seen.append(options)
        return 7

    monkeypatch.setattr(_emulator_cmd, "run_emulator", fake_run)
    argv = ["emulator", "--port", "8086", "--table", "t1:cf,meta", "--table", "t2"]
    code, _, _ = run(capsys, *argv, "--", "python", "-c", "pass", "--table", "x")
    assert code == 7
    assert seen == [
        {
            "port": 8086,
            "tables": [("t1", ("cf", "meta")), ("t2", ("cf",))],
            "command": ["python", "-c", "pass", "--table", "x"],
            "project": "test-project",
            "instance": "test-instance",
            "binary": None,
            "startup_timeout": 30.0,
        }
    ]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--port", "70000"], "--port"),
        (["--port", "not-a-number"], "--port"),
        (["--table", ":cf"], "--table"),
        (["--table", "t:,"], "--table"),
        (["--table=-t"], "not a valid Bigtable table id"),
        (["--table", "t" * 51], "not a valid Bigtable table id"),
        (["--table", "my table"], "not a valid Bigtable table id"),
        (["--table", "t:cf,.meta"], "column family '.meta' is not a valid Bigtable family id"),
        (["--table", "t:cf,cf"], "family 'cf' is given twice"),
        (["--project", ""], "--project"),
        (["--instance", "my instance"], "--instance"),
        (["--startup-timeout", "0"], "--startup-timeout"),
    ],
)
def test_emulator_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """A bad port, table spec or timeout is a one-line usage error, before anything starts."""
    code, _, err = run(capsys, "emulator", *argv)
    assert code == 2
    assert_one_line_error(err, needle)


def test_emulator_exports_what_the_other_commands_read() -> None:
    """The foreground lines export the emulator's address and the project and instance."""
    assert _emulator_cmd.emulator_exports("127.0.0.1:8086", "p", "i") == {
        "BIGTABLE_EMULATOR_HOST": "127.0.0.1:8086",
        "SALTEDTABLE_PROJECT": "p",
        "SALTEDTABLE_INSTANCE": "i",
    }


# -- explain with a time cutoff ------------------------------------------------------


CUT = "2024-01-01T00:00:00+00:00"


def test_explain_shows_the_cutoff_sides(capsys: pytest.CaptureFixture[str]) -> None:
    """Point keys go to their side; a range before the cutoff reads only the legacy side."""
    code, out, _ = run(
        capsys,
        "explain",
        "-n",
        "2",
        "--cutoff",
        CUT,
        "--key",
        "u#1800000000",
        "--key",
        "u#1500000000",
    )
    assert code == 0
    assert "legacy side (unsalted keys, before the cutoff): keys b'u#1500000000'" in out
    assert "keys b'1-u#1800000000'" in out
    code, out, _ = run(
        capsys,
        "explain",
        "-n",
        "4",
        "--cutoff",
        CUT,
        "--time",
        "epoch:s:1:10",
        "--start",
        "user1#1600000000",
        "--end",
        "user1#1700000000",
    )
    assert code == 0
    assert out.startswith("1 sub-query")
    assert "legacy" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cutoff", "2024-01-01"], "no UTC offset"),
        (["--cutoff", "yesterday"], "not an ISO-8601 time"),
        (["--cutoff", CUT, "--time", "bogus"], "use epoch:UNIT"),
        (["--cutoff", CUT, "--time", "epoch:fortnight"], "unit must be one of"),
        (["--time", "epoch:s"], "--time needs --cutoff"),
    ],
)
def test_explain_cutoff_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Bad cutoff options: exit 2 and one line naming the problem."""
    code, out, err = run(capsys, "explain", "-n", "4", "--prefix", "u", *args)
    assert code == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_explain_says_why_a_range_after_the_cutoff_reads_the_legacy_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A range wholly after the cutoff reads the legacy side only for unreadable keys; says so."""
    args = ["explain", "-n", "4", "--cutoff", "2024-01-01T00:00:00+00:00"]
    args += ["--time", "epoch:ms:1:13", "--start", "s1#1704067200000", "--end", "s1#1704068000000"]
    code, out, _ = run(capsys, *args)
    assert code == 0
    assert "legacy side (unsalted keys, read only because keys with an unreadable time" in out
    code, out, _ = run(capsys, *args, "--unreadable", "salted")
    assert code == 0
    assert "legacy" not in out
    assert out.splitlines()[0] == "4 sub-queries"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--part", "t7"], "give -k K (or --finish --part VALUE)"),
        (["--finish", "--row", "r"], "--finish takes --part VALUE only"),
        (["--finish", "--part", "t7", "-k", "4"], "--finish takes --part VALUE only"),
        (["--part", "t7", "-k", "4", "--clock-margin", "0"], "--clock-margin goes with --finish"),
    ],
)
def test_split_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """split needs -k, except --finish, which takes a part and nothing else."""
    code, out, err = run(capsys, "split", "t", "--project", "p", "--instance", "i", *argv)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, needle)
