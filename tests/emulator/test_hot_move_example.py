"""examples/hot_move.py (the docs' walk-through of a move) runs on the emulator as it says."""

from __future__ import annotations

import uuid

import pytest

from saltedtable.testing import Emulator
from tests.scripts import run_example

pytestmark = pytest.mark.emulator


def test_the_hot_move_walk_through_runs(emulator: Emulator) -> None:
    done = run_example("hot_move.py", emulator.address, f"move-{uuid.uuid4().hex[:8]}")
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
