"""merge_chunks against the installed client's own chunk stream and row merge, chunk for chunk.

Both flavours: the async module against the async client's code, the generated
sync twin against the sync client's.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowRange
from google.cloud.bigtable.data._async._read_rows import _ReadRowsOperationAsync
from google.cloud.bigtable.data._async.client import _DataApiTargetAsync
from google.cloud.bigtable.data._sync_autogen._read_rows import _ReadRowsOperation
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable_v2.types import ReadRowsRequest, ReadRowsResponse
from hypothesis import given, settings
from hypothesis import strategies as st

import saltedtable._async.chunks as _chunks
import saltedtable._sync_autogen.chunks as _chunks_sync
from saltedtable._async.chunks import client_read_rows_stream, merge_chunks
from tests.fakes import FakeTable

PB = ReadRowsResponse.pb()
Chunk = PB.CellChunk
PROPERTY = settings(max_examples=400, deadline=None)


@dataclass
class Attempt:
    """Counts the updates of the time the read's caller held each row (not their values)."""

    updates: int = 0

    @property
    def application_blocking_time_ns(self) -> int:
        return 0

    @application_blocking_time_ns.setter
    def application_blocking_time_ns(self, value: int) -> None:
        self.updates += 1


@dataclass
class Metric:
    """Records what the read reports to the client's operation metric."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    active_attempt: Attempt | None = field(default_factory=Attempt)

    def end_with_success(self) -> None:
        self.calls.append(("success", None))

    def end_with_status(self, status: Any) -> None:
        self.calls.append(("status", str(status)))


@dataclass
class Op:
    """What the merge reads and writes of the client's read operation."""

    _operation_metric: Metric
    _last_yielded_row_key: bytes | None
    _remaining_count: int | None


class Broken(Exception):
    """The stream's own failure, after its responses."""


async def _responses(responses: Sequence[Any], fail: bool, wrap: bool) -> AsyncIterator[Any]:
    for resp in responses:
        await asyncio.sleep(0)
        # The client's generated RPC hands out proto-plus messages, saltedtable's protobuf ones.
        yield ReadRowsResponse.wrap(resp) if wrap else resp
    if fail:
        raise Broken("stream failed")


async def _stream(responses: Sequence[Any], fail: bool, wrap: bool) -> AsyncIterator[Any]:
    return _responses(responses, fail, wrap)


def _row(row: Row) -> tuple[Any, ...]:
    return (
        row.row_key,
        tuple(
            (
                c.value,
                c.row_key,
                c.family,
                c.qualifier,
                c.timestamp_micros,
                type(c.labels).__name__,
                tuple(c.labels),
            )
            for c in row.cells
        ),
    )


@dataclass
class Outcome:
    rows: list[tuple[Any, ...]]
    error: tuple[str, str] | None
    metric: list[tuple[str, Any]]
    last: bytes | None
    remaining: int | None
    #: Updates of the caller's blocking time (one per row handed over and resumed).
    blocking_updates: int


def _outcome(op: Op, rows: list[tuple[Any, ...]], error: tuple[str, str] | None) -> Outcome:
    attempt = op._operation_metric.active_attempt
    return Outcome(
        rows,
        error,
        op._operation_metric.calls,
        op._last_yielded_row_key,
        op._remaining_count,
        0 if attempt is None else attempt.updates,
    )


async def _run(
    merge: Any,
    responses: Sequence[Any],
    *,
    last: bytes | None,
    remaining: int | None,
    fail: bool,
    leave_after: int | None,
) -> Outcome:
    op = Op(Metric(), last, remaining)
    rows: list[tuple[Any, ...]] = []
    error = None
    gen = merge(op, _stream(responses, fail, merge is _client))
    try:
        async for row in gen:
            rows.append(_row(row))
            if leave_after is not None and len(rows) >= leave_after:
                break
    except Exception as exc:
        error = (type(exc).__name__, str(exc))
    finally:
        await gen.aclose()
    return _outcome(op, rows, error)


def _sync_responses(responses: Sequence[Any], fail: bool, wrap: bool) -> Iterator[Any]:
    for resp in responses:
        yield ReadRowsResponse.wrap(resp) if wrap else resp
    if fail:
        raise Broken("stream failed")


