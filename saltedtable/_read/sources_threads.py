"""The sync bucket sources: one request series per bucket, run by worker threads.

:class:`SyncBucketSource` runs a bucket's bounded requests for a
:class:`~.._engine.merge_threads.ThreadMerge`, :class:`SyncOneRequestSource` a small
read's one request over every bucket (what they share: :mod:`.sources`).

A read that ends early stops its requests from the closing thread
(:class:`~.cancel_threads.SyncRequest`): the gRPC call each worker waits in is
cancelled and the client's retries are disarmed, so no worker waits for its
next row or its attempt deadline; a request that is between rows stops at
its next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import final

from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery
from google.cloud.bigtable.data.row import Row

from .._contracts import SyncReadRowsStream
from .._engine.budget import CELL_OVERHEAD_BYTES, ROW_OVERHEAD_BYTES
from .._engine.merge import Feed, Sent
from .._engine.merge_threads import ThreadMerge
from .._engine.slots import PAUSE_MOST
from .._engine.slots_threads import Slots
from .cancel_threads import SyncRequest, stop_sync_requests
from .sources import (
    BucketSourceBase,
    OneRequestSourceBase,
    annotate,
    count_request,
    count_row,
)
from .stats import BucketStats, current_bucket
from .timeouts import request_timeouts, slot_timeout

__all__ = [
    "SyncBucketSource",
    "SyncOneRequestSource",
    "stop_sync_sources",
    "take_sync_slot",
]


@final
class SyncBucketSource(BucketSourceBase[SyncReadRowsStream, Slots]):
    """Reads one :class:`SubQuery` for a :class:`ThreadMerge`, one bounded request at a time.

    Built with :class:`~.sources.BucketSourceBase`'s arguments. Its :attr:`halt`
    is set from a small read's thread (by :meth:`give_way`).
    """

    __slots__ = ("request",)

    def _prepare(self) -> None:
        #: The request running now, which the read ends when it stops.
        self.request = SyncRequest(self._limiter.interrupt, disarm=self.internals)

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
            if not self._limiter.acquire(
                self._deadline, request.is_stopped, feed.urgent, feed.read, self
            ):
                if request.stopped:
                    return Sent(0, False)
                raise annotate(slot_timeout(self._timeouts, self._limiter.total), self.sub, None)
            try:
                return self._request(query, size, feed, merge, stats)
            finally:
                self._limiter.release(feed.read, self)
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
        slots = self._limiter
        paused = 0.0

        def halted() -> bool:
            return self.halt or request.stopped or merge.stopping

        if not request.begin():
            return Sent(0, False)
        row_over, cell_over = ROW_OVERHEAD_BYTES, CELL_OVERHEAD_BYTES
        try:
            stream = iter(
                self._read_rows_stream(query, **request_timeouts(self._deadline, self._timeouts))
            )
            try:
                for row in stream if request.attach(stream) else ():
                    if merge.stopping:
                        break  # left early, or another sub-scan failed: end this one here
                    # (relabel, inline: no call a row)
                    key = row.row_key[cut:]
                    row.row_key = key
                    nbytes = len(key)
                    cells = row.cells
                    for cell in cells:
                        cell.row_key = key
                        nbytes += len(cell.value)
                    received += 1
                    if stray is None or not stray(key):
                        if stats is not None:
                            count_row(stats, nbytes, started)
                        merge.push(feed, row, key)
                        pushed += 1
                        # (row_cost, inline: no call a row)
                        cost = nbytes + row_over + cell_over * len(cells)
                        got += cost
                        if cost > largest:
                            largest = cost
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


@final
class SyncOneRequestSource(OneRequestSourceBase[SyncReadRowsStream, Slots]):
    """Runs a small read's one request for a thread merge of its own.

    The merge is a :class:`~.._engine.merge_threads.ThreadMerge` of this one source.

    Built with :class:`~.sources.OneRequestSourceBase`'s arguments.
    """

    __slots__ = ("request",)

    def _prepare(self) -> None:
        #: The request, which the read ends when the caller leaves.
        self.request = SyncRequest(self._limiter.interrupt, disarm=self.internals)

    def __call__(self, size: int, feed: Feed[Row], merge: ThreadMerge[Row]) -> Sent:
        """Run the request once, pushing every row into ``feed``; never asks again."""
        request = self.request
        if self.received or merge.stopping or request.stopped:
            return Sent(0, False)
        if not take_sync_slot(self._limiter, self._deadline, request, None, self):
            if request.stopped:
                return Sent(0, False)
            raise slot_timeout(self._timeouts, self._limiter.total)
        started = time.monotonic()
        self._limiter.small_begins()
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
            self._limiter.small_ends()
            self._limiter.release(self)
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
    which read it is for (see :mod:`.._engine.slots`); release the slot with the same owner.
    """
    return slots.acquire(deadline, request.is_stopped, urgent, owner)


def stop_sync_sources(sources: Sequence[SyncBucketSource | SyncOneRequestSource]) -> bool:
    """End the requests running now from the closing thread (see :mod:`.cancel_threads`).

    Returns:
        Whether every request has ended (within a second).
    """
    return stop_sync_requests([source.request for source in sources])
