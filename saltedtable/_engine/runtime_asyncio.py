"""The concurrency primitives of the async flavour, behind the names the sync twin shares.

The table facade, the read call, the guard driver and the batcher are written
once, async (the modules of ``saltedtable/_async/``); their
sync twins are generated from them by ``.ci/unasync.py``. Where the two
flavours differ by more than ``async``/``await`` they call a primitive from
here, and the generated code calls the one of the same name in
:mod:`.runtime_threads`:

- :func:`capacity` and :func:`slot`: the table's request slots
  (:class:`~.slots_asyncio.AsyncSlots` here, the thread-fair :class:`~.slots_threads.Slots`
  there);
- :func:`fan_out`: run one function over ``range(count)``, a bounded number at
  once (tasks of a task group here, threads of a pool there);
- :func:`new_merge`: the merge driver of a read (:class:`~.merge_asyncio.Merge`
  here, :class:`~.merge_threads.ThreadMerge` there: both hand-written), and
  :data:`ROW_KEY`, how the merge of the bucket sources finds a row's key;
- :func:`one_merge`: what runs a small read's one request (:class:`OneRun`
  here: one task, no merge; a merge of that one source there);
- :class:`Lock`: one operation at a time, waited for until a deadline;
- :func:`run_blocking`: call a blocking function (in a worker thread here);
- :func:`row_stream`: what a read's caller iterates (:class:`RowStream` here,
  which stops the read as soon as its caller drops it; the generator itself
  there, which Python closes at once).
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast, final

import anyio
import anyio.to_thread

from .budget import ReadBudget
from .merge import Feed
from .merge_asyncio import Merge, Source, close_at_once
from .slots_asyncio import AsyncSlots

__all__ = [
    "ROW_KEY",
    "Lock",
    "OneRun",
    "RowStream",
    "capacity",
    "fan_out",
    "new_merge",
    "one_merge",
    "row_stream",
    "run_blocking",
    "slot",
    "wait_all",
]

T = TypeVar("T")

#: How the merge of a read's bucket sources finds an item's key: the async
#: sources append rows only, and the merge reads each row's key.
ROW_KEY: Final[Callable[[Any], bytes]] = operator.attrgetter("row_key")


def capacity(limiter: AsyncSlots) -> int:
    """How many requests the table's slots let run at once."""
    return int(limiter.total_tokens)


@asynccontextmanager
async def slot(limiter: AsyncSlots) -> AsyncIterator[None]:
    """Hold one of the table's request slots (a foreground one, waiting as long as it takes)."""
    async with limiter:
        yield


async def fan_out(func: Callable[[int], Awaitable[T]], count: int, *, limit: int) -> list[T]:
    """``[await func(0), ..., await func(count - 1)]``, at most ``limit`` running at once.

    Each runs in a task of its own; ``func`` should return its errors, not
    raise them (a raised one cancels the others and comes out of the task
    group).
    """
    results: list[Any] = [None] * count
    gate = anyio.Semaphore(limit)

    async def run(i: int) -> None:
        async with gate:
            results[i] = await func(i)

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(run, i)
    return results


def new_merge(
    sources: Sequence[Source[T]],
    *,
    slots: int,
    ordered: bool,
    budget: ReadBudget,
    stop_requests: Callable[[], Awaitable[None]],
    limit: int | None = None,
    largest: int | None = None,
    measured: int | None = None,
    descending: bool = False,
    key: Callable[[T], Any] | None = None,
) -> Merge[T]:
    """The merge of ``sources``: at most ``slots`` requests at once, in tasks."""
    return Merge(
        sources,
        ordered=ordered,
        limit=limit,
        budget=budget,
        stop_requests=stop_requests,
        largest=largest,
        measured=measured,
        slots=slots,
        key=key,
        descending=descending,
    )


def one_merge(
    source: Source[T], *, budget: ReadBudget, stop_requests: Callable[[], Awaitable[None]]
) -> OneRun[T]:
    """What runs a small read's one request (``budget``: all it may return; unused here)."""
    return OneRun(source, stop_requests)


@final
class _Collected(Generic[T]):
    """What a one-request source pushes its items into (the part of a ``Feed`` it uses)."""

    __slots__ = ("items", "keys")

    #: Never woken: the items are taken once the request has ended.
    wake_at: Final = 1 << 62

    def __init__(self) -> None:
        self.items: list[T] = []
        self.keys: list[Any] = []

    def wake(self) -> None:
        """Nobody waits for items one by one."""


