"""Read-ahead follows the consumer (issue 26): a read whose consumer stops asks for little.

A bucket of a read without a limit starts with a read-ahead window
(``first_window``) and asks again once it holds half of it; the window grows
only when the consumer takes half of it soon after the bucket's last request
(``widen``). So a consumer that took its first rows and went away leaves each
bucket with at most a first page and one more window asked for; before, every
bucket read ahead its whole share of the budget (here, all its items). Requests
are counted, not timed.
"""

from __future__ import annotations

import threading
import time

import anyio
import anyio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable._engine.budget import (
    FIRST_PAGE_ROWS,
    MIN_WINDOW_ROWS,
    PROBE_ROWS,
    READ_AHEAD_GROWTH,
    READ_AHEAD_ROWS,
    READ_AHEAD_SECONDS,
    Ask,
    ReadBudget,
    first_window,
    page_ask,
    widen,
)
from saltedtable._engine.merge import Feed, Sent
from saltedtable._engine.merge_asyncio import Merge
from saltedtable._engine.merge_threads import ThreadMerge

SOURCES = 4
ITEMS = 5000  # a source: its share of the default budget (20,000 rows over 4)
#: What a paused consumer's bucket may have asked for: the first page, then the rest
#: of its window (the merge's first batch took its rows; the window does not grow
#: on that, whatever the pace).
WINDOW = first_window(SOURCES)
PAUSED_MOST = 2 * WINDOW


class AsyncSource:
    """An in-memory source that records the size of each request."""

    def __init__(self, items: range) -> None:
        self.items = list(items)
        self.pos = 0
        self.sizes: list[int] = []
        self.running = False

    async def __call__(self, size: int, feed: Feed[int]) -> Sent:
        self.sizes.append(size)
        self.running = True
        try:
            pushed = 0
            for item in self.items[self.pos : self.pos + size]:
                await anyio.lowlevel.checkpoint()
                feed.items.append(item)
                feed.keys.append(item)
                self.pos += 1
                pushed += 1
                if len(feed.keys) >= feed.wake_at:
                    feed.wake()
            return Sent(pushed, self.pos < len(self.items))
        finally:
            self.running = False


class SyncSource:
    def __init__(self, items: range) -> None:
        self.items = list(items)
        self.pos = 0
        self.sizes: list[int] = []
        self.running = False

    def __call__(self, size: int, feed: Feed[int], merge: ThreadMerge[int]) -> Sent:
        self.sizes.append(size)
        self.running = True
        try:
            pushed = 0
            for item in self.items[self.pos : self.pos + size]:
                merge.push(feed, item, item)
                self.pos += 1
                pushed += 1
            return Sent(pushed, self.pos < len(self.items))
        finally:
            self.running = False


def parts() -> list[range]:
    return [range(s, SOURCES * ITEMS, SOURCES) for s in range(SOURCES)]


async def test_an_async_read_whose_consumer_stops_asks_for_little_more() -> None:
    sources = [AsyncSource(p) for p in parts()]
    merge = Merge(sources)
    got: list[int] = []
    async with merge:
        got += await anext(merge)  # the consumer takes its first batch, then goes away
        # Let every request the read would start run to its end.
        settled = 0
        while settled < 200:
            before = sum(len(s.sizes) for s in sources)
            await anyio.lowlevel.checkpoint()
            busy = any(s.running for s in sources)
            after = sum(len(s.sizes) for s in sources)
            settled = 0 if busy or after != before else settled + 1
        for source in sources:
            # Before: the first page, then the rest of the share (all 5000 items).
            assert sum(source.sizes) <= PAUSED_MOST, source.sizes
            assert source.sizes[0] == PROBE_ROWS  # the read's probe of one row, then two
            assert len(source.sizes) <= 3
        async for batch in merge:  # the consumer is back: the read goes on, exact
            got += batch
    assert got == list(range(SOURCES * ITEMS))
    # A consumer that keeps up reaches large pages (the window grew).
    assert max(max(s.sizes) for s in sources) >= 4 * WINDOW


def test_a_sync_read_whose_consumer_stops_asks_for_little_more() -> None:
    sources = [SyncSource(p) for p in parts()]
    with ThreadMerge(sources, threads=SOURCES) as merge:
        got = list(next(merge))  # the consumer takes its first batch, then goes away
        settled = 0
        while settled < 20:
            before = sum(len(s.sizes) for s in sources)
            time.sleep(0.005)
            with merge._cond:  # nothing submitted or running
                busy = bool(merge._running)
            after = sum(len(s.sizes) for s in sources)
            settled = 0 if busy or after != before else settled + 1
        for source in sources:
            assert sum(source.sizes) <= PAUSED_MOST, source.sizes
            assert source.sizes[0] == PROBE_ROWS  # the read's probe of one row, then two
            assert len(source.sizes) <= 3
        for batch in merge:
            got += batch
    assert got == list(range(SOURCES * ITEMS))
    assert max(max(s.sizes) for s in sources) >= 4 * WINDOW
    assert not [t for t in threading.enumerate() if t.name.startswith("saltedtable-subscan")]


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(1, 1 << 20),
    since=st.floats(0, 10 * READ_AHEAD_SECONDS),
    most=st.integers(1, 1 << 20),
)
def test_a_window_grows_only_when_the_consumer_keeps_up(
    window: int, since: float, most: int
) -> None:
    wider = widen(window, since, most)
    if since < READ_AHEAD_SECONDS and window < most:
        assert wider == min(most, READ_AHEAD_GROWTH * window)
    else:
        assert wider == window  # a slow consumer's window stays (and never passes most)


def test_a_slow_consumers_page_is_half_a_window() -> None:
    """The asks themselves: held above half the window waits; at half, the rest of it."""
    budget = ReadBudget()
    common = {"live": 16, "largest": 100, "rows_room": 20_000, "bytes_room": 8 << 20}
    window = WINDOW
    assert (
        page_ask(budget, held_rows=window // 2 + 1, held_bytes=0, window=window, **common) is None
    )  # type: ignore[arg-type]
    ask = page_ask(budget, held_rows=window // 2, held_bytes=0, window=window, **common)  # type: ignore[arg-type]
    assert ask is not None
    assert ask.rows == window - window // 2
    # Without a window: the share (20,000 / 16 rows).
    full = page_ask(budget, held_rows=0, held_bytes=0, **common)  # type: ignore[arg-type]
    assert full == Ask(1250, (8 << 20) // 32)


def test_a_read_of_many_buckets_starts_with_smaller_windows() -> None:
    """The read's starting read-ahead is shared by its buckets, within bounds."""
    assert first_window(1) == first_window(4) == FIRST_PAGE_ROWS
    assert first_window(16) == READ_AHEAD_ROWS // 16
    assert first_window(1024) == MIN_WINDOW_ROWS
    sizes = [first_window(n) for n in range(1, 300)]
    assert sizes == sorted(sizes, reverse=True)
