"""The merge engine: read sorted sources at once; hand over batches in key order or as they come.

One engine, two drivers: :class:`MergeCore` makes every decision,
:class:`~.merge_asyncio.Merge` drives it on asyncio (the async table's reads) and
:class:`~.merge_threads.ThreadMerge` with worker threads (the sync table's reads).

Generic: nothing here knows about Bigtable. A *source* runs one request at a
time: called with a size and its :class:`Feed`, it appends at most that many
items and their sort keys to the feed as they arrive, and returns how many it
appended and whether more may follow. The engine decides when each source runs
its next request and how large it is (see :mod:`saltedtable._engine.budget`):

* a read without a limit whose sources all fit its slots may *stream*: a
  source keeps its request open past its grant and asks :meth:`Feed.renew`
  for the next one as the last one's items arrive (a page costs no round
  trip); each grant counts as a request of its size would. The request
  still has a row limit (:meth:`Feed.stream_rows`), which bounds what its
  transport may buffer while the source does not read;
* every item a request may return has room before the request starts, so a
  source never waits for the consumer in the middle of a request: room in
  items (its size) and in bytes (its :attr:`Feed.cap`; the source stops after
  the item that takes it past the cap). It holds no
  concurrency slot and keeps no stream open while the consumer is behind, so
  no limiter bound, however small or shared, can deadlock;
* the one wait within a request: in an ordered read whose sources stream, a
  source that holds :attr:`Feed.ahead_at` items while the consumer waits for
  *another* source may pause (:meth:`Feed.ahead`). The consumer waits for
  the other source, not for it; the pause ends once the consumer has taken
  it down to half, or (the source then ends its request) when another
  request waits for a slot or it lasts too long. The source the consumer
  waits for holds nothing, and a read always grants such a source an item
  (the merge needs a head from each), so a pause cannot starve it of budget
  room either;
* without a limit each source is topped up to its share of the read's
  :class:`~saltedtable._engine.budget.ReadBudget` whenever it falls to half of it;
* with a limit the consumer grants requests in rounds.

The consumer hands over, in ordered mode, everything at or below the
*watermark*: the smallest of the last keys the unfinished sources have
delivered (nothing smaller can still come), sorted in C. A consumer waiting
for sources is woken in batches (about ``wake_batch`` items in all, or
``wake_delay`` seconds), so that its work per wake, which visits every source,
is shared by many items, while what the read holds between two hand-overs
stays small (see :data:`WAKE_BATCH`).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Generic, NamedTuple, NoReturn, TypedDict, TypeVar, final

from .budget import (
    DEFAULT_ROW_BYTES,
    FIRST_PAGE_ROWS,
    READ_AHEAD_SECONDS,
    STREAM_WINDOW_ROWS,
    Ask,
    ReadBudget,
    ahead_rows,
    allowance,
    capped_ask,
    fetch_bound,
    first_request,
    first_round,
    first_window,
    page_ask,
    ramp,
    refills,
    stream_rows,
    streamable,
    unordered_shares,
    widen,
)

__all__ = [
    "NEVER",
    "UNWATCHED",
    "WAKE_BATCH",
    "WAKE_DELAY",
    "WAKE_PART_LEAST",
    "Feed",
    "MergeClosed",
    "MergeCore",
    "MergeSettings",
    "Sent",
    "Wait",
    "descending_key",
]

T = TypeVar("T")

#: Items the sources of a read may deliver, in all, while its consumer waits, before
#: it is woken (or a request's end, or :data:`WAKE_DELAY`; each source wakes it at its
#: part, see ``MergeCore._batch``): a balance of work per wake against rows held and
#: garbage collections (docs/development.md, "Garbage collection and the hand-over size").
WAKE_BATCH: Final = 64
#: The least part of :data:`WAKE_BATCH` a source wakes the consumer at (see
#: ``MergeCore._batch``; docs/development.md, "What the engine adds per row").
WAKE_PART_LEAST: Final = 4
#: Seconds after which a waiting consumer takes whatever has arrived, even
#: short of :data:`WAKE_BATCH`, while items come slowly; while they flow, a
#: wait is bounded by about 1.5 x :data:`STALL_SECONDS` instead (see
#: ``Merge._wait``): the most batching adds to an item's latency.
WAKE_DELAY: Final = 0.002
NEVER: Final = 1 << 62
#: :attr:`Feed.wake_at` while the consumer does not wait for the feed: a source
#: may skip the length check while ``wake_at >= UNWATCHED``.
UNWATCHED: Final = NEVER


class Sent(NamedTuple):
    """What one request of a source did."""

    #: Items it appended to the feed.
    pushed: int
    #: Whether the source may have more items after this request.
    more: bool
    #: The source ended the request early, between items (given way, paused too
    #: long, an item past its byte cap): it says nothing of the consumer's pace.
    cut: bool = False


@final
class Feed(Generic[T]):
    """Where a source puts what it reads, and what the engine knows of that source.

    A source appends to :attr:`items` and :attr:`keys` (same length, keys
    ascending in an ordered merge) and, whenever ``len(keys) >= wake_at``,
    calls :meth:`wake`. That check is all a source pays per item while the
    consumer does not wait for it.

    Bytes: a source adds each item's size to :attr:`got_bytes` and keeps
    :attr:`largest` up to date, and stops its request after the item that
    takes :attr:`got_bytes` past :attr:`cap` (unless that item is the
    request's last anyway); the engine reads both when the request ends.
    """

    __slots__ = (
        "_ahead",
        "_merge",
        "_parked",
        "_waiter",
        "ahead_at",
        "asked",
        "cap",
        "charged",
        "cut",
        "done",
        "ended_at",
        "got_bytes",
        "grant",
        "grants",
        "index",
        "items",
        "keys",
        "largest",
        "pending",
        "probes",
        "requests",
        "running_taken",
        "slot_watch",
        "streams",
        "taken_last",
        "wake_at",
        "wake_left",
        "window",
    )

    def __init__(self, merge: MergeCore[T], index: int) -> None:
        self.items: list[T] = []
        #: With a merge's ``key`` function, the same list as :attr:`items` (a
        #: source appends each item once; the merge takes keys from items).
        self.keys: list[Any] = self.items if merge._key is not None else []
        #: The source calls :meth:`wake` once it holds this many items.
        self.wake_at = NEVER
        #: The same, as a countdown (async :class:`Merge` only): while it is
        #: positive, the consumer waits for this feed, and a source may count it
        #: down by one per item appended and call :meth:`wake` when it reaches 0
        #: (no ``len`` per item). 0 while the consumer does not wait for it.
        self.wake_left = 0
        #: No more items will come (the source finished, failed or stopped).
        self.done = False
        #: Size of the request running now (0: none).
        self.asked = 0
        #: Items the consumer granted for the next request (limited reads).
        self.grant = 0
        #: Requests started so far.
        self.requests = 0
        #: The last key the consumer took from this feed.
        self.taken_last: Any = None
        #: Bytes the running request may deliver: it stops after the item that passes them.
        self.cap = 0
        #: Bytes the running request delivered so far (the source adds them).
        self.got_bytes = 0
        #: Bytes of the largest item the source has delivered.
        self.largest = 0
        #: Per finished request whose items are not all taken: [items left, bytes].
        self.pending: list[list[int]] = []
        #: Bytes of those requests (each charged in full until its last item is taken).
        self.charged = 0
        #: Items of the running request the consumer took while it ran.
        self.running_taken = 0
        #: The source may keep its request open past the size it was granted,
        #: asking :meth:`renew` for more (a read without a limit whose
        #: sources all fit the slots: see :meth:`renew`).
        self.streams = merge._streams
        #: Items the feed may hold and have asked for (reads without a limit);
        #: see :func:`~.budget.widen`.
        self.window = FIRST_PAGE_ROWS
        #: When its last request ended (``time.monotonic()``; 0: none has, or it
        #: was cut short).
        self.ended_at = 0.0
        #: Its last request was ended early by its source (a pause that lasted or gave
        #: way, see :meth:`ahead`), not at its size or row limit.
        self.cut = False
        #: Grants so far: its requests, and the pages a streamed request renewed.
        self.grants = 0
        #: Of them, probes: requests of :data:`~.budget.PROBE_ROWS` made
        #: before the read had measured a row (their pace says nothing either).
        self.probes = 0
        self.index = index
        #: Set by the async table's slots while this feed's next request waits
        #: for one: called when :meth:`urgent` may have changed (the consumer
        #: starts or stops waiting for this feed), so the slots need not ask
        #: every waiter at every hand-over.
        self.slot_watch: Callable[[], None] | None = None
        #: The source asks :meth:`ahead` once it holds this many items (see
        #: there); ``1 << 62``: it never does (a read whose sources page, an
        #: unordered one, a limited one).
        self.ahead_at = NEVER
        self._merge = merge
        self._waiter: asyncio.Future[None] | None = None
        #: The wait for a grant its producer is in now (None: it is not in one),
        #: woken or not yet: what Merge.abandon needs to know.
        self._parked: asyncio.Future[None] | None = None
        self._ahead: asyncio.Future[bool] | None = None

    @property
    def bound(self) -> Any:
        """The last key delivered (None: nothing yet): every later key is larger."""
        keys = self.keys
        if not keys:
            return self.taken_last
        key = self._merge._key
        return keys[-1] if key is None else key(keys[-1])

    def wake(self) -> None:
        """Wake the consumer waiting for this feed."""
        self.wake_at = NEVER
        self.wake_left = 0
        if self.slot_watch is not None:
            self.slot_watch()
        self._merge._wake()

    def renew(self, size: int, pushed: int, most: int | None = None) -> int:
        """End the running grant of ``size`` items (``pushed`` of them appended) and
        grant the next at once if the engine would start a request now.

        For a source whose request streams (:attr:`streams`): one request can
        carry many grants, so a page of items costs no new request and no round
        trip. Each grant counts exactly as a request of its size and byte cap
        would (:attr:`cap` is the new grant's; put the ended grant's bytes in
        :attr:`got_bytes` and keep :attr:`largest` up to date first). Returns
        the new grant's size, or 0: none now (the budget is full, or the
        merge stops); the source then ends its request and reports 0 items
        for it (``Sent(0, more)``, or ``merge.request_done(feed, 0)``): the
        ended grant is already accounted for. ``most``: the rows the request
        may still return (its row limit, see :func:`~.budget.stream_rows`):
        the grant asks no more, so the request's last grant ends with it.
        """
        return self._merge._renew(self, size, pushed, most)

    def stream_rows(self) -> int:
        """The row limit of a streamed request this feed starts now (see
        :func:`~.budget.stream_rows`): its share of the budget's bytes at the
        largest row seen, so that what the transports of the read's streams may
        buffer stays within the budget."""
        merge = self._merge
        return stream_rows(merge._budget, len(merge._feeds), self.largest or merge._largest or 0)

    def ahead(self) -> asyncio.Future[bool] | None:
        """The source holds :attr:`ahead_at` items: whether to pause its stream.

        An ordered read's consumer takes a bucket's items only up to the
        slowest bucket's last key; a bucket whose stream runs ahead while the
        consumer waits for another holds rows that wait, and the process pays
        for rows kept long (see :data:`~.budget.AHEAD_ROWS`). Returns a
        future the source may wait for without reading (the stream stays
        open; what the server sends meanwhile stops at gRPC's flow-control
        window), then call :meth:`ahead_over`. The engine sets it to False
        once the consumer has taken this feed down to half of :attr:`ahead_at`
        (read on), or to True when the merge stops (end the request here).
        The source should also end its request should it wait long, or should
        another request wait for its slot. None: read on (the consumer does
        not wait now or is about to take, it waits for this very feed, or the
        merge stops).
        """
        return self._merge._ahead_wait(self)

    def ahead_over(self) -> None:
        """The source no longer waits for what :meth:`ahead` returned."""
        self._merge._ahead_go(self, True)

    @property
    def read(self) -> object:
        """The merge this feed belongs to: the read whose slots its requests count in."""
        return self._merge

    def urgent(self) -> bool:
        """Whether the consumer waits, or will wait, for this feed's next request.

        True (foreground) for a limited read's requests (granted in rounds as
        the consumer waits), for a feed that has delivered nothing yet (the
        read's first requests), and while the consumer waits for this feed;
        False (background) for read-ahead while the consumer has items to
        take. The table's slots ask it while the request waits for a slot.
        """
        return self._merge._urgent(self)

    def pausable(self) -> bool:
        """Whether this feed's running request may pause for a small read (see
        :meth:`~.slots_threads.Slots.pause_for_small`).

        Read-ahead (not :meth:`urgent`) of a consumer slower than the reads:
        the feed's window never grew (see :func:`~.budget.widen`), so the
        rows it holds last its consumer a while. A consumer that keeps up is
        not made to wait for pauses: in an ordered read it takes from every
        bucket in turn, and paused buckets would hand it their rows one wait
        at a time (measured: an ordered scan next to small reads back to back
        fell from 13,000 to 3,100 rows/s when every read-ahead paused).
        """
        return self._merge._pausable(self)

    def on_pause(self, wake: Callable[[], None] | None) -> None:
        """While this feed's request pauses for a small read, ``wake`` (None: no
        longer): called when the consumer starts to wait for any item, when
        :meth:`pausable` turns False (a paused request of the read may hold
        what another of its requests waits for: a slot, a worker thread)."""
        self._merge._on_pause(self, wake)


class Wait(NamedTuple):
    """A step of the consumer loop: wait for one of ``feeds`` (see ``MergeCore._wait_for``)."""

    #: The feeds whose progress matters (empty: any request's end).
    feeds: Sequence[Feed[Any]]
    #: Items one of them must hold to wake the consumer early (None: only a request's end).
    batch: int | None
    #: The feeds have sent nothing yet (a timer still bounds the wait).
    first: bool = False


class MergeSettings(TypedDict, total=False):
    """The settings of a read that both drivers hand to :class:`MergeCore` as they are."""

    ordered: bool
    limit: int | None
    budget: ReadBudget | None
    largest: int | None
    measured: int | None
    descending: bool


class MergeCore(Generic[T]):
    """Everything a merge decides, shared by the async driver and the thread driver.

    A driver runs one producer per source, calling :meth:`_demand` for the
    size of each request (0: stop, None: wait until :meth:`_release` says the
    feed may ask again), then :meth:`_start`, the source, :meth:`_end`, and
    :meth:`_source_done` when the source stops. The consumer iterates
    :meth:`_steps`: batches to hand over, or a :class:`Wait` for the driver
    to wait on. :meth:`_wake` and :meth:`_release` are the driver's own.

    Args:
        sources: How many sources there are.
        ordered: Merge in ascending key order (True) or hand items over as
            they arrive (False).
        limit: Stop after this many items (None: every item).
        budget: Bounds the items asked of sources and not yet handed over.
        wake_batch: Items the sources may deliver, in all, while the
            consumer waits, before it is woken (unless a request ends or
            ``wake_delay`` seconds pass first): each source it waits for
            wakes it at its part of them (``wake_batch`` over the requests
            that can run at once, at least :data:`WAKE_PART_LEAST` or
            ``wake_batch`` if smaller).
        wake_delay: See ``wake_batch``.
        slots: Requests that can run at once (None: as many as there are
            sources). With more sources than slots, the first request of each
            source in an ordered read asks less (:func:`~.budget.first_request`).
        key: The key of an item (None: sources append keys to :attr:`Feed.keys`
            themselves). With a key, :attr:`Feed.keys` is :attr:`Feed.items`:
            a source appends each item once, and the merge computes keys (in C,
            with an ``operator.attrgetter``) only where it compares them.
        largest: A hint of the items' size (bytes of the largest), for the
            requests sent before the read has measured an item; None: none (a
            read without a limit then probes each source with one item; see
            :func:`~.budget.ramp`). Ignored past a page's byte cap.
        measured: What the read already measured of its items (a missed one
            request's largest row): sizes requests as its own measure does.
        descending: Sources deliver keys in descending order (reversed scans):
            the merge hands them over largest first. Keys must be ``bytes``. The
            merge orders by :func:`descending_key` of each key, chosen once here
            (wrapped around ``key``; with ``key`` None the sources append
            ``descending_key(k)`` themselves), so every comparison, heap and
            bisect below is the ascending one and the forward merge pays nothing.
    """

    #: Whether the driver's sources stream their requests where a feed allows it
    #: (:attr:`Feed.streams`): the async bucket sources do, the sync ones page.
    _sources_stream = True

    def __init__(
        self,
        sources: int,
        *,
        ordered: bool = True,
        limit: int | None = None,
        budget: ReadBudget | None = None,
        wake_batch: int = WAKE_BATCH,
        wake_delay: float = WAKE_DELAY,
        slots: int | None = None,
        key: Callable[[T], Any] | None = None,
        largest: int | None = None,
        measured: int | None = None,
        descending: bool = False,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit}")
        if wake_batch < 1:
            raise ValueError(f"wake_batch must be >= 1, got {wake_batch}")
        if not wake_delay >= 0:
            raise ValueError(f"wake_delay must be >= 0, got {wake_delay}")
        self._ordered = ordered
        self._limit = limit
        self._budget = budget if budget is not None else ReadBudget()
        self._wake_batch = wake_batch
        self._wake_delay = wake_delay
        self._slots = slots
        if descending and key is not None:
            key = _descending(key)
        self._key = key
        #: Keys compare as :func:`descending_key` of the items' keys (see ``descending``).
        self.descending = descending
        # Sources may stream their requests (Feed.renew): a read without a
        # limit whose sources all fit the slots, so none waits for another's page.
        self._streams = limit is None and (slots is None or sources <= slots)
        #: The byte cap a stream is judged by (see :func:`streamable`): half of a
        #: bucket's share of the budget's bytes at the read's start, not the larger
        #: caps its buckets get as others finish, so rows too wide to stream
        #: at the start are paged to the end of the read.
        self.stream_cap = self._budget.bytes // (2 * max(1, sources))
        self._feeds = [Feed(self, i) for i in range(sources)]
        #: Requests pausing for a small read (see Feed.on_pause): woken when the
        #: consumer starts to wait.
        self._pause_wakes: dict[Feed[T], Callable[[], None]] = {}
        window = self._first_window = first_window(sources)
        for feed in self._feeds:
            feed.window = window
        if self._streams and ordered and self._sources_stream:
            ahead = ahead_rows(sources)
            for feed in self._feeds:
                feed.ahead_at = ahead
        self._live = sources  # sources not done
        self._asked = 0  # items asked by requests running now
        self._received = 0  # items every request so far delivered
        self._held = 0  # items delivered by finished requests and not taken
        self._peak = 0
        # Bytes: the caps of running requests plus what feeds are charged for.
        self._reserved = 0
        self._peak_bytes = 0
        # The largest item seen (None: none yet). ``measured``: what the read
        # measured before its sources started (its one request's rows). Until the
        # read measures one, ``largest`` (a hint: recent reads', see RowSizes)
        # sizes requests; for a read without a limit, a hint wider than a page's
        # cap is dropped (the read probes, one row a bucket, instead of waiting
        # for room).
        if largest is not None and (largest <= 0 or (limit is None and largest > self.stream_cap)):
            largest = None
        self._measured = bool(measured and measured > 0)
        self._largest: int | None = measured if self._measured else largest
        self._got_items = 0
        self._got_bytes = 0
        self._room_waiters: list[Feed[T]] = []
        #: Feeds whose source waits in Feed.ahead.
        self._aheads: set[Feed[T]] = set()
        # The ordered consumer's books (see _take_ordered): feeds that have
        # delivered nothing yet, a heap of (bound, index) of the others not
        # done (an entry may be stale: a bound only grows), and a heap of
        # (first key held, index) of feeds holding keys that may be taken.
        self._lagging: list[Feed[T]] = list(self._feeds)
        self._bounds: list[tuple[Any, int]] = []
        self._heads: list[tuple[Any, int]] = []
        self._in_heads = [False] * sources
        self._emitted = 0
        self._rounds = 0
        self._error: BaseException | None = None
        self._stopping = False  # no new requests: the limit is met, or the merge closes
        self._closed = False
        self._gone = False  # every producer has returned or failed

    # -- what callers see --------------------------------------------------------

    @property
    def ordered(self) -> bool:
        """Whether items are merged in key order (else handed over as they arrive)."""
        return self._ordered

    @property
    def emitted(self) -> int:
        """Items handed to the consumer so far."""
        return self._emitted

    @property
    def peak_outstanding(self) -> int:
        """The most items asked of sources and not yet handed over, at any one time."""
        return self._peak

    @property
    def rounds(self) -> int:
        """Rounds of requests a limited read took (0 for reads without a limit)."""
        return self._rounds

    @property
    def requests(self) -> int:
        """Requests the sources ran."""
        return sum(feed.requests for feed in self._feeds)

    @property
    def peak_bytes(self) -> int:
        """The most bytes asked of sources and not yet handed over, at any one time.

        Running requests count their byte cap (or what they delivered past
        it, once they end); finished requests what they delivered, until
        their last item is taken.
        """
        return self._peak_bytes

    @property
    def row_bytes(self) -> float:
        """The mean size of the items delivered (the default size until one is)."""
        if not self._got_items:
            return float(DEFAULT_ROW_BYTES)
        return self._got_bytes / self._got_items

    @property
    def largest(self) -> int | None:
        """Bytes of the largest item delivered so far, which sizes requests (None: none yet).

        Before the read has delivered an item: what it was started with, its
        own earlier measure (``measured``: a missed one request's rows) or a
        hint (``largest``: the table's recent reads with its filter, see
        :class:`~saltedtable._read.settings.RowSizes`), if any.
        """
        return self._largest

    @property
    def measured_largest(self) -> int | None:
        """Bytes of the largest item this read measured (None: none yet; a hint is not one)."""
        return self._largest if self._measured else None

    # -- what a driver provides ----------------------------------------------------

    #: :meth:`_release` has work even for a producer that does not wait (the
    #: thread driver starts requests there); the async one only wakes a waiter.
    _release_idle = True

    def _wake(self) -> None:
        """Wake the consumer if it waits."""
        raise NotImplementedError

    def _consumer_waits(self) -> bool:
        """Whether the consumer waits for items now (it has none it could take)."""
        return False

    def _ahead_wait(self, feed: Feed[T]) -> asyncio.Future[bool] | None:
        """See :meth:`Feed.ahead` (drivers whose sources stream)."""
        return None

    def _ahead_go(self, feed: Feed[T], end: bool) -> None:
        """Settle what ``feed``'s source waits for in :meth:`Feed.ahead`, if anything."""
        ahead, feed._ahead = feed._ahead, None
        if ahead is not None:
            self._aheads.discard(feed)
            if not ahead.done():
                ahead.set_result(end)

    def _end_ahead(self) -> None:
        """Every source that waits in :meth:`Feed.ahead` ends its request."""
        for feed in list(self._aheads):
            self._ahead_go(feed, True)

    def _release(self, feed: Feed[T]) -> None:
        """Let the producer of ``feed`` ask :meth:`_demand` again, if it waits."""
        raise NotImplementedError

    # -- producers -------------------------------------------------------------

    def _pausable(self, feed: Feed[T]) -> bool:
        """See :meth:`Feed.pausable`."""
        return (
            feed.window <= self._first_window
            and not self._urgent(feed)
            and not self._consumer_waiting()
        )

    def _on_pause(self, feed: Feed[T], wake: Callable[[], None] | None) -> None:
        """See :meth:`Feed.on_pause`."""
        if wake is None:
            self._pause_wakes.pop(feed, None)
        else:
            self._pause_wakes[feed] = wake

    def _wake_pausers(self) -> None:
        """The consumer starts to wait: every request pausing for a small read goes on."""
        for wake in list(self._pause_wakes.values()):
            wake()

    def _consumer_waiting(self) -> bool:
        """Whether the consumer waits for any item now (for pauses; see :meth:`_pausable`)."""
        return False

    def _urgent(self, feed: Feed[T]) -> bool:
        """See :meth:`Feed.urgent`."""
        return (
            self._limit is not None
            or feed.wake_at < NEVER
            or (feed.taken_last is None and not feed.keys)
        )

    def _demand(self, feed: Feed[T]) -> int | None:
        """Size of the feed's next request; 0 to stop; None to wait for the consumer.

        Sets the request's byte cap (:attr:`Feed.cap`) too.
        """
        if self._stopping:
            return 0
        if (
            feed.cut
            and len(feed.keys) > feed.ahead_at >> 1
            and not feed.wake_left
            and self._consumer_waits()
        ):
            # It ran ahead of the watermark while the consumer waits for other
            # feeds (its request paused and ended, see Feed.ahead): its next
            # request waits until the consumer has taken it down to half of
            # ahead_at (_taken releases it). Not after a request that ran to its
            # row limit: the next one starts at once, as the stream would have
            # gone on, and pauses there instead; else its first row, a round
            # trip away, comes after the rows the bucket holds are taken, and
            # the whole merge waits for it (at N = 64, once per share of every
            # bucket).
            return None
        ask = self._ask_limited(feed) if self._limit is not None else self._ask_page(feed)
        if ask is None:
            return None
        feed.cap = ask.cap
        return ask.rows

    def _ask_page(self, feed: Feed[T]) -> Ask | None:
        """The next request of a read without a limit (see :func:`~.budget.page_ask`)."""
        ask = self._page(feed)
        if ask is not None and feed.ended_at:
            # Once per grant (a request, or a page a stream renews): the
            # consumer took the feed down to half its window this soon after
            # its last grant ended (see widen). Not after the first (nor after
            # the probes before it): the merge's first batch takes every
            # bucket's rows up to the lowest first page at once, whatever the
            # consumer's pace.
            since, feed.ended_at = time.monotonic() - feed.ended_at, 0.0
            if feed.grants < 2 + feed.probes:
                since = READ_AHEAD_SECONDS
            most = self._budget.rows
            if feed.streams and self._sources_stream and not self._ordered:
                most = min(most, max(feed.window, STREAM_WINDOW_ROWS))
            window = widen(feed.window, since, most)
            if window != feed.window:
                feed.window = window
                ask = self._page(feed)
        if ask is None and self._ordered and self._emitted and self._consumer_waits():
            # The consumer came back for more and waits: it has no item it
            # could take, so every item this feed holds lies above the
            # watermark, waiting for other sources, not for the consumer. It
            # keeps up: widen, so that the feed's stream goes on. (Not in the
            # merge's first wait: that one says nothing of the consumer's pace.)
            window = widen(feed.window, 0.0, self._budget.rows)
            if window != feed.window:
                feed.window = window
                ask = self._page(feed)
        if ask is None:
            # Woken when the consumer takes from this feed, or room comes free.
            self._room_waiters.append(feed)
            return None
        if not feed.largest:  # none of its rows measured yet: few rows, doubling
            read_measured = self._largest is not None
            ask = ramp(ask, requests=feed.requests, measured=False, read_measured=read_measured)
            if not read_measured:
                feed.probes += 1
        if not feed.requests and self._ordered and ask.cap:
            est = self._largest or DEFAULT_ROW_BYTES
            share = allowance(self._budget, self._live, est)
            rows = min(ask.rows, first_request(share, len(self._feeds), self._slots))
            ask = Ask(rows, ask.cap)
        return ask

    def _page(self, feed: Feed[T]) -> Ask | None:
        return page_ask(
            self._budget,
            live=self._live,
            largest=self._largest,
            held_rows=len(feed.keys),
            held_bytes=feed.charged,
            rows_room=self._room(),
            bytes_room=self._budget.bytes - self._reserved,
            needs_head=self._ordered,
            alone=not self._asked and not self._held,
            window=feed.window,
        )

    def _ask_limited(self, feed: Feed[T]) -> Ask | None:
        """A granted request of a read with a limit, within the bytes the budget has left."""
        if not feed.grant:
            return None
        share = self._budget.bytes // max(1, self._live)
        cap = min(share, self._budget.bytes - self._reserved)
        ask = capped_ask(feed.grant, largest=self._largest, cap=cap)
        if ask is None:
            if feed.keys:
                # No bytes left for it: the next round asks again (as for rows).
                feed.grant = 0
                return None
            ask = Ask(1, 0)  # the merge needs a head item from every source
        feed.grant = 0
        return ask

    def _renew(self, feed: Feed[T], size: int, pushed: int, most: int | None = None) -> int:
        """See :meth:`Feed.renew`."""
        self._end(feed, size, pushed)
        if self._stopping or self._limit is not None or (most is not None and most < 1):
            return 0
        ask = self._ask_page(feed)
        if ask is None or not streamable(
            min(ask.cap, self.stream_cap), feed.largest or self._largest or 0
        ):
            return 0  # (rows too wide to stream: the next request is paged)
        if most is not None and ask.rows > most:
            ask = Ask(most, ask.cap)
        feed.cap = ask.cap
        self._start(feed, ask.rows, renewed=True)
        return ask.rows

    def _start(self, feed: Feed[T], size: int, *, renewed: bool = False) -> None:
        feed.asked = size
        feed.grants += 1
        if not renewed:
            feed.requests += 1
        self._asked += size
        self._peak = max(self._peak, self._asked + self._held)
        self._reserved += feed.cap
        self._peak_bytes = max(self._peak_bytes, self._reserved)

    def _end(self, feed: Feed[T], size: int, pushed: int, cut: bool = False) -> None:
        feed.asked = 0
        feed.cut = cut
        # A request its source ended early (``cut``, see Sent) says nothing of the
        # consumer's pace: no widening after it (see widen).
        feed.ended_at = 0.0 if cut else time.monotonic()
        self._asked -= size
        self._held += pushed
        self._received += pushed
        got, feed.got_bytes = feed.got_bytes, 0
        self._reserved -= feed.cap
        feed.cap = 0
        left, feed.running_taken = pushed - feed.running_taken, 0
        if left > 0:
            feed.pending.append([left, got])
            feed.charged += got
            self._reserved += got
            self._peak_bytes = max(self._peak_bytes, self._reserved)
        if pushed:
            self._got_items += pushed
            self._got_bytes += got
            largest = feed.largest = max(1, feed.largest)  # (> 0: the feed has measured rows)
            if not self._measured or self._largest is None or largest > self._largest:
                self._largest = largest  # (the read's first measure replaces the hint)
                self._measured = True
        if self._room_waiters:
            self._release_room()
        self._wake()

    def _release_room(self) -> None:
        waiters, self._room_waiters = self._room_waiters, []
        for feed in waiters:
            self._release(feed)

    def _source_done(self, feed: Feed[T]) -> None:
        """The source of ``feed`` stopped: finished, failed or cancelled."""
        feed.done = True
        self._live -= 1
        if self._room_waiters:
            self._release_room()
        self._wake()

    # -- the consumer -----------------------------------------------------------

    def _stopped(self) -> NoReturn:
        """The producers stopped early: one failed, or the merge was closed."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise MergeClosed
        raise RuntimeError("a merge source stopped without an error")

    def _taken(self, feed: Feed[T], count: int) -> None:
        """Account for ``count`` items the consumer took; let the producer ask again."""
        self._held -= count
        pending = feed.pending
        while pending:
            entry = pending[0]
            if entry[0] > count:
                entry[0] -= count
                count = 0
                break
            # The request's last item is taken: its bytes are free.
            count -= entry[0]
            feed.charged -= entry[1]
            self._reserved -= entry[1]
            del pending[0]
        feed.running_taken += count  # items of the running request
        if feed._ahead is not None and len(feed.keys) <= feed.ahead_at >> 1:
            self._ahead_go(feed, False)
        if self._release_idle or feed._waiter is not None:
            self._release(feed)
        if self._room_waiters:
            self._release_room()

    def _first_round(self) -> None:
        """Grant a limited read's first requests; called once, before any producer runs."""
        live = self._feeds
        if self._limit is None or not live:
            return
        self._rounds = 1
        if self._ordered:
            sizes = first_round(self._limit, len(live), self._cap_per_source())
            for feed, size in zip(live, sizes, strict=True):
                feed.grant = size
        else:
            self._grant_unordered(live)

    def _steps(self) -> Iterator[list[T] | Wait]:
        """The consumer loop: batches to hand over, and the waits in between."""
        limit = self._limit
        live = list(self._feeds)
        live_count = self._live
        while live:
            out, waits = self._take_ordered(live) if self._ordered else self._take_unordered(live)
            if out:
                if limit is not None and len(out) > limit - self._emitted:
                    del out[limit - self._emitted :]
                self._emitted += len(out)
                yield out
                if limit is not None and self._emitted >= limit:
                    self._stopping = True
                    break
            # Sources that ended and were emptied leave; the consumer may have
            # been away (awaiting between batches) while they ended.
            # (Only when a source has ended since: a visit of every feed.)
            if self._live != live_count or not self._live:
                live = [feed for feed in live if feed.keys or not feed.done]
                live_count = self._live
            if not live:
                break
            if out:
                continue
            if limit is not None:
                if self._ordered:
                    self._grant_ordered(live)
                else:
                    self._grant_unordered(live)
                yield Wait((), None)  # a request's end or a failure wakes it
            elif self._ordered and waits and waits[0].taken_last is None and not waits[0].keys:
                # Buckets that have sent nothing yet: any first row moves the merge
                # on (the first rows of a read come sooner than a batch would).
                yield Wait(waits, 1, first=True)
            else:
                yield Wait(waits, self._batch())
        if self._error is not None:
            raise self._error

    def _take_ordered(self, live: list[Feed[T]]) -> tuple[list[T], list[Feed[T]]]:
        """Everything at or below the watermark, sorted; else the feeds to wait for.

        The watermark is the lowest bound of the feeds not done. It comes from
        a heap of bounds, refreshed lazily: an entry is looked at again only
        when it reaches the top, and a feed whose held keys start at or below
        the watermark always has an entry below it (its keys came after the
        bound it was filed at), so it reaches the heap of heads before the
        rows are taken. A batch costs O(log N) per feed it touches, not a
        visit of every feed.
        """
        if self._closed:
            self._stopped()  # closed from another task: its feeds may be cut short
        kf = self._key
        feeds = self._feeds
        bounds = self._bounds
        heads = self._heads
        in_heads = self._in_heads
        if self._lagging:
            lagging: list[Feed[T]] = []
            for feed in self._lagging:
                keys = feed.keys
                if keys and not in_heads[feed.index]:
                    head = keys[0] if kf is None else kf(keys[0])
                    heapq.heappush(heads, (head, feed.index))
                    in_heads[feed.index] = True
                if feed.done:
                    continue
                if keys:
                    heapq.heappush(bounds, (keys[-1] if kf is None else kf(keys[-1]), feed.index))
                elif feed.taken_last is not None:
                    heapq.heappush(bounds, (feed.taken_last, feed.index))
                else:
                    lagging.append(feed)
            self._lagging = lagging
            if lagging:
                return [], list(lagging)
        if self._error is not None:
            self._stopped()  # a failed source is done, but not complete
        mark: Any = None
        while bounds:
            stored, i = bounds[0]
            feed = feeds[i]
            keys = feed.keys
            if keys and not in_heads[i]:
                heapq.heappush(heads, (keys[0] if kf is None else kf(keys[0]), i))
                in_heads[i] = True
            if feed.done:
                heapq.heappop(bounds)
                continue
            bound = (keys[-1] if kf is None else kf(keys[-1])) if keys else feed.taken_last
            if bound != stored:
                heapq.heapreplace(bounds, (bound, i))
                continue
            mark = stored
            break
        if mark is None:
            # Every feed is done: whatever any of them holds goes out (the
            # watermark is the largest key held; every feed holding keys is a head).
            heads.clear()
            for feed in live:
                keys = feed.keys
                in_heads[feed.index] = bool(keys)
                if keys:
                    heads.append((keys[0] if kf is None else kf(keys[0]), feed.index))
                    last = keys[-1] if kf is None else kf(keys[-1])
                    if mark is None or last > mark:
                        mark = last
            heapq.heapify(heads)
        # Take every head at or below the watermark (one heap operation a feed:
        # its next head, above the watermark, replaces it).
        out_keys: list[Any] = []
        out: list[T] = []
        taken = 0
        while heads and heads[0][0] <= mark:
            i = heads[0][1]
            feed = feeds[i]
            keys = feed.keys
            last = keys[-1] if kf is None else kf(keys[-1])
            if last <= mark:
                end = len(keys)
            else:  # (keys[0] <= mark < keys[-1])
                end = bisect.bisect_right(keys, mark, 1, key=kf)
                last = keys[end - 1] if kf is None else kf(keys[end - 1])
            feed.taken_last = last
            items = feed.items
            out += items[:end]
            if kf is None:
                out_keys += keys[:end]
                del keys[:end]
            del items[:end]
            self._taken(feed, end)
            taken += 1
            if keys:
                heapq.heapreplace(heads, (keys[0] if kf is None else kf(keys[0]), i))
            else:
                heapq.heappop(heads)
                in_heads[i] = False
        if taken > 1:
            if kf is None:
                out = _in_key_order(out, out_keys)
            else:
                out.sort(key=kf)
        if out:
            return out, []
        # The feeds at the watermark (none holds a key): the consumer waits for them.
        waits: list[Feed[T]] = []
        seen: list[tuple[Any, int]] = []
        while bounds and bounds[0][0] == mark:
            _, i = heapq.heappop(bounds)
            feed = feeds[i]
            keys = feed.keys
            if keys and not in_heads[i]:
                # (Its keys lie above a watermark that another feed's key equals:
                # they reach the heads before its entry leaves or moves up.)
                heapq.heappush(heads, (keys[0] if kf is None else kf(keys[0]), i))
                in_heads[i] = True
            if feed.done:
                continue
            bound = (keys[-1] if kf is None else kf(keys[-1])) if keys else feed.taken_last
            if bound == mark:
                waits.append(feed)
            seen.append((bound, i))
        for entry in seen:
            heapq.heappush(bounds, entry)
        return [], waits

    def _take_unordered(self, live: list[Feed[T]]) -> tuple[list[T], list[Feed[T]]]:
        if self._error is not None or self._closed:
            self._stopped()
        out: list[T] = []
        kf = self._key
        for feed in live:
            keys = feed.keys
            if keys:
                count = len(keys)
                feed.taken_last = keys[-1] if kf is None else kf(keys[-1])
                out += feed.items
                del feed.items[:]  # (no call a feed, unlike clear())
                if kf is None:
                    del keys[:]
                self._taken(feed, count)
        return out, [feed for feed in live if not feed.done]

    def _batch(self) -> int:
        """Items a source the consumer waits for holds before it wakes the consumer.

        Its part of :data:`WAKE_BATCH`: the read's other requests deliver about
        as much meanwhile, so a hand-over takes about ``wake_batch`` in all.
        At least :data:`WAKE_PART_LEAST` (or ``wake_batch`` if smaller): each
        wait costs work for every source it waits for (an unordered read waits
        for all, and one queued for a slot is asked its class), so with many
        buckets fewer, larger hand-overs cost less than the collections they start.
        """
        # (Called at every wait: comparisons, not min/max calls.)
        live, slots, batch = self._live, self._slots, self._wake_batch
        running = live if slots is None or live < slots else slots
        least = batch if batch < WAKE_PART_LEAST else WAKE_PART_LEAST
        part = batch // (running if running > 1 else 1)
        return part if part > least else least

    def _cap_per_source(self) -> int:
        return allowance(self._budget, self._live, self._largest or DEFAULT_ROW_BYTES)

    def _grant_ordered(self, live: list[Feed[T]]) -> None:
        """Start the next round of a limited ordered read once no request runs."""
        assert self._limit is not None
        if self._asked or any(feed.grant for feed in live):
            return  # a round is still running
        kf = self._key
        held = sorted(
            key for feed in live for key in (feed.keys if kf is None else map(kf, feed.items))
        )
        feeds = [feed for feed in live if not feed.done]
        # The second round keeps to what the first left of the fetch bound (if
        # the first left any); a third, rare, asks all that any bucket could
        # still contribute, which ends the read unless the budget's share caps it.
        room = None
        if self._rounds == 1:
            left = fetch_bound(self._limit, len(self._feeds)) - self._received
            room = left if left > 0 else None
        sizes = refills(
            self._limit,
            self._emitted,
            held,
            [feed.bound for feed in feeds],
            [True] * len(feeds),
            self._cap_per_source(),
            room,
        )
        if not sizes:
            # Cannot happen with sorted sources (the watermark would have let
            # the missing items out); ask everyone rather than wait forever.
            sizes = dict.fromkeys(range(len(feeds)), 1)
        self._rounds += 1
        # Within the budget, the sources furthest behind first; one item for
        # a source that holds nothing is always allowed (the merge needs it).
        room = self._room()
        for i in sorted(sizes, key=lambda i: (feeds[i].bound is not None, feeds[i].bound)):
            size = min(sizes[i], room)
            if size < 1:
                if feeds[i].keys:
                    continue
                size = 1
            room -= size
            feeds[i].grant = size
            self._release(feeds[i])

    def _room(self) -> int:
        """Items the budget still allows to be asked for."""
        est = self._largest or DEFAULT_ROW_BYTES
        return self._budget.rows_for(est) - self._asked - self._held

    def _grant_unordered(self, live: list[Feed[T]]) -> None:
        """Ask idle sources for what a limited unordered read still misses."""
        assert self._limit is not None
        missing = self._limit - self._emitted - self._held - self._asked
        missing -= sum(feed.grant for feed in live)
        idle = [feed for feed in live if not feed.done and not feed.asked and not feed.grant]
        if missing <= 0 or not idle:
            return
        cap = self._cap_per_source()
        room = self._room()
        for feed in idle:
            if missing <= 0:
                break
            size = min(cap, unordered_shares(missing, len(idle), feed.requests + 1))
            size = max(1, min(size, room)) if not feed.keys else min(size, room)
            if size < 1:
                continue
            room -= size
            feed.grant = size
            missing -= size
            self._release(feed)


#: ``bytes.translate``'s table that complements every byte (0x00 <-> 0xff, ...).
_COMPLEMENT: Final = bytes(range(255, -1, -1))


def descending_key(key: bytes) -> bytes:
    """A byte string whose ascending order is the descending order of ``key``.

    Every byte is complemented, so a larger byte sorts first; a key that is a
    prefix of another must then sort *after* it, so the original 0x00 byte
    (complemented to 0xff) is written 0xff 0x00 and the key ends with 0xff 0xff,
    which sorts after anything a longer key continues with. Equal keys stay
    equal. (Linear in the key, all in C: translate, replace, concatenate.)
    """
    return key.translate(_COMPLEMENT).replace(b"\xff", b"\xff\x00") + b"\xff\xff"


def _descending(key: Callable[[T], Any]) -> Callable[[T], bytes]:
    def ordered_key(item: T) -> bytes:
        return descending_key(key(item))

    return ordered_key


def _in_key_order(items: list[T], keys: list[Any]) -> list[T]:
    """``items`` sorted by ``keys`` (same length): a timsort in C of a few sorted runs."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return [items[k] for k in order]


class MergeClosed(Exception):
    """The merge was closed (from another task) while its consumer waited."""
