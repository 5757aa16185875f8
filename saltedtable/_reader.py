"""BucketReader: reads one bucket's sub-query for a fan-out.

Two ways to read, chosen per read when it starts (see ``SaltedTableAsync``):

* **Pages.** Each fetch is one ReadRows request with a row limit; the
  concurrency slot is taken for that request only. Used for reads with a limit
  (each page asks for about what is still missing) and whenever the table's
  slots cannot cover every bucket of the read at once: a slot is never held
  while the merge waits, so no bound can deadlock.
* **Streams.** Without a limit, when the read could take a slot for every
  bucket at once, each bucket is read by long requests (5,000 rows each) that
  stay open while the merge works; fetches hand over what has arrived. Few
  requests are repeated, which matters to servers that scan the rest of a
  range before applying a row limit (the emulator does), and the row limit
  keeps what gRPC buffers ahead of a slow consumer bounded. Between fetches
  a read stays pending, so closing the reader cancels the request while it
  waits for its next row: leaving a ``read_rows_stream`` any other way does
  not cancel its RPC.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any, Final, final

import anyio
from google.cloud.bigtable.data.row import Row

from ._exceptions import BucketReadError
from ._merge import Page
from ._plan import PageCursor, SubQuery
from ._stats import BucketStats, current_bucket

__all__ = ["BucketReader"]

_Filter = Callable[[list[Row], list[bytes]], tuple[list[Row], list[bytes]]]
#: Rows one streamed request asks for. gRPC reads a fast server's messages
#: ahead of the application, so an unlimited request lets a slow consumer
#: buffer most of a large scan; a row limit per request bounds that (16
#: buckets x 5,000 rows of ~150 bytes: about 12 MB at most) whatever the scan's size.
_STREAM_REQUEST_ROWS: Final = 5000
#: Largest chunk a stream hands over: bounds the rows buffered per bucket
#: (a few chunks) while keeping the per-chunk cost negligible.
_STREAM_CHUNK: Final = 256


async def _next_row(stream: AsyncGenerator[Row, None]) -> Row:
    return await stream.__anext__()


async def _read_after(entered: asyncio.Event, stream: AsyncGenerator[Row, None]) -> Row:
    entered.set()  # nothing awaits between this and entering the stream
    return await stream.__anext__()


@final
class BucketReader:
    """Fetches the rows of one :class:`SubQuery`, relabelled with logical keys."""

    __slots__ = (
        "_attempt_timeout",
        "_bstats",
        "_chunk",
        "_cursor",
        "_cut",
        "_deadline",
        "_limiter",
        "_pending",
        "_read_rows_stream",
        "_request_last",
        "_request_rows",
        "_retryable",
        "_stray",
        "_stream",
        "streaming",
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
        stray: _Filter | None,
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
        self._stray = stray
        #: Set before the first fetch: one open stream (holding a slot taken
        #: for the whole read) instead of pages.
        self.streaming = False
        self._stream: AsyncGenerator[Row, None] | None = None
        self._pending: asyncio.Task[Row] | None = None
        # A stream hands over its first row at once, then chunks that double:
        # a slow bucket cannot hold rows back that the merge could already use.
        self._chunk = 1
        self._request_rows = 0  # rows the open streamed request has sent so far
        self._request_last: bytes | None = None  # and the last one's physical key

    async def fetch(self, size: int) -> Page[Row]:
        """The next rows: a page of at most ``size``, or what the stream has up to ``size``."""
        started = time.monotonic()
        rows: list[Row] = []
        keys: list[bytes] = []
        token = None if self._bstats is None else current_bucket().set(self._bstats)
        try:
            if self.streaming:
                await self._read_stream(size, rows, keys)
            else:
                await self._read_page(size, rows, keys)
        except Exception as exc:
            self._account(started, rows, token)
            where = self._cursor.position
            resume = "" if where is None else f" after logical key {where[self._cut :]!r}"
            raise BucketReadError(
                f"sub-scan of bucket {self.sub.bucket} ({self.sub.describe()}) failed{resume}: "
                f"{type(exc).__name__}: {exc}",
                bucket=self.sub.bucket,
                query=self.sub,
            ) from exc
        more = self._stream is not None or not self._cursor.done
        if self._stray is not None:
            rows, keys = self._stray(rows, keys)
        self._account(started, rows, token)
        return Page(rows, keys, more)

    def _account(
        self,
        started: float,
        rows: list[Row],
        token: contextvars.Token[BucketStats | None] | None,
    ) -> None:
        if token is not None:
            current_bucket().reset(token)
        b = self._bstats
        if b is None:
            return
        took = time.monotonic() - started
        b.pages += 1
        b.seconds += took
        if b.first_page_seconds is None:
            b.first_page_seconds = took
        b.rows += len(rows)
        b.bytes += sum(len(r.row_key) + sum(len(c.value) for c in r.cells) for r in rows)

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

    async def _read_page(self, size: int, rows: list[Row], keys: list[bytes]) -> None:
        query = self._cursor.next_query(size)
        if query is None:
            return
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
                    self._relabel(row, cut, rows, keys)
        finally:
            limiter.release()
        last = self.sub.prefix + keys[-1] if keys else None
        self._cursor.advance(len(rows), size, last)

    async def _read_stream(self, size: int, rows: list[Row], keys: list[bytes]) -> None:
        size = min(size, self._chunk)
        self._chunk = min(self._chunk * 2, _STREAM_CHUNK)
        cut = self._cut
        while len(rows) < size:
            stream = self._stream
            if stream is None:
                query = self._cursor.next_query(_STREAM_REQUEST_ROWS)
                if query is None:
                    return
                self._request_rows, self._request_last = 0, None
                stream = self._stream = await self._read_rows_stream(query, **self._timeouts())
            pending, self._pending = self._pending, None
            taken = len(rows)
            try:
                if pending is not None:
                    row = await pending
                    self._relabel(row, cut, rows, keys)
                # The hot loop: one row at a time, relabelled in place.
                next_row = stream.__anext__
                while len(rows) < size:
                    row = await next_row()
                    key = row.row_key[cut:]
                    row.row_key = key
                    for cell in row.cells:
                        cell.row_key = key
                    rows.append(row)
                    keys.append(key)
            except StopAsyncIteration:
                self._stream = None
                await stream.aclose()
            self._request_rows += len(rows) - taken
            if rows and len(rows) > taken:
                self._request_last = self.sub.prefix + keys[-1]
            if self._stream is None:
                # A full request may have more after its last row; a short one ends its window.
                self._cursor.advance(self._request_rows, _STREAM_REQUEST_ROWS, self._request_last)
        if self._stream is not None:
            # Keep a read pending while the merge works: closing the reader
            # then cancels a waiting read, which cancels the request.
            self._pending = asyncio.get_running_loop().create_task(_next_row(self._stream))

    @staticmethod
    def _relabel(row: Row, cut: int, rows: list[Row], keys: list[bytes]) -> None:
        key = row.row_key[cut:]
        row.row_key = key
        for cell in row.cells:
            cell.row_key = key
        rows.append(row)
        keys.append(key)

    async def aclose(self) -> None:
        """Cancel a pending read, close the open stream. Safe to call more than once."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()
            await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # retrieved; the read is over either way
        stream, self._stream = self._stream, None
        if stream is not None:
            await _cancel_stream(stream)


async def _cancel_stream(stream: AsyncGenerator[Row, None]) -> None:
    """End an open ``read_rows_stream`` so that its RPC is cancelled, then close it.

    ``aclose()`` alone does not cancel the RPC of a stream that is not waiting
    for a row; a read cancelled while it waits does. So start a read and cancel
    it once it is inside the stream. (A pending read that was cancelled before
    it ever ran left the stream untouched, which is why this does not trust it.)
    """
    for _ in range(100):  # one round in practice: the cancellation lands on the wait
        entered = asyncio.Event()
        task = asyncio.get_running_loop().create_task(_read_after(entered, stream))
        await entered.wait()
        task.cancel()
        await asyncio.wait([task])
        if task.cancelled() or task.exception() is not None:
            break  # cancelled while waiting, or the stream is already over
    await stream.aclose()
