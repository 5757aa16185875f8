"""end_stream, cancel_rpc and stop_reads on fake streams built like the client library's.

A fake stream is a chain of layers (async generators, or class-based async iterators
that wrap one) over a :class:`FakeCall`, a ``grpc.aio.Call`` whose reads wait until a
message is pushed or the call is cancelled, as grpc.aio's do. The emulator tests prove
the same against real client streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from grpc import aio
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable._read.cancel_asyncio import cancel_rpc, end_stream, find_calls, stop_reads


class FakeCall(aio.Call):  # type: ignore[misc]
    """A grpc.aio call: ``read()`` waits for a pushed message; ``cancel()`` ends every read."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[int] = asyncio.Queue()
        self.cancels = 0
        self._done = False
        self._ended = asyncio.Event()

    async def read(self) -> int:
        """The next message; after cancel(), raise CancelledError as grpc.aio does."""
        getter = asyncio.ensure_future(self.messages.get())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait([getter, ended], return_when=asyncio.FIRST_COMPLETED)
        finally:
            getter.cancel()
            ended.cancel()
        if self._done:
            raise asyncio.CancelledError  # grpc.aio: a locally cancelled call ends its reader
        return getter.result()

    def cancel(self) -> bool:
        if self._done:
            return False
        self.cancels += 1
        self._done = True
        self._ended.set()
        return True

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._done

    def time_remaining(self) -> float | None:
        return None

    def add_done_callback(self, callback: Any) -> None:
        raise NotImplementedError

    async def initial_metadata(self) -> Any:
        raise NotImplementedError

    async def trailing_metadata(self) -> Any:
        raise NotImplementedError

    async def code(self) -> Any:
        raise NotImplementedError

    async def details(self) -> str:
        raise NotImplementedError

    async def wait_for_connection(self) -> None:
        raise NotImplementedError


class Wrapper:
    """A class-based async iterator around another stream (like a user's counting proxy)."""

    def __init__(self, inner: AsyncIterator[int], log: list[str], name: str) -> None:
        self._inner = inner
        self._log = log
        self._name = name

    def __aiter__(self) -> Wrapper:
        return self

    async def __anext__(self) -> int:
        return await self._inner.__anext__()

    async def aclose(self) -> None:
        self._log.append(self._name)
        await self._inner.aclose()  # type: ignore[attr-defined]


async def _bottom(call: FakeCall, log: list[str]) -> AsyncGenerator[int, None]:
    try:
        while True:
            yield await call.read()
    finally:
        log.append("bottom")


async def _layer(inner: AsyncIterator[int], log: list[str], name: str) -> AsyncGenerator[int, None]:
    try:
        async for item in inner:
            yield item
    finally:
        log.append(name)


def build(call: FakeCall, layers: list[str], log: list[str]) -> AsyncIterator[int]:
    """A stream of ``layers`` (outermost last) over ``call``; each logs its name when it ends."""
    stream: AsyncIterator[int] = _bottom(call, log)
    for i, kind in enumerate(layers):
        name = f"{kind}{i}"
        stream = _layer(stream, log, name) if kind == "gen" else Wrapper(stream, log, name)
    return stream


async def test_find_calls_sees_through_generators_and_wrappers() -> None:
    """The call under a chain of generators and wrapper objects is found (and only it)."""
    call = FakeCall()
    stream = build(call, ["gen", "wrap", "gen"], [])
    call.messages.put_nowait(1)
    assert await anext(stream) == 1
    assert find_calls(stream) == [call]


async def test_end_stream_cancels_the_call_and_closes_innermost_first() -> None:
    """end_stream between rows: one cancel, every layer ended, the innermost before the outer."""
    call, log = FakeCall(), []
    stream = build(call, ["gen", "gen", "gen"], log)
    call.messages.put_nowait(1)
    await anext(stream)
    await end_stream(stream)
    assert call.cancels == 1
    assert log == ["bottom", "gen0", "gen1", "gen2"]
    assert stream.ag_frame is None  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["gen", "wrap"]), min_size=0, max_size=6))
def test_end_stream_ends_any_chain_of_layers(layers: list[str]) -> None:
    """Any mix of generator and wrapper layers: one cancel, every generator and the outer end.

    (A wrapper in the middle is closed by nobody, as when the stream is closed without
    end_stream: ``async for`` does not close what it iterates.)
    """

    async def run() -> None:
        call, log = FakeCall(), []
        stream = build(call, layers, log)
        call.messages.put_nowait(7)
        assert await anext(stream) == 7
        await end_stream(stream)
        assert call.cancels == 1
        ended = {f"{kind}{i}" for i, kind in enumerate(layers) if kind == "gen"}
        for i in reversed(range(len(layers))):  # closing the outer wrapper closes what it wraps
            ended.add(f"{layers[i]}{i}")
            if layers[i] == "gen":
                break
        assert set(log) == {"bottom"} | ended
        assert log[0] == "bottom"

    asyncio.run(run())


async def test_end_stream_of_a_stream_that_never_started_starts_nothing() -> None:
    """A stream closed before its first row is just closed: its body (the RPC) never runs."""
    call, log = FakeCall(), []
    stream = build(call, ["gen"], log)
    await end_stream(stream)
    assert call.cancels == 0
    assert log == []  # no layer ever ran, so none had anything to clean up
    assert stream.ag_frame is None  # type: ignore[attr-defined]


