"""Hot keys: one tenant's rows spread over K buckets, one counter row split into K sub-rows.

Run it against the local emulator::

    saltedtable emulator -- python examples/hot_keys.py

or against Cloud Bigtable (it creates the table ``hot_keys`` if missing)::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    python examples/hot_keys.py

Salting spreads many keys; it cannot spread one. Here tenant ``t7`` takes a large
share of the writes (all its rows share a key part, so one bucket), and the row
``stats#clicks`` is a counter written on every click. Both are listed in the
layout record, and a table object made with those lists spreads and reads them.
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
from google.cloud.bigtable.data.mutations import AddToCell, SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    HotLayout,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    SplitKeyError,
    create_salted_table,
    fields,
    split_hot_key,
)

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "hot_keys")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)

SCHEME = SaltScheme(16, key_part=fields(1))  # a tenant's rows share a bucket
AGGREGATES = {"sm": "int64 sum"}  # the table's aggregate families


async def main() -> None:
    create_salted_table(
        PROJECT, INSTANCE, TABLE, SCHEME, families=("cf", "sm:agg=sum"), if_not_exists=True
    )
    # 1. List the hot tenant (before its rows are written) and the counter row in the
    #    layout record (compare-and-swap; `saltedtable split TABLE --part t7 -k 4` does
    #    the same from a shell). A split starts the minimum lead after it is stored
    #    (120 s unless the table's first split says otherwise; 2 s here): until then
    #    writers place rows as before, and the next split waits for that start.
    with BigtableDataClient(project=PROJECT) as sync_client:
        raw = sync_client.get_table(INSTANCE, TABLE)
        _, first = split_hot_key(raw, "part", b"t7", 4, min_lead=2.0)
        _wait_for(first)
        _, hot = split_hot_key(raw, "row", b"stats#clicks", 8)
        _wait_for(hot)
    print("hot lists:", hot.parts, hot.rows)

    async with BigtableDataClientAsync(project=PROJECT) as client:
        # 2. A table object made without the lists is refused: it would under-read.
        #    (One made before a split, with the lists it replaced, adopts it instead.)
        try:
            await SaltedTableAsync.from_client(client, INSTANCE, TABLE, SCHEME).read_row(b"x")
        except SchemeMismatchError:
            print("a table object without the hot lists: refused")

        table = SaltedTableAsync.from_client(
            client, INSTANCE, TABLE, SCHEME, hot=hot, aggregates=AGGREGATES
        )
        # 3. Writes: t7's rows go to one of its 4 buckets each; every click adds 1 to
        #    one of the counter's 8 sub-rows (round robin).
        entries = [RowMutationEntry(b"t7#%04d" % i, SetCell("cf", b"v", b"x")) for i in range(200)]
        entries += [RowMutationEntry(b"stats#clicks", AddToCell("sm", b"n", 1, 0))] * 200
        await table.bulk_mutate_rows(entries)
        physical = await table.table.read_rows(ReadRowsQuery())  # the raw table's rows
        prefixes = Counter(r.row_key[:3] for r in physical if r.row_key != SCHEME_ROW_KEY)
        print("physical rows per bucket prefix:", dict(sorted(prefixes.items())))

        # 4. Reads: the counter reads as one row (its sub-rows in one request, summed);
        #    a prefix scan of t7 reads its 4 buckets, merged in key order, exact limit.
        row = await table.read_row(b"stats#clicks")
        assert row is not None
        print("clicks:", int.from_bytes(row.cells[0].value, "big"))
        first = [r.row_key async for r in table.read_prefix(b"t7#", limit=3)]
        print("t7, first 3:", first)

        # 5. Atomic single-row operations on a split row are refused.
        try:
            await table.check_and_mutate_row(b"stats#clicks", None, true_case_mutations=[])
        except SplitKeyError as exc:
            print("check_and_mutate_row on the counter:", str(exc).split(";")[0])


def _wait_for(hot: HotLayout) -> None:
    """Sleep until the split's start (a table object may use a pending split too)."""
    assert hot.start_micros is not None
    time.sleep(max(0.0, hot.start_micros / 1e6 - time.time()))


if __name__ == "__main__":
    asyncio.run(main())
