"""Hot keys: list a tenant whose rows exist already; its rows move while it is read and written.

Run it against the local emulator::

    saltedtable emulator -- python examples/hot_move.py

or against Cloud Bigtable (it creates the table ``hot_move`` if missing)::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    python examples/hot_move.py

Tenant ``t7`` has 100 rows in its one bucket when it turns hot. Listing it with
K = 4 moves about three of every four rows to other buckets: the record names it as
*moving*, table objects made with those lists read both places (and write the new
one), and ``finish_hot_move`` (``saltedtable split TABLE --finish --part t7``) copies
the rows over race-safely, deletes the old copies and ends the move.
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from collections import Counter

from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    HotLayout,
    SaltedTableAsync,
    SaltScheme,
    SplitKeyError,
    create_salted_table,
    fields,
    finish_hot_move,
    split_hot_key,
)

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "hot_move")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)

SCHEME = SaltScheme(16, key_part=fields(1))  # a tenant's rows share a bucket


async def buckets(table: SaltedTableAsync) -> dict[bytes, int]:
    """Physical rows per bucket prefix (the raw table's rows)."""
    rows = await table.table.read_rows(ReadRowsQuery())
    return dict(sorted(Counter(r.row_key[:3] for r in rows if r.row_key != SCHEME_ROW_KEY).items()))


async def main() -> None:
    # The move's tombstones live in the reserved family `saltedtable-window`.
    create_salted_table(
        PROJECT, INSTANCE, TABLE, SCHEME, families=("cf", "saltedtable-window"), if_not_exists=True
    )
    async with BigtableDataClientAsync(project=PROJECT) as client:
        # 1. t7's rows are written before anyone knows it is hot: one bucket.
        plain = SaltedTableAsync.from_client(client, INSTANCE, TABLE, SCHEME)
        entries = [
            RowMutationEntry(b"t7#%03d" % i, SetCell("cf", b"v", b"old", 1000)) for i in range(100)
        ]
        await plain.bulk_mutate_rows(entries)
        print("before:", await buckets(plain))

        # 2. List it with K = 4 (compare-and-swap): its rows move. The split starts a
        #    minimum lead ahead (2 s here; 120 s by default, longer than every table
        #    object's record refresh): until then writers keep the old placement.
        with BigtableDataClient(project=PROJECT) as sync_client:
            table_ = sync_client.get_table(INSTANCE, TABLE)
            _, hot = split_hot_key(table_, "part", b"t7", 4, min_lead=2.0)
        print("moving:", dict(hot.moving))
        assert hot.start_micros is not None
        await asyncio.sleep(max(0.0, hot.start_micros / 1e6 - time.time()) + 0.1)

        # 3. Table objects made with the new lists read both places and write the new one.
        table = SaltedTableAsync.from_client(client, INSTANCE, TABLE, SCHEME, hot=hot)
        moving = [r.row_key async for r in table.read_prefix(b"t7#") if hot.move_keys(r.row_key)[1]]
        await table.mutate_row(moving[0], SetCell("cf", b"w", b"new", 2000))
        await table.mutate_row(moving[1], DeleteAllFromRow())
        row = await table.read_row(moving[0])  # one request carrying both physical keys
        assert row is not None
        print("moving keys:", len(moving), "of 100")
        print("a moved row while moving:", sorted((c.qualifier, c.value) for c in row.cells))
        print("t7 rows while moving:", len([r async for r in table.read_prefix(b"t7#")]))
        try:
            await table.check_and_mutate_row(moving[0], None, true_case_mutations=[])
        except SplitKeyError as exc:
            print("check_and_mutate_row while moving:", str(exc).split(":")[0])

        # 4. Finish: copy race-safely, delete the old copies, verify, end the move. It
        #    waits a clock margin past the start for writers whose clocks run behind
        #    (60 s by default; every writer here shares this machine's clock).
        with BigtableDataClient(project=PROJECT) as sync_client:
            raw = sync_client.get_table(INSTANCE, TABLE)
            done = finish_hot_move(raw, b"t7", clock_margin=0.1)
        print(f"finished: {done.keys} old rows, {done.copied} cells copied, {done.retired} deleted")
        after = HotLayout(SCHEME, parts=hot.parts)  # the record's lists now: no move
        table = SaltedTableAsync.from_client(client, INSTANCE, TABLE, SCHEME, hot=after)
        print("t7 rows after:", len([r async for r in table.read_prefix(b"t7#")]))
        print("after:", await buckets(table))


if __name__ == "__main__":
    asyncio.run(main())
