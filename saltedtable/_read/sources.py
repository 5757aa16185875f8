"""Reads: one logical read becomes one request series per bucket, merged by the engine.

The I/O seam of reads, for both tables. :class:`BucketSource` (async) and
:class:`SyncBucketSource` (sync) run one bounded ReadRows request of a
bucket's sub-query at a time for the merge engine (:mod:`._merge`: its
:class:`~._merge.Merge` and :class:`~._merge.ThreadMerge` drivers),
relabelling every row with its logical key; :class:`~._read_call.ReadCall`
(and the sync one generated from it) ties a plan, its sources, the budget and
the call's statistics together and hands the caller a list or a stream.

Every request has room reserved for all the rows it may return, so a request
runs to its end without waiting for the caller: it holds a concurrency slot
(``max_concurrent_subscans``) only while it runs, and the waiting between
requests happens outside any RPC. (One pause within a request: a bucket of an
ordered read that runs ahead of the slowest one while the merge waits for
that one; see :meth:`BucketSource._ahead`.)

Async: leaving a ``read_rows_stream`` early does not cancel its RPC, and cancelling
a task while it waits for the stream's next row leaks memory in grpc.aio (see
:mod:`._cancel`). So a read that ends early (the caller left, or another
sub-scan failed) first ends the requests still running without cancelling the
tasks that read them (:func:`stop_sources`): each reader stops at
its next row, and only then are the producers cancelled. A request that
stops for any other reason ends its own stream (:func:`~._cancel.end_stream`).
Sync: a read that ends early stops its requests from the closing thread
(:class:`~._cancel.SyncRequest`): the gRPC call each worker waits in is
cancelled and the client's retries are disarmed, so no worker waits for its
next row or its attempt deadline; a request that is between rows stops at
its next one.

Errors keep the client's types: a failing sub-scan raises the client's own
exception, with a note naming the bucket, its range and where it stopped,
and a :class:`~saltedtable.SubScan` in its ``saltedtable_subscan`` attribute.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar, final

import anyio
from google.api_core.exceptions import DeadlineExceeded
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery
from google.cloud.bigtable.data.row import Row

from .._contracts import ReadRowsStream, SyncReadRowsStream
from .._engine.budget import (
    DEFAULT_ROW_BYTES,
    OneRequestOdds,
    ReadBudget,
    ReadSettings,
    RowSizes,
    streamable,
)
from .._engine.merge import Feed, Merge, MergeCore, ProducerBase, Sent, ThreadMerge
from .._engine.slots import PAUSE_MOST, AsyncSlots, Slots
from .._scheme.layout import Layout
from .cancel_asyncio import end_stream, stop_reads
from .cancel_threads import SyncRequest, stop_sync_requests
from .plan import OneRequest, PageCursor, ReadPlan, SubQuery, one_request
from .stats import (
    BucketStats,
    CallStats,
    OneRequestOutcome,
    OneRequestResult,
    StatsHook,
    current_bucket,
    report,
)
from .timeouts import GuardTime, Timeouts, request_timeouts, slot_timeout

__all__ = [
    "BucketSource",
    "OneRequestSource",
    "OneRequestStep",
    "StrayRows",
    "SubScan",
    "SyncBucketSource",
    "SyncOneRequestSource",
    "annotate",
    "count_request",
    "count_row",
    "finish_read",
    "row_bytes",
    "stop_sources",
    "stop_sync_sources",
    "take_slot",
]

_log = logging.getLogger("saltedtable.reader")

_NEVER: Final = 1 << 62
#: The longest a bucket's stream pauses ahead of an ordered read's watermark
#: (see ``BucketSource._ahead``): a slower bucket that stalls this long (a
#: sparse filter the server scans for) has the others end their requests and
#: give their slots back.
AHEAD_MOST: Final = 2.0
#: Rows after which a bucket that could not pause (see ``BucketSource._ahead``)
#: looks again.
AHEAD_AGAIN: Final = 8

#: What the table's guard check returns: an awaitable (async) or a bool (sync).
G = TypeVar("G")


@final
@dataclass(frozen=True, slots=True)
class SubScan:
    """Which sub-scan of a salted read failed (``exc.saltedtable_subscan``).

    Attributes:
        bucket: The salt bucket (None: the legacy side of a cutoff layout).
        subquery: What the bucket was asked for (physical keys and ranges).
        after_key: The last logical key it had read, if any: the failure came after it.
    """

    bucket: int | None
    subquery: SubQuery
    after_key: bytes | None


class _BucketRequests:
    """What a bucket's source keeps between its requests, async or sync."""

    __slots__ = (
        "_bstats",
        "_cursor",
        "_cut",
        "_deadline",
        "_read_rows_stream",
        "_stray",
        "_timeouts",
        "sub",
    )

    def __init__(
        self,
        read_rows_stream: Callable[..., Any],
        sub: SubQuery,
        *,
        deadline: float,
        timeouts: Timeouts,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
    ) -> None:
        self.sub = sub
        self._read_rows_stream = read_rows_stream
        self._cursor = PageCursor(sub)
        self._cut = len(sub.prefix)
        self._deadline = deadline
        self._timeouts = timeouts
        self._bstats = bstats
        #: Says which (logical) keys to leave out (cutoff layouts).
        self._stray = stray

    def _advance(self, received: int, size: int, key: bytes | None) -> bool:
        """After a request that ran to its end: move past what it read; True if more may follow.

        A request stopped at its byte cap passes ``size == received``: it may have more.
        """
        # A full request may have more after its last row; a short one ends its window.
        self._cursor.advance(received, size, None if key is None else self.sub.prefix + key)
        return not self._cursor.done

    def _annotate(self, exc: BaseException, last: bytes | None) -> BaseException:
        if last is None and (where := self._cursor.position) is not None:
            last = where[self._cut :]
        return annotate(exc, self.sub, last)


