"""The async merge engine's costs: an ordered read's requests, its producers' frames (issue 23)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row

import saltedtable._engine.merge as merge_module
from saltedtable import CallStats, SaltedTableAsync, SaltScheme
from saltedtable._engine.merge import Feed
from saltedtable._engine.merge_asyncio import Merge, ProducerBase
from tests.fakes import FakeTable

SCHEME = SaltScheme(16)
KEYS = [b"k%05d" % i for i in range(16_000)]  # about 1,000 a bucket
SLOW = SCHEME.prefixes[0]
STALL_AT = 100  # rows of the slow bucket before it stalls
LEAD = 400  # rows every other bucket reads past the slow one meanwhile


class OneSlowBucket:
    """A FakeTable whose first bucket stalls after ``STALL_AT`` rows until every other bucket
    has sent ``STALL_AT + LEAD`` rows, or no other stream is open (they all stopped)."""

    def __init__(self, fake: FakeTable) -> None:
        self.fake = fake
        self.sent: dict[bytes, int] = {}
        self.open: dict[bytes, int] = {}
        self.go = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
        inner = await self.fake.read_rows_stream(query, **kwargs)
        # (The first write's sample of the rows asks from the table's start: b"".)
        return self._rows((query.row_ranges[0].start_key or b"")[: len(SLOW)], inner)

    def _check(self) -> None:
        others = [p for p in SCHEME.prefixes if p != SLOW]
        ahead = all(self.sent.get(p, 0) >= STALL_AT + LEAD for p in others)
        if ahead or not any(self.open.get(p, 0) for p in others):
            self.go.set()

    async def _rows(self, bucket: bytes, inner: AsyncIterator[Row]) -> AsyncIterator[Row]:
        self.open[bucket] = self.open.get(bucket, 0) + 1
        try:
            async for row in inner:
                if bucket == SLOW and self.sent.get(bucket, 0) == STALL_AT:
                    await self.go.wait()
                self.sent[bucket] = self.sent.get(bucket, 0) + 1
                self._check()
                yield row
        finally:
            self.open[bucket] -= 1
            self._check()
            await inner.aclose()  # type: ignore[attr-defined]


async def test_an_ordered_read_keeps_its_streams_while_it_waits_for_a_slow_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer waits for the slow bucket, so the rows the others hold wait for it, not
    for the consumer: their streams go on (the window widens) instead of ending at half a
    window and asking again. Before: every other bucket's stream ended while the slow one
    stalled (47 requests and more); now each bucket takes its paged first request and one
    stream. (With the pause ahead of the slowest bucket switched off: a bucket would
    pause at 64 rows, see tests/unit/_read/test_ahead.py.)"""
    monkeypatch.setattr(merge_module, "ahead_rows", lambda buckets: 1 << 62)
    fake = FakeTable()
    table = SaltedTableAsync(OneSlowBucket(fake), SCHEME)  # type: ignore[arg-type]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    fake.stats.queries.clear()
    stats = CallStats()
    got = [row.row_key async for row in await table.read_rows_stream(ReadRowsQuery(), stats=stats)]
    assert got == KEYS
    assert fake.stats.rows_sent == len(KEYS)  # resumed after each stream's last row
    # An ordered read's first request to a bucket is paged (its head comes early); the
    # second streams to the bucket's end.
    assert stats.requests <= 2 * SCHEME.buckets
    assert stats.peak_buffered_rows <= 20_000


class TaskProducer(ProducerBase):
    """A producer that notes which coroutine its task runs, then reads a few items."""

    def __init__(self, items: range) -> None:
        self.items = items
        self.task_coro: Any = None

    async def produce(self, merge: Merge[int], feed: Feed[int]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task_coro = task.get_coro()
        async with merge.producing(feed):
            pos = 0
            while size := await merge.next_size(feed):
                chunk = self.items[pos : pos + size]
                pos += len(chunk)
                feed.items.extend(chunk)
                feed.keys.extend(chunk)
                feed.wake()
                merge.request_done(feed, len(chunk))
                if pos >= len(self.items):
                    return


async def test_a_producer_is_its_tasks_own_coroutine() -> None:
    """No wrapper frame between a producer's task and its loop: a task pays for every frame
    of its coroutine chain each time it resumes, once per row of a stream (a task group's
    wrapper was one call a row)."""
    before = asyncio.all_tasks()
    producers = [TaskProducer(range(s, 400, 4)) for s in range(4)]
    got: list[int] = []
    async with Merge(producers) as merge:
        async for batch in merge:
            got += batch
    assert got == list(range(400))
    for producer in producers:
        assert producer.task_coro is not None
        assert producer.task_coro.cr_code is TaskProducer.produce.__code__
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before
