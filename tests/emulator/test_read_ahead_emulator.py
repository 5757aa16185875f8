"""Read-ahead follows the consumer, on the emulator (issue 26's fair sharing).

Scans whose consumers took their first row and went away ask each bucket for a
first page and at most one more window, then hold no slot while
they wait for their consumers; before, every bucket read ahead its whole share
of the budget (here every row of the table). A small read then takes a slot at
once: the reserve is kept for it, not for the scans' first requests. Rows and
requests are counted (the reads' statistics), not timed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Iterator

import anyio
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowRange,
)

from saltedtable import CallStats, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._engine.budget import STREAM_WINDOW_ROWS, first_window
from saltedtable.testing import INSTANCE, PROJECT, Emulator, create_table, delete_table
from tests.conftest import salted_table_of

SCHEME = SaltScheme(4)
KEYS = [b"key-%05d" % i for i in range(6000)]  # 1,500 a bucket: more than a paused read asks
SMALL = ReadRowsQuery(row_ranges=RowRange(b"key-01000", b"key-01010"))
SCANS = 3
#: A paused consumer's bucket: its first page, then the rest of its window.
PAUSED_MOST = 2 * first_window(SCHEME.buckets)
#: Consecutive checks, 20 ms apart, that find every slot free and nobody waiting.
QUIET = 10


@pytest.fixture(scope="module")
def table_id(emulator: Emulator) -> Iterator[str]:
    """KEYS salted by SCHEME, written once for the module (its tests only read it)."""
    tables: list[str] = []

    def make_table(families: Iterable[str] = ("cf",)) -> str:
        tables.append(f"read-ahead-{uuid.uuid4().hex[:12]}")
        create_table(emulator.address, tables[-1], list(families))
        return tables[-1]

    try:
        yield salted_table_of(make_table, SCHEME, KEYS)
    finally:
        for made in tables:
            delete_table(emulator.address, made, missing_ok=True)


def check_paused_reads(stats: list[CallStats]) -> None:
    for read in stats:
        assert read.ended_early
        for bucket, done in read.buckets.items():
            # Before: 1,500 rows a bucket (the share of the budget is 5,000).
            assert done.rows <= PAUSED_MOST, f"bucket {bucket} read {done.rows} rows ahead"
            assert done.pages <= 2, f"bucket {bucket}: {done.pages} requests"


async def test_async_scans_whose_consumers_pause_read_little_ahead_and_hold_no_slot(
    data_client: BigtableDataClientAsync, table_id: str
) -> None:
    salted = SaltedTableAsync(
        data_client.get_table(INSTANCE, table_id), SCHEME, max_concurrent_subscans=8, guard=False
    )
    stats = [CallStats() for _ in range(SCANS)]
    scans = [await salted.read_rows_stream(ReadRowsQuery(), stats=s) for s in stats]
    try:
        with anyio.fail_after(60):
            for scan in scans:
                await anext(aiter(scan))  # its consumer took the first row, then went away
            quiet = 0
            while quiet < QUIET:  # the reads settle: no request runs or waits
                await asyncio.sleep(0.02)
                limiter = salted.limiter
                quiet = quiet + 1 if not (limiter.borrowed_tokens or limiter.waiting) else 0
            rows = await salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
    finally:
        for scan in scans:
            await scan.aclose()  # type: ignore[attr-defined]
    check_paused_reads(stats)
    assert salted.limiter.borrowed_tokens == 0


def test_sync_scans_whose_consumers_pause_read_little_ahead_and_hold_no_slot(
    emulator: Emulator, table_id: str
) -> None:
    with BigtableDataClient(project=PROJECT) as client:
        salted = SaltedTable.from_client(
            client, INSTANCE, table_id, SCHEME, max_concurrent_subscans=64, guard=False
        )
        stats = [CallStats() for _ in range(SCANS)]
        scans = [iter(salted.read_rows_stream(ReadRowsQuery(), stats=s)) for s in stats]
        try:
            for scan in scans:
                next(scan)
            deadline = time.monotonic() + 60
            quiet = 0
            while quiet < QUIET:
                assert time.monotonic() < deadline, "the scans never settled"
                time.sleep(0.02)
                slots = salted.limiter
                quiet = quiet + 1 if slots.free == slots.total and not slots.waiting else 0
            rows = salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
        finally:
            for scan in scans:
                scan.close()  # type: ignore[attr-defined]
        check_paused_reads(stats)


async def test_an_unordered_streamed_scan_holds_at_most_its_stream_windows(
    data_client: BigtableDataClientAsync, table_id: str
) -> None:
    """A consumer that keeps up with an unordered scan whose buckets stream: each
    bucket's window stops at STREAM_WINDOW_ROWS (a stream's next grant costs no
    round trip), so the read holds few rows at once however large its budget, and
    still makes one request a bucket. Before, the windows grew to the share and the
    read held most of the table at once on the emulator."""
    salted = SaltedTableAsync(
        data_client.get_table(INSTANCE, table_id), SCHEME, max_concurrent_subscans=8, guard=False
    )
    for scan in range(3):  # (a peak depends on scheduling: the bound holds for each scan)
        stats = CallStats()
        keys = [
            r.row_key
            async for r in await salted.read_rows_stream(
                ReadRowsQuery(), ordered=False, stats=stats
            )
        ]
        assert sorted(keys) == KEYS
        # (The table object's first read probes each bucket with one row first.)
        assert stats.requests == SCHEME.buckets * (2 if scan == 0 else 1)
        assert stats.peak_buffered_rows <= SCHEME.buckets * STREAM_WINDOW_ROWS
