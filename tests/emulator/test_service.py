"""examples/service.py end to end: a real uvicorn server, a real HTTP client, the real emulator.

The server runs in-process on a free loopback port. Its Bigtable table is wrapped in
:class:`ProbeTable`, a delegating proxy that records every ``read_rows_stream`` generator and
how it ended, so a test can prove that a client hanging up mid-scan cancelled every sub-scan.
"""

from __future__ import annotations

import asyncio
import base64
import collections.abc
import contextlib
import gc
import importlib.util
import json
import logging
import sys
import time
import typing
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from google.api_core.exceptions import ServiceUnavailable
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row

from saltedtable import SaltedTableAsync, SaltScheme, TableLike
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table

MakeTable = Callable[..., str]

SERVICE_PATH = Path(__file__).resolve().parents[2] / "examples" / "service.py"
BUCKETS = 4
#: Rows for the scans that must need a second page in every bucket (first pages hold 100).
MANY = 800


def _load_service() -> ModuleType:
    spec = importlib.util.spec_from_file_location("saltedtable_example_service", SERVICE_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


service = _load_service()


# -- the probe -----------------------------------------------------------------------


@dataclass
class StreamRecord:
    """One ``read_rows_stream`` generator: its query, rows handed out, and how it ended.

    ``end`` is None while open, else ``exhausted`` (the server ended it), ``cancelled`` (a
    pending read was cancelled), ``error``, ``closed`` (closed after its last row) or
    ``abandoned`` (closed between rows while rows could remain, with no read cancelled).
    """

    query: ReadRowsQuery
    rows: int = 0
    end: str | None = None


class ProbeTable:
    """A ``TableLike`` that delegates to a real ``TableAsync`` and watches its read streams.

    ``stall_from``: streams with this index or later wait before their first row until
    cancelled. ``fail_from``: they fail after ``fail_rows`` rows (default: before their
    first), as a Bigtable error would, once ``fail_gate`` (if any) is set.
    """

    def __init__(self, inner: TableLike) -> None:
        self._inner = inner
        self.streams: list[StreamRecord] = []
        self.stall_from: int | None = None
        self.fail_from: int | None = None
        self.fail_gate: anyio.Event | None = None
        self.fail_rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
        """Open the real stream and hand out a recording generator over it."""
        inner = await self._inner.read_rows_stream(query, **kwargs)
        index = len(self.streams)
        record = StreamRecord(query)
        self.streams.append(record)
        stall = self.stall_from is not None and index >= self.stall_from
        fail = self.fail_from is not None and index >= self.fail_from
        return self._watch(inner, record, stall=stall, fail=fail)

    async def _watch(
        self, inner: Any, record: StreamRecord, *, stall: bool, fail: bool
    ) -> AsyncGenerator[Row, None]:
        async with aclosing(inner):
            try:
                if fail:
                    for _ in range(self.fail_rows):
                        yield await anext(inner)
                    if self.fail_gate is not None:
                        await self.fail_gate.wait()
                    raise ServiceUnavailable("injected by ProbeTable")
                if stall:
                    await anyio.sleep_forever()
                while True:
                    try:
                        row = await anext(inner)
                    except StopAsyncIteration:
                        record.end = "exhausted"
                        return
                    record.rows += 1
                    yield row
            except GeneratorExit:
                done = record.query.limit and record.rows >= record.query.limit
                record.end = "closed" if done else "abandoned"
                raise
            except anyio.get_cancelled_exc_class():
                record.end = "cancelled"
                raise
            except Exception:
                record.end = "error"
                raise

    def ends(self) -> dict[str | None, int]:
        """How many streams ended each way (None: still open)."""
        counts: dict[str | None, int] = {}
        for record in self.streams:
            counts[record.end] = counts.get(record.end, 0) + 1
        return counts


# -- the server ----------------------------------------------------------------------


class _Server(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers to pytest."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Served:
    """A running service: its HTTP client, server, probe and table."""

    http: httpx.AsyncClient
    server: uvicorn.Server
    table_id: str
    probes: list[ProbeTable] = field(default_factory=list)

    @property
    def probe(self) -> ProbeTable:
        """The probe around the app's table (one per app lifetime)."""
        assert len(self.probes) == 1
        return self.probes[0]


@pytest.fixture
async def served(make_table: MakeTable) -> AsyncIterator[Served]:
    """The service on a free 127.0.0.1 port over a fresh table, shut down after the test."""
    table_id = make_table()
    probes: list[ProbeTable] = []

    def wrap(table: TableLike) -> TableLike:
        probe = ProbeTable(table)
        probes.append(probe)
        return probe

    settings = service.Settings(project=PROJECT, instance=INSTANCE, table=table_id, buckets=BUCKETS)
    config = uvicorn.Config(
        service.create_app(settings, wrap_table=wrap),
        host="127.0.0.1",
        port=0,
        http="h11",
        ws="none",
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        with anyio.fail_after(10):
            while not server.started:
                if task.done():
                    raise RuntimeError(f"uvicorn did not start: {task.exception()!r}")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=10, trust_env=False
        ) as http:
            yield Served(http, server, table_id, probes)
    finally:
        server.should_exit = True
        with anyio.fail_after(15):
            await task


async def _eventually(check: Callable[[], None], within: float = 5.0) -> None:
    """Poll ``check`` until it stops raising AssertionError, or re-raise it after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.02)


def _assert_idle(state: Any) -> None:
    assert not state.tasks, f"request tasks still running: {state.tasks}"


async def _write_many(data_client: BigtableDataClientAsync, table_id: str) -> None:
    """Write MANY rows ``ev#00000``... with the service's scheme (about 200 per bucket)."""
    keys = [f"ev#{i:05d}".encode() for i in range(MANY)]
    table = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(BUCKETS))
    async with table:
        await table.bulk_mutate_rows(
            [RowMutationEntry(key, SetCell("cf", "n", key[3:])) for key in keys]
        )


async def _scan_lines(http: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    async with http.stream("GET", "/scan", params=params) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) async for line in response.aiter_lines()]


