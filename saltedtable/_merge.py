"""Paged fan-out and k-way merge of sorted sources.

Generic: nothing here knows about Bigtable. A *source* is an async callable
``fetch(size) -> Page``: it returns the next page of at most ``size`` items
with their sort keys, and says whether more pages follow. :class:`FanOut`
runs one producer task per source in an anyio task group and hands the
consumer batches of items, either merged in key order or as they arrive.

Why pages: a producer holds a concurrency slot (a shared
:class:`anyio.CapacityLimiter`) only while it fetches one bounded page, then
releases it before handing the page over. An ordered merge needs a head item
from every source before it can emit anything; if producers held their slots
while waiting for the merge, a limiter smaller than the number of sources (or
many merges sharing one limiter) would deadlock. Bounded pages also make a
limit cheap: the first pages ask for about ``limit / sources`` items each and
later pages for at most what is still missing.

Why a supervisor task: the producers' task group lives in a task of its own,
so the consumer side can be a plain async iterator that may be abandoned
(``break``), closed from another task (asyncio's async-generator finaliser)
or cancelled, without exiting a cancel scope in the wrong task.
:meth:`FanOut.aclose` cancels the producers while they wait on their fetch,
which is what cancels an in-flight gRPC stream, and waits until they are gone.

:class:`Merge` is the push-based variant for sources without a limit: each
source is a *pump* that appends items and keys to its :class:`Feed` as they
arrive, and the consumer takes what is below the merge's watermark. There is
no page hand-over per batch and a feed holds few items, so rows go out soon
after they arrive: Python's cost per row stays near that of reading the
sources unmerged (a large backlog of live rows is slow in CPython, measured:
see :data:`FEED_CAPACITY`).
"""

from __future__ import annotations

import asyncio
import bisect
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, NoReturn, TypeVar, final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["FEED_CAPACITY", "WAKE_BATCH", "WAKE_DELAY", "FanOut", "Feed", "Merge", "Page", "Pump"]

T = TypeVar("T")

#: Items a :class:`Feed` holds before its pump waits. Small on purpose:
#: measured on the emulator, a raw 16-stream read that keeps its rows in
#: lists of 256 per stream before dropping them spends about 4.5 us more per
#: row than one that keeps 16 (rows gone cold by the time they are freed).
#: Between 4 and 64 the merge's own figures were within run-to-run noise;
#: a later per-thread profile put 16 at 0.4-1.3 us per row below 64 on the
#: emulator. Kept at 64: Cloud Bigtable sends many rows of a bucket per
#: message, and a smaller feed would pause its pump that much more often.
FEED_CAPACITY: Final = 64

#: Items a feed the consumer waits for must hold before the pump wakes it (or
#: its end, or :data:`WAKE_DELAY`). Waking on the first item made batches of
#: about one item per source (16 rows for 16 buckets), and the consumer's
#: work per batch, over every feed, cost about as much as a row; at 8 the
#: batches are several times larger. Measured on the emulator, 16 buckets:
#: about 1.4-1.8 us less main-thread CPU per row for an ordered scan.
WAKE_BATCH: Final = 8

#: Seconds after which a waiting consumer takes whatever its feeds hold, even
#: short of :data:`WAKE_BATCH`: the most batching adds to a row's latency when
#: a source is slow or its rows sparse.
WAKE_DELAY: Final = 0.002


@final
@dataclass(slots=True)
class Page(Generic[T]):
    """One page from a source: items, their sort keys (same length), and whether more follow."""

    items: list[T]
    keys: list[Any]
    more: bool


Fetch = Callable[[int], Awaitable[Page[T]]]


