"""Fair sharing of a table's slots: foreground requests first, FIFO within a class (issue 26).

A background request (read-ahead while its consumer has rows to take) takes a
slot only while no foreground request (one whose consumer waits) waits; a
background waiter is served once no foreground waits, or as soon as its own
consumer waits for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from contextlib import closing
from dataclasses import dataclass, field

import anyio
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data.mutations import SetCell
from hypothesis import example, given, settings
from hypothesis import strategies as st

import saltedtable._engine.slots as _slots
import saltedtable._engine.slots_asyncio as slots_asyncio
import saltedtable._engine.slots_threads as slots_threads
from saltedtable import SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._engine.budget import ReadBudget
from saltedtable._engine.merge import Sent
from saltedtable._engine.merge_asyncio import Merge
from saltedtable._engine.slots import next_waiter
from saltedtable._engine.slots_asyncio import AsyncSlots
from saltedtable._engine.slots_threads import Slots
from tests.fakes import FakeTable, SyncFakeTable


@dataclass
class W:
    """A waiter for ``next_waiter``: foreground while ``fg`` holds."""

    name: int
    fg: bool
    asked: list[int] = field(default_factory=list)
    owner: object = None

    @property
    def urgent(self) -> object:
        def check() -> bool:
            self.asked.append(1)
            return self.fg

        return check


@given(st.lists(st.booleans(), max_size=30))
def test_hand_overs_serve_foreground_in_order_then_background_in_order(classes: list[bool]) -> None:
    queue = deque(W(i, fg) for i, fg in enumerate(classes))
    served = [next_waiter(queue).name for _ in classes]
    fg = [i for i, c in enumerate(classes) if c]
    bg = [i for i, c in enumerate(classes) if not c]
    assert served == fg + bg
    assert not queue


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=30),
    st.dictionaries(st.integers(0, 3), st.integers(0, 3)),
    st.dictionaries(st.integers(0, 3), st.integers(0, 50)),
)
def test_within_a_class_the_turn_goes_to_fewest_held_then_least_recently_served_then_oldest(
    waiters: list[tuple[bool, int]], held: dict[object, int], served: dict[object, int]
) -> None:
    """So a scan with many queued requests gets one turn per turn of each other read."""
    queue = deque(W(i, fg, owner=owner) for i, (fg, owner) in enumerate(waiters))
    everyone = list(queue)
    chosen = next_waiter(queue, held, {id(k): v for k, v in served.items()})
    pool = [w for w in everyone if w.fg] or everyone

    def rank(w: W) -> tuple[int, int]:
        return held.get(w.owner, 0), served.get(w.owner, -1)

    best = min(rank(w) for w in pool)
    assert chosen is next(w for w in pool if rank(w) == best)
    assert list(queue) == [w for w in everyone if w is not chosen]


async def test_a_small_read_waits_one_turn_per_read_not_for_every_queued_request() -> None:
    slots = AsyncSlots(1)
    assert await slots.take(0.0, owner="scan-a")
    granted: list[str] = []

    async def wait(owner: str) -> None:
        assert await slots.take(float("inf"), owner=owner)
        granted.append(owner)

    tasks = [asyncio.create_task(wait(o)) for o in ["scan-a"] * 3 + ["scan-b"] * 3 + ["small"]]
    for _ in range(3):
        await asyncio.sleep(0)
    owner = "scan-a"
    while len(granted) < len(tasks):
        slots.release(owner)
        for _ in range(3):
            await asyncio.sleep(0)
        owner = granted[-1]
    await asyncio.gather(*tasks)
    slots.release(owner)
    # The reads take turns: scan-a was just served, scan-b and the small read not yet.
    assert granted[:3] == ["scan-b", "small", "scan-a"]
    assert granted[3:] == ["scan-b", "scan-a", "scan-b", "scan-a"]
    assert sorted(granted) == sorted(["scan-a"] * 3 + ["scan-b"] * 3 + ["small"])
    with pytest.raises(ValueError, match="released more often"):
        slots.release("small")


def test_a_waiter_without_a_check_is_foreground() -> None:
    class Plain:
        urgent = None
        owner = None

    bg, plain = W(0, False), Plain()
    queue: deque[object] = deque([bg, plain])
    assert next_waiter(queue) is plain  # type: ignore[arg-type]
    assert next_waiter(queue) is bg  # type: ignore[arg-type]


# -- AsyncSlots against a model, operation by operation ------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.booleans()),  # a new waiter, foreground or not
        st.tuples(st.just("release"), st.just(False)),
        st.tuples(st.just("promote"), st.integers(0, 40)),  # a waiter's consumer now waits
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(total=st.integers(1, 3), ops=OPS)
def test_async_slots_follow_the_model(total: int, ops: list[tuple[str, object]]) -> None:
    """Every hand-over goes to the oldest foreground waiter, else the oldest background one.

    So: FIFO within a class, no background grant while foreground waits, and at the end
    (foreground idle) every background waiter is served.
    """

    async def run() -> None:
        slots = AsyncSlots(total)
        fg: dict[int, bool] = {}
        model: list[int] = []  # waiters in the order they asked
        granted: list[int] = []
        tasks: list[asyncio.Task[None]] = []
        held = 0
        for _ in range(total):  # every slot busy: the waits below queue
            assert await slots.take(time.monotonic())
            held += 1

        async def wait(i: int) -> None:
            assert await slots.take(float("inf"), lambda: fg[i])
            granted.append(i)

        async def settle() -> None:
            for _ in range(3):
                await asyncio.sleep(0)

        def expect() -> int:
            for i in model:
                if fg[i]:
                    return i
            return model[0]

        async def release() -> None:
            nonlocal held
            want = expect() if model else None
            slots.release()
            await settle()
            if want is None:
                held -= 1
                assert slots.free == total - held
            else:
                assert granted[-1] == want  # (it holds the slot now)
                model.remove(want)

        for op, arg in ops:
            if op == "ask":
                i = len(fg)
                fg[i] = bool(arg)
                tasks.append(asyncio.create_task(wait(i)))
                if held < total:  # a free slot nobody waits for: taken at once
                    assert not model
                    held += 1
                    await settle()
                    assert granted[-1] == i
                    continue
                model.append(i)
                await settle()
                assert slots.waiting == len(model)
            elif op == "release" and held:
                await release()
            elif op == "promote" and model:
                fg[model[int(arg) % len(model)]] = True  # type: ignore[call-overload]
        while model:  # foreground idle from here: the rest is served, none left waiting
            await release()
        await asyncio.gather(*tasks)
        assert len(granted) == len(fg)

    asyncio.run(run())


async def test_an_async_wait_ends_at_its_deadline_and_a_cancelled_one_passes_its_slot_on() -> None:
    slots = AsyncSlots(1)
    assert await slots.take(time.monotonic() - 1)  # free: taken even past the deadline
    assert not await slots.take(time.monotonic() + 0.01)
    assert slots.waiting == 0
    waiter = asyncio.create_task(slots.take(float("inf")))
    behind = asyncio.create_task(slots.take(float("inf"), lambda: False))
    await asyncio.sleep(0)
    slots.release()  # handed to `waiter`, which is cancelled before it wakes
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await behind  # the slot went on to the next waiter
    slots.release()
    assert slots.free == 1
    assert slots.borrowed_tokens == 0
    with pytest.raises(ValueError, match="released more often"):
        slots.release()
    with pytest.raises(ValueError, match="total must be >= 1"):
        AsyncSlots(0)
    with pytest.raises(anyio.WouldBlock):
        async with slots:
            slots.acquire_nowait()


# -- the sync Slots ----------------------------------------------------------------------


def test_sync_slots_serve_foreground_first_and_background_once_foreground_is_idle() -> None:
    slots = Slots(1)
    assert slots.acquire(time.monotonic())
    fg: dict[str, bool] = {"bg1": False, "bg2": False, "fg1": True, "fg2": True}
    order: list[str] = []
    threads = []
    for name in ("bg1", "bg2", "fg1", "fg2"):

        def wait(name: str = name) -> None:
            assert slots.acquire(time.monotonic() + 30, urgent=lambda: fg[name])
            order.append(name)
            slots.release()

        threads.append(threading.Thread(target=wait))
        threads[-1].start()
        count = len(threads)
        deadline = time.monotonic() + 10
        while slots.waiting < count:
            assert time.monotonic() < deadline
            time.sleep(0.001)
    fg["bg2"] = True  # its consumer now waits: foreground, in the order it first asked
    slots.release()
    for thread in threads:
        thread.join()
    assert order == ["bg2", "fg1", "fg2", "bg1"]
    assert slots.free == 1


# -- the signal: Feed.urgent ---------------------------------------------------------------


async def test_read_ahead_is_background_until_the_consumer_waits_for_it() -> None:
    """A feed's first request is foreground; its read-ahead is background while the consumer
    has items to take, and foreground again once the consumer waits for that feed."""
    seen: list[tuple[int, bool]] = []
    gate = asyncio.Event()

    def source(index: int) -> object:
        keys = iter(range(index, 400, 2))

        async def call(size: int, feed: object) -> Sent:
            seen.append((index, feed.urgent()))  # type: ignore[attr-defined]
            if len(seen) > 2:
                await gate.wait()  # read-ahead waits until the test says
            pushed = 0
            for key in keys:
                feed.keys.append(key)  # type: ignore[attr-defined]
                feed.items.append(key)  # type: ignore[attr-defined]
                pushed += 1
                if pushed == size:
                    return Sent(pushed, True)
            return Sent(pushed, False)

        return call

    sources = [source(0), source(1)]
    merge = Merge(sources, budget=ReadBudget(rows=40), largest=1)  # type: ignore[arg-type]
    async with merge:
        first = await anext(aiter(merge))
        assert first[0] == 0
        assert seen[:2] == [(0, True), (1, True)]  # first requests: foreground
        with anyio.fail_after(10):
            while len(seen) < 3:  # noqa: ASYNC110 (polls the sources, no event)
                await asyncio.sleep(0)
        assert seen[2][1] is False  # read-ahead, the consumer is busy: background
        feeds = merge._feeds
        assert not any(f.urgent() for f in feeds if f.keys)
        # The consumer drains what it holds and waits: the feeds it waits for are foreground.
        taker = asyncio.create_task(drain(merge))
        with anyio.fail_after(10):
            while not any(f.urgent() for f in feeds if not f.done):  # noqa: ASYNC110 (polls the merge's state)
                await asyncio.sleep(0)
        gate.set()
        rows = first + await taker
        assert rows == list(range(400))


async def drain(merge: Merge[int]) -> list[int]:
    out: list[int] = []
    async for batch in merge:
        out += batch
    return out


async def test_a_limited_read_is_always_foreground() -> None:
    merge = Merge([lambda size, feed: None], limit=5)  # type: ignore[list-item, arg-type, return-value]
    feed = merge._feeds[0]
    feed.keys.append(1)
    assert feed.urgent()


async def test_a_reserve_keeps_slots_for_reads_that_hold_none() -> None:
    """With many slots, scans holding some cannot take the last ``total // 8``: a newcomer
    (a small read, a read's first request) finds one free at once."""
    slots = AsyncSlots(16)  # a reserve of 2
    for _ in range(14):
        assert await slots.take(0.0, owner="scan")
    assert not await slots.take(0.0, owner="scan")  # only the reserve is left
    assert await slots.take(0.0, owner="other-scan")  # holds none: its first request
    assert await slots.take(0.0, owner="small")  # holds none: the last slot
    assert slots.free == 0
    waiting = asyncio.create_task(slots.take(float("inf"), owner="scan"))
    await asyncio.sleep(0)
    slots.release("small")  # one free again, but the reserve: scan (holding 14) waits
    await asyncio.sleep(0)
    assert not waiting.done()
    assert slots.free == 1
    slots.release("scan")  # two free: still the reserve
    await asyncio.sleep(0)
    assert not waiting.done()
    slots.release("scan")  # three free: more than the reserve, so scan's waiter takes one
    assert await waiting
    assert slots.free == 2
    slots.acquire_nowait()  # an owner (None) holding none may take the reserve...
    with pytest.raises(anyio.WouldBlock):
        slots.acquire_nowait()  # ...but only while one is free
    slots.release(None)


async def test_booked_slots_shrink_the_reserve_to_what_they_leave() -> None:
    """A streaming read's buckets book their slots: 16 booked of 16 leave no reserve, and
    the scan's waiter takes a freed slot; 12 booked leave the reserve (2) whole. Before,
    a read that streams over 16 buckets on 16 slots had 2 of them waiting at all times."""
    slots = AsyncSlots(16)  # a reserve of 2
    for _ in range(14):
        assert await slots.take(0.0, owner="scan")
    waiting = asyncio.create_task(slots.take(float("inf"), owner="scan"))
    await asyncio.sleep(0)
    assert not waiting.done()  # only the reserve is free
    for _ in range(16):
        slots.book("scan")
    assert await waiting  # (booking hands the free slot over at once)
    assert await slots.take(0.0, owner="scan")  # the last one too
    assert slots.free == 0
    for _ in range(4):
        slots.unbook("scan")
    slots.release("scan")
    slots.release("scan")
    assert not await slots.take(0.0, owner="scan")  # 12 booked: the reserve is 2 again
    assert await slots.take(0.0, owner="small")  # holds none
    for _ in range(12):
        slots.unbook("scan")
    with pytest.raises(ValueError, match="unbook"):
        slots.unbook("scan")
    slots.release("small")
    for _ in range(14):
        slots.release("scan")
    assert slots.free == 16


async def test_the_reserve_leaves_room_for_the_read_with_the_most_booked() -> None:
    """Two reads of 8 buckets each book 16 slots of 16 together: neither needs the
    reserve (each fits beside it), so it stays; one of 15 buckets leaves a reserve of 1."""
    slots = AsyncSlots(16)  # a reserve of 2
    for _ in range(8):
        slots.book("a")
        slots.book("b")
    for _ in range(14):
        assert await slots.take(0.0, owner="a")
    # (urgent=lambda: True: a scan's request, not a small read that may take the reserve)
    assert not await slots.take(0.0, urgent=lambda: True, owner="b")  # the reserve is whole
    for _ in range(15):
        slots.book("c")
    assert await slots.take(0.0, urgent=lambda: True, owner="b")  # 15 booked by c: a reserve of 1
    assert not await slots.take(0.0, urgent=lambda: True, owner="c")
    for _ in range(15):
        slots.unbook("c")
    for _ in range(8):
        slots.unbook("a")
        slots.unbook("b")
    slots.release("b")
    for _ in range(14):
        slots.release("a")
    assert slots.free == 16


def test_sync_booked_slots_shrink_the_reserve() -> None:
    slots = Slots(8)  # a reserve of 1
    for _ in range(7):
        assert slots.acquire(time.monotonic(), owner="scan")
    assert not slots.acquire(time.monotonic(), owner="scan")
    for _ in range(8):
        slots.book("scan")
    assert slots.acquire(time.monotonic(), owner="scan")
    for _ in range(8):
        slots.unbook("scan")
        slots.release("scan")
    assert slots.free == 8


def test_the_sync_reserve_hands_a_freed_slot_to_a_read_holding_none() -> None:
    slots = Slots(8)  # a reserve of 1
    for _ in range(7):
        assert slots.acquire(time.monotonic(), owner="scan")
    assert not slots.acquire(time.monotonic() + 0.01, owner="scan")
    assert slots.acquire(time.monotonic(), owner="small")
    assert slots.free == 0
    slots.release("small")
    assert slots.acquire(time.monotonic(), owner="another-small")
    for _ in range(7):
        slots.release("scan")
    slots.release("another-small")
    assert slots.free == 8


async def test_the_reserve_is_for_small_reads_not_for_scans_first_requests() -> None:
    """A scan's first request (foreground, but with an ``urgent`` check) holding none
    waits while only the reserve is free; a small read (no check) takes it at once.
    Before, the scans' first requests took the reserve too, and a small read arriving
    while they queued waited for a running request to end."""
    slots = AsyncSlots(8)  # a reserve of 1
    for i in range(7):
        assert await slots.take(0.0, urgent=lambda: True, owner=f"scan-{i}")
    first = asyncio.create_task(slots.take(float("inf"), urgent=lambda: True, owner="scan-7"))
    await asyncio.sleep(0)
    assert not first.done()
    assert slots.free == 1  # held back while a scan's first request waits
    assert await slots.take(0.0, owner="small")  # at once, no wait
    slots.release("small")
    assert not first.done()
    slots.release("scan-0")  # more than the reserve free: the scan's request goes
    assert await first
    for i in range(1, 8):
        slots.release(f"scan-{i}")
    assert slots.free == 8


def test_the_sync_reserve_is_for_small_reads_not_for_scans_first_requests() -> None:
    slots = Slots(64)  # a reserve of 8
    for i in range(56):
        assert slots.acquire(time.monotonic(), urgent=lambda: True, owner=f"scan-{i}")
    assert not slots.acquire(time.monotonic() + 0.01, urgent=lambda: True, owner="scan-56")
    for i in range(8):
        assert slots.acquire(time.monotonic(), owner=f"small-{i}")
    assert slots.free == 0
    for i in range(8):
        slots.release(f"small-{i}")
    for i in range(56):
        slots.release(f"scan-{i}")
    assert slots.free == 64


# -- the slots' queue picks exactly as next_waiter does ----------------------------------


class Watched:
    """A waiter whose class is watched (as a merge's feed is): it calls ``slot_watch``."""

    def __init__(self, fg: bool | None, owner: int) -> None:
        self.fg = fg
        self.owner = owner
        self.slot_watch: object = None
        self.granted = False
        self.seq = self.state = self.filed = 0

    def check(self) -> bool:
        return bool(self.fg)

    @property
    def urgent(self) -> object:
        return None if self.fg is None else self.check


class Plain:
    """A waiter whose class is asked at each hand-over (``urgent`` a plain function)."""

    def __init__(self, fg: bool | None, owner: int) -> None:
        self.fg = fg
        self.owner = owner
        self.granted = False
        self.seq = self.state = self.filed = 0
        self._check = lambda: bool(self.fg)

    @property
    def urgent(self) -> object:
        return None if self.fg is None else self._check


QUEUE_OPS = st.lists(
    st.one_of(
        # a new waiter: watched or not, small (None) / foreground / background, its owner
        st.tuples(
            st.just("ask"), st.booleans(), st.sampled_from([None, True, False]), st.integers(0, 3)
        ),
        st.tuples(st.just("flip"), st.integers(0, 60)),  # a waiter's class changes
        st.tuples(st.just("leave"), st.integers(0, 60)),  # a wait ends (deadline, cancelled)
        st.tuples(
            st.just("pick"),
            st.dictionaries(st.integers(0, 3), st.integers(0, 3)),
            st.dictionaries(st.integers(0, 3), st.integers(0, 50)),
            st.booleans(),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=QUEUE_OPS)
# a watched waiter's consumer starts to wait for it, then stops again
@example([("ask", True, False, 0), ("ask", True, False, 0), ("flip", 1), ("pick", {}, {}, False)])
@example(
    [
        *[("ask", True, True, 1), ("ask", True, False, 1), ("flip", 0), ("flip", 0), ("flip", 0)],
        *[("flip", 1), ("pick", {}, {}, False), ("pick", {}, {}, False)],
    ]
)
def test_the_slots_queue_picks_exactly_as_next_waiter(ops: list[tuple[object, ...]]) -> None:
    """Grouped by owner, watched waiters filed by class: the same waiter as a scan of all."""
    from saltedtable._engine.slots import WaitQueue, watchable

    queue: WaitQueue[object] = WaitQueue()  # type: ignore[type-var]
    model: deque[object] = deque()
    for op in ops:
        if op[0] == "ask":
            _, watched, fg, owner = op
            waiter = (Watched if watched else Plain)(fg, owner)  # type: ignore[arg-type]
            model.append(waiter)
            queue.append(waiter, watchable(waiter.urgent))  # type: ignore[arg-type]
            assert watchable(waiter.urgent) == (watched and fg is not None)  # type: ignore[arg-type]
        elif op[0] in ("flip", "leave") and model:
            waiter = model[op[1] % len(model)]  # type: ignore[call-overload]
            if op[0] == "leave":
                model.remove(waiter)
                queue.remove(waiter)  # type: ignore[arg-type]
            elif waiter.fg is not None:  # type: ignore[attr-defined]
                waiter.fg = not waiter.fg  # type: ignore[attr-defined]
                if isinstance(waiter, Watched) and waiter.slot_watch is not None:
                    waiter.slot_watch()  # type: ignore[operator]
        elif op[0] == "pick":
            _, held, served, idle_only = op
            ids = {id(k): v for k, v in served.items()}  # type: ignore[attr-defined]
            want = next_waiter(model, held, ids, idle_only)  # type: ignore[arg-type]
            got = queue.pick(held, ids, idle_only)  # type: ignore[arg-type]
            assert got is want
        assert len(queue) == len(model)
        assert list(queue) == list(model)
        for group in queue._groups.values():  # a class's heap holds a waiter once at most
            for heap in (group.fg, group.bg):
                assert len({id(entry[1]) for entry in heap}) == len(heap)
    for waiter in model:
        if isinstance(waiter, Watched):
            assert waiter.slot_watch is not None or waiter.fg is None


@pytest.fixture
def give_way_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests may be asked to give way as soon as they hold their slot."""
    monkeypatch.setattr(_slots, "GIVE_WAY_AFTER", 0.0)


class Runner:
    """A running request that can end between rows: records that it was asked to."""

    def __init__(self) -> None:
        self.asked = 0

    def give_way(self) -> None:
        self.asked += 1


@pytest.mark.usefixtures("give_way_at_once")
async def test_a_running_request_gives_way_to_a_small_read_and_hands_it_its_slot() -> None:
    """One slot, a scan's request running in it and another scan's first request queued
    first: a small read asks the running request to give way, and the slot goes to the
    small read, not to the older waiter (which is served next, as before)."""
    slots = AsyncSlots(1)
    runner = Runner()
    assert await slots.take(0.0, lambda: True, "scan-a", runner)
    granted: list[str] = []

    async def wait(owner: str, urgent: object) -> None:
        assert await slots.take(float("inf"), urgent, owner)  # type: ignore[arg-type]
        granted.append(owner)

    older = asyncio.create_task(wait("scan-b", lambda: True))  # a scan's first request
    await asyncio.sleep(0)
    assert runner.asked == 0  # a scan's request does not make others give way
    small = asyncio.create_task(wait("small", None))
    await asyncio.sleep(0)
    assert runner.asked == 1
    slots.release("scan-a", runner)  # it ended after its next row
    await asyncio.sleep(0)
    assert granted == ["small"]
    slots.release("small")
    await older
    assert granted == ["small", "scan-b"]
    slots.release("scan-b")
    await small
    assert slots.free == 1


async def test_requests_give_way_at_most_once_per_give_way_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small reads one after another must not cut every request of a scan down to a
    row: a small read that comes alone has the running request give way at once, but
    one that comes within GIVE_WAY_AFTER of the last give-way asks only once that long
    has passed (the small read waits until then)."""
    monkeypatch.setattr(_slots, "GIVE_WAY_AFTER", 0.2)
    slots = AsyncSlots(1)
    first, second = Runner(), Runner()
    assert await slots.take(0.0, lambda: True, "scan", first)
    small = asyncio.create_task(slots.take(float("inf"), None, "small"))
    await asyncio.sleep(0)
    assert first.asked == 1  # the first give-way: at once
    slots.release("scan", first)
    assert await small
    slots.release("small")
    assert await slots.take(0.0, lambda: True, "scan", second)  # the scan's next request
    small = asyncio.create_task(slots.take(float("inf"), None, "small"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert second.asked == 0  # a request gave way less than 0.2 s ago
    for _ in range(500):  # (asked once 0.2 s have passed since)
        if second.asked:
            break
        await asyncio.sleep(0.01)
    assert second.asked == 1
    slots.release("scan", second)
    assert await small
    slots.release("small")
    assert slots.free == 1


@pytest.mark.usefixtures("give_way_at_once")
async def test_a_request_asked_to_give_way_passes_its_slot_on_if_the_small_read_left() -> None:
    slots = AsyncSlots(1)
    first, second = Runner(), Runner()
    assert await slots.take(0.0, lambda: True, "scan-a", first)
    small = asyncio.create_task(slots.take(float("inf"), None, "small"))
    await asyncio.sleep(0)
    assert (first.asked, second.asked) == (1, 0)
    small.cancel()
    with pytest.raises(asyncio.CancelledError):
        await small
    older = asyncio.create_task(slots.take(float("inf"), lambda: True, "scan-b", second))
    await asyncio.sleep(0)
    slots.release("scan-a", first)
    assert await older  # the turn's waiter, since the small read has gone
    slots.release("scan-b", second)
    assert slots.free == 1
    # A runner that released is not asked again; one asked is asked once.
    small2 = asyncio.create_task(slots.take(float("inf"), None, "small"))
    await asyncio.sleep(0)
    assert (first.asked, second.asked) == (1, 0)
    assert await small2
    slots.release("small")


@pytest.mark.usefixtures("give_way_at_once")
async def test_a_small_read_waits_for_one_row_of_a_running_scan_page_not_the_whole_page() -> None:
    """One slot held by a scan's page request: a small read (one request over every
    bucket) gets the slot after the page's next row, and the scan then goes on with
    every row once (it resumes after its last row)."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), max_concurrent_subscans=1)  # type: ignore[arg-type]
    keys = [b"w%05d" % i for i in range(2000)]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    fake.stats.queries.clear()
    seen: list[bytes] = []
    stream = await table.read_rows_stream(ReadRowsQuery())
    seen.append((await anext(stream)).row_key)  # type: ignore[call-overload]
    assert table.limiter.free == 0  # a page request of the scan runs in the slot
    sent = fake.stats.rows_sent
    small = await table.read_rows(ReadRowsQuery(row_ranges=RowRange(keys[100], keys[110])))
    assert [r.row_key for r in small] == keys[100:110]
    # The fake sends a row per turn of the event loop, so the scan's rows count the
    # turns the small read waited: its task starting, the scan's next row, the
    # hand-over. A request that kept its slot sent the rest of its page of 256 (200
    # rows and more); a one-request read run by a merge of its own waited 8 turns.
    assert fake.stats.rows_sent - sent - 10 <= 4
    async for row in stream:
        seen.append(row.row_key)
    assert seen == keys
    assert fake.stats.rows_sent == len(keys) + 10  # the scan read no row twice


async def test_a_small_read_cancelled_while_its_request_runs_ends_it_and_frees_its_slot() -> None:
    """The one request runs in a task of its own (not a merge): a caller cancelled while
    it waits stops the request (between rows) and waits for that task; nothing is left
    running, open or holding a slot, and the read is reported once, as ended early."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), max_concurrent_subscans=2)  # type: ignore[arg-type]
    keys = [b"w%05d" % i for i in range(100)]
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    reported: list[object] = []
    table.stats_hook = reported.append
    fake.latency = 0.5  # the request waits before its first row
    before = len(asyncio.all_tasks())
    read = asyncio.create_task(
        table.read_rows(ReadRowsQuery(row_ranges=RowRange(keys[10], keys[20])))
    )
    for _ in range(20):  # a few turns: the read's task, then its request's
        await asyncio.sleep(0)
    assert fake.stats.open_now == 1
    assert table.limiter.free == 1  # the request holds a slot
    read.cancel()
    with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
        await read
    assert fake.stats.open_now == 0
    assert table.limiter.free == 2
    assert len(asyncio.all_tasks()) == before
    assert len(reported) == 1
    assert reported[0].ended_early  # type: ignore[attr-defined]


# -- give-way, sync ------------------------------------------------------------------------


def _wait_for(check: object) -> None:
    deadline = time.monotonic() + 10
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.001)


@pytest.mark.usefixtures("give_way_at_once")
def test_a_running_sync_request_gives_way_to_a_small_read_and_hands_it_its_slot() -> None:
    """As the async slots: one slot, a scan's request running in it and another scan's
    first request queued first: a small read asks the running request to give way (from
    its own thread), gets its slot before the older waiter, which is served next."""
    slots = Slots(1)
    runner = Runner()
    assert slots.acquire(0.0, urgent=lambda: True, owner="scan-a", runner=runner)
    granted: list[str] = []

    def wait(owner: str, urgent: object) -> None:
        assert slots.acquire(time.monotonic() + 30, urgent=urgent, owner=owner)  # type: ignore[arg-type]
        granted.append(owner)

    older = threading.Thread(target=wait, args=("scan-b", lambda: True))
    older.start()
    _wait_for(lambda: slots.waiting == 1)
    assert runner.asked == 0  # a scan's request does not make others give way
    small = threading.Thread(target=wait, args=("small", None))
    small.start()
    _wait_for(lambda: slots.waiting == 2)
    assert runner.asked == 1
    slots.release("scan-a", runner)  # it ended after its next row
    small.join(10)
    assert granted == ["small"]
    slots.release("small")
    older.join(10)
    assert granted == ["small", "scan-b"]
    slots.release("scan-b")
    assert slots.free == 1
    assert runner.asked == 1


@pytest.mark.usefixtures("give_way_at_once")
def test_a_sync_request_asked_to_give_way_passes_its_slot_on_if_the_small_read_left() -> None:
    slots = Slots(1)
    runner = Runner()
    assert slots.acquire(0.0, urgent=lambda: True, owner="scan-a", runner=runner)
    left = threading.Event()
    got: list[bool] = []
    small = threading.Thread(
        target=lambda: got.append(slots.acquire(time.monotonic() + 30, left.is_set, None, "small"))
    )
    small.start()
    _wait_for(lambda: runner.asked == 1)
    left.set()
    slots.interrupt()  # the small read's read stopped: it leaves the queue
    small.join(10)
    assert got == [False]
    older: list[str] = []
    scan = threading.Thread(
        target=lambda: (
            older.append("scan-b")
            if slots.acquire(time.monotonic() + 30, urgent=lambda: True, owner="scan-b")
            else None
        )
    )
    scan.start()
    _wait_for(lambda: slots.waiting == 1)
    slots.release("scan-a", runner)
    scan.join(10)
    assert older == ["scan-b"]  # the turn's waiter, since the small read has gone
    slots.release("scan-b")
    assert slots.free == 1


class _GatedTable(SyncFakeTable):
    """A sync fake whose one-range streams (a scan's bucket requests) send a row only
    per ``gate`` release while ``gated``; a small read's request (several ranges) is free."""

    def __init__(self, fake: FakeTable) -> None:
        super().__init__(fake)
        self.gate = threading.Semaphore(0)
        self.gated = True

    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: object) -> _Gated:  # type: ignore[override]
        inner = super().read_rows_stream(query, **kwargs)
        return _Gated(inner, self if len(query.row_ranges) == 1 else None)


class _Gated:
    def __init__(self, inner: object, table: _GatedTable | None) -> None:
        self._inner = inner
        self._table = table

    def __iter__(self) -> _Gated:
        return self

    def __next__(self) -> object:
        if self._table is not None and self._table.gated:
            assert self._table.gate.acquire(timeout=30)
        return next(self._inner)  # type: ignore[call-overload]

    def close(self) -> None:
        self._inner.close()  # type: ignore[attr-defined]


@pytest.mark.usefixtures("give_way_at_once")
def test_a_sync_small_read_waits_for_one_row_of_a_running_scan_page_not_the_whole_page() -> None:
    """One slot held by a sync scan's page request: a small read gets the slot after the
    page's next row (the request gives way), and the scan then goes on with every row
    once. Before, the small read waited for the rest of the page. (Unordered: an
    ordered scan's first row needs every bucket's first page.)"""
    fake = FakeTable()
    gated = _GatedTable(fake)
    table = SaltedTable(gated, SaltScheme(4), max_concurrent_subscans=1)  # type: ignore[arg-type]
    keys = [b"w%05d" % i for i in range(2000)]
    gated.gated = False
    table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    # The table measures its rows first (so the scan's first requests are pages, not probes).
    assert len(table.read_rows(ReadRowsQuery(row_ranges=RowRange(keys[0], keys[5])))) == 5
    gated.gated = True
    small_rows: list[bytes] = []
    small = threading.Thread(
        target=lambda: small_rows.extend(
            r.row_key
            for r in table.read_rows(ReadRowsQuery(row_ranges=RowRange(keys[100], keys[110])))
        )
    )
    try:
        with closing(table.read_rows_stream(ReadRowsQuery(), ordered=False)) as stream:
            gated.gate.release()
            seen = [next(stream).row_key]
            assert table.limiter.free == 0  # a page request of the scan runs in the slot
            sent = fake.stats.rows_sent
            small.start()
            _wait_for(lambda: table.limiter.waiting == 1)
            gated.gate.release()  # the page's next row: the request ends there
            small.join(10)
            assert not small.is_alive()  # served before the page ended
            assert small_rows == keys[100:110]
            assert fake.stats.rows_sent - sent - 10 == 1
            gated.gated = False
            gated.gate.release(10_000)
            seen.extend(row.row_key for row in stream)
        assert sorted(seen) == keys
        assert fake.stats.rows_sent == 5 + len(keys) + 10  # the scan read no row twice
    finally:
        gated.gated = False
        gated.gate.release(10_000)
        if small.ident is not None:
            small.join(30)
    assert table.limiter.free == 1


def test_sync_requests_give_way_at_most_once_per_give_way_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the async slots: within GIVE_WAY_AFTER of the last give-way, a sync small read
    asks the running request only once that long has passed."""
    monkeypatch.setattr(_slots, "GIVE_WAY_AFTER", 0.2)
    slots = Slots(1)
    first, second = Runner(), Runner()
    got: list[bool] = []

    def small_read() -> threading.Thread:
        thread = threading.Thread(target=lambda: got.append(slots.acquire(time.monotonic() + 30)))
        thread.start()
        _wait_for(lambda: slots.waiting == 1)
        return thread

    assert slots.acquire(0.0, urgent=lambda: True, owner="scan", runner=first)
    small = small_read()
    _wait_for(lambda: first.asked == 1)  # the first give-way: at once
    slots.release("scan", first)
    small.join(30)
    slots.release()
    assert slots.acquire(0.0, urgent=lambda: True, owner="scan", runner=second)
    small = small_read()
    assert second.asked == 0  # a request gave way less than 0.2 s ago
    _wait_for(lambda: second.asked == 1)  # (asked once 0.2 s have passed since)
    slots.release("scan", second)
    small.join(30)
    assert got == [True, True]
    slots.release()
    assert slots.free == 1


# -- read-ahead pauses while a small read runs ------------------------------------


class PFeed:
    """A merge feed as a pause sees it: ``pausable()`` and the ``on_pause`` hook."""

    def __init__(self) -> None:
        self.waits = False
        self.wake: object = None

    def pausable(self) -> bool:
        return not self.waits

    def on_pause(self, wake: object) -> None:
        self.wake = wake

    def consumer_waits(self) -> None:
        self.waits = True
        if self.wake is not None:
            self.wake()  # type: ignore[operator]


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pauses are not asked again on a timer: only a wake-up ends one early."""
    monkeypatch.setattr(slots_threads, "PAUSE_SLICE", 60.0)
    monkeypatch.setattr(slots_asyncio, "PAUSE_SLICE", 60.0)


def _never_stop() -> bool:
    return False


def _pause_in_thread(
    slots: Slots, feed: PFeed, abort: object = _never_stop
) -> tuple[threading.Thread, list[float]]:
    waited: list[float] = []
    thread = threading.Thread(
        target=lambda: waited.append(slots.pause_for_small(feed, abort, 60))  # type: ignore[arg-type]
    )
    thread.start()
    _wait_for(lambda: slots.paused == 1)
    return thread, waited


@pytest.mark.usefixtures("no_polling")
def test_a_sync_background_request_pauses_until_the_small_read_ends() -> None:
    """``pause_for_small`` waits while a small read's request runs and is woken when it
    ends; with no small read, or for a feed whose consumer waits, it does not wait."""
    slots = Slots(4)
    feed = PFeed()
    assert slots.pause_for_small(feed, _never_stop, 60) == 0.0
    slots.small_begins()
    slots.small_begins()
    thread, waited = _pause_in_thread(slots, feed)
    slots.small_ends()
    time.sleep(0.05)
    assert not waited  # one small read still runs
    slots.small_ends()
    thread.join(10)
    assert not thread.is_alive()
    assert 0 < waited[0] < 60
    assert slots.paused == 0
    assert slots.small == 0
    feed.waits = True
    slots.small_begins()
    assert slots.pause_for_small(feed, _never_stop, 60) == 0.0  # foreground: no pause
    slots.small_ends()
    with pytest.raises(ValueError, match="small_ends"):
        slots.small_ends()


@pytest.mark.usefixtures("no_polling")
def test_a_sync_pause_ends_when_its_consumer_waits_a_foreground_request_queues_or_it_stops() -> (
    None
):
    slots = Slots(1)
    slots.small_begins()
    # Its consumer starts to wait for it (the merge calls the feed's slot_watch).
    feed = PFeed()
    thread, _ = _pause_in_thread(slots, feed)
    feed.consumer_waits()
    thread.join(10)
    assert not thread.is_alive()
    # A foreground request queues for a slot (this request holds the only one).
    assert slots.acquire(0.0, owner="scan")
    feed = PFeed()
    thread, _ = _pause_in_thread(slots, feed)
    first = threading.Thread(
        target=lambda: slots.acquire(time.monotonic() + 30, urgent=lambda: True, owner="other")
    )
    first.start()
    thread.join(10)
    assert not thread.is_alive()
    slots.release("scan")
    first.join(10)
    slots.release("other")
    # Its read stops.
    stopped = threading.Event()
    thread, _ = _pause_in_thread(slots, PFeed(), stopped.is_set)
    stopped.set()
    slots.interrupt()
    thread.join(10)
    assert not thread.is_alive()
    # `most` bounds it while the small read still runs.
    assert slots.pause_for_small(PFeed(), _never_stop, 0.05) >= 0.05
    assert slots.small == 1
    assert slots.paused == 0


@pytest.mark.usefixtures("no_polling", "give_way_at_once")
def test_a_paused_sync_request_asked_to_give_way_stops_pausing() -> None:
    """One slot, held by a paused read-ahead request: a second small read that queues
    asks it to give way, which ends its pause at once (it then ends its request)."""
    slots = Slots(1)
    runner = Runner()
    assert slots.acquire(0.0, urgent=lambda: False, owner="scan", runner=runner)
    slots.small_begins()  # a small read runs (on a slot of its own, say)
    thread, _ = _pause_in_thread(slots, PFeed(), lambda: runner.asked > 0)
    small = threading.Thread(target=lambda: slots.acquire(time.monotonic() + 30, owner="small"))
    small.start()
    thread.join(10)
    assert not thread.is_alive()
    assert runner.asked == 1
    slots.release("scan", runner)
    small.join(10)
    slots.release("small")
    slots.small_ends()
    assert slots.free == 1


@pytest.mark.usefixtures("no_polling")
async def test_an_async_background_request_pauses_until_the_small_read_ends() -> None:
    slots = AsyncSlots(4)
    feed = PFeed()
    assert await slots.pause_for_small(feed, _never_stop, 60) == 0.0  # type: ignore[arg-type]
    slots.small_begins()
    slots.small_begins()
    pause = asyncio.create_task(slots.pause_for_small(feed, _never_stop, 60))  # type: ignore[arg-type]
    with anyio.fail_after(10):
        while slots.paused != 1:  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0.001)
    slots.small_ends()
    await asyncio.sleep(0.05)
    assert not pause.done()  # one small read still runs
    slots.small_ends()
    with anyio.fail_after(10):
        assert 0 < await pause < 60
    assert slots.paused == 0
    with pytest.raises(ValueError, match="small_ends"):
        slots.small_ends()


@pytest.mark.usefixtures("no_polling")
async def test_an_async_pause_ends_for_its_consumer_a_foreground_waiter_or_a_cancel() -> None:
    slots = AsyncSlots(1)
    slots.small_begins()
    feed = PFeed()
    pause = asyncio.create_task(slots.pause_for_small(feed, _never_stop, 60))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not pause.done()
    feed.consumer_waits()
    with anyio.fail_after(10):
        await pause
    assert await slots.take(0.0, owner="scan")
    pause = asyncio.create_task(slots.pause_for_small(PFeed(), _never_stop, 60))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    first = asyncio.create_task(slots.take(time.monotonic() + 30, lambda: True, "other"))
    with anyio.fail_after(10):
        await pause
    slots.release("scan")
    assert await first
    slots.release("other")
    assert await slots.pause_for_small(PFeed(), _never_stop, 0.05) >= 0.05  # type: ignore[arg-type]
    pause = asyncio.create_task(slots.pause_for_small(PFeed(), _never_stop, 60))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    pause.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pause
    assert slots.paused == 0
    assert slots.small == 1


def _windows(cut: bool, stray: int) -> list[int]:
    """A feed's windows over six requests that the consumer empties at once, each
    delivering all it asked less ``stray`` hidden rows; ``cut``: its source ended each
    one early (given way, paused, at its byte cap)."""
    from saltedtable._engine.merge_threads import ThreadMerge

    merge: ThreadMerge[int] = ThreadMerge(
        [lambda *a: None] * 16,  # type: ignore[list-item]
        threads=2,
        ordered=False,
        largest=1,  # (rows measured by an earlier read: no probe first)
    )
    feed = merge._feeds[0]
    windows = []
    with merge._cond:
        for _ in range(6):
            size = merge._demand(feed)
            assert size
            merge._start(feed, size)
            pushed = size - stray
            feed.items.extend(range(pushed))
            merge._end(feed, size, pushed, cut)
            del feed.items[:]  # the consumer took them all at once
            feed.taken_last = 1
            merge._held -= pushed
            while feed.pending:
                _, got = feed.pending.pop(0)
                feed.charged -= got
                merge._reserved -= got
            windows.append(feed.window)
    return windows


def test_a_request_ended_early_gives_no_widening_signal_but_hidden_rows_do_not_matter() -> None:
    """A consumer that keeps up widens its bucket's window, also when some rows of each
    page are hidden (a cutoff read's stray rows: fewer pushed than asked); a request its
    source cut short (a pause, a give-way, the byte cap) says nothing of that pace."""
    grows = _windows(cut=False, stray=0)
    assert grows[-1] > grows[0]
    assert _windows(cut=False, stray=1) == grows
    cut = _windows(cut=True, stray=0)
    assert cut == [cut[0]] * 6


def test_a_sync_merge_wakes_its_paused_requests_when_its_consumer_waits() -> None:
    """A request pausing for a small read (Feed.on_pause) is woken as soon as its read's
    consumer waits for any item, and its feed is no longer pausable while it does: the
    paused request may hold the worker thread another bucket's request needs."""
    from saltedtable._engine.merge import Wait
    from saltedtable._engine.merge_threads import ThreadMerge

    merge: ThreadMerge[int] = ThreadMerge([lambda *a: None] * 2, threads=2, ordered=False)  # type: ignore[list-item]
    paused, other = merge._feeds
    woken = threading.Event()
    pausable_then: list[bool] = []

    def wake() -> None:
        pausable_then.append(paused.pausable())
        woken.set()

    paused.taken_last = 1  # its consumer took from it, and has rows to take
    paused.on_pause(wake)
    assert paused.pausable()  # read-ahead of a consumer that does not wait

    def consumer() -> None:
        with merge._cond:
            merge._wait(Wait((other,), 1))

    thread = threading.Thread(target=consumer)
    thread.start()
    try:
        assert woken.wait(10), "the paused request was not woken when the consumer waited"
        assert pausable_then == [False]
    finally:
        with merge._cond:
            merge._cond.notify_all()
        thread.join(10)
    paused.on_pause(None)
    assert paused.pausable()
