"""Slots: a table's bound on ReadRows requests in flight, shared fairly by its reads.

:class:`Slots` (:mod:`.slots_threads`) is the sync table's, :class:`AsyncSlots`
(:mod:`.slots_asyncio`) the async table's; this module is their policy. Both
hand a slot that comes free straight to the waiter it is meant for, before
that waiter wakes up, so nobody can take it in between (a
``threading.Semaphore`` is not fair: a worker that releases its slot and asks
again at once would take it before the thread woken for it).

Two classes of waiter. A *foreground* request is one whose read's consumer
waits, or will wait, for the rows it brings: a read's first requests, a small
read, a bucket the consumer is waiting for. A *background* request is
read-ahead: its consumer still has rows to take. Each waiter carries an
``urgent`` check, asked again at every hand-over (or, for a merge's feed,
which says when it may change, whenever its consumer starts or stops waiting
for it: see :class:`WaitQueue`), so a background request becomes foreground as
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
Except where streams need them: a read whose buckets stream needs a slot
per bucket for as long as it runs (a bucket left waiting holds up the
others, and every stream ends at its grant for it), so each of its buckets
*books* one (:meth:`SlotsCore.book`) while it reads, and the reserve is at
most what the read with the most booked slots leaves of the total. A
64-bucket scan on 64 slots then holds them all, and a small read has a
request give way (as on a table with few slots); scans of 16 buckets leave
the reserve whole, however many run (reads that need more slots together
than there are take turns whatever the reserve).

A wait ends at a deadline (the read's ``operation_timeout``) or, sync, as soon
as the waiter's read stops (:meth:`Slots.interrupt`), so a read that is left
never waits for a slot it no longer needs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from operator import attrgetter
from typing import Any, ClassVar, Generic, Protocol, TypeVar, final

__all__ = [
    "GIVE_WAY_AFTER",
    "NO_LOCK",
    "PAUSE_MOST",
    "PAUSE_SLICE",
    "RESERVE_SHARE",
    "GiveWay",
    "NoLock",
    "Pausing",
    "Runner",
    "SlotsCore",
    "Ticket",
    "Turns",
    "WaitQueue",
    "never",
    "next_waiter",
    "watchable",
]


def never() -> bool:
    return False


class _Waiter(Protocol):
    @property
    def urgent(self) -> Callable[[], bool] | None: ...

    @property
    def owner(self) -> object: ...


class Pausing(Protocol):
    """What a pause for small reads needs of a merge's feed (see :meth:`Slots.pause_for_small`)."""

    def pausable(self) -> bool: ...

    def on_pause(self, wake: Callable[[], None] | None) -> None: ...


class Runner(Protocol):
    """A running request that can end between rows when asked (see the module)."""

    def give_way(self) -> None: ...


class _Ticketed(_Waiter, Protocol):
    granted: bool
    #: Its place in the queue (set by :class:`WaitQueue`), its class (0: not queued),
    #: and the classes whose heaps hold an entry for it (bits).
    seq: int
    state: int
    filed: int


_W = TypeVar("_W", bound=_Waiter)
_T = TypeVar("_T", bound=_Ticketed)
_Q = TypeVar("_Q", bound=_Ticketed)
_Wake = TypeVar("_Wake")
_L = TypeVar("_L", bound=AbstractContextManager[Any])

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


def watchable(urgent: Callable[[], bool] | None) -> bool:
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
class WaitQueue(Generic[_Q]):
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
        # The best foreground [0] and background [1] waiter found so far, and its rank.
        ranks: list[tuple[int, int, int] | None] = [None, None]
        best: list[Any] = [None, None]
        for owner, group in self._groups.items():
            h = held.get(owner, 0)
            if idle_only and h:
                continue
            s = served.get(id(owner), -1)
            fg_rank = ranks[0]
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
            cls = 0
            if cand is None:
                if fg_rank is not None:
                    continue  # background waiters matter only while no foreground one waits
                cand = first_bg if idle_only else _earliest(group.bg, _BG, first_bg)
                if cand is None:
                    continue
                cls = 1
            rank = (h, s, cand.seq)
            known = ranks[cls]
            if known is None or rank < known:
                ranks[cls], best[cls] = rank, cand
        pick: _Q | None = best[0] if best[0] is not None else best[1]
        if pick is not None:
            self.remove(pick)
        return pick


