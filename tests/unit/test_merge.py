"""FanOut (paged sources) and Merge (push sources): ordering, limits, concurrency, cleanup."""

from __future__ import annotations

import asyncio
import gc
import math
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable._merge import FanOut, Feed, Merge, Page

PROPERTY = settings(max_examples=60, deadline=None)


class Tracker:
    """Counts fetches in flight across sources (to check a limiter's bound)."""

    def __init__(self) -> None:
        self.now = 0
        self.max = 0


class Source:
    """An in-memory paged source over sorted items; counts and checks what it is asked."""

    def __init__(
        self,
        items: Sequence[int],
        *,
        tracker: Tracker | None = None,
        delay: float = 0.0,
        fail: BaseException | None = None,
        block_after: int | None = None,
        empty_every: int = 0,
    ) -> None:
        self.items = sorted(items)
        self.pos = 0
        self.fetched = 0
        self.sizes: list[int] = []
        self.cancelled = 0
        self.tracker = tracker
        self.delay = delay
        self.fail = fail
        self.block_after = block_after
        self.started = anyio.Event()
        self.blocked = anyio.Event()
        self.empty_every = empty_every

    async def __call__(self, size: int) -> Page[int]:
        self.sizes.append(size)
        if self.tracker is not None:
            self.tracker.now += 1
            self.tracker.max = max(self.tracker.max, self.tracker.now)
        try:
            self.started.set()
            if self.block_after is not None and len(self.sizes) > self.block_after:
                self.blocked.set()
                await anyio.sleep_forever()
            if self.delay:
                await anyio.sleep(self.delay)
            else:
                await anyio.lowlevel.checkpoint()
            if self.fail is not None:
                raise self.fail
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            if self.tracker is not None:
                self.tracker.now -= 1
        if self.empty_every and len(self.sizes) % self.empty_every == 0:
            # An empty page that still says "more" (a key window with no match).
            return Page([], [], self.pos < len(self.items))
        page = self.items[self.pos : self.pos + size]
        self.pos += len(page)
        self.fetched += len(page)
        return Page(page, list(page), self.pos < len(self.items))


async def drain(fanout: FanOut[int] | Merge[int]) -> list[int]:
    """Every item of a fan-out or merge, batches concatenated."""
    out: list[int] = []
    async with fanout:
        async for batch in fanout:
            assert batch, "a fan-out never hands over an empty batch"
            out.extend(batch)
    return out


