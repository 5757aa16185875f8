"""Finish a forward-only migration, then resalt, with Apache Beam on the local emulator.

Run it under the emulator harness (it creates the two tables)::

    saltedtable emulator --table events:cf --table events24:cf -- \\
        python examples/beam_migrate.py

1. ``events`` holds unsalted rows from before 2024 and salted rows after the
   cutoff (a forward-only migration, as in examples/migrate_forward.py).
2. backfill -> verify -> cut-over -> delete-legacy moves the old rows into the
   salted layout while a reader keeps seeing every row once.
3. The table is read in parallel with ``ReadSaltedRows``, then resalted from
   8 to 24 buckets into ``events24`` and verified.

Needs Apache Beam: ``pip install '.[beam]'`` from a checkout.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import warnings

from apache_beam.transforms.combiners import Count
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)

from saltedtable import CutoffPolicy, SaltedTableAsync, SaltScheme, epoch_field
from saltedtable.beam import (
    BigtableTarget,
    MigrationReport,
    ReadSaltedRows,
    backfill,
    counters,
    cut_over,
    delete_legacy,
    resalt,
    run_pipeline,
    verify_backfill,
)
from saltedtable.testing import INSTANCE, PROJECT

warnings.filterwarnings("ignore", "Connecting to Bigtable emulator")

SCHEME = SaltScheme(8)
CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
POLICY = CutoffPolicy(CUTOFF, epoch_field("ms", index=1, digits=13))
C = 1_704_067_200_000
EVENTS = BigtableTarget(PROJECT, INSTANCE, "events")


def key(sensor: int, ms: int) -> bytes:
    """``sensor<n>#<epoch millis>``."""
    return b"sensor%d#%013d" % (sensor, ms)


async def prepare() -> None:
    """Legacy rows written unsalted, then the cutoff turned on and newer rows salted."""
    async with BigtableDataClientAsync(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, "events")
        old = [key(s, C - m * 60_000) for s in range(5) for m in range(1, 201)]
        await raw.bulk_mutate_rows(
            [RowMutationEntry(k, SetCell("cf", b"temp", b"old", 1_000)) for k in old]
        )
        table = await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY, family="cf")
        new = [key(s, C + m * 60_000) for s in range(5) for m in range(100)]
        await table.bulk_mutate_rows(
            [RowMutationEntry(k, SetCell("cf", b"temp", b"new", 2_000)) for k in new]
        )
        print(f"1. {len(old)} legacy rows (unsalted), {len(new)} rows after the cutoff (salted)")


async def count(cutoff: CutoffPolicy | None) -> int:
    """Rows a reader of the table sees (with or without the cutoff)."""
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = await SaltedTableAsync.open(
            client.get_table(INSTANCE, "events"), SCHEME, cutoff=cutoff
        )
        return len(await table.read_rows(ReadRowsQuery()))


def verdict(report: MigrationReport) -> str:
    """The rows compared on each side and the outcome."""
    assert report.checksums is not None
    a, b = report.checksums.rows
    return f"{a} vs {b} rows, {'verified: equal' if report.ok else 'NOT equal'}"


def main() -> None:
    """Run the whole story."""
    asyncio.run(prepare())
    report = backfill(EVENTS, SCHEME, POLICY, split_bytes=16_000)
    copied = sum(v for n, v in report.counters.items() if n.startswith("rows_copied."))
    seen = asyncio.run(count(POLICY))
    print(f"2. backfill copied {copied} legacy rows; a cutoff reader sees {seen} rows")
    check = verify_backfill(EVENTS, SCHEME, POLICY, split_bytes=16_000)
    print(f"   verify: {verdict(check)}")
    cut_over(EVENTS, SCHEME, POLICY, split_bytes=16_000)
    print(
        f"   cut-over: cutoff reader {asyncio.run(count(POLICY))} rows, "
        f"fully salted reader {asyncio.run(count(None))} rows"
    )
    # No service reads with the cutoff here: nothing to wait for (grace=0).
    done = delete_legacy(EVENTS, SCHEME, POLICY, split_bytes=16_000, grace=0)
    print(
        f"   delete-legacy: {done.counters['legacy_rows_deleted']} legacy rows deleted; "
        f"the table is fully salted ({asyncio.run(count(None))} rows)"
    )
    read = ReadSaltedRows(EVENTS, SCHEME, split_bytes=4_000)
    result = run_pipeline(lambda p: p | read | Count.Globally())
    found = counters(result)
    rows = sum(v for n, v in found.items() if n.startswith("rows_read."))
    print(
        f"3. ReadSaltedRows: {rows} rows in {found['splits']} splits over {SCHEME.buckets} buckets"
    )
    target = BigtableTarget(PROJECT, INSTANCE, "events24")
    moved = resalt(EVENTS, SCHEME, target, SaltScheme(24), family="cf", split_bytes=16_000)
    print(f"   resalt 8 -> 24 buckets into events24: {verdict(moved)}")


if __name__ == "__main__":
    main()
