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
from google.api_core.exceptions import DeadlineExceeded, InvalidArgument, ServiceUnavailable
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row

from saltedtable import SCHEME_ROW_KEY, SaltedTableAsync, SaltScheme, TableLikeAsync
from saltedtable._read.cancel_asyncio import find_calls
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table
from tests.scripts import load_script

MakeTable = Callable[..., str]

SERVICE_PATH = Path(__file__).resolve().parents[2] / "examples" / "service.py"
BUCKETS = 4
#: Rows for the scans that must need a second page in every bucket (first pages hold 100),
#: and more than a small read's one request over every bucket takes (1,000 rows), so that
#: a scan goes on bucket by bucket.
MANY = 1600
#: The served app's request limits (small, so that the tests reach them quickly).
MAX_BODY = 64 * 1024
BODY_TIMEOUT = 1.0


def _load_service() -> ModuleType:
    # service.py imports service_http.py from its own folder, as it does when run as a script.
    if str(SERVICE_PATH.parent) not in sys.path:
        sys.path.insert(0, str(SERVICE_PATH.parent))
    return load_script("saltedtable_example_service", SERVICE_PATH)


service = _load_service()


# -- the probe -----------------------------------------------------------------------


@dataclass
class StreamRecord:
    """One ``read_rows_stream`` generator: its query, rows handed out, and how it ended.

    ``end`` is None while open, else ``exhausted`` (the server ended it), ``cancelled`` (a
    pending read was cancelled, or the stream was closed between rows after its gRPC call
    was cancelled, as ``end_stream`` does), ``error``, ``closed`` (closed after its last
    row) or ``abandoned`` (closed between rows while its RPC could still be running).
    """

    query: ReadRowsQuery
    rows: int = 0
    end: str | None = None
    calls: list[Any] = field(default_factory=list)  # the gRPC calls under the stream