# -- point reads and writes ----------------------------------------------------------


async def test_put_then_get_row_round_trips_through_salted_keys(
    served: Served, data_client: BigtableDataClientAsync
) -> None:
    """PUT writes a cell under the salted key; GET returns it as JSON (text or base64); 404."""
    http = served.http
    put = await http.put("/rows/user1%23a", json={"family": "cf", "qualifier": "q", "value": "hé"})
    assert put.status_code == 204
    binary = base64.b64encode(b"\xff\x00").decode()
    put = await http.put(
        "/rows/user1%23b", json={"family": "cf", "qualifier": "raw", "value_b64": binary}
    )
    assert put.status_code == 204

    got = await http.get("/rows/user1%23a")
    assert got.status_code == 200
    body = got.json()
    assert body["key"] == "user1#a"
    [cell] = body["cells"]
    assert (cell["family"], cell["qualifier"], cell["value"]) == ("cf", "q", "hé")
    assert isinstance(cell["timestamp_micros"], int)
    [cell] = (await http.get("/rows/user1%23b")).json()["cells"]
    assert cell["value_b64"] == binary
    assert "value" not in cell

    missing = await http.get("/rows/user1%23zzz")
    assert missing.status_code == 404
    assert missing.json() == {"error": "row not found", "key": "user1#zzz"}

    # Bigtable holds the salted physical key, not the logical one.
    raw = data_client.get_table(INSTANCE, served.table_id)
    try:
        assert await raw.read_row(b"user1#a") is None
        physical = await raw.read_row(SaltScheme(BUCKETS).salt_key(b"user1#a"))
        assert physical is not None
        assert physical.cells[0].value == "hé".encode()
    finally:
        await raw.close()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1]",
        b'{"qualifier": "q", "value": "v"}',
        b'{"family": "", "qualifier": "q", "value": "v"}',
        b'{"family": "cf", "value": "v"}',
        b'{"family": "cf", "qualifier": "q", "value": "v", "value_b64": "dg=="}',
        b'{"family": "cf", "qualifier": "q", "value": 3}',
        b'{"family": "cf", "qualifier": "q", "value_b64": "***"}',
    ],
)
async def test_bad_put_body_is_400(served: Served, body: bytes) -> None:
    """A PUT body that is not one well-formed cell is refused with a 400 JSON error."""
    response = await served.http.put("/rows/k", content=body)
    assert response.status_code == 400
    assert "error" in response.json()


