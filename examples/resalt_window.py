"""saltedtable dual-layout window: move entity keys (no time in them) from 8 buckets to 64.

A walk-through:

1. a table written with 8 buckets (``SaltScheme(8)``), keys ``user1`` ... ``user6``;
2. a table object in the window, ``SaltedTableAsync(table, SaltScheme(64),
   window=Window(SaltScheme(8), SaltScheme(64)), guard=False)``: writes go to the
   64-bucket layout, deletes reach both, reads combine both;
3. a write and a delete during the window, and reads that show one logical table;
4. the backfill in two resumable steps, a verify pass, retiring the old rows;
5. the window's tombstones dropped, and the table read with 64 buckets alone.

Run it against the local emulator (starts it, creates the table, stops it)::

    saltedtable emulator --table users:cf,saltedtable-window -- python examples/resalt_window.py
"""

from __future__ import annotations

import asyncio
import os
import warnings

from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, SetCell
from google.cloud.bigtable.data.mutations import DeleteAllFromRow

from saltedtable import SaltedTableAsync, SaltScheme, Window, WindowError

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "users")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    # The client warns that it talks to an emulator; that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)

OLD, NEW = SaltScheme(8), SaltScheme(64)


async def show(table: SaltedTableAsync, title: str) -> None:
    print(title)
    for row in await table.read_rows(ReadRowsQuery()):
        cells = ", ".join(f"{c.qualifier.decode()}={c.value.decode()}" for c in row.cells)
        print(f"  {row.row_key!r:10} {cells}")


async def main() -> None:
    async with BigtableDataClientAsync(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, TABLE)
        before = SaltedTableAsync(raw, OLD, guard=False)
        for i in range(1, 7):
            await before.mutate_row(f"user{i}", SetCell("cf", b"name", f"n{i}".encode(), 1000))
        print("1. six users written with", OLD)

        window = Window(OLD, NEW)
        table = SaltedTableAsync(raw, NEW, window=window, guard=False)
        print("2. a table in the", window)

        await table.mutate_row("user2", SetCell("cf", b"mail", b"u2@x", 2000))
        await table.mutate_row("user3", DeleteAllFromRow())
        await show(table, "3. after a write to user2 and a delete of user3:")
        try:
            await table.check_and_mutate_row("user1", None, true_case_mutations=[])
        except WindowError:
            print("   check_and_mutate_row is refused during the window")

        first = await table.backfill_window(limit=3)
        rest = await table.backfill_window(after=first.cursor)
        cells = first.copied + rest.copied
        print(f"4. backfill: {first.keys} + {rest.keys} old rows, {cells} cells")
        print("   verify: left", (await table.verify_window()).left)
        print("   retired", (await table.retire_window()).retired, "old rows")

        await table.drop_window_tombstones()
        after = SaltedTableAsync(raw, NEW, guard=False)
        await show(after, "5. the window closed; read with 64 buckets alone:")


if __name__ == "__main__":
    asyncio.run(main())