class ProbeTable:
    """A ``TableLikeAsync`` that delegates to a real ``TableAsync`` and watches its read streams.

    ``stall_from``: per-bucket streams with this index or later (in ``per_bucket``) wait
    before their first row until cancelled. ``fail_from``: they fail after ``fail_rows``
    rows (default: before their first), as a Bigtable error would, once ``fail_gate`` (if
    any) is set. A small read's one request over every bucket (a query of several ranges)
    is recorded in ``streams`` only, and passes through untouched.
    """

    def __init__(self, inner: TableLikeAsync) -> None:
        self._inner = inner
        self.streams: list[StreamRecord] = []
        self.per_bucket: list[StreamRecord] = []
        self.stall_from: int | None = None
        self.fail_from: int | None = None
        self.fail_gate: anyio.Event | None = None
        self.fail_rows = 0
        self.fail_with: Callable[[str], Exception] = ServiceUnavailable
        self.point_read_error: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """The real point read, or ``point_read_error`` when one is set."""
        if self.point_read_error is not None:
            raise self.point_read_error
        return await self._inner.read_row(row_key, **kwargs)  # type: ignore[no-any-return]

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
        """Open the real stream and hand out a recording generator over it."""
        inner = await self._inner.read_rows_stream(query, **kwargs)
        record = StreamRecord(query)
        self.streams.append(record)
        if len(query.row_ranges) > 1:  # the one request over every bucket
            return self._watch(inner, record, stall=False, fail=False)
        index = len(self.per_bucket)
        self.per_bucket.append(record)
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
                    raise self.fail_with("injected by ProbeTable")
                if stall:
                    await anyio.sleep_forever()
                while True:
                    try:
                        row = await anext(inner)
                    except StopAsyncIteration:
                        record.end = "exhausted"
                        return
                    if not record.rows:
                        record.calls = find_calls(inner)
                    record.rows += 1
                    yield row
            except GeneratorExit:
                done = record.query.limit and record.rows >= record.query.limit
                ended = record.calls and all(call.cancelled() for call in record.calls)
                record.end = "closed" if done else "cancelled" if ended else "abandoned"
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

    def wrap(table: TableLikeAsync) -> TableLikeAsync:
        probe = ProbeTable(table)
        probes.append(probe)
        return probe

    settings = service.Settings(
        project=PROJECT,
        instance=INSTANCE,
        table=table_id,
        buckets=BUCKETS,
        max_body_bytes=MAX_BODY,
        body_timeout=BODY_TIMEOUT,
    )
    config = service.uvicorn_config(
        service.create_app(settings, wrap_table=wrap),
        port=0,
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
    """Write MANY rows ``ev#00000``... with the service's scheme (about 400 per bucket)."""
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
    stall_from = probe.stall_from = len(probe.per_bucket) + BUCKETS
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
    ends = [record.end for record in probe.per_bucket[stall_from - BUCKETS :]]
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


# -- bad requests: the error contract ------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One bad request and the answer it must get: a JSON error whose text names the problem."""

    id: str
    method: str
    target: str
    status: int
    says: str  # a fragment of the "error" text (case-insensitive)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    allow: str = ""  # a 405's Allow header


def _cell(**fields: Any) -> bytes:
    return json.dumps({"family": "cf", "qualifier": "q", "value": "v", **fields}).encode()


def _raw_cell(text: str) -> bytes:
    """A JSON body written by hand (escapes that json.dumps would never produce)."""
    return text.encode()


LONG_KEY = "k" * 5000
BAD_REQUESTS = [
    # routes and methods: Starlette's own answers, as JSON
    Bad("no-route", "GET", "/nope", 404, "not found"),
    Bad("put-stray-percent", "PUT", "/rows/%ZZ", 400, "percent-escape", body=_cell()),
    Bad("put-short-percent", "PUT", "/rows/x%2", 400, "percent-escape", body=_cell()),
    Bad("get-stray-percent", "GET", "/rows/a%", 400, "percent-escape"),
    Bad("scan-stray-percent", "GET", "/scan?prefix=%ZZ", 400, "percent-escape"),
    Bad("scan-lone-percent", "GET", "/scan?prefix=%", 400, "percent-escape"),
    Bad("rows-without-slash", "GET", "/rows", 404, "not found"),
    Bad("scan-trailing-slash", "GET", "/scan/?prefix=a", 404, "not found"),
    Bad("post-rows", "POST", "/rows/k", 405, "not allowed", body=_cell(), allow="GET, HEAD, PUT"),
    Bad("delete-rows", "DELETE", "/rows/k", 405, "not allowed", allow="GET, HEAD, PUT"),
    Bad("patch-scan", "PATCH", "/scan?prefix=a", 405, "not allowed", allow="GET, HEAD"),
    Bad("options-rows", "OPTIONS", "/rows/k", 405, "not allowed", allow="GET, HEAD, PUT"),
    Bad("put-scan", "PUT", "/scan?prefix=a", 405, "not allowed", body=_cell(), allow="GET, HEAD"),
    # row keys in the path
    Bad("empty-key-get", "GET", "/rows/", 400, "must not be empty"),
    Bad("empty-key-put", "PUT", "/rows/", 400, "must not be empty", body=_cell()),
    Bad("key-not-utf8-get", "GET", "/rows/user0001%23%FF", 400, "not: b'user0001#\\xff'"),
    Bad("key-not-utf8-put-ff", "PUT", "/rows/user0001%23%FF", 400, "utf-8", body=_cell()),
    Bad("key-not-utf8-put-fe", "PUT", "/rows/user0001%23%FE", 400, "utf-8", body=_cell()),
    Bad("key-lone-surrogate", "PUT", "/rows/a%ED%A0%80", 400, "utf-8", body=_cell()),
    Bad("key-truncated-utf8", "PUT", "/rows/a%C3", 400, "utf-8", body=_cell()),
    Bad("key-too-long-get", "GET", f"/rows/{LONG_KEY}", 400, "bytes"),
    Bad("key-too-long-put", "PUT", f"/rows/{LONG_KEY}", 400, "bytes", body=_cell()),
    Bad("rows-query-param", "GET", "/rows/k?verbose=1", 400, "unknown query parameter"),
    Bad("put-query-param", "PUT", "/rows/k?family=cf", 400, "unknown query parameter", _cell()),
    # scan query strings
    Bad("scan-no-query", "GET", "/scan", 400, "'prefix' is required"),
    Bad("scan-no-prefix", "GET", "/scan?limit=5", 400, "'prefix' is required"),
    Bad("limit-zero", "GET", "/scan?prefix=a&limit=0", 400, "positive integer"),
    Bad("limit-negative", "GET", "/scan?prefix=a&limit=-1", 400, "positive integer"),
    Bad("limit-text", "GET", "/scan?prefix=a&limit=abc", 400, "positive integer"),
    Bad("limit-float", "GET", "/scan?prefix=a&limit=1.5", 400, "positive integer"),
    Bad("limit-empty", "GET", "/scan?prefix=a&limit=", 400, "positive integer"),
    Bad("limit-plus", "GET", "/scan?prefix=a&limit=%2B5", 400, "positive integer"),
    Bad("limit-space", "GET", "/scan?prefix=a&limit=+5", 400, "positive integer"),
    Bad("limit-leading-zero", "GET", "/scan?prefix=a&limit=05", 400, "positive integer"),
    Bad("limit-over-int64", "GET", "/scan?prefix=a&limit=9223372036854775808", 400, "positive"),
    Bad("limit-huge", "GET", "/scan?prefix=a&limit=" + "9" * 5000, 400, "positive integer"),
    Bad("limit-twice", "GET", "/scan?prefix=a&limit=5&limit=6", 400, "more than once"),
    Bad("ordered-maybe", "GET", "/scan?prefix=a&ordered=maybe", 400, "true or false"),
    Bad("ordered-empty", "GET", "/scan?prefix=a&ordered=", 400, "true or false"),
    Bad("prefix-not-utf8", "GET", "/scan?prefix=%FF", 400, "not utf-8"),
    Bad("prefix-lone-surrogate", "GET", "/scan?prefix=%ED%A0%80", 400, "not utf-8"),
    Bad("prefix-twice", "GET", "/scan?prefix=a&prefix=b", 400, "more than once"),
    Bad("prefix-typo", "GET", "/scan?prefx=a", 400, "unknown query parameter 'prefx'"),
    Bad("prefix-without-equals", "GET", "/scan?prefix", 400, "malformed"),
    Bad("query-empty-fields", "GET", "/scan?prefix=a&&limit=1", 400, "malformed"),
    # PUT bodies: JSON
    Bad("body-empty", "PUT", "/rows/k", 400, "not valid json", body=b""),
    Bad("body-not-json", "PUT", "/rows/k", 400, "not valid json", body=b"not json"),
    Bad("body-truncated", "PUT", "/rows/k", 400, "not valid json", body=_cell()[:-1]),
    Bad("body-array", "PUT", "/rows/k", 400, "json object", body=b"[1]"),
    Bad("body-null", "PUT", "/rows/k", 400, "json object", body=b"null"),
    Bad("body-string", "PUT", "/rows/k", 400, "json object", body=b'"cf"'),
    # (the issue sent 100,000 "["; MAX_BODY is smaller here, and this nests as deep)
    Bad("nested-arrays", "PUT", "/rows/k", 400, "nested too deeply", body=b"[" * 60_000),
    Bad("nested-objects", "PUT", "/rows/k", 400, "nested too deeply", body=b'{"a":' * 12_000),
    Bad("nan", "PUT", "/rows/k", 400, "nan", body=b'{"family":"cf","qualifier":"q","value":NaN}'),
    Bad("infinity", "PUT", "/rows/k", 400, "infinity", body=b'{"family":"cf","value":Infinity}'),
    Bad(
        "huge-int", "PUT", "/rows/k", 400, "not valid json", body=b'{"value":' + b"1" * 5000 + b"}"
    ),
    Bad(
        "duplicate-field",
        "PUT",
        "/rows/k",
        400,
        "'value' twice",
        body=b'{"family":"cf","qualifier":"q","value":"a","value":"b"}',
    ),
    Bad(
        "body-latin1",
        "PUT",
        "/rows/k",
        400,
        "not utf-8",
        body=b'{"family":"cf","qualifier":"q","value":"\xe9"}',
    ),
    Bad("body-utf16", "PUT", "/rows/k", 400, "not utf-8", body=_cell().decode().encode("utf-16")),
    Bad("body-bom", "PUT", "/rows/k", 400, "not valid json", body=b"\xef\xbb\xbf" + _cell()),
    # PUT bodies: the cell
    Bad(
        "unknown-field",
        "PUT",
        "/rows/k",
        400,
        "unknown fields ['timestamp']",
        body=_cell(timestamp=5),
    ),
    Bad(
        "family-missing",
        "PUT",
        "/rows/k",
        400,
        "'family'",
        body=b'{"qualifier": "q", "value": "v"}',
    ),
    Bad("family-empty", "PUT", "/rows/k", 400, "'family'", body=_cell(family="")),
    Bad("family-number", "PUT", "/rows/k", 400, "'family'", body=_cell(family=3)),
    Bad(
        "family-unknown",
        "PUT",
        "/rows/k",
        400,
        "unknown column family 'nofam'",
        body=_cell(family="nofam"),
    ),
    Bad(
        "family-invalid-name",
        "PUT",
        "/rows/k",
        400,
        "unknown column family",
        body=_cell(family="bad fam!"),
    ),
    Bad(
        "family-lone-surrogate",
        "PUT",
        "/rows/k",
        400,
        "unknown column family",
        body=_raw_cell('{"family":"c\\ud800","qualifier":"q","value":"v"}'),
    ),
    Bad(
        "qualifier-missing",
        "PUT",
        "/rows/k",
        400,
        "'qualifier'",
        body=b'{"family": "cf", "value": "v"}',
    ),
    Bad(
        "value-missing",
        "PUT",
        "/rows/k",
        400,
        "'value'",
        body=b'{"family": "cf", "qualifier": "q"}',
    ),
    Bad("value-and-b64", "PUT", "/rows/k", 400, "exactly one", body=_cell(value_b64="dg==")),
    Bad("value-number", "PUT", "/rows/k", 400, "must be a string", body=_cell(value=3)),
    Bad("value-null", "PUT", "/rows/k", 400, "exactly one", body=_cell(value=None)),
    Bad("value-object", "PUT", "/rows/k", 400, "must be a string", body=_cell(value={"a": 1})),
    Bad("qualifier-number", "PUT", "/rows/k", 400, "must be a string", body=_cell(qualifier=1)),
    Bad(
        "b64-invalid",
        "PUT",
        "/rows/k",
        400,
        "not valid base64",
        body=b'{"family":"cf","qualifier":"q","value_b64":"***"}',
    ),
    Bad(
        "b64-unpadded",
        "PUT",
        "/rows/k",
        400,
        "not valid base64",
        body=b'{"family":"cf","qualifier":"q","value_b64":"dg"}',
    ),
    Bad(
        "b64-number",
        "PUT",
        "/rows/k",
        400,
        "must be a string",
        body=b'{"family":"cf","qualifier":"q","value_b64":3}',
    ),
    Bad(
        "value-lone-surrogate",
        "PUT",
        "/rows/k",
        400,
        "lone surrogate",
        body=_raw_cell('{"family":"cf","qualifier":"q","value":"\\ud800"}'),
    ),
    Bad(
        "value-low-surrogate",
        "PUT",
        "/rows/k",
        400,
        "lone surrogate",
        body=_raw_cell('{"family":"cf","qualifier":"q","value":"a\\udfff"}'),
    ),
    Bad(
        "qualifier-lone-surrogate",
        "PUT",
        "/rows/k",
        400,
        "lone surrogate",
        body=_raw_cell('{"family":"cf","qualifier":"\\ud800","value":"v"}'),
    ),
    Bad(
        "b64-lone-surrogate",
        "PUT",
        "/rows/k",
        400,
        "lone surrogate",
        body=_raw_cell('{"family":"cf","qualifier":"q","value_b64":"\\ud800"}'),
    ),
    # PUT bodies: media type and size
    Bad(
        "content-type-text",
        "PUT",
        "/rows/k",
        415,
        "application/json",
        body=_cell(),
        headers={"content-type": "text/plain"},
    ),
    Bad(
        "content-type-form",
        "PUT",
        "/rows/k",
        415,
        "application/json",
        body=_cell(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    ),
    Bad(
        "content-type-latin1",
        "PUT",
        "/rows/k",
        415,
        "utf-8",
        body=_cell(),
        headers={"content-type": "application/json; charset=latin-1"},
    ),
    Bad(
        "body-too-large",
        "PUT",
        "/rows/k",
        413,
        f"at most {MAX_BODY}",
        body=_cell(value="v" * MAX_BODY),
    ),
]


async def _physical_rows(client: BigtableDataClientAsync, table_id: str) -> list[Any]:
    """Every row of the Bigtable table as (key, [(family, qualifier, value)]), salted keys."""
    raw = client.get_table(INSTANCE, table_id)
    try:
        rows = await raw.read_rows(ReadRowsQuery())
    finally:
        await raw.close()
    return [(r.row_key, [(c.family, c.qualifier, c.value) for c in r.cells]) for r in rows]


def _json_error(response: httpx.Response) -> dict[str, Any]:
    """The response's body, checked to be a JSON object with an "error" text."""
    assert response.headers.get("content-type") == "application/json", response.headers
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str), body
    return body


def _mismatch(bad: Bad, response: httpx.Response) -> str | None:
    """Why ``response`` is not the answer ``bad`` must get (None when it is)."""
    try:
        body = _json_error(response)
    except (AssertionError, ValueError) as exc:
        return f"{response.status_code}, not a JSON error: {exc!r} {response.content[:200]!r}"
    if response.status_code != bad.status:
        return f"status {response.status_code}, expected {bad.status}: {body}"
    if bad.says.lower() not in body["error"].lower():
        return f"error {body['error']!r} does not say {bad.says!r}"
    allow = response.headers.get("allow", "")
    if {m.strip() for m in allow.split(",")} != {m.strip() for m in bad.allow.split(",")}:
        return f"Allow: {allow!r}, expected {bad.allow!r}"
    return None


async def test_every_bad_request_gets_a_json_4xx_and_writes_nothing(
    served: Served, data_client: BigtableDataClientAsync
) -> None:
    """Each row of BAD_REQUESTS: its 4xx, a JSON error naming the problem, and no write at all."""
    ok = await served.http.put("/rows/user0001%23a", content=_cell())
    assert ok.status_code == 204
    before = await _physical_rows(data_client, served.table_id)
    # The row, and the layout record the first write stored (after sampling the rows).
    assert sorted(key for key, _ in before) == [b"1-user0001#a", SCHEME_ROW_KEY]
    served.probe.streams.clear()
    failures = []
    for bad in BAD_REQUESTS:
        response = await served.http.request(
            bad.method, bad.target, content=bad.body, headers=bad.headers
        )
        if (problem := _mismatch(bad, response)) is not None:
            failures.append(f"{bad.id} ({bad.method} {bad.target[:60]}): {problem}")
    assert not failures, "\n".join(failures)
    assert await _physical_rows(data_client, served.table_id) == before
    assert served.probe.streams == [], "a refused scan started a sub-scan"


def test_bad_request_table_has_unique_ids() -> None:
    """The table's ids are unique, so a failure names exactly one row."""
    ids = [bad.id for bad in BAD_REQUESTS]
    assert len(ids) == len(set(ids))


async def test_chunked_body_over_the_limit_is_413(served: Served) -> None:
    """A body without Content-Length is counted as it arrives and refused past the limit."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_BODY // 1024 + 1):
            yield b" " * 1024

    response = await served.http.put("/rows/k", content=chunks())
    assert response.status_code == 413
    assert "over" in _json_error(response)["error"]


async def test_head_scan_checks_the_query_without_scanning(served: Served) -> None:
    """HEAD /scan answers a good query's headers without starting a scan, a bad one with 400."""
    response = await served.http.head("/scan", params={"prefix": ""})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    bad = await served.http.head("/scan", params={"prefix": "", "limit": "0"})
    assert bad.status_code == 400
    assert served.probe.streams == []


# -- below the application: what uvicorn answers --------------------------------------


def _port(served: Served) -> int:
    return int(served.server.servers[0].sockets[0].getsockname()[1])


async def _raw_http(port: int, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes; return the status and body of the response read back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        with anyio.fail_after(10):
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = dict(line.split(": ", 1) for line in lines[1:] if line)
            headers = {k.lower(): v for k, v in headers.items()}
            assert headers.get("content-type") == "application/json", headers
            body = await reader.readexactly(int(headers["content-length"]))
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return status, body


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"GARBAGE\r\n\r\n", id="not-http"),
        pytest.param(b"GET /rows/k HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", id="cl"),
        pytest.param(b"GET /rows/k HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", id="header"),
        pytest.param(b"GET /rows/\xff HTTP/1.1\r\nHost: x\r\n\r\n", id="raw-byte-in-target"),
        pytest.param(b"GET /rows/k HTTP/1.1\r\n\r\n", id="no-host"),
        pytest.param(
            b"PUT /rows/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
            id="unknown-transfer-encoding",
        ),
        pytest.param(
            # Headers that grow past h11's limit (16 KiB) without ending.
            b"GET /rows/k HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000,
            id="headers-too-large",
        ),
    ],
)
async def test_unparseable_http_gets_a_json_400(served: Served, raw: bytes) -> None:
    """A request uvicorn cannot parse is answered by its protocol, as a JSON 400 too."""
    status, body = await _raw_http(_port(served), raw)
    assert status == 400
    assert json.loads(body)["error"].startswith("invalid HTTP request")