async def drain_new(sources: Sequence[Source], **kwargs: Any) -> list[int]:
    """Drain a new FanOut over ``sources`` (built inside the loop: it makes a cancel scope)."""
    return await drain(FanOut(sources, **kwargs))


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async function on a fresh asyncio loop (FanOut needs asyncio)."""
    return asyncio.run(fn())


@st.composite
def partitions(draw: st.DrawFn, min_sources: int = 0) -> list[list[int]]:
    """Unique items spread over up to 8 sources in any way (some sources may be empty)."""
    items = draw(st.lists(st.integers(0, 10_000), unique=True, max_size=150))
    n = draw(st.integers(min_sources if not items else max(1, min_sources), 8))
    owners = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=len(items), max_size=len(items)))
    parts: list[list[int]] = [[] for _ in range(n)]
    for item, owner in zip(items, owners, strict=True):
        parts[owner].append(item)
    return parts


# -- ordering and limits -------------------------------------------------------


@PROPERTY
@given(
    parts=partitions(),
    first_page=st.integers(1, 20),
    extra=st.integers(0, 30),
    limit=st.one_of(st.none(), st.integers(1, 200)),
    empty_every=st.sampled_from([0, 0, 2, 3]),
)
def test_ordered_output_is_sorted_union_up_to_limit(
    parts: list[list[int]], first_page: int, extra: int, limit: int | None, empty_every: int
) -> None:
    """Ordered mode yields exactly sorted(all items)[:limit], whatever the pages look like."""
    max_page = first_page + extra
    sources = [Source(p, empty_every=empty_every) for p in parts]

    async def main() -> list[int]:
        fanout = FanOut(sources, limit=limit, first_page=first_page, max_page=max_page)
        return await drain(fanout)

    everything = sorted(x for p in parts for x in p)
    assert run(main) == everything[:limit]
    for s in sources:
        assert all(1 <= size <= max_page for size in s.sizes)
        if limit is None:
            assert s.sizes[:1] in ([], [first_page])


@PROPERTY
@given(
    parts=partitions(),
    first_page=st.integers(1, 20),
    limit=st.one_of(st.none(), st.integers(1, 200)),
    empty_every=st.sampled_from([0, 0, 2]),
)
def test_unordered_output_is_the_same_multiset(
    parts: list[list[int]], first_page: int, limit: int | None, empty_every: int
) -> None:
    """Unordered mode yields every item once (or `limit` distinct items of them)."""
    sources = [Source(p, empty_every=empty_every) for p in parts]

    async def main() -> list[int]:
        return await drain(FanOut(sources, ordered=False, limit=limit, first_page=first_page))

    got = run(main)
    everything = [x for p in parts for x in p]
    if limit is None or limit >= len(everything):
        assert Counter(got) == Counter(everything)
    else:
        assert len(got) == limit
        assert len(set(got)) == limit
        assert set(got) <= set(everything)


def test_limit_returns_exactly_the_first_items() -> None:
    """With a limit the ordered merge stops after exactly that many items, the smallest ones."""
    parts = [list(range(s, 3000, 5)) for s in range(5)]

    async def main(limit: int) -> list[int]:
        return await drain(FanOut([Source(p) for p in parts], limit=limit))

    for limit in (1, 4, 5, 6, 255, 256, 257, 1000, 2999, 3000, 5000):
        assert run(lambda limit=limit: main(limit)) == list(range(min(limit, 3000)))


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 50])
@pytest.mark.parametrize("limit", [1, 2, 10, 17, 100, 333, 1000, 5000])
def test_rows_fetched_with_a_limit_stay_near_the_limit(ordered: bool, n: int, limit: int) -> None:
    """For keys spread evenly over n sources, a limit fetches <= 1.5 * limit + n items."""
    sources = [Source(range(s, 20_000, n)) for s in range(n)]

    async def main() -> list[int]:
        return await drain(FanOut(sources, ordered=ordered, limit=limit))

    got = run(main)
    assert len(got) == limit
    fetched = sum(s.fetched for s in sources)
    assert fetched <= 1.5 * limit + n, fetched


def test_first_pages_split_the_limit() -> None:
    """With a limit, each source's first page asks for its share, ceil(limit / n)."""
    sources = [Source(range(s, 1000, 4)) for s in range(4)]
    run(lambda: drain_new(sources, limit=10))
    assert [s.sizes[0] for s in sources] == [math.ceil(10 / 4)] * 4


def test_pages_double_up_to_max_page_without_limit() -> None:
    """Without a limit a source's pages double from first_page up to max_page."""
    source = Source(range(1000))
    run(lambda: drain_new([source], first_page=3, max_page=20))
    assert source.sizes[:5] == [3, 6, 12, 20, 20]


def test_no_sources_yields_nothing() -> None:
    """An ordered fan-out over no source ends at once."""
    assert run(lambda: drain_new([])) == []


