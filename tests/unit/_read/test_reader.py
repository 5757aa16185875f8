"""Reads on the FakeTable: bounded requests per bucket, slots, errors, stats, leaving early."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import anyio
import pytest
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import StripValueTransformerFilter

from saltedtable import CallStats, ReadBudget, SaltedTableAsync, SaltScheme, SubScan
from saltedtable._engine.budget import PROBE_ROWS, row_cost, stream_rows, wire_bytes
from saltedtable._read.cancel_asyncio import end_stream
from tests.fakes import FakeTable

KEYS = [b"k%05d" % i for i in range(400)]
#: What one of these rows (a logical key and a one-cell value of 6 bytes each) counts.
ROW_COST = row_cost(12, 1)


async def filled(**kwargs: object) -> tuple[FakeTable, SaltedTableAsync]:
    """A fake table of 400 rows over 4 buckets, its query log cleared."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), **kwargs)  # type: ignore[arg-type]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    fake.stats.queries.clear()
    return fake, table


@pytest.mark.parametrize("ordered", [True, False])
async def test_small_budgets_read_in_many_requests_without_gaps_or_repeats(ordered: bool) -> None:
    """A budget of 28 rows over 4 buckets: each bucket's stream is granted 7 rows at a time,
    and ended and resumed after its last row whenever the consumer is behind; every row once."""
    fake, table = await filled(budget=ReadBudget(rows=28))
    stats = CallStats()
    got = []
    async for row in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered, stats=stats):
        got.append(row.row_key)
        if len(got) % 5 == 0:
            await asyncio.sleep(0)  # a consumer that is sometimes behind
    assert (got if ordered else sorted(got)) == KEYS
    # Streamed: each bucket's first request is a probe of one row (the table's first
    # read has measured no row); the others carry the bucket's share of the budget's
    # bytes as their row limit (more than the 7-row grants they carry), and the budget
    # bounds what was asked and not taken.
    firsts = _firsts(fake.stats.queries)
    assert len(firsts) == 4
    for q in fake.stats.queries:
        if q is firsts[q.row_ranges[0].start_key[:2]]:
            assert q.limit == PROBE_ROWS
        else:
            assert q.limit == stream_rows(ReadBudget(rows=28), 4, ROW_COST)
    assert stats.peak_buffered_rows <= 28
    # Resumed right after the last row a stream delivered: no row came twice.
    assert fake.stats.rows_sent == len(KEYS)
    assert stats.requests == len(fake.stats.queries) >= 4