@pytest.mark.parametrize(
    ("length", "status", "says"),
    [
        (b"1000000000000", 413, "at most"),
        (b"9" * 5000, 400, "invalid HTTP request"),  # h11 refuses a length that long itself
    ],
)
async def test_declared_oversized_body_is_refused_before_it_is_read(
    served: Served, length: bytes, status: int, says: str
) -> None:
    """A Content-Length over the limit is refused at once, without waiting for the body."""
    request = b"PUT /rows/k HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n"
    answer, body = await _raw_http(_port(served), request)
    assert answer == status
    assert says in json.loads(body)["error"]


async def test_body_that_stalls_is_408(
    served: Served, data_client: BigtableDataClientAsync
) -> None:
    """A client that stops sending its body mid-way gets a 408 after body_timeout; no write."""
    body = _cell()
    request = (
        b"PUT /rows/k HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
    )
    started = time.monotonic()
    status, answer = await _raw_http(_port(served), request)
    assert status == 408
    assert "did not arrive" in json.loads(answer)["error"]
    assert time.monotonic() - started >= BODY_TIMEOUT
    assert await _physical_rows(data_client, served.table_id) == []


# -- upstream failures and bugs -------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [(DeadlineExceeded, 504), (InvalidArgument, 400), (ServiceUnavailable, 502)],
)
async def test_scan_failure_status_follows_the_bigtable_error_type(
    served: Served, error: Callable[[str], Exception], status: int
) -> None:
    """A sub-scan failing before the first row: the client's error type decides the status."""
    await served.http.put("/rows/a", content=_cell())
    served.probe.fail_from = 0
    served.probe.fail_with = error
    response = await served.http.get("/scan", params={"prefix": ""})
    assert response.status_code == status
    assert _json_error(response)["type"] == error.__name__  # type: ignore[attr-defined]


async def test_a_bug_is_a_json_500(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    """An unexpected exception in a handler: a JSON 500 without its details; the log has them."""
    served.probe.point_read_error = ZeroDivisionError("a bug")
    response = await served.http.get("/rows/a")
    assert response.status_code == 500
    assert _json_error(response) == {"error": "internal error", "type": "ZeroDivisionError"}
    assert "a bug" in caplog.text


def test_settings_read_the_families_from_the_environment() -> None:
    """SALTEDTABLE_FAMILIES is a comma-separated list; a name Bigtable would refuse fails early."""
    assert service.Settings.from_env({}).families == ("cf",)
    assert service.Settings.from_env({"SALTEDTABLE_FAMILIES": "cf, meta"}).families == (
        "cf",
        "meta",
    )
    for bad in ("bad name", ",", "cf,ü"):
        with pytest.raises(ValueError, match="SALTEDTABLE_FAMILIES"):
            service.Settings.from_env({"SALTEDTABLE_FAMILIES": bad})


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