def test_unordered_fanout_without_sources_closes_its_streams() -> None:
    """An unordered fan-out over no source ends at once and leaks no memory stream."""

    async def main() -> tuple[list[int], list[warnings.WarningMessage]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = await drain_new([], ordered=False)
            gc.collect()
        return got, [w for w in caught if issubclass(w.category, ResourceWarning)]

    got, leaked = run(main)
    assert got == []
    assert leaked == [], [str(w.message) for w in leaked]


@pytest.mark.parametrize(
    "kwargs", [{"limit": 0}, {"first_page": 0}, {"first_page": 10, "max_page": 5}]
)
def test_bad_arguments_are_rejected(kwargs: dict[str, int]) -> None:
    """limit < 1, first_page < 1 or max_page < first_page raise ValueError."""
    with pytest.raises(ValueError, match=r"must be|need"):
        FanOut([Source([1])], **kwargs)


# -- concurrency ---------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 3])
@pytest.mark.parametrize("ordered", [True, False])
async def test_shared_limiter_does_not_deadlock(capacity: int, ordered: bool) -> None:
    """Several 16-source merges sharing a small limiter all finish, never over the bound."""
    limiter = anyio.CapacityLimiter(capacity)
    tracker = Tracker()
    results: dict[int, list[int]] = {}

    async def one(m: int) -> None:
        sources = [
            Source(range(s, 2000, 16), tracker=tracker, delay=0.0005 * (s % 3)) for s in range(16)
        ]
        fanout = FanOut(sources, ordered=ordered, first_page=7, max_page=50, limiter=limiter)
        results[m] = await drain(fanout)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for m in range(4):
                tg.start_soon(one, m)
    for got in results.values():
        assert sorted(got) == list(range(2000))
        if ordered:
            assert got == list(range(2000))
    assert len(results) == 4
    assert 1 <= tracker.max <= capacity


async def test_limit_and_limiter_together_finish() -> None:
    """A limited ordered merge under a limiter of 1 finishes and returns the smallest items."""
    limiter = anyio.CapacityLimiter(1)
    sources = [Source(range(s, 5000, 16)) for s in range(16)]
    with anyio.fail_after(10):
        got = await drain(FanOut(sources, limit=300, limiter=limiter))
    assert got == list(range(300))


# -- errors and cleanup --------------------------------------------------------


class Boom(Exception):
    """The error a failing source raises."""


def failing_fanout(ordered: bool, failing: int) -> tuple[FanOut[int], list[Source]]:
    """Four sources; one raises Boom, the others block forever after their first page."""
    sources = [
        Source(range(s, 100, 4), block_after=1)
        if s != failing
        # Fails once the consumer is surely waiting for it.
        else Source(range(s, 100, 4), fail=Boom(f"source {s}"), delay=0.05)
        for s in range(4)
    ]
    # Pages of one item, so every source needs a second (blocking) fetch.
    return FanOut(sources, ordered=ordered, first_page=1, max_page=1), sources


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("failing", [0, 3])
async def test_source_error_stops_iteration_and_cancels_the_others(
    ordered: bool, failing: int
) -> None:
    """A raising source ends the iteration with an error; every other fetch is cancelled."""
    before = asyncio.all_tasks()
    fanout, sources = failing_fanout(ordered, failing)
    with anyio.fail_after(5), pytest.raises(Boom):
        await drain(fanout)
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before
    if failing == 3:
        # Sources 0-2 had their prefetch in flight when source 3 failed: all cancelled.
        assert [s.cancelled for s in sources[:3]] == [1, 1, 1]
    assert all(s.pos <= 1 for s in sources)


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("failing", [0, 3])
async def test_source_error_is_the_error_raised(ordered: bool, failing: int) -> None:
    """The iteration raises the source's own exception, not a stand-in."""
    fanout, _ = failing_fanout(ordered, failing)
    with anyio.fail_after(5), pytest.raises(Boom, match=f"source {failing}"):
        await drain(fanout)


async def test_aclose_with_pending_fetches_cancels_them() -> None:
    """aclose() after the first batch cancels the fetches in flight and returns promptly."""
    before = asyncio.all_tasks()
    sources = [Source(range(s, 1000, 4), block_after=1) for s in range(4)]
    fanout = FanOut(sources, first_page=5)  # no limit: the next pages are prefetched
    first = await fanout.__anext__()
    assert first == list(range(len(first)))
    with anyio.fail_after(5):
        for s in sources:  # every prefetch is in flight
            await s.blocked.wait()
        await fanout.aclose()
    assert [s.cancelled for s in sources] == [1, 1, 1, 1]
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before
    with pytest.raises(StopAsyncIteration):
        await fanout.__anext__()
    await fanout.aclose()  # closing twice is fine


@pytest.mark.parametrize("ordered", [True, False])
async def test_abandoning_after_first_batch_leaves_no_task(ordered: bool) -> None:
    """Breaking out after the first batch and calling aclose() leaves no task behind."""
    before = asyncio.all_tasks()
    sources = [Source(range(s, 10_000, 8), delay=0.001) for s in range(8)]
    fanout = FanOut(sources, ordered=ordered, first_page=10)
    async for _batch in fanout:
        break
    await fanout.aclose()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before
    assert sum(s.fetched for s in sources) < 10_000


async def test_aclose_from_another_task_cancels_pending_fetches() -> None:
    """aclose() from another task, while the consumer waits, cancels every fetch and returns."""
    before = asyncio.all_tasks()
    sources = [Source(range(s, 100, 4), block_after=0) for s in range(4)]
    fanout = FanOut(sources)
    consumer = asyncio.create_task(fanout.__anext__())
    with anyio.fail_after(5):
        for s in sources:
            await s.started.wait()
        await fanout.aclose()
    assert [s.cancelled for s in sources] == [1, 1, 1, 1]
    with pytest.raises(StopAsyncIteration):
        await consumer
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before


async def test_consumer_sees_end_of_iteration_when_closed_from_another_task() -> None:
    """A consumer waiting in __anext__ ends cleanly when another task closes the fan-out."""
    sources = [Source(range(s, 100, 4), block_after=0) for s in range(4)]
    fanout = FanOut(sources)
    consumer = asyncio.create_task(fanout.__anext__())
    with anyio.fail_after(5):
        for s in sources:
            await s.started.wait()
        await fanout.aclose()
        with pytest.raises(StopAsyncIteration):
            await consumer


async def test_cancelled_consumer_cleans_up() -> None:
    """Cancelling the consumer while its fetches are pending leaves no task and no fetch."""
    before = asyncio.all_tasks()
    sources = [Source(range(s, 100, 4), block_after=0) for s in range(4)]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, FanOut(sources))
            for s in sources:
                await s.blocked.wait()
            tg.cancel_scope.cancel()
    assert [s.cancelled for s in sources] == [1, 1, 1, 1]
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before


