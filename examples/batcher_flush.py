"""saltedtable's batcher: append, flush() at a checkpoint, see every failed entry.

The client's ``MutationsBatcherAsync`` has no public flush: what failed is known
only at ``close()``, and only ten of the first and ten of the last failures. The
salted batcher's ``flush()`` returns once everything appended before it is
written, and raises the entries that failed (the caller's own entry objects,
logical keys), so a consumer can commit its offset only after its rows are in.

Run it against the local emulator (``saltedtable emulator --table batcher:cf --
python examples/batcher_flush.py``), or against Cloud Bigtable::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    export SALTEDTABLE_TABLE=batcher   # an existing table with family "cf"
    python examples/batcher_flush.py
"""

from __future__ import annotations

import asyncio
import os
import warnings

from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)

from saltedtable import SaltedTableAsync, SaltScheme

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "batcher")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)


def event(user: int, t: int, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(f"user{user}#{1700000000 + t}", SetCell(family, "e", b"click"))


async def main() -> None:
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = SaltedTableAsync.from_client(client, INSTANCE, TABLE, SaltScheme(buckets=8))
        async with table.mutations_batcher() as batcher:
            # A batch of events; one names a column family the table lacks.
            bad = event(3, 0, family="no-such-family")
            for entry in [event(1, 0), event(2, 0), bad, event(2, 1)]:
                await batcher.append(entry)
            try:
                await batcher.flush()  # everything appended so far is written now
            except MutationsExceptionGroup as group:
                for failed in group.exceptions:
                    assert isinstance(failed, FailedMutationEntryError)
                    assert failed.entry is bad  # the caller's own entry object
                    print(f"failed: {failed.entry.row_key!r}")
            rows = await table.read_rows(ReadRowsQuery())
            print(f"checkpoint: {len(rows)} rows readable")
            await batcher.append(event(4, 0))
        # close() (leaving the block) wrote the rest; the failure above is not raised again.
        row = await table.read_row(b"user4#1700000000")
        print(f"after close: {row is not None}")


if __name__ == "__main__":
    asyncio.run(main())
