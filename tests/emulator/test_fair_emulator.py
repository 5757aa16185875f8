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

import saltedtable._read.sources_threads as sources_threads
from saltedtable import ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import INSTANCE, PROJECT, Emulator
from tests.conftest import MakeTable, salted_table_of
from tests.slot_marks import mark_small_reads

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
            # Counted from when the small read asks for its slot (from its worker
            # thread): requests granted before it asked were not its competitors.
            marks = mark_small_reads(salted.limiter, lambda: len(counting.calls))
            rows = salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
            assert len(marks) == 1, marks
            ahead = scan_requests_before_the_small_one(counting.calls[marks[0] :])
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


def small_read_in_thread(salted: SaltedTable) -> tuple[threading.Thread, list[bytes]]:
    """A thread (not started) that runs ``SMALL`` on ``salted``, and the keys it got."""
    rows: list[bytes] = []
    thread = threading.Thread(
        target=lambda: rows.extend(r.row_key for r in salted.read_rows(SMALL))
    )
    return thread, rows


def test_a_sync_scan_request_gives_way_to_a_small_read_after_its_next_row(
    emulator: Emulator, table_id: str
) -> None:
    """One slot, held by a scan's page request that has sent one row: a small read that
    queues asks it to give way, and gets the slot once that request's next row came (the
    old code kept the slot to the page's end). The scan then reads every row once."""
    with BigtableDataClient(project=PROJECT) as client:
        gated = GatedSync(client.get_table(INSTANCE, table_id))
        salted = SaltedTable(gated, SCHEME, max_concurrent_subscans=1, guard=False)  # type: ignore[arg-type]
        # The table measures its rows first (the scan's first requests are pages, not probes).
        assert [r.row_key for r in salted.read_rows(SMALL)] == KEYS[1000:1010]
        scan: Iterator[Any] = iter(salted.read_rows_stream(ReadRowsQuery(), ordered=False))
        small, small_rows = small_read_in_thread(salted)
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


# -- read-ahead pauses while a small read runs -------------------------------------

FREE_ROWS = 2  # rows a scan request reads before its gate applies
PERMITS = 200


class HeldSmall(Counting):
    """A table whose small read's request is held open until ``small_gate`` is set, and
    whose scan requests read ``FREE_ROWS`` rows freely, then one row per ``permits``
    release (``blocked``: requests waiting there). ``streams``: every scan stream."""

    def __init__(self, table: Any, permits: Any, small_gate: Any) -> None:
        super().__init__(table)
        self.permits = permits
        self.small_gate = small_gate
        self.blocked = 0
        self.streams: list[Any] = []

    def mark(self) -> dict[int, int]:
        """Rows each scan stream has read so far."""
        return {id(stream): stream.rows for stream in self.streams}

    def most_since(self, mark: dict[int, int]) -> int:
        """The most rows one scan stream read since ``mark`` (new streams: all theirs)."""
        return max((st.rows - mark.get(id(st), 0) for st in self.streams), default=0)


class _SyncHeld:
    def __init__(self, owner: HeldSmall, stream: Any, small: bool) -> None:
        self._owner, self._stream, self._small, self.rows = owner, stream, small, 0

    def __iter__(self) -> _SyncHeld:
        return self

    def __next__(self) -> Any:
        owner = self._owner
        if self._small:
            assert owner.small_gate.wait(60)
        elif self.rows >= FREE_ROWS:
            owner.blocked += 1
            assert owner.permits.acquire(timeout=60)
            owner.blocked -= 1
        row = next(self._stream)
        self.rows += 1
        return row

    def close(self) -> None:
        self._stream.close()


class SyncHeldSmall(HeldSmall):
    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Any:
        self._record(query)
        stream = _SyncHeld(self, self._table.read_rows_stream(query, **kwargs), is_small(query))
        if not is_small(query):
            self.streams.append(stream)
        return stream


class _AsyncHeld:
    def __init__(self, owner: HeldSmall, stream: Any, small: bool) -> None:
        self._owner, self._stream, self._small, self.rows = owner, stream, small, 0

    def __aiter__(self) -> _AsyncHeld:
        return self

    async def __anext__(self) -> Any:
        owner = self._owner
        if self._small:
            await owner.small_gate.wait()
        elif self.rows >= FREE_ROWS:
            owner.blocked += 1
            try:
                await owner.permits.acquire()
            finally:
                owner.blocked -= 1
        row = await self._stream.__anext__()
        self.rows += 1
        return row

    async def aclose(self) -> None:
        await self._stream.aclose()


class AsyncHeldSmall(HeldSmall):
    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Any:
        self._record(query)
        stream = _AsyncHeld(
            self, await self._table.read_rows_stream(query, **kwargs), is_small(query)
        )
        if not is_small(query):
            self.streams.append(stream)
        return stream


