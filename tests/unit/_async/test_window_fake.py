"""A table in a dual-layout window answers exactly like a plain table (FakeTable).

The model is a plain (unsalted) :class:`FakeTable` holding the same logical history.
Rows are first written under the old layout; then a table in the window writes
(SetCell, DeleteFromColumn, DeleteFromFamily, DeleteAllFromRow, by ``mutate_row``,
``bulk_mutate_rows`` and the batcher), reads (point reads, ``row_exists``, keys,
ranges, prefixes, with and without limits and filters), backfills in steps,
crashes mid-key and resumes, retires old rows, and finally closes the window.
After every step every read equals the model's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    FamilyNameRegexFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueRegexFilter,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from saltedtable import (
    RowKeyError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    Window,
    WindowError,
    WindowFilterError,
    prefix_end,
)
from tests.fakes import FakeTable, SyncFakeTable

KEYS = sorted([b"k%d" % i for i in range(12)] + [b"k1x", b"u"])
PAIRS = {
    "16 -> 64 (shared prefixes)": (SaltScheme(16), SaltScheme(64)),
    "8 -> 64 (widths differ)": (SaltScheme(8), SaltScheme(64)),
    "4 -> 6 (no multiple)": (SaltScheme(4), SaltScheme(6)),
    "64 -> 16 (fewer buckets)": (SaltScheme(64), SaltScheme(16)),
}
FAMILIES = ("cf", "cg")
QUALIFIERS = (b"a", b"b")
STAMPS = (1000, 2000, 3000)


def _at(micros: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


FILTERS: list[RowFilter | None] = [
    None,
    FamilyNameRegexFilter("cf"),
    ColumnQualifierRegexFilter(b"a"),
    CellsColumnLimitFilter(1),
    StripValueTransformerFilter(True),
    ValueRegexFilter(b"v.*"),
    ColumnRangeFilter("cg", b"a", b"a"),
    TimestampRangeFilter(_at(2000), _at(3000)),
    RowKeyRegexFilter(b"k1.*"),
    RowFilterChain([FamilyNameRegexFilter("cf"), CellsColumnLimitFilter(1)]),
    RowFilterUnion([ColumnQualifierRegexFilter(b"b"), StripValueTransformerFilter(True)]),
]

Shape = list[tuple[bytes, list[tuple[str, bytes, int, bytes]]]]


def shape(rows: Sequence[Row | None]) -> Shape:
    """Rows as (key, cells in the order given) for comparison."""
    return [
        (r.row_key, [(c.family, c.qualifier, c.timestamp_micros, c.value) for c in r.cells])
        for r in rows
        if r is not None
    ]


class WindowMachine(RuleBasedStateMachine):
    """Random histories through a window, against a plain model table."""

    filters: Sequence[RowFilter | None] = FILTERS

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.model: Any = FakeTable()
        self.fake: Any = FakeTable()
        self.cursor: bytes | None = None
        self.closed = False
        self.lost = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    def shape(self, rows: Sequence[Row | None]) -> Shape:
        """What the comparisons see of rows (see :func:`shape`)."""
        return shape(rows)

    def stored(self) -> list[tuple[bytes, set[str]]]:
        """Every physical row of the table in the window: its key and families."""
        return [(k, {c[0] for c in self.fake.cells_of(k)}) for k in self.fake.data_keys()]

    def raw_rows(self, keys: list[bytes]) -> list[Row]:
        """Physical rows of the table in the window, read directly."""
        return list(self.run(self.fake.read_rows(ReadRowsQuery(row_keys=keys))))

    @initialize(
        pair=st.sampled_from(sorted(PAIRS)),
        rows=st.lists(
            st.tuples(
                st.sampled_from(KEYS),
                st.sampled_from(FAMILIES),
                st.sampled_from(QUALIFIERS),
                st.sampled_from(STAMPS),
                st.sampled_from([b"v1", b"v2", b"w"]),
            ),
            max_size=25,
        ),
    )
    def start(self, pair: str, rows: list[tuple[bytes, str, bytes, int, bytes]]) -> None:
        old, new = PAIRS[pair]
        self.window = Window(old, new)
        before = SaltedTableAsync(self.fake, old, guard=False)

        async def fill() -> None:
            for key, family, qualifier, ts, value in rows:
                cell = SetCell(family, qualifier, value, ts)
                await before.mutate_row(key, cell)
                await self.model.mutate_row(key, cell)

        self.run(fill())
        self.table = SaltedTableAsync(self.fake, new, window=self.window, guard=False)

    # -- writes ----------------------------------------------------------------------

    def apply(self, key: bytes, mutations: list[Mutation], how: str) -> None:
        async def both() -> None:
            if how == "mutate_row":
                await self.table.mutate_row(key, mutations)
            elif how == "bulk":
                await self.table.bulk_mutate_rows([RowMutationEntry(key, mutations)])
            else:
                async with self.table.mutations_batcher() as batcher:
                    await batcher.append(RowMutationEntry(key, mutations))
            await self.model.mutate_row(key, mutations)

        self.run(both())

    hows = st.sampled_from(["mutate_row", "bulk", "batcher"])

    @rule(
        key=st.sampled_from(KEYS),
        family=st.sampled_from(FAMILIES),
        qualifier=st.sampled_from(QUALIFIERS),
        ts=st.sampled_from(STAMPS),
        value=st.sampled_from([b"v1", b"v2", b"w"]),
        how=hows,
    )
    def set_cell(
        self, key: bytes, family: str, qualifier: bytes, ts: int, value: bytes, how: str
    ) -> None:
        self.apply(key, [SetCell(family, qualifier, value, ts)], how)

    @rule(
        key=st.sampled_from(KEYS),
        family=st.sampled_from(FAMILIES),
        qualifier=st.sampled_from(QUALIFIERS),
        start=st.sampled_from([None, 1000, 2000]),
        end=st.sampled_from([None, 3000]),
        how=hows,
    )
    def delete_from_column(
        self,
        key: bytes,
        family: str,
        qualifier: bytes,
        start: int | None,
        end: int | None,
        how: str,
    ) -> None:
        self.apply(key, [DeleteRangeFromColumn(family, qualifier, start, end)], how)

    @rule(key=st.sampled_from(KEYS), family=st.sampled_from(FAMILIES), how=hows)
    def delete_family(self, key: bytes, family: str, how: str) -> None:
        self.apply(key, [DeleteAllFromFamily(family)], how)

    @rule(key=st.sampled_from(KEYS), how=hows, then=st.booleans())
    def delete_row(self, key: bytes, how: str, then: bool) -> None:
        mutations: list[Mutation] = [DeleteAllFromRow()]
        if then:  # a delete and a write in one request
            mutations.append(SetCell("cg", b"b", b"again", 2000))
        self.apply(key, mutations, how)

    @rule(key=st.sampled_from(KEYS))
    def atomic_operations_are_refused(self, key: bytes) -> None:
        if self.closed:
            return
        with pytest.raises(WindowError, match="window"):
            self.run(self.table.check_and_mutate_row(key, None, true_case_mutations=[]))
        with pytest.raises(WindowError, match="window"):
            self.run(self.table.read_modify_write_row(key, AppendValueRule("cf", b"a", b"x")))

    # -- the backfill ----------------------------------------------------------------

    @precondition(lambda self: not self.closed)
    @rule(limit=st.sampled_from([1, 3, None]), max_cells=st.sampled_from([1, 100]))
    def backfill_step(self, limit: int | None, max_cells: int) -> None:
        got = self.run(
            self.table.backfill_window(after=self.cursor, limit=limit, max_cells=max_cells)
        )
        self.cursor = None if got.done else got.cursor

    @precondition(lambda self: not self.closed)
    @rule(data=st.data())
    def backfill_crashes_mid_key(self, data: st.DataObject) -> None:
        """One copy request of one key is sent, then the step dies; the next run goes on."""
        key = data.draw(st.sampled_from(KEYS))
        new, old = self.window.physical_keys(key)
        rows = self.raw_rows([new, old or new])
        found = {r.row_key: r for r in rows}
        copies = self.window.backfill(
            key, None if old is None else found.get(old), found.get(new), max_cells=1
        )
        if copies:
            c = copies[0]
            self.run(
                self.fake.check_and_mutate_row(
                    c.row_key, c.predicate, false_case_mutations=list(c.mutations)
                )
            )

    @precondition(lambda self: not self.closed)
    @rule(
        key=st.sampled_from(KEYS),
        mutation=st.sampled_from(
            [
                DeleteAllFromRow(),
                DeleteAllFromFamily("cf"),
                DeleteRangeFromColumn("cf", b"a"),
                SetCell("cf", b"a", b"race", 1000),
            ]
        ),
    )
    def backfill_races_a_write(self, key: bytes, mutation: Mutation) -> None:
        """The backfill reads a key, a write or delete lands, then the stale copies are sent."""
        new, old = self.window.physical_keys(key)
        found = {r.row_key: r for r in self.raw_rows([new, old or new])}
        copies = self.window.backfill(key, None if old is None else found.get(old), found.get(new))
        self.apply(key, [mutation], "mutate_row")
        for c in copies:
            self.run(
                self.fake.check_and_mutate_row(
                    c.row_key, c.predicate, false_case_mutations=list(c.mutations)
                )
            )

    @precondition(lambda self: not self.closed)
    @rule(key=st.sampled_from(KEYS), family=st.sampled_from(FAMILIES))
    def delete_whose_second_step_is_lost(self, key: bytes, family: str) -> None:
        """A writer dies between the new row's request and the old row's."""
        mutations: list[Mutation] = [DeleteAllFromFamily(family)]
        write = self.window.write(key, mutations, token=b"lost-%d" % self.lost, now_micros=0)
        self.lost += 1
        self.run(self.fake.mutate_row(write.new_key, list(write.new_mutations)))
        self.run(self.model.mutate_row(key, mutations))

    @precondition(lambda self: not self.closed)
    @rule(limit=st.sampled_from([2, None]))
    def retire_step(self, limit: int | None) -> None:
        self.run(self.table.retire_window(limit=limit))

    @precondition(lambda self: not self.closed)
    @rule()
    def close_window(self) -> None:
        """Backfill to the end, verify, retire, then read the new layout alone."""
        got = self.run(self.table.backfill_window())
        assert got.done
        assert self.run(self.table.verify_window()).left == 0
        retired = self.run(self.table.retire_window())
        assert retired.left == 0
        # Every row left is a new row (a shared one included).
        assert [k for k, _ in self.stored() if not self.window.place(k).new] == []
        # No old row is left, so no tombstone hides anything: drop them, then every
        # reader and writer opens the new layout alone.
        self.check_everything()
        self.run(self.table.drop_window_tombstones())
        family = self.window.family
        assert not any(f == family for _, families in self.stored() for f in families)
        self.table = SaltedTableAsync(self.fake, self.window.new, guard=False)
        self.closed = True

    # -- reads -----------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), f=st.sampled_from(range(len(FILTERS))))
    def point_read(self, key: bytes, f: int) -> None:
        row_filter = self.filters[f] if f < len(self.filters) else None

        async def both() -> None:
            got = await self.table.read_row(key, row_filter=row_filter)
            want = await self.model.read_row(key, row_filter=row_filter)
            assert self.shape([got]) == self.shape([want])
            assert await self.table.row_exists(key) == await self.model.row_exists(key)

        self.run(both())

    @rule(
        keys=st.lists(st.sampled_from(KEYS), max_size=4),
        start=st.sampled_from([None, b"k1", b"k3", b"k9"]),
        end=st.sampled_from([None, b"k2", b"k5", b"u"]),
        ranged=st.booleans(),
        limit=st.sampled_from([0, 1, 2, 5]),
        f=st.sampled_from(range(len(FILTERS))),
    )
    def scan(
        self,
        keys: list[bytes],
        start: bytes | None,
        end: bytes | None,
        ranged: bool,
        limit: int,
        f: int,
    ) -> None:
        row_filter = self.filters[f] if f < len(self.filters) else None
        ranges = (
            [RowRange(start, end)]
            if ranged and (start is None or end is None or start < end)
            else []
        )
        # (Neither keys nor ranges: the whole table.)
        query = ReadRowsQuery(
            row_keys=list(keys) or None,
            row_ranges=ranges or None,
            limit=limit or None,
            row_filter=row_filter,
        )

        async def both() -> None:
            got = await self.table.read_rows(query)
            want = await self.model.read_rows(query)
            assert self.shape(got) == self.shape(want)

        self.run(both())

    @rule(prefix=st.sampled_from([b"k", b"k1", b"u", b"z"]), limit=st.sampled_from([None, 1, 3]))
    def prefix_scan(self, prefix: bytes, limit: int | None) -> None:
        async def both() -> None:
            stream = self.table.read_prefix(prefix, limit=limit)
            got = [row async for row in stream]
            want = await self.model.read_rows(
                ReadRowsQuery(row_ranges=RowRange(prefix, prefix_end(prefix)), limit=limit)
            )
            assert self.shape(got) == self.shape(want)

        self.run(both())

    @invariant()
    def check_everything(self) -> None:
        """The whole table reads as the model."""
        if not hasattr(self, "table"):
            return

        async def both() -> None:
            got = await self.table.read_rows(ReadRowsQuery())
            want = await self.model.read_rows(ReadRowsQuery())
            assert self.shape(got) == self.shape(want)

        self.run(both())


WindowMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestWindowTable = WindowMachine.TestCase


# -- single behaviours ---------------------------------------------------------------


def _window_table() -> tuple[FakeTable, SaltedTableAsync, Window]:
    fake = FakeTable()
    window = Window(SaltScheme(16), SaltScheme(64))
    return fake, SaltedTableAsync(fake, SaltScheme(64), window=window, guard=False), window


async def test_a_point_read_is_one_request_with_both_keys() -> None:
    """read_row sends one ReadRows carrying the key's old and new physical keys."""
    fake, table, window = _window_table()
    key = next(k for k in KEYS if not window.shares_row(k))
    await table.read_row(key)
    assert len(fake.stats.queries) == 1
    new, old = window.physical_keys(key)
    assert old is not None
    assert sorted(fake.stats.queries[0].row_keys) == sorted([new, old])


