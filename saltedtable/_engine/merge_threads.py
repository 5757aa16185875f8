"""The merge engine's thread driver: :class:`ThreadMerge`, the sync table's reads.

Each request runs in a worker of a pool the merge owns,
and the caller's thread merges; every decision happens under one
:class:`threading.Condition`. A source stops at its next item once
:attr:`ThreadMerge.stopping` is set; :meth:`ThreadMerge.close` ends the
requests still running through its ``stop_requests`` (their workers may be
blocked waiting for a row), and returns once every worker is back and the
pool is shut down.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, Unpack, final

from .merge import NEVER, Feed, MergeCore, MergeSettings, Sent, Wait, descending_key

__all__ = ["SyncSource", "ThreadMerge"]

T = TypeVar("T")


class SyncSource(Protocol[T]):
    """Runs one request of at most ``size`` items, pushing them with ``merge.push``."""

    def __call__(self, size: int, feed: Feed[T], merge: ThreadMerge[T], /) -> Sent: ...


@final
class ThreadMerge(MergeCore[T]):
    """Run sync sources in worker threads; the caller's thread merges and iterates batches.

    Everything the engine decides happens under one lock (a
    :class:`threading.Condition`). A feed's request is submitted to the pool
    when the engine grants it (:meth:`_release`); the worker pushes items
    under the lock, and at the request's end asks for the next one itself.

    Args:
        sources: One per source (see :class:`MergeCore` for the ordering contract).
        threads: Workers at most (the pool is the read's own), which are
            also the requests that can run at once.
        ordered, limit, budget: As for :class:`Merge`.
        stop_requests: Ends the requests running now, from the closing thread
            (the workers may be blocked inside them); returns whether every one
            has ended. Called by :meth:`close` while a request runs.
    """

    _sources_stream = False

    def __init__(
        self,
        sources: Sequence[SyncSource[T]],
        *,
        threads: int,
        stop_requests: Callable[[], bool] | None = None,
        **settings: Unpack[MergeSettings],
    ) -> None:
        super().__init__(len(sources), slots=threads, **settings)
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._sources = list(sources)
        self._threads = min(threads, max(1, len(sources)))
        self._cond = threading.Condition()
        self._waiting = False  # the consumer waits (see _consumer_waiting)
        self._running: set[int] = set()  # feeds with a request submitted or running
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._steps_iter: Iterator[list[T] | Wait] | None = None
        self._stop_requests = stop_requests
        if self.descending:
            # (Chosen once: the sources hand raw keys over, the merge orders descending.)
            self.push = self._push_descending  # type: ignore[method-assign]

    def _push_descending(self, feed: Feed[T], item: T, key: Any) -> None:
        """:meth:`push` for a descending merge: files ``descending_key(key)``."""
        ordered = descending_key(key)
        with self._cond:
            feed.items.append(item)
            feed.keys.append(ordered)
            if len(feed.keys) >= feed.wake_at:
                feed.wake()

    @property
    def stopping(self) -> bool:
        """True once sources should stop at their next item (limit met, closed, failed)."""
        return self._stopping

    def _consumer_waiting(self) -> bool:
        return self._waiting

    def _on_pause(self, feed: Feed[T], wake: Callable[[], None] | None) -> None:
        with self._cond:
            super()._on_pause(feed, wake)

    def push(self, feed: Feed[T], item: T, key: Any) -> None:
        """Called by a source, in its worker, for each item it reads."""
        with self._cond:
            feed.items.append(item)
            feed.keys.append(key)
            if len(feed.keys) >= feed.wake_at:
                feed.wake()

    def __iter__(self) -> ThreadMerge[T]:
        return self

    def __next__(self) -> list[T]:
        with self._cond:
            if self._closed:
                raise StopIteration
            if self._steps_iter is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._threads, thread_name_prefix="saltedtable-subscan"
                )
                self._first_round()
                self._steps_iter = self._steps()
                for feed in self._feeds:
                    self._release(feed)
            try:
                while True:
                    step = next(self._steps_iter)
                    if not isinstance(step, Wait):
                        return step
                    self._wait(step)
            except StopIteration:
                pass
        self.close()
        raise StopIteration

    def __enter__(self) -> ThreadMerge[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every source and wait until every worker is back.

        With ``stop_requests``, the requests running now are ended from here
        (a worker blocked inside one returns at once); otherwise each source
        stops at its next item. A request that has not started never starts.
        Should ``stop_requests`` report a request it could not end in time,
        the pool is shut down without waiting for that worker.

        Safe to call more than once; never raises a source's error.
        """
        with self._cond:
            self._closed = self._stopping = True
            self._cond.notify_all()
            pool, self._pool = self._pool, None
            busy = bool(self._running)
        if pool is not None:
            ended = True
            if busy and self._stop_requests is not None:
                ended = self._stop_requests()
            pool.shutdown(wait=ended, cancel_futures=True)

    def abandon(self) -> bool:
        """Always False: a sync stream dropped by its consumer is closed at once (see Merge)."""
        return False

    # -- the driver's part ---------------------------------------------------------

    def _wake(self) -> None:
        self._cond.notify_all()

    def _release(self, feed: Feed[T]) -> None:
        # Called with the lock held: start the feed's next request if the engine grants one.
        if feed.done or feed.index in self._running or self._pool is None:
            return
        size = self._demand(feed)
        if size is None:
            return  # released again when the consumer takes or grants
        if not size:
            self._source_done(feed)
            return
        self._start(feed, size)
        self._running.add(feed.index)
        self._pool.submit(self._run, feed, size)

    def _run(self, feed: Feed[T], size: int) -> None:
        source = self._sources[feed.index]
        try:
            sent = source(size, feed, self)
        except BaseException as exc:
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._stopping = True
                self._running.discard(feed.index)
                self._source_done(feed)
                if not self._running:
                    self._gone = True
            if not isinstance(exc, Exception):
                raise
            return
        with self._cond:
            self._running.discard(feed.index)
            self._end(feed, size, sent.pushed, sent.cut)
            if not sent.more or self._stopping:
                self._source_done(feed)
            else:
                self._release(feed)
            if not self._running and self._live == 0:
                self._gone = True
            self._cond.notify_all()

    def _wait(self, step: Wait) -> None:
        """Wait (the lock held) as the consumer loop asks; raise if the merge stopped."""
        if self._error is not None or self._closed:
            self._stopped()
        if step.batch is not None:
            for feed in step.feeds:
                feed.wake_at = step.batch
        timeout = self._wake_delay if step.batch is not None and step.batch > 1 else None
        self._waiting = True
        if self._pause_wakes:
            self._wake_pausers()
        try:
            self._cond.wait(timeout)
        finally:
            self._waiting = False
            for feed in step.feeds:
                feed.wake_at = NEVER
        if self._error is not None or self._closed:
            self._stopped()