def _run_sync(
    merge: Any,
    responses: Sequence[Any],
    *,
    last: bytes | None,
    remaining: int | None,
    fail: bool,
    leave_after: int | None,
) -> Outcome:
    op = Op(Metric(), last, remaining)
    rows: list[tuple[Any, ...]] = []
    error = None
    gen = merge(op, _sync_responses(responses, fail, merge is _sync_client))
    try:
        for row in gen:
            rows.append(_row(row))
            if leave_after is not None and len(rows) >= leave_after:
                break
    except Exception as exc:
        error = (type(exc).__name__, str(exc))
    finally:
        gen.close()
    return _outcome(op, rows, error)


def _sync_client(op: Any, stream: Any) -> Iterator[Row]:
    chunks = _ReadRowsOperation.chunk_stream(op, stream)
    return _ReadRowsOperation.merge_rows(op, chunks)  # type: ignore[no-any-return]


def _client(op: Any, stream: Any) -> AsyncIterator[Row]:
    """The client's two generators, as its read operation chains them."""
    chunks = _ReadRowsOperationAsync.chunk_stream(op, stream)
    return _ReadRowsOperationAsync.merge_rows(op, chunks)  # type: ignore[no-any-return]


def _compare(
    responses: Sequence[Any],
    last: bytes | None,
    remaining: int | None,
    fail: bool,
    leave_after: int | None,
) -> Outcome:
    def run(merge: Any) -> Outcome:
        return asyncio.run(
            _run(
                merge, responses, last=last, remaining=remaining, fail=fail, leave_after=leave_after
            )
        )

    theirs = run(_client)
    ours = run(merge_chunks)
    assert ours == theirs
    kwargs = {"last": last, "remaining": remaining, "fail": fail, "leave_after": leave_after}
    sync_theirs = _run_sync(_sync_client, responses, **kwargs)  # type: ignore[arg-type]
    sync_ours = _run_sync(_chunks_sync.merge_chunks, responses, **kwargs)  # type: ignore[arg-type]
    assert sync_ours == sync_theirs
    assert sync_ours == ours
    return ours


# -- random chunks: mostly streams the client refuses, somewhere ---------------------------

KEYS = st.sampled_from([b"", b"a", b"b", b"c"])


@st.composite
def chunks(draw: st.DrawFn) -> Any:
    c = Chunk(
        row_key=draw(KEYS),
        timestamp_micros=draw(st.sampled_from([0, 0, 1, 2])),
        labels=draw(st.sampled_from([[], [], ["x"], ["y"]])),
        value=draw(st.sampled_from([b"", b"v", b"w"])),
        value_size=draw(st.sampled_from([0, 0, 0, 4, -1])),
    )
    family = draw(st.sampled_from([None, None, "", "f", "g"]))
    if family is not None:
        c.family_name.value = family
    qualifier = draw(st.sampled_from([None, None, b"", b"q", b"r"]))
    if qualifier is not None:
        c.qualifier.value = qualifier
    status = draw(st.sampled_from([None, None, "commit", "commit", "reset"]))
    if status == "commit":
        c.commit_row = True
    elif status == "reset":
        c.reset_row = True
    return c


@st.composite
def responses(draw: st.DrawFn, chunk: st.SearchStrategy[Any]) -> list[Any]:
    out = []
    for chunk_list in draw(st.lists(st.lists(chunk, max_size=5), max_size=5)):
        resp = PB(chunks=chunk_list)
        scanned = draw(st.sampled_from([b"", b"", b"", b"b", b"z"]))
        if scanned:
            resp.last_scanned_row_key = scanned
        out.append(resp)
    return out


LAST = st.sampled_from([None, None, b"", b"a"])
REMAINING = st.sampled_from([None, None, 0, 1, 2, 10])
LEAVE = st.sampled_from([None, None, 1, 2])


@PROPERTY
@given(responses(chunks()), LAST, REMAINING, st.booleans(), LEAVE)
def test_random_chunks_give_the_clients_rows_errors_and_bookkeeping(
    resp: list[Any], last: bytes | None, remaining: int | None, fail: bool, leave: int | None
) -> None:
    """Random chunks (most refused somewhere): the same rows, error, metric and resume state."""
    _compare(resp, last, remaining, fail, leave)


# -- well-formed streams: rows, split cells and resets, now and then one chunk broken ----------


