"""A table with hot parts and split rows on a FakeTable answers exactly like a plain table.

The model is a plain (unsalted) :class:`FakeTable` that receives the same logical
calls. Random writes (``SetCell``, ``AddToCell`` to sum, min and max families, deletes)
through ``mutate_row``, ``bulk_mutate_rows`` and the batcher; splits of rows and K
raises mid-stream (a new table object over the same rows, as after re-reading the
record); point reads, ``row_exists``, key lists and scans with limits and filters,
forward (the emulator's run reads backwards too): every read equals the model's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilter,
    RowFilterChain,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
    ValueRegexFilter,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import saltedtable._async.batcher as batcher_module
import saltedtable._async.table as table_module
from saltedtable import (
    LayoutError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SaltSchemeError,
    fields,
    view_row_prefixes,
)
from saltedtable._exceptions import SplitKeyError, WindowFilterError
from saltedtable._guard.families import FamilyInfo
from saltedtable._scheme.hot import HotLayout, check_hot_change
from saltedtable._scheme.hot_move import (
    MOVE_FAMILY,
    finished,
    move_copies,
    move_retire,
)
from tests.fakes import FakeTable, SyncFakeTable
from tests.hot_model import AGGREGATES, PLAIN, mutation_strategy

SCHEME = SaltScheme(8, key_part=fields(1))
PARTS = [b"t0", b"t1", b"t2"]
KEYS = sorted(p + b"#" + s for p in PARTS for s in (b"a", b"b", b"c", b"d"))
FAMILIES = [FamilyInfo(f) for f in [*PLAIN, MOVE_FAMILY]] + [
    FamilyInfo(f, aggregate=kind) for f, kind in AGGREGATES.items()
]
FILTERS: list[RowFilter | None] = [
    None,
    FamilyNameRegexFilter(b"cf|sm"),
    CellsColumnLimitFilter(1),
    CellsRowLimitFilter(2),
    StripValueTransformerFilter(True),
    RowKeyRegexFilter(b"t1#.*"),
    RowFilterChain([FamilyNameRegexFilter(b"c.*|mx"), CellsColumnLimitFilter(1)]),
]

Shape = list[tuple[bytes, list[tuple[str, bytes, int, bytes]]]]


def shape(rows: Sequence[Row]) -> Shape:
    """Keys and cells, each cell under its own row key."""
    out = []
    for r in rows:
        assert all(c.row_key == r.row_key for c in r.cells)
        out.append(
            (r.row_key, [(c.family, c.qualifier, c.timestamp_micros, c.value) for c in r.cells])
        )
    return out


def hot_table(fake: FakeTable, hot: HotLayout) -> SaltedTableAsync:
    """The table object of ``hot`` (what a writer or reader builds from the record)."""
    return SaltedTableAsync(fake, SCHEME, guard=False, hot=hot, aggregates=AGGREGATES)


class HotTableMachine(RuleBasedStateMachine):
    """Random writes, splits and reads on a table with hot keys and on a plain model."""

    filters: Sequence[RowFilter | None] = FILTERS

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.model = FakeTable(families=FAMILIES)
        self.fake = FakeTable(families=FAMILIES)
        self.hot = HotLayout(SCHEME)
        self.table = hot_table(self.fake, self.hot)
        # The writers' wall clock (micros), which places rows before a split's start.
        self.now = 10**15
        self.skew = 0  # the writing table object's clock, ahead (>0) or behind
        self.clocks = [
            mock.patch.object(module, "wall_micros", self.clock)
            for module in (table_module, batcher_module)
        ]
        for clock in self.clocks:
            clock.start()
        # A table object that has not read the latest split (its lists before it).
        self.stale: SaltedTableAsync | None = None
        self.stale_reads = False

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def keep(self, mutation: Mutation) -> bool:
        """Whether a drawn mutation is sent (the emulator's run leaves some out)."""
        return True

    def shape(self, rows: Sequence[Row]) -> Shape:
        """What the comparisons see of rows (see :func:`shape`)."""
        return shape(rows)

    def new_table(self, hot: HotLayout) -> SaltedTableAsync:
        """The table object of ``hot`` over the same rows."""
        return hot_table(self.fake, hot)

    def teardown(self) -> None:
        for clock in self.clocks:
            clock.stop()
        self.loop.close()

    def clock(self) -> int:
        """The wall clock of the table object now writing (micros)."""
        return self.now + self.skew

    def pending(self) -> bool:
        """Whether the latest split has not started on the writers' clock."""
        return self.hot.pending(self.now)

    @initialize(part=st.sampled_from([None, b"t0"]), k=st.integers(2, 8))
    def start(self, part: bytes | None, k: int) -> None:
        # A part listed before its rows are written; `move` lists parts with rows.
        self.hot = HotLayout(SCHEME, parts={part: k} if part else {})
        self.table = self.new_table(self.hot)

    @rule(part=st.sampled_from(PARTS), k=st.integers(2, 8))
    def move(self, part: bytes, k: int) -> None:
        """List a part whose rows exist, or raise its K: the part moves (a new table object)."""
        was = self.hot.parts.get(part, 1)
        if was >= k or self.hot.moving or self.pending():
            return
        after = HotLayout(
            SCHEME,
            parts={**self.hot.parts, part: k},
            rows=dict(self.hot.rows),
            moving={part: was},
        )
        try:
            check_hot_change(self.hot, after)
        except SaltSchemeError:
            return  # it would move a split row's home: refused, as `split` refuses it
        self.hot = after
        self.table = self.new_table(after)

    async def _physical(self, key: bytes) -> tuple[Row | None, Row | None]:
        """A moving key's old and new physical rows, as the backfill reads them."""
        new, old = self.hot.move_keys(key)
        got_old = None if old is None else await self.fake.read_row(old)
        return got_old, await self.fake.read_row(new)

    @rule(data=st.data())
    def backfill_step(self, data: st.DataObject) -> None:
        """Some keys of the moving part: copy (race-safe), then maybe delete the old row."""
        if not self.hot.moving or not self.settled():
            return
        part = next(iter(self.hot.moving))
        keys = data.draw(st.lists(st.sampled_from([k for k in KEYS if k.startswith(part)])))
        retire = data.draw(st.booleans(), label="retire")

        async def step(key: bytes) -> None:
            old, new = await self._physical(key)
            for copy in move_copies(self.hot, key, old, new, max_cells=2):
                await self.fake.check_and_mutate_row(
                    copy.row_key, copy.predicate, false_case_mutations=list(copy.mutations)
                )
            old, new = await self._physical(key)
            done = move_retire(self.hot, key, old, new)
            if retire and done is not None:
                await self.fake.mutate_row(done[0], list(done[1]))

        for key in keys:
            self.run(step(key))

    @rule()
    def finish(self) -> None:
        """The whole backfill, the old rows and the tombstones deleted, then the record change."""
        if not self.hot.moving or not self.settled():
            return
        part = next(iter(self.hot.moving))

        async def all_keys() -> None:
            for key in [k for k in KEYS if k.startswith(part)]:
                for _ in range(2):
                    old, new = await self._physical(key)
                    for copy in move_copies(self.hot, key, old, new):
                        await self.fake.check_and_mutate_row(
                            copy.row_key, copy.predicate, false_case_mutations=list(copy.mutations)
                        )
                old, new = await self._physical(key)
                assert not move_copies(self.hot, key, old, new)
                done = move_retire(self.hot, key, old, new)
                if done is not None:
                    await self.fake.mutate_row(done[0], list(done[1]))
                if self.hot.move_keys(key)[1] is not None:
                    await self.fake.mutate_row(
                        self.hot.physical_keys(key)[0], [DeleteAllFromFamily(MOVE_FAMILY)]
                    )

        self.run(all_keys())
        self.hot = finished(self.hot, part)
        self.table = self.new_table(self.hot)

    def settled(self) -> bool:
        """Whether a move may be finished: the split's start plus the clock margin passed."""
        start = self.hot.start_micros
        return start is None or self.now >= start + 60_000_000

    @rule(
        kind=st.sampled_from(["part", "part", "row"]),
        part=st.sampled_from(PARTS),
        key=st.sampled_from(KEYS),
        k=st.integers(2, 8),
        lead=st.integers(1, 5),
    )
    def split_later(self, kind: str, part: bytes, key: bytes, k: int, lead: int) -> None:
        """A split that starts ``lead`` seconds ahead (split_hot_key's): writers move then."""
        if self.pending():
            return  # (refused, as split_hot_key refuses a second pending split)
        before = HotLayout(
            SCHEME, parts=dict(self.hot.parts), rows=dict(self.hot.rows), moving=self.hot.moving
        )
        parts, rows, moving = dict(before.parts), dict(before.rows), dict(before.moving)
        if kind == "part":
            if parts.get(part, 1) >= k or moving:
                return
            parts[part], moving[part] = k, parts.get(part, 1)
        else:
            if rows.get(key, 1) >= k:
                return
            rows[key] = k
        try:
            check_hot_change(before, HotLayout(SCHEME, parts=parts, rows=rows, moving=moving))
        except SaltSchemeError:
            return
        self.hot = HotLayout(
            SCHEME,
            parts=parts,
            rows=rows,
            moving=moving,
            previous=before,
            start_micros=self.now + lead * 1_000_000,
        )
        self.table = self.new_table(self.hot)
        self.stale = self.new_table(before)
        # A reader that has not read the split sees every write until a writer whose
        # clock runs past the start writes (a skew beyond the lead: docs/hot-keys.md).
        self.stale_reads = True

    @rule(seconds=st.sampled_from([0, 1, 2, 30, 61]))
    def tick(self, seconds: int) -> None:
        """Time passes on the writers' clock (past a split's start, past the clock margin)."""
        self.now += seconds * 1_000_000

    @rule(key=st.sampled_from(KEYS), k=st.integers(2, 8))
    def split(self, key: bytes, k: int) -> None:
        """List a row (or raise its K) mid-stream: a new table object over the same rows."""
        if self.hot.rows.get(key, 1) >= k or self.pending():
            return
        after = HotLayout(
            SCHEME,
            parts=dict(self.hot.parts),
            rows={**self.hot.rows, key: k},
            moving=dict(self.hot.moving),
        )
        if after.before is not None and after.before.bucket_of(key) != after.bucket_of(key):
            # A row whose part moves it waits for the move (refused, naming it).
            with pytest.raises(SaltSchemeError, match="belongs to a moving part"):
                check_hot_change(self.hot, after)
            return
        check_hot_change(self.hot, after)
        self.hot = after
        self.table = self.new_table(after)

    @rule(
        key=st.sampled_from(KEYS),
        mutations=st.lists(mutation_strategy(), min_size=1, max_size=3),
        how=st.sampled_from(["mutate_row", "bulk", "batcher"]),
        stale=st.booleans(),
        skew=st.sampled_from([-6, 0, 6]),
    )
    def write(
        self, key: bytes, mutations: list[Mutation], how: str, stale: bool, skew: int
    ) -> None:
        """One logical call, to the model and to the hot table: by a writer whose clock
        runs ahead or behind, before a split's start maybe one that has not read it."""
        mutations = [m for m in mutations if self.keep(m)]
        if not mutations:
            return
        table, lists = self.table, self.hot
        if stale and self.pending() and self.stale is not None and self.hot.previous is not None:
            table, lists = self.stale, self.hot.previous
        self.skew = skew * 1_000_000
        if self.pending() and self.hot.writers_at(self.clock()) is self.hot:
            self.stale_reads = False
        try:
            self._write(table, lists, key, mutations, how)
        finally:
            self.skew = 0

    def _write(
        self,
        table: SaltedTableAsync,
        lists: HotLayout,
        key: bytes,
        mutations: list[Mutation],
        how: str,
    ) -> None:
        if lists.writers_at(self.clock()).move_keys(key)[1] is not None and any(
            isinstance(m, AddToCell) for m in mutations
        ):
            with pytest.raises(SplitKeyError, match="is refused while its key part"):
                self.run(table.mutate_row(key, mutations))
            return

        async def both() -> None:
            await self.model.mutate_row(key, mutations)
            if how == "mutate_row":
                await table.mutate_row(key, mutations)
            elif how == "bulk":
                await table.bulk_mutate_rows([RowMutationEntry(key, mutations)])
            else:
                async with table.mutations_batcher() as batcher:
                    await batcher.append(RowMutationEntry(key, mutations))

        self.run(both())

    @rule(key=st.sampled_from(KEYS), data=st.data())
    def point(self, key: bytes, data: st.DataObject) -> None:
        """read_row and row_exists."""
        row_filter = data.draw(st.sampled_from(self.filters), label="filter")

        async def both() -> tuple[Any, ...]:
            want = await self.model.read_row(key, row_filter=row_filter)
            try:
                got = await self.table.read_row(key, row_filter=row_filter)
            except WindowFilterError:
                got = None  # refused, naming the move: only for a key that moves
                assert self.hot.move_keys(key)[1] is not None
                got = want
            exists = await self.table.row_exists(key)
            return want, got, exists, await self.model.row_exists(key)

        want, got, exists, want_exists = self.run(both())
        assert self.shape([r for r in [got] if r]) == self.shape([r for r in [want] if r])
        assert exists == want_exists

    @rule(
        keys=st.lists(st.sampled_from(KEYS), max_size=4),
        bounds=st.one_of(
            st.none(), st.tuples(st.sampled_from([b"", *KEYS]), st.sampled_from([b"", *KEYS]))
        ),
        limit=st.sampled_from([None, 1, 2, 5]),
        data=st.data(),
        # FakeTable cannot read backwards (saltedtable's reversed path needs the
        # client's); the emulator's run reads backwards too.
        reverse=st.booleans(),
    )
    def scan(
        self,
        keys: list[bytes],
        bounds: tuple[bytes, bytes] | None,
        limit: int | None,
        data: st.DataObject,
        reverse: bool,
    ) -> None:
        """Key lists and ranges with limits and filters, forward or reversed."""
        row_filter = data.draw(st.sampled_from(self.filters), label="filter")
        ranges = None
        if bounds is not None:
            lo, hi = bounds
            if lo and hi and lo > hi:
                lo, hi = hi, lo
            ranges = [RowRange(lo or None, hi or None)]
        if not keys and ranges is None and limit is None and reverse:
            limit = 3
        query = ReadRowsQuery(row_keys=keys or None, row_ranges=ranges, row_filter=row_filter)
        # The model reads forward without a limit; the expected rows are cut here.
        want = self.shape(self.run(self.model.read_rows(query)))
        if reverse:
            want.reverse()
        if limit:
            want = want[:limit]
        query = ReadRowsQuery(
            row_keys=keys or None, row_ranges=ranges, row_filter=row_filter, limit=limit
        )
        asked: Any = query
        if reverse and isinstance(self.fake, FakeTable):
            return
        if reverse:
            from saltedtable._read.query import reversed_request

            asked = reversed_request(query)
        refused: Exception | None = None
        try:
            got = self.shape(self.run(self.table.read_rows(asked)))
        except (WindowFilterError, SplitKeyError) as exc:
            refused = exc
        if isinstance(refused, WindowFilterError):
            # A filter on whole rows is refused where a read meets a moving part.
            assert self.hot.moving
            assert "during the move of hot part" in str(refused)
        elif refused is not None:
            # A reversed read that meets a moving part is refused, naming it.
            assert reverse
            assert self.hot.moving
            assert "is moving" in str(refused)
        else:
            assert got == want

    @rule(part=st.sampled_from(PARTS), limit=st.sampled_from([None, 1, 3]), stale=st.booleans())
    def prefix(self, part: bytes, limit: int | None, stale: bool) -> None:
        """A prefix scan of a part (a hot part reads its K buckets); before a split's
        start, maybe by a table object that has not read it."""
        table = self.table
        if stale and self.pending() and self.stale is not None and self.stale_reads:
            table = self.stale

        async def read() -> list[Row]:
            return [r async for r in table.read_prefix(part + b"#", limit=limit)]

        query = ReadRowsQuery(row_ranges=[RowRange(part + b"#", part + b"$")], limit=limit)
        want = self.shape(self.run(self.model.read_rows(query)))
        assert self.shape(self.run(read())) == want


HotTableMachine.TestCase.settings = settings(
    max_examples=600, stateful_step_count=40, deadline=None
)
TestHotTable = HotTableMachine.TestCase


def test_a_table_without_hot_lists_sends_the_same_requests() -> None:
    """hot=None and empty hot lists: byte for byte the requests of today's table."""

    async def calls(table: SaltedTableAsync, fake: FakeTable) -> list[Any]:
        await table.mutate_row(b"t0#a", SetCell("cf", b"a", b"v", 1000))
        await table.bulk_mutate_rows([RowMutationEntry(b"t1#b", SetCell("cf", b"a", b"v", 1000))])
        await table.read_row(b"t0#a")
        await table.read_rows(ReadRowsQuery(row_ranges=[RowRange(b"t0#", b"t0$")], limit=2))
        return [(q.row_keys, [r.start_key for r in q.row_ranges]) for q in fake.stats.queries]

    plain, empty = FakeTable(), FakeTable()
    a = asyncio.run(calls(SaltedTableAsync(plain, SCHEME, guard=False), plain))
    b = asyncio.run(
        calls(SaltedTableAsync(empty, SCHEME, guard=False, hot=HotLayout(SCHEME)), empty)
    )
    assert a == b
    assert plain.row_keys() == empty.row_keys()


def test_a_hot_part_spreads_its_rows_and_a_prefix_scan_reads_its_buckets() -> None:
    fake = FakeTable()
    hot = HotLayout(SCHEME, parts={b"t0": 4})
    table = hot_table(fake, hot)
    keys = [b"t0#%03d" % i for i in range(40)]

    async def go() -> list[bytes]:
        for k in keys:
            await table.mutate_row(k, SetCell("cf", b"a", b"v", 1000))
        return [r.row_key async for r in table.read_prefix(b"t0#", limit=30)]

    assert asyncio.run(go()) == keys[:30]
    prefixes = {k[: k.index(b"t0#")] for k in fake.row_keys()}
    assert len(prefixes) == 4
    assert len(table.plan(ReadRowsQuery(row_ranges=[RowRange(b"t0#", b"t0$")])).subqueries) == 4


def test_a_split_row_counts_its_adds_across_sub_rows_and_reads_as_one() -> None:
    fake = FakeTable(families=FAMILIES)
    table = hot_table(fake, HotLayout(SCHEME, rows={b"t1#a": 4}))

    async def go() -> tuple[Row | None, list[Row]]:
        for _ in range(8):
            await table.mutate_row(b"t1#a", AddToCell("sm", b"n", 1, 0))
        await table.mutate_row(b"t1#b", SetCell("cf", b"a", b"v", 1000))
        return await table.read_row(b"t1#a"), await table.read_rows(ReadRowsQuery(limit=2))

    row, rows = asyncio.run(go())
    assert row is not None
    assert [int.from_bytes(c.value, "big") for c in row.cells] == [8]
    assert [r.row_key for r in rows] == [b"t1#a", b"t1#b"]
    assert sum(1 for k in fake.row_keys() if k.endswith(b"t1#a")) == 4


def test_atomic_operations_and_value_filters_on_a_split_row_are_refused() -> None:
    fake = FakeTable(families=FAMILIES)
    table = hot_table(fake, HotLayout(SCHEME, rows={b"t1#a": 2}))

    async def go() -> None:
        with pytest.raises(SplitKeyError, match="t1#a"):
            await table.check_and_mutate_row(b"t1#a", None, true_case_mutations=[])
        with pytest.raises(SplitKeyError, match="split"):
            await table.read_modify_write_row(b"t1#a", IncrementRule("cf", b"a", 1))
        with pytest.raises(SplitKeyError):
            await table.read_row(b"t1#a", row_filter=ValueRegexFilter(b"x"))
        with pytest.raises(SplitKeyError):
            await table.read_rows(ReadRowsQuery(row_filter=ValueRegexFilter(b"x")))
        # Rows that are not split keep their atomic operations.
        await table.read_modify_write_row(b"t1#b", IncrementRule("cf", b"a", 1))

    asyncio.run(go())


def test_check_layout_accepts_hot_rows_where_the_lists_put_them() -> None:
    """Sub-rows and a hot part's rows fit a table with the lists; without them they are strays."""
    fake = FakeTable(families=FAMILIES)
    hot = HotLayout(SCHEME, parts={b"t0": 4}, rows={b"t1#a": 4})
    table = hot_table(fake, hot)

    async def go() -> None:
        for i in range(20):
            await table.mutate_row(b"t0#%02d" % i, SetCell("cf", b"a", b"v", 1000))
            await table.mutate_row(b"t1#a", SetCell("cf", b"q%d" % i, b"v", 1000))
        await table.check_layout()
        with pytest.raises(LayoutError, match="do not fit"):
            await SaltedTableAsync(fake, SCHEME, guard=False).check_layout()

    asyncio.run(go())


def test_the_sync_table_reads_and_writes_hot_keys_as_the_async_one() -> None:
    """The generated SaltedTable: spread writes, one combined row, a merged prefix scan."""
    fake = FakeTable(families=FAMILIES)
    hot = HotLayout(SCHEME, parts={b"t0": 4}, rows={b"t1#a": 4})
    table = SaltedTable(
        SyncFakeTable(fake),  # type: ignore[arg-type]
        SCHEME,
        guard=False,
        hot=hot,
        aggregates=AGGREGATES,
    )
    for i in range(12):
        table.mutate_row(b"t0#%02d" % i, SetCell("cf", b"a", b"v", 1000))
    with table.mutations_batcher() as batcher:
        for _ in range(8):
            batcher.append(RowMutationEntry(b"t1#a", AddToCell("sm", b"n", 2, 0)))
    row = table.read_row(b"t1#a")
    assert row is not None
    assert [int.from_bytes(c.value, "big") for c in row.cells] == [16]
    assert [r.row_key for r in table.read_prefix(b"t0#", limit=5)] == [
        b"t0#%02d" % i for i in range(5)
    ]
    assert [r.row_key for r in table.read_rows(ReadRowsQuery(row_keys=[b"t1#a", b"t0#03"]))] == [
        b"t0#03",
        b"t1#a",
    ]
    assert sum(1 for k in fake.row_keys() if k.endswith(b"t1#a")) == 4
    with pytest.raises(SplitKeyError):
        table.read_modify_write_row(b"t1#a", IncrementRule("cf", b"a", 1))


def test_a_view_of_a_hot_part_shows_its_k_buckets_and_split_sub_rows() -> None:
    hot = HotLayout(SCHEME, parts={b"t0": 4}, rows={b"t0#a": 8})
    plain = view_row_prefixes(SCHEME, b"t0#", record=False)
    spread = view_row_prefixes(SCHEME, b"t0#", record=False, hot=hot)
    assert len(plain) == 1
    assert set(plain) < set(spread)
    wanted = {SCHEME.prefix(b) + b"t0#" for b in hot.scan_buckets(b"t0#") or ()}
    assert set(spread) == wanted
    assert len(spread) >= 8


def test_a_failed_sub_row_write_fails_the_callers_entry_once() -> None:
    """A split row's entry is several physical entries: a failure names the logical one."""
    from google.api_core.exceptions import ServiceUnavailable
    from google.cloud.bigtable.data.exceptions import (
        FailedMutationEntryError,
        MutationsExceptionGroup,
    )

    def fail(entry: RowMutationEntry) -> Exception | None:
        return ServiceUnavailable("down") if entry.row_key.endswith(b"t1#a") else None

    fake = FakeTable(families=FAMILIES, fail_entry=fail)
    table = hot_table(fake, HotLayout(SCHEME, rows={b"t1#a": 4}))
    entries = [
        RowMutationEntry(b"t0#a", SetCell("cf", b"a", b"v", 1000)),
        # Eight columns: several sub-rows, each a physical entry that fails.
        RowMutationEntry(b"t1#a", [SetCell("cf", b"q%d" % i, b"v", 1000) for i in range(8)]),
    ]

    async def go() -> None:
        with pytest.raises(MutationsExceptionGroup) as caught:
            await table.bulk_mutate_rows(entries)
        failed = [e for e in caught.value.exceptions if isinstance(e, FailedMutationEntryError)]
        assert [(e.index, e.entry) for e in failed] == [(1, entries[1])]

    asyncio.run(go())


def test_a_split_rows_failure_in_the_batcher_is_reported_once() -> None:
    """Every sub-row of one appended entry failing names the caller's entry once, as bulk does."""
    from google.api_core.exceptions import PermissionDenied
    from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup
    from google.cloud.bigtable.data.mutations import DeleteAllFromRow

    async def scenario() -> None:
        fake = FakeTable(fail_entry=lambda entry: PermissionDenied("no"))
        table = SaltedTableAsync(
            fake,
            SCHEME,
            guard=False,
            hot=HotLayout(SCHEME, rows={b"t1#a": 4}),
            aggregates=AGGREGATES,
        )
        entry = RowMutationEntry(b"t1#a", DeleteAllFromRow())
        batcher = table.mutations_batcher(flush_interval=None)
        await batcher.append(entry)
        with pytest.raises(MutationsExceptionGroup) as flushed:
            await batcher.flush()
        assert [exc.entry for exc in flushed.value.exceptions] == [entry]
        assert flushed.value.total_entries_attempted == 1
        await batcher.close()
        with pytest.raises(MutationsExceptionGroup) as bulk:
            await table.bulk_mutate_rows([entry])
        assert [(exc.index, exc.entry) for exc in bulk.value.exceptions] == [(0, entry)]

    asyncio.run(scenario())


def test_the_sync_table_reads_a_moving_part_in_both_places() -> None:
    """The generated SaltedTable: a point read in one request, the part's scan once per key."""
    fake = FakeTable(families=FAMILIES)
    sync = SyncFakeTable(fake)
    before = SaltedTable(sync, SCHEME, guard=False)  # type: ignore[arg-type]
    for i in range(12):
        before.mutate_row(b"t0#%02d" % i, SetCell("cf", b"a", b"old", 1000))
    hot = HotLayout(SCHEME, parts={b"t0": 4}, moving={b"t0": 1})
    table = SaltedTable(sync, SCHEME, guard=False, hot=hot)  # type: ignore[arg-type]
    moved = [k for k in (b"t0#%02d" % i for i in range(12)) if hot.move_keys(k)[1]]
    assert moved
    table.mutate_row(moved[0], SetCell("cf", b"b", b"new", 2000))
    table.mutate_row(moved[1], DeleteAllFromRow())
    reads = len(fake.read_kwargs)
    row = table.read_row(moved[0])
    assert len(fake.read_kwargs) == reads + 1  # one request carrying both keys
    assert row is not None
    assert sorted((c.qualifier, c.value) for c in row.cells) == [(b"a", b"old"), (b"b", b"new")]
    assert table.read_row(moved[1]) is None
    assert not table.row_exists(moved[1])
    want = [b"t0#%02d" % i for i in range(12) if b"t0#%02d" % i != moved[1]]
    assert [r.row_key for r in table.read_prefix(b"t0#")] == want
    assert [r.row_key for r in table.read_prefix(b"t0#", limit=3)] == want[:3]
    every = table.read_rows(ReadRowsQuery(row_keys=[moved[0]], limit=4), ordered=False)
    assert [r.row_key for r in every] == [moved[0]]
    with pytest.raises(SplitKeyError, match="is moving"):
        table.read_modify_write_row(moved[0], IncrementRule("cf", b"a", 1))
    with pytest.raises(SplitKeyError, match="reversed read meets hot part 't0'"):
        table.read_rows({"rows": {"row_ranges": [{}]}, "reversed": True})


@pytest.mark.parametrize("how", ["mutate_row", "bulk", "batcher"])
@pytest.mark.parametrize("change", ["split row", "moving part"])
def test_a_delete_before_the_start_reaches_what_a_writer_ahead_wrote(
    monkeypatch: pytest.MonkeyPatch, change: str, how: str
) -> None:
    """Two clocks around a pending split: A (ahead) writes the new place, B (behind) deletes."""
    start = 10**15  # the split's start on the writers' clocks (micros)
    if change == "split row":
        key = b"t1#b"
        lists = HotLayout(SCHEME, rows={key: 4})
        qualifier = next(q for q in (b"a", b"b", b"c", b"d", b"e") if lists.sub_row(key, "cf", q))
    else:
        lists = HotLayout(SCHEME, parts={b"t0": 4}, moving={b"t0": 1})
        key = next(k for k in (b"t0#%d" % i for i in range(50)) if lists.move_keys(k)[1])
        qualifier = b"a"
    hot = dataclasses.replace(lists, previous=HotLayout(SCHEME), start_micros=start)
    fake = FakeTable(families=FAMILIES)
    ahead, behind = hot_table(fake, hot), hot_table(fake, hot)
    monkeypatch.setattr(table_module, "wall_micros", lambda: start + 1_000_000)
    asyncio.run(ahead.mutate_row(key, [SetCell("cf", qualifier, b"x", 1000)]))
    place = 0 if change == "moving part" else lists.sub_row(key, "cf", qualifier)
    assert fake.row_keys() == [hot.physical_keys(key)[place]]  # not where B writes yet
    monkeypatch.setattr(table_module, "wall_micros", lambda: start - 1_000_000)
    monkeypatch.setattr(batcher_module, "wall_micros", lambda: start - 1_000_000)

    async def delete() -> None:
        entry = RowMutationEntry(key, [DeleteAllFromRow()])
        if how == "mutate_row":
            await behind.mutate_row(key, entry.mutations)
        elif how == "bulk":
            await behind.bulk_mutate_rows([entry])
        else:
            async with behind.mutations_batcher() as batcher:
                await batcher.append(entry)

    asyncio.run(delete())
    assert asyncio.run(ahead.read_row(key)) is None
    assert fake.row_keys() == []
    assert not any(c[0] == MOVE_FAMILY for k in fake.row_keys() for c in fake.cells_of(k))


@pytest.mark.parametrize(
    ("before_s", "interval", "at_once"),
    [(1.0, 5.0, True), (100.0, 5.0, False), (100.0, None, True)],
)
def test_a_batcher_sends_an_entry_routed_to_a_moving_parts_old_place_at_once(
    monkeypatch: pytest.MonkeyPatch, before_s: float, interval: float | None, at_once: bool
) -> None:
    """Before the start an entry goes to the old place: sent then, not after a finish.

    Sent at once only when the periodic flush might come after the start (within its
    interval of the start, or no periodic flush): earlier, it is batched as usual.
    """
    start = 10**15
    lists = HotLayout(SCHEME, parts={b"t0": 4}, moving={b"t0": 1})
    hot = dataclasses.replace(lists, previous=HotLayout(SCHEME), start_micros=start)
    keys = [b"t0#%d" % i for i in range(50)]
    moved = next(k for k in keys if hot.move_keys(k)[1])
    stays = next(k for k in keys if not hot.move_keys(k)[1])
    fake = FakeTable(families=FAMILIES)
    table = hot_table(fake, hot)
    monkeypatch.setattr(batcher_module, "wall_micros", lambda: start - int(before_s * 1e6))

    async def run() -> tuple[list[bytes], list[bytes]]:
        async with table.mutations_batcher(
            flush_limit_mutation_count=None, flush_interval=interval
        ) as batcher:
            await batcher.append(RowMutationEntry(stays, [SetCell("cf", b"a", b"x", 1000)]))
            await asyncio.sleep(0.01)
            held = fake.row_keys()  # batched as the client batches it
            await batcher.append(RowMutationEntry(moved, [SetCell("cf", b"a", b"x", 1000)]))
            await asyncio.sleep(0.01)
            return held, fake.row_keys()

    held, sent = asyncio.run(run())
    assert held == []
    if at_once:
        assert sorted(sent) == sorted([hot.move_keys(moved)[1], hot.physical_keys(stays)[0]])
    else:
        assert sent == []  # batched: the periodic flush sends it well before the start


class _FailsOnce(FakeTable):
    """The first write fails with a retryable error (not applied); the others succeed."""

    def __init__(self, **kwargs: Any) -> None:
        self.writes: list[bytes] = []
        super().__init__(fail_entry=self._once, **kwargs)

    def _once(self, entry: RowMutationEntry) -> Exception | None:
        from google.api_core.exceptions import ServiceUnavailable

        self.writes.append(bytes(entry.row_key))
        return ServiceUnavailable("retry me") if len(self.writes) == 1 else None

    async def mutate_row(
        self, row_key: bytes | str, mutations: Mutation | list[Mutation], **kwargs: Any
    ) -> None:
        cause = self._once(RowMutationEntry(row_key, mutations))
        if cause is not None:
            raise cause
        await super().mutate_row(row_key, mutations, **kwargs)


@pytest.mark.parametrize("how", ["mutate_row", "bulk", "batcher"])
def test_a_failed_add_to_a_split_row_is_sent_once_and_not_retried(how: str) -> None:
    """The client never retries AddToCell; the spread and the batcher send it once too."""
    from google.api_core.exceptions import ServiceUnavailable
    from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup

    add = AddToCell("sm", b"n", 5, 0)
    assert not add.is_idempotent()  # what keeps the client's retries off it
    assert not RowMutationEntry(b"t1#b", [add]).is_idempotent()
    fake = _FailsOnce(families=FAMILIES)
    table = hot_table(fake, HotLayout(SCHEME, rows={b"t1#b": 4}))

    async def write() -> None:
        if how == "mutate_row":
            await table.mutate_row(b"t1#b", add)
        elif how == "bulk":
            await table.bulk_mutate_rows([RowMutationEntry(b"t1#b", add)])
        else:
            async with table.mutations_batcher(flush_interval=None) as batcher:
                await batcher.append(RowMutationEntry(b"t1#b", add))

    with pytest.raises((ServiceUnavailable, MutationsExceptionGroup)):
        asyncio.run(write())
    assert len(fake.writes) == 1  # one attempt, which failed: nothing added
    assert asyncio.run(table.read_row(b"t1#b")) is None
    asyncio.run(write())  # the caller's own retry (the sub-row may differ) counts once
    row = asyncio.run(table.read_row(b"t1#b"))
    assert row is not None
    assert sum(int.from_bytes(c.value, "big", signed=True) for c in row.cells) == 5


def test_a_started_part_split_reads_its_moving_keys_by_the_moves_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A moving key of a split with a start is read with its tombstones (found by the model)."""
    start = 10**15
    lists = HotLayout(SCHEME, parts={b"t2": 2}, moving={b"t2": 1})
    hot = dataclasses.replace(lists, previous=HotLayout(SCHEME), start_micros=start)
    key = next(k for k in (b"t2#%d" % i for i in range(50)) if hot.move_keys(k)[1])
    fake = FakeTable(families=FAMILIES)
    table = hot_table(fake, hot)
    monkeypatch.setattr(table_module, "wall_micros", lambda: start + 1)

    async def run() -> tuple[Any, ...]:
        await table.mutate_row(key, [DeleteAllFromFamily("cf")])  # a tombstone, no cell
        rows = await table.read_rows(ReadRowsQuery(row_keys=[key]))
        return await table.read_row(key), await table.row_exists(key), rows

    assert asyncio.run(run()) == (None, False, [])
