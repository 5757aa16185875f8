"""saltedtable forward-only migration: keep the old unsalted rows, salt only what comes after.

A walk-through on an existing table whose keys end with a timestamp
(``sensor1#1703980800000``, epoch milliseconds):

1. a legacy table, written with the plain Bigtable client (no salt anywhere);
2. the cutoff turned on: ``SaltedTableAsync.open(table, scheme, cutoff=CutoffPolicy(...))``;
3. writes continue: keys at or after the cutoff are salted, keys before it (late
   arrivals) go to the legacy layout, decided by the timestamp *in the key*;
4. reads see one table: a scan merges both layouts in logical key order, point
   reads find rows on either side;
5. the physical layout on both sides;
6. the read plans: a scan across the boundary reads both sides, one before the
   cutoff reads only the legacy side;
7. the ambiguity guard: a legacy key that looks salted is refused on open.

Run it against the local emulator (starts it, creates the table, stops it)::

    saltedtable emulator --table legacy_events:cf -- python examples/migrate_forward.py

or against Cloud Bigtable (an existing, empty table with the column family ``cf``)::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    export SALTEDTABLE_TABLE=legacy_events
    python examples/migrate_forward.py
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import warnings
from contextlib import aclosing

from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    LayoutError,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
)

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "legacy_events")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    # The client warns that it talks to an emulator; that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)

CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
CUTOFF_MS = 1_704_067_200_000
MINUTE = 60_000


def key(sensor: int, ms: int) -> bytes:
    """``sensor<n>#<13-digit epoch millis>``: the usual hot-spotting time-series key."""
    return b"sensor%d#%013d" % (sensor, ms)


def reading(row_key: bytes, value: str) -> RowMutationEntry:
    """One temperature cell."""
    return RowMutationEntry(row_key, SetCell("cf", b"temp", value.encode()))


def where(table: SaltedTableAsync, row_key: bytes) -> str:
    """Which side a logical key lives on, and its physical key."""
    bucket, physical = table.layout.locate(row_key)
    side = "legacy (unsalted)" if bucket is None else f"salted (bucket {bucket})"
    return f"{side:<19} {physical!r}"


async def main() -> None:
    scheme = SaltScheme(buckets=8)  # crc32 of the whole key, prefixes 0- .. 7-
    # The time is field 1 (after the first '#'), 13 digits: a range inside one
    # sensor whose times are all before the cutoff then reads only the legacy side.
    policy = CutoffPolicy(CUTOFF, timestamp=epoch_field("ms", index=1, digits=13))
    async with BigtableDataClientAsync(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, TABLE)

        # 1. The legacy table: written long ago with the plain client, keys unsalted.
        legacy = [
            reading(key(s, CUTOFF_MS - m * MINUTE), f"{20 + m}.{s}")
            for s in (1, 2)
            for m in (1, 2, 3)
        ]
        await raw.bulk_mutate_rows(legacy)
        print(f"1. legacy table: {len(legacy)} unsalted rows written with the plain client")

        # 2. Turn the cutoff on. open() first samples the table: legacy keys that
        #    look salted (or rows on the wrong side) would be refused here.
        table = await SaltedTableAsync.open(raw, scheme, cutoff=policy)
        print(f"2. cutoff on at {CUTOFF.isoformat()}: {scheme}, keys read with {policy.timestamp}")

        # 3. Keep writing. The timestamp in the key decides, never the clock.
        new = [
            reading(key(s, CUTOFF_MS + m * MINUTE), f"{30 + m}.{s}") for s in (1, 2) for m in (0, 1)
        ]
        await table.bulk_mutate_rows(new)
        late = key(1, CUTOFF_MS - 90 * 1000)  # an old reading that arrives only now
        await table.mutate_row(late, SetCell("cf", b"temp", b"19.9"))
        print("3. writes after the cutoff:")
        for row_key in [e.row_key for e in new[:2]] + [late]:
            print(f"   {row_key!r:<28} -> {where(table, row_key)}")

        # 4. Read across the boundary: one stream, merged in logical key order.
        print("4. merged scan of sensor1#:")
        async with aclosing(table.read_prefix(b"sensor1#")) as rows:
            async for row in rows:
                side = "legacy" if table.layout.locate(row.row_key)[0] is None else "salted"
                print(f"   {row.row_key!r}  {row.cells[0].value.decode():>5}  ({side})")
        for row_key in (key(2, CUTOFF_MS - 2 * MINUTE), key(2, CUTOFF_MS + MINUTE)):
            row = await table.read_row(row_key)
            assert row is not None
            print(f"   point read {row.row_key!r} -> {row.cells[0].value.decode()}")

        # 5. What Bigtable really stores.
        print("5. physical layout (raw table):")
        for raw_row in await raw.read_rows(ReadRowsQuery()):
            physical = raw_row.row_key
            if physical == SCHEME_ROW_KEY:
                side = "record"  # the layout record the guard stored with the first write
            else:
                side = "salted" if scheme.has_prefix(physical) else "legacy"
            print(f"   {side:<6} {physical!r}")

        # 6. The plans: across the boundary both sides are read, merged; before it, one.
        across = RowRange(key(1, CUTOFF_MS - 5 * MINUTE), key(1, CUTOFF_MS + 5 * MINUTE))
        print("6. plan of a scan across the cutoff:")
        print(
            "   "
            + table.plan(ReadRowsQuery(row_ranges=across, limit=5)).explain().replace("\n", "\n   ")
        )
        before = RowRange(
            key(1, CUTOFF_MS - 5 * MINUTE), key(1, CUTOFF_MS - 1), end_is_inclusive=True
        )
        print("   plan of a scan before the cutoff:")
        print("   " + table.plan(ReadRowsQuery(row_ranges=before)).explain().replace("\n", "\n   "))

        # 7. The ambiguity guard: a legacy key shaped like a salted one ("3-...")
        #    would be read back as salted. open() refuses instead of mixing rows.
        look_alike = b"3-import#%013d" % (CUTOFF_MS - MINUTE)
        await raw.mutate_row(look_alike, SetCell("cf", b"temp", b"0"))
        try:
            await SaltedTableAsync.open(raw, scheme, cutoff=policy)
        except LayoutError as error:
            offender = str(error).splitlines()[1].strip()
            print(f"7. guard: open() refused with LayoutError:\n   {offender}")
            print("   way out: SaltScheme(8, marker=b'~') moves salted keys away from such rows")
        await raw.mutate_row(look_alike, DeleteAllFromRow())

        await table.close()


if __name__ == "__main__":
    asyncio.run(main())
