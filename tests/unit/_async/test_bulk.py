"""bulk_mutate_rows through the client's own operation, against a gRPC server.

Both flavours: what goes on the wire is what the client's own call sends with
the entries under their physical keys; failures and retries are the client's,
naming the caller's entries; and the call keeps no object a row more alive than
the client's own call (issue 41: one more crossed the collector's threshold).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.exceptions import FailedMutationEntryError, MutationsExceptionGroup
from google.cloud.bigtable_v2.types import MutateRowsRequest, MutateRowsResponse

from saltedtable import SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._async.bulk import placed_bulk_unavailable
from saltedtable._sync_autogen.bulk import placed_bulk_unavailable as sync_unavailable
from tests.fakes import FakeTable

SCHEME = SaltScheme(8)
REQUEST = MutateRowsRequest.pb()
RESPONSE = MutateRowsResponse.pb()


class _Server:
    """Answers MutateRows, entry by entry, from a plan; records each request and the
    tracked objects of the process while it is answered (the client waits for it)."""

    def __init__(self) -> None:
        #: Physical key: the status codes of its successive attempts (then OK).
        self.plan: dict[bytes, list[int]] = {}
        self.calls: list[tuple[bytes, list[tuple[str, Any]]]] = []
        self.tracked: list[int] = []
        self.count_objects = False
        handler = grpc.unary_stream_rpc_method_handler(self._mutate_rows)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "google.bigtable.v2.Bigtable", {"MutateRows": handler}
                ),
            )
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _mutate_rows(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        metadata = [tuple(m) for m in context.invocation_metadata() if m[0] != "grpc-timeout"]
        self.calls.append((request, sorted(metadata)))
        if self.count_objects:
            self.tracked.append(len(gc.get_objects()))
        entries = []
        for index, entry in enumerate(REQUEST.FromString(request).entries):
            codes = self.plan.get(entry.row_key, [])
            code = codes.pop(0) if codes else 0
            entries.append(RESPONSE.Entry(index=index, status={"code": code, "message": "m"}))
        yield RESPONSE(entries=entries).SerializeToString()

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


def entries(n: int) -> list[RowMutationEntry]:
    return [RowMutationEntry(b"k%05d" % i, SetCell("f", b"q", b"v", 1000)) for i in range(n)]


def placed(logical: list[RowMutationEntry]) -> list[RowMutationEntry]:
    return [RowMutationEntry(SCHEME.salt_key(e.row_key), list(e.mutations)) for e in logical]


TARGETS = ["table", "table with an app profile", "authorized view"]


def _target(client: Any, which: str) -> Any:
    if which == "table":
        return client.get_table("inst", "tab")
    if which == "table with an app profile":
        return client.get_table("inst", "tab", app_profile_id="prof")
    return client.get_authorized_view("inst", "tab", "view", app_profile_id="prof")


@pytest.mark.parametrize("which", TARGETS)
async def test_the_salted_bulk_write_sends_what_the_clients_call_sends(
    server: _Server, which: str
) -> None:
    """The same request bytes and metadata as the client's own call with physical entries."""
    client = BigtableDataClientAsync(project="proj")
    try:
        target = _target(client, which)
        assert placed_bulk_unavailable(target) is None
        await target.bulk_mutate_rows(placed(entries(5)))
        await SaltedTableAsync(target, SCHEME, guard=False).bulk_mutate_rows(entries(5))
    finally:
        await client.close()
    assert len(server.calls) == 2
    assert server.calls[1] == server.calls[0]
    sent = [e.row_key for e in REQUEST.FromString(server.calls[0][0]).entries]
    assert sent == [SCHEME.salt_key(b"k%05d" % i) for i in range(5)]


@pytest.mark.parametrize("which", TARGETS)
def test_the_sync_salted_bulk_write_sends_what_the_clients_call_sends(
    server: _Server, which: str
) -> None:
    """The sync twin: the same request and metadata as the sync client's own call."""
    client = BigtableDataClient(project="proj")
    try:
        target = _target(client, which)
        assert sync_unavailable(target) is None
        target.bulk_mutate_rows(placed(entries(5)))
        SaltedTable(target, SCHEME, guard=False).bulk_mutate_rows(entries(5))
    finally:
        client.close()
    assert len(server.calls) == 2
    assert server.calls[1] == server.calls[0]


def _failures(group: MutationsExceptionGroup) -> list[tuple[int | None, Any, str]]:
    out = []
    for exc in group.exceptions:
        assert isinstance(exc, FailedMutationEntryError)
        out.append((exc.index, exc.entry, type(exc.__cause__).__name__))
    return out


