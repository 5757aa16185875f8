"""Bytes are the budget: requests sized at the largest row seen, capped, at any row size.

The bound under test (issue 23): bytes asked of sources and not yet handed to
the caller never exceed ``ReadBudget.bytes`` plus one row per bucket, for
any row sizes, N, mode (ordered, unordered, limited, one request) and driver
(async :class:`Merge`, sync :class:`ThreadMerge`, and the readers over a fake
table). "Asked for" counts, for every request from the moment it starts, all
the bytes it will deliver: a source stops after the row that takes it past
its byte cap, and the fake sources here follow that contract exactly as the
readers do (the reader tests check the readers themselves).
"""

from __future__ import annotations

import asyncio
import threading
import tracemalloc
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Cell, Row
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import CallStats, ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._engine.budget import (
    DEFAULT_ROW_BYTES,
    FIRST_PAGE_ROWS,
    PROBE_ROWS,
    STREAM_MIN_ROWS,
    Ask,
    capped_ask,
    page_ask,
    ramp,
    row_cost,
    stream_rows,
    streamable,
    wire_bytes,
)
from saltedtable._engine.merge import Feed, Sent
from saltedtable._engine.merge_asyncio import Merge
from saltedtable._engine.merge_threads import ThreadMerge
from saltedtable._read.settings import RowSizes
from tests.fakes import FakeTable, SyncFakeTable

PROPERTY = settings(max_examples=25, deadline=None)

Item = tuple[int, int]  # (key, bytes)


class Meter:
    """Bytes asked of sources (all a request will deliver) and bytes handed over."""

    def __init__(self) -> None:
        self.asked = 0
        self.taken = 0
        self.peak = 0
        self.lock = threading.Lock()
        #: (rows asked, byte cap, the merge's largest row when asked) per request.
        self.requests: list[tuple[int, int, int | None]] = []

    def ask(self, will: int) -> None:
        with self.lock:
            self.asked += will
            self.peak = max(self.peak, self.asked - self.taken)

    def take(self, batch: Sequence[Item]) -> None:
        with self.lock:
            self.taken += sum(nbytes for _, nbytes in batch)


def record_asks(merge: Any, meter: Meter) -> None:
    """Record every request's (rows, byte cap, largest row seen) when the merge decides it."""
    demand = merge._demand

    def recorded(feed: Feed[Item]) -> int | None:
        size = demand(feed)
        if size:
            meter.requests.append((size, feed.cap, merge.largest))
        return size

    merge._demand = recorded


def will_deliver(items: Sequence[Item], size: int, cap: int) -> int:
    """Bytes a request of ``size`` rows with byte ``cap`` delivers under the source contract."""
    got = 0
    for n, (_, nbytes) in enumerate(items[:size], 1):
        got += nbytes
        if got > cap and n < size:
            break
    return got


class AsyncSized:
    """An async source over (key, bytes) items that stops after the row past its cap."""

    def __init__(self, items: Sequence[Item], meter: Meter) -> None:
        self.items = list(items)
        self.pos = 0
        self.meter = meter

    async def __call__(self, size: int, feed: Feed[Item]) -> Sent:
        cap = feed.cap
        self.meter.ask(will_deliver(self.items[self.pos :], size, cap))
        got = pushed = 0
        for key, nbytes in self.items[self.pos : self.pos + size]:
            await anyio.lowlevel.checkpoint()
            feed.items.append((key, nbytes))
            feed.keys.append(key)
            self.pos += 1
            pushed += 1
            got += nbytes
            feed.largest = max(feed.largest, nbytes)
            if len(feed.keys) >= feed.wake_at:
                feed.wake()
            if got > cap and pushed < size:
                break
        feed.got_bytes += got
        return Sent(pushed, self.pos < len(self.items))