class _Runner(Generic[T]):
    """What both fan-outs share: producer tasks in a supervisor, and the consumer's lifecycle.

    A subclass provides the consumer's batches (:meth:`_batches`), one
    producer per source (:meth:`_produce`), and what to set up before the
    producers start and to release once they are gone.
    """

    def __init__(
        self,
        sources: int,
        on_start: Callable[[], None] | None,
        on_close: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self._count = sources
        self._on_start = on_start
        self._on_close = on_close
        self._emitted = 0
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._iter: AsyncGenerator[list[T], None] | None = None

    @property
    def emitted(self) -> int:
        """Items handed to the consumer so far."""
        return self._emitted

    def __aiter__(self) -> _Runner[T]:
        return self

    async def __anext__(self) -> list[T]:
        if self._iter is None:
            if self._closed:
                raise StopAsyncIteration
            if self._on_start is not None:
                self._on_start()
            self._prepare()
            self._task = asyncio.get_running_loop().create_task(self._supervise())
            self._task.add_done_callback(self._supervisor_done)
            self._iter = self._batches()
        try:
            return await self._iter.__anext__()
        except (StopAsyncIteration, _Closed):
            await self.aclose()
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Runner[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel every producer (and so every in-flight read) and wait until they are gone.

        Safe to call more than once and from any task; never raises a producer error.
        """
        self._closed = True
        self._scope.cancel()
        with anyio.CancelScope(shield=True):
            if self._task is not None:
                await asyncio.wait([self._task])
                if not self._task.cancelled():
                    self._task.exception()  # retrieved: it is reported through _error
            if self._on_close is not None:
                on_close, self._on_close = self._on_close, None
                await on_close()
            if self._iter is not None and not getattr(self._iter, "ag_running", False):
                # (A consumer still inside __anext__ in another task finishes
                # the generator itself when it sees the fan-out closed.)
                it, self._iter = self._iter, None
                await it.aclose()
        self._release()

    async def _supervise(self) -> None:
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    for i in range(self._count):
                        tg.start_soon(self._run, i)
        except Exception as exc:  # handed to the consumer, which raises it
            if self._error is None:
                self._error = _first_error(exc)
        except BaseException:
            # Cancelled from outside (not by aclose, whose scope absorbs it).
            if self._error is None:
                self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
            raise
        finally:
            self._producers_gone()

    async def _run(self, i: int) -> None:
        try:
            await self._produce(i)
        except Exception as exc:
            if self._error is None:
                self._error = exc
            raise

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        # Normally _supervise has already reported its end. A supervisor
        # cancelled before it ever ran has not: tell the consumer now.
        if task.cancelled() and self._error is None and not self._closed:
            self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
        self._producers_gone()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _stopped(self) -> NoReturn:
        """The producers stopped early: one failed, or the fan-out was closed."""
        self._raise_error()
        if self._closed:
            raise _Closed
        raise RuntimeError("a fan-out source stopped without an error")

    # -- what a subclass provides ----------------------------------------------

    def _prepare(self) -> None:
        """Set up before the producers start (when iteration starts)."""

    def _batches(self) -> AsyncGenerator[list[T], None]:
        raise NotImplementedError

    async def _produce(self, i: int) -> None:
        raise NotImplementedError

    def _producers_gone(self) -> None:
        """Called once every producer is gone (after any error is recorded)."""

    def _release(self) -> None:
        """Called at the end of :meth:`aclose`."""


@final
class FanOut(_Runner[T]):
    """Run paged sources concurrently and yield batches, merged by key or unordered.

    Args:
        sources: One fetch callable per source. In ordered mode every source
            must return keys in ascending order, and no key may appear in two
            sources.
        ordered: Merge in ascending key order (True) or hand batches over as
            they arrive (False: lowest time to first item).
        limit: Stop after this many items in total (None: no limit).
        first_page: Page size of each source's first fetch when there is no limit.
        max_page: Largest page size (pages double from the first size up to this).
        limiter: Bounds the fetches in flight, shared by every fan-out that uses it.
        on_start: Called (synchronously) when iteration starts, before any fetch.
        on_close: Awaited when the fan-out closes, after every producer is gone.
    """

    def __init__(
        self,
        sources: Sequence[Fetch[T]],
        *,
        ordered: bool = True,
        limit: int | None = None,
        first_page: int = 100,
        max_page: int = 1000,
        limiter: anyio.CapacityLimiter | None = None,
        on_start: Callable[[], None] | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit}")
        if first_page < 1 or max_page < first_page:
            raise ValueError(f"need 1 <= first_page <= max_page, got {first_page}, {max_page}")
        super().__init__(len(sources), on_start, on_close)
        self._sources = list(sources)
        self._ordered = ordered
        self._limit = limit
        self._max_page = max_page
        self._limiter = limiter
        n = max(1, len(self._sources))
        self._first = min(max_page, math.ceil(limit / n)) if limit is not None else first_page
        self._sizes = [0] * len(self._sources)
        self._refills = [0] * len(self._sources)
        # Streams are made when iteration starts, so a fan-out that is never
        # iterated (a stream closed before its first row) holds nothing to close.
        self._requests: list[tuple[MemoryObjectSendStream[int], MemoryObjectReceiveStream[int]]]
        self._requests = []
        self._pages: list[
            tuple[
                MemoryObjectSendStream[tuple[int, Page[T]]],
                MemoryObjectReceiveStream[tuple[int, Page[T]]],
            ]
        ] = []

    def _prepare(self) -> None:
        n = len(self._sources)
        self._requests = [anyio.create_memory_object_stream[int](math.inf) for _ in range(n)]
        if self._ordered:
            self._pages = [
                anyio.create_memory_object_stream[tuple[int, Page[T]]](1) for _ in range(n)
            ]
        else:
            shared = anyio.create_memory_object_stream[tuple[int, Page[T]]](n)
            self._pages = [(shared[0].clone(), shared[1]) for _ in range(n)]
            shared[0].close()
            if not n:
                shared[1].close()
        if self._limit is not None:
            for i in range(n):
                self._request(i, self._first)

    def _batches(self) -> AsyncGenerator[list[T], None]:
        return self._ordered_batches() if self._ordered else self._unordered_batches()

    def _producers_gone(self) -> None:
        for send, _ in self._pages:
            send.close()

    def _release(self) -> None:
        for req_send, req_recv in self._requests:
            req_send.close()
            req_recv.close()
        for page_send, page_recv in self._pages:
            page_send.close()
            page_recv.close()

    # -- the consumer's side ---------------------------------------------------

    def _request(self, i: int, size: int) -> None:
        self._sizes[i] = size
        self._requests[i][0].send_nowait(size)

    def _next_size(self, i: int, outstanding: int = 0) -> int:
        """Size of source ``i``'s next page under a limit.

        A source asks for its share of the rows still missing, doubling the
        share each time it runs dry again (a source that holds most of the
        matching rows reaches big pages quickly, an even spread overshoots the
        limit little). Without a limit the producers size their own pages.
        """
        assert self._limit is not None
        self._refills[i] += 1
        missing = self._limit - self._emitted - outstanding
        share = math.ceil(missing / len(self._sources)) << min(self._refills[i] - 1, 20)
        return max(1, min(self._max_page, missing, share))

    async def _receive(self, i: int) -> Page[T]:
        try:
            _, page = await self._pages[i][1].receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._stopped()
        return page

    async def _ordered_batches(self) -> AsyncGenerator[list[T], None]:
        # Merge by watermark: every source that may still send rows has a page
        # whose last key bounds what it can send next; below the smallest such
        # key every row is known, so that slice of every page goes out at once,
        # sorted in C (a timsort of a few sorted runs), not row by row in Python.
        limit = self._limit
        n = len(self._sources)
        items: list[list[T]] = [[] for _ in range(n)]
        keys: list[list[Any]] = [[] for _ in range(n)]
        pos = [0] * n
        more = [True] * n
        live = set(range(n))  # sources with rows buffered or still to come

        async def refill(i: int) -> None:
            while True:
                page = await self._receive(i)
                more[i] = page.more
                items[i], keys[i], pos[i] = page.items, page.keys, 0
                if page.items:
                    return
                if not page.more:
                    live.discard(i)
                    return
                if limit is not None:
                    self._request(i, self._next_size(i))

        for i in range(n):
            await refill(i)
        while live:
            bounds = [keys[i][-1] for i in live if more[i]]
            mark = min(bounds) if bounds else None
            out_keys: list[Any] = []
            out: list[T] = []
            runs = 0
            for i in sorted(live):
                start = pos[i]
                end = len(keys[i]) if mark is None else bisect.bisect_right(keys[i], mark, start)
                if end > start:
                    runs += 1
                    out_keys.extend(keys[i][start:end])
                    out.extend(items[i][start:end])
                    pos[i] = end
            if runs > 1:
                out = _in_key_order(out, out_keys)
            if limit is not None:
                out = out[: limit - self._emitted]
            if out:
                self._emitted += len(out)
                yield out
            if limit is not None and self._emitted >= limit:
                break
            for i in sorted(live):
                if pos[i] < len(keys[i]):
                    continue
                if not more[i]:
                    live.discard(i)
                    continue
                if limit is not None:
                    self._request(i, self._next_size(i))
                await refill(i)
        self._raise_error()

    async def _unordered_batches(self) -> AsyncGenerator[list[T], None]:
        limit = self._limit
        recv = self._pages[0][1] if self._sources else None
        if limit is None:
            # The producers read ahead on their own: hand pages over as they come.
            active = len(self._sources)
            while active and recv is not None:
                try:
                    _, page = await recv.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    self._stopped()
                if page.items:
                    self._emitted += len(page.items)
                    yield page.items
                if not page.more:
                    active -= 1
            self._raise_error()
            return
        pending = [True] * len(self._sources)  # a page has been asked for and not received
        idle: list[int] = []  # sources with more rows that nobody has asked for yet
        outstanding = sum(self._sizes)
        while recv is not None and (any(pending) or idle):
            try:
                i, page = await recv.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self._stopped()
            pending[i] = False
            outstanding -= self._sizes[i]
            items = page.items[: limit - self._emitted]
            if items:
                self._emitted += len(items)
                yield items
            if self._emitted >= limit:
                return
            if page.more:
                idle.append(i)
            # Ask again, but not for more rows than are still missing.
            while idle and limit - self._emitted - outstanding > 0:
                j = idle.pop()
                size = self._next_size(j, outstanding)
                self._request(j, size)
                pending[j] = True
                outstanding += size
        self._raise_error()

    # -- the producers' side ---------------------------------------------------

    async def _produce(self, i: int) -> None:
        # The page stream is closed by the supervisor, after any error is
        # recorded, so a consumer that sees it end also sees the error.
        send = self._pages[i][0]
        if self._limit is None:
            # No limit: fetch ahead on our own, as far as the page stream's
            # buffer allows, so this source never waits for the merge to
            # need it before asking for more.
            size = self._first
            while True:
                page = await self._fetch(i, size)
                await send.send((i, page))
                if not page.more:
                    return
                size = min(self._max_page, size * 2)
        else:
            # A limit: the consumer sizes each page from what is still missing.
            async for size in self._requests[i][1]:
                page = await self._fetch(i, size)
                await send.send((i, page))
                if not page.more:
                    return

    async def _fetch(self, i: int, size: int) -> Page[T]:
        if self._limiter is None:
            return await self._sources[i](size)
        async with self._limiter:
            return await self._sources[i](size)


@final
class Feed(Generic[T]):
    """Where a :class:`Merge` source (a pump) puts its items as they arrive.

    The pump appends to :attr:`items` and :attr:`keys` (same length, keys
    ascending in an ordered merge) and, whenever ``len(keys) >= wake_at``,
    awaits :meth:`pushed`. That check is all a pump pays per item while
    nobody waits for it; :meth:`pushed` wakes a consumer waiting for this
    feed and holds the pump while the feed is full.
    """

    __slots__ = ("_capacity", "_merge", "_space", "done", "items", "keys", "wake_at")

    def __init__(self, merge: Merge[T], capacity: int) -> None:
        self.items: list[T] = []
        self.keys: list[Any] = []
        #: The pump calls :meth:`pushed` once it holds this many items.
        self.wake_at = capacity
        #: Set when the pump has returned: no more items will come.
        self.done = False
        self._capacity = capacity
        self._merge = merge
        self._space: asyncio.Future[None] | None = None

    async def pushed(self) -> None:
        """Wake a consumer waiting for this feed; wait while the feed is full."""
        self._merge._wake()
        while len(self.keys) >= self._capacity:
            space = self._space = asyncio.get_running_loop().create_future()
            await space

    def _taken(self) -> None:
        space, self._space = self._space, None
        if space is not None and not space.done():
            space.set_result(None)


Pump = Callable[[Feed[T]], Awaitable[None]]


@final
class Merge(_Runner[T]):
    """Run push sources (pumps) concurrently and yield batches, merged by key or unordered.

    Each pump fills its :class:`Feed` as its items arrive and returns when it
    has no more. The ordered consumer waits until every unfinished feed holds
    an item, then hands over everything up to the smallest of the feeds' last
    keys (the watermark: nothing smaller can still come), sorted in C. A feed
    holds at most ``capacity`` items before its pump waits, which bounds
    memory and keeps rows moving. A waiting consumer is woken in batches
    (``wake_batch`` items, or ``wake_delay`` seconds), so that its work per
    wake, which visits every feed, is shared by many items. No limit: a
    limited read pages with :class:`FanOut`, which sizes requests from what
    is missing.

    Args:
        pumps: One pump per source. In ordered mode each must push keys in
            ascending order, and no key may appear in two sources.
        ordered: Merge in ascending key order, or hand over what has arrived.
        capacity: Items a feed holds before its pump waits.
        wake_batch: Items a feed the consumer waits for must hold before its
            pump wakes the consumer, unless the feed ends or ``wake_delay``
            seconds pass first (whatever arrived by then goes out).
        wake_delay: See ``wake_batch``.
        on_start: Called (synchronously) when iteration starts, before any pump runs.
        on_close: Awaited when the merge closes, after every pump is gone.
    """

    def __init__(
        self,
        pumps: Sequence[Pump[T]],
        *,
        ordered: bool = True,
        capacity: int = FEED_CAPACITY,
        wake_batch: int = WAKE_BATCH,
        wake_delay: float = WAKE_DELAY,
        on_start: Callable[[], None] | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if wake_batch < 1:
            raise ValueError(f"wake_batch must be >= 1, got {wake_batch}")
        if not wake_delay >= 0:
            raise ValueError(f"wake_delay must be >= 0, got {wake_delay}")
        super().__init__(len(pumps), on_start, on_close)
        self._pumps = list(pumps)
        self._ordered = ordered
        self._feeds = [Feed(self, capacity) for _ in self._pumps]
        self._waiter: asyncio.Future[None] | None = None
        self._gone = False  # every pump has returned or failed
        self._wake_batch = min(wake_batch, capacity)
        self._wake_delay = wake_delay

    def _batches(self) -> AsyncGenerator[list[T], None]:
        return self._ordered_batches() if self._ordered else self._unordered_batches()

    async def _run(self, i: int) -> None:
        # Overrides _Runner._run so that the pump runs one frame below the
        # task: every frame in between costs on every row that arrives.
        feed = self._feeds[i]
        try:
            await self._pumps[i](feed)
        except Exception as exc:
            if self._error is None:
                self._error = exc
            raise
        except BaseException:
            # Cancelled, and not by aclose() or another pump's failure: the
            # feed is cut short, which the consumer must not take for its end.
            if self._error is None and not self._closed:
                self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
            raise
        finally:
            feed.done = True
            self._wake()

    def _producers_gone(self) -> None:
        self._gone = True
        self._wake()

    def _release(self) -> None:
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, feeds: Sequence[Feed[T]]) -> None:
        """Wait until one of ``feeds`` has an item or is done (or the merge stops).

        Batched: a pump wakes the consumer once its feed holds ``wake_batch``
        items, and a timer after ``wake_delay`` seconds; a wake that finds
        every feed still empty waits again for a single item, without a timer.
        """
        loop = asyncio.get_running_loop()
        batch = self._wake_batch
        while True:
            if self._gone or self._closed:
                self._stopped()
            for feed in feeds:
                feed.wake_at = batch
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(self._wake_delay, self._wake) if batch > 1 else None
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
                for feed in feeds:
                    feed.wake_at = feed._capacity
            if self._error is not None or self._closed:
                self._stopped()
            if any(feed.keys or feed.done for feed in feeds):
                return
            batch = 1

    async def _ordered_batches(self) -> AsyncGenerator[list[T], None]:
        live = list(self._feeds)
        while live:
            for feed in live:
                if not feed.keys and not feed.done:
                    await self._wait((feed,))
            if self._error is not None:
                self._stopped()  # a failed pump is done, but not complete
            bounds = [feed.keys[-1] for feed in live if not feed.done]
            mark = min(bounds) if bounds else None
            out_keys: list[Any] = []
            out: list[T] = []
            runs = 0
            for feed in live:
                # Most feeds hand over all their keys or none: one comparison
                # each, not a bisection (keys compared late are cold).
                keys = feed.keys
                if not keys:
                    continue  # done, and empty
                if mark is None or keys[-1] <= mark:
                    end = len(keys)
                elif keys[0] > mark:
                    continue
                else:
                    end = bisect.bisect_right(keys, mark, 1, len(keys) - 1)
                runs += 1
                out_keys += keys[:end]
                out += feed.items[:end]
                del keys[:end], feed.items[:end]
                feed._taken()
            if runs > 1:
                out = _in_key_order(out, out_keys)
            live = [feed for feed in live if feed.keys or not feed.done]
            if out:
                self._emitted += len(out)
                yield out
        self._raise_error()

    async def _unordered_batches(self) -> AsyncGenerator[list[T], None]:
        live = list(self._feeds)
        while live:
            if not any(feed.keys for feed in live):
                # Feeds may have ended empty while the consumer was away (it
                # awaited between rows): wait only for those still running.
                waiting = [feed for feed in live if not feed.done]
                if not waiting:
                    break
                await self._wait(waiting)
            if self._error is not None:
                self._stopped()
            out: list[T] = []
            for feed in live:
                if feed.keys:
                    out += feed.items
                    feed.items.clear()
                    feed.keys.clear()
                    feed._taken()
            live = [feed for feed in live if feed.keys or not feed.done]
            if out:
                self._emitted += len(out)
                yield out
        self._raise_error()


def _in_key_order(items: list[T], keys: list[Any]) -> list[T]:
    """``items`` sorted by ``keys`` (same length): a timsort in C of a few sorted runs."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return [items[k] for k in order]


_CANCELLED_FROM_OUTSIDE: Final = "the fan-out's producers were cancelled from outside"


class _Closed(Exception):
    """The fan-out was closed (from another task) while its consumer waited."""


def _first_error(exc: BaseException) -> BaseException:
    """The first real error in a (possibly nested) exception group."""
    while isinstance(exc, BaseExceptionGroup):
        errors = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        exc = errors[0] if errors else exc.exceptions[0]
    return exc