@final
class BucketSource(_BucketRequests, ProducerBase):
    """Reads one :class:`SubQuery` for the merge, one bounded request at a time."""

    __slots__ = ("_limiter", "halt", "stopped", "stream")

    def __init__(
        self,
        read_rows_stream: ReadRowsStream,
        sub: SubQuery,
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: AsyncSlots,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
    ) -> None:
        super().__init__(
            read_rows_stream, sub, deadline=deadline, timeouts=timeouts, bstats=bstats, stray=stray
        )
        self._limiter = limiter
        #: The stream of the request running now, if any.
        self.stream: Any = None
        #: The read is ending: no new request, and the one running was ended on purpose.
        self.stopped = False
        #: The running request ends at its next row: the read is ending
        #: (:attr:`stopped`), or (after that row) it gives its slot up to a small read.
        self.halt = False

    def give_way(self) -> None:
        """End the running request after its next row, for a small read (see :mod:`._slots`)."""
        self.halt = True

    def _halted(self) -> bool:
        return self.halt

    async def _ahead(self, feed: Feed[Row], received: int, can_pause: bool) -> int:
        """``received`` rows into the request: if the bucket holds ``feed.ahead_at``
        rows, pause while the consumer waits for other buckets (see
        :meth:`~._merge.Feed.ahead`). Returns the rows received at which to
        look again (no ``len`` per row), or -1: end the request here (asked
        to, paused :data:`AHEAD_MOST` seconds, or another request waits for a
        slot). ``can_pause``: False at a paged request's last row (it ends anyway).

        The stream stays open while it pauses, and its slot held: what the
        server sends meanwhile stops at gRPC's flow-control window, kept by the
        transport as bytes, not as rows the merge holds.
        """
        held = len(feed.items)
        if held < feed.ahead_at:
            return received + feed.ahead_at - held
        limiter = self._limiter
        wake = None
        if can_pause and not self.halt and not limiter.waiting:
            wake = feed.ahead()
        if wake is None:
            # (The grant's end, or the next row, gives the slot up; a consumer that
            # does not wait now: look again soon.)
            return received + AHEAD_AGAIN
        limiter.hold_paused(wake)
        # (A timer that settles the future, not a cancel scope: nothing is cancelled.)
        timer = asyncio.get_running_loop().call_later(AHEAD_MOST, _settle_true, wake)
        try:
            end = await wake
        finally:
            timer.cancel()
            limiter.unhold(wake)
            feed.ahead_over()
        if end or self.halt or limiter.waiting:
            return -1
        return received + max(1, feed.ahead_at - len(feed.items))

    async def produce(self, merge: Merge[Row], feed: Feed[Row]) -> None:
        """The bucket's producer task: its requests in turn (a :class:`~._merge.Producer`).

        The engine grants each request (``merge.next_size``); the request pushes
        each row into ``feed``. Where the feed allows it
        (:attr:`~._merge.Feed.streams`), a request has no row limit: when its
        grant's rows have come (or its byte cap is passed) it asks the engine
        for the next grant (:meth:`~._merge.Feed.renew`) and reads on in the
        same stream, so a page costs no round trip. It ends the stream,
        between rows, when the engine grants nothing now (the consumer is
        behind: no slot is held while the consumer does not take rows) or
        another request waits for a slot (the table's other reads get their turn).
        Any request, paged or streamed, ends after its next row when the slots
        ask it to give way to a small read (:meth:`give_way`); the bucket's next
        request then queues for a slot. In an ordered read a request may pause
        while the bucket runs ahead of the slowest one (:meth:`_ahead`).

        (One flat coroutine on purpose, run as the task itself: the task pays
        for every frame between it and the stream each time a row arrives.)
        """
        can_stream = feed.streams
        # An ordered read's first request to a bucket keeps its row limit: the
        # merge waits for every bucket's first row, which comes later while
        # the other buckets' streams are unbounded (measured on the emulator).
        first_paged = merge.ordered
        stats = self._bstats
        limiter = self._limiter
        cut = self._cut
        items = feed.items
        # (None: a keyed merge, whose keys are the items' own: one append a row.)
        keys = None if feed.keys is items else feed.keys
        stray = self._stray
        token = None if stats is None else current_bucket().set(stats)
        try:
            async with merge.producing(feed):
                while size := await merge.next_size(feed):
                    streams = (
                        can_stream
                        and not (first_paged and feed.requests == 1)
                        and streamable(
                            min(feed.cap, merge.stream_cap),
                            feed.largest or merge.largest or 0,
                        )
                    )
                    query = self._cursor.next_query(None if streams else size)
                    if query is None or self.stopped:
                        merge.request_done(feed, 0)
                        return
                    # The slot is held for this one request; waiting for it counts
                    # against the read's operation_timeout like the request itself.
                    # Read-ahead (the consumer does not wait for this bucket) yields
                    # to requests whose consumers wait (see _slots).
                    if not await limiter.take(self._deadline, feed.urgent, feed.read, self):
                        raise self._annotate(
                            slot_timeout(self._timeouts, limiter.total_tokens), None
                        )
                    self.halt = self.stopped
                    started = time.monotonic()
                    cap = feed.cap
                    # Rows of the request, and of its running grant (pushed, received, bytes).
                    received = pushed = got = granted = 0
                    # A streamed request's grant ends after `size` rows; a paged one's request does.
                    end_at = size if streams else _NEVER
                    largest = feed.largest
                    # Rows received when this bucket next looks at what it holds
                    # (see _ahead): its distance to feed.ahead_at at the least.
                    ahead_at = feed.ahead_at - len(items)
                    key: bytes | None = None
                    stream = None
                    complete = early = False
                    paused = 0.0
                    try:
                        stream = self.stream = await self._read_rows_stream(
                            query, **request_timeouts(self._deadline, self._timeouts)
                        )
                        # The hot loop: the bare client loop, the relabelling and sizing, a
                        # countdown only while the consumer waits for this feed.
                        async for row in stream:
                            if self.halt:
                                if self.stopped:
                                    break  # between rows: end_stream below cancels the RPC
                                # A small read waits for this slot: this row ends the grant
                                # (below: a paged request ends, a streamed one too while
                                # anyone waits for a slot).
                                self.halt = False
                                end_at = granted + 1
                            key = row.row_key[cut:]
                            row.row_key = key
                            nbytes = len(key)
                            for cell in row.cells:
                                cell.row_key = key
                                nbytes += len(cell.value)
                            received += 1
                            granted += 1
                            if stray is None or not stray(key):
                                if stats is not None:  # (count_row, inline: no call a row)
                                    if stats.first_page_seconds is None:
                                        stats.first_page_seconds = time.monotonic() - started
                                    stats.rows += 1
                                    stats.bytes += nbytes
                                if keys is not None:
                                    keys.append(key)
                                items.append(row)
                                pushed += 1
                                got += nbytes
                                if nbytes > largest:
                                    largest = nbytes
                                if feed.wake_left:  # the consumer waits for this feed
                                    feed.wake_left -= 1
                                    if not feed.wake_left:
                                        feed.wake()
                                elif received >= ahead_at:
                                    # Maybe ahead of an ordered read's watermark: pause
                                    # (see _ahead), or end the request here.
                                    ahead_at = await self._ahead(
                                        feed, received, streams or received < size
                                    )
                                    if ahead_at < 0:
                                        early = True
                                        break
                            if limiter.small and feed.pausable():
                                # Read-ahead pauses while a small read runs (see
                                # AsyncSlots.pause_for_small).
                                waited = await limiter.pause_for_small(
                                    feed, self._halted, PAUSE_MOST - paused
                                )
                                if waited:
                                    paused += waited
                                    if self.stopped:
                                        break  # between rows: end_stream below cancels the RPC
                                    if self.halt or paused >= PAUSE_MOST:
                                        # Asked to give way while paused, or paused too
                                        # long: end here (the next request resumes after
                                        # this row).
                                        self.halt = False
                                        early = True
                                        break
                            if granted < end_at and got <= cap:
                                continue
                            if streams:
                                # The grant is used up (or a row wider than any seen took
                                # it past its byte cap): the next one, in the same stream.
                                feed.got_bytes += got
                                feed.largest = largest
                                got = 0
                                if limiter.waiting:
                                    # Another request waits for a slot: give this one up
                                    # (request_done ends the grant, with `pushed` rows).
                                    early = True
                                    break
                                size = feed.renew(size, pushed)
                                pushed = granted = 0
                                if not size:
                                    # Nothing granted now: the consumer is behind. End
                                    # the stream (no slot held while rows wait).
                                    early = True
                                    break
                                cap = feed.cap
                                end_at = size
                            elif received < size:
                                # A row larger than any seen took the request past its
                                # byte cap: end it here (between rows, nothing leaks).
                                early = True
                                break
                        else:
                            complete = not self.stopped
                    except asyncio.CancelledError:
                        if not self.stopped or _cancel_requested():
                            raise
                        # ReadCall.stop_requests cancelled the RPC under this read
                        # (grpc.aio raises CancelledError in the task waiting for its
                        # next message).
                    except Exception as exc:
                        raise self._annotate(exc, key) from None
                    finally:
                        self.stream = None
                        feed.got_bytes += got
                        feed.largest = largest
                        if stats is not None:
                            count_request(stats, time.monotonic() - started)
                        try:
                            if stream is not None:
                                with anyio.CancelScope(shield=True):
                                    if complete:
                                        await stream.aclose()
                                    else:
                                        # Stopped at its cap, failed or cancelled: make
                                        # sure the RPC ends too.
                                        await end_stream(stream)
                        finally:
                            limiter.release(feed.read, self)
                    if early:  # (ended between rows: more may follow its last)
                        more = self._advance(received, received, key)
                    elif not complete:  # stopped: the read is ending
                        more = False
                    elif streams:  # (the rest of its range came: no limit cut it)
                        more = self._advance(received, received + 1, key)
                    else:
                        more = self._advance(received, size, key)
                    merge.request_done(feed, pushed, early)
                    if not more:
                        return
        finally:
            if token is not None:
                current_bucket().reset(token)


