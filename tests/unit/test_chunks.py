"""merge_chunks against the installed client's own chunk stream and row merge, chunk for chunk.

Both flavours: the async module against the async client's code, the generated
sync twin against the sync client's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data._async._read_rows import _ReadRowsOperationAsync
from google.cloud.bigtable.data._sync_autogen._read_rows import _ReadRowsOperation
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable_v2.types import ReadRowsResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import _chunks_sync
from saltedtable._chunks import client_read_rows_stream, merge_chunks
from tests.fakes import FakeTable

PB = ReadRowsResponse.pb()
Chunk = PB.CellChunk
PROPERTY = settings(max_examples=400, deadline=None)


@dataclass
class Attempt:
    application_blocking_time_ns: int = 0


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
            (c.value, c.row_key, c.family, c.qualifier, c.timestamp_micros, tuple(c.labels))
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
    return Outcome(
        rows, error, op._operation_metric.calls, op._last_yielded_row_key, op._remaining_count
    )


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
    return Outcome(
        rows, error, op._operation_metric.calls, op._last_yielded_row_key, op._remaining_count
    )


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
        value_size=draw(st.sampled_from([0, 0, 0, 4])),
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
            # The server takes the row back and sends it again.
            reset = Chunk(reset_row=True)
            flat.extend([*row_chunks[: draw(st.integers(1, len(row_chunks)))], reset])
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
    else:
        part = Chunk(value=b"lit", reset_row=True)
    out = _compare([PB(chunks=[first, part])], None, None, False, None)
    assert out.error is not None
    assert out.error[0] == "InvalidChunk"
    assert out.error[1].endswith(message)


# -- the table's read_rows_stream ----------------------------------------------------------------


def test_tables_that_are_not_the_clients_keep_their_own_read_rows_stream() -> None:
    """A fake table, or any table-like object, is read through its own method."""
    table = FakeTable()
    assert client_read_rows_stream(table) == table.read_rows_stream
    assert _chunks_sync.client_read_rows_stream(table) == table.read_rows_stream


def test_a_sync_client_table_gets_the_merged_read_and_keeps_a_replacement() -> None:
    """The sync twin: the client's table gets the merged read; a replaced method is kept."""
    from google.cloud.bigtable.data import BigtableDataClient

    client = BigtableDataClient(project="p", credentials=_anonymous())
    try:
        table = client.get_table("i", "t")
        merged = _chunks_sync.client_read_rows_stream(table)
        assert merged != table.read_rows_stream
        assert merged.__module__ == "saltedtable._chunks_sync"

        def spy(query: ReadRowsQuery, **kwargs: Any) -> Any:
            return type(table).read_rows_stream(table, query, **kwargs)

        table.read_rows_stream = spy  # type: ignore[method-assign]
        assert _chunks_sync.client_read_rows_stream(table) is spy
    finally:
        client.close()


async def test_a_replaced_read_rows_stream_is_used_as_it_is() -> None:
    """A client table whose read_rows_stream was replaced (a spy, a wrapper) keeps it."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    client = BigtableDataClientAsync(project="p", credentials=_anonymous())
    try:
        table = client.get_table("i", "t")
        merged = client_read_rows_stream(table)
        assert merged != table.read_rows_stream
        assert merged.__module__ == "saltedtable._chunks"

        async def spy(query: ReadRowsQuery, **kwargs: Any) -> Any:
            return await type(table).read_rows_stream(table, query, **kwargs)

        table.read_rows_stream = spy  # type: ignore[method-assign]
        assert client_read_rows_stream(table) is spy
    finally:
        await client.close()


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()  # type: ignore[no-untyped-call]


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
    assert merged == own == [(b"k", ((b"v", b"k", "f", b"q", 0, ()),))]
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
    assert merged == own == [(b"k", ((b"v", b"k", "f", b"q", 0, ()),))]
    assert len(server.calls) == 2
    assert server.calls[1] == server.calls[0]