# -- Merge: push sources (pumps) ------------------------------------------------


class Pump:
    """A push source: appends its sorted items to the feed in bursts, like rows arriving."""

    def __init__(
        self,
        items: Sequence[int],
        *,
        burst: int = 1,
        fail_after: int | None = None,
        block_after: int | None = None,
        linger: int = 0,
    ) -> None:
        self.items = sorted(items)
        self.burst = burst
        self.linger = linger
        self.fail_after = fail_after
        self.block_after = block_after
        self.pushed = 0
        self.max_held = 0
        self.cancelled = False
        self.finished = False
        self.blocked = anyio.Event()

    async def __call__(self, feed: Feed[int]) -> None:
        try:
            for n, item in enumerate(self.items):
                if n % self.burst == 0:
                    await anyio.lowlevel.checkpoint()  # the next "message" arrives
                if self.fail_after is not None and n >= self.fail_after:
                    raise ValueError(f"pump failed after {n} items")
                if self.block_after is not None and n >= self.block_after:
                    self.blocked.set()
                    await anyio.sleep_forever()
                feed.items.append(item)
                feed.keys.append(item)
                self.pushed += 1
                self.max_held = max(self.max_held, len(feed.keys))
                if len(feed.keys) >= feed.wake_at:
                    await feed.pushed()
            for _ in range(self.linger):  # the stream's end comes after its last item
                await anyio.lowlevel.checkpoint()
            self.finished = True
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


@PROPERTY
@given(
    parts=partitions(),
    capacity=st.integers(1, 40),
    bursts=st.lists(st.integers(1, 30), min_size=8, max_size=8),
    lingers=st.lists(st.integers(0, 3), min_size=8, max_size=8),
    wake_batch=st.integers(1, 12),
    wake_delay=st.sampled_from([0.0, 0.001, 60.0]),
)
def test_merge_ordered_yields_the_sorted_union(
    parts: list[list[int]],
    capacity: int,
    bursts: list[int],
    lingers: list[int],
    wake_batch: int,
    wake_delay: float,
) -> None:
    """Whatever the arrival pattern, capacity and batching, ordered output is sorted(all items)."""
    pumps = [Pump(p, burst=b, linger=w) for p, b, w in zip(parts, bursts, lingers, strict=False)]

    async def main() -> list[int]:
        merge = Merge(pumps, capacity=capacity, wake_batch=wake_batch, wake_delay=wake_delay)
        return await drain(merge)

    got = run(main)
    assert got == sorted(x for p in parts for x in p)
    assert all(p.max_held <= capacity for p in pumps), "a full feed must hold its pump"


@PROPERTY
@given(
    parts=partitions(),
    capacity=st.integers(1, 40),
    linger=st.integers(0, 3),
    wake_batch=st.integers(1, 12),
    wake_delay=st.sampled_from([0.0, 0.001, 60.0]),
)
def test_merge_unordered_yields_every_item_once(
    parts: list[list[int]], capacity: int, linger: int, wake_batch: int, wake_delay: float
) -> None:
    """Unordered output is a permutation of every item, each source's items in its order."""
    pumps = [Pump(p, burst=3, linger=linger) for p in parts]

    async def main() -> list[int]:
        merge = Merge(
            pumps, ordered=False, capacity=capacity, wake_batch=wake_batch, wake_delay=wake_delay
        )
        return await drain(merge)

    got = run(main)
    assert Counter(got) == Counter(x for p in parts for x in p)
    for part in parts:
        mine = set(part)
        assert [x for x in got if x in mine] == sorted(part)