@st.composite
def valid_responses(draw: st.DrawFn) -> list[Any]:
    """Rows in key order as the server sends them, cut into responses anywhere."""
    flat: list[Any] = []
    row_count = draw(st.integers(0, 6))
    keys = sorted(
        draw(
            st.lists(
                st.binary(min_size=1, max_size=3),
                min_size=row_count,
                max_size=row_count,
                unique=True,
            )
        )
    )
    for key in keys:
        cells = draw(st.integers(1, 4))
        row_chunks: list[Any] = []
        family = None
        for i in range(cells):
            parts = draw(st.integers(1, 3))
            values = [draw(st.sampled_from([b"", b"v", b"ww"])) for _ in range(parts)]
            for p in range(parts):
                c = Chunk(value=values[p])
                if p == 0:
                    if i == 0:
                        c.row_key = key
                    new_family = draw(st.sampled_from(["f", "g"]))
                    if family is None or new_family != family or draw(st.booleans()):
                        c.family_name.value = new_family
                        family = new_family
                        c.qualifier.value = draw(st.sampled_from([b"q", b"r", b""]))
                    elif draw(st.booleans()):
                        c.qualifier.value = draw(st.sampled_from([b"q", b"r"]))
                    c.timestamp_micros = draw(st.sampled_from([0, 1000, 2000]))
                    c.labels.extend(draw(st.sampled_from([[], ["x"]])))
                if p < parts - 1:
                    c.value_size = sum(len(v) for v in values) or 1
                row_chunks.append(c)
        if draw(st.integers(0, 5)) == 0:
            # The server takes a row back (this one, or one it then skips) and goes on.
            reset = Chunk(reset_row=True)
            taken_back = [Chunk() for _ in range(draw(st.integers(1, len(row_chunks))))]
            for back, c in zip(taken_back, row_chunks, strict=False):
                back.CopyFrom(c)
            if draw(st.booleans()):
                taken_back[0].row_key = key + b"~"
            flat.extend([*taken_back, reset])
        row_chunks[-1].commit_row = True
        flat.extend(row_chunks)
    if flat and draw(st.booleans()):
        # One chunk broken.
        victim = flat[draw(st.integers(0, len(flat) - 1))]
        broken = Chunk()
        broken.CopyFrom(victim)
        field_name = draw(
            st.sampled_from(["row_key", "family", "qualifier", "ts", "labels", "commit"])
        )
        if field_name == "row_key":
            broken.row_key = b"zz" if broken.row_key else b"a"
        elif field_name == "family":
            broken.family_name.value = "h"
        elif field_name == "qualifier":
            broken.qualifier.value = b"s"
        elif field_name == "ts":
            broken.timestamp_micros += 7
        elif field_name == "labels":
            broken.labels.append("z")
        else:
            broken.commit_row = not broken.commit_row
        flat[flat.index(victim)] = broken
    if flat and draw(st.booleans()):
        flat = flat[: draw(st.integers(0, len(flat)))]  # the stream ends early
    out = []
    while flat:
        n = draw(st.integers(1, 4))
        out.append(PB(chunks=flat[:n]))
        flat = flat[n:]
    return out


@PROPERTY
@given(valid_responses(), LAST, REMAINING, st.booleans(), LEAVE)
def test_server_like_streams_give_the_clients_rows_errors_and_bookkeeping(
    resp: list[Any], last: bytes | None, remaining: int | None, fail: bool, leave: int | None
) -> None:
    """Streams as a server sends them, some cut short or with one chunk broken: the same outcome."""
    _compare(resp, last, remaining, fail, leave)


def _cell(c: Any) -> Any:
    c.family_name.value = "f"
    c.qualifier.value = b"q"
    return c


def test_a_clean_stream_merges_split_cells_and_resets() -> None:
    """The properties above reach rows: a hand-made stream with a split cell and a reset."""
    resp = [
        PB(chunks=[_cell(Chunk(row_key=b"a", value=b"x", commit_row=True))]),
        PB(
            chunks=[
                _cell(Chunk(row_key=b"b", value=b"gone")),
                Chunk(reset_row=True),
                _cell(Chunk(row_key=b"b", value=b"sp", value_size=5)),
                Chunk(value=b"lit", commit_row=True),
            ]
        ),
    ]
    out = _compare(resp, None, None, False, None)
    assert out.error is None
    assert [(key, [c[0] for c in cells]) for key, cells in out.rows] == [
        (b"a", [b"x"]),
        (b"b", [b"split"]),
    ]
    assert out.last == b"b"
    assert out.metric == [("success", None)]