class _OneRequest:
    """What a small read's one request keeps, async or sync (:func:`~._plan.one_request`)."""

    __slots__ = (
        "_at",
        "_deadline",
        "_one",
        "_read_rows_stream",
        "_stats",
        "_subs",
        "_timeouts",
        "cap",
        "capped",
        "got",
        "largest",
        "last",
        "received",
    )

    def __init__(
        self,
        read_rows_stream: Callable[..., Any],
        one: OneRequest,
        subs: tuple[SubQuery, ...],
        *,
        deadline: float,
        timeouts: Timeouts,
        stats: list[BucketStats | None],
        cap: int,
    ) -> None:
        self._read_rows_stream = read_rows_stream
        self._one = one
        self._subs = subs
        self._deadline = deadline
        self._timeouts = timeouts
        self._stats = stats
        #: Rows the request returned (== ``one.rows``: the read is bigger).
        self.received = 0
        self._at = 0  # the sub-query of the last row
        #: The logical key of the last row.
        self.last: bytes | None = None
        #: Bytes the request may return (the read's budget): it stops after the row past them.
        self.cap = cap
        #: It stopped there (a miss: the read goes on bucket by bucket).
        self.capped = False
        #: Bytes of the rows it returned, and of the largest.
        self.got = 0
        self.largest = 0

    def over_cap(self) -> bool:
        """True (and :attr:`capped` set) once the rows returned pass the cap before the limit."""
        if self.got > self.cap and self.received < self._one.rows:
            self.capped = True
        return self.capped

    def _relabel(self, row: Row, started: float) -> bytes:
        """Make the row's key logical, measure it, and count it for its bucket."""
        i = self._one.owner(row.row_key)
        if i is None:  # cannot happen: Bigtable returns only rows of the ranges asked
            raise RuntimeError(f"a row outside every bucket asked: {row.row_key!r}")
        self._at = i
        key = self.last = row.row_key[len(self._subs[i].prefix) :]
        row.row_key = key
        nbytes = len(key)
        for cell in row.cells:
            cell.row_key = key
            nbytes += len(cell.value)
        if (stats := self._stats[i]) is not None:
            count_row(stats, nbytes, started)
        self.received += 1
        self.got += nbytes
        if nbytes > self.largest:
            self.largest = nbytes
        return key

    def annotate(self, exc: BaseException) -> BaseException:
        """The error, with a note and a :class:`SubScan` (the bucket of the last row)."""
        sub = self._subs[self._at]
        if getattr(exc, "saltedtable_subscan", None) is None:
            key = self.last
            exc.add_note(
                f"saltedtable: sub-scan of every bucket in one request ({len(self._subs)} "
                "buckets) failed" + ("" if key is None else f", after logical key {key!r}")
            )
            exc.saltedtable_subscan = SubScan(sub.bucket, sub, key)  # type: ignore[attr-defined]
        return exc


