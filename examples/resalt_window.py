"""saltedtable dual-layout window: move entity keys (no time in them) from 8 buckets to 64.

A walk-through, with a long-lived table object that the guard keeps up to date:

1. a table written with 8 buckets (``SaltScheme(8)``), keys ``user1`` ... ``user6``,
   through a table object that stays open the whole time;
2. the window stored in the layout record (``open_resalt_window``, what
   ``saltedtable window open`` runs), starting one lead ahead;
3. from the start, the same object writes the 64-bucket layout, deletes reach both,
   reads combine both, and ``check_and_mutate_row`` is refused;
4. the backfill in two resumable steps, then ``verify_resalt_window`` (nothing left:
   the record says backfilled);
5. ``close_resalt_window``: the old rows and the tombstones go, the record names 64
   buckets, and the object reads with 64 buckets alone.

Run it against the local emulator (starts it, creates the table, stops it)::

    saltedtable emulator --table users:cf,saltedtable,saltedtable-window \
        -- python examples/resalt_window.py
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings

from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    SetCell,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow

from saltedtable import (
    SaltedTableAsync,
    SaltScheme,
    WindowError,
    close_resalt_window,
    open_resalt_window,
    verify_resalt_window,
)

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "users")
#: Seconds between storing the window and its start (a service keeps the default 120 s,
#: longer than its table objects' record_refresh).
LEAD = 1.0

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    # The client warns that it talks to an emulator; that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)

OLD = SaltScheme(8)


async def show(table: SaltedTableAsync, title: str) -> None:
    print(title)
    for row in await table.read_rows(ReadRowsQuery()):
        cells = ", ".join(f"{c.qualifier.decode()}={c.value.decode()}" for c in row.cells)
        print(f"  {row.row_key!r:10} {cells}")


async def main() -> None:
    async with BigtableDataClientAsync(project=PROJECT) as client:
        sync_client = BigtableDataClient(project=PROJECT)
        operator = sync_client.get_table(INSTANCE, TABLE)  # what the commands use
        try:
            # A service's object: it reads the record again at least every LEAD / 2 s.
            table = SaltedTableAsync(
                client.get_table(INSTANCE, TABLE), OLD, record_refresh=LEAD / 2
            )
            for i in range(1, 7):
                await table.mutate_row(f"user{i}", SetCell("cf", b"name", f"n{i}".encode(), 1000))
            print("1. six users written with", table.scheme)

            opened = await asyncio.to_thread(open_resalt_window, operator, 64, min_lead=LEAD)
            assert opened.window is not None
            print(f"2. window stored: {OLD.buckets} -> {opened.window.new_buckets} buckets")
            await asyncio.sleep(max(0.0, opened.window.start_micros / 1e6 + 0.1 - time.time()))

            await table.mutate_row("user2", SetCell("cf", b"mail", b"u2@x", 2000))
            await table.mutate_row("user3", DeleteAllFromRow())
            print("3. the table object is in the", table.window())
            await show(table, "   after a write to user2 and a delete of user3:")
            try:
                await table.check_and_mutate_row("user1", None, true_case_mutations=[])
            except WindowError:
                print("   check_and_mutate_row is refused during the window")

            first = await table.backfill_window(limit=3)
            rest = await table.backfill_window(after=first.cursor)
            cells = first.copied + rest.copied
            print(f"4. backfill: {first.keys} + {rest.keys} old rows, {cells} cells")
            verified = await asyncio.to_thread(verify_resalt_window, operator)
            assert verified.progress is not None
            assert verified.window is not None
            print(f"   verify: left {verified.progress.left}, window {verified.window.state}")

            closed = await asyncio.to_thread(close_resalt_window, operator)
            assert closed.progress is not None
            print(f"5. closed: retired {closed.progress.retired} old rows")
            await table.read_row("user1")  # (any operation reads the record when due)
            await show(table, f"   the same object now reads with {table.scheme.buckets} buckets:")
        finally:
            sync_client.close()


if __name__ == "__main__":
    asyncio.run(main())