@final
class Turns:
    """The books of a set of slots: free ones, held per owner, the order owners were
    last served in (bounded), and the reserve for small reads that hold none."""

    __slots__ = (
        "_cap",
        "_least",
        "_seq",
        "_total",
        "booked",
        "free",
        "held",
        "most_booked",
        "served",
    )

    def __init__(self, total: int) -> None:
        self.free = total
        self._total = total
        self._least = total // RESERVE_SHARE
        #: Slots booked by streaming reads' buckets, per read (see :meth:`SlotsCore.book`).
        self.booked: dict[object, int] = {}
        #: The most of them one read has booked.
        self.most_booked = 0
        self.held: dict[object, int] = {}
        #: id(owner) -> sequence number of its last grant, least recent first
        #: (ids: a read that has ended must not be kept alive by its rank).
        self.served: dict[int, int] = {}
        self._seq = 0
        # Owners forgotten beyond this count were served least recently, and a
        # forgotten owner ranks as never served: first anyway.
        self._cap = 4 * total + 64

    @property
    def reserve(self) -> int:
        """While no more than this many are free, only small reads holding none take one.

        ``total // RESERVE_SHARE``, or what the read with the most booked slots
        leaves of the total if less.
        """
        left = self._total - self.most_booked
        return self._least if self._least <= left else max(0, left)

    def can_take(self, owner: object, small: bool) -> bool:
        """Whether ``owner`` may take a free slot now (nobody waiting); ``small``: one request."""
        return self.free > self.reserve or (small and self.free > 0 and not self.held.get(owner))

    def pick(self, queue: WaitQueue[_T]) -> _T | None:
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
class GiveWay(Generic[_T]):
    """The requests of one set of slots that can give way to small reads (see the module)."""

    __slots__ = ("_asked", "_last", "_runners")

    def __init__(self) -> None:
        #: Requests holding a slot that can give way, longest held first.
        self._runners: dict[Runner, None] = {}
        #: Requests asked to give way, and the small read each one's slot is for.
        self._asked: dict[Runner, _T] = {}
        #: When a request was last asked (``time.monotonic()``).
        self._last = float("-inf")

    def __bool__(self) -> bool:
        """Whether any request holding a slot can give way."""
        return bool(self._runners)

    def holds(self, runner: Runner | None) -> None:
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
        self, runner: Runner | None, owner: object, turns: Turns, queue: WaitQueue[_T], name: str
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


class NoLock:
    """A lock that is no lock: the asyncio driver's slots run on one event loop,
    so what the thread driver does under its lock needs none there."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_LOCK = NoLock()


class Ticket(Generic[_Wake]):
    """A waiter for a slot: what wakes it, its class check and read, and the queue's books of it."""

    __slots__ = ("filed", "granted", "owner", "seq", "state", "urgent", "wake")

    def __init__(self, wake: _Wake, urgent: Callable[[], bool] | None, owner: object) -> None:
        self.wake = wake
        self.urgent = urgent
        self.owner = owner
        self.granted = False
        self.seq = self.state = self.filed = 0