def test_a_row_continued_in_the_next_response_is_refused_as_the_client_refuses_it() -> None:
    """google-cloud-bigtable 2.50 checks each response's first chunk as a new row's: a row
    whose chunks go on in the next response, after an earlier row, is refused. Kept as is
    (the same rows and errors as the client); this pins it, so a client that changes it is seen.
    """
    resp = [
        PB(chunks=[_cell(Chunk(row_key=b"a", value=b"x", commit_row=True))]),
        PB(chunks=[_cell(Chunk(row_key=b"b", value=b"sp", value_size=5))]),
        PB(chunks=[Chunk(value=b"lit", commit_row=True)]),
    ]
    out = _compare(resp, None, None, False, None)
    assert out.error is not None
    assert "strictly increasing" in out.error[1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("family", "family changed mid cell"),
        ("qualifier", "qualifier changed mid cell"),
        ("timestamp", "timestamp changed mid cell"),
        ("labels", "labels changed mid cell"),
        ("row_key", "row key changed mid cell"),
        ("reset", "reset row with data"),
        # Several at once: the first check in the client's order names it.
        ("everything", "family changed mid cell"),
        ("timestamp and labels", "timestamp changed mid cell"),
    ],
)
def test_a_split_cell_whose_next_part_differs_is_refused_with_the_clients_error(
    change: str, message: str
) -> None:
    """Each of the client's checks on a split cell's next part, one at a time."""
    first = _cell(Chunk(row_key=b"a", value=b"sp", value_size=5, timestamp_micros=10))
    first.labels.append("x")
    part = Chunk(value=b"lit", commit_row=True)
    if change == "family":
        part.family_name.value = "g"
    elif change == "qualifier":
        part.qualifier.value = b"r"
    elif change == "timestamp":
        part.timestamp_micros = 11
    elif change == "labels":
        part.labels.append("y")
    elif change == "row_key":
        part.row_key = b"b"
    elif change == "everything":
        part.family_name.value = "g"
        part.qualifier.value = b"r"
        part.timestamp_micros = 11
        part.labels.append("y")
        part.row_key = b"b"
    elif change == "timestamp and labels":
        part.timestamp_micros = 11
        part.labels.append("y")
    else:
        part = Chunk(value=b"lit", reset_row=True)
    out = _compare([PB(chunks=[first, part])], None, None, False, None)
    assert out.error is not None
    assert out.error[0] == "InvalidChunk"
    assert out.error[1].endswith(message)


def test_a_negative_value_size_ends_a_split_cell_as_zero_does() -> None:
    """The client reads value_size > 0 as "more parts follow": a negative one ends the cell."""
    first = _cell(Chunk(row_key=b"a", value=b"sp", value_size=5))
    resp = [PB(chunks=[first, Chunk(value=b"lit", value_size=-1, commit_row=True)])]
    out = _compare(resp, None, None, False, None)
    assert out.error is None
    assert [c[0] for _, cells in out.rows for c in cells] == [b"split"]


def test_a_row_after_a_reset_is_checked_against_the_last_row_handed_over() -> None:
    """After a reset the next chunk starts a row again, whose key must follow the last row
    handed over: a server that sends an earlier one is refused, as by the client."""
    resp = [
        PB(
            chunks=[
                _cell(Chunk(row_key=b"b", value=b"x", commit_row=True)),
                _cell(Chunk(row_key=b"c", value=b"gone")),
                Chunk(reset_row=True),
                _cell(Chunk(row_key=b"a", value=b"late", commit_row=True)),
            ]
        )
    ]
    out = _compare(resp, None, None, False, None)
    assert out.error is not None
    assert out.error[1].endswith("row keys should be strictly increasing")
    assert [key for key, _ in out.rows] == [b"b"]


# -- the table's read_rows_stream ----------------------------------------------------------------


def test_the_installed_client_is_one_the_merged_read_was_checked_against() -> None:
    """A canary: on a client release not in TESTED_CLIENTS every read falls back to the
    client's own read_rows_stream (correct, slower). If this fails, run this module's
    tests on the new release and, when they pass, add it to _chunks.TESTED_CLIENTS."""
    from google.cloud.bigtable import __version__

    assert __version__.startswith(_chunks.TESTED_CLIENTS), __version__


def test_tables_that_are_not_the_clients_keep_their_own_read_rows_stream() -> None:
    """A fake table, or any table-like object, is read through its own method."""
    table = FakeTable()
    assert client_read_rows_stream(table) == table.read_rows_stream
    assert _chunks_sync.client_read_rows_stream(table) == table.read_rows_stream