@pytest.mark.parametrize("ordered", [True, False])
async def test_streamed_requests_end_at_their_share_of_the_bytes(ordered: bool) -> None:
    """A budget of 64,000 bytes over 4 buckets: each streamed request's row limit is its
    bucket's share of the bytes at the rows' size in the transport (262 rows), so a
    bucket of 600 rows takes several requests, each resuming after the last; every row
    once."""
    keys = [b"k%05d" % i for i in range(2400)]
    budget = ReadBudget(bytes=64_000)
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), budget=budget)  # type: ignore[arg-type]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    await table.read_rows(ReadRowsQuery(limit=1))  # (the table measures its rows)
    fake.stats.queries.clear()
    fake.stats.rows_sent = 0
    stats = CallStats()
    stream = await table.read_rows_stream(ReadRowsQuery(), ordered=ordered, stats=stats)
    got = [row.row_key async for row in stream]
    assert (got if ordered else sorted(got)) == keys
    assert fake.stats.rows_sent == len(keys)
    share = stream_rows(budget, 4, ROW_COST)
    assert share == 64_000 // 4 // wire_bytes(ROW_COST) == 262
    limits = [q.limit for q in fake.stats.queries]
    assert None not in limits
    assert all(4 * limit * wire_bytes(ROW_COST) <= budget.bytes for limit in limits if limit)
    assert limits.count(share) >= 4 * (600 // share)
    assert stats.peak_buffered_bytes <= budget.bytes + 4 * ROW_COST


async def test_small_budgets_page_when_the_buckets_do_not_fit_the_slots() -> None:
    """Two slots for four buckets: requests of at most a share of the budget, every row once."""
    fake, table = await filled(budget=ReadBudget(rows=28), max_concurrent_subscans=2)
    rows = await table.read_rows(ReadRowsQuery())
    assert [r.row_key for r in rows] == KEYS
    assert all(c.row_key == r.row_key for r in rows for c in r.cells)
    firsts: dict[bytes, int | None] = {}
    for q in fake.stats.queries:
        firsts.setdefault(q.row_ranges[0].start_key[:2], q.limit)
    # At most a share (7) each first: fewer where the buckets wait for slots in turn.
    assert len(firsts) == 4
    assert all(size is not None and size <= 7 for size in firsts.values())
    # A bucket's share grows to 28 / 3, 28 / 2, 28 as the others finish first.
    assert all(q.limit is not None and q.limit <= 28 for q in fake.stats.queries)
    assert len(fake.stats.queries) >= len(KEYS) // 7
    assert set(fake.stats.endings) == {"exhausted"}


async def test_a_large_budget_reads_each_bucket_in_one_request() -> None:
    """Four buckets, a budget far above the table: one request per bucket, once the table
    object has measured its rows; its first read probes each bucket with one row first."""
    fake, table = await filled()
    assert len(await table.read_rows(ReadRowsQuery())) == len(KEYS)
    assert [q.limit for q in fake.stats.queries[:4]] == [PROBE_ROWS] * 4
    assert len(fake.stats.queries) == 8
    assert len(await table.read_rows(ReadRowsQuery())) == len(KEYS)
    assert len(fake.stats.queries) == 8 + 4
    assert table.limiter.borrowed_tokens == 0


async def test_a_missed_one_request_sizes_the_buckets_first_requests() -> None:
    """A bounded read bigger than its one request over every bucket: that request measured
    rows, so the buckets' own first requests are sized from them, not probes of one row."""
    fake, table = await filled(budget=ReadBudget(one_request_rows=20))
    query = ReadRowsQuery(row_ranges=RowRange(KEYS[0], KEYS[-1] + b"\x00"))
    assert [r.row_key for r in await table.read_rows(query)] == KEYS
    one, *buckets = fake.stats.queries
    assert len(one.row_ranges) == 4  # the one request, over every bucket
    assert len(buckets) == 4  # then one request a bucket
    assert all(q.limit is None or q.limit > PROBE_ROWS for q in buckets)


def _firsts(queries: list[ReadRowsQuery]) -> dict[bytes, ReadRowsQuery]:
    """Each bucket's first request."""
    firsts: dict[bytes, ReadRowsQuery] = {}
    for q in queries:
        firsts.setdefault(q.row_ranges[0].start_key[:2], q)
    return firsts


async def test_a_table_hint_sizes_first_requests() -> None:
    """A table object's second scan starts from what its first measured: no probes (an
    unordered read streams at once; an ordered one's first requests keep a row limit of a
    share). A keys-only read's measure does not size a full scan."""
    fake, table = await filled(budget=ReadBudget(rows=28))
    await table.read_rows(ReadRowsQuery(row_filter=StripValueTransformerFilter(True)))
    fake.stats.queries.clear()
    assert len(await table.read_rows(ReadRowsQuery())) == len(KEYS)  # (full rows: probes)
    assert {q.limit for q in _firsts(fake.stats.queries).values()} == {PROBE_ROWS}
    for ordered in (True, False):
        fake.stats.queries.clear()
        got = [r async for r in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered)]
        assert len(got) == len(KEYS)
        firsts = _firsts(fake.stats.queries)
        if ordered:
            assert all(q.limit is not None and PROBE_ROWS < q.limit <= 7 for q in firsts.values())
        else:
            # (streamed at once: a row limit of the bucket's share of the bytes, not a probe)
            streamed = stream_rows(ReadBudget(rows=28), 4, ROW_COST)
            assert all(q.limit == streamed for q in firsts.values())


@pytest.mark.parametrize("ordered", [True, False])
async def test_a_missed_one_request_is_the_reads_own_measure(ordered: bool) -> None:
    """The rows of a missed one request are the read's own: its buckets' first requests may
    stream at once, but an ordered read's first keeps a row limit (the merge waits for
    every bucket's first row, which comes later while other streams are unbounded)."""
    fake, table = await filled(budget=ReadBudget(rows=28, one_request_rows=20))
    query = ReadRowsQuery(row_ranges=RowRange(KEYS[0], KEYS[-1] + b"\x00"))
    got = [r.row_key async for r in await table.read_rows_stream(query, ordered=ordered)]
    assert (got if ordered else sorted(got)) == KEYS
    firsts = _firsts(fake.stats.queries[1:])  # (after the one request)
    if ordered:
        assert all(q.limit is not None and q.limit <= 7 for q in firsts.values())
    else:
        streamed = stream_rows(ReadBudget(rows=28), 4, ROW_COST)
        assert all(q.limit == streamed for q in firsts.values())


async def test_requests_never_exceed_the_slots() -> None:
    """Two slots for four buckets: never more than two requests open at once."""
    fake, table = await filled(max_concurrent_subscans=2, budget=ReadBudget(rows=40))
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == KEYS
    assert fake.stats.max_open <= 2
    assert len(fake.stats.queries) > 4
    assert table.limiter.borrowed_tokens == 0