# -- scans ---------------------------------------------------------------------------


async def test_scan_streams_rows_in_logical_order_and_exactly_limit(served: Served) -> None:
    """Rows written by PUT come back as NDJSON: all of a prefix in key order, or exactly limit."""
    keys = [f"user{u}#{t:03d}" for u in (1, 2, 3) for t in range(15)]

    async def put(key: str) -> None:
        body = {"family": "cf", "qualifier": "event", "value": f"click {key}"}
        response = await served.http.put(f"/rows/{key.replace('#', '%23')}", json=body)
        assert response.status_code == 204

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(put, key)
    user2 = sorted(k for k in keys if k.startswith("user2#"))

    rows = await _scan_lines(served.http, prefix="user2#")
    assert [row["key"] for row in rows] == user2
    assert rows[0]["cells"][0]["value"] == f"click {user2[0]}"

    rows = await _scan_lines(served.http, prefix="user2#", limit="7")
    assert [row["key"] for row in rows] == user2[:7]

    rows = await _scan_lines(served.http, prefix="user", limit="20")
    assert [row["key"] for row in rows] == sorted(keys)[:20]

    rows = await _scan_lines(served.http, prefix="user", limit="20", ordered="false")
    got = [row["key"] for row in rows]
    assert len(got) == len(set(got)) == 20
    assert set(got) <= set(keys)

    assert await _scan_lines(served.http, prefix="nobody#") == []
    assert served.probe.ends().keys() <= {"exhausted"}


@pytest.mark.parametrize(
    "query",
    [
        "",
        "limit=5",
        "prefix=a&limit=0",
        "prefix=a&limit=-1",
        "prefix=a&limit=abc",
        "prefix=a&limit=1.5",
        "prefix=a&limit=",
        "prefix=a&limit=99999999999999999999",
        "prefix=a&ordered=maybe",
    ],
)
async def test_bad_scan_input_is_400(served: Served, query: str) -> None:
    """A missing prefix, a limit that is not a positive int or a bad ordered flag is a 400."""
    response = await served.http.get(f"/scan?{query}")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert "error" in response.json()
    assert served.probe.streams == []


