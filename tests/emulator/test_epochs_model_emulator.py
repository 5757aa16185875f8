"""The model-based test of a table with epochs, on the emulator instead of the fake table.

The machine of ``tests/unit/_async/test_epochs_fake.py`` (writes, deletes, stale rows,
conditional writes, point reads, scans with limits and filters across epoch starts)
runs against two emulator tables: one behind ``SaltedTableAsync`` on a layout with
epochs, one plain as the model. A few short runs: the fake table's test runs many.
Left out here: read-modify-write (its cells take the server's clock, which differs
between the two tables) and one-cell filters (the emulator orders a row's families
its own way, per table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import CellsRowLimitFilter, RowFilter
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from saltedtable.testing import INSTANCE, PROJECT
from tests.unit._async.test_epochs_fake import FILTERS, EpochTableMachine, Shape, shape

MakeTable = Callable[..., str]


def test_a_table_with_epochs_answers_like_a_plain_table_on_the_emulator(
    make_table: MakeTable,
) -> None:
    """Random histories over 2-3 epochs: every read equals the plain emulator table's."""

    class OnEmulator(EpochTableMachine):
        filters: Sequence[RowFilter | None] = [
            f for f in FILTERS if not isinstance(f, CellsRowLimitFilter)
        ]

        def __init__(self) -> None:
            super().__init__()

            names = (make_table(("f1", "f2")), make_table(("f1", "f2")))

            async def connect() -> tuple[BigtableDataClientAsync, Any, Any]:
                # (The client and its tables must be made inside the loop that runs them.)
                client = BigtableDataClientAsync(project=PROJECT)
                return client, *(client.get_table(INSTANCE, name) for name in names)

            self.client, self.model, self.fake = self.run(connect())

        def teardown(self) -> None:
            self.run(self.client.close())
            super().teardown()

        def shape(self, rows: Sequence[Row]) -> Shape:
            # Families in a fixed order (stably: qualifiers and versions keep theirs).
            for row in rows:
                row.cells.sort(key=lambda c: c.family)
            return shape(rows)

        def raw_cell(self, table: Any, key: bytes, value: bytes, ts: int) -> None:
            self.run(table.mutate_row(key, SetCell("f1", b"q", value, ts)))

        def read_modify_write(self, *args: Any) -> None:
            """Not a rule here (server-timed cells)."""

        def every_stream_closed(self) -> None:
            """Not an invariant here (the fake table counts streams)."""

    run_state_machine_as_test(
        OnEmulator, settings=settings(max_examples=6, stateful_step_count=12, deadline=None)
    )
