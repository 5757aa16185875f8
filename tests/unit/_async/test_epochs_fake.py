"""A table with layout epochs on a FakeTable answers exactly like a plain table.

The model is a plain (unsalted) :class:`FakeTable` holding the same logical history:
every write, delete, point read, conditional write, read-modify-write and scan (points,
ranges across epoch boundaries, limits, filters, ordered and not) of the table with
epochs must equal the model's answer. Keys carry times on both sides of every epoch
start; two of the layouts share prefixes between epochs (N=16 and N=64), one has an
unsalted first epoch with rows written before the layout existed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilter,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
    ValueRegexFilter,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from saltedtable import (
    CallStats,
    Layout,
    LayoutError,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
    prefix_end,
)
from saltedtable._scheme.epochs import Epoch, Epochs
from tests.fakes import ABANDONED, FakeTable

T0 = 1_704_067_200_000  # ms: the second epoch's start
T1 = T0 + 1000  # the third's
READER = epoch_field("ms", b"#", 1, 13)
LEADS = [b"dev0", b"dev1", b"dev12", b"x"]
OFFSETS = [-1001, -2, -1, 0, 1, 2, 999, 1000, 1001, 2500]


def ms_key(lead: bytes, ms: int) -> bytes:
    """A ``lead#<13-digit ms>`` key."""
    return lead + b"#%013d" % ms


def layouts() -> dict[str, Layout]:
    """Three epoch lists: shared prefixes with legacy rows, shared without, disjoint widths."""
    return {
        "legacy, 16, 64": Layout.of_epochs(
            Epochs(
                (
                    Epoch(None, None),
                    Epoch(T0 * 1000, SaltScheme(16)),
                    Epoch(T1 * 1000, SaltScheme(64)),
                ),
                READER,
                "first",
            )
        ),
        "8, 16, 64": Layout.of_epochs(
            Epochs(
                (
                    Epoch(None, SaltScheme(8)),
                    Epoch(T0 * 1000, SaltScheme(16)),
                    Epoch(T1 * 1000, SaltScheme(64)),
                ),
                READER,
                "last",
            )
        ),
        "legacy, 8, 10": Layout.of_epochs(
            Epochs(
                (
                    Epoch(None, None),
                    Epoch(T0 * 1000, SaltScheme(8)),
                    Epoch(T1 * 1000, SaltScheme(10)),
                ),
                READER,
                "error",
            )
        ),
    }


LAYOUTS = layouts()
UNIVERSE = sorted({ms_key(lead, base + d) for lead in LEADS for base in (T0, T1) for d in OFFSETS})
#: No readable time (where the layout has a fallback); ``dev1#meta`` lies inside time ranges.
META = [b"meta0", b"meta1", b"dev1#meta"]

Shape = list[tuple[bytes, list[tuple[str, bytes, int, bytes]]]]


def shape(rows: Sequence[Row]) -> Shape:
    """Everything a caller sees of rows: keys, and each cell (with its own row key)."""
    out = []
    for r in rows:
        assert all(c.row_key == r.row_key for c in r.cells)
        out.append(
            (r.row_key, [(c.family, c.qualifier, c.timestamp_micros, c.value) for c in r.cells])
        )
    return out


FILTERS: list[RowFilter | None] = [
    None,
    RowKeyRegexFilter(b"dev1#.*"),
    RowKeyRegexFilter(b".*2.*"),
    CellsRowLimitFilter(1),
    FamilyNameRegexFilter(b"f2"),
    StripValueTransformerFilter(True),
    ValueRegexFilter(b"v1.*"),
]


