"""The sync table: the thread driver of the merge, and SaltedTable over a sync fake table."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextlib import closing

import pytest
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup
from google.cloud.bigtable.data.mutations import SetCell
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    CallStats,
    ReadBudget,
    SaltedTable,
    SaltScheme,
    SchemeMismatchError,
    SubScan,
)
from saltedtable._engine.merge import Feed, Sent
from saltedtable._engine.merge_threads import ThreadMerge
from saltedtable._engine.runtime_threads import READ_REQUESTS
from tests.fakes import FakeTable, SyncFakeTable
from tests.slot_marks import mark_small_reads, reads_point_keys
from tests.unit._engine.test_merge import partitions

PROPERTY = settings(max_examples=40, deadline=None)


class Source:
    """A sync source over sorted items, pushing through the merge; records its requests."""

    def __init__(
        self, items: Sequence[int], *, delay: float = 0.0, fail_after: int | None = None
    ) -> None:
        self.items = sorted(items)
        self.pos = 0
        self.sizes: list[int] = []
        self.delay = delay
        self.fail_after = fail_after
        self.stopped_early = False
        self.running = 0

    def __call__(self, size: int, feed: Feed[int], merge: ThreadMerge[int]) -> Sent:
        assert size >= 1
        assert self.running == 0, "one request at a time"
        self.running += 1
        try:
            self.sizes.append(size)
            pushed = 0
            for item in self.items[self.pos : self.pos + size]:
                if merge.stopping:
                    self.stopped_early = True
                    return Sent(pushed, False)
                if self.delay:
                    time.sleep(self.delay)
                if self.fail_after is not None and self.pos >= self.fail_after:
                    raise ServiceUnavailable(f"source failed at {self.pos}")
                merge.push(feed, item, item)
                self.pos += 1
                pushed += 1
            return Sent(pushed, self.pos < len(self.items))
        finally:
            self.running -= 1


def workers() -> list[threading.Thread]:
    """The sub-scan worker threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("saltedtable-subscan")]


@PROPERTY
@given(
    parts=partitions(),
    ordered=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 200)),
    budget_rows=st.integers(1, 60),
    threads=st.integers(1, 4),
)
def test_the_thread_driver_returns_exactly_what_it_should(
    parts: list[list[int]], ordered: bool, limit: int | None, budget_rows: int, threads: int
) -> None:
    """Same engine, threads: exact results in every mode, within the budget, no worker left."""
    sources = [Source(p) for p in parts]
    merge = ThreadMerge(
        sources, threads=threads, ordered=ordered, limit=limit, budget=ReadBudget(budget_rows)
    )
    with merge:
        got = [item for batch in merge for item in batch]
    expected = sorted(x for p in parts for x in p)
    if ordered:
        assert got == expected[:limit]
    else:
        assert len(got) == len(set(got)) == min(len(expected), limit or len(expected))
        assert set(got) <= set(expected)
    assert merge.peak_outstanding <= budget_rows + len(sources)
    assert not workers()


def test_closing_early_stops_every_source_and_joins_every_worker() -> None:
    """close() after the first batch returns only when every worker is back; sources stopped."""
    sources = [Source(range(s, 40_000, 4), delay=0.0001) for s in range(4)]
    merge = ThreadMerge(sources, threads=4, budget=ReadBudget(rows=4000))
    first = next(merge)
    assert first
    merge.close()
    assert not workers()
    assert all(s.running == 0 for s in sources)
    assert sum(s.pos for s in sources) < 40_000
    with pytest.raises(StopIteration):
        next(merge)


@pytest.mark.parametrize("ordered", [True, False])
def test_a_failing_source_raises_its_error_and_stops_the_others(ordered: bool) -> None:
    """The first failure is raised as it is; every other source stops; no worker is left."""
    sources = [Source(range(s, 4000, 4), delay=0.0001) for s in range(3)]
    sources.append(Source(range(3, 4000, 4), fail_after=10))
    merge = ThreadMerge(sources, threads=4, ordered=ordered, budget=ReadBudget(rows=400))
    with pytest.raises(ServiceUnavailable, match="source failed at 10"), merge:
        for _ in merge:
            pass
    assert not workers()
    assert all(s.running == 0 for s in sources)


def test_threads_are_bounded() -> None:
    """A read never runs more workers than it was given."""
    sources = [Source(range(s, 800, 16), delay=0.0002) for s in range(16)]
    peak = 0

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(workers()))
            time.sleep(0.0005)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    with ThreadMerge(sources, threads=3, budget=ReadBudget(rows=64)) as merge:
        assert [x for batch in merge for x in batch] == list(range(800))
    done.set()
    watcher.join()
    assert 1 <= peak <= 3