class SlotsCore(Generic[_T, _L]):
    """What the drivers' slots share: a queue of tickets, the turns, the requests that can give way.

    :class:`~.slots_threads.Slots` and :class:`~.slots_asyncio.AsyncSlots`
    subclass it; each wakes a ticket in its own way (``_wake``) and guards
    the books with its own lock (:data:`NO_LOCK` on an event loop).

    Args:
        total: How many can be held at once (at least 1).
        lock: Held while the books change.
    """

    __slots__ = ("_give_way", "_lock", "_queue", "_turns", "paused", "small", "total")

    #: The driver's name, in errors.
    _name: ClassVar[str]

    def __init__(self, total: int, lock: _L) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        self._lock = lock
        #: How many slots there are.
        self.total = total
        #: Small reads (one request, see :meth:`small_begins`) running now.
        self.small = 0
        #: Requests pausing for them now (see :meth:`pause_for_small`).
        self.paused = 0
        self._queue: WaitQueue[_T] = WaitQueue()
        self._turns = Turns(total)
        self._give_way: GiveWay[_T] = GiveWay()

    @property
    def waiting(self) -> int:
        """Waiters (tasks or threads) waiting for a slot now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._turns.free

    def release(self, owner: object = None, runner: Runner | None = None) -> None:
        """Give ``owner``'s slot back: to the waiter whose turn it is, or to the free ones.

        A ``runner`` asked to give way hands its slot to the small read it
        was asked for, if that one still waits.

        Raises:
            ValueError: More slots released than taken.
        """
        with self._lock:
            ticket = self._give_way.released(runner, owner, self._turns, self._queue, self._name)
            if ticket is not None:
                self._wake(ticket)
                return
            self._hand_over(owner)

    def book(self, owner: object = None) -> None:
        """A bucket of ``owner``, a read whose buckets stream, starts to read: book a slot.

        Booked slots are not taken (the bucket's requests take and release
        theirs as any request does): they shrink the reserve for small reads to
        what the read with the most booked slots leaves of the total (see the
        module), so that a read that streams over as many buckets as there are
        slots can hold a slot for each. Pair with :meth:`unbook` when the
        bucket's reading ends.
        """
        with self._lock:
            turns = self._turns
            count = turns.booked[owner] = turns.booked.get(owner, 0) + 1
            if count > turns.most_booked:
                turns.most_booked = count
                self._dispatch()  # (a smaller reserve: a waiter may take a free slot now)

    def unbook(self, owner: object = None) -> None:
        """A bucket of ``owner`` that booked a slot (see :meth:`book`) has ended its reading."""
        with self._lock:
            turns = self._turns
            count = turns.booked.get(owner, 0)
            if count < 1:
                raise ValueError(f"{self._name}: unbook() without book() (owner {owner!r})")
            if count == 1:
                del turns.booked[owner]
            else:
                turns.booked[owner] = count - 1
            if count == turns.most_booked:
                turns.most_booked = max(turns.booked.values(), default=0)

    def small_begins(self) -> None:
        """A small read's request (holding a slot) starts: read-ahead pauses for it."""
        with self._lock:
            self.small += 1

    def small_ends(self) -> None:
        """A small read's request ended (pair with :meth:`small_begins`)."""
        with self._lock:
            if self.small < 1:
                raise ValueError(f"{self._name}: small_ends() without small_begins()")
            self.small -= 1
            if not self.small:
                self._wake_pausers()

    def _wake(self, ticket: _T) -> None:
        """Wake ``ticket``'s waiter (a slot was granted to it)."""
        raise NotImplementedError

    def _wake_pausers(self) -> None:
        """Wake the requests pausing for small reads (see :meth:`pause_for_small`)."""
        raise NotImplementedError

    def _dispatch(self) -> None:
        while (ticket := self._turns.pick(self._queue)) is not None:
            self._wake(ticket)

    def _hand_over(self, owner: object) -> None:
        self._turns.give_back(owner, self._name)
        self._dispatch()

    def _wait_interrupted(self, ticket: _T, owner: object) -> None:
        """``ticket``'s wait was interrupted (cancelled, or an error): a slot handed
        to it just then is passed on; else it leaves the queue."""
        if ticket.granted:
            self._hand_over(owner)
        else:
            self._queue.remove(ticket)

    def _wait_ended(self, ticket: _T, runner: Runner | None) -> bool:
        """``ticket``'s wait ended: whether it got a slot (``runner`` then holds it;
        see :meth:`GiveWay.holds`); if not, it leaves the queue."""
        if not ticket.granted:
            self._queue.remove(ticket)
        else:
            self._give_way.holds(runner)
        return ticket.granted
