"""SaltedTable (sync) under stalls, through the fault proxy: leaving early, slots, the guard's wait.

The proxy (``emulator/faultproxy.py``) is asyncio; here it runs on an event loop in a
thread of its own, between the sync data client and the session's emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.api_core.exceptions import Cancelled, DeadlineExceeded, ServiceUnavailable
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import SaltedTable, SaltScheme
from saltedtable._read.cancel_threads import client_operation
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    INSTANCE,
    PROJECT,
    Emulator,
    create_table,
    delete_table,
)
from tests.emulator.test_faults import load_faultproxy

SCHEME = SaltScheme(16)
KEYS = [b"user%05d" % i for i in range(6000)]
#: Generous: what a hang would blow through, far above what a fixed stop takes.
WITHIN = 10.0

fp = load_faultproxy()


class ThreadProxy:
    """The fault proxy on an event loop in its own thread; its methods called from any thread."""

    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy: Any = self.call(lambda: fp.FaultProxy("127.0.0.1", port).start())

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def close(self) -> None:
        self.call(self.proxy.aclose)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


@pytest.fixture
def proxy(emulator: Emulator) -> Iterator[ThreadProxy]:
    """A fault proxy in front of the session's emulator."""
    running = ThreadProxy(emulator.port)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def table_id(emulator: Emulator) -> Iterator[str]:
    """A 16-bucket table of 6,000 rows of ~300 bytes, written directly (no proxy).

    Once for the module: its tests only read it.
    """
    made = f"sync-faults-{os.urandom(6).hex()}"
    create_table(emulator.address, made, ["cf"])
    try:
        with client_at(emulator.address) as client:
            table = SaltedTable.from_client(client, INSTANCE, made, SCHEME)
            for start in range(0, len(KEYS), 2000):
                table.bulk_mutate_rows(
                    [
                        RowMutationEntry(k, SetCell("cf", b"q", b"v" * 300))
                        for k in KEYS[start : start + 2000]
                    ]
                )
        yield made
    finally:
        delete_table(emulator.address, made, missing_ok=True)


class client_at:
    """A sync data client connected to ``address`` (the environment restored at once)."""

    def __init__(self, address: str) -> None:
        saved = os.environ.get(EMULATOR_HOST_ENV)
        os.environ[EMULATOR_HOST_ENV] = address
        try:
            self.client = BigtableDataClient(project=PROJECT)
        finally:
            if saved is None:
                del os.environ[EMULATOR_HOST_ENV]
            else:
                os.environ[EMULATOR_HOST_ENV] = saved

    def __enter__(self) -> BigtableDataClient:
        return self.client

    def __exit__(self, *exc_info: object) -> None:
        self.client.close()


def open_calls() -> list[object]:
    """gRPC calls of the sync client that are still running."""
    gc.collect()
    calls = [o for o in gc.get_objects() if isinstance(o, grpc.Call)]
    return [c for c in calls if getattr(c, "is_active", lambda: False)()]


def subscan_threads() -> list[threading.Thread]:
    """saltedtable's worker threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("saltedtable-subscan")]


def in_thread(fn: Callable[[], Any]) -> threading.Event:
    """Run ``fn`` in a daemon thread; the event is set when it returns (or raises)."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


# -- R2: leaving a stream early while the server stalls ------------------------------------