class EpochTableMachine(RuleBasedStateMachine):
    """Random writes, deletes and reads on a table with epochs and on a plain model."""

    #: The filters reads and conditions draw from.
    filters: Sequence[RowFilter | None] = FILTERS

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.model = FakeTable()
        self.fake = FakeTable()
        self.table: SaltedTableAsync | None = None
        self.keys: list[bytes] = []

    def shape(self, rows: Sequence[Row]) -> Shape:
        """What the comparisons see of rows (see :func:`shape`)."""
        return shape(rows)

    def raw_cell(self, table: Any, key: bytes, value: bytes, ts: int) -> None:
        """Write one cell straight to a table (rows the layout did not write)."""
        table.set_cell(key, "f1", b"q", value, ts)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    @initialize(
        name=st.sampled_from(sorted(LAYOUTS)),
        legacy=st.lists(st.sampled_from(UNIVERSE), max_size=5),
        budget=st.sampled_from([10_000, 3]),
    )
    def start(self, name: str, legacy: list[bytes], budget: int) -> None:
        layout = LAYOUTS[name]
        assert layout.epochs is not None
        self.layout = layout
        keys = list(UNIVERSE)
        if layout.epochs.unreadable != "error":
            keys += META
        self.keys = sorted(keys)
        if layout.epochs.has_legacy:
            # Rows of the table before it had epochs: unsalted, times before the first salted epoch.
            for key in legacy:
                if layout.epochs.locate(key)[1] is None:
                    self.raw_cell(self.model, key, b"old", 1000)
                    self.raw_cell(self.fake, key, b"old", 1000)
        self.table = SaltedTableAsync(
            self.fake, layout, guard=False, budget=ReadBudget(rows=budget)
        )

    @property
    def salted(self) -> SaltedTableAsync:
        assert self.table is not None
        return self.table

    def key(self, data: st.DataObject) -> bytes:
        return data.draw(st.sampled_from(self.keys), label="key")

    # -- writes ------------------------------------------------------------------

    @rule(
        data=st.data(),
        family=st.sampled_from(["f1", "f2"]),
        qualifier=st.sampled_from([b"a", b"b"]),
        value=st.sampled_from([b"v1", b"v2", b"w"]),
        ts=st.integers(1, 5),
        how=st.sampled_from(["mutate_row", "bulk", "batcher"]),
    )
    def write(
        self, data: st.DataObject, family: str, qualifier: bytes, value: bytes, ts: int, how: str
    ) -> None:
        """SetCell through one of the write methods."""
        key = self.key(data)
        mutation = SetCell(family, qualifier, value, ts * 1000)
        self.apply(key, [mutation], how)

    def apply(self, key: bytes, mutations: list[Mutation], how: str = "mutate_row") -> None:
        async def both() -> None:
            await self.model.mutate_row(key, mutations)
            if how == "mutate_row":
                await self.salted.mutate_row(key, mutations)
            elif how == "bulk":
                await self.salted.bulk_mutate_rows([RowMutationEntry(key, mutations)])
            else:
                async with self.salted.mutations_batcher() as batcher:
                    await batcher.append(RowMutationEntry(key, mutations))

        self.run(both())

    @rule(
        data=st.data(),
        family=st.sampled_from(["f1", "f2"]),
        qualifier=st.sampled_from([b"a", b"b"]),
    )
    def delete_from_column(self, data: st.DataObject, family: str, qualifier: bytes) -> None:
        """DeleteRangeFromColumn on one column."""
        self.apply(self.key(data), [DeleteRangeFromColumn(family, qualifier)])

    @rule(data=st.data())
    def delete_row(self, data: st.DataObject) -> None:
        """DeleteAllFromRow."""
        self.apply(self.key(data), [DeleteAllFromRow()])

    @rule(data=st.data())
    def stale_write(self, data: st.DataObject) -> None:
        """A row where another epoch would put the key (a writer on an old record): never shown."""
        key = self.key(data)
        epochs = self.layout.epochs
        assert epochs is not None
        try:
            _, _, physical = epochs.locate(key)
        except ValueError:
            return
        elsewhere = {e.scheme.salt_key(key) for e in epochs if e.scheme is not None} - {physical}
        if elsewhere:
            stale = data.draw(st.sampled_from(sorted(elsewhere)), label="stale row")
            self.raw_cell(self.fake, stale, b"stale", 9000)

    @rule(data=st.data())
    def check_and_mutate(self, data: st.DataObject) -> None:
        """A conditional write hits the key's epoch and sees the same row."""
        key = self.key(data)
        predicate = data.draw(st.sampled_from(self.filters), label="predicate")
        true = SetCell("f1", b"t", b"yes", 7000)
        false = SetCell("f1", b"t", b"no", 7000)

        async def both() -> tuple[bool, bool]:
            want = await self.model.check_and_mutate_row(
                key, predicate, true_case_mutations=true, false_case_mutations=false
            )
            got = await self.salted.check_and_mutate_row(
                key, predicate, true_case_mutations=true, false_case_mutations=false
            )
            return bool(want), got

        want, got = self.run(both())
        assert got == want

    @rule(data=st.data())
    def read_modify_write(self, data: st.DataObject) -> None:
        """An append returns the same logical row."""
        key = self.key(data)
        rule_ = AppendValueRule("f2", b"log", b"+")

        async def both() -> tuple[Row, Row]:
            return (
                await self.model.read_modify_write_row(key, rule_),
                await self.salted.read_modify_write_row(key, rule_),
            )

        want, got = self.run(both())
        assert self.shape([got]) == self.shape([want])

    # -- reads -------------------------------------------------------------------

    @rule(data=st.data())
    def point_read(self, data: st.DataObject) -> None:
        """read_row and row_exists: one request, the model's answer."""
        key = self.key(data)
        row_filter = data.draw(st.sampled_from(self.filters), label="filter")

        async def both() -> None:
            want = await self.model.read_row(key, row_filter=row_filter)
            got = await self.salted.read_row(key, row_filter=row_filter)
            assert self.shape([got] if got else []) == self.shape([want] if want else [])
            assert await self.salted.row_exists(key) == await self.model.row_exists(key)

        self.run(both())

    @rule(data=st.data())
    def scan(self, data: st.DataObject) -> None:
        """Points and ranges (across epoch starts), limit, filter: ordered, streamed, unordered."""
        bounds = st.one_of(
            st.none(),
            st.sampled_from(self.keys),
            st.sampled_from([b"dev1", b"dev12#", b"meta", b"x$", b"dev1#z"]),
        )
        ranges = []
        for _ in range(data.draw(st.integers(0, 2), label="ranges")):
            start, end = data.draw(bounds), data.draw(bounds)
            if start is not None and end is not None and start > end:
                start, end = end, start
            ranges.append(RowRange(start, end, data.draw(st.booleans()), data.draw(st.booleans())))
        points = data.draw(st.lists(st.sampled_from(self.keys), max_size=4), label="points")
        query = ReadRowsQuery(
            row_keys=points,
            row_ranges=ranges,
            limit=data.draw(st.one_of(st.none(), st.integers(1, 6)), label="limit"),
            row_filter=data.draw(st.sampled_from(self.filters), label="filter"),
        )

        async def both() -> None:
            want = self.shape(await self.model.read_rows(query))
            note = self.salted.plan(query).explain()
            assert self.shape(await self.salted.read_rows(query)) == want, note
            stream = await self.salted.read_rows_stream(query)
            assert self.shape([r async for r in stream]) == want, note
            unordered = self.shape(await self.salted.read_rows(query, ordered=False))
            keys = [k for k, _ in unordered]
            assert len(keys) == len(set(keys)), note  # never a logical row twice
            if query.limit is None:
                assert sorted(unordered) == want, note
            else:
                whole = ReadRowsQuery(query.row_keys, query.row_ranges, row_filter=query.filter)
                everything = self.shape(await self.model.read_rows(whole))
                assert len(unordered) == len(want)
                assert all(r in everything for r in unordered), note

        self.run(both())

    @rule(
        prefix=st.sampled_from([b"", b"dev1", b"dev12#", b"x#", b"meta"]),
        limit=st.sampled_from([None, 2]),
    )
    def prefix_scan(self, prefix: bytes, limit: int | None) -> None:
        """read_prefix with and without a limit."""

        async def both() -> None:
            rng = RowRange(prefix or None, prefix_end(prefix) or None)
            want = self.shape(
                await self.model.read_rows(ReadRowsQuery(row_ranges=rng, limit=limit))
            )
            got = self.shape([r async for r in self.salted.read_prefix(prefix, limit=limit)])
            assert got == want

        self.run(both())

    @invariant()
    def every_stream_closed(self) -> None:
        """No request is left open, none abandoned mid-way."""
        assert self.fake.stats.open_now == 0
        assert ABANDONED not in self.fake.stats.endings


EpochTableMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
TestEpochTable = EpochTableMachine.TestCase


# -- requests ------------------------------------------------------------------------


async def _scan_requests(layout: Layout | SaltScheme, keys: list[bytes]) -> tuple[int, int]:
    """(requests, sub-queries) of a whole-table scan of a table holding ``keys``."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, layout, guard=False)
    for key in keys:
        await table.mutate_row(key, SetCell("f1", b"a", b"v", 1000))
    stats = CallStats()
    rows = await table.read_rows(ReadRowsQuery(), stats=stats)
    assert [r.row_key for r in rows] == keys
    assert stats.requests == len(fake.stats.queries)
    return stats.requests, len(table.plan(ReadRowsQuery()).subqueries)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
async def test_a_scan_over_every_epoch_costs_at_most_the_sum_of_theirs(name: str) -> None:
    """Whole-table scan: no more requests than each epoch's rows scanned in a table of its own.

    (An unsalted epoch's own table is a one-bucket table: one sub-query, as its side is.)
    """
    layout = LAYOUTS[name]
    epochs = layout.epochs
    assert epochs is not None
    keys = UNIVERSE[::3]
    requests, subs = await _scan_requests(layout, keys)
    own = 0
    for i, epoch in enumerate(epochs):
        mine = [k for k in keys if epochs.epoch_of(k) == i]
        own += (await _scan_requests(epoch.scheme or SaltScheme(1), mine))[0]
    assert requests <= own
    distinct = len({p for s in layout.schemes for p in s.prefixes}) + epochs.has_legacy
    assert subs == distinct
    if name != "legacy, 8, 10":
        assert requests < own  # N=16 shares its 16 prefixes with N=64: read once
        explained = SaltedTableAsync(FakeTable(), layout).plan(ReadRowsQuery()).explain(99)
        assert "bucket 5 prefix b'05-' (epochs 1, 2): range" in explained
        assert "bucket 20 prefix b'20-' (epoch 2): range" in explained


@pytest.mark.parametrize("name", sorted(LAYOUTS))
async def test_a_point_read_is_one_request_to_its_epoch(name: str) -> None:
    """read_row sends one read of the key's physical row, in its epoch."""
    layout = LAYOUTS[name]
    assert layout.epochs is not None
    fake = FakeTable()
    table = SaltedTableAsync(fake, layout, guard=False)
    calls: list[bytes] = []
    real = fake.read_row

    async def spy(row_key: bytes, **kwargs: Any) -> Row | None:
        calls.append(row_key)
        return await real(row_key, **kwargs)

    fake.read_row = spy  # type: ignore[method-assign]
    for key in (ms_key(b"dev1", T0 - 1), ms_key(b"dev1", T0), ms_key(b"dev1", T1)):
        await table.mutate_row(key, SetCell("f1", b"a", b"v", 1000))
        physical = layout.epochs.locate(key)[2]
        assert fake.row_keys().count(physical) == 1
        calls.clear()
        row = await table.read_row(key)
        assert row is not None
        assert row.row_key == key
        assert calls == [physical]
        plan = table.plan(ReadRowsQuery(row_keys=[key]))
        assert len(plan.subqueries) == 1


async def test_a_row_written_under_a_shared_prefix_by_the_wrong_epoch_is_hidden() -> None:
    """A stale writer's row (N=16 bucket, N=64 time) is left out: scans agree with point reads."""
    layout = LAYOUTS["8, 16, 64"]
    fake = FakeTable()
    table = SaltedTableAsync(fake, layout, guard=False)
    key = ms_key(b"dev1", T1 + 5)  # epoch 2 (N=64)
    stale = SaltScheme(16).salt_key(key)
    assert stale != SaltScheme(64).salt_key(key)
    fake.set_cell(stale, "f1", b"a", b"stale", 1000)
    assert await table.read_row(key) is None
    assert await table.read_rows(ReadRowsQuery()) == []
    assert await table.read_rows(ReadRowsQuery(), ordered=False) == []


async def test_check_layout_accepts_every_epochs_rows_and_names_a_stale_one() -> None:
    """The layout sample: rows of every epoch fit; a row no epoch owns is named."""
    layout = LAYOUTS["legacy, 16, 64"]
    fake = FakeTable()
    fake.set_cell(ms_key(b"dev0", T0 - 5), "f1", b"a", b"legacy")
    table = SaltedTableAsync(fake, layout, guard=False)
    for key in UNIVERSE[::5]:
        await table.mutate_row(key, SetCell("f1", b"a", b"v", 1000))
    await table.check_layout()
    key = ms_key(b"dev1", T1 + 5)
    fake.set_cell(SaltScheme(16).salt_key(key), "f1", b"a", b"stale", 1000)
    with pytest.raises(LayoutError, match="with epochs") as caught:
        await table.check_layout()
    assert "bucket" in str(caught.value) or "epoch 2" in str(caught.value)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
async def test_samples_of_a_table_with_epochs_are_logical_keys_in_order(name: str) -> None:
    """sample_row_keys strips every epoch's prefix and keeps offsets increasing."""
    layout = LAYOUTS[name]
    fake = FakeTable(sample_every=3)
    table = SaltedTableAsync(fake, layout, guard=False)
    for key in UNIVERSE:
        await table.mutate_row(key, SetCell("f1", b"a", b"v", 1000))
    samples = await table.sample_row_keys()
    keys = [k for k, _ in samples if k]
    assert keys == sorted(keys)
    assert set(keys) <= set(UNIVERSE)
    offsets = [o for _, o in samples]
    assert offsets == sorted(offsets)
    assert samples[-1][0] == b""


async def _paged_scan_requests(
    layout: Layout | SaltScheme, keys: list[bytes], budget: ReadBudget, ordered: bool
) -> int:
    """Requests of a whole-table scan of ``keys`` under ``budget`` (every row checked)."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, layout, guard=False, budget=budget)
    await table.bulk_mutate_rows(
        [RowMutationEntry(k, SetCell("f1", b"a", b"x" * 100, 1)) for k in keys]
    )
    stats = CallStats()
    rows = await table.read_rows(ReadRowsQuery(), ordered=ordered, stats=stats)
    got = [r.row_key for r in rows]
    assert (got if ordered else sorted(got)) == keys
    return stats.requests


@pytest.mark.parametrize("ordered", [True, False])
async def test_a_paged_scan_over_two_epochs_costs_at_most_the_sum_of_theirs(
    ordered: bool,
) -> None:
    """Many pages per bucket (N=16 then N=64): no more requests than each epoch alone.

    Half the rows lie in each epoch, so the 16 prefixes both epochs share hold
    five times the rows of the 48 the newer epoch has alone: the ordered merge must
    not cut the full prefixes into more, smaller requests than each epoch's own
    table sends.
    """
    layout = Layout.of_epochs(
        Epochs((Epoch(None, SaltScheme(16)), Epoch(T0 * 1000, SaltScheme(64))), READER)
    )
    epochs = layout.epochs
    assert epochs is not None
    rows = 4000
    keys = sorted(ms_key(b"dev%04d" % (i % 500), T0 + (i - rows // 2) * 1000) for i in range(rows))
    budget = ReadBudget(rows=rows, bytes=(8 << 20) * rows // 20_000)
    requests = await _paged_scan_requests(layout, keys, budget, ordered)
    own = 0
    for i, epoch in enumerate(epochs):
        mine = [k for k in keys if epochs.epoch_of(k) == i]
        assert len(mine) == rows // 2
        assert epoch.scheme is not None
        own += await _paged_scan_requests(epoch.scheme, mine, budget, ordered)
    assert own > 16 + 64  # the budget pages: more than one request per bucket
    assert requests <= own, (requests, own)


# -- epochs appended while long-lived objects run (a controllable clock) ----------------------

#: The machine's clock starts here (seconds since the Unix epoch); keys are dated around it.
CLOCK0 = T0 / 1000
LEAD = 10.0
REFRESH = 3.0
#: Key times, in seconds from CLOCK0: behind, near and well ahead of the clock.
AHEAD = [-30, -1, 0, 4, 9, 14, 20, 33, 47, 70, 110]


class Clock:
    """The wall and monotonic clocks the guard reads, moved only by the machine."""

    def __init__(self) -> None:
        self.now = CLOCK0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


class AppendingEpochsMachine(RuleBasedStateMachine):
    """Epochs appended at now + lead while a writer and a reader keep running (review S3).

    Both objects are opened once, with a refresh within the stored lead; the clock moves
    only by the ``advance`` rule. The writer's horizon refuses keys past its last read of
    the record plus the lead (the model skips those writes). After every step every read
    of either object equals the plain model, and no append is refused for rows it would
    orphan.
    """

    def __init__(self) -> None:
        super().__init__()
        from unittest import mock

        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.patches = [
            mock.patch("saltedtable._guard.decisions.wall_clock", self.clock),
            mock.patch("saltedtable._guard.decisions.time", self.clock),
            mock.patch("saltedtable._async.guard.time", self.clock),
        ]
        for patch in self.patches:
            patch.start()
        self.model = FakeTable()
        self.fake = FakeTable()
        layout = Layout.of_epochs(
            Epochs(
                (Epoch(None, SaltScheme(4)), Epoch(int((CLOCK0 - 1000) * 1e6), SaltScheme(8))),
                READER,
                "error",
                LEAD,
            )
        )
        self.writer = SaltedTableAsync(self.fake, layout, record_refresh=REFRESH)
        self.reader = SaltedTableAsync(self.fake, layout, record_refresh=REFRESH)
        self.appended = 0
        self.last_start, self.newest = CLOCK0 - 1000, 8
        first = ms_key(b"x", int((CLOCK0 - 30) * 1000))
        self.run(self.writer.mutate_row(first, SetCell("f1", b"q", b"v0", 1000)))  # + the record
        self.run(self.model.mutate_row(first, SetCell("f1", b"q", b"v0", 1000)))

    def teardown(self) -> None:
        for patch in reversed(self.patches):
            patch.stop()
        self.loop.close()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def keys(self) -> st.SearchStrategy[bytes]:
        return st.builds(
            lambda lead, s: ms_key(lead, int((CLOCK0 + s) * 1000)),
            st.sampled_from([b"dev0", b"dev1", b"x"]),
            st.sampled_from(AHEAD),
        )

    @rule(seconds=st.sampled_from([0.5, 2.0, 4.0, 11.0]))
    def advance(self, seconds: float) -> None:
        """Time passes (an appended epoch may start)."""
        self.clock.now += seconds

    @rule(buckets=st.sampled_from([16, 64, 5]), extra=st.sampled_from([0.0, 1.0, 30.0]))
    def append(self, buckets: int, extra: float) -> None:
        """An operator appends an epoch starting the lead (or more) from now."""
        import datetime as dt

        from saltedtable import append_epoch
        from tests.fakes import SyncFakeTable

        if self.appended >= 3 or buckets == self.newest:
            return  # (an epoch must change the layout)
        now = dt.datetime.fromtimestamp(self.clock.now, dt.UTC)
        start = max(self.clock.now + LEAD + extra, self.last_start + 1)  # (epochs in order)
        at = dt.datetime.fromtimestamp(start, dt.UTC)
        append_epoch(SyncFakeTable(self.fake), SaltScheme(buckets), at, clock=lambda: now)
        self.appended += 1
        self.last_start, self.newest = start, buckets

    @rule(data=st.data(), value=st.sampled_from([b"v1", b"v2"]), ts=st.integers(1, 5))
    def write(self, data: st.DataObject, value: bytes, ts: int) -> None:
        """A write through the long-lived writer (or the reader): refused past the horizon."""
        from saltedtable import RowKeyError

        key = data.draw(self.keys(), label="key")
        who = data.draw(st.sampled_from([self.writer, self.reader]), label="object")
        mutation = SetCell("f1", b"q", value, ts * 1000)
        refused = ""
        try:
            self.run(who.mutate_row(key, mutation))
        except RowKeyError as exc:
            refused = str(exc)
        if refused:
            assert "horizon" in refused  # the only refusal a key with a time meets
            return
        self.run(self.model.mutate_row(key, mutation))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        from saltedtable import RowKeyError

        key = data.draw(self.keys(), label="key")
        try:
            self.run(self.writer.mutate_row(key, DeleteAllFromRow()))
        except RowKeyError:
            return
        self.run(self.model.mutate_row(key, DeleteAllFromRow()))

    @rule(data=st.data())
    def point_read(self, data: st.DataObject) -> None:
        key = data.draw(self.keys(), label="key")
        who = data.draw(st.sampled_from([self.writer, self.reader]), label="object")
        want = self.run(self.model.read_row(key))
        got = self.run(who.read_row(key))
        assert shape([got] if got else []) == shape([want] if want else [])

    @rule(data=st.data())
    def scan(self, data: st.DataObject) -> None:
        who = data.draw(st.sampled_from([self.writer, self.reader]), label="object")
        limit = data.draw(st.sampled_from([None, 3]), label="limit")
        query = ReadRowsQuery(limit=limit)
        want = shape(self.run(self.model.read_rows(query)))
        got = shape(self.run(who.read_rows(query)))
        assert got == want, who.plan(query).explain()


AppendingEpochsMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestAppendingEpochs = AppendingEpochsMachine.TestCase
