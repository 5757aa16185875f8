"""The concurrency primitives of the async flavour, behind the names the sync twin shares.

The table facade, the read call, the guard driver and the batcher are written
once, async (``_table``, ``_read_call``, ``_table_guard``, ``_batcher``); their
sync twins are generated from them by ``.ci/unasync.py``. Where the two
flavours differ by more than ``async``/``await`` they call a primitive from
here, and the generated code calls the one of the same name in
:mod:`._concurrency_sync`:

- :func:`capacity` and :func:`slot`: the table's request slots
  (:class:`~._slots.AsyncSlots` here, the thread-fair :class:`~._slots.Slots`
  there);
- :func:`fan_out`: run one function over ``range(count)``, a bounded number at
  once (tasks of a task group here, threads of a pool there);
- :func:`new_merge`: the merge driver of a read (:class:`~._merge.Merge`
  here, :class:`~._merge.ThreadMerge` there: both hand-written), and
  :data:`ROW_KEY`, how the merge of the bucket sources finds a row's key;
- :class:`Lock`: one operation at a time, waited for until a deadline;
- :func:`run_blocking`: call a blocking function (in a worker thread here).
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, final

import anyio
import anyio.to_thread

from ._merge import Merge, Source
from ._slots import AsyncSlots
from ._strategy import ReadBudget

__all__ = ["ROW_KEY", "Lock", "capacity", "fan_out", "new_merge", "run_blocking", "slot"]

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
    key: Callable[[T], Any] | None = None,
) -> Merge[T]:
    """The merge of ``sources``: at most ``slots`` requests at once, in tasks."""
    return Merge(
        sources,
        ordered=ordered,
        limit=limit,
        budget=budget,
        stop_requests=stop_requests,
        slots=slots,
        key=key,
    )


async def run_blocking(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread, so that the event loop runs meanwhile."""
    return await anyio.to_thread.run_sync(func, *args)


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