async def test_end_stream_of_a_finished_stream_is_a_no_op() -> None:
    """A stream that has ended on its own is left as it is, its call untouched."""

    async def two() -> AsyncGenerator[int, None]:
        yield 1
        yield 2

    stream = two()
    assert [x async for x in stream] == [1, 2]
    await end_stream(stream)
    assert stream.ag_frame is None


async def test_end_stream_does_not_cancel_a_call_that_is_done() -> None:
    """The RPC already ended: no second cancel, the generators are still closed."""
    call, log = FakeCall(), []
    stream = build(call, ["gen"], log)
    call.messages.put_nowait(1)
    await anext(stream)
    call.cancel()
    await end_stream(stream)
    assert call.cancels == 1
    assert log == ["bottom", "gen0"]


async def test_end_stream_refuses_a_stream_another_task_iterates() -> None:
    """end_stream is for the stream's owner: a stream busy in another task is a RuntimeError."""
    call = FakeCall()
    stream = build(call, ["gen"], [])
    reader = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="another task"):
        await end_stream(stream)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_end_stream_without_a_call_cancels_a_pending_read() -> None:
    """A stream with no findable call still ends: a read that waits is cancelled (the fallback)."""
    waiting = asyncio.Event()
    seen: list[str] = []

    async def opaque() -> AsyncGenerator[int, None]:
        yield 1  # the rows it already had
        yield 2
        try:
            waiting.set()
            await asyncio.Event().wait()  # a server that sends nothing more
            yield 3
        except asyncio.CancelledError:
            seen.append("cancelled while waiting")
            raise

    stream = opaque()
    assert await anext(stream) == 1
    await end_stream(stream)
    assert waiting.is_set()
    assert seen == ["cancelled while waiting"]
    assert stream.ag_frame is None


async def test_cancel_rpc_reports_whether_it_cancelled() -> None:
    """cancel_rpc cancels a running call once, and says so; a stream without a call: False."""
    call = FakeCall()
    stream = build(call, ["wrap"], [])
    assert cancel_rpc(stream) is True
    assert cancel_rpc(stream) is False
    assert call.cancels == 1

    async def plain() -> AsyncGenerator[int, None]:
        yield 1

    assert cancel_rpc(plain()) is False


async def test_stop_reads_lets_the_pending_reads_finish_instead_of_cancelling_them() -> None:
    """Readers waiting in their streams leave them on their own once stop_reads returns."""
    calls = [FakeCall() for _ in range(3)]
    streams = [build(call, ["gen", "gen"], []) for call in calls]
    ended: list[str] = []

    async def read(stream: AsyncIterator[int]) -> None:
        try:
            async for _ in stream:
                pass
        except asyncio.CancelledError:
            ended.append("the read ended by the cancelled call")
            raise

    readers = [asyncio.ensure_future(read(s)) for s in streams]
    await asyncio.sleep(0)
    await stop_reads(streams)
    assert all(call.cancels == 1 for call in calls)
    assert not any(s.ag_running for s in streams)  # type: ignore[attr-defined]
    await asyncio.wait(readers)
    assert ended == ["the read ended by the cancelled call"] * 3
    assert all(r.cancelled() for r in readers)  # no task.cancel(): grpc's CancelledError


async def test_stop_reads_gives_up_after_within() -> None:
    """A reader stuck in something that ignores the cancelled call is waited for at most within."""
    call = FakeCall()

    async def stuck(call: FakeCall) -> AsyncGenerator[int, None]:
        with contextlib.suppress(asyncio.CancelledError):
            await call.read()
        await asyncio.Event().wait()  # ignores the cancellation it was handed
        yield 1

    stream = stuck(call)
    reader = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await stop_reads([stream], within=0.05)
    assert call.cancels == 1
    assert 0.05 <= loop.time() - started < 1
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_stop_reads_does_not_wait_for_a_stream_without_a_call() -> None:
    """No call found under a stream (a fake, another client): its reader is not waited for."""

    async def plain() -> AsyncGenerator[int, None]:
        await asyncio.Event().wait()
        yield 1

    stream = plain()
    reader = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await stop_reads([stream], within=5.0)
    assert loop.time() - started < 0.5
    assert stream.ag_running  # still inside: left to the caller's cancellation
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_stop_reads_grace_lets_readers_leave_at_their_next_row() -> None:
    """A reader told to stop leaves at its next row within the grace: its call is not cancelled."""
    call = FakeCall()
    stream = build(call, ["gen"], [])
    stop = False
    seen: list[str] = []

    async def read() -> None:
        async for _ in stream:
            seen.append("row")
            if stop:
                break
        await end_stream(stream)  # the owner, between rows
        seen.append("ended")

    reader = asyncio.ensure_future(read())
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, call.messages.put_nowait, 1)  # the row the pending read waits for
    stop = True
    started = loop.time()
    await stop_reads([stream], grace=1.0)
    assert loop.time() - started < 0.5  # it stopped waiting once nobody was in the stream
    await reader
    assert seen == ["row", "ended"]
    assert call.cancels == 1  # by end_stream, with no read pending; stop_reads left it alone


async def test_stop_reads_cancels_the_call_of_a_reader_no_row_reaches() -> None:
    """No row within the grace: the call is cancelled under the waiting reader, who leaves."""
    call = FakeCall()
    stream = build(call, ["gen", "gen"], [])
    reader = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await stop_reads([stream], grace=0.05)
    assert 0.05 <= loop.time() - started < 0.5
    assert call.cancels == 1
    assert not stream.ag_running  # type: ignore[attr-defined]
    with pytest.raises(asyncio.CancelledError):
        await reader