@pytest.mark.parametrize("ordered", [True, False])
def test_a_sync_read_runs_few_requests_at_once_whatever_the_slots(ordered: bool) -> None:
    """At 64 slots a 16-bucket sync scan runs READ_REQUESTS requests at once, in as many workers.

    Each running request costs every other read's rows a turn in the client's
    one event thread per channel (issue 26): before, the scan ran all 16.
    """
    fake = FakeTable()
    table = SaltedTable(  # type: ignore[arg-type]
        SyncFakeTable(fake), SaltScheme(16), max_concurrent_subscans=64, budget=ReadBudget(rows=64)
    )
    table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    fake.stats.max_open = 0
    fake.latency = 0.002  # each request waits before its first row: they overlap
    peak = 0

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(workers()))
            time.sleep(0.0005)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rows = table.read_rows(ReadRowsQuery(), ordered=ordered)
    finally:
        done.set()
        watcher.join()
    assert sorted(r.row_key for r in rows) == KEYS
    assert 1 <= fake.stats.max_open <= READ_REQUESTS
    assert 1 <= peak <= READ_REQUESTS
    assert table.limiter.free == 64


# -- SaltedTable over a sync fake -----------------------------------------------------


KEYS = [b"k%05d" % i for i in range(400)]


def filled(**kwargs: object) -> tuple[FakeTable, SaltedTable]:
    """A fake with 400 rows over 4 buckets, written through the sync table."""
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4), **kwargs)  # type: ignore[arg-type]
    table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in KEYS])
    fake.stats.queries.clear()
    return fake, table


@pytest.mark.parametrize("budget", [20_000, 12])
def test_sync_reads_match_the_logical_rows(budget: int) -> None:
    """Scans, limits, prefixes, point reads and unordered reads give the logical rows."""
    _, table = filled(budget=ReadBudget(rows=budget))
    assert [r.row_key for r in table.read_rows(ReadRowsQuery())] == KEYS
    assert sorted(r.row_key for r in table.read_rows(ReadRowsQuery(), ordered=False)) == KEYS
    assert [r.row_key for r in table.read_rows(ReadRowsQuery(limit=7))] == KEYS[:7]
    assert [r.row_key for r in table.read_prefix(b"k001")] == KEYS[100:200]
    row = table.read_row(b"k00042")
    assert row is not None
    assert row.row_key == b"k00042"
    assert [c.row_key for c in row.cells] == [b"k00042"]
    assert table.row_exists(b"k00042")
    assert not table.row_exists(b"nope")
    got = table.read_rows_sharded([ReadRowsQuery(row_keys=[b"k00001"]), {"rows_limit": 2}])
    assert [r.row_key for r in got] == [b"k00001", b"k00000", b"k00001"]


def test_leaving_a_sync_stream_early_stops_every_request() -> None:
    """break + close: no worker left, every fake stream ended, the stats say it ended early."""
    fake, table = filled(budget=ReadBudget(rows=40))
    fake.latency = 0.001
    stats = CallStats()
    reported: list[CallStats] = []
    table.stats_hook = reported.append
    with closing(table.read_rows_stream(ReadRowsQuery(), stats=stats)) as rows:
        for n, _ in enumerate(rows):
            if n == 20:
                break
    assert not workers()
    assert fake.stats.open_now == 0
    assert reported == [stats]
    assert stats.ended_early
    assert stats.error is None
    assert stats.rows == 21


def test_a_failing_bucket_keeps_the_clients_error_type() -> None:
    """The fake's ServiceUnavailable comes out as it is, tagged with its bucket."""
    fake, table = filled()
    fake.fail_when = lambda q: any((r.start_key or b"").startswith(b"2-") for r in q.row_ranges)
    fake.fail_with = ServiceUnavailable("bucket 2 is down")
    with pytest.raises(ServiceUnavailable, match="bucket 2 is down") as info:
        table.read_rows(ReadRowsQuery())
    subscan = info.value.saltedtable_subscan  # type: ignore[attr-defined]
    assert isinstance(subscan, SubScan)
    assert subscan.bucket == 2
    assert not workers()


def test_a_slot_wait_past_the_deadline_is_deadline_exceeded() -> None:
    """With every slot taken elsewhere, a read fails like the client's timeout."""
    _, table = filled(max_concurrent_subscans=1)
    assert table.limiter.acquire(time.monotonic())
    try:
        with pytest.raises(DeadlineExceeded, match="sub-scan slot"):
            table.read_rows(ReadRowsQuery(), operation_timeout=0.05)
    finally:
        table.limiter.release()