def test_a_sync_client_table_gets_the_merged_read_and_keeps_a_replacement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sync twin: the client's table gets the merged read; a replaced method is kept."""
    from google.cloud.bigtable.data import BigtableDataClient

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)  # (no channel refresh, no ping)
    client = BigtableDataClient(project="p")
    try:
        table = client.get_table("i", "t")
        merged = _chunks_sync.client_read_rows_stream(table)
        assert merged != table.read_rows_stream
        assert merged.__module__ == "saltedtable._sync_autogen.chunks"

        def spy(query: ReadRowsQuery, **kwargs: Any) -> Any:
            return type(table).read_rows_stream(table, query, **kwargs)

        table.read_rows_stream = spy  # type: ignore[method-assign]
        assert _chunks_sync.client_read_rows_stream(table) is spy
    finally:
        client.close()


async def test_a_replaced_read_rows_stream_is_used_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client table whose read_rows_stream was replaced (a spy, a wrapper) keeps it, and
    so does one whose class's method was patched (instrumentation, a test double)."""
    from google.cloud.bigtable.data import BigtableDataClientAsync, TableAsync

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)
    client = BigtableDataClientAsync(project="p")
    try:
        table = client.get_table("i", "t")
        merged = client_read_rows_stream(table)
        assert merged != table.read_rows_stream
        assert merged.__module__ == "saltedtable._async.chunks"

        async def spy(query: ReadRowsQuery, **kwargs: Any) -> Any:
            return await type(table).read_rows_stream(table, query, **kwargs)

        table.read_rows_stream = spy  # type: ignore[method-assign]
        assert client_read_rows_stream(table) is spy
        other = client.get_table("i", "u")
        for cls in (TableAsync, _DataApiTargetAsync):
            with monkeypatch.context() as patch:
                patch.setattr(cls, "read_rows_stream", spy)
                assert client_read_rows_stream(other) == other.read_rows_stream
        assert client_read_rows_stream(other).__module__ == "saltedtable._async.chunks"
    finally:
        await client.close()


#: An address nothing listens on: clients made for these tests start no channel refresh
#: (as with an emulator) and are never asked to send anything.
NOWHERE = "127.0.0.1:9"


# -- the RPC: what goes on the wire is the client's ------------------------------------------


