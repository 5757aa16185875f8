"""The guard runs a window stored in the layout record, over the in-memory fake (both flavours).

Objects opened on N=16 before the window is stored keep writing and reading
across its start (the old layout alone before it, the window from it), through
the backfill and across its close (the new scheme of 64 buckets alone after it):
every row written before, during and after is found exactly once, and deletes
stay deleted.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell
from google.cloud.bigtable.data.mutations import DeleteAllFromRow

from saltedtable import (
    SCHEME_ROW_KEY,
    LayoutError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    Window,
    WindowError,
)
from saltedtable._guard.record import SCHEME_QUALIFIER, LayoutRecord, decode_layout
from saltedtable._guard.window_state import advance_window, open_window
from tests.fakes import FakeTable, SyncFakeTable

LEAD = 0.3
REFRESH = 0.05
OLD, NEW = SaltScheme(16), SaltScheme(64)


def _stored(fake: FakeTable) -> tuple[LayoutRecord, str]:
    cells = [c for c in fake.cells_of(SCHEME_ROW_KEY) if c[1] == SCHEME_QUALIFIER]
    newest = max(cells, key=lambda c: c[2])
    return decode_layout(newest[3]), newest[0]


_version = [2**60 // 1000 * 1000]


def store(fake: FakeTable, change: Callable[[LayoutRecord], LayoutRecord]) -> LayoutRecord:
    """Store ``change(stored)`` as the newest record (what `saltedtable window` swaps in)."""
    stored, family = _stored(fake)
    record = change(stored)
    _version[0] += 1000
    fake.set_cell(SCHEME_ROW_KEY, family, SCHEME_QUALIFIER, record.encode(), _version[0])
    return record


def open_in(fake: FakeTable, seconds: float, lead: float = LEAD) -> float:
    """Store a window 16 -> 64 starting ``seconds`` from now; its start (wall clock)."""
    now = time.time()
    start = now + seconds
    store(
        fake,
        functools.partial(
            open_window,
            new_buckets=64,
            start_micros=int(start * 1_000_000),
            now_micros=int(now * 1_000_000),
            min_lead_s=lead,
        ),
    )
    return start


def _set(key: bytes, value: bytes = b"v") -> SetCell:
    return SetCell("cf", b"q", value)


def physical(fake: FakeTable, scheme: SaltScheme) -> set[bytes]:
    """The data rows stored under ``scheme``'s prefixes."""
    width = len(scheme.prefixes[0])
    prefixes = set(scheme.prefixes)
    return {k for k in fake.data_keys() if k[:width] in prefixes}


async def _keys(table: SaltedTableAsync) -> list[bytes]:
    return [row.row_key for row in await table.read_rows(ReadRowsQuery())]