async def test_client_disconnect_mid_scan_cancels_every_subscan(
    served: Served, data_client: BigtableDataClientAsync, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that reads two lines and hangs up: every sub-scan is cancelled, no task leaks."""
    await _write_many(data_client, served.table_id)
    http, probe, state = served.http, served.probe, served.server.server_state
    # Warm up (channel, pooled connection), then take the tasks that belong to the idle server.
    assert len(await _scan_lines(http, prefix="ev#", limit="3")) == 3
    await _eventually(lambda: _assert_idle(state))
    baseline = set(asyncio.all_tasks())

    # First pages (one per bucket) flow; every later page stalls as a pending read.
    stall_from = probe.stall_from = len(probe.streams) + BUCKETS
    async with http.stream("GET", "/scan", params={"prefix": "ev#"}) as response:
        assert response.status_code == 200
        got: list[str] = []
        async with aclosing(response.aiter_lines()) as lines:
            async for line in lines:
                got.append(json.loads(line)["key"])
                if len(got) == 2:
                    break
    assert got == ["ev#00000", "ev#00001"]

    def all_ended() -> None:
        ends = probe.ends()
        assert None not in ends, f"streams still open: {ends}"
        assert "abandoned" not in ends, f"streams closed without cancelling: {ends}"
        _assert_idle(state)
        leaked = {t for t in asyncio.all_tasks() if not t.done()} - baseline
        assert not leaked, f"tasks left behind: {leaked}"

    await _eventually(all_ended)
    # Every sub-scan either finished or was cancelled while it waited for rows (an open
    # stream, or a stalled later page): at least one was still running when the client left.
    ends = [record.end for record in probe.streams[stall_from - BUCKETS :]]
    assert set(ends) <= {"exhausted", "cancelled"}, ends
    assert "cancelled" in ends, f"no sub-scan was running when the client hung up: {ends}"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_missing_table_is_502_everywhere(served: Served, emulator: Emulator) -> None:
    """Bigtable errors (here: the table is gone) answer 502 with the error type, for every route."""
    delete_table(emulator.address, served.table_id)
    cell = {"family": "cf", "qualifier": "q", "value": "v"}
    responses = [
        await served.http.get("/rows/a"),
        await served.http.put("/rows/a", json=cell),
        await served.http.get("/scan", params={"prefix": "a"}),
    ]
    assert [r.status_code for r in responses] == [502, 502, 502]
    assert [r.json()["type"] for r in responses] == ["NotFound", "NotFound", "NotFound"]
    assert all("not found" in r.json()["error"] for r in responses)


async def test_subscan_failure_before_first_row_is_502(served: Served) -> None:
    """A scan whose sub-scans fail before any row is sent answers 502 with a JSON error."""
    await served.http.put("/rows/a", json={"family": "cf", "qualifier": "q", "value": "v"})
    served.probe.fail_from = 0
    response = await served.http.get("/scan", params={"prefix": ""})
    assert response.status_code == 502
    body = response.json()
    assert body["type"] == "ServiceUnavailable"
    assert "injected by ProbeTable" in body["error"]
    assert None not in served.probe.ends()


async def test_subscan_failure_mid_stream_aborts_the_response(
    served: Served, data_client: BigtableDataClientAsync, caplog: pytest.LogCaptureFixture
) -> None:
    """A sub-scan failing after rows were sent: an error line, then no clean end of body."""
    await _write_many(data_client, served.table_id)
    # Every sub-scan hands out a few rows, then fails once the client holds a row.
    served.probe.fail_from = 0
    served.probe.fail_rows = 3
    gate = served.probe.fail_gate = anyio.Event()
    lines: list[dict[str, Any]] = []

    async def read_all() -> None:
        async with served.http.stream("GET", "/scan", params={"prefix": "ev#"}) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                lines.append(json.loads(line))
                gate.set()

    with pytest.raises(httpx.RemoteProtocolError):
        await read_all()
    assert lines, "rows of the first pages came before the failure"
    *rows, last = lines
    assert [row["key"] for row in rows] == [f"ev#{i:05d}" for i in range(len(rows))]
    assert last["type"] == "ServiceUnavailable"
    assert "injected by ProbeTable" in last["error"]
    await _eventually(lambda: _assert_idle(served.server.server_state))
    assert None not in served.probe.ends()
    assert "ScanAborted" in caplog.text


# -- the response class on its own ---------------------------------------------------


async def test_ndjson_response_closes_scan_when_cancelled_while_sending() -> None:
    """A disconnect while the response waits on send closes the scan at once (no GC needed)."""
    finished = anyio.Event()

    async def rows() -> AsyncGenerator[Row, None]:
        try:
            for i in range(10):
                key = f"k{i}".encode()
                yield Row(key, [Cell(b"v", key, "cf", b"q", 1)])
        finally:
            finished.set()

    stream = rows()
    first = await anext(stream)
    response = service.NDJSONRows(stream, first)
    sending = anyio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # the start and two lines went out; now the socket is "full"
            sending.set()
            await anyio.sleep_forever()

    async def receive() -> dict[str, Any]:
        await sending.wait()
        return {"type": "http.disconnect"}

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}}
    with anyio.fail_after(5):
        await response(scope, receive, send)
    assert finished.is_set()
    assert stream.ag_frame is None  # the generator finished; nothing waits for the GC
    assert sent[1]["body"].startswith(b'{"key":"k0"')


# -- library bugs found while building the service (fixed; kept as regressions) -------


async def test_stream_closed_before_first_row_leaks_nothing(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """aclosing(read_prefix(...)) left before iterating leaves no unclosed resource behind."""
    table = SaltedTableAsync.from_client(data_client, INSTANCE, make_table(), SaltScheme(4))
    async with table:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with aclosing(table.read_prefix(b"a")):
                pass
            gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks


def test_stream_methods_are_typed_as_async_generators() -> None:
    """read_prefix and read_rows_stream are typed as async generators, so aclosing type-checks."""
    for method in (SaltedTableAsync.read_prefix, SaltedTableAsync.read_rows_stream):
        returned = typing.get_type_hints(method)["return"]
        assert typing.get_origin(returned) is collections.abc.AsyncGenerator, (method, returned)