class _Server:
    """A gRPC server that answers ReadRows with one row and records what each call sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, list[tuple[str, Any]]]] = []
        handler = grpc.unary_stream_rpc_method_handler(self._read_rows)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "google.bigtable.v2.Bigtable", {"ReadRows": handler}
                ),
            )
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _read_rows(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        # (Metadata the transport adds per connection, such as user-agent, is the same for both.)
        self.calls.append((request, sorted(tuple(m) for m in context.invocation_metadata())))
        chunk = _cell(Chunk(row_key=b"k", value=b"v", commit_row=True))
        yield PB(chunks=[chunk]).SerializeToString()

    def stop(self) -> None:
        self._server.stop(None)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    running = _Server()
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{running.port}")
    try:
        yield running
    finally:
        running.stop()


TARGETS = ["table", "table with an app profile", "authorized view", "materialized view"]


def _target(client: Any, which: str) -> Any:
    if which == "table":
        return client.get_table("inst", "tab")
    if which == "table with an app profile":
        return client.get_table("inst", "tab", app_profile_id="prof")
    if which == "authorized view":
        return client.get_authorized_view("inst", "tab", "view", app_profile_id="prof")
    return client.get_materialized_view("inst", "mview")


@pytest.mark.parametrize("which", TARGETS)
async def test_the_merged_read_sends_what_the_clients_read_sends(
    server: _Server, which: str
) -> None:
    """Against a gRPC server: the same request bytes and the same metadata (the routing
    header, the client's x-goog-api-client), and the same row back, as the client's own read."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    client = BigtableDataClientAsync(project="proj")
    try:
        target = _target(client, which)
        query = ReadRowsQuery(row_keys=[b"k"], limit=5)
        own = [_row(r) async for r in await target.read_rows_stream(query)]
        merged = [_row(r) async for r in await client_read_rows_stream(target)(query)]
    finally:
        await client.close()
    assert merged == own == [(b"k", ((b"v", b"k", "f", b"q", 0, "list", ()),))]
    assert len(server.calls) == 2
    assert server.calls[1] == server.calls[0]
    params = dict(server.calls[0][1])["x-goog-request-params"]
    assert "app_profile_id" in params


@pytest.mark.parametrize("which", TARGETS)
def test_the_sync_merged_read_sends_what_the_clients_read_sends(
    server: _Server, which: str
) -> None:
    """The sync twin, against the same server: the same request and metadata as the client's."""
    from google.cloud.bigtable.data import BigtableDataClient

    client = BigtableDataClient(project="proj")
    try:
        target = _target(client, which)
        query = ReadRowsQuery(row_keys=[b"k"], limit=5)
        own = [_row(r) for r in target.read_rows_stream(query)]
        merged = [_row(r) for r in _chunks_sync.client_read_rows_stream(target)(query)]
    finally:
        client.close()
    assert merged == own == [(b"k", ((b"v", b"k", "f", b"q", 0, "list", ()),))]
    assert len(server.calls) == 2
    assert server.calls[1] == server.calls[0]


# -- retries: the same attempts as the client's ----------------------------------------------

ROW_KEYS = [bytes([c]) for c in b"abcdefghij"]
U = grpc.StatusCode.UNAVAILABLE


def _in(key: bytes, rows: Any) -> bool:
    """Whether a RowSet (protobuf) asks for ``key``: an empty one asks for every key."""
    if not rows.row_keys and not rows.row_ranges:
        return True
    if key in rows.row_keys:
        return True
    for r in rows.row_ranges:
        start, end = r.WhichOneof("start_key"), r.WhichOneof("end_key")
        if start == "start_key_closed" and key < r.start_key_closed:
            continue
        if start == "start_key_open" and key <= r.start_key_open:
            continue
        if end == "end_key_closed" and key > r.end_key_closed:
            continue
        if end == "end_key_open" and key >= r.end_key_open:
            continue
        return True
    return False


class _FailingServer(_Server):
    """Serves ten one-cell rows; the n-th call may fail after some rows (a plan per call)."""

    def __init__(self) -> None:
        #: Per call: (rows sent before it fails, status, last_scanned_row_key sent before).
        self.plan: list[tuple[int, grpc.StatusCode, bytes]] = []
        super().__init__()

    def _read_rows(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        metadata = [tuple(m) for m in context.invocation_metadata() if m[0] != "grpc-timeout"]
        self.calls.append((request, sorted(metadata)))
        req = ReadRowsRequest.pb().FromString(request)
        n = len(self.calls) - 1
        fail, code, scanned = self.plan[n] if n < len(self.plan) else (None, None, b"")
        sent = 0
        for key in ROW_KEYS:
            if not _in(key, req.rows) or (req.rows_limit and sent >= req.rows_limit):
                continue
            if fail is not None and sent >= fail:
                break
            yield PB(
                chunks=[_cell(Chunk(row_key=key, value=b"v" + key, commit_row=True))]
            ).SerializeToString()
            sent += 1
        if scanned:
            yield PB(last_scanned_row_key=scanned).SerializeToString()
        if fail is not None:
            context.abort(code, "injected")


#: name: (the server's plan, the query, the read's arguments, the calls it makes).
RETRIES: dict[str, tuple[Any, ReadRowsQuery, dict[str, Any], int]] = {
    "fails twice mid scan": ([(3, U, b""), (2, U, b"")], ReadRowsQuery(), {}, 3),
    "fails under a limit": ([(3, U, b"")], ReadRowsQuery(limit=5), {}, 2),
    "limit reached, then fails": ([(4, U, b"")], ReadRowsQuery(limit=4), {}, 1),
    "every key read, then fails": (
        [(3, U, b"")],
        ReadRowsQuery(row_keys=[b"a", b"b", b"c"]),
        {},
        1,
    ),
    "scanned past, then fails": (
        [(2, U, b"e")],
        ReadRowsQuery(row_ranges=[RowRange(b"b", b"h")]),
        {},
        2,
    ),
    "keys and ranges": (
        [(2, U, b"")],
        ReadRowsQuery(row_keys=[b"a", b"j"], row_ranges=[RowRange(b"c", b"e")]),
        {},
        2,
    ),
    "not retryable": ([(2, grpc.StatusCode.INVALID_ARGUMENT, b"")], ReadRowsQuery(), {}, 1),
    "retryable errors of the call": (
        [(2, grpc.StatusCode.UNAVAILABLE, b"")],
        ReadRowsQuery(),
        {"retryable_errors": []},
        1,
    ),
}


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[_FailingServer]:
    running = _FailingServer()
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{running.port}")
    try:
        yield running
    finally:
        running.stop()


def _record_operations(table: Any) -> list[Any]:
    """The client read operations' metrics ``table`` makes from now on."""
    operations: list[Any] = []
    create = table._create_operation

    def spy(*args: Any, **kw: Any) -> Any:
        operations.append(create(*args, **kw))
        return operations[-1]

    table._create_operation = spy
    return operations


async def _async_attempts(
    server: _FailingServer, plan: Any, query: Any, merged: bool, kwargs: Any
) -> Any:
    from google.cloud.bigtable.data import BigtableDataClientAsync

    server.calls.clear()
    server.plan = list(plan)
    client = BigtableDataClientAsync(project="proj")
    try:
        table = client.get_table("inst", "tab", app_profile_id="ap")
        operations = _record_operations(table)
        read = client_read_rows_stream(table) if merged else table.read_rows_stream
        rows, error = [], None
        try:
            async for row in await read(query, **kwargs):
                rows.append(row.row_key)
        except Exception as exc:
            error = (type(exc).__name__, str(exc))
        (op,) = operations
        return rows, error, server.calls[:], str(op.state), len(op.completed_attempts)
    finally:
        await client.close()


def _sync_attempts(server: _FailingServer, plan: Any, query: Any, merged: bool, kwargs: Any) -> Any:
    from google.cloud.bigtable.data import BigtableDataClient

    server.calls.clear()
    server.plan = list(plan)
    client = BigtableDataClient(project="proj")
    try:
        table = client.get_table("inst", "tab", app_profile_id="ap")
        operations = _record_operations(table)
        read = _chunks_sync.client_read_rows_stream(table) if merged else table.read_rows_stream
        rows, error = [], None
        try:
            for row in read(query, **kwargs):
                rows.append(row.row_key)
        except Exception as exc:
            error = (type(exc).__name__, str(exc))
        (op,) = operations
        return rows, error, server.calls[:], str(op.state), len(op.completed_attempts)
    finally:
        client.close()


@pytest.mark.parametrize("scenario", list(RETRIES))
async def test_retried_reads_make_the_clients_attempts(
    failing: _FailingServer, scenario: str
) -> None:
    """A server that fails mid-stream: the same rows, error, requests (bytes and metadata of
    every attempt, so the same resumed requests and row limits), and metric attempts."""
    plan, query, kwargs, calls = RETRIES[scenario]
    theirs = await _async_attempts(failing, plan, query, False, kwargs)
    ours = await _async_attempts(failing, plan, query, True, kwargs)
    assert ours == theirs
    assert len(ours[2]) == calls


@pytest.mark.parametrize("scenario", list(RETRIES))
def test_sync_retried_reads_make_the_clients_attempts(
    failing: _FailingServer, scenario: str
) -> None:
    """The sync twin against the same failing server: the client's attempts, rows and errors."""
    plan, query, kwargs, calls = RETRIES[scenario]
    theirs = _sync_attempts(failing, plan, query, False, kwargs)
    ours = _sync_attempts(failing, plan, query, True, kwargs)
    assert ours == theirs
    assert len(ours[2]) == calls


async def test_after_the_client_refreshes_its_channel_merged_reads_use_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client swaps its channel and drops its stubs every 35-45 minutes: the merged
    read's RPC is made again on the new channel (as the client's own read is)."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    first, second = _Server(), _Server()
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{first.port}")
    client = BigtableDataClientAsync(project="proj")
    try:
        read = client_read_rows_stream(client.get_table("inst", "tab"))
        assert len([r async for r in await read(ReadRowsQuery())]) == 1
        old = client.transport.grpc_channel.swap_channel(
            grpc.aio.insecure_channel(f"127.0.0.1:{second.port}")
        )
        client._invalidate_channel_stubs()
        assert len([r async for r in await read(ReadRowsQuery())]) == 1
        await old.close()
    finally:
        await client.close()
        first.stop()
        second.stop()
    assert (len(first.calls), len(second.calls)) == (1, 1)


def test_after_the_sync_client_refreshes_its_channel_merged_reads_use_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sync twin, after the same swap."""
    from google.cloud.bigtable.data import BigtableDataClient

    first, second = _Server(), _Server()
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{first.port}")
    client = BigtableDataClient(project="proj")
    try:
        read = _chunks_sync.client_read_rows_stream(client.get_table("inst", "tab"))
        assert len(list(read(ReadRowsQuery()))) == 1
        old = client.transport.grpc_channel.swap_channel(
            grpc.insecure_channel(f"127.0.0.1:{second.port}")
        )
        client._invalidate_channel_stubs()
        assert len(list(read(ReadRowsQuery()))) == 1
        old.close()
    finally:
        client.close()
        first.stop()
        second.stop()
    assert (len(first.calls), len(second.calls)) == (1, 1)


async def test_wrappers_of_the_clients_method_are_respected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Instrumentation that wraps the client's method (functools.wraps keeps its name; a
    proxy object forwards every attribute to it) is not mistaken for the method itself."""
    from google.cloud.bigtable.data import BigtableDataClientAsync, TableAsync

    original = TableAsync.read_rows_stream

    @functools.wraps(original)
    async def wrapped(self: Any, query: Any, **kwargs: Any) -> Any:
        return await original(self, query, **kwargs)

    class Proxy:
        """Forwards everything to the function it wraps (as wrapt's proxies do)."""

        def __init__(self, func: Any) -> None:
            self._func = func

        def __getattr__(self, name: str) -> Any:
            return getattr(self._func, name)

        def __get__(self, obj: Any, cls: Any) -> Any:
            return functools.partial(self._func, obj)

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)
    client = BigtableDataClientAsync(project="p")
    try:
        table = client.get_table("i", "t")
        for patch in (wrapped, Proxy(original)):
            with monkeypatch.context() as patching:
                patching.setattr(TableAsync, "read_rows_stream", patch)
                # (The table's own: a proxy's partial is a new object each time.)
                assert getattr(client_read_rows_stream(table), "__module__", None) != (
                    "saltedtable._async.chunks"
                )
        assert client_read_rows_stream(table).__module__ == "saltedtable._async.chunks"
    finally:
        await client.close()


