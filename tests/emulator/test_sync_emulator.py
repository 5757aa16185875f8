"""SaltedTable over the sync client, on the emulator: leaving early, errors, writes, the guard."""

from __future__ import annotations

import gc
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing

import grpc
import pytest
from google.api_core.exceptions import NotFound
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    ReadBudget,
    SaltedTable,
    SaltScheme,
    SchemeMismatchError,
    SubScan,
)
from saltedtable.testing import INSTANCE, PROJECT, Emulator, create_table, delete_table
from tests.conftest import MakeTable
from tests.slot_marks import mark_small_reads, reads_point_keys

SCHEME = SaltScheme(16)
KEYS = [b"user%05d" % i for i in range(6000)]


@pytest.fixture
def client(emulator: Emulator) -> Iterator[BigtableDataClient]:
    """A sync data client on the session's emulator."""
    with BigtableDataClient(project=PROJECT) as data_client:
        yield data_client


@pytest.fixture(scope="module")
def loaded_table_id(emulator: Emulator) -> Iterator[str]:
    """A 16-bucket table of 6,000 rows, written through the sync salted table once.

    The tests of ``loaded`` only read it (the one that tries to write asserts that
    nothing lands), so they share it rather than write the same rows, a second each.
    """
    table_id = f"loaded-{uuid.uuid4().hex[:12]}"
    create_table(emulator.address, table_id, ["cf"])
    try:
        with BigtableDataClient(project=PROJECT) as writer:
            table = SaltedTable.from_client(writer, INSTANCE, table_id, SCHEME)
            for start in range(0, len(KEYS), 2000):
                table.bulk_mutate_rows(
                    [
                        RowMutationEntry(k, SetCell("cf", b"q", b"v" * 50))
                        for k in KEYS[start : start + 2000]
                    ]
                )
            table.close()
        yield table_id
    finally:
        delete_table(emulator.address, table_id, missing_ok=True)


@pytest.fixture
def loaded(client: BigtableDataClient, loaded_table_id: str) -> SaltedTable:
    """The module's 16-bucket table of 6,000 rows, salted, on this test's client."""
    table = SaltedTable.from_client(client, INSTANCE, loaded_table_id, SCHEME)
    # Its guard settled and its channel connected before the test, as when the test's
    # own table wrote the rows.
    assert table.read_row(KEYS[0]) is not None
    return table


def open_calls() -> list[object]:
    """gRPC calls of the sync client that are still running."""
    gc.collect()
    calls = [o for o in gc.get_objects() if isinstance(o, grpc.Call)]
    return [c for c in calls if getattr(c, "is_active", lambda: False)()]