@final
class OneRequestSource(_OneRequest):
    """Runs a small read's one request for a :class:`~._merge.Merge` of its own."""

    __slots__ = ("_limiter", "stopped", "stream")

    def __init__(
        self,
        read_rows_stream: ReadRowsStream,
        one: OneRequest,
        subs: tuple[SubQuery, ...],
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: AsyncSlots,
        stats: list[BucketStats | None],
        cap: int,
    ) -> None:
        super().__init__(
            read_rows_stream,
            one,
            subs,
            deadline=deadline,
            timeouts=timeouts,
            stats=stats,
            cap=cap,
        )
        self._limiter = limiter
        self.stream: Any = None
        self.stopped = False

    async def stop(self) -> None:
        """End the request without cancelling its reader (as :func:`stop_sources`)."""
        self.stopped = True
        if self.stream is not None:
            await stop_reads([self.stream])

    async def __call__(self, size: int, feed: Feed[Row]) -> Sent:
        """Run the request once, pushing every row into ``feed``; never asks again."""
        if self.stopped or self.received:
            return Sent(0, False)
        limiter = self._limiter
        if not await take_slot(limiter, self._deadline, None, self):
            raise slot_timeout(self._timeouts, limiter.total_tokens)
        started = time.monotonic()
        stream = None
        complete = False
        limiter.small_begins()
        try:
            stream = self.stream = await self._read_rows_stream(
                self._one.query, **request_timeouts(self._deadline, self._timeouts)
            )
            if self.stopped:
                return Sent(0, False)
            async for row in stream:
                if self.stopped:
                    break  # between rows: end_stream below cancels the RPC
                key = self._relabel(row, started)
                feed.keys.append(key)
                feed.items.append(row)
                if len(feed.keys) >= feed.wake_at:
                    feed.wake()
                if self.over_cap():
                    break  # rows too wide for the budget: end_stream below cancels the RPC
            else:
                complete = True
        except asyncio.CancelledError:
            if not self.stopped or _cancel_requested():
                raise
        finally:
            self.stream = None
            limiter.small_ends()
            limiter.release(self)
            if stream is not None:
                with anyio.CancelScope(shield=True):
                    await (stream.aclose() if complete else end_stream(stream))
        return Sent(self.received, False)


