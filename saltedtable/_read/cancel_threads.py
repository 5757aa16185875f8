"""SyncRequest: end a sync Bigtable read's requests from another thread, at once.

Why from another thread (:class:`SyncRequest`, :func:`stop_sync_requests`): a worker
thread blocked in a request's next row cannot be told anything, and the sync
client returns no handle on an attempt's call before its first response (its
gRPC layer waits for that inside the call that makes the stream) while its
retry loop turns an ended attempt into a new one. So the closing thread
disarms the client's read operation (its next attempt raises before sending
anything) and cancels the gRPC call found on the worker's stack: the blocked
receive returns at once. (grpc.aio's leak of a cancelled receive is not known for
sync gRPC; saltedtable has not measured it there.)

The async client's streams are ended by another mechanism: :mod:`.cancel_asyncio`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

__all__ = ["SyncRequest", "client_operation", "stop_sync_requests", "thread_calls"]


class _RequestStopped(Exception):
    """Raised in a stopped sync request's next attempt, before it sends anything.

    Private on purpose: no retry predicate names it, so the client's retry loop
    ends with it instead of starting another attempt.
    """


class _Disarmed:
    """Stands in for the table of a stopped client read operation (see :meth:`SyncRequest.stop`)."""

    __slots__ = ()

    @property
    def client(self) -> Any:
        raise _RequestStopped("the read was left: no new attempt")


def client_operation(stream: object) -> Any:
    """The sync client's read operation behind a ``Table.read_rows_stream`` it returned, or None.

    The stream is the client's retry generator, not started yet; its ``target``
    is the bound ``_read_rows_attempt`` of the operation, which sends each
    attempt through the operation's ``target`` table.
    """
    frame = getattr(stream, "gi_frame", None)
    if frame is None:
        return None
    attempt = frame.f_locals.get("target")
    operation = getattr(attempt, "__self__", None)
    if getattr(attempt, "__name__", "") != "_read_rows_attempt" or not hasattr(operation, "target"):
        return None
    return operation


def thread_calls(ident: int) -> list[grpc.Call]:
    """The sync gRPC calls on the stack of thread ``ident`` now (the RPC it waits in, if any).

    The sync client offers no handle on an attempt's call before its first
    response arrives, and its retries make new ones; the worker's own stack
    always holds the call it is blocked in.
    """
    frame = sys._current_frames().get(ident)
    calls: list[grpc.Call] = []
    while frame is not None:
        for value in list(frame.f_locals.values()):
            # grpc's own call objects (a rendezvous is a Call and a Future), not
            # the client's wrappers of them (Calls whose cancel() may not work).
            is_call = isinstance(value, grpc.Call) and isinstance(value, grpc.Future)
            if is_call and all(value is not c for c in calls):
                calls.append(value)
        frame = frame.f_back
    return calls


class SyncRequest:
    """The ReadRows requests of one sync source, run by worker threads, which another thread ends.

    A worker brackets each request with :meth:`begin` and :meth:`end`, and hands
    the client's stream to :meth:`attach` before reading it. :meth:`stop`, from
    any thread, ends the request running now within milliseconds instead of at
    its next row or its attempt deadline: the client's operation is disarmed (its
    next attempt raises before sending anything, which no retry predicate
    retries), and the gRPC call the worker waits in is cancelled, so its blocked
    receive returns at once. A stopped source starts no request again.

    Args:
        wake: Called once when the source is stopped, to wake a worker that
            waits for something else first (the table's request slots).
        disarm: False: the client's operation is left alone (the table's
            ``client_internals`` switch); only the gRPC call is cancelled, and a
            stop that comes between attempts ends the next one as it appears.
    """

    __slots__ = ("_disarm", "_lock", "_operation", "_thread", "_wake", "stopped")

    def __init__(self, wake: Callable[[], None] | None = None, *, disarm: bool = True) -> None:
        self._wake = wake
        self._disarm = disarm
        self._lock = threading.Lock()
        self._thread: int | None = None
        self._operation: Any = None
        #: The read is ending: no new request, and the running one is being ended.
        self.stopped = False

    @property
    def running(self) -> bool:
        """Whether a worker is inside a request of this source now."""
        return self._thread is not None

    def is_stopped(self) -> bool:
        """Whether the source was stopped (the read is ending)."""
        return self.stopped

    def begin(self) -> bool:
        """In the worker, before a request; False: the source was stopped (send nothing)."""
        with self._lock:
            if self.stopped:
                return False
            self._thread = threading.get_ident()
            return True

    def attach(self, stream: object) -> bool:
        """In the worker, with the client's stream before its first row; False: stopped."""
        operation = client_operation(stream) if self._disarm else None
        with self._lock:
            self._operation = operation
            if self.stopped:
                _disarm(operation)
                return False
            return True

    def end(self) -> None:
        """In the worker, when the request is over (whatever the outcome)."""
        with self._lock:
            self._thread = None
            self._operation = None

    def stop(self) -> bool:
        """Stop the source; end its running request now. Returns whether one is still running."""
        with self._lock:
            first = not self.stopped
            self.stopped = True
            thread, operation = self._thread, self._operation
            _disarm(operation)
        if first and self._wake is not None:
            self._wake()
        if thread is None:
            return False
        for call in thread_calls(thread):
            call.cancel()  # a call that has ended ignores it
        return True


def _disarm(operation: Any) -> None:
    if operation is not None:
        operation.target = _Disarmed()


def stop_sync_requests(requests: Sequence[SyncRequest], *, within: float = 1.0) -> bool:
    """Stop every source in ``requests`` and wait up to ``within`` seconds for their requests.

    Stops again while it waits: an attempt that a worker was about to send when
    it was first stopped is cancelled as soon as it appears.

    Returns:
        Whether every request has ended.
    """
    deadline = time.monotonic() + within
    pause = 0.0005
    while True:
        running = [r for r in requests if r.stop()]
        if not running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(0.005, pause * 2)
        requests = running
