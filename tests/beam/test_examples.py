"""The runnable Beam example and the page's snippets work as the docs say; no Beam in the core."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from google.cloud.bigtable.data import BigtableDataClientAsync

from saltedtable import Layout, SaltedTableAsync, SaltScheme
from saltedtable.beam import BigtableTarget
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT
from tests.conftest import MakeTable

REPO = Path(__file__).resolve().parents[2]


def test_beam_migrate_example_runs_on_the_emulator() -> None:
    """examples/beam_migrate.py: backfill, cut-over, delete, parallel read and resalt all agree."""
    env = {k: v for k, v in os.environ.items() if k != EMULATOR_HOST_ENV}
    saltedtable = str(Path(sys.executable).with_name("saltedtable"))
    harness = [saltedtable, "emulator", "--table", "events:cf"]
    command = [*harness, "--table", "events24:cf", "--", sys.executable, "examples/beam_migrate.py"]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=110, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "1. 1000 legacy rows (unsalted), 500 rows after the cutoff (salted)",
        "2. backfill copied 1000 legacy rows; a cutoff reader sees 1500 rows",
        "   verify: 1000 vs 1000 rows, verified: equal",
        "   cut-over: cutoff reader 1500 rows, fully salted reader 1500 rows",
        "   delete-legacy: 1000 legacy rows deleted; the table is fully salted (1500 rows)",
        "   resalt 8 -> 24 buckets into events24: 1500 vs 1500 rows, verified: equal",
    ):
        assert line in done.stdout.splitlines(), done.stdout
    assert "3. ReadSaltedRows: 1500 rows in " in done.stdout


def test_the_core_never_imports_beam() -> None:
    """With Beam installed, importing saltedtable and running its CLI loads no apache_beam."""
    code = (
        "import sys, saltedtable, saltedtable._cli.main as cli; cli.main(['key', '-n', '4', 'k']); "
        "print(sorted(m for m in sys.modules if m.startswith(('apache_beam', 'saltedtable.beam'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]"


async def test_the_scaling_out_snippets_run(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """docs/scaling-out.md's Python examples run as printed (the table and runner swapped in)."""
    table_id = make_table(("cf",))
    page = (REPO / "docs" / "scaling-out.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    pipelines = [s for s in snippets if "beam.Pipeline()" in s]
    writing = next(s for s in pipelines if "WriteSaltedRows(" in s)
    reading = next(s for s in pipelines if "ReadSaltedRows(" in s)
    convention: dict[str, object] = {}
    exec(
        compile(next(s for s in snippets if "events = " in s), "scaling-out.md", "exec"), convention
    )
    assert convention["events"] == BigtableTarget("my-project", "my-instance", "events")
    assert getattr(convention["read"], "target", None) == convention["events"]
    assert getattr(convention["write"], "layout", None) == Layout(SaltScheme(16))
    for code in (writing, reading):
        code = code.replace('"my-project"', repr(PROJECT)).replace('"my-instance"', repr(INSTANCE))
        code = code.replace('"events"', repr(table_id))
        # The default runner would first try to download Beam's Prism runner.
        code = code.replace("beam.Pipeline()", "beam.Pipeline(runner=FnApiRunner())")
        assert table_id in code
        exec(compile(code, "scaling-out.md", "exec"), {"FnApiRunner": FnApiRunner})
    table = await SaltedTableAsync.open(data_client.get_table(INSTANCE, table_id), SaltScheme(16))
    row = await table.read_row(b"user1#42")
    assert row is not None
    assert [c.value for c in row.cells] == [b"x"]