def test_a_method_patched_before_saltedtable_is_imported_is_respected() -> None:
    """The client's class patched before saltedtable is imported: every read uses the patch."""
    script = """
import google.cloud.bigtable.data._async.client as c
original = c._DataApiTargetAsync.read_rows_stream
async def patched(self, query, **kwargs):
    return await original(self, query, **kwargs)
c._DataApiTargetAsync.read_rows_stream = patched
import saltedtable._async.chunks as _chunks
print(_chunks._CLIENT)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["False"]


async def test_the_universe_domain_is_checked_as_the_client_checks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The generated client checks the credentials' universe domain before a request; so
    does the merged read, with the same error."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)
    client = BigtableDataClientAsync(project="p")

    def wrong_universe() -> None:
        raise ValueError("universe mismatch")

    monkeypatch.setattr(client._gapic_client._client, "_validate_universe_domain", wrong_universe)
    try:
        table = client.get_table("i", "t")
        errors = []
        for read in (table.read_rows_stream, client_read_rows_stream(table)):
            with pytest.raises(ValueError, match="universe mismatch") as caught:
                async for _ in await read(ReadRowsQuery(), operation_timeout=5):
                    pass
            errors.append(type(caught.value))
        assert errors == [ValueError, ValueError]
    finally:
        await client.close()


async def test_the_switch_and_wrappers_decide_between_the_merged_read_and_the_tables_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """internals=False: the table's own method, with the switch named as the reason. A proxy
    that forwards read_rows_stream keeps the merged read (on the table it forwards to); a
    wrapper that defines its own read_rows_stream is always read through it."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)
    client = BigtableDataClientAsync(project="p")
    try:
        table = client.get_table("i", "t")
        assert _chunks.merged_reads_unavailable(table) is None
        assert client_read_rows_stream(table, internals=False) == table.read_rows_stream
        why = _chunks.merged_reads_unavailable(table, internals=False)
        assert "client_internals=False" in str(why)

        class Forwarding:
            """Forwards every attribute to the table (instrumentation of other methods)."""

            def __init__(self, inner: Any) -> None:
                self._inner = inner

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

        class Own(Forwarding):
            async def read_rows_stream(self, query: Any, **kwargs: Any) -> Any:
                return await self._inner.read_rows_stream(query, **kwargs)

        proxy = Forwarding(table)
        assert _chunks.merged_reads_unavailable(proxy) is None
        merged = client_read_rows_stream(proxy)
        assert merged.__module__ == "saltedtable._async.chunks"
        assert client_read_rows_stream(proxy, internals=False) == table.read_rows_stream
        wrapper = Own(table)
        assert client_read_rows_stream(wrapper) == wrapper.read_rows_stream
        why = _chunks.merged_reads_unavailable(wrapper)
        assert "Own" in str(why)
        assert "NoneType" in str(_chunks_sync.merged_reads_unavailable(None))
    finally:
        await client.close()


def test_the_sync_switch_gives_the_tables_own_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud.bigtable.data import BigtableDataClient

    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", NOWHERE)
    client = BigtableDataClient(project="p")
    try:
        table = client.get_table("i", "t")
        assert _chunks_sync.client_read_rows_stream(table).__module__ == (
            "saltedtable._sync_autogen.chunks"
        )
        own = _chunks_sync.client_read_rows_stream(table, internals=False)
        assert own == table.read_rows_stream
    finally:
        client.close()
