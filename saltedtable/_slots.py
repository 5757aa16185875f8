"""Slots: a table's bound on ReadRows requests in flight, shared fairly by its reads.

:class:`Slots` is the sync table's, :class:`AsyncSlots` the async table's;
both hand a slot that comes free straight to the waiter it is meant for,
before that waiter wakes up, so nobody can take it in between (a
``threading.Semaphore`` is not fair: a worker that releases its slot and asks
again at once would take it before the thread woken for it).

Two classes of waiter. A *foreground* request is one whose read's consumer
waits, or will wait, for the rows it brings: a read's first requests, a small
read, a bucket the consumer is waiting for. A *background* request is
read-ahead: its consumer still has rows to take. Each waiter carries an
``urgent`` check, asked again at every hand-over, so a background request
becomes foreground as soon as its consumer starts to wait for it. A free slot
goes to the foreground waiter that has waited longest, and to the longest
background waiter only while no foreground request waits. Within a class it
is first come, first served. So a slow consumer's read-ahead never keeps a
slot from a read whose consumer waits, and a background waiter is never
starved for ever: it is served as soon as no foreground request waits, or
once its own consumer waits for it (it is then foreground, in the order it
first asked). A request that runs keeps its slot to its end (one bounded page).

A wait ends at a deadline (the read's ``operation_timeout``) or, sync, as soon
as the waiter's read stops (:meth:`Slots.interrupt`), so a read that is left
never waits for a slot it no longer needs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, TypeVar, final

import anyio

__all__ = ["AsyncSlots", "Slots", "next_waiter"]


def _never() -> bool:
    return False


class _Waiter(Protocol):
    @property
    def urgent(self) -> Callable[[], bool] | None: ...


_W = TypeVar("_W", bound=_Waiter)


def next_waiter(queue: deque[_W]) -> _W:
    """Take the waiter a free slot goes to out of ``queue`` (oldest first, not empty).

    The oldest foreground waiter (``urgent`` None, or returning True now);
    with none, the oldest background one.
    """
    for i, waiter in enumerate(queue):
        urgent = waiter.urgent
        if urgent is None or urgent():
            del queue[i]
            return waiter
    return queue.popleft()


@final
class _Ticket:
    """A thread waiting for a slot."""

    __slots__ = ("abort", "granted", "urgent", "wake")

    def __init__(
        self,
        wake: threading.Condition,
        abort: Callable[[], bool],
        urgent: Callable[[], bool] | None,
    ) -> None:
        self.wake = wake
        self.abort = abort
        self.urgent = urgent
        self.granted = False


@final
class Slots:
    """``total`` slots shared by threads, handed out in the order they were asked for.

    Args:
        total: How many can be held at once (at least 1).
    """

    __slots__ = ("_free", "_lock", "_queue", "total")

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        #: How many slots there are.
        self.total = total
        self._free = total
        # Reentrant: a stream dropped and finalised by the garbage collector while
        # this thread holds the lock stops its read, which interrupts the waiters.
        self._lock = threading.RLock()
        self._queue: deque[_Ticket] = deque()

    @property
    def waiting(self) -> int:
        """Threads waiting for a slot now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._free

    def acquire(
        self,
        deadline: float,
        abort: Callable[[], bool] = _never,
        urgent: Callable[[], bool] | None = None,
    ) -> bool:
        """Take a slot, waiting behind those who asked first, until ``deadline`` at most.

        A free slot nobody waits for is taken at once, even past the deadline.

        Args:
            deadline: When to give up (``time.monotonic()``).
            abort: Checked whenever the wait is interrupted; True ends the wait.
            urgent: Whether the request is foreground now (None: always);
                asked at each hand-over while it waits (see the module).

        Returns:
            Whether a slot was taken (False: the deadline passed, or ``abort``).
        """
        with self._lock:
            if self._free and not self._queue:
                self._free -= 1
                return True
            ticket = _Ticket(threading.Condition(self._lock), abort, urgent)
            self._queue.append(ticket)
            try:
                while not ticket.granted:
                    left = deadline - time.monotonic()
                    if left <= 0 or abort():
                        break
                    ticket.wake.wait(left)
            except BaseException:
                if ticket.granted:  # handed over just as the wait was interrupted: pass it on
                    self._hand_over()
                else:
                    self._queue.remove(ticket)
                raise
            if not ticket.granted:
                self._queue.remove(ticket)
            return ticket.granted

    def release(self) -> None:
        """Give a slot back: to the longest waiter, or to the free ones.

        Raises:
            ValueError: More slots released than taken.
        """
        with self._lock:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._queue:
            ticket = next_waiter(self._queue)
            ticket.granted = True
            ticket.wake.notify()
        elif self._free >= self.total:
            raise ValueError("Slots released more often than acquired")
        else:
            self._free += 1

    def interrupt(self) -> None:
        """Wake the waiters whose ``abort`` now says to stop, so that they give up."""
        with self._lock:
            for ticket in self._queue:
                if ticket.abort():
                    ticket.wake.notify()


