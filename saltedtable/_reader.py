"""BucketReader: reads one bucket's sub-query for a fan-out.

Two ways to read, chosen per read when it starts (see ``SaltedTableAsync``):

* **Pages** (:meth:`BucketReader.fetch`, a :class:`~saltedtable._merge.FanOut`
  source). Each fetch is one ReadRows request with a row limit; the
  concurrency slot is taken for that request only. Used for reads with a limit
  (each page asks for about what is still missing) and whenever the table's
  slots cannot cover every bucket of the read at once: a slot is never held
  while the merge waits, so no bound can deadlock.
* **Streams** (:meth:`BucketReader.pump`, a :class:`~saltedtable._merge.Merge`
  source). Without a limit, when the read could take a slot for every bucket
  at once, each bucket is read by long requests (5,000 rows each) whose rows
  go into the merge's feed as they arrive. Few requests are repeated, which
  matters to servers that scan the rest of a range before applying a row
  limit (the emulator does), and the row limit keeps what gRPC buffers ahead
  of a slow consumer bounded.

Leaving a ``read_rows_stream`` early does not cancel its RPC; cancelling a
read that waits for its next row does. A pump waits inside the stream except
while its feed is full, so closing the merge cancels it there; a pump that
stops anywhere else cancels its stream the same way (:func:`_cancel_stream`)
before it lets go of it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any, Final, final

import anyio
from google.cloud.bigtable.data.row import Row

from ._cancel import end_stream
from ._exceptions import BucketReadError
from ._merge import Feed, Page
from ._plan import PageCursor, SubQuery
from ._stats import BucketStats, current_bucket

__all__ = ["BucketReader"]

#: Rows one streamed request asks for. gRPC reads a fast server's messages
#: ahead of the application, so an unlimited request lets a slow consumer
#: buffer most of a large scan; a row limit per request bounds that (16
#: buckets x 5,000 rows of ~150 bytes: about 12 MB at most) whatever the scan's size.
_STREAM_REQUEST_ROWS: Final = 5000


@final
class BucketReader:
    """Fetches the rows of one :class:`SubQuery`, relabelled with logical keys."""

    __slots__ = (
        "_attempt_timeout",
        "_bstats",
        "_cursor",
        "_cut",
        "_deadline",
        "_limiter",
        "_read_rows_stream",
        "_retryable",
        "_stray",
        "sub",
    )

    def __init__(
        self,
        read_rows_stream: Callable[..., Any],
        sub: SubQuery,
        *,
        deadline: float,
        attempt_timeout: float | None,
        retryable_errors: Any,
        limiter: anyio.CapacityLimiter,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
    ) -> None:
        self.sub = sub
        self._read_rows_stream = read_rows_stream
        self._cursor = PageCursor(sub)
        self._cut = len(sub.prefix)
        self._deadline = deadline
        self._attempt_timeout = attempt_timeout
        self._retryable = retryable_errors
        self._limiter = limiter
        self._bstats = bstats
        #: Says which (logical) keys to leave out: stray rows of the legacy side.
        self._stray = stray

    # -- pages -----------------------------------------------------------------

    async def fetch(self, size: int) -> Page[Row]:
        """The next page: at most ``size`` rows, one request holding one slot."""
        started = time.monotonic()
        rows: list[Row] = []
        keys: list[bytes] = []
        token = None if self._bstats is None else current_bucket().set(self._bstats)
        try:
            query = self._cursor.next_query(size)
            if query is not None:
                await self._read_page(query, size, rows, keys)
        except Exception as exc:
            raise self._failed(exc) from exc
        finally:
            if token is not None:
                current_bucket().reset(token)
        if self._stray is not None:
            kept = [i for i, key in enumerate(keys) if not self._stray(key)]
            if len(kept) < len(keys):
                rows, keys = [rows[i] for i in kept], [keys[i] for i in kept]
        self._account(time.monotonic() - started, rows)
        return Page(rows, keys, not self._cursor.done)

    async def _read_page(self, query: Any, size: int, rows: list[Row], keys: list[bytes]) -> None:
        limiter = self._limiter
        # The slot is held for this one request; waiting for it counts
        # against the read's operation_timeout like the request itself.
        with anyio.move_on_after(self._deadline - time.monotonic()) as waiting:
            await limiter.acquire()
        if waiting.cancelled_caught:
            raise TimeoutError(
                "operation_timeout ran out waiting for a sub-scan slot "
                f"(max_concurrent_subscans={limiter.total_tokens:g} all busy)"
            )
        try:
            stream = await self._read_rows_stream(query, **self._timeouts())
            async with aclosing(stream):
                cut = self._cut
                async for row in stream:
                    key = row.row_key[cut:]
                    row.row_key = key
                    for cell in row.cells:
                        cell.row_key = key
                    rows.append(row)
                    keys.append(key)
        finally:
            limiter.release()
        last = self.sub.prefix + keys[-1] if keys else None
        self._cursor.advance(len(rows), size, last)

    # -- streams ---------------------------------------------------------------

    async def pump(self, feed: Feed[Row]) -> None:
        """Stream every row of the sub-query into ``feed``, request after request.

        The caller holds a concurrency slot for this reader while it pumps.
        (One flat coroutine on purpose: a task pays for every frame between
        it and the stream each time a row arrives.)
        """
        token = None if self._bstats is None else current_bucket().set(self._bstats)
        cut = self._cut
        keys, rows = feed.keys, feed.items
        stray, stats = self._stray, self._bstats
        try:
            while (query := self._cursor.next_query(_STREAM_REQUEST_ROWS)) is not None:
                started = time.monotonic()
                held = 0.0  # time a full feed held this request: the consumer's, not the bucket's
                sent = 0
                key = None
                stream = None
                complete = False
                try:
                    stream = await self._read_rows_stream(query, **self._timeouts())
                    # The hot loop: the bare client loop, the relabelling, a length check.
                    async for row in stream:
                        key = row.row_key[cut:]
                        row.row_key = key
                        for cell in row.cells:
                            cell.row_key = key
                        sent += 1
                        if stray is not None and stray(key):
                            continue
                        if stats is not None:
                            _count_row(stats, row, started)
                        keys.append(key)
                        rows.append(row)
                        if len(keys) >= feed.wake_at:
                            if stats is None:
                                await feed.pushed()
                            else:
                                paused = time.monotonic()
                                await feed.pushed()
                                held += time.monotonic() - paused
                    complete = True
                except Exception as exc:
                    raise self._failed(exc, key) from exc
                finally:
                    if stats is not None:
                        _count_request(stats, time.monotonic() - started - held)
                    if stream is not None:
                        with anyio.CancelScope(shield=True):
                            if complete:
                                await stream.aclose()
                            else:
                                # A failure or a cancellation: make sure the RPC ends too.
                                await _cancel_stream(stream)
                # A full request may have more after its last row; a short one ends its window.
                self._cursor.advance(
                    sent, _STREAM_REQUEST_ROWS, None if key is None else self.sub.prefix + key
                )
        finally:
            if token is not None:
                current_bucket().reset(token)

    # -- shared ----------------------------------------------------------------

    def _failed(self, exc: Exception, last: bytes | None = None) -> BucketReadError:
        """The error for a failed request; ``last``: the last logical key it read, if any."""
        if last is None and (where := self._cursor.position) is not None:
            last = where[self._cut :]
        resume = "" if last is None else f" after logical key {last!r}"
        return BucketReadError(
            f"sub-scan of bucket {self.sub.bucket} ({self.sub.describe()}) failed{resume}: "
            f"{type(exc).__name__}: {exc}",
            bucket=self.sub.bucket,
            query=self.sub,
        )

    def _account(self, took: float, rows: list[Row]) -> None:
        b = self._bstats
        if b is None:
            return
        _count_request(b, took)
        b.rows += len(rows)
        b.bytes += sum(_row_bytes(row) for row in rows)

    def _timeouts(self) -> dict[str, Any]:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("operation_timeout ran out before the next request")
        attempt = self._attempt_timeout
        return {
            "operation_timeout": remaining,
            "attempt_timeout": remaining if attempt is None else min(attempt, remaining),
            "retryable_errors": self._retryable,
        }


def _count_row(stats: BucketStats, row: Row, started: float) -> None:
    if stats.first_page_seconds is None:
        stats.first_page_seconds = time.monotonic() - started  # streamed: to the first row
    stats.rows += 1
    stats.bytes += _row_bytes(row)


def _row_bytes(row: Row) -> int:
    """What a row counts in :attr:`BucketStats.bytes`: its (logical) key and cell values."""
    return len(row.row_key) + sum(len(c.value) for c in row.cells)


def _count_request(stats: BucketStats, took: float) -> None:
    stats.pages += 1
    stats.seconds += took
    if stats.first_page_seconds is None:  # it sent no rows
        stats.first_page_seconds = took


async def _cancel_stream(stream: AsyncGenerator[Row, None]) -> None:
    """End an open ``read_rows_stream`` so that its RPC is cancelled, then close it."""
    await end_stream(stream)
