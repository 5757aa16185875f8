"""Fair sharing of a table object on the emulator (issue 26): read-ahead yields to small reads.

Scans whose consumers took their first rows and went away (slow consumers) still
read ahead; those requests are background. A small read's requests are
foreground: at one slot, no scan request starts while the small read waits for
the slot (the one holding it when the small read asks ends after its next row and
hands it over). With the FIFO slots before, every read-ahead request queued ahead of
it started first. Requests and rows are counted, not timed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowRange,
)

from saltedtable import ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import INSTANCE, PROJECT, Emulator
from tests.conftest import MakeTable, salted_table_of

SCHEME = SaltScheme(16)
KEYS = [b"key-%05d" % i for i in range(2400)]
SMALL = ReadRowsQuery(row_ranges=RowRange(b"key-01000", b"key-01010"))
SCANS = 3


def is_small(query: ReadRowsQuery) -> bool:
    return any(b"key-0100" in (r.start_key or b"") for r in query.row_ranges)


class Counting:
    """A table (async or sync) that records, in order, whether each request it starts is
    the small read's; everything else passes through."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self.calls: list[bool] = []
        self._lock = threading.Lock()

    def _record(self, query: ReadRowsQuery) -> None:
        with self._lock:
            self.calls.append(is_small(query))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


class AsyncCounting(Counting):
    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Any:
        self._record(query)
        return await self._table.read_rows_stream(query, **kwargs)


class SyncCounting(Counting):
    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Any:
        self._record(query)
        return self._table.read_rows_stream(query, **kwargs)


def scan_requests_before_the_small_one(calls: list[bool]) -> int:
    assert True in calls, "the small read made no request"
    return calls.index(True)


@pytest.fixture
def table_id(emulator: Emulator, make_table: MakeTable) -> str:
    return salted_table_of(make_table, SCHEME, KEYS)


async def test_an_async_small_read_overtakes_the_read_ahead_of_scans_nobody_consumes(
    data_client: BigtableDataClientAsync, table_id: str
) -> None:
    counting = AsyncCounting(data_client.get_table(INSTANCE, table_id))
    salted = SaltedTableAsync(
        counting,  # type: ignore[arg-type]
        SCHEME,
        max_concurrent_subscans=1,
        budget=ReadBudget(rows=320),  # small pages: each scan asks again and again
        guard=False,
    )
    scans = [await salted.read_rows_stream(ReadRowsQuery()) for _ in range(SCANS)]
    try:
        with anyio.fail_after(60):
            for scan in scans:
                await anext(aiter(scan))  # its consumer took the first rows, then went away
            while salted.limiter.waiting < SCANS:  # noqa: ASYNC110 (polls the slots, no event to wait on)
                await asyncio.sleep(0.01)
            mark = len(counting.calls)
            rows = await salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
            ahead = scan_requests_before_the_small_one(counting.calls[mark:])
            # At most the request that held the slot when the small read asked (it may
            # open its stream just after); FIFO started every queued one first (>= SCANS).
            assert ahead <= 1, f"{ahead} read-ahead requests started while the small read waited"
            # The scans go on, exact.
            rest = [r.row_key async for r in scans[0]]
            assert len(rest) + 1 >= len(KEYS) - 16
            assert rest == KEYS[len(KEYS) - len(rest) :]
    finally:
        for scan in scans:
            await scan.aclose()  # type: ignore[attr-defined]
    assert salted.limiter.borrowed_tokens == 0