def _settle_true(wake: asyncio.Future[bool]) -> None:
    """Settle ``wake`` (a pause's, see ``BucketSource._ahead``) as "end the request"."""
    if not wake.done():
        wake.set_result(True)


async def take_slot(
    limiter: AsyncSlots,
    deadline: float,
    urgent: Callable[[], bool] | None = None,
    owner: object = None,
) -> bool:
    """Take one of the table's request slots by ``deadline``; False if none came free.

    A free slot is taken at once: no timer, no trip through the event loop.
    ``urgent`` says whether the request is foreground (None: always), ``owner``
    which read it is for (see :mod:`._slots`); release the slot with the same owner.
    """
    return await limiter.take(deadline, urgent, owner)


def annotate(exc: BaseException, sub: SubQuery, last: bytes | None) -> BaseException:
    """The client's error, with a note and an attribute saying which sub-scan failed."""
    if getattr(exc, "saltedtable_subscan", None) is None:
        resume = "" if last is None else f", after logical key {last!r}"
        exc.add_note(f"saltedtable: sub-scan of {sub.describe()} failed{resume}")
        exc.saltedtable_subscan = SubScan(sub.bucket, sub, last)  # type: ignore[attr-defined]
    return exc


def row_bytes(row: Row) -> int:
    """What a row counts in budgets and statistics: its (logical) key and cell values."""
    return len(row.row_key) + sum(len(c.value) for c in row.cells)


def count_row(stats: BucketStats, nbytes: int, started: float) -> None:
    """Count a row of ``nbytes`` bytes a bucket sent (and, for its first, the latency to it)."""
    if stats.first_page_seconds is None:
        stats.first_page_seconds = time.monotonic() - started  # to the first row
    stats.rows += 1
    stats.bytes += nbytes


def count_request(stats: BucketStats, took: float) -> None:
    """Count a request a bucket ran."""
    stats.pages += 1
    stats.seconds += took
    if stats.first_page_seconds is None:  # it sent no rows
        stats.first_page_seconds = took