def test_long_lived_objects_follow_a_window_from_its_start_through_its_close() -> None:
    """A writer and a reader opened before the window is stored: every row exactly once."""

    async def scenario() -> None:
        fake = FakeTable()
        writer = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        reader = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await writer.mutate_row(b"a", _set(b"a"))  # stores the record (16 buckets)
        await writer.mutate_row(b"gone", _set(b"gone"))
        assert await _keys(reader) == [b"a", b"gone"]
        start = open_in(fake, LEAD + 0.2)
        await asyncio.sleep(REFRESH * 1.5)
        # Before the start: the old layout alone, for writes and reads.
        await writer.mutate_row(b"b", _set(b"b"))
        async with writer.mutations_batcher(flush_interval=None) as batcher:
            await batcher.append(RowMutationEntry(b"b2", _set(b"b2")))
            assert writer.window() is None
            assert writer._guard.window_state is not None
            await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
            # From the start: the batcher opened before it writes the new layout.
            await batcher.append(RowMutationEntry(b"c2", _set(b"c2")))
        assert OLD.salt_key(b"b2") in fake.data_keys()
        assert NEW.salt_key(b"c2") in fake.data_keys()
        await writer.mutate_row(b"c", _set(b"c"))
        await writer.bulk_mutate_rows([RowMutationEntry(b"d", _set(b"d"))])
        await writer.mutate_row(b"gone", DeleteAllFromRow())
        assert writer.window() == Window(OLD, NEW)
        assert NEW.salt_key(b"c") in fake.data_keys()
        assert NEW.salt_key(b"d") in fake.data_keys()
        assert OLD.salt_key(b"b") in fake.data_keys()
        want = [b"a", b"b", b"b2", b"c", b"c2", b"d"]
        assert await _keys(reader) == want
        assert reader.window() == Window(OLD, NEW)
        with pytest.raises(WindowError, match="window"):
            await writer.check_and_mutate_row(b"a", None, true_case_mutations=_set(b"a"))
        # Backfill, verify, then the record says backfilled: nothing changes for reads.
        step = await writer.backfill_window(limit=2)
        while not step.done:
            step = await writer.backfill_window(after=step.cursor, limit=2)
        assert (await writer.verify_window()).left == 0
        store(fake, functools.partial(advance_window, to="backfilled"))
        await asyncio.sleep(REFRESH * 1.5)
        await writer.mutate_row(b"e", _set(b"e"))
        want.append(b"e")
        assert await _keys(reader) == want
        assert writer._guard.window_state is not None
        assert writer._guard.window_state.state == "backfilled"
        # Close: the old rows and the tombstones go, then the record names 64 buckets.
        await writer.retire_window()
        await writer.drop_window_tombstones()
        store(fake, functools.partial(advance_window, to="closed"))
        await asyncio.sleep(REFRESH * 1.5)
        await writer.mutate_row(b"f", _set(b"f"))
        want.append(b"f")
        assert writer.window() is None
        assert writer.scheme == NEW
        assert physical(fake, OLD) - physical(fake, NEW) == set()
        assert await _keys(reader) == want
        assert reader.scheme == NEW
        fresh = SaltedTableAsync(fake, NEW)
        assert await _keys(fresh) == want
        assert await fresh.read_row(b"gone") is None
        assert not any(
            c[0] == "saltedtable-window" for k in fake.data_keys() for c in fake.cells_of(k)
        )

    asyncio.run(scenario())


def test_the_sync_table_follows_a_window_across_its_start_and_close() -> None:
    """The generated twin: the same switches, with a batcher opened before the start."""
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), OLD, record_refresh=REFRESH)
    table.mutate_row(b"a", _set(b"a"))
    start = open_in(fake, LEAD + 0.1)
    with table.mutations_batcher(flush_interval=None) as batcher:
        batcher.append(RowMutationEntry(b"b", _set(b"b")))
        time.sleep(max(0.0, start + 0.02 - time.time()))
        batcher.append(RowMutationEntry(b"c", _set(b"c")))
    table.mutate_row(b"a", DeleteAllFromRow())
    assert OLD.salt_key(b"b") in fake.data_keys()
    assert NEW.salt_key(b"c") in fake.data_keys()
    assert [r.row_key for r in table.read_rows(ReadRowsQuery())] == [b"b", b"c"]
    # A new object's first stream reads the record when it starts, then plans by it.
    fresh = SaltedTable(SyncFakeTable(fake), OLD, record_refresh=REFRESH)
    assert [r.row_key for r in fresh.read_rows_stream(ReadRowsQuery())] == [b"b", b"c"]
    table.backfill_window()
    assert table.verify_window().left == 0
    store(fake, functools.partial(advance_window, to="backfilled"))
    table.retire_window()
    table.drop_window_tombstones()
    store(fake, functools.partial(advance_window, to="closed"))
    time.sleep(REFRESH * 1.5)
    assert [r.row_key for r in table.read_rows(ReadRowsQuery())] == [b"b", b"c"]
    assert table.scheme == NEW
    assert table.window() is None