def subscan_threads() -> list[threading.Thread]:
    """saltedtable's worker threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("saltedtable-subscan")]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_sync_scan_reads_every_row_in_order(loaded: SaltedTable, ordered: bool) -> None:
    """A full scan returns every logical row, in key order when ordered."""
    keys = [r.row_key for r in loaded.read_rows(ReadRowsQuery(), ordered=ordered)]
    assert (keys if ordered else sorted(keys)) == KEYS
    assert [r.row_key for r in loaded.read_rows(ReadRowsQuery(limit=10))] == KEYS[:10]


@pytest.mark.parametrize("leave", ["break-close", "drop"])
def test_leaving_a_sync_scan_early_leaves_no_thread_and_no_rpc(
    loaded: SaltedTable, leave: str
) -> None:
    """break + close(), or dropping the iterator: no worker and no gRPC call outlive the scan."""
    assert not open_calls()
    rows = loaded.read_rows_stream(ReadRowsQuery())
    for n, _ in enumerate(rows):
        if n == 50:
            break
    if leave == "break-close":
        rows.close()  # type: ignore[attr-defined]
    del rows
    assert not subscan_threads()
    assert not open_calls(), "a sub-scan's RPC is still running"


@pytest.mark.parametrize("how", ["reversed", "internals-off"])
def test_leaving_a_reversed_or_switched_off_sync_scan_leaves_no_thread_and_no_rpc(
    loaded: SaltedTable, how: str
) -> None:
    """A reversed scan (saltedtable's own requests) and a scan through the client's own
    read_rows_stream (the switch off) leave no worker and no gRPC call once left."""
    assert not open_calls()
    if how == "reversed":
        table, query = loaded, {"reversed": True}
    else:
        table = SaltedTable(loaded.table, SCHEME, client_internals=False)
        query = ReadRowsQuery()
    rows = table.read_rows_stream(query)  # type: ignore[arg-type]
    seen = []
    for n, row in enumerate(rows):
        seen.append(row.row_key)
        if n == 50:
            break
    rows.close()  # type: ignore[attr-defined]
    del rows
    assert seen == (KEYS[::-1][:51] if how == "reversed" else KEYS[:51])
    assert not subscan_threads()
    assert not open_calls(), "a sub-scan's RPC is still running"


def test_a_sync_prefix_read_left_early_with_closing(loaded: SaltedTable) -> None:
    """contextlib.closing around read_prefix: the documented way out, clean."""
    with closing(loaded.read_prefix(b"user0")) as rows:
        first = next(iter(rows))
    assert first.row_key == b"user00000"
    assert not subscan_threads()
    assert not open_calls()


def test_errors_keep_the_clients_types(client: BigtableDataClient) -> None:
    """A missing table: the client's NotFound, from point reads and scans alike."""
    table = SaltedTable.from_client(client, INSTANCE, "no-such-table", SCHEME, guard=False)
    with pytest.raises(NotFound):
        table.read_row(b"k")
    with pytest.raises(NotFound) as info:
        table.read_rows(ReadRowsQuery())
    assert isinstance(info.value.saltedtable_subscan, SubScan)  # type: ignore[attr-defined]
    assert not subscan_threads()


def test_writes_land_salted_and_the_guard_keeps_the_layout(
    client: BigtableDataClient, make_table: MakeTable
) -> None:
    """Point writes, read-modify-write and the batcher store salted keys plus the layout record."""
    table_id = make_table()
    table = SaltedTable.from_client(client, INSTANCE, table_id, SCHEME)
    table.mutate_row(b"a", SetCell("cf", b"q", b"1"))
    with table.mutations_batcher(flush_limit_mutation_count=2) as batcher:
        for key in (b"b", b"c", b"d"):
            batcher.append(RowMutationEntry(key, SetCell("cf", b"q", key)))
    assert table.check_and_mutate_row(b"a", None, true_case_mutations=SetCell("cf", b"r", b"x"))
    row = table.read_row(b"a")
    assert row is not None
    assert row.row_key == b"a"
    raw = client.get_table(INSTANCE, table_id)
    physical = [r.row_key for r in raw.read_rows(ReadRowsQuery())]
    assert physical == sorted(
        [*(SCHEME.salt_key(k) for k in (b"a", b"b", b"c", b"d")), SCHEME_ROW_KEY]
    )
    with pytest.raises(SchemeMismatchError):
        SaltedTable.from_client(client, INSTANCE, table_id, SaltScheme(8)).read_row(b"a")


def test_threads_starting_at_once_on_a_wrongly_opened_table_are_all_refused(
    loaded: SaltedTable, client: BigtableDataClient
) -> None:
    """16 threads' first operations (reads, writes, a sharded read) all raise; nothing lands."""
    raw = client.get_table(INSTANCE, loaded.table_id)
    before = [r.row_key for r in raw.read_rows(ReadRowsQuery())]
    wrong = SaltedTable(raw, SaltScheme(8))
    barrier = threading.Barrier(16)
    outcomes: list[str] = []

    def first(i: int) -> None:
        barrier.wait()
        try:
            if i % 3 == 0:
                wrong.mutate_row(b"new%d" % i, SetCell("cf", b"q", b"v"))
            elif i % 3 == 1:
                wrong.read_row(KEYS[i])
            else:
                wrong.read_rows_sharded([ReadRowsQuery(limit=2), ReadRowsQuery(limit=3)])
            outcomes.append("went ahead")
        except SchemeMismatchError:
            outcomes.append("refused")

    threads = [threading.Thread(target=first, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == ["refused"] * 16
    assert [r.row_key for r in raw.read_rows(ReadRowsQuery())] == before


def test_a_small_sync_read_is_one_request_and_a_big_one_goes_on_by_bucket(
    loaded: SaltedTable,
) -> None:
    """A 100-row prefix read takes one request over all 16 buckets; with a smaller
    one_request_rows the same read comes back full and goes on bucket by bucket, with the
    same rows either way; leaving early leaves no thread and no RPC."""
    from saltedtable import CallStats, ReadBudget

    stats = CallStats()
    rows = list(loaded.read_prefix(b"user012", stats=stats))
    assert [r.row_key for r in rows] == KEYS[1200:1300]
    assert stats.requests == 1
    one = stats.one_request
    assert one is not None
    assert (one.result, one.asked, one.rows, one.went_on) == ("answered", 1000, 100, False)

    small = SaltedTable(loaded.table, SCHEME, budget=ReadBudget(one_request_rows=10))
    again = list(small.read_prefix(b"user012", stats=stats))
    assert [r.row_key for r in again] == KEYS[1200:1300]
    one = stats.one_request
    assert one is not None
    assert (one.result, one.asked, one.rows, one.went_on) == ("full", 10, 10, True)
    assert stats.settings is not None
    assert stats.settings.one_request_rows == 10
    assert stats.requests > 16

    stream = loaded.read_prefix(b"user03")
    assert next(iter(stream)).row_key == KEYS[3000]
    stream.close()  # type: ignore[attr-defined]
    del stream
    assert not subscan_threads()
    assert not open_calls(), "the one request's RPC is still running"


class _CountingTable:
    """A sync table that counts the ReadRows requests it starts (everything else passes)."""

    def __init__(self, table: object) -> None:
        self._table = table
        self.requests = 0
        self._lock = threading.Lock()

    def read_rows_stream(self, *args: object, **kwargs: object) -> object:
        with self._lock:
            self.requests += 1
        return self._table.read_rows_stream(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._table, name)


@pytest.mark.parametrize("scans", [1, 3])
def test_small_reads_next_to_streaming_scans_wait_their_turn_at_one_slot(
    client: BigtableDataClient, loaded: SaltedTable, scans: int
) -> None:
    """Issue 26 (R3) on the emulator: at one slot, scans streaming without pause in other
    threads let a small read in after about one request each, and none of the small reads
    fails waiting for a slot (with a semaphore, 7 to 10 of 10 did at operation_timeout=10).
    Requests are counted, not timed.
    """
    counting = _CountingTable(client.get_table(INSTANCE, loaded.table_id))
    # Small pages, so that each scan asks again and again.
    table = SaltedTable(
        counting,  # type: ignore[arg-type]
        SCHEME,
        max_concurrent_subscans=1,
        budget=ReadBudget(rows=64),
        guard=False,
    )
    stop = threading.Event()

    def scan() -> None:
        while not stop.is_set():
            for _ in table.read_rows_stream(ReadRowsQuery()):
                if stop.is_set():
                    break

    threads = [threading.Thread(target=scan) for _ in range(scans)]
    for thread in threads:
        thread.start()
    try:
        while counting.requests < 20 * scans:  # the scans are busy (they stop by themselves below)
            stop.wait(0.005)
        marks = mark_small_reads(table.limiter, lambda: counting.requests, reads_point_keys)
        for i, key in enumerate((KEYS[5], KEYS[2500], KEYS[5999])):
            rows = table.read_rows(ReadRowsQuery(row_keys=[key]), operation_timeout=10)
            assert [r.row_key for r in rows] == [key]
            assert len(marks) == i + 1, marks  # it asked for a slot once
            # Requests started from when it asked for its slot: about one per scan ahead
            # of it, and its own. (Counted from before the call, the requests the scans
            # start while this thread plans the read count too: as many as a loaded
            # machine's slowness allows.) With unfair slots a scan starts request after
            # request.
            assert counting.requests - marks[-1] <= 2 * scans + 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