def test_bad_timeouts_fail_at_call_time_like_the_client() -> None:
    """operation_timeout=0 or attempt_timeout=0 fail when the read is made, not when iterated."""
    _, table = filled()
    with pytest.raises(ValueError, match="operation_timeout must be greater than 0"):
        table.read_rows_stream(ReadRowsQuery(), operation_timeout=0)
    with pytest.raises(ValueError, match="attempt_timeout must be greater than 0"):
        table.read_rows_stream(ReadRowsQuery(), attempt_timeout=0)
    with pytest.raises(AttributeError):
        table.read_rows_stream(ReadRowsQuery(row_filter="x"))  # type: ignore[arg-type]


def test_the_guard_stores_the_record_and_refuses_another_layout() -> None:
    """The first write stores the layout; a table object with another scheme is refused."""
    fake, _ = filled()
    assert SCHEME_ROW_KEY in fake.row_keys()
    other = SaltedTable(SyncFakeTable(fake), SaltScheme(8))
    with pytest.raises(SchemeMismatchError):
        other.read_row(b"k00001")
    with pytest.raises(SchemeMismatchError):  # the refusal is kept, not read again
        other.read_rows(ReadRowsQuery())
    unguarded = SaltedTable(SyncFakeTable(fake), SaltScheme(8), guard=False)
    assert unguarded.read_row(b"k00001") is None  # reads the wrong buckets: why there is a guard


def test_the_sync_batcher_salts_and_names_logical_keys() -> None:
    """Appended entries land salted; failures come back with logical keys."""
    fake = FakeTable(fail_entry=lambda e: ValueError("no") if e.row_key.endswith(b"bad") else None)
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4))
    batcher = table.mutations_batcher()
    batcher.append(RowMutationEntry(b"good", SetCell("f1", b"q", b"v", 1)))
    batcher.append(RowMutationEntry(b"bad", SetCell("f1", b"q", b"v", 1)))
    with pytest.raises(MutationsExceptionGroup) as info:
        batcher.close()
    assert [e.entry.row_key for e in info.value.exceptions] == [b"bad"]  # type: ignore[attr-defined]
    assert fake.data_keys() == [SaltScheme(4).salt_key(b"good")]


def test_concurrent_first_operations_with_the_wrong_scheme_are_all_refused() -> None:
    """Threads starting at once on a wrongly opened table all raise; nothing is written."""
    fake = FakeTable()
    SaltedTable(SyncFakeTable(fake), SaltScheme(8)).mutate_row(b"a", SetCell("f1", b"q", b"v"))  # type: ignore[arg-type]
    before = fake.data_keys()
    wrong = SaltedTable(SyncFakeTable(fake), SaltScheme(16))  # type: ignore[arg-type]
    barrier = threading.Barrier(8)
    results: list[str] = []

    def first(i: int) -> None:
        barrier.wait()
        try:
            if i % 2:
                wrong.mutate_row(b"w%d" % i, SetCell("f1", b"q", b"v"))
            else:
                wrong.read_row(b"a")
            results.append("ok")
        except SchemeMismatchError:
            results.append("refused")

    threads = [threading.Thread(target=first, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["refused"] * 8
    assert fake.data_keys() == before


@pytest.mark.parametrize("scans", [1, 3])
def test_a_small_read_waits_for_about_one_request_per_scan_not_for_the_scans(scans: int) -> None:
    """The slots are first come, first served: a busy scan's worker asking again queues.

    Found by differential fuzzing (issue 26, R3): with a semaphore, a worker releasing its
    slot and asking again at once took it before the thread that was woken for it, so at
    one slot small reads next to streaming scans failed waiting for a slot.
    """
    fake, table = filled(max_concurrent_subscans=1, budget=ReadBudget(rows=8))
    fake.latency = 0.01  # every request waits a little before its first row
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
        deadline = time.monotonic() + 10
        while fake.stats.opened < 10 * scans:  # the scans are busy
            assert time.monotonic() < deadline
            time.sleep(0.001)
        marks = mark_small_reads(table.limiter, lambda: fake.stats.opened, reads_point_keys)
        for i, key in enumerate((KEYS[5], KEYS[250], KEYS[399])):
            rows = table.read_rows(ReadRowsQuery(row_keys=[key]), operation_timeout=30)
            assert [r.row_key for r in rows] == [key]
            assert len(marks) == i + 1, marks  # it asked for a slot once
            # Requests started from when it asked for its slot (not from before the call:
            # those the scans start while this thread plans the read depend on the
            # machine's speed): about one per scan ahead of it, and its own.
            assert fake.stats.opened - marks[-1] <= 2 * scans + 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