def test_an_object_opened_after_the_start_reads_both_layouts_on_its_first_scan() -> None:
    """The first scan reads the record before it is planned: rows in the new layout count."""

    async def scenario() -> None:
        fake = FakeTable()
        first = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await first.mutate_row(b"a", _set(b"a"))
        start = open_in(fake, LEAD + 0.05)
        await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
        await first.mutate_row(b"b", _set(b"b"))
        assert NEW.salt_key(b"b") in fake.data_keys()
        late = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        assert await _keys(late) == [b"a", b"b"]
        prefix = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        assert [row.row_key async for row in prefix.read_prefix(b"b")] == [b"b"]
        sharded = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        rows = await sharded.read_rows_sharded([ReadRowsQuery(row_keys=[b"b"])])
        assert [row.row_key for row in rows] == [b"b"]
        # The stream reads the record when it starts (not when it is made), then plans.
        streamed = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        stream = await streamed.read_rows_stream(ReadRowsQuery())
        async with aclosing(stream):
            assert [row.row_key async for row in stream] == [b"a", b"b"]
        # A long-lived object whose record is due: the same.
        await asyncio.sleep(REFRESH + 0.05)
        stream = await first.read_rows_stream(ReadRowsQuery())
        async with aclosing(stream):
            assert [row.row_key async for row in stream] == [b"a", b"b"]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"record_refresh": 1.0}, "longer than the lead"),
        ({"record_refresh": None}, "record_refresh=None"),
    ],
)
def test_an_object_that_cannot_keep_the_windows_lead_is_refused(
    options: dict[str, Any], why: str
) -> None:
    """A refresh longer than the stored lead, or none: refused on the first operation."""

    async def scenario() -> None:
        fake = FakeTable()
        await SaltedTableAsync(fake, OLD).mutate_row(b"a", _set(b"a"))
        open_in(fake, LEAD + 10)
        table = SaltedTableAsync(fake, OLD, **options)
        with pytest.raises(LayoutError, match=why):
            await table.read_row(b"a")
        with pytest.raises(LayoutError, match="resalt window"):
            await table.mutate_row(b"b", _set(b"b"))
        assert OLD.salt_key(b"b") not in fake.data_keys()

    asyncio.run(scenario())


def test_a_record_that_differs_by_more_than_the_window_is_refused() -> None:
    """Another hash with the window: not adopted, refused as any other record."""

    async def scenario() -> None:
        import dataclasses

        fake = FakeTable()
        table = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await table.mutate_row(b"a", _set(b"a"))
        open_in(fake, LEAD + 10)
        store(fake, lambda r: dataclasses.replace(r, hash="java"))
        await asyncio.sleep(REFRESH * 1.5)
        with pytest.raises(SchemeMismatchError):
            await table.read_row(b"a")

    asyncio.run(scenario())


def test_a_window_writer_whose_last_record_read_is_older_than_the_lead_is_refused() -> None:
    """The horizon: a write in the window after a stale record read is refused, unwritten."""

    async def scenario() -> None:
        fake = FakeTable()
        table = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await table.mutate_row(b"a", _set(b"a"))
        start = open_in(fake, LEAD + 0.05)
        await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
        await table.read_row(b"a")
        assert table.window() is not None
        # As if the last good read were long ago while the guard still counted as settled
        # (an operation in flight across a failed refresh).
        table._guard._good_wall = time.time() - 10 * LEAD
        before = fake.data_keys()
        with pytest.raises(WindowError, match="lead"):
            await table.mutate_row(b"b", _set(b"b"))
        with pytest.raises(WindowError, match="lead"):
            await table.bulk_mutate_rows([RowMutationEntry(b"b", _set(b"b"))])
        assert fake.data_keys() == before

    asyncio.run(scenario())


def test_window_keyword_with_the_guard_on_names_the_record_way() -> None:
    """window= stays for guard=False; with the guard on, the error says what to do."""
    with pytest.raises(WindowError, match="without window="):
        SaltedTableAsync(FakeTable(), NEW, window=Window(OLD, NEW))


def test_hot_keys_and_a_stored_window_are_refused_together() -> None:
    """An object with hot lists cannot follow a window: refused on first use."""

    async def scenario() -> None:
        from saltedtable import HotLayout

        fake = FakeTable()
        await SaltedTableAsync(fake, OLD).mutate_row(b"a", _set(b"a"))
        open_in(fake, LEAD + 10)
        hot = HotLayout(OLD, rows={b"h": 4})
        table = SaltedTableAsync(fake, OLD, hot=hot, record_refresh=REFRESH)
        with pytest.raises(LayoutError, match="hot"):
            await table.read_row(b"a")

    asyncio.run(scenario())