def test_the_installed_client_shows_its_read_operation() -> None:
    """What SyncRequest disarms: the operation behind a sync stream, found before it runs."""
    with client_at("127.0.0.1:1") as client:  # nothing is sent
        stream = client.get_table(INSTANCE, "t").read_rows_stream(ReadRowsQuery(limit=1))
        operation = client_operation(stream)
        assert operation is not None
        assert hasattr(operation, "target")
        stream.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("leave", "retryable"),
    [
        ("close", None),
        ("del", None),
        # Cancelled among the retryable errors: the client would retry the cancelled attempt.
        ("close", (Cancelled, DeadlineExceeded, ServiceUnavailable)),
    ],
)
def test_leaving_a_stalled_sync_stream_returns_at_once_and_leaves_nothing(
    proxy: ThreadProxy, table_id: str, leave: str, retryable: Any
) -> None:
    """break + close() (or del) on a stream whose server stalls mid-request: no wait for deadlines.

    Found by differential fuzzing (issue 26, R2): close() waited for every worker, each
    blocked until its attempt deadline, and the client's retries made new attempts, so
    leaving took the whole operation_timeout. Here the attempt deadline is 30 s.
    """
    with client_at(proxy.proxy.address) as client:
        table = SaltedTable.from_client(client, INSTANCE, table_id, SCHEME)
        table.read_row(KEYS[0])  # connected; the guard has read the record
        timeouts: dict[str, Any] = {"operation_timeout": 120, "attempt_timeout": 30}
        if retryable is not None:
            timeouts["retryable_errors"] = retryable
        stream = table.read_rows_stream(ReadRowsQuery(), ordered=False, **timeouts)
        # Requests are mid-stream then: the first pages (64 rows of each of 16 buckets) are
        # about 340 kB, and a read whose consumer left asks little more.
        proxy.call(lambda: proxy.proxy.stall_after(60_000))
        first = next(stream)
        assert first.row_key in KEYS
        # The read asks on for its first pages (2 requests at a time) until the stall.
        deadline = time.monotonic() + 30
        while not proxy.call(lambda: proxy.proxy.stalled):
            assert time.monotonic() < deadline, "the read's requests never reached the stall"
            time.sleep(0.01)
        assert subscan_threads(), "the read's workers should be running"

        def leave_it() -> None:
            nonlocal stream
            if leave == "close":
                stream.close()  # type: ignore[attr-defined]
            del stream
            gc.collect()

        assert in_thread(leave_it).wait(WITHIN), "leaving the stream waited for the stalled server"
        # Still stalled: nothing has ended by itself.
        assert proxy.call(lambda: proxy.proxy.stalled)
        assert not subscan_threads()
        assert not open_calls(), "a sub-scan's RPC is still running"
        time.sleep(0.3)  # a retry the client would have started by now
        assert not open_calls(), "a sub-scan's RPC was started again"
        proxy.call(proxy.proxy.clear)


# -- R4: waiting for another operation's guard read -------------------------------------


@pytest.mark.parametrize("server_back", [False, True], ids=["stalled", "back-after-2.5s"])
def test_a_sync_operation_waiting_for_anothers_guard_read_keeps_to_its_own_timeout(
    proxy: ThreadProxy, table_id: str, server_back: bool
) -> None:
    """B (1 s) starts while A's (8 s) guard read stalls: DeadlineExceeded at B's own deadline.

    Found by differential fuzzing (issue 26, R4): B waited on the guard's lock for as long
    as A's read took, then had a fresh budget (it succeeded once the server came back).
    """
    with client_at(proxy.proxy.address) as client:
        client.get_table(INSTANCE, table_id).read_row(b"connect first")
        table = SaltedTable.from_client(client, INSTANCE, table_id, SCHEME)
        proxy.call(lambda: proxy.proxy.stall(2.5 if server_back else None))

        def first() -> None:
            with contextlib.suppress(DeadlineExceeded):
                table.read_row(KEYS[1], operation_timeout=8)

        a_done = in_thread(first)
        time.sleep(0.1)
        outcome: list[BaseException | None] = []

        def second() -> None:
            try:
                table.read_row(KEYS[2], operation_timeout=1.0)
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)

        start = time.monotonic()
        assert in_thread(second).wait(WITHIN)
        elapsed = time.monotonic() - start
        proxy.call(proxy.proxy.clear)
        assert a_done.wait(WITHIN)
    assert len(outcome) == 1
    assert isinstance(outcome[0], DeadlineExceeded), repr(outcome[0])
    assert elapsed < 5, f"B took {elapsed:.2f}s against an operation_timeout of 1 s"