class SyncSized:
    """The same, for the thread driver."""

    def __init__(self, items: Sequence[Item], meter: Meter) -> None:
        self.items = list(items)
        self.pos = 0
        self.meter = meter

    def __call__(self, size: int, feed: Feed[Item], merge: ThreadMerge[Item]) -> Sent:
        cap = feed.cap
        self.meter.ask(will_deliver(self.items[self.pos :], size, cap))
        got = pushed = 0
        for key, nbytes in self.items[self.pos : self.pos + size]:
            if merge.stopping:
                break
            merge.push(feed, (key, nbytes), key)
            self.pos += 1
            pushed += 1
            got += nbytes
            feed.largest = max(feed.largest, nbytes)
            if got > cap and pushed < size:
                break
        feed.got_bytes += got
        return Sent(pushed, self.pos < len(self.items))


#: Row sizes relative to an 8 MiB budget: 64 KiB-like, 1 MiB-like, larger than the budget.
BUDGET_BYTES = 256 * 1024
ROW_SIZES = {
    "64KiB": (BUDGET_BYTES // 256, BUDGET_BYTES // 64),
    "1MiB": (BUDGET_BYTES // 16, BUDGET_BYTES // 4),
    "mixed": (16, BUDGET_BYTES // 2),
    "over-budget": (BUDGET_BYTES, BUDGET_BYTES * 2),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[list[Item]], int]:
    """Sources of random-size rows: (rows per source, the largest row)."""
    n = draw(st.sampled_from([1, 16, 64]))
    low, high = ROW_SIZES[draw(st.sampled_from(sorted(ROW_SIZES)))]
    per = draw(st.integers(0, 12 if n < 64 else 4))
    sizes = draw(st.lists(st.integers(low, high), min_size=n * per, max_size=n * per))
    parts: list[list[Item]] = [[] for _ in range(n)]
    for i, nbytes in enumerate(sizes):
        parts[i % n].append((i, nbytes))  # keys interleave across sources
    return parts, max(sizes, default=0)


def check_requests(meter: Meter, *, limited: bool) -> None:
    """No request asks more rows than its cap allows at the largest row seen when asked,
    and a read without a limit asks one row a request until it has measured a row."""
    for rows, cap, largest in meter.requests:
        if largest is None and not limited:
            assert rows == PROBE_ROWS, (rows, cap)  # the first wave: rows of any size
        if cap == 0:
            assert rows == 1  # the one row a bucket that holds nothing may always ask
            continue
        est = DEFAULT_ROW_BYTES if largest is None else largest
        assert rows * est <= cap, (rows, cap, largest)


MODES = st.sampled_from(["ordered", "unordered", "limited", "limited-unordered"])


#: A table's row-size hint (see RowSizes): none, or any size, right or wrong.
HINTS = st.none() | st.integers(1, 2 * BUDGET_BYTES)


@PROPERTY
@given(table=tables(), mode=MODES, limit=st.integers(1, 40), hint=HINTS)
def test_async_merge_keeps_bytes_within_the_budget_plus_one_row_per_source(
    table: tuple[list[list[Item]], int], mode: str, limit: int, hint: int | None
) -> None:
    parts, largest = table
    meter = Meter()
    budget = ReadBudget(bytes=BUDGET_BYTES)
    ordered = mode in ("ordered", "limited")
    lim = limit if mode.startswith("limited") else None
    sources = [AsyncSized(p, meter) for p in parts]

    async def main() -> list[Item]:
        merge = Merge(sources, ordered=ordered, limit=lim, budget=budget, largest=hint)
        record_asks(merge, meter)
        out: list[Item] = []
        async with merge:
            async for batch in merge:
                meter.take(batch)
                out += batch
        assert merge.peak_bytes <= budget.bytes + len(parts) * largest
        return out

    got = asyncio.run(main())
    expected = sorted(item for p in parts for item in p)
    if ordered:
        assert got == expected[:lim]
    else:
        assert len(set(got)) == len(got) == len(expected[:lim])
    assert meter.peak <= budget.bytes + len(parts) * largest
    check_requests(meter, limited=lim is not None)


@PROPERTY
@given(table=tables(), mode=MODES, limit=st.integers(1, 40), hint=HINTS)
def test_thread_merge_keeps_bytes_within_the_budget_plus_one_row_per_source(
    table: tuple[list[list[Item]], int], mode: str, limit: int, hint: int | None
) -> None:
    parts, largest = table
    meter = Meter()
    budget = ReadBudget(bytes=BUDGET_BYTES)
    ordered = mode in ("ordered", "limited")
    lim = limit if mode.startswith("limited") else None
    sources = [SyncSized(p, meter) for p in parts]
    got: list[Item] = []
    merge = ThreadMerge(sources, threads=8, ordered=ordered, limit=lim, budget=budget, largest=hint)
    record_asks(merge, meter)
    with merge:
        for batch in merge:
            meter.take(batch)
            got += batch
    expected = sorted(item for p in parts for item in p)
    if ordered:
        assert got == expected[:lim]
    else:
        assert len(set(got)) == len(got) == len(expected[:lim])
    assert merge.peak_bytes <= budget.bytes + len(parts) * largest
    assert meter.peak <= budget.bytes + len(parts) * largest
    check_requests(meter, limited=lim is not None)


# -- the sizing rules themselves --------------------------------------------------------


def test_pages_are_half_a_share_at_the_largest_row_seen() -> None:
    budget = ReadBudget(rows=20_000, bytes=8 << 20)
    first = page_ask(
        budget,
        live=16,
        largest=None,
        held_rows=0,
        held_bytes=0,
        rows_room=20_000,
        bytes_room=8 << 20,
    )
    assert first == Ask(512, 256 << 10)  # half a bucket's share (512 KiB), at 512 B a row
    wide = page_ask(
        budget,
        live=16,
        largest=(64 << 10) + len(b"k00000"),  # a row: 64 KiB of value and its key
        held_rows=0,
        held_bytes=0,
        rows_room=20_000,
        bytes_room=8 << 20,
    )
    assert wide == Ask(3, 256 << 10)  # 256 KiB holds 3 such rows, not 4
    assert page_ask(
        budget,
        live=16,
        largest=1 << 20,
        held_rows=0,
        held_bytes=0,
        rows_room=20_000,
        bytes_room=8 << 20,
    ) == Ask(1, 0)  # a row wider than a page: one row at a time
    assert (
        page_ask(
            budget,
            live=16,
            largest=1 << 20,
            held_rows=1,
            held_bytes=1 << 20,
            rows_room=20_000,
            bytes_room=0,
        )
        is None
    )  # it holds a row: it waits until that one is handed over


def test_a_bucket_asks_few_rows_until_its_rows_are_measured() -> None:
    page = Ask(512, 256 << 10)
    assert ramp(page, requests=0, measured=False) == Ask(FIRST_PAGE_ROWS, 256 << 10)
    # A request that brought nothing: twice as many, up to what the cap allows.
    assert ramp(page, requests=1, measured=False) == Ask(2 * FIRST_PAGE_ROWS, 256 << 10)
    assert ramp(page, requests=10, measured=False) == page
    assert ramp(page, requests=0, measured=True) == page  # measured: the cap sizes it
    assert ramp(Ask(1, 0), requests=0, measured=False) == Ask(1, 0)
    # Before the read has measured any row (its first wave): one row, then doubling.
    assert ramp(page, requests=0, measured=False, read_measured=False) == Ask(PROBE_ROWS, 256 << 10)
    assert ramp(page, requests=3, measured=False, read_measured=False) == Ask(
        PROBE_ROWS << 3, 256 << 10
    )
    assert ramp(page, requests=0, measured=True, read_measured=False) == page


def test_a_table_remembers_recent_row_sizes_by_filter() -> None:
    sizes = RowSizes()
    assert sizes.hint("None") is None
    sizes.learn("None", None)
    sizes.learn("None", 0)
    assert sizes.hint("None") is None  # a read that measured nothing changes nothing
    sizes.learn("None", 70_000)
    sizes.learn("None", 100)
    assert sizes.hint("None") == 70_000  # the largest of the recent reads
    sizes.learn("strip", 6)  # a keys-only read keeps a hint of its own
    assert sizes.hint("None") == 70_000
    assert sizes.hint("strip") == 6
    for _ in range(RowSizes.KEEP):
        sizes.learn("None", 100)
    assert sizes.hint("None") == 100  # the wide one was KEEP reads ago
    for i in range(RowSizes.MOST_FILTERS):
        sizes.learn(f"f{i}", 1)
    assert sizes.hint("None") is None  # the oldest filters are dropped
    assert sizes.hint(f"f{RowSizes.MOST_FILTERS - 1}") == 1


class Recorded(AsyncSized):
    """An :class:`AsyncSized` source that records each request's size, by feed."""

    def __init__(self, items: Sequence[Item], meter: Meter, sizes: dict[int, list[int]]) -> None:
        super().__init__(items, meter)
        self.sizes = sizes

    async def __call__(self, size: int, feed: Feed[Item]) -> Sent:
        self.sizes.setdefault(feed.index, []).append(size)
        return await super().__call__(size, feed)


def test_a_hint_sizes_first_requests_until_the_read_measures_rows_of_its_own() -> None:
    """A 1 KiB hint sizes the first wave (no probes); the narrow rows the read then
    measures replace it: later pages ask what those allow. A hint wider than a page's
    cap is dropped (the read probes, one row a bucket, without waiting for room)."""
    meter = Meter()
    parts = [[(i * 4 + s, 10) for i in range(3000)] for s in range(4)]
    sizes: dict[int, list[int]] = {}

    budget = ReadBudget(bytes=1 << 20)

    async def main(largest: int) -> Merge[Item]:
        sources = [Recorded(p, meter, sizes) for p in parts]
        merge = Merge(sources, budget=budget, largest=largest, ordered=False)
        assert merge.measured_largest is None  # a hint is not a measure
        async with merge:
            async for batch in merge:
                meter.take(batch)
        return merge

    merge = asyncio.run(main(1024))
    assert merge.measured_largest == 10
    for asked in sizes.values():
        assert 1 < asked[0] <= (budget.bytes // 8) // 1024  # a page's cap at the hint
        assert max(asked[1:]) > asked[0]  # (at the hint, a page is at most asked[0])
    sizes.clear()
    merge = asyncio.run(main(budget.bytes))  # wider than a page's cap: dropped
    assert merge.largest == 10
    assert all(asked[0] == PROBE_ROWS for asked in sizes.values())


def test_a_read_of_narrow_rows_pages_by_bytes_after_its_first_requests() -> None:
    """The first request of each source is a probe of PROBE_ROWS (the read has measured
    no row), or FIRST_PAGE_ROWS where a table's earlier read measured its rows; once
    measured, pages are what the byte cap allows (the ramp does not keep a scan's pages
    small), reached within a few requests by a consumer that keeps up (the read-ahead
    window doubles)."""
    meter = Meter()
    parts = [[(i * 4 + s, 100) for i in range(6000)] for s in range(4)]
    sizes: dict[int, list[int]] = {}

    async def main(largest: int | None) -> None:
        sources = [Recorded(p, meter, sizes) for p in parts]
        merge = Merge(sources, budget=ReadBudget(bytes=4 << 20), largest=largest)
        async with merge:
            async for batch in merge:
                meter.take(batch)

    for largest, first in ((None, PROBE_ROWS), (100, FIRST_PAGE_ROWS)):
        sizes.clear()
        asyncio.run(main(largest))
        for asked in sizes.values():
            assert asked[0] == first
            assert max(asked[1:]) > 8 * FIRST_PAGE_ROWS


def test_limited_requests_are_capped_by_bytes() -> None:
    assert capped_ask(100, largest=64 << 10, cap=512 << 10) == Ask(8, 512 << 10)
    assert capped_ask(100, largest=None, cap=512 << 10) == Ask(100, 512 << 10)
    assert capped_ask(100, largest=1 << 20, cap=512 << 10) is None


# -- the readers over a fake table ------------------------------------------------------


def fill(fake: FakeTable, scheme: SaltScheme, sizes: Sequence[int]) -> list[bytes]:
    """Logical rows k00000.. with one cell of the given sizes, written through a salted table."""
    table = SaltedTableAsync(fake, scheme, guard=False)
    keys = [b"k%05d" % i for i in range(len(sizes))]
    entries = [
        RowMutationEntry(k, SetCell("f", b"q", b"v" * max(0, n - len(k)), 1))
        for k, n in zip(keys, sizes, strict=True)
    ]

    async def write() -> None:
        await table.bulk_mutate_rows(entries)

    asyncio.run(write())
    return keys


class ServerMeter:
    """Bytes the fake server has sent and not yet been handed to the caller.

    A stream whose query spans several ranges (the one request over every
    bucket of a bounded read) is counted apart, in :attr:`one_sent`: when it
    misses, its rows are dropped and the buckets read them again, so they
    would count as sent forever; the bucket phase is measured on its own.
    """

    def __init__(self, fake: FakeTable) -> None:
        self.sent = 0
        self.handed = 0
        self.peak = 0
        #: Bytes the one request over every bucket sent (see above).
        self.one_sent = 0
        self.lock = threading.Lock()
        original = fake.read_rows_stream

        async def read_rows_stream(query: ReadRowsQuery, **kwargs: Any) -> Any:
            stream = await original(query, **kwargs)
            apart = len(query.row_ranges) > 1

            async def counted() -> Any:
                async for row in stream:
                    self.send(row, apart)
                    yield row

            return counted()

        fake.read_rows_stream = read_rows_stream  # type: ignore[method-assign]

    def send(self, row: Row, apart: bool = False) -> None:
        nbytes = len(row.row_key) + sum(len(c.value) for c in row.cells)
        with self.lock:
            if apart:
                self.one_sent += nbytes
                return
            self.sent += nbytes
            self.peak = max(self.peak, self.sent - self.handed)

    def hand(self, row: Row, slack: int = 0) -> None:
        with self.lock:
            # The server's key is salted; the caller's is logical: ``slack`` adds the prefix.
            self.handed += len(row.row_key) + slack + sum(len(c.value) for c in row.cells)


READS = ["ordered", "unordered", "limited", "one-request"]


def query_of(read: str, rows: int) -> tuple[ReadRowsQuery, bool]:
    if read == "limited":
        return ReadRowsQuery(limit=max(1, rows // 2)), True
    if read == "one-request":  # a bounded range: tried as one request over every bucket
        return ReadRowsQuery(row_ranges=RowRange(b"k", b"l")), True
    return ReadRowsQuery(), read == "ordered"


#: Rows of the reader test: a few narrow ones first (they size the first
#: requests for many rows), then wide ones (3/4 to 1 WIDE); the budget is a few
#: wide rows, and every table holds at least 4 times the bound in wide rows.
WIDE = 64 << 10
READER_BUDGET = ReadBudget(bytes=4 * WIDE)


def reader_bound(n: int, slack: int) -> int:
    """Bytes sent and not handed over that a read of ``n`` buckets may hold."""
    return READER_BUDGET.bytes + n * (WIDE + slack)


@st.composite
def narrow_then_wide(draw: st.DrawFn, n: int) -> list[int]:
    """Row sizes in key order: up to 2 narrow rows per bucket, then wide ones."""
    slack = len(SaltScheme(n).prefix(0))
    least = WIDE * 3 // 4
    wide_rows = -(-4 * reader_bound(n, slack) // least)  # >= 4x the bound in bytes
    narrow = draw(st.lists(st.integers(16, 512), min_size=0, max_size=2 * n))
    wide = draw(st.lists(st.integers(least, WIDE), min_size=wide_rows, max_size=wide_rows))
    return narrow + wide


def read_through(
    n: int, read: str, sync: bool, sizes: Sequence[int]
) -> tuple[ServerMeter, CallStats, list[bytes], list[bytes], ReadRowsQuery, bool]:
    """Write rows of ``sizes`` to a fake table of ``n`` buckets and read them as ``read`` says."""
    scheme = SaltScheme(n)
    fake = FakeTable()
    keys = fill(fake, scheme, sizes)
    meter = ServerMeter(fake)
    query, ordered = query_of(read, len(sizes))
    stats = CallStats()
    got: list[bytes] = []
    slack = len(scheme.prefix(0))
    if sync:
        table = SaltedTable(  # type: ignore[arg-type]
            SyncFakeTable(fake), scheme, guard=False, budget=READER_BUDGET
        )
        for row in table.read_rows_stream(query, ordered=ordered, stats=stats):
            meter.hand(row, slack)
            got.append(row.row_key)
    else:

        async def main() -> None:
            table = SaltedTableAsync(fake, scheme, guard=False, budget=READER_BUDGET)
            async for row in await table.read_rows_stream(query, ordered=ordered, stats=stats):
                meter.hand(row, slack)
                got.append(row.row_key)

        asyncio.run(main())
    return meter, stats, keys, got, query, ordered


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("n", [1, 16, 64])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_readers_keep_bytes_sent_and_not_handed_over_within_the_bound(
    n: int, read: str, sync: bool, data: st.DataObject
) -> None:
    """Narrow rows size the first requests for many rows; the wide rows after them
    would bring many times the budget if the readers did not stop each request
    after the row that passes its byte cap."""
    sizes = data.draw(narrow_then_wide(n))
    meter, stats, keys, got, query, ordered = read_through(n, read, sync, sizes)
    expected = keys[: query.limit] if query.limit else keys
    assert (got if ordered else sorted(got)) == expected
    bound = reader_bound(n, len(SaltScheme(n).prefix(0)))
    assert meter.peak <= bound, (meter.peak, bound)
    assert 0 < stats.peak_buffered_bytes <= bound
    if read == "one-request" and n > 1:
        # The table is larger than the budget: the one request stops past it (a miss).
        assert stats.one_request is not None
        assert (stats.one_request.result, stats.one_request.went_on) == ("over_budget", True)
        assert 0 < meter.one_sent <= READER_BUDGET.bytes + WIDE + len(SaltScheme(n).prefix(0))
    else:
        assert meter.one_sent == 0


@pytest.mark.parametrize("sync", [False, True])
def test_a_one_request_read_of_wide_rows_stops_at_the_budget_and_goes_on(sync: bool) -> None:
    """The one request of a bounded read asks up to 1,000 rows; rows of 64 KiB pass an
    8 MiB budget after about 128: it stops there, and the buckets' own requests answer."""
    scheme = SaltScheme(16)
    fake = FakeTable()
    keys = fill(fake, scheme, [64 << 10] * 400)
    meter = ServerMeter(fake)
    stats = CallStats()
    query = ReadRowsQuery(row_ranges=RowRange(b"k", b"l"))
    got: list[bytes] = []
    if sync:
        table = SaltedTable(SyncFakeTable(fake), scheme, guard=False)  # type: ignore[arg-type]
        for row in table.read_rows_stream(query, stats=stats):
            meter.hand(row)
            got.append(row.row_key)
    else:

        async def main() -> None:
            table = SaltedTableAsync(fake, scheme, guard=False)
            async for row in await table.read_rows_stream(query, stats=stats):
                meter.hand(row)
                got.append(row.row_key)

        asyncio.run(main())
    assert got == keys
    one = stats.one_request
    assert one is not None
    assert one.result == "over_budget"
    assert one.went_on
    assert one.bytes > 8 << 20  # it stopped after the row that passed the budget
    bound = (8 << 20) + 16 * (65 << 10)
    assert stats.peak_buffered_bytes <= bound
    # The one request sent the budget and one row more, then stopped; its rows
    # are dropped (the buckets read them again), so it is measured apart.
    assert (8 << 20) < meter.one_sent <= (8 << 20) + (65 << 10)
    assert meter.peak <= bound


# -- bad budgets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"rows": 0}, {"rows": -5}, {"bytes": 0}, {"bytes": -1}, {"rows": 2.5}, {"bytes": "8MiB"}],
)
def test_a_bad_budget_is_refused_naming_the_value(bad: dict[str, object]) -> None:
    ((name, value),) = bad.items()
    with pytest.raises(ValueError, match=f"ReadBudget.{name} must be an int >= 1, got {value!r}"):
        ReadBudget(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("sync", [False, True])
def test_a_table_refuses_a_budget_of_the_wrong_type_before_sending_anything(sync: bool) -> None:
    fake = FakeTable()
    make: Any = SaltedTable if sync else SaltedTableAsync
    physical = SyncFakeTable(fake) if sync else fake
    with pytest.raises(TypeError, match="budget must be a ReadBudget, got dict"):
        make(physical, SaltScheme(4), budget={"rows": 10})
    assert fake.stats.queries == []


# -- what a streamed request may bring in; what a held row costs (issue 38) -------------


@settings(max_examples=300, deadline=None)
@given(
    budget_bytes=st.integers(1, 1 << 30),
    sources=st.integers(1, 4096),
    largest=st.integers(1, 1 << 24),
)
def test_streamed_requests_of_every_bucket_fit_the_budget(
    budget_bytes: int, sources: int, largest: int
) -> None:
    """Where a bucket may stream (its page's cap holds STREAM_MIN_ROWS rows), the row
    limits of all buckets' streamed requests, at the largest row seen as it travels, are
    within the budget's bytes: what their transports may buffer has a bound whatever the
    window."""
    budget = ReadBudget(bytes=budget_bytes)
    rows = stream_rows(budget, sources, largest)
    assert rows >= STREAM_MIN_ROWS
    if streamable(budget_bytes // (2 * sources), largest):
        assert sources * rows * wire_bytes(largest) <= budget_bytes
        assert rows >= 2 * STREAM_MIN_ROWS  # (a share holds two pages' caps)


def test_row_cost_counts_the_objects_of_a_held_row() -> None:
    """A row built as the client's row merger builds it costs, as tracemalloc counts it,
    within 15% of what the budget counts for it (keys and values alone: a fifth of it)."""

    def build(i: int, size: int, cells: int) -> Row:
        key = b"\x00\x05user%05d#%05d" % (i // 100, i % 100)
        made = []
        for c in range(cells):
            family = "".join(["c", "f"])  # (a fresh str, as from the response's chunk)
            value = (b"%010d" % i) * (size // 10)
            made.append(Cell(value, key, family, b"q%d" % c, 1_000_000 + i, list([])))
        row = Row(key, made)
        logical = key[2:]
        row.row_key = logical
        for cell in row.cells:
            cell.row_key = logical
        return row

    for size, cells in ((100, 1), (10, 1), (1000, 1), (100, 4)):
        tracemalloc.start()
        try:
            rows = [build(i, size, cells) for i in range(2000)]
            measured = tracemalloc.get_traced_memory()[0] / len(rows)
        finally:
            tracemalloc.stop()
        data = len(rows[0].row_key) + sum(len(c.value) for c in rows[0].cells)
        counted = row_cost(data, cells)
        assert 0.85 * measured <= counted <= 1.15 * measured, (size, cells, measured, counted)
        if size <= 100:
            assert data < 0.5 * measured  # (why the objects must count)


@given(cost=st.integers(1, 1 << 30))
def test_a_row_travels_in_no_more_bytes_than_it_costs(cost: int) -> None:
    """``wire_bytes``: at most the row's cost, at least an eighth of it (and one byte)."""
    assert max(1, cost // 8) <= wire_bytes(cost) <= max(1, cost)
