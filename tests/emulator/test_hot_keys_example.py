"""examples/hot_keys.py (the docs' walk-through) runs on the emulator and prints what it says."""

from __future__ import annotations

import uuid

import pytest

from saltedtable.testing import Emulator
from tests.scripts import run_example

pytestmark = pytest.mark.emulator


def test_the_hot_keys_walk_through_runs(emulator: Emulator) -> None:
    done = run_example("hot_keys.py", emulator.address, f"hot-{uuid.uuid4().hex[:8]}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "a table object without the hot lists: refused" in out
    assert "clicks: 200" in out
    assert "t7, first 3: [b't7#0000', b't7#0001', b't7#0002']" in out
    assert "check_and_mutate_row on the counter: check_and_mutate_row is atomic" in out
    # t7's 4 buckets and the counter's 8 sub-rows (the same 8 here: 02-, 06-, ...).
    spread = out.split("physical rows per bucket prefix: ")[1].splitlines()[0]
    assert spread.count(":") == 8