async def test_limited_reads_ask_little() -> None:
    """A limit of 10 over 4 buckets asks each for a few rows, not pages of the table."""
    fake, table = await filled()
    stats = CallStats()
    rows = await table.read_rows(ReadRowsQuery(limit=10), stats=stats)
    assert [r.row_key for r in rows] == KEYS[:10]
    assert all(q.limit is not None and q.limit <= 10 for q in fake.stats.queries)
    assert stats.rounds in (1, 2)
    settings = stats.settings
    assert settings is not None
    assert (settings.limit, settings.subqueries, settings.ordered) == (10, 4, True)
    assert settings.budget == table.budget
    assert settings.one_request_rows == 0  # a read of whole buckets is not one request
    assert stats.one_request is None


@pytest.mark.parametrize("ordered", [True, False])
async def test_leaving_a_read_cancels_every_request(ordered: bool) -> None:
    """break + aclose: every open request is cancelled while it waits, none abandoned."""
    fake, table = await filled()
    fake.latency = 0.001
    before = asyncio.all_tasks()
    with anyio.fail_after(5):
        stream = await table.read_rows_stream(ReadRowsQuery(), ordered=ordered)
        async for _ in stream:
            break
        await stream.aclose()
    await asyncio.sleep(0)
    assert fake.stats.open_now == 0
    assert "abandoned" not in fake.stats.endings
    assert fake.stats.count("cancelled") >= 1
    assert asyncio.all_tasks() == before
    assert table.limiter.borrowed_tokens == 0


async def test_reads_nested_in_open_reads_always_finish() -> None:
    """Four reads left open mid-stream hold no slot: a fifth read with one slot finishes."""
    _, table = await filled(max_concurrent_subscans=1, budget=ReadBudget(rows=8))
    outer = [await table.read_rows_stream(ReadRowsQuery()) for _ in range(4)]
    # A deadlock never ends: the bound only has to fail it inside pytest-timeout's 120 s,
    # however loaded the machine (the reads take well under a second).
    with anyio.fail_after(60):
        for stream in outer:
            await anext(aiter(stream))  # each outer read is now running
        assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == KEYS
        for stream in outer:
            await stream.aclose()  # type: ignore[attr-defined]
    assert table.limiter.borrowed_tokens == 0


async def test_a_failing_bucket_raises_the_clients_error_with_a_note() -> None:
    """The client's exception type is kept; a note and ``saltedtable_subscan`` say where."""
    fake, table = await filled()
    fake.fail_when = lambda q: any((r.start_key or b"").startswith(b"2-") for r in q.row_ranges)
    fake.fail_with = ServiceUnavailable("bucket 2 is down")
    with anyio.fail_after(5), pytest.raises(ServiceUnavailable, match="bucket 2 is down") as info:
        await table.read_rows(ReadRowsQuery())
    where = info.value.saltedtable_subscan  # type: ignore[attr-defined]
    assert isinstance(where, SubScan)
    assert where.bucket == 2
    assert any("saltedtable: sub-scan of bucket 2" in n for n in info.value.__notes__)


async def test_waiting_for_a_slot_past_the_deadline_is_deadline_exceeded() -> None:
    """A read that cannot get a slot within operation_timeout fails like the client does."""
    _, table = await filled(max_concurrent_subscans=1)
    await table.limiter.acquire()  # someone else holds the only slot
    try:
        with anyio.fail_after(5), pytest.raises(DeadlineExceeded, match="sub-scan slot"):
            await table.read_rows(ReadRowsQuery(), operation_timeout=0.05)
    finally:
        table.limiter.release()


async def test_end_stream_without_a_call_cancels_past_rows_already_received() -> None:
    """A stream holding many received rows is still cancelled while it waits, not abandoned."""
    ended: list[str] = []

    async def stream() -> AsyncGenerator[Row, None]:
        try:
            for response in range(3):
                await asyncio.sleep(0.01)  # the next response arrives
                for i in range(500):  # its rows come out without waiting
                    yield Row(b"k%d-%d" % (response, i), [])
            ended.append("exhausted")
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        except GeneratorExit:
            ended.append("abandoned")
            raise

    rows = stream()
    await anext(rows)
    with anyio.fail_after(5):
        await end_stream(rows)
    assert ended == ["cancelled"]


