"""An ordered read's buckets pause their streams while they run ahead of its slowest one.

On the FakeTable: one bucket sends its first rows and then stalls until the
test opens its gate; the consumer waits for it, and the other buckets could
read on. They pause once each holds ``ahead_rows(16)`` rows, give their slots
up when another request waits for one, end their requests when the stall
lasts, and the read stays exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row

import saltedtable._read.sources_asyncio as sources_asyncio
from saltedtable import SaltedTableAsync, SaltScheme
from saltedtable._engine.budget import AHEAD_LEAST, AHEAD_ROWS, ahead_rows
from tests.fakes import FakeTable

BUCKETS = 16
#: 2,000 rows a bucket: more than a bucket's share of the default budget (1,250 rows), so
#: without the pause the other buckets' streams stay open while the consumer waits.
KEYS = [b"k%05d" % i for i in range(16 * 2000)]
AHEAD = ahead_rows(BUCKETS)
#: Rows the stalling bucket sends first: the read is under way (its buckets stream).
STALL_AFTER = 100


class StallingTable(FakeTable):
    """A fake table whose streams over ``prefix`` send :data:`STALL_AFTER` rows, then wait
    for :attr:`gate` (once :attr:`armed`)."""

    def __init__(self, prefix: bytes) -> None:
        super().__init__()
        self.prefix = prefix
        self.armed = False
        self.gate = anyio.Event()
        self.stalled = anyio.Event()
        self.slow_sent = 0

    async def _stream(self, query: ReadRowsQuery) -> AsyncIterator[Row]:
        stalls = (
            self.armed
            and len(query.row_ranges) == 1
            and (query.row_ranges[0].start_key or b"").startswith(self.prefix)
        )
        async for row in super()._stream(query):
            yield row
            if not stalls:
                continue
            self.slow_sent += 1
            if self.slow_sent >= STALL_AFTER and not self.gate.is_set():
                self.stalled.set()
                await self.gate.wait()


async def stalling(slots: int = 64) -> tuple[StallingTable, SaltedTableAsync]:
    """A 16-bucket table of ``KEYS``, whose bucket of the key ``k00000`` stalls; its
    row size known (its next scans stream after each bucket's first request)."""
    scheme = SaltScheme(BUCKETS)
    probe = SaltedTableAsync(FakeTable(), scheme)  # type: ignore[arg-type]
    prefix = probe.plan(ReadRowsQuery(row_keys=[KEYS[0]])).subqueries[0].prefix
    fake = StallingTable(prefix)
    table = SaltedTableAsync(fake, scheme, max_concurrent_subscans=slots)  # type: ignore[arg-type]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    await table.read_rows(ReadRowsQuery(limit=1))
    fake.stats.queries.clear()
    fake.stats.rows_sent = 0
    fake.armed = True
    return fake, table


def other_key(table: SaltedTableAsync, fake: StallingTable) -> bytes:
    """A key of a bucket that does not stall."""
    for key in KEYS:
        if table.plan(ReadRowsQuery(row_keys=[key])).subqueries[0].prefix != fake.prefix:
            return key
    raise AssertionError("every key is in the stalling bucket")


async def scan(table: SaltedTableAsync, seen: list[bytes]) -> None:
    """Scan the whole table, in key order, into ``seen``."""
    async for row in await table.read_rows_stream(ReadRowsQuery()):
        seen.append(row.row_key)


async def settle(fake: FakeTable) -> None:
    """Until no row has been sent for a while (the buckets that can read have paused)."""
    sent = -1
    while sent != fake.stats.rows_sent:
        sent = fake.stats.rows_sent
        await asyncio.sleep(0.05)


def test_a_bucket_may_run_ahead_by_a_share_of_ahead_rows() -> None:
    assert ahead_rows(1) == AHEAD_ROWS
    assert ahead_rows(16) == AHEAD_ROWS // 16
    assert ahead_rows(4096) == AHEAD_LEAST
    assert all(ahead_rows(n) * n <= max(AHEAD_ROWS, AHEAD_LEAST * n) for n in range(1, 5000))


async def test_buckets_ahead_of_a_stalled_one_hold_few_rows_and_the_read_is_exact() -> None:
    """Without the pause the 15 other buckets would send all they were granted (thousands of
    rows) while the consumer waits for the stalled one."""
    fake, table = await stalling()
    seen: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(scan, table, seen)
        await fake.stalled.wait()
        await settle(fake)
        held = fake.stats.rows_sent - len(seen)
        assert held <= (BUCKETS - 1) * AHEAD + 1, held
        fake.gate.set()
    assert seen == KEYS
    assert fake.stats.rows_sent == len(KEYS)  # paused and resumed: no row twice


async def test_a_paused_stream_gives_its_slot_to_a_request_that_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 slots, held by the scan's streams (paused, and the stalled one) and by other
    reads: a read of a key of another bucket gets one at once, not when a pause times out."""
    monkeypatch.setattr(sources_asyncio, "AHEAD_MOST", 3600.0)
    fake, table = await stalling(slots=BUCKETS)
    key = other_key(table, fake)
    seen: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(scan, table, seen)
        await fake.stalled.wait()
        await settle(fake)
        paused = table.limiter.borrowed_tokens - 1  # (the stalled bucket's)
        assert paused >= 1
        # The free slots (the small reads' reserve, and those of buckets whose request
        # ended before they paused) go to other reads.
        owners = [object() for _ in range(table.limiter.free)]
        for owner in owners:
            assert await table.limiter.take(float("inf"), None, owner)
        with anyio.fail_after(10):
            rows = await table.read_rows(ReadRowsQuery(row_keys=[key]))
        assert [row.row_key for row in rows] == [key]
        for owner in owners:
            table.limiter.release(owner)
        fake.gate.set()
    assert seen == KEYS
    assert fake.stats.rows_sent == len(KEYS) + 1


async def test_a_long_stall_ends_the_paused_requests_and_they_wait_without_a_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After ``AHEAD_MOST`` the paused buckets end their streams and give their slots
    back, and ask for no new request while the consumer still waits."""
    monkeypatch.setattr(sources_asyncio, "AHEAD_MOST", 0.05)
    fake, table = await stalling()
    seen: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(scan, table, seen)
        await fake.stalled.wait()
        for _ in range(1000):  # (10 s at most)
            if fake.stats.open_now == 1 and table.limiter.borrowed_tokens == 1:
                break
            await asyncio.sleep(0.01)
        # Only the stalled bucket's stream is open, and only it holds a slot.
        assert (fake.stats.open_now, table.limiter.borrowed_tokens) == (1, 1)
        asked = len(fake.stats.queries)
        await asyncio.sleep(0.3)
        assert len(fake.stats.queries) == asked  # no request ends and starts again
        fake.gate.set()
    assert seen == KEYS
    assert fake.stats.rows_sent == len(KEYS)


async def test_leaving_a_read_whose_buckets_pause_ends_every_stream() -> None:
    """The caller leaves (its task cancelled) while buckets pause: every stream ends and
    every slot comes back."""
    fake, table = await stalling()

    async def scan() -> None:
        async for _ in await table.read_rows_stream(ReadRowsQuery()):
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(scan)
        await fake.stalled.wait()
        await settle(fake)
        assert fake.stats.open_now > 1  # paused streams, and the stalled one
        tg.cancel_scope.cancel()
    assert fake.stats.open_now == 0
    assert table.limiter.borrowed_tokens == 0
    fake.gate.set()


@pytest.mark.parametrize("cut", [False, True])
async def test_a_bucket_ahead_starts_its_next_request_at_once_after_its_row_limit(
    cut: bool,
) -> None:
    """A bucket ahead of the watermark while the consumer waits for another: after a
    request that ran to its row limit (``cut`` False) its next request is granted at
    once, as its stream would have gone on (it pauses in that request instead); after one
    its source ended early (a pause that lasted, a give-way) it waits until the consumer
    has taken it down to half of ``ahead_at``. Before, both waited, and at N = 64 the
    merge waited a round trip for each bucket's next first row, once per share."""
    from saltedtable._engine.merge_asyncio import Merge

    merge: Merge[int] = Merge([lambda *a: None] * 4, largest=100)  # type: ignore[list-item]
    feed = merge._feeds[0]
    assert feed.streams
    assert feed.ahead_at == ahead_rows(4)
    feed.window = merge._budget.rows  # (widened: its consumer keeps up)
    size = merge._demand(feed)
    assert size
    merge._start(feed, size)
    held = feed.ahead_at // 2 + 1
    feed.keys.extend(b"k%05d" % i for i in range(held))
    feed.items.extend(range(held))
    merge._end(feed, size, held, cut)
    merge._waiter = asyncio.get_running_loop().create_future()  # the consumer waits (for another)
    assert (merge._demand(feed) is None) == cut
