"""BucketReader's two ways to read (long streamed requests, or pages), on the FakeTable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import anyio
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row

from saltedtable import CallStats, SaltedTableAsync, SaltScheme, _reader
from tests.fakes import FakeTable

KEYS = [b"k%05d" % i for i in range(400)]


async def filled(**kwargs: object) -> tuple[FakeTable, SaltedTableAsync]:
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), **kwargs)  # type: ignore[arg-type]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    fake.stats.queries.clear()
    return fake, table


@pytest.fixture
def small_requests(monkeypatch: pytest.MonkeyPatch) -> int:
    """Streamed requests of 7 rows, so every bucket needs many of them."""
    monkeypatch.setattr(_reader, "_STREAM_REQUEST_ROWS", 7)
    return 7


@pytest.mark.parametrize("ordered", [True, False])
async def test_streamed_requests_resume_without_gaps_or_repeats(
    small_requests: int, ordered: bool
) -> None:
    """Many capped requests per bucket still return every row once (ordered: in order)."""
    fake, table = await filled()
    rows = await table.read_rows(ReadRowsQuery(), ordered=ordered)
    got = [r.row_key for r in rows]
    assert (got if ordered else sorted(got)) == KEYS
    assert all(c.row_key == r.row_key for r in rows for c in r.cells)
    assert all(q.limit == small_requests for q in fake.stats.queries)
    assert len(fake.stats.queries) >= len(KEYS) // small_requests
    assert set(fake.stats.endings) == {"exhausted"}


async def test_unlimited_read_streams_when_slots_cover_every_bucket() -> None:
    """Four buckets, 64 slots: one long request per bucket, all open together."""
    fake, table = await filled()
    assert len(await table.read_rows(ReadRowsQuery())) == len(KEYS)
    assert len(fake.stats.queries) == 4
    assert table.limiter.borrowed_tokens == 0


async def test_reads_page_when_slots_are_short() -> None:
    """Two slots for four buckets: pages (a slot per request), never more than two open."""
    fake, table = await filled(max_concurrent_subscans=2, first_page=5, max_page=20)
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == KEYS
    assert fake.stats.max_open <= 2
    assert len(fake.stats.queries) > 4
    assert table.limiter.borrowed_tokens == 0


async def test_limited_reads_page() -> None:
    """A limit is read in pages sized from what is missing, not as streams."""
    fake, table = await filled()
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery(limit=10))] == KEYS[:10]
    assert all(q.limit is not None and q.limit <= 10 for q in fake.stats.queries)


@pytest.mark.parametrize("ordered", [True, False])
async def test_leaving_a_streamed_read_cancels_every_request(ordered: bool) -> None:
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


async def test_a_read_nested_in_streaming_reads_still_gets_slots() -> None:
    """Streaming reads leave half the free slots: a scan run inside four open scans finishes."""
    _, table = await filled(max_concurrent_subscans=16)
    outer = [await table.read_rows_stream(ReadRowsQuery()) for _ in range(4)]
    with anyio.fail_after(5):
        for stream in outer:
            await anext(aiter(stream))  # each outer read is now running
        assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == KEYS
        for stream in outer:
            await stream.aclose()  # type: ignore[attr-defined]
    assert table.limiter.borrowed_tokens == 0


async def test_cancel_stream_cancels_past_rows_already_received() -> None:
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
        await _reader._cancel_stream(rows)
    assert ended == ["cancelled"]


async def test_cancel_stream_of_a_finished_or_failed_stream_just_closes_it() -> None:
    async def finished() -> AsyncGenerator[Row, None]:
        yield Row(b"k", [])

    async def failing() -> AsyncGenerator[Row, None]:
        yield Row(b"k", [])
        raise ValueError("the stream broke")

    for make in (finished, failing):
        rows = make()
        await anext(rows)
        with anyio.fail_after(5):
            await _reader._cancel_stream(rows)
        with pytest.raises(StopAsyncIteration):
            await anext(rows)


async def test_stats_of_a_streamed_read_left_early_count_its_requests() -> None:
    """Breaking out of a streamed read still records each open request and its time."""
    fake, table = await filled()
    fake.latency = 0.001
    stats = CallStats()
    stream = await table.read_rows_stream(ReadRowsQuery(), stats=stats)
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 20:
            break
    await stream.aclose()  # type: ignore[attr-defined]
    assert stats.rows == 20
    assert sum(b.rows for b in stats.buckets.values()) >= 20
    assert all(b.pages == 1 for b in stats.buckets.values())
    assert all(b.seconds > 0 for b in stats.buckets.values())
    assert all(b.first_page_seconds is not None for b in stats.buckets.values())
