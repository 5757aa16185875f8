"""The model-based test of a table in a dual-layout window, on the emulator.

The machine of ``tests/unit/_async/test_window_fake.py`` (writes and deletes by
``mutate_row``, bulk and batcher; point reads, scans with limits and filters;
backfill steps, a backfill that crashes mid-key and resumes, retiring, closing)
runs against two emulator tables: the physical table behind the window (with the
window's tombstone family) and a plain model table. A few short runs: the fake
table's test runs many.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from saltedtable import SCHEME_ROW_KEY, LayoutError, SaltScheme
from saltedtable._async.window_table import swap_record
from saltedtable._guard.record import (
    SCHEME_QUALIFIER,
    LayoutRecord,
    describe_layout,
    record_of_row,
)
from saltedtable._guard.window_state import advance_window, window_of
from saltedtable._scheme.window import WINDOW_FAMILY
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT
from tests.unit._async.test_window_fake import Shape, WindowMachine, shape
from tests.unit._async.test_window_record import OPEN

MakeTable = Callable[..., str]
REPO = Path(__file__).resolve().parents[2]


def test_a_table_in_a_window_answers_like_a_plain_table_on_the_emulator(
    make_table: MakeTable,
) -> None:
    """Random histories through the window: every read equals the plain emulator table's."""

    class OnEmulator(WindowMachine):
        def __init__(self) -> None:
            super().__init__()
            names = (make_table(("cf", "cg")), make_table(("cf", "cg", WINDOW_FAMILY)))

            async def connect() -> tuple[BigtableDataClientAsync, Any, Any]:
                # (The client and its tables must be made inside the loop that runs them.)
                client = BigtableDataClientAsync(project=PROJECT)
                return client, *(client.get_table(INSTANCE, name) for name in names)

            self.client, self.model, self.fake = self.run(connect())

        def teardown(self) -> None:
            self.run(self.client.close())
            super().teardown()

        def shape(self, rows: Sequence[Row | None]) -> Shape:
            # Families in a fixed order (stably: qualifiers and versions keep theirs).
            for row in rows:
                if row is not None:
                    row.cells.sort(key=lambda c: c.family)
            return shape(rows)

        def stored(self) -> list[tuple[bytes, set[str]]]:
            rows = self.run(self.fake.read_rows(ReadRowsQuery()))
            return [
                (r.row_key, {c.family for c in r.cells})
                for r in rows
                if r.row_key != SCHEME_ROW_KEY
            ]

        def raw_rows(self, keys: list[bytes]) -> list[Row]:
            return list(self.run(self.fake.read_rows(ReadRowsQuery(row_keys=keys))))

    run_state_machine_as_test(
        OnEmulator, settings=settings(max_examples=5, stateful_step_count=15, deadline=None)
    )


def test_the_resalt_window_example_runs_on_the_emulator() -> None:
    """examples/resalt_window.py runs under ``saltedtable emulator`` and says what it did."""
    env = {k: v for k, v in os.environ.items() if k != EMULATOR_HOST_ENV}
    cli = "from saltedtable._cli.main import main; raise SystemExit(main())"
    command = [
        *(sys.executable, "-c", cli, "emulator"),
        *("--table", "users:cf,saltedtable,saltedtable-window"),
        *("--", sys.executable, "examples/resalt_window.py"),
    ]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "2. window stored: 8 -> 64 buckets",
        "3. the table object is in the resalt window",
        "  b'user2'   mail=u2@x, name=n2",
        "   check_and_mutate_row is refused during the window",
        "4. backfill: 3 + 2 old rows, 5 cells",
        "   verify: left 0, window backfilled",
        "5. closed: retired 5 old rows",
        "   the same object now reads with 64 buckets:",
    ):
        assert line in done.stdout, done.stdout
    assert done.stdout.count("  b'user2'   mail=u2@x, name=n2") == 2  # in and after the window
    assert "b'user3'" not in done.stdout


class _Racing:
    """A table whose every conditional write is preceded by another writer's record."""

    def __init__(self, table: Any, other: LayoutRecord) -> None:
        self.table, self.other = table, other

    async def read_row(self, *args: Any, **kwargs: Any) -> Any:
        return await self.table.read_row(*args, **kwargs)

    async def check_and_mutate_row(self, *args: Any, **kwargs: Any) -> Any:
        cell = SetCell("meta", SCHEME_QUALIFIER, self.other.encode())
        await self.table.mutate_row(SCHEME_ROW_KEY, cell)
        return await self.table.check_and_mutate_row(*args, **kwargs)


async def test_a_window_is_opened_and_closed_in_the_record_on_the_emulator(
    make_table: MakeTable,
) -> None:
    """The record's compare-and-swap on the emulator: open, a lost race, advance, close."""
    name = make_table(("meta", "cf"))
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = client.get_table(INSTANCE, name)
        plain = describe_layout(SaltScheme(16))
        await table.mutate_row(SCHEME_ROW_KEY, SetCell("meta", SCHEME_QUALIFIER, plain.encode()))
        opened = await swap_record(table, OPEN)
        state = window_of(opened)
        assert state is not None
        assert state.state == "open"
        other = advance_window(opened, "backfilled")
        with pytest.raises(LayoutError, match="changed while"):
            await swap_record(
                _Racing(table, other), functools.partial(advance_window, to="backfilled")
            )
        assert record_of_row(await table.read_row(SCHEME_ROW_KEY)) == other
        await swap_record(table, functools.partial(advance_window, to="closed"))
        assert record_of_row(await table.read_row(SCHEME_ROW_KEY)) == describe_layout(
            SaltScheme(64)
        )