async def test_a_scan_reads_each_physical_prefix_once() -> None:
    """16 -> 64: the 16 shared prefixes are read once, so 64 requests in all."""
    fake, table, _ = _window_table()
    await table.read_rows(ReadRowsQuery())
    assert len(fake.stats.queries) == 64


async def test_row_level_filters_and_reversed_scans_are_refused() -> None:
    """Refused before anything is sent, with an error naming the window."""
    fake, table, _ = _window_table()
    with pytest.raises(WindowFilterError, match="window"):
        await table.read_rows(ReadRowsQuery(row_filter=CellsRowLimitFilter(1)))
    with pytest.raises(WindowError, match="reversed"):
        await table.read_rows({"reversed": True})
    assert fake.stats.queries == []


def test_a_window_table_needs_the_new_scheme_and_no_guard() -> None:
    """The constructor refuses a scheme that is not the window's new one, and the guard
    (which follows the record's window instead)."""
    window = Window(SaltScheme(16), SaltScheme(64))
    with pytest.raises(WindowError, match="scheme"):
        SaltedTableAsync(FakeTable(), SaltScheme(16), window=window, guard=False)
    with pytest.raises(WindowError, match="guard is off"):
        SaltedTableAsync(FakeTable(), SaltScheme(64), window=window)
    with pytest.raises(TypeError, match="window_versions"):
        SaltedTableAsync(FakeTable(), SaltScheme(64), window_versions=1, guard=False)


