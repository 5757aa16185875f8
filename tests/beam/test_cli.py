"""``saltedtable migrate``: per-step options, one-line errors and exit codes (2 usage, 1 data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry, SetCell

from saltedtable import SaltedTableAsync, SaltScheme
from saltedtable._cli.main import main as cli_main
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, Emulator
from tests.conftest import MakeTable

REPO = Path(__file__).resolve().parents[2]
EMULATOR_WARNING = "Connecting to Bigtable emulator:RuntimeWarning"
CUTOFF = ["--cutoff", "2024-01-01T00:00:00+00:00", "--time", "epoch:ms:1:13"]

# Runs several `saltedtable migrate` command lines in one process (one Beam import) and
# prints, for each, its exit code and everything it wrote to stderr, as JSON lines.
_RUNNER = """
import contextlib, io, json, os, sys, tempfile
from saltedtable._cli.main import main
for argv in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)  # whatever reaches the terminal's stderr, logging included
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
        err.seek(0)
        text = err.read().decode()
    print(json.dumps({"argv": argv, "code": code, "stderr": text}), flush=True)
"""


def base(table: str, buckets: int = 8) -> list[str]:
    """The options naming a table of the test instance."""
    return [
        "--bigtable-project",
        PROJECT,
        "--instance",
        INSTANCE,
        "--table",
        table,
        "-n",
        str(buckets),
    ]


def run_cli(emulator: Emulator, argvs: list[list[str]]) -> list[dict[str, object]]:
    """Run each command line in one fresh interpreter on the emulator; collect code and stderr."""
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address}
    done = subprocess.run(
        # The client's own warning about the emulator is not the command's output.
        [sys.executable, "-W", f"ignore:{EMULATOR_WARNING}", "-c", _RUNNER, json.dumps(argvs)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(argvs), done.stdout + done.stderr
    return results


async def _salted_table(
    data_client: BigtableDataClientAsync, make_table: MakeTable, families: tuple[str, ...]
) -> str:
    """A 16-bucket table with a layout record and rows in two families (when it has them)."""
    table_id = make_table(families)
    table = await SaltedTableAsync.open(
        data_client.get_table(INSTANCE, table_id), SaltScheme(16), family="cf"
    )
    await table.bulk_mutate_rows(
        [
            RowMutationEntry(b"user%d" % i, [SetCell(f, b"q", b"v", 1000) for f in families])
            for i in range(40)
        ]
    )
    return table_id


def test_usage_errors_exit_2_with_one_line(
    make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad values, unknown options and options of another step exit 2 before any data moves."""
    source, dest = make_table(("cf",)), make_table(("cf",))
    resalt = ["migrate", "resalt", *base(source, 16), "--to-table", dest, "--family", "cf"]
    cases = {
        "unknown hash": ["migrate", "verify", *base(source), *CUTOFF, "--hash", "sha1"],
        "no buckets": ["migrate", "verify", *base(source)[:-1], "0", *CUTOFF],
        "cutoff without offset": ["migrate", "verify", *base(source), "--cutoff", "2024-01-01"],
        "cutoff not a time": ["migrate", "verify", *base(source), "--cutoff", "yesterday"],
        "bad time reader": [
            "migrate",
            "verify",
            *base(source),
            "--cutoff",
            "2024-01-01T00:00:00+00:00",
            "--time",
            "epoch:parsecs",
        ],
        "misspelt option": [*resalt, "--to_buckets", "24"],
        "nothing changes": resalt,
        "zero new buckets": [*resalt, "--to-buckets", "0"],
        "negative split": [*resalt, "--to-buckets", "24", "--split-mb", "-5"],
        "option of another step": ["migrate", "verify", *base(source), *CUTOFF, "--prune"],
        "resalt without a destination": ["migrate", "resalt", *base(source), "--family", "cf"],
        "no step": ["migrate", *base(source)],
        "new scheme without a copy": [
            "migrate",
            "verify",
            *base(source),
            *CUTOFF,
            "--to-buckets",
            "24",
        ],
    }
    for name, argv in cases.items():
        assert cli_main(argv) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("saltedtable migrate"), (name, err)
        assert len(err.strip().splitlines()) == 1, (name, err)
    assert cli_main([*resalt, "--to_buckets", "24"]) == 2
    assert "--to_buckets" in capsys.readouterr().err


def test_each_step_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate STEP --help`` lists that step's options only; ``migrate --help`` the steps."""
    shown = {}
    for step in ("backfill", "verify", "cutover", "delete-legacy", "resalt"):
        assert cli_main(["migrate", step, "--help"]) == 0
        shown[step] = capsys.readouterr().out
        assert f"saltedtable migrate {step}" in shown[step]
    assert "--prune" in shown["backfill"]
    assert "--family" in shown["backfill"]
    assert "--to-buckets" not in shown["backfill"]
    assert "--prune" not in shown["verify"]
    assert "--to-buckets" in shown["verify"]
    assert "--to-buckets" in shown["resalt"]
    assert "--prune" not in shown["resalt"]
    assert "--family" not in shown["delete-legacy"]
    assert cli_main(["migrate", "--help"]) == 0
    overview = capsys.readouterr().out
    assert all(step in overview for step in shown)


async def test_data_errors_exit_1_with_one_line_and_no_traceback(
    emulator: Emulator, data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Missing tables, a wrong source scheme and a missing family: exit 1, one line, no noise."""
    source = await _salted_table(data_client, make_table, ("cf", "cg"))
    no_cg = make_table(("cf",))
    empty = make_table(("cf",))
    resalt = ["migrate", "resalt", "--to-buckets", "24", "--family", "cf"]
    results = run_cli(
        emulator,
        [
            ["migrate", "verify", *base("nosuch"), *CUTOFF],
            [*resalt, *base(source, 16), "--to-table", "nosuch"],
            [*resalt, *base(source, 8), "--to-table", empty],  # the source has 16 buckets
            [*resalt, *base(source, 16), "--to-table", no_cg],  # cg is missing there
            ["migrate", "backfill", *base(empty), *CUTOFF],  # no record, no --family
        ],
    )
    for result in results:
        err = str(result["stderr"])
        assert result["code"] == 1, result
        assert len(err.strip().splitlines()) == 1, result
        assert "Traceback" not in err
    errors = [str(r["stderr"]) for r in results]
    assert "nosuch" in errors[0]
    assert "not found" in errors[0]
    assert "nosuch" in errors[1]
    assert "buckets: stored 16, now 8" in errors[2]
    assert "cg" in errors[3]
    assert "--family" in errors[4]


def test_help_prints_no_import_noise(emulator: Emulator) -> None:
    """``saltedtable migrate backfill --help`` writes its help and nothing on stderr."""
    saltedtable = str(Path(sys.executable).with_name("saltedtable"))
    done = subprocess.run(
        [saltedtable, "migrate", "backfill", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--prune" in done.stdout
    assert done.stderr == ""