@pytest.mark.parametrize("ordered", [True, False])
async def test_merge_pump_failure_is_raised_and_cancels_the_others(ordered: bool) -> None:
    """One failing pump: the consumer gets its error; the other pumps are cancelled."""
    pumps = [Pump(range(i, 3000, 3), burst=5) for i in range(3)]
    pumps[1].fail_after = 40
    merge = Merge(pumps, ordered=ordered, capacity=8)
    with pytest.raises(ValueError, match="pump failed after 40 items"):
        await drain(merge)
    assert all(p.cancelled or p.finished for p in pumps if p is not pumps[1])
    assert any(p.cancelled for p in pumps if p is not pumps[1])


async def test_merge_ordered_never_passes_a_failed_pump() -> None:
    """Ordered: nothing above the failed source's last item is handed over before the error."""
    fast = Pump(range(0, 10_000, 2), burst=50)
    slow = Pump(range(1, 10_000, 2), burst=1, fail_after=10)
    got: list[int] = []

    async def consume() -> None:
        async with Merge([fast, slow], capacity=1000) as merge:
            async for batch in merge:
                got.extend(batch)

    with pytest.raises(ValueError, match="after 10 items"):
        await consume()
    assert got == sorted(got)
    assert all(x <= 19 for x in got), got[-5:]


@pytest.mark.parametrize("ordered", [True, False])
async def test_merge_aclose_cancels_blocked_and_full_pumps(ordered: bool) -> None:
    """Leaving early cancels every pump: those waiting for data and those held by a full feed."""
    blocked = Pump(range(0, 1000, 2), block_after=5)
    flooding = Pump(range(1, 1000, 2), burst=100)
    merge = Merge([blocked, flooding], ordered=ordered, capacity=4)
    with anyio.fail_after(5):
        async for _ in merge:
            break
        await merge.aclose()
    assert blocked.cancelled
    assert flooding.cancelled
    assert flooding.pushed <= 4 + 4 + 100  # held by its full feed, not read to the end


async def test_merge_aclose_from_another_task_ends_a_waiting_consumer() -> None:
    """A consumer waiting for a pump stops cleanly when another task closes the merge."""
    blocked = Pump(range(10), block_after=0)
    merge = Merge([blocked])
    got: list[list[int]] = []

    async def consume() -> None:
        async for batch in merge:
            got.append(batch)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await blocked.blocked.wait()
            await merge.aclose()
    assert got == []
    assert blocked.cancelled


async def test_merge_hooks_and_emitted() -> None:
    """on_start runs when iteration starts, on_close once after the pumps; emitted counts items."""
    calls: list[str] = []

    async def closed() -> None:
        calls.append("close")

    merge = Merge(
        [Pump([1, 3]), Pump([2]), Pump([])],
        on_start=lambda: calls.append("start"),
        on_close=closed,
    )
    assert calls == []
    assert await drain(merge) == [1, 2, 3]
    await merge.aclose()
    assert calls == ["start", "close"]
    assert merge.emitted == 3


