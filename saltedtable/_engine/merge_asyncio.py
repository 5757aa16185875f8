"""The merge engine's asyncio driver: :class:`Merge`, the async table's reads.

Why a supervisor task: the producers are tasks of their own, each in a cancel
scope of its own, and a supervisor task waits for them (and stops them all
when one fails), so the consumer side can be a plain async iterator that may
be abandoned (``break``), closed from another task (asyncio's async-generator
finaliser) or cancelled, without exiting a cancel scope in the wrong task.
:meth:`Merge.aclose` cancels the producers and waits until they are gone. The
producers are plain asyncio tasks, not a task group's: a task group wraps each
in a frame of its own, which the task pays for at every item it resumes for.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar, Unpack, cast, final

import anyio

from .merge import (
    NEVER,
    WAKE_BATCH,
    WAKE_DELAY,
    Feed,
    MergeClosed,
    MergeCore,
    MergeSettings,
    Sent,
    Wait,
)

__all__ = [
    "STALL_SECONDS",
    "Merge",
    "Producer",
    "ProducerBase",
    "Source",
    "close_at_once",
]

T = TypeVar("T")

#: How long a wait while items flow (no timer) may last before a thread of
#: saltedtable's wakes it; a wait that lasted this long makes the next waits
#: timed by :data:`WAKE_DELAY` (see ``Merge._wait``).
STALL_SECONDS: Final = 0.05
#: Seconds a limited read that is complete waits for its last requests to end by themselves.
DRAIN_SECONDS: Final = 1.0


class Source(Protocol[T]):
    """Runs one request of at most ``size`` items, appending them to ``feed`` as they arrive."""

    def __call__(self, size: int, feed: Feed[T], /) -> Awaitable[Sent]: ...


class Producer(Protocol[T]):
    """A source that runs its own producer loop, as the producer task itself.

    ``produce(merge, feed)`` is what :class:`Merge` runs for it: a loop of
    ``size = await merge.next_size(feed)`` (0: stop), one request of at most
    ``size`` items, ``merge.request_done(feed, pushed)``, inside
    ``async with merge.producing(feed)``. The same loop as a :class:`Source`'s,
    one frame fewer between the task and the source's stream (each item
    that arrives resumes every frame of the task).
    """

    def produce(self, merge: Merge[T], feed: Feed[T], /) -> Awaitable[None]: ...


@final
class Merge(MergeCore[T]):
    """Run sources concurrently on asyncio and yield batches, merged by key or unordered.

    Args:
        sources: One per source. In ordered mode each must deliver keys in
            ascending order; a key may appear in several sources (equal keys
            of different sources come out in no set order).
        ordered: Merge in ascending key order (True) or hand items over as
            they arrive (False).
        limit: Stop after this many items (None: every item).
        budget: Bounds the items asked of sources and not yet handed over.
        wake_batch, wake_delay: When a waiting consumer is woken (see
            :class:`MergeCore`).
        stop_requests: Ends the requests running now without cancelling the
            tasks that run them; each source's request then returns by itself.
            Awaited before the producers are cancelled (closing the merge
            early, or another source failed): a task cancelled while it waits
            for a gRPC message leaks memory in grpc.aio (see
            :mod:`saltedtable._read.cancel_asyncio`).
        slots: Requests that can run at once (see :class:`MergeCore`).
        key: The key of an item, or None (see :class:`MergeCore`).
        largest, measured: The items' size as hinted or measured before the
            read (see :class:`MergeCore`).
    """

    def __init__(
        self,
        sources: Sequence[Source[T] | Producer[T]],
        *,
        wake_batch: int = WAKE_BATCH,
        wake_delay: float = WAKE_DELAY,
        stop_requests: Callable[[], Awaitable[None]] | None = None,
        slots: int | None = None,
        key: Callable[[T], Any] | None = None,
        **settings: Unpack[MergeSettings],
    ) -> None:
        super().__init__(
            len(sources),
            wake_batch=wake_batch,
            wake_delay=wake_delay,
            slots=slots,
            key=key,
            **settings,
        )
        self._sources = list(sources)
        self._stop_requests = stop_requests
        self._release_idle = False  # (_release only wakes a producer's waiter)
        self._waiter: asyncio.Future[None] | None = None
        self._timed = True  # the next batch wait has a timer (see _wait)
        #: When the untimed batch wait running now began (0.0: none runs; see _StallWatch).
        self._untimed_since = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Each producer's cancel scope, entered by ``producing`` in its task.
        self._scopes: list[anyio.CancelScope] = []
        self._cancelled = False  # the producers were told to stop (see _cancel_producers)
        self._abandoned = False  # stopped by abandon(): nothing is left to wait for
        self._task: asyncio.Task[None] | None = None
        self._iter: AsyncGenerator[list[T], None] | None = None
        #: The feeds counting down to the consumer's wake (see Feed.wake_left).
        self._counting: Sequence[Feed[T]] = ()

    def __aiter__(self) -> Merge[T]:
        return self

    async def __anext__(self) -> list[T]:
        if self._iter is None:
            if self._closed:
                raise StopAsyncIteration
            self._first_round()
            self._task = asyncio.get_running_loop().create_task(self._supervise())
            self._task.add_done_callback(self._supervisor_done)
            self._iter = self._batches()
        try:
            return await self._iter.__anext__()
        except (StopAsyncIteration, MergeClosed):
            if self._stopping and not self._closed:
                await self._let_requests_end()
            await self.aclose()
            raise StopAsyncIteration from None

    async def _let_requests_end(self) -> None:
        """A limited read is complete: let the requests still running end on their own.

        They are small (sized by the rounds) and their rows are not needed, but
        ending them by cancelling costs more than reading them to their end: a
        cancelled stream is an error on the server, and cancelling a task while it
        waits for a message leaks memory in grpc.aio (grpc/grpc#43360). Bounded by
        :data:`DRAIN_SECONDS`; what is left then is cancelled.
        """
        task = self._task
        if task is None or task.done():
            return
        for feed in self._feeds:
            self._release(feed)  # a producer waiting for a grant now sees the read stop
        with anyio.move_on_after(DRAIN_SECONDS):
            await asyncio.wait([task])

    async def __aenter__(self) -> Merge[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel every producer (and so every request running) and wait until they are gone.

        Safe to call more than once and from any task; never raises a producer error.
        """
        if self._abandoned:
            return  # (abandon() stopped it: nothing runs a request, nothing to wait for)
        self._closed = self._stopping = True
        _STALL_WATCH.discard(self)
        self._end_ahead()
        if self._live:
            # (Only while a producer runs: cancelling formats the task's repr,
            # which costs more than a small read's merge.)
            try:
                await self._end_requests()
            finally:  # (a plain asyncio cancel of the caller passes the shields)
                self._cancel_producers()
        with anyio.CancelScope(shield=True):
            if self._task is not None:
                await asyncio.wait([self._task])
                if not self._task.cancelled():
                    self._task.exception()  # retrieved: it is reported through _error
            if self._iter is not None and not getattr(self._iter, "ag_running", False):
                # (A consumer still inside __anext__ in another task finishes
                # the generator itself when it sees the merge closed.)
                it, self._iter = self._iter, None
                await it.aclose()
        self._wake()

    def abandon(self) -> bool:
        """Stop now, without waiting, if no request runs: the consumer has gone for good.

        For a consumer that dropped its stream between batches (a bare ``break``):
        asyncio would close the stream a few loop turns later, from a task of its
        own, while the producers wait idle. When every producer waits for its next
        grant (none is inside a request, so none holds an RPC or a slot), they and
        the supervisor are cancelled here and end at the event loop's next turn,
        and :meth:`aclose` has nothing left to do. Otherwise nothing changes:
        closing the merge ends the running requests between rows (see
        ``stop_requests``), as it must to leak nothing.

        Returns:
            Whether the merge stopped (or never started); False: it is left to
            :meth:`aclose`. Called outside the merge's event loop: False.
        """
        if self._abandoned:
            return True
        task = self._task
        if task is None:  # never iterated: no producer ever ran
            self._closed = self._stopping = self._abandoned = True
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._closed or loop is not task.get_loop():
            return False
        if not task.done() and any(f._parked is None and not f.done for f in self._feeds):
            return False  # a request runs, or is about to: aclose ends it
        it = self._iter
        if it is not None and getattr(it, "ag_running", False):
            return False
        self._closed = self._stopping = self._abandoned = True
        _STALL_WATCH.discard(self)
        self._end_ahead()
        # The producers first: each ends in its first step at the next turn (one
        # already woken finds the merge stopping: no grant), before the
        # supervisor's, which then finds every one of them done.
        self._cancel_producers()
        task.cancel()
        if it is not None:
            self._iter = None
            close_at_once(it)  # (suspended at its yield: its cleanup awaits nothing)
        return True

    # -- producers ---------------------------------------------------------------

    async def _supervise(self) -> None:
        """Run one task per source until every one has returned; stop them all if one fails.

        The producers are plain asyncio tasks, each running its source's
        coroutine itself (no wrapper frame, which a task pays for every time it
        resumes: once per item), and each enters a cancel scope of its own in
        :meth:`producing`, so that cancelling them (:meth:`aclose`, a failure)
        respects the shields they close their requests under.
        """
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(
                source.produce(self, self._feeds[i])
                if isinstance(source, ProducerBase)
                else self._produce(i)
            )
            for i, source in enumerate(self._sources)
        ]
        # One callback a task (not asyncio.wait in a loop, which would re-arm
        # every pending task at each end: N^2 at N = 4,096 buckets).
        ended = loop.create_future()
        left = len(tasks)

        def on_end(task: asyncio.Task[None]) -> None:
            nonlocal left
            left -= 1
            failed = task.cancelled() or task.exception() is not None
            if (failed or not left) and not ended.done():
                ended.set_result(None)

        for task in tasks:
            task.add_done_callback(on_end)
        try:
            if tasks:
                await ended
            failed = [t for t in tasks if t.done() and (t.cancelled() or t.exception())]
            if failed:
                # A producer failed (its error is the merge's, and `producing`
                # ended the other requests), or a cancellation that was not the
                # merge's ended it: the others stop.
                first = failed[0]
                if self._error is None and not self._closed:
                    self._error = (
                        RuntimeError(_CANCELLED_FROM_OUTSIDE)
                        if first.cancelled()
                        else first.exception()
                    )
                self._cancel_producers()
                pending = [t for t in tasks if not t.done()]
                if pending:
                    await asyncio.wait(pending)
        except asyncio.CancelledError:
            # Cancelled from outside (aclose cancels the producers, not this task;
            # abandon cancels both, the producers first).
            if self._error is None and not self._closed:
                self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
            self._cancel_producers()
            pending = [t for t in tasks if not t.done()]
            if pending:
                await asyncio.wait(pending)
            raise
        finally:
            for task in tasks:
                if task.done() and not task.cancelled():
                    exc = task.exception()  # (retrieved: reported through _error)
                    if exc is not None and self._error is None:
                        self._error = exc
            self._producers_gone()

    def _cancel_producers(self) -> None:
        """Cancel every producer's scope (and those of producers yet to enter theirs)."""
        self._cancelled = True
        for scope in self._scopes:
            scope.cancel()

    async def _produce(self, i: int) -> None:
        feed = self._feeds[i]
        source = self._sources[i]
        run = cast("Source[T]", source)
        async with self.producing(feed):
            while size := await self.next_size(feed):
                sent = await run(size, feed)
                self.request_done(feed, sent.pushed, sent.cut)
                if not sent.more:
                    return

    @contextlib.asynccontextmanager
    async def producing(self, feed: Feed[T]) -> AsyncIterator[None]:
        """Around a producer's loop (see :class:`Producer`): its failure stops the merge.

        The producer runs in a cancel scope of its own, which the merge
        cancels when it closes or another producer fails.
        """
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        if self._cancelled:
            scope.cancel()
        try:
            with scope:
                yield
            if scope.cancelled_caught and self._error is None and not self._closed:
                self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
        except Exception as exc:
            if self._error is None:
                self._error = exc
            # The supervisor cancels the other producers next: end their requests first.
            self._stopping = True
            self._end_ahead()
            await self._end_requests()
            raise
        except BaseException:
            # Cancelled, and not by aclose() or another source's failure: the
            # feed is cut short, which the consumer must not take for its end.
            if self._error is None and not self._closed:
                self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
            raise
        finally:
            self._source_done(feed)

    async def next_size(self, feed: Feed[T]) -> int:
        """Wait until the engine grants ``feed`` its next request; its size (0: stop).

        The request counts as started (its size and :attr:`Feed.cap`) once this returns.
        """
        size = self._demand(feed)
        while size is None:
            waiter = feed._waiter = feed._parked = asyncio.get_running_loop().create_future()
            await waiter
            feed._parked = None
            size = self._demand(feed)
        if size:
            self._start(feed, size)
        return size

    def request_done(self, feed: Feed[T], pushed: int, cut: bool = False) -> None:
        """The request :meth:`next_size` granted ended, ``pushed`` items appended in its
        last grant (see :meth:`Feed.renew`); ``cut``: ended early (see :class:`Sent`)."""
        if feed.asked:  # (0: the source's last renew ended its grant)
            self._end(feed, feed.asked, pushed, cut)

    async def _end_requests(self) -> None:
        if self._stop_requests is not None:
            with anyio.CancelScope(shield=True):
                await self._stop_requests()

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        # Normally _supervise has already reported its end. A supervisor
        # cancelled before it ever ran has not: tell the consumer now.
        if task.cancelled() and self._error is None and not self._closed:
            self._error = RuntimeError(_CANCELLED_FROM_OUTSIDE)
        self._producers_gone()

    def _producers_gone(self) -> None:
        self._gone = True
        self._wake()

    # -- the consumer --------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            # The other feeds the consumer waits for need not count down to it
            # too (each would wake it again, up to one wake per feed a hand-over).
            for feed in self._counting:
                feed.wake_left = 0

    def _consumer_waits(self) -> bool:
        return self._waiter is not None

    def _ahead_wait(self, feed: Feed[T]) -> asyncio.Future[bool] | None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._stopping or feed.wake_left:
            return None
        self._ahead_go(feed, True)
        ahead = feed._ahead = asyncio.get_running_loop().create_future()
        self._aheads.add(feed)
        return ahead

    # (The sync merge reports a wait for pauses only, not for widening.)
    _consumer_waiting = _consumer_waits

    def _release(self, feed: Feed[T]) -> None:
        waiter, feed._waiter = feed._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _batches(self) -> AsyncGenerator[list[T], None]:
        for step in self._steps():
            if isinstance(step, Wait):
                await self._wait(step.feeds, step.batch, step.first)
            else:
                yield step

    async def _wait(self, feeds: Sequence[Feed[T]], batch: int | None, first: bool = False) -> None:
        """Wait until one of ``feeds`` holds ``batch`` items, a request ends, or the merge stops.

        With ``batch > 1`` some waits are timed: a timer ends them after
        ``wake_delay`` seconds. A pending timer costs the event loop work on
        every iteration (about five calls a row on a scan), so only waits
        where rows come slowly have one: the first wait of a merge, a wait
        after a timed one in which no item came, and a wait after one that
        lasted :data:`STALL_SECONDS`. While rows flow, batches fill without
        a timer on the loop; :class:`_StallWatch` wakes such a wait after
        :data:`STALL_SECONDS` (checked every half of it, from a thread). So
        an item that comes slowly waits at most ``wake_delay``, except that a
        stall right after rows flowed can hold up to ``batch - 1`` items for
        about 1.5 x :data:`STALL_SECONDS` (then the waits are timed again).
        With None only a request's end (or a failure) wakes. A wait for the
        ``first`` items of feeds is always timed.
        """
        if self._error is not None or self._gone or self._closed:
            self._stopped()
        loop = asyncio.get_running_loop()
        if batch is not None:
            self._counting = feeds
            for feed in feeds:
                feed.wake_at = batch
                feed.wake_left = max(1, batch - len(feed.items)) if feed.items else batch
                if feed.slot_watch is not None:
                    feed.slot_watch()
        waiter = self._waiter = loop.create_future()
        if self._pause_wakes:
            self._wake_pausers()
        timer = None
        started = 0.0
        held = 0
        if first:
            timer = loop.call_later(self._wake_delay, self._wake)
        elif batch is not None and batch > 1:
            if self._timed:
                timer = loop.call_later(self._wake_delay, self._wake)
                held = sum(len(feed.keys) for feed in feeds)
            else:
                # No timer on the loop: _StallWatch wakes a wait that lasts
                # STALL_SECONDS (a stall right after fast rows), from its thread.
                started = self._untimed_since = loop.time()
                if self._loop is None:
                    self._loop = loop
                    _STALL_WATCH.add(self)
        try:
            await waiter
        finally:
            self._waiter = None
            self._counting = ()
            if first:
                timer.cancel()  # type: ignore[union-attr]
            elif started:
                self._untimed_since = 0.0
                self._timed = loop.time() - started >= STALL_SECONDS
            elif timer is not None:
                timer.cancel()
                # Timed out with no new item: rows come slowly, keep timing.
                self._timed = (
                    timer.when() <= loop.time() and sum(len(f.keys) for f in feeds) <= held
                )
            for feed in feeds:
                feed.wake_at = NEVER
                feed.wake_left = 0
                if feed.slot_watch is not None:
                    feed.slot_watch()
        if self._error is not None or self._closed:
            self._stopped()

    def _check_stall(self, now: float) -> None:
        """From the watch's thread: wake the consumer if its untimed wait has lasted too long."""
        since, loop = self._untimed_since, self._loop
        if since and loop is not None and now - since >= STALL_SECONDS:
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits
                loop.call_soon_threadsafe(self._wake_stalled, since)

    def _wake_stalled(self, since: float) -> None:
        if self._untimed_since == since:  # (still the same wait)
            self._wake()