async def test_retries_and_failures_are_the_clients_naming_the_callers_entries(
    server: _Server,
) -> None:
    """A retryable failure is retried (idempotent entries) and a permanent one names the
    caller's own entry object and its index, as the client's own call reports it."""
    # The last entry is not idempotent (the server's timestamp): never retried.
    logical = [*entries(6), RowMutationEntry(b"late", SetCell("f", b"q", b"v", -1))]
    unavailable, invalid = grpc.StatusCode.UNAVAILABLE.value[0], 3
    server.plan = {
        SCHEME.salt_key(b"k00001"): [unavailable],  # retried, then written
        SCHEME.salt_key(b"k00003"): [invalid],  # fails
        SCHEME.salt_key(b"late"): [unavailable],  # not retried: fails
    }
    client = BigtableDataClientAsync(project="proj")
    try:
        table = SaltedTableAsync(client.get_table("inst", "tab"), SCHEME, guard=False)
        with pytest.raises(MutationsExceptionGroup) as caught:
            await table.bulk_mutate_rows(logical)
    finally:
        await client.close()
    failures = _failures(caught.value)
    assert [(i, e) for i, e, _ in failures] == [(3, logical[3]), (6, logical[6])]
    assert all(e is logical[i] for i, e, _ in failures)
    assert [cause for _, _, cause in failures] == ["InvalidArgument", "ServiceUnavailable"]
    assert caught.value.total_entries_attempted == 7
    assert len(server.calls) == 2  # the retry sends only the retried entry
    assert [e.row_key for e in REQUEST.FromString(server.calls[1][0]).entries] == [
        SCHEME.salt_key(b"k00001")
    ]


async def test_too_many_mutations_are_refused_with_the_clients_error(server: _Server) -> None:
    """More than 100,000 mutations in one call: the client's ValueError, nothing sent."""
    many = [SetCell("f", b"q", b"v", 1000)] * 100_001
    big = [RowMutationEntry(b"a", many[:50_000]), RowMutationEntry(b"b", many[50_000:])]
    client = BigtableDataClientAsync(project="proj")
    try:
        raw = client.get_table("inst", "tab")
        with pytest.raises(ValueError, match="at most 100000 mutations") as theirs:
            await raw.bulk_mutate_rows(placed(big))
        with pytest.raises(ValueError, match="at most 100000 mutations") as ours:
            await SaltedTableAsync(raw, SCHEME, guard=False).bulk_mutate_rows(big)
    finally:
        await client.close()
    assert str(ours.value) == str(theirs.value)
    assert server.calls == []


ROWS = 3000


async def test_the_salted_call_keeps_no_more_objects_alive_than_the_clients(
    server: _Server,
) -> None:
    """While the request is answered, the process tracks about as many objects as during
    the client's own call with the keys already salted: none a row more (before, the
    physical entry of each row was one more, and crossed the threshold of a full
    collection at 20,000 entries)."""
    client = BigtableDataClientAsync(project="proj")
    try:
        target = client.get_table("inst", "tab")
        salted = SaltedTableAsync(target, SCHEME, guard=False)
        logical = entries(ROWS)
        physical = placed(logical)
        await target.bulk_mutate_rows(physical[:10])  # warm: the channel, the caches
        server.count_objects = True
        gc.collect()
        await target.bulk_mutate_rows(physical)
        gc.collect()
        await salted.bulk_mutate_rows(logical)
    finally:
        await client.close()
    raw, ours = server.tracked
    assert ours - raw < ROWS // 10, (raw, ours)


async def test_tables_that_are_not_the_clients_write_through_their_own_method(
    server: _Server,
) -> None:
    """A fake table, a replaced method, the switch off: the table's own bulk_mutate_rows,
    with physical entries."""
    fake = FakeTable()
    assert placed_bulk_unavailable(fake) is not None
    client = BigtableDataClientAsync(project="proj")
    try:
        table = client.get_table("inst", "tab")
        assert placed_bulk_unavailable(table, internals=False) is not None
        view = client.get_materialized_view("inst", "view")
        assert placed_bulk_unavailable(view) is not None  # its own method refuses writes

        async def replaced(*args: Any, **kwargs: Any) -> None:
            pass

        table.bulk_mutate_rows = replaced  # type: ignore[method-assign]
        assert placed_bulk_unavailable(table) is not None
    finally:
        await client.close()