def test_merge_rejects_a_bad_capacity() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        Merge([Pump([1])], capacity=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"wake_batch": 0}, "wake_batch must be >= 1, got 0"),
        ({"wake_delay": -0.5}, "wake_delay must be >= 0, got -0.5"),
        ({"wake_delay": math.nan}, "wake_delay must be >= 0, got nan"),
    ],
)
def test_merge_rejects_bad_batching(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Merge([Pump([1])], **kwargs)


async def batch_sizes(ordered: bool, wake_batch: int) -> list[int]:
    """Batch sizes of a merge of 16 pumps that take turns, one item each (rows arriving)."""
    pumps = [Pump(range(i, 16 * 200, 16)) for i in range(16)]
    sizes: list[int] = []
    # No timer can fire within this test: only the batch size wakes the consumer.
    async with Merge(pumps, ordered=ordered, wake_batch=wake_batch, wake_delay=60) as merge:
        async for batch in merge:
            sizes.append(len(batch))
    assert sum(sizes) == 16 * 200
    return sizes


@pytest.mark.parametrize("ordered", [True, False])
async def test_merge_batches_wakes(ordered: bool) -> None:
    """A waiting consumer is woken by wake_batch items, not by each one: few, large batches."""
    single = await batch_sizes(ordered, 1)
    batched = await batch_sizes(ordered, 8)
    assert len(batched) * 4 < len(single), (len(batched), len(single))
    # Every batch but the tail (pumps ending) carries at least a feed's worth.
    assert min(batched[:-16]) >= 8, batched


@pytest.mark.parametrize("ordered", [True, False])
async def test_merge_batching_never_holds_a_row_past_the_delay(ordered: bool) -> None:
    """A source short of wake_batch items still gets its rows out: the timer wakes the consumer.

    The pump sends one item, then waits until the consumer has it; without the
    timer the consumer would wait for seven more, and both would hang.
    """
    seen = anyio.Event()

    async def one_then_wait(feed: Feed[int]) -> None:
        feed.items.append(1)
        feed.keys.append(1)
        if len(feed.keys) >= feed.wake_at:
            await feed.pushed()
        await seen.wait()
        feed.items.append(2)
        feed.keys.append(2)

    got: list[int] = []
    with anyio.fail_after(5):
        async with Merge([one_then_wait], ordered=ordered, wake_batch=8, wake_delay=0.01) as merge:
            async for batch in merge:
                got.extend(batch)
                seen.set()
    assert got == [1, 2]


async def test_merge_cancelled_from_outside_is_an_error_not_an_end() -> None:
    """Producers cancelled by someone else: the consumer gets an error, not a short result."""
    pump = Pump(range(10), block_after=0)
    merge = Merge([pump])
    consumer = asyncio.get_running_loop().create_task(drain(merge))
    with anyio.fail_after(5):
        await pump.blocked.wait()
        assert merge._task is not None
        merge._task.cancel()
        with pytest.raises(RuntimeError, match="cancelled from outside"):
            await consumer


async def test_merge_supervisor_cancelled_before_it_runs_does_not_hang() -> None:
    """A supervisor cancelled before its first step still ends the consumer's wait."""
    merge = Merge([Pump(range(10))])
    consumer = asyncio.get_running_loop().create_task(drain(merge))
    await asyncio.sleep(0)  # the consumer has started the supervisor and waits for rows
    assert merge._task is not None
    merge._task.cancel()
    with anyio.fail_after(5), pytest.raises(RuntimeError, match="cancelled from outside"):
        await consumer


async def drain_slowly(fanout: FanOut[int] | Merge[int], pauses: Sequence[int]) -> list[int]:
    """Every item, the consumer yielding to the loop ``pauses[i % len]`` times after item i."""
    out: list[int] = []
    async with fanout:
        async for batch in fanout:
            for item in batch:
                out.append(item)
                for _ in range(pauses[len(out) % len(pauses)]):
                    await anyio.lowlevel.checkpoint()
    return out


@PROPERTY
@given(
    parts=partitions(),
    ordered=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 200)),
    pauses=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    bursts=st.lists(st.integers(1, 30), min_size=8, max_size=8),
    lingers=st.lists(st.integers(0, 3), min_size=8, max_size=8),
)
def test_a_consumer_that_awaits_between_items_gets_every_item(
    parts: list[list[int]],
    ordered: bool,
    limit: int | None,
    pauses: list[int],
    bursts: list[int],
    lingers: list[int],
) -> None:
    """Consumer delays between items never end a read early or with an error (any mode)."""
    expected = sorted(x for p in parts for x in p)
    if limit is not None:
        # Only the paged fan-out takes a limit.
        def fanout() -> FanOut[int] | Merge[int]:
            return FanOut([Source(p) for p in parts], ordered=ordered, limit=limit)
    else:

        def fanout() -> FanOut[int] | Merge[int]:
            pumps = [
                Pump(p, burst=b, linger=w) for p, b, w in zip(parts, bursts, lingers, strict=False)
            ]
            return Merge(pumps, ordered=ordered)

    async def main() -> list[int]:
        return await drain_slowly(fanout(), pauses)

    got = run(main)
    if ordered:
        assert got == expected[:limit]
    elif limit is None:
        assert sorted(got) == expected
    else:
        assert len(got) == min(limit, len(expected))
        assert set(got) <= set(expected)