@final
class _StallWatch:
    """Wakes async merges whose untimed batch wait has lasted :data:`STALL_SECONDS`.

    While rows flow, a consumer waits for full batches without a timer: a
    pending timer costs the event loop work on every turn (about five calls
    a row on a scan), which a thread that looks every half
    :data:`STALL_SECONDS` does not. So rows that came just before a stall (a
    sparse filter: the server scans without sending rows) wait at most
    about 1.5 x :data:`STALL_SECONDS`, not until the stall ends. One thread
    per process, started with the first such wait and gone once no merge is
    left to watch (merges are held weakly).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._merges: weakref.WeakSet[Merge[Any]] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def add(self, merge: Merge[Any]) -> None:
        with self._lock:
            self._merges.add(merge)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="saltedtable-stall-watch", daemon=True
                )
                self._thread.start()

    def discard(self, merge: Merge[Any]) -> None:
        with self._lock:
            self._merges.discard(merge)

    def _run(self) -> None:
        while True:
            time.sleep(STALL_SECONDS / 2)
            with self._lock:
                merges = list(self._merges)
                if not merges:
                    self._thread = None
                    return
            now = time.monotonic()
            for merge in merges:
                merge._check_stall(now)
            del merges


_STALL_WATCH: Final = _StallWatch()


def close_at_once(generator: AsyncGenerator[Any, None]) -> None:
    """Close a suspended async generator now, in this call, without the event loop.

    For a generator whose cleanup awaits nothing that suspends: asyncio closes
    an unreferenced one from a task of its own, turns later. One whose
    cleanup does suspend is a bug of the caller (RuntimeError).
    """
    closing = generator.aclose()
    try:
        closing.send(None)
    except StopIteration:
        return
    closing.close()
    raise RuntimeError(f"{generator!r} awaited while it was being closed at once")


_CANCELLED_FROM_OUTSIDE: Final = "the merge's producers were cancelled from outside"


class ProducerBase:
    """A :class:`Producer` subclasses this, so :class:`Merge` tells it from a :class:`Source`."""

    __slots__ = ()

    async def produce(self, merge: Merge[Any], feed: Feed[Any], /) -> None:
        raise NotImplementedError