async def test_end_stream_of_a_finished_or_failed_plain_stream_just_closes_it() -> None:
    """A stream that already ended (or failed) is closed without a task left behind."""

    async def finished() -> AsyncGenerator[Row, None]:
        yield Row(b"k", [])

    async def failing() -> AsyncGenerator[Row, None]:
        yield Row(b"k", [])
        raise ValueError("the stream broke")

    for make in (finished, failing):
        rows = make()
        await anext(rows)
        with anyio.fail_after(5):
            await end_stream(rows)
        with pytest.raises(StopAsyncIteration):
            await anext(rows)


async def test_stats_of_a_read_left_early() -> None:
    """Breaking out records each request, says the caller left, and is not an error."""
    fake, table = await filled()
    fake.latency = 0.001
    stats = CallStats()
    reported: list[CallStats] = []
    table.stats_hook = reported.append
    stream = await table.read_rows_stream(ReadRowsQuery(), stats=stats)
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 20:
            break
    await stream.aclose()  # type: ignore[attr-defined]
    assert reported == [stats]
    assert stats.rows == 20
    assert stats.ended_early
    assert stats.error is None
    assert sum(b.rows for b in stats.buckets.values()) >= 20
    assert all(b.pages >= 1 for b in stats.buckets.values())
    assert all(b.first_page_seconds is not None for b in stats.buckets.values())
    assert stats.requests >= 4
    assert 0 < stats.peak_buffered_rows <= table.budget.rows + 4
    assert stats.settings is not None
    assert stats.settings.subqueries == 4
    assert stats.settings.limit is None


@pytest.mark.parametrize("read", ["one-request", "left-early"])
async def test_a_read_cancelled_during_its_cleanup_is_still_reported_once(read: str) -> None:
    """Cancelled while the stream cleans up: the hook is called once, the CallStats filled.

    Found by differential fuzzing (issue 26, R5): a cancellation landing in the cleanup
    (after the last row of a one-request read, or while aclose() ends a stream left early)
    skipped the statistics. asyncio's cancellation reaches through the cleanup's shields,
    so the report must not depend on the cleanup finishing.
    """
    fake, table = await filled()
    if read == "left-early":
        fake.latency = 0.001
    reported: list[CallStats] = []
    table.stats_hook = reported.append
    stats = CallStats()
    query = (
        ReadRowsQuery(row_ranges=RowRange(KEYS[0], KEYS[10]))
        if read == "one-request"
        else ReadRowsQuery()
    )
    stream = await table.read_rows_stream(query, stats=stats)
    seen = 0

    async def consume() -> None:
        nonlocal seen
        task = asyncio.current_task()
        assert task is not None
        if read == "one-request":
            async for _ in stream:
                seen += 1
                if seen == 10:  # the last row: the next step runs the cleanup
                    task.cancel()
        else:
            await anext(stream)  # type: ignore[call-overload]
            seen = 1
            task.cancel()  # lands in aclose()'s first wait
            await stream.aclose()  # type: ignore[attr-defined]

    task = asyncio.create_task(consume())
    with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
        await task
    assert reported == [stats]
    # A one-request read's cleanup has nothing left to wait for once its rows are
    # handed over (its request ended before the first row was): the cancellation
    # lands after the read has ended, complete.
    assert stats.ended_early == (read == "left-early")
    assert stats.error is None
    assert stats.operation == "read_rows_stream"
    if read == "one-request":
        one = stats.one_request
        assert one is not None
        assert one.tried
        assert one.result == "answered"
        assert one.rows == 10
        assert stats.rows == 10
    else:
        assert stats.rows == 1


async def test_a_streamed_request_gives_its_slot_up_to_a_waiting_request() -> None:
    """Four buckets streaming in four slots: a request that waits for a slot gets one at the
    streams' next page, not when a bucket is done; the scan still reads every row once."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), max_concurrent_subscans=4)  # type: ignore[arg-type]
    keys = [b"w%05d" % i for i in range(4000)]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    fake.stats.queries.clear()
    got_slot = anyio.Event()

    async def other_request() -> None:
        async with table.limiter:  # a request of another read, waiting for a slot
            got_slot.set()

    seen: list[bytes] = []
    at_slot: int | None = None
    async with anyio.create_task_group() as tg:
        async for row in await table.read_rows_stream(ReadRowsQuery()):
            seen.append(row.row_key)
            if len(seen) == 20:
                assert table.limiter.free == 0  # the four streams hold every slot
                tg.start_soon(other_request)
            if at_slot is None and got_slot.is_set():
                at_slot = len(seen)
    assert seen == sorted(keys)
    assert fake.stats.rows_sent == len(keys)  # resumed after its last row: nothing twice
    # The first pages are 256 rows (rows not yet measured), the next cover a bucket:
    # without giving the slot up at the page's end it would come only near the end.
    assert at_slot is not None
    assert at_slot < len(keys) // 2
