"""The runnable Beam example works as the docs say; the core never imports Beam."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from saltedtable.testing import EMULATOR_HOST_ENV

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
        "import sys, saltedtable, saltedtable._cli as cli; cli.main(['key', '-n', '4', 'k']); "
        "print(sorted(m for m in sys.modules if m.startswith(('apache_beam', 'saltedtable.beam'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]"
