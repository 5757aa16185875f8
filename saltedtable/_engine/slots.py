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
``urgent`` check, asked again at every hand-over (or, for a merge's feed,
which says when it may change, whenever its consumer starts or stops waiting
for it: see :class:`_Queue`), so a background request becomes foreground as
soon as its consumer starts to wait for it. A free slot
goes to a foreground waiter, and to a background one only while no
foreground request waits. Within a class it goes to the waiter whose read
(its ``owner``) holds the fewest slots, then whose read was served least
recently (a read not served lately first), then to the one that has waited
longest: so the reads take turns, a scan with many requests queued gets about
one turn per turn of every other read, and a small read waits for about one
request per read ahead of it, not for all their requests. So a slow
consumer's read-ahead never keeps a slot from a read whose consumer waits,
and a background waiter is never starved for ever: it is served as soon as
no foreground request waits, or once its own consumer waits for it (it then
ranks as foreground). A request that runs keeps its slot to its end (one
bounded page), unless a small read waits (below).

A small read should not wait for a whole page of a scan. Both tables'
bucket requests say that they hold a slot and can end between rows
(:meth:`AsyncSlots.take` and :meth:`Slots.acquire` with ``runner``). When a
small read whose read holds no slot has to queue, the request that has held
its slot longest and has not been asked yet is asked to give way (its
``give_way()``; sync, from the small read's thread), unless another request
of the table gave way less than :data:`GIVE_WAY_AFTER` seconds ago (then
once that long has passed): it ends its stream after its next row (so a scan
still moves on, and small reads one after another cannot cut every request
of a scan down to a row), and its slot goes straight to that small read
(unless that one was served meanwhile: then to whoever's turn it is). The
scan's next request queues like any other, so scans still take turns among
themselves. This matters with few slots, where no reserve (below) is kept.

Slots are not all a small read needs: on few cores the rows of many running
read-ahead requests take the processor (and, sync, the interpreter lock and
the client's channel thread) from it. So while a small read's request runs
(:meth:`Slots.small_begins` to :meth:`Slots.small_ends`), a running
background request pauses between rows (:meth:`Slots.pause_for_small`) until
none runs, or its consumer waits for it, or it has paused
:data:`PAUSE_MOST` seconds in all (then it ends after that row).

The last ``total // RESERVE_SHARE`` free slots are kept for *small* reads
(waiters with no ``urgent`` check: a read in one request, such as a
``read_row`` or a short range) whose read holds none: with many slots a small
read finds one free at once, even while scans' pages fill the rest and their
first requests queue up (a scan's first requests wait for the others).

A wait ends at a deadline (the read's ``operation_timeout``) or, sync, as soon
as the waiter's read stops (:meth:`Slots.interrupt`), so a read that is left
never waits for a slot it no longer needs.
"""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from operator import attrgetter
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, final

import anyio

__all__ = ["PAUSE_MOST", "PAUSE_SLICE", "RESERVE_SHARE", "AsyncSlots", "Slots", "next_waiter"]


def _never() -> bool:
    return False


class _Waiter(Protocol):
    @property
    def urgent(self) -> Callable[[], bool] | None: ...

    @property
    def owner(self) -> object: ...


class _Pausing(Protocol):
    """What a pause for small reads needs of a merge's feed (see :meth:`Slots.pause_for_small`)."""

    def pausable(self) -> bool: ...

    def on_pause(self, wake: Callable[[], None] | None) -> None: ...


def _settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


class _Runner(Protocol):
    """A running request that can end between rows when asked (see the module)."""

    def give_way(self) -> None: ...


class _Ticketed(_Waiter, Protocol):
    granted: bool
    #: Its place in the queue (set by :class:`_Queue`), its class (0: not queued),
    #: and the classes whose heaps hold an entry for it (bits).
    seq: int
    state: int
    filed: int


_W = TypeVar("_W", bound=_Waiter)
_T = TypeVar("_T", bound=_Ticketed)
_Q = TypeVar("_Q", bound=_Ticketed)

#: A set of ``total`` slots keeps ``total // RESERVE_SHARE`` of them for small
#: reads (one request, no ``urgent`` check) that hold none: while no more are
#: free, every other request waits. So with many slots a small read finds one
#: free at once even while scans' pages and first requests fill the rest.
RESERVE_SHARE = 8

#: Longest one wait of a background request that pauses for the table's small
#: reads (see :meth:`Slots.pause_for_small`) before it asks again whether its
#: consumer has started to wait for it.
PAUSE_SLICE = 0.02
#: Seconds a background request may pause for small reads in all: past them it
#: ends after its next row (its slot and stream go back; the bucket asks again).
PAUSE_MOST = 1.0

#: Seconds between two requests of a table asked to give way to small reads
#: (see the module): small reads one after another leave the scans that share
#: the table's slots at least this long a turn between give-ways, while a
#: small read that comes alone has a request give way at once. A small read
#: waits at most this long for a give-way, plus a row.
GIVE_WAY_AFTER = 0.02


def _watchable(urgent: Callable[[], bool] | None) -> bool:
    """Whether ``urgent`` is a bound method of an object that says when its class may change."""
    target = getattr(urgent, "__self__", None)
    return target is not None and hasattr(target, "slot_watch")


def next_waiter(
    queue: deque[_W],
    held: Mapping[object, int] | None = None,
    served: Mapping[int, int] | None = None,
    idle_only: bool = False,
) -> _W | None:
    """Take the waiter a free slot goes to out of ``queue`` (oldest first).

    A foreground waiter (``urgent`` None, or returning True now) if there is
    one, else a background one; within the class, the one whose ``owner``
    holds the fewest slots (``held``), then was served least recently
    (``served``, by ``id(owner)``: a sequence number of its last grant; none:
    before all), the
    oldest of those. (None for either: all owners alike.) With ``idle_only``,
    only small waiters (``urgent`` None) whose owner holds no slot count.
    None: nobody (that counts) waits.
    """
    best = best_bg = -1
    rank: tuple[int, int] = (0, 0)
    rank_bg: tuple[int, int] = (0, 0)
    for i, waiter in enumerate(queue):
        owner = waiter.owner
        key = (
            0 if held is None else held.get(owner, 0),
            -1 if served is None else served.get(id(owner), -1),
        )
        urgent = waiter.urgent
        if idle_only and (key[0] or urgent is not None):
            continue
        if urgent is None or urgent():
            if best < 0 or key < rank:
                best, rank = i, key
        elif best >= 0:
            continue  # background waiters matter only while no foreground one waits
        elif best_bg < 0 or key < rank_bg:
            best_bg, rank_bg = i, key
    pick = best if best >= 0 else best_bg
    if pick < 0:
        return None
    waiter = queue[pick]
    del queue[pick]
    return waiter


@final
class _Group:
    """One owner's waiters: checked ones oldest first, watched ones by class (heaps by sequence)."""

    __slots__ = ("bg", "count", "fg", "plain")

    def __init__(self) -> None:
        #: Waiters whose class is asked at each hand-over, oldest first.
        self.plain: dict[Any, None] = {}
        #: Watched waiters by class: (sequence, ticket); an entry whose ticket
        #: has left or changed class since is dropped when it comes to the top.
        self.fg: list[tuple[int, Any]] = []
        self.bg: list[tuple[int, Any]] = []
        self.count = 0


def _live(entry: tuple[int, Any], state: int) -> bool:
    return bool(entry[1].state == state)


def _top(heap: list[tuple[int, Any]], state: int) -> tuple[int, Any] | None:
    while heap:
        entry = heap[0]
        if _live(entry, state):
            return entry
        heapq.heappop(heap)[1].filed &= ~state
    return None


def _earliest(heap: list[tuple[int, Any]], state: int, ticket: Any) -> Any:
    """The earlier queued of ``ticket`` and the heap's first live waiter (None: neither)."""
    top = _top(heap, state)
    return top[1] if top is not None and (ticket is None or top[0] < ticket.seq) else ticket


#: A watched waiter's class (``state``): foreground, background; 0 = not queued.
_FG = 1
_BG = 2
_PLAIN = 3


@final
class _Queue(Generic[_Q]):
    """The waiters of a set of slots, grouped by owner, so that a hand-over costs
    O(owners + log n) instead of a scan of every waiter.

    A waiter is *watched* when its ``urgent`` check is a bound method of an
    object with a ``slot_watch`` attribute (a merge's :class:`~.merge.Feed`):
    its class is asked once when it queues, and again only when that object
    calls ``slot_watch`` (its consumer starts or stops waiting for it); the
    slots keep it in its class's heap. Every other waiter's class is asked at
    each hand-over, oldest first, stopping at the first foreground one of its
    owner. The choice is exactly :func:`next_waiter`'s.
    """

    __slots__ = ("_count", "_groups", "_seq")

    def __init__(self) -> None:
        self._groups: dict[object, _Group] = {}
        self._count = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[_Q]:
        """Every waiter (a snapshot, oldest first)."""
        tickets: list[Any] = []
        for group in self._groups.values():
            tickets += group.plain
            tickets += (e[1] for e in group.fg if _live(e, _FG))
            tickets += (e[1] for e in group.bg if _live(e, _BG))
        tickets.sort(key=attrgetter("seq"))
        return iter(tickets)

    def append(self, ticket: _Q, watch: bool) -> None:
        ticket.seq = self._seq = self._seq + 1
        group = self._groups.get(ticket.owner)
        if group is None:
            group = self._groups[ticket.owner] = _Group()
        group.count += 1
        self._count += 1
        if not watch:
            ticket.state = _PLAIN
            group.plain[ticket] = None
            return
        target = ticket.urgent.__self__  # type: ignore[union-attr]
        target.slot_watch = lambda: self.recheck(ticket)
        self._file(group, ticket)

    def _file(self, group: _Group, ticket: _Q) -> None:
        urgent = ticket.urgent
        assert urgent is not None
        state = ticket.state = _FG if urgent() else _BG
        # One entry per heap at most: an entry left from an earlier stay in
        # this class is valid again (same place: a waiter keeps its sequence).
        if not ticket.filed & state:
            ticket.filed |= state
            heapq.heappush(group.fg if state == _FG else group.bg, (ticket.seq, ticket))

    def recheck(self, ticket: _Q) -> None:
        """A watched waiter's class may have changed: ask it again."""
        state = ticket.state
        if state not in (_FG, _BG):
            return
        urgent = ticket.urgent
        assert urgent is not None
        if urgent() != (state == _FG):
            self._file(self._groups[ticket.owner], ticket)

    def remove(self, ticket: _Q) -> None:
        """Take ``ticket`` out (ValueError: it is not queued)."""
        state = ticket.state
        if not state:
            raise ValueError("not queued")
        group = self._groups[ticket.owner]
        ticket.state = 0
        if state == _PLAIN:
            del group.plain[ticket]
        else:
            target = ticket.urgent.__self__  # type: ignore[union-attr]
            target.slot_watch = None
        group.count -= 1
        self._count -= 1
        if not group.count:
            del self._groups[ticket.owner]

    def has_foreground(self) -> bool:
        """Whether a foreground waiter (see :func:`next_waiter`) waits."""
        for group in self._groups.values():
            for ticket in group.plain:
                urgent = ticket.urgent
                if urgent is None or urgent():
                    return True
            if _top(group.fg, _FG) is not None:
                return True
        return False

    def pick(
        self, held: Mapping[object, int], served: Mapping[int, int], idle_only: bool
    ) -> _Q | None:
        """Take out the waiter :func:`next_waiter` would pick from these waiters in order."""
        fg_rank: tuple[int, int, int] | None = None
        fg: Any = None
        bg_rank: tuple[int, int, int] | None = None
        bg: Any = None
        for owner, group in self._groups.items():
            h = held.get(owner, 0)
            if idle_only and h:
                continue
            s = served.get(id(owner), -1)
            if fg_rank is not None and (h, s) > fg_rank[:2]:
                continue  # cannot beat the foreground waiter found, and background is moot
            first_bg: Any = None
            cand: Any = None
            for ticket in group.plain:
                urgent = ticket.urgent
                if idle_only and urgent is not None:
                    continue
                if urgent is None or urgent():
                    cand = ticket
                    break
                if first_bg is None:
                    first_bg = ticket
            if not idle_only:
                cand = _earliest(group.fg, _FG, cand)
            if cand is not None:
                rank = (h, s, cand.seq)
                if fg_rank is None or rank < fg_rank:
                    fg_rank, fg = rank, cand
                continue
            if fg_rank is not None:
                continue
            if not idle_only:
                first_bg = _earliest(group.bg, _BG, first_bg)
            if first_bg is not None:
                rank = (h, s, first_bg.seq)
                if bg_rank is None or rank < bg_rank:
                    bg_rank, bg = rank, first_bg
        pick: _Q | None = fg if fg is not None else bg
        if pick is not None:
            self.remove(pick)
        return pick


@final
class _Turns:
    """The books of a set of slots: free ones, held per owner, the order owners were
    last served in (bounded), and the reserve for small reads that hold none."""

    __slots__ = ("_cap", "_seq", "free", "held", "reserve", "served")

    def __init__(self, total: int) -> None:
        self.free = total
        #: While no more than this many are free, only small reads holding none take one.
        self.reserve = total // RESERVE_SHARE
        self.held: dict[object, int] = {}
        #: id(owner) -> sequence number of its last grant, least recent first
        #: (ids: a read that has ended must not be kept alive by its rank).
        self.served: dict[int, int] = {}
        self._seq = 0
        # Owners forgotten beyond this count were served least recently, and a
        # forgotten owner ranks as never served: first anyway.
        self._cap = 4 * total + 64

    def can_take(self, owner: object, small: bool) -> bool:
        """Whether ``owner`` may take a free slot now (nobody waiting); ``small``: one request."""
        return self.free > self.reserve or (small and self.free > 0 and not self.held.get(owner))

    def pick(self, queue: _Queue[_T]) -> _T | None:
        """Grant a free slot to the waiter whose turn it is, if any may take it."""
        if not self.free or not queue:
            return None
        ticket = queue.pick(self.held, self.served, self.free <= self.reserve)
        if ticket is not None:
            self.grant(ticket.owner)
            ticket.granted = True
        return ticket

    def grant(self, owner: object) -> None:
        self.free -= 1
        self.held[owner] = self.held.get(owner, 0) + 1
        served = self.served
        key = id(owner)
        served.pop(key, None)
        served[key] = self._seq
        self._seq += 1
        while len(served) > self._cap:
            del served[next(iter(served))]

    def give_back(self, owner: object, name: str) -> None:
        count = self.held.get(owner, 0)
        if count < 1:
            raise ValueError(f"{name} released more often than acquired (owner {owner!r})")
        if count == 1:
            del self.held[owner]
        else:
            self.held[owner] = count - 1
        self.free += 1


@final
class _GiveWay(Generic[_T]):
    """The requests of one set of slots that can give way to small reads (see the module)."""

    __slots__ = ("_asked", "_last", "_runners")

    def __init__(self) -> None:
        #: Requests holding a slot that can give way, longest held first.
        self._runners: dict[_Runner, None] = {}
        #: Requests asked to give way, and the small read each one's slot is for.
        self._asked: dict[_Runner, _T] = {}
        #: When a request was last asked (``time.monotonic()``).
        self._last = float("-inf")

    def __bool__(self) -> bool:
        """Whether any request holding a slot can give way."""
        return bool(self._runners)

    def holds(self, runner: _Runner | None) -> None:
        """``runner`` took a slot."""
        if runner is not None:
            self._runners[runner] = None

    def due(self, now: float) -> float:
        """Seconds until a request may be asked (<= 0: now; inf: none can give way)."""
        return self._last + GIVE_WAY_AFTER - now if self._runners else float("inf")

    def ask(self, ticket: _T, now: float) -> None:
        """Ask the request that has held its slot longest to give way to ``ticket``."""
        asked = next(iter(self._runners))
        del self._runners[asked]
        self._asked[asked] = ticket
        self._last = now
        asked.give_way()

    def released(
        self, runner: _Runner | None, owner: object, turns: _Turns, queue: _Queue[_T], name: str
    ) -> _T | None:
        """``runner`` gave its slot back: the small read it was asked for now holds
        that slot (returned, to be woken), unless that read was served or left."""
        if runner is None:
            return None
        self._runners.pop(runner, None)
        ticket = self._asked.pop(runner, None)
        if ticket is None or not ticket.state or ticket.granted:
            return None
        turns.give_back(owner, name)
        queue.remove(ticket)
        turns.grant(ticket.owner)
        ticket.granted = True
        return ticket


@final
class _Ticket:
    """A thread waiting for a slot."""

    __slots__ = ("abort", "filed", "granted", "owner", "seq", "state", "urgent", "wake")

    def __init__(
        self,
        wake: threading.Condition,
        abort: Callable[[], bool],
        urgent: Callable[[], bool] | None,
        owner: object,
    ) -> None:
        self.wake = wake
        self.abort = abort
        self.urgent = urgent
        self.owner = owner
        self.granted = False
        self.seq = self.state = self.filed = 0


@final
class Slots:
    """``total`` slots shared by threads: foreground first, then fewest held, then oldest.

    Args:
        total: How many can be held at once (at least 1).
    """

    __slots__ = ("_give_way", "_lock", "_pausers", "_queue", "_turns", "paused", "small", "total")

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        #: How many slots there are.
        self.total = total
        #: Small reads (one request, see :meth:`small_begins`) running now.
        self.small = 0
        #: Requests pausing for them now (see :meth:`pause_for_small`).
        self.paused = 0
        # Reentrant: a stream dropped and finalised by the garbage collector while
        # this thread holds the lock stops its read, which interrupts the waiters.
        self._lock = threading.RLock()
        # The events of requests pausing for small reads (see pause_for_small).
        self._pausers: set[threading.Event] = set()
        self._queue: _Queue[_Ticket] = _Queue()
        self._turns = _Turns(total)
        self._give_way: _GiveWay[_Ticket] = _GiveWay()

    @property
    def waiting(self) -> int:
        """Threads waiting for a slot now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._turns.free

    def acquire(
        self,
        deadline: float,
        abort: Callable[[], bool] = _never,
        urgent: Callable[[], bool] | None = None,
        owner: object = None,
        runner: _Runner | None = None,
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
                if ticket.granted:  # handed over just as the wait was interrupted: pass it on
                    self._hand_over(owner)
                else:
                    self._queue.remove(ticket)
                raise
            if not ticket.granted:
                self._queue.remove(ticket)
            else:
                self._give_way.holds(runner)
            return ticket.granted

    def release(self, owner: object = None, runner: _Runner | None = None) -> None:
        """Give ``owner``'s slot back: to the waiter whose turn it is, or to the free ones.

        A ``runner`` asked to give way hands its slot to the small read it
        was asked for, if that one still waits.

        Raises:
            ValueError: More slots released than taken.
        """
        with self._lock:
            ticket = self._give_way.released(runner, owner, self._turns, self._queue, "Slots")
            if ticket is not None:
                ticket.wake.notify()
                return
            self._hand_over(owner)

    def _hand_over(self, owner: object) -> None:
        self._turns.give_back(owner, "Slots")
        self._dispatch()

    def _dispatch(self) -> None:
        while (ticket := self._turns.pick(self._queue)) is not None:
            ticket.wake.notify()

    def interrupt(self) -> None:
        """Wake the waiters whose ``abort`` now says to stop, so that they give up."""
        with self._lock:
            for ticket in self._queue:
                if ticket.abort():
                    ticket.wake.notify()
            self._wake_pausers()

    def small_begins(self) -> None:
        """A small read's request (holding a slot) starts: read-ahead pauses for it."""
        with self._lock:
            self.small += 1

    def small_ends(self) -> None:
        """A small read's request ended (pair with :meth:`small_begins`)."""
        with self._lock:
            if self.small < 1:
                raise ValueError("Slots: small_ends() without small_begins()")
            self.small -= 1
            if not self.small:
                self._wake_pausers()

    def _wake_pausers(self) -> None:
        for wake in self._pausers:
            wake.set()

    def _foreground_waits(self) -> bool:
        with self._lock:
            return self._queue.has_foreground()

    def pause_for_small(self, feed: _Pausing, abort: Callable[[], bool], most: float) -> float:
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


@final
class _AsyncTicket:
    """A task waiting for a slot."""

    __slots__ = ("filed", "granted", "owner", "seq", "state", "urgent", "wake")

    def __init__(
        self, wake: asyncio.Future[None], urgent: Callable[[], bool] | None, owner: object
    ) -> None:
        self.wake = wake
        self.urgent = urgent
        self.owner = owner
        self.granted = False
        self.seq = self.state = self.filed = 0


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

    __slots__ = (
        "_give_way",
        "_holders",
        "_pausers",
        "_queue",
        "_turns",
        "paused",
        "small",
        "total",
    )

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        #: How many slots there are.
        self.total = total
        #: Small reads (one request, see :meth:`small_begins`) running now.
        self.small = 0
        #: Requests pausing for them now (see :meth:`pause_for_small`).
        self.paused = 0
        # The futures of requests pausing for small reads (see pause_for_small).
        self._pausers: set[asyncio.Future[None]] = set()
        # Of requests that pause with their slot held (see hold_paused), oldest first.
        self._holders: dict[asyncio.Future[bool], None] = {}
        self._queue: _Queue[_AsyncTicket] = _Queue()
        self._turns = _Turns(total)
        self._give_way: _GiveWay[_AsyncTicket] = _GiveWay()

    @property
    def total_tokens(self) -> int:
        """How many slots there are."""
        return self.total

    @property
    def borrowed_tokens(self) -> int:
        """Slots held now."""
        return self.total - self._turns.free

    @property
    def waiting(self) -> int:
        """Tasks waiting for a slot now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._turns.free

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
        runner: _Runner | None = None,
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
        ticket = _AsyncTicket(asyncio.get_running_loop().create_future(), urgent, owner)
        self._queue.append(ticket, _watchable(urgent))
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
            if ticket.granted:  # handed over just as the wait was cancelled: pass it on
                self._hand_over(owner)
            else:
                self._queue.remove(ticket)
            raise
        if not ticket.granted:
            self._queue.remove(ticket)
        else:
            self._give_way.holds(runner)
        return ticket.granted

    def _ask_to_give_way(self, ticket: _AsyncTicket) -> None:
        """Ask the request that has held its slot longest to give way to ``ticket``'s small read.

        Unless that read was served or left meanwhile, or no request can give way.
        """
        if not ticket.granted and ticket.state and self._give_way:
            self._give_way.ask(ticket, time.monotonic())
            self._wake_pausers()
            self._end_holders(1)

    def release(self, owner: object = None, runner: _Runner | None = None) -> None:
        """Give ``owner``'s slot back: to the waiter whose turn it is, or to the free ones.

        A ``runner`` asked to give way hands its slot to the small read it
        was asked for, if that one still waits.

        Raises:
            ValueError: More slots released than taken.
        """
        ticket = self._give_way.released(runner, owner, self._turns, self._queue, "AsyncSlots")
        if ticket is not None:
            if not ticket.wake.done():
                ticket.wake.set_result(None)
            return
        self._hand_over(owner)

    def _hand_over(self, owner: object) -> None:
        self._turns.give_back(owner, "AsyncSlots")
        self._dispatch()

    def small_begins(self) -> None:
        """A small read's request (holding a slot) starts: read-ahead pauses for it."""
        self.small += 1

    def small_ends(self) -> None:
        """A small read's request ended (pair with :meth:`small_begins`)."""
        if self.small < 1:
            raise ValueError("AsyncSlots: small_ends() without small_begins()")
        self.small -= 1
        if not self.small:
            self._wake_pausers()

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

    async def pause_for_small(
        self, feed: _Pausing, abort: Callable[[], bool], most: float
    ) -> float:
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

    def _dispatch(self) -> None:
        while (ticket := self._turns.pick(self._queue)) is not None:
            if not ticket.wake.done():
                ticket.wake.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
