"""examples/hot_move.py (the docs' walk-through of a move) runs on the emulator as it says."""

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


def test_the_hot_move_walk_through_runs(emulator: Emulator) -> None:
    table = f"move-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address, "SALTEDTABLE_TABLE": table}
    try:
        done = subprocess.run(
            [sys.executable, "examples/hot_move.py"],
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
    assert "before: {b'" in out
    assert out.split("before: ")[1].splitlines()[0].count(":") == 1  # one bucket
    assert "moving: {b't7': 1}" in out
    assert "t7 rows while moving: 99" in out
    assert "a moved row while moving: [(b'v', b'old'), (b'w', b'new')]" in out
    assert "check_and_mutate_row while moving: check_and_mutate_row is atomic on one row" in out
    assert "t7 rows after: 99" in out
    assert out.split("after: ")[-1].splitlines()[0].count(":") == 4  # t7's 4 buckets
