"""saltedtable quickstart: salted writes, point reads, a merged prefix scan.

Run it against the local emulator with ``make demo`` (which starts the emulator,
creates the table ``quickstart`` with the column family ``cf``, runs this file
and stops the emulator), or against Cloud Bigtable::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    export SALTEDTABLE_TABLE=quickstart   # an existing table with family "cf"
    python examples/quickstart.py

Keys here start with a user id and end with a timestamp: exactly the shape
that sends every write for a busy user to one tablet. Salting spreads them.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from contextlib import aclosing

from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)

from saltedtable import CallStats, SaltedTableAsync, SaltScheme

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "quickstart")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    # The client warns that it talks to an emulator; that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)


async def main() -> None:
    scheme = SaltScheme(buckets=8)  # crc32 of the whole key, prefixes 0- .. 7-
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = SaltedTableAsync.from_client(client, INSTANCE, TABLE, scheme)

        # 1. Write 3 users x 5 events in one bulk call; keys are logical.
        entries = [
            RowMutationEntry(
                f"user{u}#{1700000000 + t}", SetCell("cf", "event", f"click {u}/{t}".encode())
            )
            for u in (1, 2, 3)
            for t in range(5)
        ]
        await table.bulk_mutate_rows(entries)
        print(f"wrote {len(entries)} rows through {scheme}")

        # 2. A point read computes the salt and reads one row.
        row = await table.read_row(b"user2#1700000003")
        assert row is not None
        print(f"point read: {row.row_key!r} -> {row.cells[0].value!r}")

        # 3. A prefix scan reads every bucket and merges in logical order. A small one
        #    asks all buckets in one request; a big one goes on bucket by bucket.
        print("prefix scan user2#, limit 3:")
        stats = CallStats()
        async with aclosing(table.read_prefix(b"user2#", limit=3, stats=stats)) as rows:
            async for row in rows:
                print(f"  {row.row_key!r}")
        one = stats.one_request  # how the small read's one request went, as data
        if one is not None:
            where = f"{stats.requests} request over every bucket"
            print(f"  ({where}: {one.result}, up to {one.asked} rows)")

        # 4. The plan behind such a scan.
        print(table.plan(ReadRowsQuery(limit=3)).explain())

        # 5. What Bigtable really stores: physical keys, spread over 8 prefixes.
        raw = client.get_table(INSTANCE, TABLE)
        print("physical layout (first 8 rows of the raw table):")
        for raw_row in await raw.read_rows(ReadRowsQuery(limit=8)):
            print(f"  {raw_row.row_key!r}")
        await raw.close()
        await table.close()


if __name__ == "__main__":
    asyncio.run(main())
