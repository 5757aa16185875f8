"""The thread driver of a table's slots: :class:`Slots`, the sync table's (see :mod:`.slots`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import final

from .slots import PAUSE_SLICE, Pausing, Runner, SlotsCore, Ticket, never

__all__ = ["Slots"]


@final
class _Ticket(Ticket[threading.Condition]):
    """A thread waiting for a slot, and whether its read has stopped (``abort``)."""

    __slots__ = ("abort",)

    def __init__(
        self,
        wake: threading.Condition,
        abort: Callable[[], bool],
        urgent: Callable[[], bool] | None,
        owner: object,
    ) -> None:
        super().__init__(wake, urgent, owner)
        self.abort = abort


@final
class Slots(SlotsCore[_Ticket, threading.RLock]):
    """``total`` slots shared by threads: foreground first, then fewest held, then oldest.

    Args:
        total: How many can be held at once (at least 1).
    """

    __slots__ = ("_pausers",)

    _name = "Slots"

    def __init__(self, total: int) -> None:
        # Reentrant: a stream dropped and finalised by the garbage collector while
        # this thread holds the lock stops its read, which interrupts the waiters.
        super().__init__(total, threading.RLock())
        # The events of requests pausing for small reads (see pause_for_small).
        self._pausers: set[threading.Event] = set()

    def acquire(
        self,
        deadline: float,
        abort: Callable[[], bool] = never,
        urgent: Callable[[], bool] | None = None,
        owner: object = None,
        runner: Runner | None = None,
    ) -> bool:
        """Take a slot, waiting for its turn (see the module), until ``deadline`` at most.

        A free slot nobody waits for is taken at once, even past the deadline.

        Args:
            deadline: When to give up (``time.monotonic()``).
            abort: Checked whenever the wait is interrupted; True ends the wait.
            urgent: Whether the request is foreground now (None: always, and a
                small read that may take the reserve);
                asked at each hand-over while it waits (see the module).
            owner: The read it is for (give the same to :meth:`release`).
            runner: The request, if it can end between rows: while it holds
                the slot it may be asked to give way to a small read (its
                ``give_way()``, called from the small read's thread); give the
                same to :meth:`release`.

        Returns:
            Whether a slot was taken (False: the deadline passed, or ``abort``).
        """
        with self._lock:
            turns = self._turns
            if not self._queue and turns.can_take(owner, urgent is None):
                turns.grant(owner)
                self._give_way.holds(runner)
                return True
            ticket = _Ticket(threading.Condition(self._lock), abort, urgent, owner)
            self._queue.append(ticket, False)
            self._dispatch()
            if not ticket.granted:
                self._wake_pausers()  # a paused request may hold the slot it waits for
            # A small read that has to wait: the request that has held its slot
            # longest ends after its next row and hands the slot to it, unless a
            # request gave way less than GIVE_WAY_AFTER ago (then asked once
            # that long has passed, if the read still waits).
            ask = urgent is None and not turns.held.get(owner)
            try:
                while not ticket.granted:
                    now = time.monotonic()
                    left = deadline - now
                    if left <= 0 or abort():
                        break
                    if ask:
                        due = self._give_way.due(now)
                        if due <= 0:
                            self._give_way.ask(ticket, now)
                            self._wake_pausers()
                            ask = False
                        else:
                            left = min(left, due)
                    ticket.wake.wait(left)
            except BaseException:
                self._wait_interrupted(ticket, owner)
                raise
            return self._wait_ended(ticket, runner)

    def _wake(self, ticket: _Ticket) -> None:
        ticket.wake.notify()

    def interrupt(self) -> None:
        """Wake the waiters whose ``abort`` now says to stop, so that they give up."""
        with self._lock:
            for ticket in self._queue:
                if ticket.abort():
                    ticket.wake.notify()
            self._wake_pausers()

    def _wake_pausers(self) -> None:
        for wake in self._pausers:
            wake.set()

    def _foreground_waits(self) -> bool:
        with self._lock:
            return self._queue.has_foreground()

    def pause_for_small(self, feed: Pausing, abort: Callable[[], bool], most: float) -> float:
        """Wait while a small read runs, for a request of ``feed`` that is read-ahead;
        the seconds waited (0.0: it did not wait).

        A running request whose consumer still has rows to take and reads
        slower than the requests do (``feed.pausable()``: background, and
        its window never grew) calls this between rows when :attr:`small`
        says a small read runs: on two cores and one interpreter the rows of
        many such requests take the processor, the interpreter's lock and the
        client's channel thread from the small read's request (with the sync
        client, 3-6x the plain table's latency next to 10 slow scans). The
        wait ends as soon as no small read runs, the read's consumer starts
        to wait (the feed's ``on_pause`` hook wakes it), a foreground
        request queues for a slot (this request holds one), ``abort()`` (its
        read stopped, or it was asked to give way), or after ``most``
        seconds; conditions nothing wakes it for are asked again every
        :data:`PAUSE_SLICE` seconds.
        """
        if not self.small or not feed.pausable() or abort() or self._foreground_waits():
            return 0.0
        start = time.monotonic()
        end = start + most
        wake = threading.Event()
        slept = False
        with self._lock:
            self._pausers.add(wake)
            self.paused += 1
        feed.on_pause(wake.set)
        try:
            while self.small and feed.pausable() and not abort():
                if slept and self._foreground_waits():
                    break
                left = end - time.monotonic()
                if left <= 0:
                    break
                slept = True
                wake.wait(min(left, PAUSE_SLICE))
                wake.clear()
        finally:
            feed.on_pause(None)
            with self._lock:
                self._pausers.discard(wake)
                self.paused -= 1
        return time.monotonic() - start if slept else 0.0