async def test_a_table_without_a_window_sends_what_it_sent_before() -> None:
    """No window: a write is one request to the salted key, a point read one ReadRow."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(16), guard=False)
    await table.mutate_row(b"k1", DeleteAllFromRow())
    await table.read_row(b"k1")
    assert fake.stats.queries == []  # the point read went through read_row


async def test_max_versions_is_reapplied_after_the_union() -> None:
    """One version in each layout, max_versions=1: the logical row shows the newer."""
    fake = FakeTable()
    window = Window(SaltScheme(8), SaltScheme(64))
    old = SaltedTableAsync(fake, SaltScheme(8), guard=False)
    await old.mutate_row(b"k1", SetCell("cf", b"a", b"old", 1000))
    table = SaltedTableAsync(
        fake, SaltScheme(64), window=window, guard=False, window_versions={"cf": 1}
    )
    await table.mutate_row(b"k1", SetCell("cf", b"a", b"new", 2000))
    row = await table.read_row(b"k1")
    assert row is not None
    assert [c.value for c in row.cells] == [b"new"]


def test_the_sync_table_runs_the_same_window() -> None:
    """SaltedTable (the generated twin): writes, reads, a scan and the backfill steps."""
    fake = FakeTable()
    window = Window(SaltScheme(16), SaltScheme(64))
    SaltedTable(SyncFakeTable(fake), SaltScheme(16), guard=False).mutate_row(
        b"k1", [SetCell("cf", b"a", b"old", 1000), SetCell("cf", b"b", b"old", 1000)]
    )
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(64), window=window, guard=False)
    table.mutate_row(b"k1", [SetCell("cf", b"a", b"new", 2000), DeleteAllFromFamily("cg")])
    table.mutate_row(b"k1", DeleteRangeFromColumn("cf", b"b"))
    with table.mutations_batcher() as batcher:
        batcher.append(RowMutationEntry(b"k2", [SetCell("cg", b"a", b"x", 1000)]))
    want = [
        (b"k1", [("cf", b"a", 2000, b"new"), ("cf", b"a", 1000, b"old")]),
        (b"k2", [("cg", b"a", 1000, b"x")]),
    ]
    assert shape(table.read_rows(ReadRowsQuery())) == want
    assert shape([table.read_row(b"k1")]) == want[:1]
    assert table.backfill_window().done
    assert table.verify_window().left == 0
    assert table.retire_window().retired == 1
    assert shape(table.read_rows(ReadRowsQuery(limit=1))) == want[:1]


async def test_a_bad_key_fails_before_anything_is_sent() -> None:
    """An empty point key in a window scan fails when the stream is made, not later."""
    fake, table, _ = _window_table()
    with pytest.raises(RowKeyError):
        await table.read_rows_stream(ReadRowsQuery(row_keys=[b"k1", b""]))
    assert fake.stats.queries == []


async def test_a_limited_scan_closes_every_stream() -> None:
    """A limit met early leaves no physical stream open (each is closed, not drained)."""
    fake, table, _ = _window_table()
    for key in KEYS:
        await table.mutate_row(key, SetCell("cf", b"a", b"v", 1000))
    rows = await table.read_rows(ReadRowsQuery(limit=2))
    assert [r.row_key for r in rows] == KEYS[:2]
    assert fake.stats.open_now == 0
    assert fake.stats.closed == fake.stats.opened == 64


def test_a_table_with_hot_keys_cannot_open_a_window() -> None:
    """Hot keys and a dual-layout window are refused together, before anything is sent."""
    from saltedtable import HotLayout

    new = SaltScheme(8)
    with pytest.raises(WindowError, match="hot keys"):
        SaltedTableAsync(
            FakeTable(),
            new,
            guard=False,
            hot=HotLayout(new, rows={b"hot": 2}),
            window=Window(SaltScheme(4), new),
        )
