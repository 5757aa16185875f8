"""end_stream: end a Bigtable ``read_rows_stream`` early without leaking native memory.

Two ways to stop a client stream early are wrong for a long-running process:

* ``aclose()`` alone closes the Python generators but not the RPC: the server
  keeps streaming into the client until the attempt deadline (grpcio >= 1.83
  never collects the abandoned call either, grpc/grpc#43462).
* Cancelling a task while it waits inside ``__anext__`` ends the RPC, but
  grpc.aio releases a receive's C resources only in the coroutine that awaited
  it (grpc/grpc#43360). gRPC core still completes the batch, with the message
  it already held for it; nobody frees the ``grpc_op`` array or that message,
  whose buffer keeps the transport's read buffer alive. That costs tens of
  kilobytes of native memory per stream, for good.

A receive batch is only in flight while somebody awaits the stream. The stream's
owner, between rows, has none in flight, so :func:`end_stream` cancels the gRPC
call itself at that point (the call's status batch then completes normally and
is released), closes the generators that wrapped it from the innermost out (so
the client library's metrics see the attempt end while it is still open), and
returns: the RPC has ended and nothing was leaked.

The call is found by walking the stream's generator frames (the client library
keeps it in a local of its innermost generator). When no call can be found,
:func:`end_stream` falls back to cancelling a pending read, which ends the RPC
at the cost of that leak; the unit and emulator tests pin the discovery for the
installed client library so that a change there is seen.

Streams that other tasks are reading (a fan-out's readers, waiting for rows)
must be left by those readers before they are cancelled: a closer tells them
to stop at their next row (they then end their streams with :func:`end_stream`)
and waits for that with :func:`stop_reads`, which cancels the RPC under a
reader that no message reaches in time (see :func:`.sources_asyncio.stop_sources`).

The sync client's requests are ended by another mechanism: :mod:`.cancel_threads`.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import time
import types
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final

from grpc import aio

__all__ = [
    "STOP_GRACE",
    "cancel_rpc",
    "end_stream",
    "find_calls",
    "stop_reads",
]

#: Seconds :func:`stop_reads` gives readers to leave their streams by themselves
#: (at their next row) before it cancels the RPCs under them.
STOP_GRACE: Final = 0.05

#: Objects looked at while searching a stream for its call. The client's chain
#: (retry, row merger, chunk stream, error and metrics wrappers: seven
#: generators; saltedtable's reads, :mod:`saltedtable._async.chunks`, one fewer) takes about a
#: hundred; the bound keeps a stream that wraps something huge cheap to end.
_SEARCH_BUDGET: Final = 400


def _is_async_iterator(obj: object) -> bool:
    return hasattr(type(obj), "__anext__")


def _walk(stream: object) -> tuple[list[aio.Call], list[types.AsyncGeneratorType[Any, Any]]]:
    """The gRPC calls and the async generators reachable from ``stream``, outermost first.

    Only frames of async generators and coroutines, and the attributes of async
    iterator objects, are followed: what the stream is built from, not the table
    or client it reads through.
    """
    calls: list[aio.Call] = []
    generators: list[types.AsyncGeneratorType[Any, Any]] = []
    seen: set[int] = set()
    queue: list[object] = [stream]
    budget = _SEARCH_BUDGET
    while queue and budget > 0:
        budget -= 1
        obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, aio.Call):
            calls.append(obj)
            continue  # what a call holds is grpc's, not the stream's
        if isinstance(obj, types.AsyncGeneratorType):
            generators.append(obj)
            queue.extend(gc.get_referents(obj))  # its frame's locals and value stack
        elif isinstance(obj, types.CoroutineType):
            queue.extend(gc.get_referents(obj))
        elif _is_async_iterator(obj):
            for ref in gc.get_referents(obj):
                # An instance's __dict__ (or its slot values directly).
                queue.extend(ref.values() if isinstance(ref, dict) else (ref,))
    return calls, generators


def find_calls(stream: object) -> list[aio.Call]:
    """The grpc.aio calls that ``stream`` (a read stream, or a wrapper of one) reads from."""
    return _walk(stream)[0]


def cancel_rpc(stream: object) -> bool:
    """Cancel the RPC under ``stream`` now, without closing the stream.

    Safe while another task waits in the stream: its pending receive then
    completes (with a last message or the cancellation) instead of being
    dropped, and the stream ends with ``asyncio.CancelledError`` in that task.

    Returns:
        Whether a call still running was found and cancelled.
    """
    cancelled = False
    for call in find_calls(stream):
        if not call.done():
            call.cancel()
            cancelled = True
    return cancelled


async def stop_reads(
    streams: Iterable[object], *, grace: float = STOP_GRACE, within: float = 1.0
) -> None:
    """End the RPCs under ``streams``, which other tasks may be reading, without a leak.

    For a closer about to cancel the tasks that read ``streams`` (a fan-out's
    readers) and that has already told those readers to stop at their next
    row. A reader that leaves its stream by itself between rows has no receive
    in flight and ends its stream with :func:`end_stream`: nothing leaks. So
    this first waits up to ``grace`` for that. A reader still inside after it
    (no message came) has its RPC cancelled under it: the pending receive then
    completes and the reader leaves (grpc.aio raises ``asyncio.CancelledError``
    in it), which keeps only grpc.aio's small per-batch array (grpc/grpc#43360)
    instead of the whole receive. This waits up to ``within`` for those readers;
    cancelling them afterwards leaks nothing more. Streams whose call cannot be
    found are not waited for after ``grace``: their readers are left to the
    closer's cancellation.

    Args:
        streams: Open read streams (or wrappers of them), possibly being iterated.
        grace: How long (seconds) readers may take to leave their streams by
            themselves before their RPCs are cancelled under them.
        within: The longest it then waits (seconds) for them to leave.
    """
    found = [(stream, _generators(stream)) for stream in streams]
    pending = [(stream, gens) for stream, gens in found if _inside(gens)]
    if pending and grace > 0:
        await _until(lambda: not any(_inside(gens) for _, gens in pending), grace)
    waiting: list[types.AsyncGeneratorType[Any, Any]] = []
    for stream, gens in pending:
        if not _inside(gens):
            continue
        calls, generators = _walk(stream)
        live = [call for call in calls if not call.done()]
        for call in live:
            call.cancel()
        if live:
            waiting += generators
    if waiting:
        await _until(lambda: not _inside(waiting), within)


def _generators(stream: object) -> list[types.AsyncGeneratorType[Any, Any]]:
    if isinstance(stream, types.AsyncGeneratorType):
        return [stream]
    return _walk(stream)[1]


def _inside(generators: list[types.AsyncGeneratorType[Any, Any]]) -> bool:
    """Whether a task is inside any of ``generators`` now (waiting for its next item)."""
    return any(g.ag_running for g in generators)


async def _until(done: Callable[[], bool], limit: float) -> None:
    """Poll ``done`` until it holds, for ``limit`` seconds at most."""
    deadline = time.monotonic() + limit
    pause = 0.0  # one loop turn first: what ends the wait is usually already queued
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(pause)
        pause = min(0.002, pause + 0.0005)


def _state(generator: types.AsyncGeneratorType[Any, Any]) -> str:
    getstate = getattr(inspect, "getasyncgenstate", None)  # Python >= 3.12
    if getstate is not None:
        return str(getstate(generator))
    if generator.ag_frame is None:
        return "AGEN_CLOSED"
    if generator.ag_running:
        return "AGEN_RUNNING"
    # Python 3.11: a generator that never ran has not left its first instruction.
    return "AGEN_CREATED" if generator.ag_frame.f_lasti <= 0 else "AGEN_SUSPENDED"


async def end_stream(stream: AsyncIterator[Any]) -> None:
    """End an open ``read_rows_stream`` early: its RPC cancelled and its generators closed.

    Call it from the task that owns the stream, between rows (not while another
    task iterates it). When it returns the RPC has ended; no receive was in
    flight when it was cancelled, so grpc.aio releases everything it allocated.
    A stream that has finished, or never started, is just closed.

    Args:
        stream: What ``TableAsync.read_rows_stream`` returned, or an async
            iterator wrapping it (anything with ``aclose``).

    Raises:
        RuntimeError: Another task is iterating the stream.
    """
    if isinstance(stream, types.AsyncGeneratorType):
        state = _state(stream)
        if state == "AGEN_RUNNING":
            raise RuntimeError("end_stream: another task is iterating this stream")
        if state in ("AGEN_CLOSED", "AGEN_CREATED"):
            await stream.aclose()  # finished, or no RPC was ever started
            return
    calls, generators = _walk(stream)
    if not calls:
        # Nothing found to cancel directly: end the RPC by cancelling a pending read.
        await _cancel_pending_read(stream)
        return
    for call in calls:
        if not call.done():
            call.cancel()
    # Innermost first: each generator's cleanup runs while the ones around it
    # are still open (the client's metrics wrapper records the cancelled
    # attempt's status then, instead of after its operation has ended).
    for generator in reversed(generators):
        if _state(generator) == "AGEN_SUSPENDED":
            await generator.aclose()
    await _aclose(stream)


async def _aclose(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def _drain_until_waiting(entered: asyncio.Event, stream: AsyncIterator[Any]) -> None:
    entered.set()  # wakes the canceller only once this task waits or ends
    async for _ in stream:
        pass


async def _cancel_pending_read(stream: AsyncIterator[Any]) -> None:
    """End the RPC of a stream whose call cannot be found: cancel a read that waits.

    ``aclose()`` alone would leave the RPC running. The stream may first hand out
    rows it has already received without waiting, so a task drains those until
    it has to wait (or the stream ends), and is cancelled there. (This is the
    cancellation grpc/grpc#43360 leaks on; used only when there is no other way.)
    """
    entered = asyncio.Event()
    task = asyncio.get_running_loop().create_task(_drain_until_waiting(entered, stream))
    await entered.wait()
    # The task has now either finished or is suspended inside the stream (its
    # only await): cancelling it cancels the request.
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: the stream had ended or failed on its own
    await _aclose(stream)
