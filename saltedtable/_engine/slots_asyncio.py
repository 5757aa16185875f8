"""The asyncio driver of a table's slots: :class:`AsyncSlots` (see :mod:`.slots`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import final

import anyio

from .slots import NO_LOCK, PAUSE_SLICE, NoLock, Pausing, Runner, SlotsCore, Ticket, watchable

__all__ = ["AsyncSlots"]


def _settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


_AsyncTicket = Ticket[asyncio.Future[None]]


@final
class AsyncSlots(SlotsCore[_AsyncTicket, NoLock]):
    """The async table's slots: as :class:`Slots`, for tasks of one event loop.

    Also an async context manager (one slot, foreground, no deadline), and it
    keeps the few ``anyio.CapacityLimiter`` names the library used
    (``total_tokens``, ``borrowed_tokens``, ``acquire``, ``acquire_nowait``,
    ``release``).

    Args:
        total: How many can be held at once (at least 1).
    """

    __slots__ = ("_holders", "_pausers")

    _name = "AsyncSlots"

    def __init__(self, total: int) -> None:
        super().__init__(total, NO_LOCK)
        # The futures of requests pausing for small reads (see pause_for_small).
        self._pausers: set[asyncio.Future[None]] = set()
        # Of requests that pause with their slot held (see hold_paused), oldest first.
        self._holders: dict[asyncio.Future[bool], None] = {}

    @property
    def total_tokens(self) -> int:
        """How many slots there are."""
        return self.total

    @property
    def borrowed_tokens(self) -> int:
        """Slots held now."""
        return self.total - self._turns.free

    def acquire_nowait(self) -> None:
        """Take a free slot nobody waits for.

        Raises:
            anyio.WouldBlock: None is free, or someone waits for one.
        """
        if self._queue or not self._turns.can_take(None, True):
            raise anyio.WouldBlock
        self._turns.grant(None)

    async def acquire(self) -> None:
        """Take a slot (foreground), waiting as long as it takes."""
        await self.take(float("inf"))

    async def take(
        self,
        deadline: float,
        urgent: Callable[[], bool] | None = None,
        owner: object = None,
        runner: Runner | None = None,
    ) -> bool:
        """Take a slot, waiting for its turn (see the module), until ``deadline`` at most.

        A free slot nobody waits for is taken at once, with no trip through
        the event loop, even past the deadline.

        Args:
            deadline: When to give up (``time.monotonic()``).
            urgent: Whether the request is foreground now (None: always, and a
                small read that may take the reserve);
                asked at each hand-over while it waits.
            owner: The read it is for (give the same to :meth:`release`).
            runner: The request, if it can end between rows: while it holds
                the slot it may be asked to give way to a small read (its
                ``give_way()``); give the same to :meth:`release`.

        Returns:
            Whether a slot was taken (False: the deadline passed).
        """
        turns = self._turns
        if not self._queue and turns.can_take(owner, urgent is None):
            turns.grant(owner)
            self._give_way.holds(runner)
            return True
        ticket: _AsyncTicket = Ticket(asyncio.get_running_loop().create_future(), urgent, owner)
        self._queue.append(ticket, watchable(urgent))
        self._dispatch()
        if ticket.granted:
            self._give_way.holds(runner)
            return True
        self._wake_pausers()  # a paused request may hold the slot it waits for
        small = urgent is None and not turns.held.get(owner)
        # Paused requests holding slots end: one for a small read (it may take the
        # reserve), else enough for the waiter to take one outside the reserve.
        self._end_holders(1 if small else turns.reserve + 1 - turns.free)
        if small:
            # A small read has to wait: the request that has held its slot
            # longest ends at its next row and hands the slot to it, unless a
            # request gave way less than GIVE_WAY_AFTER ago (then asked once
            # that long has passed, if the read still waits).
            due = self._give_way.due(time.monotonic())
            if due <= 0:
                self._ask_to_give_way(ticket)
            elif due != float("inf"):
                asyncio.get_running_loop().call_later(due, self._ask_to_give_way, ticket)
        try:
            with anyio.move_on_after(deadline - time.monotonic()):
                await ticket.wake
        except BaseException:
            self._wait_interrupted(ticket, owner)
            raise
        return self._wait_ended(ticket, runner)

    def _ask_to_give_way(self, ticket: _AsyncTicket) -> None:
        """Ask the request that has held its slot longest to give way to ``ticket``'s small read.

        Unless that read was served or left meanwhile, or no request can give way.
        """
        if not ticket.granted and ticket.state and self._give_way:
            self._give_way.ask(ticket, time.monotonic())
            self._wake_pausers()
            self._end_holders(1)

    def _wake(self, ticket: _AsyncTicket) -> None:
        _settle(ticket.wake)

    def _wake_pausers(self) -> None:
        for wake in self._pausers:
            if not wake.done():
                wake.set_result(None)

    def hold_paused(self, wake: asyncio.Future[bool]) -> None:
        """A request pauses with its slot held, until :meth:`unhold`: when a
        request has to wait for a slot (or a small read for a request to give
        way), the requests paused longest have their ``wake`` set to True (they
        should end, and give their slots back): as many as that waiter needs
        to take one (one, or more while no more than the reserve is free)."""
        self._holders[wake] = None

    def unhold(self, wake: asyncio.Future[bool]) -> None:
        """The request paused with ``wake`` (see :meth:`hold_paused`) goes on or ended."""
        self._holders.pop(wake, None)

    def _end_holders(self, count: int) -> None:
        while count > 0 and self._holders:
            wake = next(iter(self._holders))
            del self._holders[wake]
            if not wake.done():
                wake.set_result(True)
                count -= 1

    async def pause_for_small(self, feed: Pausing, abort: Callable[[], bool], most: float) -> float:
        """As :meth:`Slots.pause_for_small`, for a task of the event loop."""
        if not self.small or not feed.pausable() or abort() or self._queue.has_foreground():
            return 0.0
        start = time.monotonic()
        end = start + most
        loop = asyncio.get_running_loop()
        slept = False
        self.paused += 1
        try:
            while self.small and feed.pausable() and not abort():
                if slept and self._queue.has_foreground():
                    break
                left = end - time.monotonic()
                if left <= 0:
                    break
                slept = True
                wake: asyncio.Future[None] = loop.create_future()
                self._pausers.add(wake)
                feed.on_pause(partial(_settle, wake))
                try:
                    with anyio.move_on_after(min(left, PAUSE_SLICE)):
                        await wake
                finally:
                    feed.on_pause(None)
                    self._pausers.discard(wake)
        finally:
            self.paused -= 1
        return time.monotonic() - start if slept else 0.0

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