def test_the_layout_check_expects_rows_of_both_bucket_counts_in_a_window() -> None:
    """open() samples the rows: the new layout's rows fit; a row of neither still refuses."""

    async def scenario() -> None:
        fake = FakeTable()
        first = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await first.mutate_row(b"a", _set(b"a"))
        start = open_in(fake, LEAD + 0.05)
        await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
        keys = [b"user%02d" % i for i in range(30)]
        await first.bulk_mutate_rows([RowMutationEntry(k, _set(k)) for k in keys])
        assert physical(fake, NEW) - physical(fake, OLD)  # rows only the new layout has
        opened = await SaltedTableAsync.open(fake, OLD, record_refresh=REFRESH)
        assert len(await _keys(opened)) == 31
        fake.set_cell(b"99-stray", "cf", b"q", b"v")
        with pytest.raises(LayoutError, match="do not fit"):
            await SaltedTableAsync.open(fake, OLD, record_refresh=REFRESH)

    asyncio.run(scenario())


def test_a_window_scan_counts_its_requests_and_rows_in_call_stats() -> None:
    """stats= and the stats hook see every ReadRows request and every logical row."""

    async def scenario() -> None:
        from saltedtable import CallStats

        fake = FakeTable()
        hooked: list[CallStats] = []
        table = SaltedTableAsync(fake, OLD, record_refresh=REFRESH, stats_hook=hooked.append)
        await table.bulk_mutate_rows([RowMutationEntry(b"a%d" % i, _set(b"a")) for i in range(9)])
        start = open_in(fake, LEAD + 0.05)
        await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
        await table.bulk_mutate_rows([RowMutationEntry(b"b%d" % i, _set(b"b")) for i in range(9)])
        await table.read_row(b"a1")  # (reads the record: the scans below send only theirs)
        hooked.clear()
        for query in (ReadRowsQuery(), ReadRowsQuery(row_keys=[b"a1", b"b2", b"zz"])):
            sent = len(fake.stats.queries)
            stats = CallStats()
            rows = await table.read_rows(query, stats=stats)
            assert stats.requests == len(fake.stats.queries) - sent > 0
            assert stats.rows == len(rows) > 0
            assert stats.elapsed is not None
        assert [(h.operation, h.rows) for h in hooked] == [("read_rows", 18), ("read_rows", 2)]
        ended = CallStats()
        async with aclosing(await table.read_rows_stream(ReadRowsQuery(), stats=ended)) as rows:
            async for _ in rows:
                break
        assert ended.ended_early
        assert ended.rows == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("method", ["check_and_mutate_row", "read_modify_write_row"])
def test_an_atomic_operation_that_reads_the_start_is_refused(method: str) -> None:
    """The first call after the start reads the record: refused, nothing applied to one half."""

    async def scenario() -> None:
        from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule

        fake = FakeTable()
        table = SaltedTableAsync(fake, OLD, record_refresh=REFRESH)
        await table.mutate_row(b"a", _set(b"a"))
        start = open_in(fake, LEAD + 0.05)
        await table.read_row(b"a")  # knows the window, before its start
        await asyncio.sleep(max(0.0, start + 0.02 - time.time()))
        before = fake.cells_of(OLD.salt_key(b"a"))
        call = (
            table.check_and_mutate_row(b"a", None, false_case_mutations=_set(b"x"))
            if method == "check_and_mutate_row"
            else table.read_modify_write_row(b"a", AppendValueRule("cf", b"q", b"+"))
        )
        with pytest.raises(WindowError, match=method):
            await call
        assert fake.cells_of(OLD.salt_key(b"a")) == before

    asyncio.run(scenario())


def test_from_client_takes_window_versions_for_the_table_not_the_client() -> None:
    """window_versions= reaches the table object (for the window it follows), not get_table."""
    asked: list[dict[str, Any]] = []

    class Client:
        def get_table(self, instance: str, table: str, **kwargs: Any) -> FakeTable:
            asked.append(kwargs)
            return FakeTable()

    table = SaltedTableAsync.from_client(
        Client(),  # type: ignore[arg-type]
        "i",
        "t",
        OLD,
        window_versions=1,
        app_profile_id="p",
    )
    assert asked == [{"app_profile_id": "p"}]
    assert table._window_versions == 1
