"""Slots: the sync table's bound on ReadRows requests in flight, first come, first served.

The sync counterpart of the async table's ``anyio.CapacityLimiter``. A
``threading.Semaphore`` is not fair: a worker that releases its slot and asks
again at once takes it before the thread that was woken for it, so a small
read can wait behind a busy scan for as long as that scan runs. Here a slot
that comes free is handed to the thread that has waited longest, before it
wakes up; nobody can take it in between.

A wait ends at a deadline (the read's ``operation_timeout``) or as soon as the
waiter's read stops (:meth:`Slots.interrupt`), so a read that is left never
waits for a slot it no longer needs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import final

__all__ = ["Slots"]


def _never() -> bool:
    return False


@final
class _Ticket:
    """A thread waiting for a slot."""

    __slots__ = ("abort", "granted", "wake")

    def __init__(self, wake: threading.Condition, abort: Callable[[], bool]) -> None:
        self.wake = wake
        self.abort = abort
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

    def acquire(self, deadline: float, abort: Callable[[], bool] = _never) -> bool:
        """Take a slot, waiting behind those who asked first, until ``deadline`` at most.

        A free slot nobody waits for is taken at once, even past the deadline.

        Args:
            deadline: When to give up (``time.monotonic()``).
            abort: Checked whenever the wait is interrupted; True ends the wait.

        Returns:
            Whether a slot was taken (False: the deadline passed, or ``abort``).
        """
        with self._lock:
            if self._free and not self._queue:
                self._free -= 1
                return True
            ticket = _Ticket(threading.Condition(self._lock), abort)
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
            ticket = self._queue.popleft()
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
