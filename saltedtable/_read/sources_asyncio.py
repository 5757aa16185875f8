"""The async bucket sources: one request series per bucket, run by the asyncio merge.

:class:`BucketSource` runs a bucket's bounded requests for a
:class:`~.._engine.merge_asyncio.Merge`, :class:`OneRequestSource` a small read's one
request over every bucket (what they share: :mod:`.sources`).

Leaving a ``read_rows_stream`` early does not cancel its RPC, and cancelling
a task while it waits for the stream's next row leaks memory in grpc.aio (see
:mod:`.cancel_asyncio`). So a read that ends early (the caller left, or another
sub-scan failed) first ends the requests still running without cancelling the
tasks that read them (:func:`stop_sources`): each reader stops at
its next row, and only then are the producers cancelled. A request that
stops for any other reason ends its own stream (:func:`~.cancel_asyncio.end_stream`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, final

import anyio
from google.cloud.bigtable.data.row import Row

from .._contracts import ReadRowsStream
from .._engine.budget import CELL_OVERHEAD_BYTES, ROW_OVERHEAD_BYTES, streamable
from .._engine.merge import Feed, Sent
from .._engine.merge_asyncio import Merge, ProducerBase
from .._engine.slots import PAUSE_MOST
from .._engine.slots_asyncio import AsyncSlots
from .cancel_asyncio import end_stream, stop_reads
from .sources import BucketSourceBase, OneRequestSourceBase, count_request
from .stats import current_bucket
from .timeouts import request_timeouts, slot_timeout

__all__ = [
    "AHEAD_AGAIN",
    "AHEAD_MOST",
    "BucketSource",
    "OneRequestSource",
    "stop_sources",
    "take_slot",
]

_NEVER: Final = 1 << 62
#: The longest a bucket's stream pauses ahead of an ordered read's watermark
#: (see ``BucketSource._ahead``): a slower bucket that stalls this long (a
#: sparse filter the server scans for) has the others end their requests and
#: give their slots back.
AHEAD_MOST: Final = 2.0
#: Rows after which a bucket that could not pause (see ``BucketSource._ahead``)
#: looks again.
AHEAD_AGAIN: Final = 8


@final
class BucketSource(BucketSourceBase[ReadRowsStream, AsyncSlots], ProducerBase):
    """Reads one :class:`SubQuery` for the merge, one bounded request at a time.

    Built with :class:`~.sources.BucketSourceBase`'s arguments.
    """

    __slots__ = ("stopped", "stream")

    def _prepare(self) -> None:
        #: The stream of the request running now, if any.
        self.stream: Any = None
        #: The read is ending (:attr:`halt` too): no new request, and the one
        #: running was ended on purpose.
        self.stopped = False

    def _halted(self) -> bool:
        return self.halt

    async def _ahead(self, feed: Feed[Row], received: int, can_pause: bool) -> int:
        """``received`` rows into the request: if the bucket holds ``feed.ahead_at``
        rows, pause while the consumer waits for other buckets (see
        :meth:`~.._engine.merge.Feed.ahead`). Returns the rows received at which to
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
        """The bucket's producer task: its requests in turn.

        It is the merge's :class:`~.._engine.merge_asyncio.Producer` for this bucket.
        The engine grants each request (``merge.next_size``); the request pushes
        each row into ``feed``. Where the feed allows it
        (:attr:`~.._engine.merge.Feed.streams`), a request streams: when its
        grant's rows have come (or its byte cap is passed) it asks the engine
        for the next grant (:meth:`~.._engine.merge.Feed.renew`) and reads on in the
        same stream, so a page costs no round trip. Its row limit is the
        bucket's share of the budget (:meth:`~.._engine.merge.Feed.stream_rows`), not
        its grant: what its transport buffers while the bucket pauses or falls
        behind stays within that, and once the request has run to it the next
        request starts. It ends the stream,
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
        row_over, cell_over = ROW_OVERHEAD_BYTES, CELL_OVERHEAD_BYTES
        token = None if stats is None else current_bucket().set(stats)
        # A streamed read needs a slot per bucket while it runs: book this one's, so
        # that the table's reserve for small reads leaves it one (see SlotsCore.book).
        if can_stream:
            limiter.book(feed.read)
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
                    # A streamed request's row limit bounds what its transport may
                    # buffer (see Feed.stream_rows); its grants end within it.
                    limit = max(size, feed.stream_rows()) if streams else size
                    query = self._cursor.next_query(limit)
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
                            # (relabel, inline: no call a row)
                            key = row.row_key[cut:]
                            row.row_key = key
                            nbytes = len(key)
                            cells = row.cells
                            for cell in cells:
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
                                # (row_cost, inline: what the held row costs the budget)
                                cost = nbytes + row_over + cell_over * len(cells)
                                got += cost
                                if cost > largest:
                                    largest = cost
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
                                size = feed.renew(size, pushed, limit - received)
                                pushed = granted = 0
                                if received >= limit:
                                    # The request's row limit: the server ends the
                                    # stream now (the grant ended with it).
                                    end_at = _NEVER
                                    continue
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
                    elif streams:  # (as a page of `limit` rows: its last grant ended there)
                        more = self._advance(received, limit, key)
                    else:
                        more = self._advance(received, size, key)
                    merge.request_done(feed, pushed, early)
                    if not more:
                        return
        finally:
            if can_stream:
                limiter.unbook(feed.read)
            if token is not None:
                current_bucket().reset(token)


@final
class OneRequestSource(OneRequestSourceBase[ReadRowsStream, AsyncSlots]):
    """Runs a small read's one request for a :class:`~.._engine.merge_asyncio.Merge` of its own.

    Built with :class:`~.sources.OneRequestSourceBase`'s arguments.
    """

    __slots__ = ("stopped", "stream")

    def _prepare(self) -> None:
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
    which read it is for (see :mod:`.._engine.slots`); release the slot with the same owner.
    """
    return await limiter.take(deadline, urgent, owner)


def _cancel_requested() -> bool:
    """Whether the running task was asked to cancel (not just handed a CancelledError)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_sources(sources: Sequence[BucketSource | OneRequestSource]) -> None:
    """End the requests running now without cancelling their readers; start no new ones.

    Each reader stops at its next row and ends its stream between rows,
    where no receive is in flight (nothing leaks); a reader that no row
    reaches within :data:`~.cancel_asyncio.STOP_GRACE` has its RPC cancelled under
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