@final
class _AsyncTicket:
    """A task waiting for a slot."""

    __slots__ = ("granted", "urgent", "wake")

    def __init__(self, wake: asyncio.Future[None], urgent: Callable[[], bool] | None) -> None:
        self.wake = wake
        self.urgent = urgent
        self.granted = False


@final
class AsyncSlots:
    """The async table's slots: as :class:`Slots`, for tasks of one event loop.

    Also an async context manager (one slot, foreground, no deadline), and it
    keeps the few ``anyio.CapacityLimiter`` names the library used
    (``total_tokens``, ``borrowed_tokens``, ``acquire``, ``acquire_nowait``,
    ``release``).

    Args:
        total: How many can be held at once (at least 1).
    """

    __slots__ = ("_free", "_queue", "total")

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        #: How many slots there are.
        self.total = total
        self._free = total
        self._queue: deque[_AsyncTicket] = deque()

    @property
    def total_tokens(self) -> int:
        """How many slots there are."""
        return self.total

    @property
    def borrowed_tokens(self) -> int:
        """Slots held now."""
        return self.total - self._free

    @property
    def waiting(self) -> int:
        """Tasks waiting for a slot now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._free

    def acquire_nowait(self) -> None:
        """Take a free slot nobody waits for.

        Raises:
            anyio.WouldBlock: None is free, or someone waits for one.
        """
        if not self._free or self._queue:
            raise anyio.WouldBlock
        self._free -= 1

    async def acquire(self) -> None:
        """Take a slot (foreground), waiting as long as it takes."""
        await self.take(float("inf"))

    async def take(self, deadline: float, urgent: Callable[[], bool] | None = None) -> bool:
        """Take a slot, waiting in its class's turn, until ``deadline`` at most.

        A free slot nobody waits for is taken at once, with no trip through
        the event loop, even past the deadline.

        Args:
            deadline: When to give up (``time.monotonic()``).
            urgent: Whether the request is foreground now (None: always);
                asked at each hand-over while it waits.

        Returns:
            Whether a slot was taken (False: the deadline passed).
        """
        if self._free and not self._queue:
            self._free -= 1
            return True
        ticket = _AsyncTicket(asyncio.get_running_loop().create_future(), urgent)
        self._queue.append(ticket)
        try:
            with anyio.move_on_after(deadline - time.monotonic()):
                await ticket.wake
        except BaseException:
            if ticket.granted:  # handed over just as the wait was cancelled: pass it on
                self._hand_over()
            else:
                self._queue.remove(ticket)
            raise
        if not ticket.granted:
            self._queue.remove(ticket)
        return ticket.granted

    def release(self) -> None:
        """Give a slot back: to the waiter whose turn it is, or to the free ones.

        Raises:
            ValueError: More slots released than taken.
        """
        self._hand_over()

    def _hand_over(self) -> None:
        if self._queue:
            ticket = next_waiter(self._queue)
            ticket.granted = True
            if not ticket.wake.done():
                ticket.wake.set_result(None)
        elif self._free >= self.total:
            raise ValueError("AsyncSlots released more often than acquired")
        else:
            self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