@final
class OneRun(Generic[T]):
    """A small read's one request, run in a task of its own; iterated like a merge.

    Its one batch is every item of the request, once the request has ended. A
    :class:`~.merge_asyncio.Merge` of that one source would cost the read about six
    more turns of the event loop (its supervisor and producer tasks, a wake
    per batch, its close), each a wait behind every other task ready then:
    on a table shared with busy scans that was a large part of a small read.

    The task, not the caller, awaits the client's stream: a caller cancelled
    while it waits leaves through :meth:`aclose`, which ends the request
    between rows (``stop_requests``), cancels the task if it is still there
    and waits for it, so no receive is cancelled under a stream that could be
    ended otherwise (grpc/grpc#43360) and no RPC outlives the read.
    """

    __slots__ = ("_over", "_scope", "_source", "_stop", "_task")

    def __init__(self, source: Source[T], stop_requests: Callable[[], Awaitable[None]]) -> None:
        self._source = source
        self._stop = stop_requests
        self._task: asyncio.Future[Any] | None = None
        self._scope: anyio.CancelScope | None = None
        self._over = False  # its one batch was asked for, or it was closed

    async def __aenter__(self) -> OneRun[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> OneRun[T]:
        return self

    async def __anext__(self) -> list[T]:
        if self._over:
            raise StopAsyncIteration
        self._over = True
        collected: _Collected[T] = _Collected()
        self._scope = anyio.CancelScope()
        task = self._task = asyncio.ensure_future(self._run(collected))
        await asyncio.wait([task])  # a cancelled caller leaves the task running: see aclose
        task.result()  # its error, if it failed
        return collected.items

    async def _run(self, collected: _Collected[T]) -> None:
        assert self._scope is not None
        with self._scope:
            # (The source pushes into the two lists and checks wake_at, as into a Feed.)
            await self._source(0, cast("Feed[T]", collected))

    async def aclose(self) -> None:
        """End the request if it still runs, and wait until its task is gone.

        Safe to call more than once; never raises the request's error.
        """
        self._over = True
        task = self._task
        if task is None:
            return
        if not task.done():
            assert self._scope is not None
            with anyio.CancelScope(shield=True):
                try:
                    await self._stop()
                finally:
                    # A reader that did not leave by itself (a stream whose call
                    # could not be found, see stop_reads) is cancelled, as a
                    # merge's producer (through its scope: a shielded cleanup in it
                    # still runs to its end). In a finally: a plain asyncio cancel
                    # of the caller passes the shield.
                    self._scope.cancel()
                await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved (raised to the caller by __anext__, if it was there)

    def abandon(self) -> bool:
        """Whether nothing of it runs now (its request ended, or never started)."""
        task = self._task
        return task is None or task.done()


@final
class RowStream(AsyncGenerator[T, None]):
    """A read's stream as its caller sees it: ``rows``, stopped at once when dropped.

    A stream left with a bare ``break`` and no longer referenced is closed by
    asyncio a few loop turns later, from a task of its own; until then the
    read's producers wait idle (one task a bucket, and a supervisor). Dropped
    between rows, this one asks ``abandon`` to stop the read now: when no
    request runs, the read's tasks end at the event loop's next turn and
    ``rows`` is closed in this call (its cleanup then awaits nothing, see
    :meth:`~.merge_asyncio.Merge.abandon`). When a request runs, asyncio closes
    ``rows`` as before, which ends the request between rows, so that no RPC
    outlives the read and nothing leaks.

    Args:
        rows: The read's stream.
        abandon: Stops the read if nothing runs; whether it did.
    """

    __slots__ = ("_abandon", "_next", "_rows")

    def __init__(self, rows: AsyncGenerator[T, None], abandon: Callable[[], bool]) -> None:
        self._rows = rows
        self._next = rows.__anext__
        self._abandon = abandon

    def __aiter__(self) -> RowStream[T]:
        return self

    if TYPE_CHECKING:

        def __anext__(self) -> Coroutine[Any, Any, T]: ...

    else:
        # The next row is the generator's own __anext__, found through C only: a
        # method here would add a Python call to every row.
        __anext__ = property(operator.attrgetter("_next"))

    def asend(self, value: None, /) -> Coroutine[Any, Any, T]:
        return self._rows.asend(value)

    def athrow(self, *args: Any) -> Coroutine[Any, Any, T]:
        return self._rows.athrow(*args)

    def aclose(self) -> Coroutine[Any, Any, None]:
        return self._rows.aclose()

    def __del__(self) -> None:
        rows = self._rows
        if getattr(rows, "ag_frame", None) is None or getattr(rows, "ag_running", True):
            return  # finished, or someone is inside it (asyncio closes it later)
        if self._abandon():
            close_at_once(rows)

    def __repr__(self) -> str:
        return f"<saltedtable row stream of {self._rows!r}>"


def row_stream(
    rows: AsyncGenerator[T, None], abandon: Callable[[], bool]
) -> AsyncGenerator[T, None]:
    """What a read's caller iterates: :class:`RowStream` (see there)."""
    return RowStream(rows, abandon)


async def run_blocking(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread, so that the event loop runs meanwhile."""
    return await anyio.to_thread.run_sync(func, *args)


async def wait_all(jobs: Collection[Any]) -> None:
    """Wait until every job (an asyncio task or future) is done; leave them running if cancelled.

    Their outcomes are not raised: whoever made the jobs collects them.
    """
    if jobs:
        await asyncio.wait(jobs)


@final
class Lock:
    """An asyncio lock, made on first use (a table object may be built outside any loop)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    def _get(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def acquire(self, deadline: float | None = None) -> bool:
        """Take the lock, waiting until ``deadline`` (``time.monotonic()``; None: for ever).

        Returns:
            Whether it was taken (False: the deadline passed first).
        """
        lock = self._get()
        if deadline is None:
            await lock.acquire()
            return True
        with anyio.move_on_after(deadline - time.monotonic()):
            await lock.acquire()
            return True
        return False

    def release(self) -> None:
        """Give the lock back."""
        self._get().release()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