def test_a_sync_small_read_overtakes_the_read_ahead_of_scans_nobody_consumes(
    emulator: Emulator, table_id: str
) -> None:
    with BigtableDataClient(project=PROJECT) as client:
        counting = SyncCounting(client.get_table(INSTANCE, table_id))
        salted = SaltedTable(
            counting,  # type: ignore[arg-type]
            SCHEME,
            max_concurrent_subscans=1,
            budget=ReadBudget(rows=2000),
            guard=False,
        )
        # A sync read runs one request at a time at one slot: more scans, started
        # together, so that their read-ahead queues for the slot at once.
        scans: list[Iterator[Any]] = [
            iter(salted.read_rows_stream(ReadRowsQuery())) for _ in range(2 * SCANS)
        ]
        try:
            firsts = [threading.Thread(target=next, args=(scan,)) for scan in scans]
            for thread in firsts:
                thread.start()  # each consumer takes its first rows, then goes away
            for thread in firsts:
                thread.join()
            deadline = time.monotonic() + 60
            while salted.limiter.waiting < SCANS:  # read-ahead queues for the slot
                assert time.monotonic() < deadline, "the scans' read-ahead never queued"
                time.sleep(0.001)
            mark = len(counting.calls)
            rows = salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
            ahead = scan_requests_before_the_small_one(counting.calls[mark:])
            # At most the request that held the slot when the small read asked (it may
            # open its stream just after); FIFO started every queued one first (>= SCANS).
            assert ahead <= 1, f"{ahead} read-ahead requests started while the small read waited"
            rest = [r.row_key for r in scans[0]]
            assert len(rest) + 1 >= len(KEYS) - 16
            assert rest == KEYS[len(KEYS) - len(rest) :]
        finally:
            for scan in scans:
                scan.close()  # type: ignore[attr-defined]


class GatedSync(Counting):
    """A sync table whose scan requests (not the small read's) take one row per ``gate``
    release while ``gated``, and count the rows they took."""

    def __init__(self, table: Any) -> None:
        super().__init__(table)
        self.gate = threading.Semaphore(0)
        self.gated = True
        self.scan_rows = 0

    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Any:
        self._record(query)
        stream = self._table.read_rows_stream(query, **kwargs)
        return stream if is_small(query) else _GatedRows(self, stream)


class _GatedRows:
    def __init__(self, owner: GatedSync, stream: Any) -> None:
        self._owner = owner
        self._stream = stream

    def __iter__(self) -> _GatedRows:
        return self

    def __next__(self) -> Any:
        owner = self._owner
        if owner.gated:
            assert owner.gate.acquire(timeout=60)
        row = next(self._stream)
        owner.scan_rows += 1
        return row

    def close(self) -> None:
        self._stream.close()


def test_a_sync_scan_request_gives_way_to_a_small_read_after_its_next_row(
    emulator: Emulator, table_id: str
) -> None:
    """One slot, held by a scan's page request that has sent one row: a small read that
    queues asks it to give way, and gets the slot once that request's next row came (the
    old code kept the slot to the page's end). The scan then reads every row once."""
    with BigtableDataClient(project=PROJECT) as client:
        gated = GatedSync(client.get_table(INSTANCE, table_id))
        salted = SaltedTable(gated, SCHEME, max_concurrent_subscans=1, guard=False)  # type: ignore[arg-type]
        scan: Iterator[Any] = iter(salted.read_rows_stream(ReadRowsQuery(), ordered=False))
        small_rows: list[bytes] = []
        small = threading.Thread(
            target=lambda: small_rows.extend(r.row_key for r in salted.read_rows(SMALL))
        )
        try:
            gated.gate.release()
            seen = [next(scan).row_key]
            assert salted.limiter.free == 0  # the scan's request holds the slot, mid-page
            before = gated.scan_rows
            small.start()
            deadline = time.monotonic() + 60
            while salted.limiter.waiting < 1:
                assert time.monotonic() < deadline, "the small read never queued"
                time.sleep(0.001)
            gated.gate.release()  # the page's next row: its request ends there
            small.join(60)
            assert not small.is_alive(), "the small read waited for more than one scan row"
            assert small_rows == KEYS[1000:1010]
            assert gated.scan_rows - before == 1
            gated.gated = False
            gated.gate.release(100_000)
            seen.extend(r.row_key for r in scan)
            assert sorted(seen) == KEYS  # every row once: the next request resumed after it
        finally:
            gated.gated = False
            gated.gate.release(100_000)
            scan.close()  # type: ignore[attr-defined]
            if small.ident is not None:
                small.join(60)
        assert salted.limiter.free == 1
