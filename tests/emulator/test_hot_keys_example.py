"""examples/hot_keys.py (the docs' walk-through) runs on the emulator and prints what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from saltedtable.testing import EMULATOR_HOST_ENV, Emulator, delete_table

pytestmark = pytest.mark.emulator
REPO = Path(__file__).resolve().parents[2]


def test_the_hot_keys_walk_through_runs(emulator: Emulator) -> None:
    table = f"hot-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address, "SALTEDTABLE_TABLE": table}
    try:
        done = subprocess.run(
            [sys.executable, "examples/hot_keys.py"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        delete_table(emulator.address, table, missing_ok=True)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "a table object without the hot lists: refused" in out
    assert "clicks: 200" in out
    assert "t7, first 3: [b't7#0000', b't7#0001', b't7#0002']" in out
    assert "check_and_mutate_row on the counter: check_and_mutate_row is atomic" in out
    # t7's 4 buckets and the counter's 8 sub-rows (the same 8 here: 02-, 06-, ...).
    spread = out.split("physical rows per bucket prefix: ")[1].splitlines()[0]
    assert spread.count(":") == 8