@pytest.fixture(params=["pauses", "ends"])
def pause_most(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``pauses``: the default PAUSE_MOST (1 s: the small read ends first); ``ends``:
    0.1 s, so the paused requests end and the bucket asks again while it is open."""
    if request.param == "ends":
        monkeypatch.setattr(sources_threads, "PAUSE_MOST", 0.1)
    return str(request.param)


def test_a_sync_scans_read_ahead_pauses_while_a_small_read_runs(
    emulator: Emulator, table_id: str, pause_most: str
) -> None:
    """Slots to spare (64): a scan whose consumer went away has requests running (its
    read-ahead, gated after two rows). While a small read's request is open, each of
    those requests takes at most one more row, although 200 rows are there for them
    (the old code read on). A request paused for PAUSE_MOST ends, and the bucket's next
    one pauses too. Then the scan reads every row once."""
    with BigtableDataClient(project=PROJECT) as client:
        held = SyncHeldSmall(
            client.get_table(INSTANCE, table_id), threading.Semaphore(0), threading.Event()
        )
        salted = SaltedTable(held, SCHEME, max_concurrent_subscans=64, guard=False)  # type: ignore[arg-type]
        scan: Iterator[Any] = iter(salted.read_rows_stream(ReadRowsQuery(), ordered=False))
        small, small_rows = small_read_in_thread(salted)
        try:
            seen = [next(scan).row_key]  # its consumer took a row, then went away
            deadline = time.monotonic() + 60
            while held.blocked < 1:  # a read-ahead request waits at its gate
                assert time.monotonic() < deadline, "no scan request reached its gate"
                time.sleep(0.001)
            small.start()
            while salted.limiter.small < 1:
                assert time.monotonic() < deadline, "the small read's request never began"
                time.sleep(0.001)
            mark = held.mark()
            opened = len(held.streams)
            held.permits.release(PERMITS)
            # Until a request pauses (and, for "ends", a new one opened after one ended),
            # or a request read past the one row it may take.
            while held.most_since(mark) <= 1 and (
                salted.limiter.paused < 1 or (pause_most == "ends" and len(held.streams) == opened)
            ):
                assert time.monotonic() < deadline, "no scan request paused or read on"
                time.sleep(0.001)
            time.sleep(0.3)  # room for a request that does not pause to read on
            most = held.most_since(mark)
            assert most <= 1, f"a scan request read {most} rows while the small read ran"
            held.small_gate.set()
            small.join(60)
            assert small_rows == KEYS[1000:1010]
            held.permits.release(100_000)
            seen.extend(r.row_key for r in scan)
            assert sorted(seen) == KEYS
        finally:
            held.small_gate.set()
            held.permits.release(100_000)
            scan.close()  # type: ignore[attr-defined]
            if small.ident is not None:
                small.join(60)
        assert salted.limiter.free == 64
        assert salted.limiter.small == 0


async def test_an_async_scans_read_ahead_pauses_while_a_small_read_runs(
    data_client: BigtableDataClientAsync, table_id: str, pause_most: str
) -> None:
    """As the sync test, for the async table (all the scan's requests run at once)."""
    held = AsyncHeldSmall(
        data_client.get_table(INSTANCE, table_id), asyncio.Semaphore(0), asyncio.Event()
    )
    salted = SaltedTableAsync(held, SCHEME, max_concurrent_subscans=64, guard=False)  # type: ignore[arg-type]
    scan = await salted.read_rows_stream(ReadRowsQuery(), ordered=False)
    small: asyncio.Task[list[Any]] | None = None
    try:
        with anyio.fail_after(60):
            seen = [(await anext(aiter(scan))).row_key]
            while held.blocked < SCHEME.buckets:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.001)
            small = asyncio.create_task(salted.read_rows(SMALL))
            while salted.limiter.small < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
            mark = held.mark()
            opened = len(held.streams)
            for _ in range(PERMITS):
                held.permits.release()
            while held.most_since(mark) <= 1 and (  # noqa: ASYNC110
                salted.limiter.paused < 1 or (pause_most == "ends" and len(held.streams) == opened)
            ):
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.3)  # room for a request that does not pause to read on
            most = held.most_since(mark)
            assert most <= 1, f"a scan request read {most} rows while the small read ran"
            held.small_gate.set()
            assert [r.row_key for r in await small] == KEYS[1000:1010]
            for _ in range(100_000):
                held.permits.release()
            seen.extend([r.row_key async for r in scan])
            assert sorted(seen) == KEYS
    finally:
        held.small_gate.set()
        for _ in range(100_000):
            held.permits.release()
        await scan.aclose()  # type: ignore[attr-defined]
        if small is not None:
            await asyncio.gather(small, return_exceptions=True)
    assert salted.limiter.borrowed_tokens == 0
    assert salted.limiter.small == 0