def _cancel_requested() -> bool:
    """Whether the running task was asked to cancel (not just handed a CancelledError)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


#: The table type of a read context (async or sync), and its slots.
T = TypeVar("T")
L = TypeVar("L")


@dataclass(frozen=True, slots=True)
class _ReadContext(Generic[T, L, G]):
    """What every read of one table shares, built once per table object (either flavour).

    The async and sync read calls name it ``ReadContextAsync`` and ``ReadContext``.

    Attributes:
        table: The physical table; its ``read_rows_stream`` is looked up at
            each read, so a table wrapped after the salted one was made is used.
        layout: Where keys live, and which rows reads hide (``Layout.hiding``).
        limiter: The table's concurrency slots, shared by its reads.
        budget: What one read may hold at once (the table's).
        guard: Called before a read's first request (the table's layout
            guard), with the read's deadline and attempt timeout; None: none.
        odds: Whether bounded reads try one request over every bucket first:
            (reads without a limit, reads with one).
        hook: Receives the statistics of every read when it ends.
        sizes: What the table's recent reads measured of its rows, by
            filter: a read's first wave is sized from it (see
            :class:`~._strategy.RowSizes`).
    """

    table: T
    layout: Layout
    limiter: L
    budget: ReadBudget
    guard: Callable[[GuardTime], G] | None
    odds: tuple[OneRequestOdds, OneRequestOdds]
    hook: StatsHook | None = None
    sizes: RowSizes = field(default_factory=RowSizes)


@final
class OneRequestStep:
    """A small read's first step, in one object: the one request over every bucket.

    It decides whether the read tries it (the settings' row limit, then the
    table's odds), what came of it (:attr:`outcome`, for the statistics) and
    whether its rows answer the read; the read call runs its source and merge
    (:class:`OneRequestSource` or :class:`SyncOneRequestSource`) between.
    """

    __slots__ = ("_limit", "_odds", "_ordered", "outcome", "request")

    def __init__(
        self, request: OneRequest, odds: OneRequestOdds | None, *, ordered: bool, limit: int | None
    ) -> None:
        self.request = request
        self._odds = odds
        self._ordered = ordered
        self._limit = limit
        #: How it went (None: not run yet).
        self.outcome: OneRequestOutcome | None = None

    @classmethod
    def choose(
        cls,
        plan: ReadPlan,
        settings: ReadSettings,
        odds: OneRequestOdds | None,
        stats: CallStats | None,
    ) -> OneRequestStep | None:
        """The step a read takes first, or None where it goes bucket by bucket at once."""
        rows = settings.one_request_rows  # 0 where the read does not try it
        one = one_request(plan, rows) if rows else None
        if one is None or odds is None:
            return None
        ordered, limit = settings.ordered, plan.limit
        if not ordered and rows == limit:
            # Any `limit` rows answer an unordered read: this one request does
            # unless it fails or stops at the budget's bytes (rows too wide), so
            # it neither waits for nor moves the odds.
            return cls(one, None, ordered=ordered, limit=limit)
        if not odds.try_now():
            if stats is not None:
                stats.one_request = OneRequestOutcome("skipped", rows)
            return None
        return cls(one, odds, ordered=ordered, limit=limit)

    @property
    def fitted(self) -> bool:
        """Whether its rows answered the read."""
        return self.outcome is not None and self.outcome.fitted

    def _outcome_of(
        self, source: _OneRequest, *, fitted: bool, error: str = "", went_on: bool = False
    ) -> OneRequestOutcome:
        result: OneRequestResult = "full"
        if fitted:
            result = "answered"
        elif error:
            result = "failed"
        elif source.capped:
            result = "over_budget"
        return OneRequestOutcome(
            result, self.request.rows, source.received, source.got, error, went_on
        )

    def failed(self, exc: BaseException, source: _OneRequest) -> None:
        """It failed: go on bucket by bucket, unless time is up or the caller left (raises)."""
        ends = not isinstance(exc, Exception) or isinstance(exc, DeadlineExceeded)
        self.outcome = self._outcome_of(
            source,
            fitted=False,
            error="cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__,
            went_on=not ends,
        )
        if ends:
            raise source.annotate(exc) if isinstance(exc, Exception) else exc
        # Whatever went wrong (a transient error past its retries, a request
        # the service would not take), the buckets' own requests answer the
        # read as if it had not been tried, and report an error by bucket.
        _log.debug("the one request over every bucket failed; reading bucket by bucket: %r", exc)
        if self._odds is not None:
            self._odds.record(False)

    def done(self, rows: list[Row], source: _OneRequest) -> list[Row] | None:
        """The rows of the read if it answered it, else None (go on bucket by bucket)."""
        received, limit = source.received, self._limit
        # Fewer rows than asked: every row of the read. An unordered read
        # with a limit takes any `limit` rows.
        fitted = (received < self.request.rows and not source.capped) or (
            not self._ordered and limit is not None and received >= limit
        )
        if self._odds is not None:
            self._odds.record(fitted)
        self.outcome = self._outcome_of(source, fitted=fitted, went_on=not fitted)
        if not fitted:
            return None
        if self._ordered:  # bucket after bucket: one logical key lives in one bucket
            rows.sort(key=operator.attrgetter("row_key"))
        if limit is not None:
            del rows[limit:]
        return rows


class _Read(Generic[G]):
    """What a logical read keeps, async or sync: deadline, stray counters, statistics, guard."""

    __slots__ = (
        "_deadline",
        "_filter",
        "_guard",
        "_hook",
        "_in_buckets",
        "_limit",
        "_one",
        "_sizes",
        "_stats",
        "_stray",
    )

    def __init__(
        self,
        ctx: _ReadContext[Any, Any, G],
        plan: ReadPlan,
        settings: ReadSettings,
        timeouts: Timeouts,
        *,
        operation: str,
        stats: CallStats | None,
    ) -> None:
        hook = ctx.hook
        if stats is None and hook is not None:
            stats = CallStats()
        self._deadline = time.monotonic() + timeouts.operation
        self._limit: GuardTime = (self._deadline, timeouts.attempt)
        # Cutoff layouts hide rows of the other side, checked one by one (their
        # settings never try the one request: see ReadPlan.settings).
        stray, salted_stray = ctx.layout.hiding(None), ctx.layout.hiding(0)
        self._stray = None if stray is None else StrayRows(stray)
        # Bucket rows on the legacy side are a migration's copies: left out, not reported.
        self._in_buckets = None if salted_stray is None else StrayRows(salted_stray)
        if stats is not None:
            stats.operation = operation
            stats.settings = settings
            stats.one_request = None
        self._stats = stats
        self._hook = hook
        self._guard = ctx.guard
        self._sizes = ctx.sizes
        #: Reads with the same filter share measures (see RowSizes), keyed by its repr.
        self._filter = plan.row_filter
        #: The one request to try first (small reads), and how it went (see finish_read).
        self._one = OneRequestStep.choose(plan, settings, ctx.odds[plan.limit is not None], stats)

    def _bucket_stats(self, sub: SubQuery) -> BucketStats | None:
        return None if self._stats is None else self._stats.bucket(sub.bucket)

    def _stray_for(self, sub: SubQuery) -> StrayRows | None:
        return self._stray if sub.bucket is None else self._in_buckets

    def _learn(self, largest: int | None) -> None:
        """Remember the largest row a request of this read measured, for the table's next reads."""
        if largest:
            self._sizes.learn(repr(self._filter), largest)

    def _size_hint(self) -> int | None:
        """The largest row recent reads with this read's filter measured (None: none)."""
        return self._sizes.hint(repr(self._filter))

    def _finish(
        self, merge: MergeCore[Row] | None, emitted: int, error: BaseException | None
    ) -> None:
        if merge is not None:
            self._learn(merge.measured_largest)
        outcome = None if self._one is None else self._one.outcome
        finish_read(merge, self._stats, self._hook, self._stray, emitted, error, outcome)


# -- a bucket's requests -----------------------------------------------------------------


@final
class SyncBucketSource(_BucketRequests):
    """Reads one :class:`SubQuery` for a :class:`ThreadMerge`, one bounded request at a time."""

    __slots__ = ("_slots", "halt", "request")

    def __init__(
        self,
        read_rows_stream: SyncReadRowsStream,
        sub: SubQuery,
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: Slots,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
    ) -> None:
        super().__init__(
            read_rows_stream, sub, deadline=deadline, timeouts=timeouts, bstats=bstats, stray=stray
        )
        self._slots = limiter
        #: The request running now, which the read ends when it stops.
        self.request = SyncRequest(limiter.interrupt)
        #: The running request ends after its next row: it gives its slot up to
        #: a small read (set from that read's thread, by :meth:`give_way`).
        self.halt = False

    def give_way(self) -> None:
        """End the running request after its next row, for a small read (see :mod:`._slots`)."""
        self.halt = True

    def __call__(self, size: int, feed: Feed[Row], merge: ThreadMerge[Row]) -> Sent:
        """Run the next request of at most ``size`` rows, pushing each row into ``feed``.

        The request ends after its next row when the slots ask it to give way
        to a small read (:meth:`give_way`); the bucket's next request then
        resumes after that row and queues for a slot like any other.
        """
        query = self._cursor.next_query(size)
        request = self.request
        if query is None or request.stopped:
            return Sent(0, False)
        stats = self._bstats
        token = None if stats is None else current_bucket().set(stats)
        try:
            # Not a runner of the slots now, so nobody asks it to give way in between.
            self.halt = False
            # The slot is held for this one request; waiting for it counts
            # against the read's operation_timeout like the request itself.
            if not self._slots.acquire(
                self._deadline, request.is_stopped, feed.urgent, feed.read, self
            ):
                if request.stopped:
                    return Sent(0, False)
                raise annotate(slot_timeout(self._timeouts, self._slots.total), self.sub, None)
            try:
                return self._request(query, size, feed, merge, stats)
            finally:
                self._slots.release(feed.read, self)
        finally:
            if token is not None:
                current_bucket().reset(token)

    def _request(
        self,
        query: ReadRowsQuery,
        size: int,
        feed: Feed[Row],
        merge: ThreadMerge[Row],
        stats: BucketStats | None,
    ) -> Sent:
        started = time.monotonic()
        cut = self._cut
        stray = self._stray
        cap = feed.cap
        received = pushed = got = 0
        largest = feed.largest
        key: bytes | None = None
        complete = capped = False
        request = self.request
        slots = self._slots
        paused = 0.0

        def halted() -> bool:
            return self.halt or request.stopped or merge.stopping

        if not request.begin():
            return Sent(0, False)
        try:
            stream = iter(
                self._read_rows_stream(query, **request_timeouts(self._deadline, self._timeouts))
            )
            try:
                for row in stream if request.attach(stream) else ():
                    if merge.stopping:
                        break  # left early, or another sub-scan failed: end this one here
                    key = row.row_key[cut:]
                    row.row_key = key
                    nbytes = len(key)
                    for cell in row.cells:
                        cell.row_key = key
                        nbytes += len(cell.value)
                    received += 1
                    if stray is None or not stray(key):
                        if stats is not None:
                            count_row(stats, nbytes, started)
                        merge.push(feed, row, key)
                        pushed += 1
                        got += nbytes
                        if nbytes > largest:
                            largest = nbytes
                        if got > cap and received < size:
                            capped = True  # past the byte cap (a row wider than any seen)
                            break
                    if self.halt:
                        # A small read waits for this slot: this row ends the request
                        # (as at the byte cap: the next one resumes after this row).
                        capped = True
                        break
                    if slots.small and feed.pausable():
                        # Read-ahead pauses while a small read runs (see
                        # Slots.pause_for_small).
                        waited = slots.pause_for_small(feed, halted, PAUSE_MOST - paused)
                        if waited:
                            paused += waited
                            if request.stopped or merge.stopping:
                                break
                            if self.halt or paused >= PAUSE_MOST:
                                # Asked to give way while paused, or paused too long:
                                # end here (the next request resumes after this row).
                                capped = True
                                break
                else:
                    complete = not request.stopped
            finally:
                # Closing the generator frees the client's stream; gRPC cancels
                # a call that is still running once nothing refers to it.
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
                del stream
        except Exception as exc:
            if not request.stopped:
                raise self._annotate(exc, key) from None
            # The read stopped it (its RPC cancelled, or its next attempt refused).
        finally:
            request.end()
            feed.got_bytes += got
            feed.largest = largest
            if stats is not None:
                count_request(stats, time.monotonic() - started)
        if capped:
            return Sent(pushed, self._advance(received, received, key), cut=True)
        if not complete:
            return Sent(pushed, False)
        return Sent(pushed, self._advance(received, size, key))


# -- one read --------------------------------------------------------------------------


@final
class SyncOneRequestSource(_OneRequest):
    """Runs a small read's one request for a :class:`~._merge.ThreadMerge` of its own."""

    __slots__ = ("_slots", "request")

    def __init__(
        self,
        read_rows_stream: SyncReadRowsStream,
        one: OneRequest,
        subs: tuple[SubQuery, ...],
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: Slots,
        stats: list[BucketStats | None],
        cap: int,
    ) -> None:
        super().__init__(
            read_rows_stream,
            one,
            subs,
            deadline=deadline,
            timeouts=timeouts,
            stats=stats,
            cap=cap,
        )
        self._slots = limiter
        #: The request, which the read ends when the caller leaves.
        self.request = SyncRequest(limiter.interrupt)

    def __call__(self, size: int, feed: Feed[Row], merge: ThreadMerge[Row]) -> Sent:
        """Run the request once, pushing every row into ``feed``; never asks again."""
        request = self.request
        if self.received or merge.stopping or request.stopped:
            return Sent(0, False)
        if not take_sync_slot(self._slots, self._deadline, request, None, self):
            if request.stopped:
                return Sent(0, False)
            raise slot_timeout(self._timeouts, self._slots.total)
        started = time.monotonic()
        self._slots.small_begins()
        try:
            if not request.begin():
                return Sent(0, False)
            stream = iter(
                self._read_rows_stream(
                    self._one.query, **request_timeouts(self._deadline, self._timeouts)
                )
            )
            try:
                for row in stream if request.attach(stream) else ():
                    if merge.stopping:
                        break  # the caller left: end the request here
                    merge.push(feed, row, self._relabel(row, started))
                    if self.over_cap():
                        break  # rows too wide for the budget: end the request here
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
                del stream
        except Exception:
            if not request.stopped:
                raise
            # The caller left: the RPC was cancelled under the request.
        finally:
            request.end()
            self._slots.small_ends()
            self._slots.release(self)
        return Sent(self.received, False)


def take_sync_slot(
    slots: Slots,
    deadline: float,
    request: SyncRequest,
    urgent: Callable[[], bool] | None = None,
    owner: object = None,
) -> bool:
    """Take one of the sync table's request slots by ``deadline``, unless the read stops first.

    ``urgent`` says whether the request is foreground (None: always), ``owner``
    which read it is for (see :mod:`._slots`); release the slot with the same owner.
    """
    return slots.acquire(deadline, request.is_stopped, urgent, owner)


async def stop_sources(sources: Sequence[BucketSource | OneRequestSource]) -> None:
    """End the requests running now without cancelling their readers; start no new ones.

    Each reader stops at its next row and ends its stream between rows,
    where no receive is in flight (nothing leaks); a reader that no row
    reaches within :data:`~._cancel.STOP_GRACE` has its RPC cancelled under
    it and leaves too. Only then does the merge cancel the producers. Returns
    once every reader has left, or about a second later at most.
    """
    streams = []
    for source in sources:
        source.stopped = True
        if isinstance(source, BucketSource):
            source.halt = True
        if source.stream is not None:
            streams.append(source.stream)
    if streams:
        await stop_reads(streams)


def stop_sync_sources(sources: Sequence[SyncBucketSource | SyncOneRequestSource]) -> bool:
    """End the requests running now from the closing thread (see :mod:`._cancel`).

    Returns:
        Whether every request has ended (within a second).
    """
    return stop_sync_requests([source.request for source in sources])


def _one_budget(one: OneRequest) -> ReadBudget:
    """The budget of the merge that runs a small read's one request: all it may return."""
    return ReadBudget(rows=one.rows, bytes=1 << 62, one_request_rows=0)


def finish_read(
    merge: MergeCore[Row] | None,
    stats: CallStats | None,
    hook: StatsHook | None,
    stray: StrayRows | None,
    emitted: int,
    error: BaseException | None,
    one: OneRequestOutcome | None = None,
) -> None:
    """End a read: warn once about stray rows, fill in and report its statistics.

    ``one``: how the one request over every bucket went, if the read tried it.
    ``merge``: the buckets' own requests (None: the read made none).
    """
    if stray is not None and stray.count:
        key, why = stray.first
        _log.warning(
            "left out %d legacy row(s) that contradict the layout, e.g. %r: %s "
            "(check_layout() lists them)",
            stray.count,
            key,
            why,
        )
    if stats is None:
        return
    stats.stray_rows = 0 if stray is None else stray.count
    stats.rows = emitted
    if merge is None:
        stats.requests = stats.rounds = stats.peak_buffered_rows = stats.peak_buffered_bytes = 0
    else:
        stats.requests = merge.requests
        stats.rounds = merge.rounds
        stats.peak_buffered_rows = merge.peak_outstanding
        stats.peak_buffered_bytes = merge.peak_bytes
    if one is not None:
        stats.one_request = one
        stats.requests += 1
        stats.peak_buffered_rows = max(stats.peak_buffered_rows, one.asked)
        stats.peak_buffered_bytes = max(stats.peak_buffered_bytes, one.bytes)
        if stats.settings is not None and stats.settings.limit is not None:
            stats.rounds += 1  # the one request was the read's first round
    stats.row_bytes = float(DEFAULT_ROW_BYTES) if merge is None else merge.row_bytes
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        # The caller left (break, aclose, cancellation): not a failure.
        stats.ended_early = True
        error = None
    report(stats, error, hook)


@final
class StrayRows:
    """Tells the legacy side which rows to leave out, counting them for one report per read."""

    __slots__ = ("count", "first", "reason")

    def __init__(self, reason: Callable[[bytes], str | None]) -> None:
        self.reason = reason
        self.count = 0
        self.first: tuple[bytes, str] = (b"", "")

    def __call__(self, key: bytes) -> bool:
        why = self.reason(key)
        if why is None:
            return False
        if not self.count:
            self.first = (key, why)
        self.count += 1
        return True
