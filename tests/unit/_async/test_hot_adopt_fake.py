"""A split with a future start, adopted by table objects that live across it (fake table).

A writer, a reader and a batcher are opened before ``split_hot_key``; the split
starts LEAD seconds later. Until the start every write lands where the lists
before it put it (the unsplit row, which every reader reads); the objects read the
record again (refresh 0.05 s), adopt the new lists, and from the start spread the
counter over K sub-rows. Every read in between sees every add: counters sum exactly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Literal

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import AddToCell, SetCell

from saltedtable import (
    LayoutError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    fields,
)
from saltedtable._exceptions import SaltSchemeError
from saltedtable._guard.families import FamilyInfo
from saltedtable._guard.hot_record import split_record
from saltedtable._guard.record import SCHEME_QUALIFIER, decode_layout, encode_layout
from saltedtable._scheme.hot import HotLayout
from saltedtable._scheme.salt import SCHEME_ROW_KEY
from saltedtable._split import finish_hot_move, split_hot_key
from tests.fakes import FakeTable, SyncFakeTable
from tests.hot_model import AGGREGATES, PLAIN

SCHEME = SaltScheme(8, key_part=fields(1))
FAMILIES = [FamilyInfo(f) for f in PLAIN] + [
    FamilyInfo(f, aggregate=kind) for f, kind in AGGREGATES.items()
]
LEAD = 0.5
CTR = b"t1#ctr"


def _split(fake: FakeTable, kind: Literal["part", "row"], value: bytes, k: int) -> HotLayout:
    """What ``split_hot_key`` stores (it needs a sync table: this runs inside a loop)."""
    family, _, _, value_ = max(
        (c for c in fake.cells_of(SCHEME_ROW_KEY) if c[1] == SCHEME_QUALIFIER), key=lambda c: c[2]
    )
    now = int(time.time() * 1e6)
    record = decode_layout(value_)
    _, after, new = split_record(record, SCHEME, kind, value, k, now_micros=now, min_lead=LEAD)
    fake.set_cell(
        SCHEME_ROW_KEY, family, SCHEME_QUALIFIER, encode_layout(new), 2**60 // 1000 * 1000
    )
    return after


def _physical(fake: FakeTable, key: bytes) -> list[bytes]:
    return [k for k in fake.data_keys() if k.split(b"-", 1)[-1] == key]


def _sum(row: object) -> int:
    assert row is not None
    cells = [c for c in row.cells if c.family == "sm"]  # type: ignore[attr-defined]
    return sum(int.from_bytes(c.value, "big", signed=True) for c in cells)


def test_a_writer_reader_and_batcher_opened_before_a_split_follow_it_across_its_start() -> None:
    """Nothing hidden before, at or after the start; the adds spread only from the start."""

    async def scenario() -> None:
        fake = FakeTable(families=FAMILIES)
        opts = {"record_refresh": 0.05, "aggregates": AGGREGATES}
        writer = SaltedTableAsync(fake, SCHEME, **opts)  # type: ignore[arg-type]
        await writer.guard_scheme(family="cf")
        reader = SaltedTableAsync(fake, SCHEME, **opts)  # type: ignore[arg-type]
        assert await reader.read_row(CTR) is None
        added = 0
        async with writer.mutations_batcher(flush_interval=None) as batcher:
            await writer.mutate_row(CTR, AddToCell("sm", b"n", 1, 0))
            added += 1
            after = _split(fake, "row", CTR, 4)
            assert after.start_micros is not None
            start = after.start_micros / 1e6
            homes: set[bytes] = set()
            while time.time() < start + 0.3:
                pending = time.time() < start - 0.02  # (a margin for the writer's own clock)
                await writer.mutate_row(CTR, AddToCell("sm", b"n", 1, 0))
                await writer.bulk_mutate_rows([RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0))])
                await batcher.append(RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0)))
                await batcher.flush()
                added += 3
                if pending:
                    homes.update(_physical(fake, CTR))
                assert _sum(await reader.read_row(CTR)) == added
                rows = await reader.read_rows(ReadRowsQuery(row_ranges=[]))
                assert [r.row_key for r in rows].count(CTR) == 1
                assert _sum(next(r for r in rows if r.row_key == CTR)) == added
                await asyncio.sleep(0.02)
        assert homes == {SCHEME.salt_key(CTR)}  # before the start: the unsplit row only
        assert len(_physical(fake, CTR)) == 4  # from the start: all four sub-rows
        assert writer.hot == after  # both adopted the record's lists
        assert reader.hot == after
        assert _sum(await reader.read_row(CTR)) == added

    asyncio.run(scenario())


def test_the_sync_flavour_adopts_in_a_batcher_opened_before_the_split() -> None:
    fake = FakeTable(families=FAMILIES)
    table = SaltedTable(SyncFakeTable(fake), SCHEME, record_refresh=0.05, aggregates=AGGREGATES)
    table.guard_scheme(family="cf")
    with table.mutations_batcher(flush_interval=None) as batcher:
        batcher.append(RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0)))
        _, after = split_hot_key(SyncFakeTable(fake), "row", CTR, 4, min_lead=LEAD)
        assert after.start_micros is not None
        time.sleep(max(0.0, after.start_micros / 1e6 - time.time()) + 0.06)
        for _ in range(8):
            batcher.append(RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0)))
    assert table.hot == after
    assert len(_physical(fake, CTR)) > 1
    assert _sum(table.read_row(CTR)) == 9


def test_a_hot_parts_rows_written_before_the_start_are_still_found() -> None:
    """Listing a part: rows written before its start stay home; point reads and scans find them."""

    async def scenario() -> None:
        fake = FakeTable(families=FAMILIES)
        table = SaltedTableAsync(fake, SCHEME, record_refresh=0.05)
        await table.guard_scheme(family="cf")
        after = _split(fake, "part", b"t0", 4)
        assert after.start_micros is not None
        await asyncio.sleep(0.06)
        assert await table.read_row(b"t0#zz") is None  # reads the record: adopts the split
        assert table.hot == after
        early = [b"t0#%02d" % i for i in range(10)]
        for key in early:
            await table.mutate_row(key, SetCell("cf", b"a", b"v", 1000))
        assert {k[:2] for k in fake.data_keys() if b"t0#" in k} == {SCHEME.salt_key(b"t0#")[:2]}
        await asyncio.sleep(max(0.0, after.start_micros / 1e6 - time.time()) + 0.06)
        late = [b"t0#%02d" % i for i in range(10, 30)]
        for key in late:
            await table.mutate_row(key, SetCell("cf", b"a", b"v", 1000))
        assert len({k[:2] for k in fake.data_keys() if b"t0#" in k}) == 4
        for key in early + late:
            assert await table.read_row(key) is not None, key
            assert await table.row_exists(key)
        scanned = [r.row_key async for r in table.read_prefix(b"t0#")]
        assert scanned == early + late
        listed = await table.read_rows(ReadRowsQuery(row_keys=early + late))
        assert [r.row_key for r in listed] == early + late

    asyncio.run(scenario())


def test_an_object_that_cannot_keep_the_lead_is_refused_while_a_split_is_pending() -> None:
    async def scenario() -> None:
        fake = FakeTable(families=FAMILIES)
        await SaltedTableAsync(fake, SCHEME).guard_scheme(family="cf")
        after = _split(fake, "row", CTR, 2)
        for refresh in (None, 5.0):
            slow = SaltedTableAsync(fake, SCHEME, record_refresh=refresh)
            with pytest.raises(LayoutError, match="pending hot-key split"):
                await slow.read_row(b"t2#x")
        with pytest.raises(LayoutError, match="guard is off"):
            SaltedTableAsync(fake, SCHEME, guard=False, hot=after)
        fast = SaltedTableAsync(fake, SCHEME, record_refresh=LEAD)
        assert await fast.read_row(b"t2#x") is None
        assert fast.hot == after
        # Lists that are neither the stored ones nor those before the split: refused.
        other = HotLayout(SCHEME, rows={b"t2#x": 2})
        stranger = SaltedTableAsync(fake, SCHEME, record_refresh=LEAD, hot=other)
        with pytest.raises(SchemeMismatchError, match="hot"):
            await stranger.read_row(b"t2#x")

    asyncio.run(scenario())


def test_writes_past_the_horizon_are_refused_with_nothing_written() -> None:
    """An object whose last good read of the record is older than the lead may not write."""

    async def scenario() -> None:
        fake = FakeTable(families=FAMILIES)
        await SaltedTableAsync(fake, SCHEME).guard_scheme(family="cf")
        after = _split(fake, "row", CTR, 2)
        assert after.start_micros is not None
        await asyncio.sleep(max(0.0, after.start_micros / 1e6 - time.time()) + 0.01)
        table = SaltedTableAsync(fake, SCHEME, record_refresh=None, aggregates=AGGREGATES)
        await table.mutate_row(b"t2#x", SetCell("cf", b"a", b"v", 1000))  # reads the record
        assert table.hot == after
        await asyncio.sleep(LEAD + 0.05)
        before = fake.data_keys()
        with pytest.raises(LayoutError, match="horizon"):
            await table.mutate_row(b"t2#y", SetCell("cf", b"a", b"v", 1000))
        with pytest.raises(LayoutError, match="horizon"):
            await table.bulk_mutate_rows([RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0))])
        with pytest.raises(LayoutError, match="horizon"):
            await table.check_and_mutate_row(b"t2#z", None, true_case_mutations=[])
        async with table.mutations_batcher(flush_interval=None) as batcher:
            with pytest.raises(LayoutError, match="horizon"):
                await batcher.append(RowMutationEntry(b"t2#w", SetCell("cf", b"a", b"v")))
        assert fake.data_keys() == before

    asyncio.run(scenario())


def test_a_split_refuses_a_start_sooner_than_the_lead_and_a_second_pending_split() -> None:
    fake = FakeTable(families=FAMILIES)
    asyncio.run(SaltedTableAsync(fake, SCHEME).guard_scheme(family="cf"))
    raw = SyncFakeTable(fake)
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(SaltSchemeError, match=r"start it at .* or later"):
        split_hot_key(raw, "row", CTR, 2, at=now + dt.timedelta(seconds=10), now=now)
    _, after = split_hot_key(raw, "row", CTR, 2, at=now + dt.timedelta(seconds=200), now=now)
    assert after.start_micros == int((now + dt.timedelta(seconds=200)).timestamp() * 1e6)
    assert after.min_lead_s == 120.0  # the default, as resalt's
    with pytest.raises(LayoutError, match="previous hot-key split starts at"):
        split_hot_key(raw, "row", b"t2#other", 2, now=now)
    later = now + dt.timedelta(seconds=201)
    with pytest.raises(SaltSchemeError, match="minimum lead of 120 s"):
        split_hot_key(raw, "row", b"t2#other", 2, min_lead=5, now=later)


def test_a_row_written_before_its_parts_split_starts_is_found_across_a_later_split() -> None:
    """A part's split is a move: its rows written before the start sit at the old place.

    A later split keeps the part moving (it inherits the move), reads find the row
    once, and finishing the move (after the start) moves it to its new place.
    """
    fake = FakeTable(families=[*FAMILIES, FamilyInfo("saltedtable-window")])

    async def setup() -> HotLayout:
        table = SaltedTableAsync(fake, SCHEME, record_refresh=0.05)
        await table.guard_scheme(family="cf")
        after = _split(fake, "part", b"t0", 4)
        await asyncio.sleep(0.06)
        await table.mutate_row(b"t0#early", SetCell("cf", b"a", b"v", 1000))  # home bucket
        assert after.start_micros is not None
        await asyncio.sleep(max(0.0, after.start_micros / 1e6 - time.time()) + 0.01)
        return after

    after = asyncio.run(setup())
    assert after.moving == {b"t0": 1}
    assert SCHEME.salt_key(b"t0#early") not in after.physical_keys(b"t0#early")
    assert _physical(fake, b"t0#early") == [SCHEME.salt_key(b"t0#early")]
    later = split_hot_key(SyncFakeTable(fake), "row", b"t2#x", 2, min_lead=LEAD)[1]
    assert later.moving == {b"t0": 1}  # still moving: its rows may sit at the old place

    async def read() -> tuple[object, list[bytes]]:
        table = SaltedTableAsync(fake, SCHEME, hot=later, record_refresh=0.05)
        point = await table.read_row(b"t0#early")
        scan = [row async for row in table.read_prefix(b"t0#")]
        return point, [r.row_key for r in scan]

    point, scanned = asyncio.run(read())
    assert point is not None
    assert scanned == [b"t0#early"]
    with pytest.raises(LayoutError, match="starts at"):
        finish_hot_move(SyncFakeTable(fake), b"t0")  # the later split has not started
    assert later.start_micros is not None
    time.sleep(max(0.0, later.start_micros / 1e6 - time.time()) + 0.01)
    done = finish_hot_move(SyncFakeTable(fake), b"t0", clock_margin=0)
    assert (done.retired, done.finished) == (1, True)
    assert _physical(fake, b"t0#early") == [after.physical_keys(b"t0#early")[0]]


def test_a_split_without_rows_left_at_an_old_place_is_accepted() -> None:
    """The same split where no row sits at the old place: accepted at once."""
    fake2 = FakeTable(families=FAMILIES)  # the same without that row: accepted
    asyncio.run(SaltedTableAsync(fake2, SCHEME).guard_scheme(family="cf"))
    _split(fake2, "part", b"t0", 4)
    time.sleep(LEAD + 0.05)
    assert split_hot_key(SyncFakeTable(fake2), "row", b"t2#x", 2, min_lead=LEAD)[1].rows


def test_a_batcher_that_adopts_a_split_sends_what_it_holds() -> None:
    """Entries routed by the lists before the split are sent when it is adopted, not later."""

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        fake = FakeTable(families=FAMILIES)
        table = SaltedTableAsync(fake, SCHEME, record_refresh=0.05, aggregates=AGGREGATES)
        await table.guard_scheme(family="cf")
        async with table.mutations_batcher(flush_interval=None) as batcher:
            await batcher.append(RowMutationEntry(b"t0#early", SetCell("cf", b"a", b"v")))
            await asyncio.sleep(0.01)
            held = _physical(fake, b"t0#early")
            _split(fake, "part", b"t0", 4)
            await asyncio.sleep(0.1)  # past the record refresh: the next append adopts
            await batcher.append(RowMutationEntry(b"t2#w", SetCell("cf", b"a", b"v")))
            await asyncio.sleep(0.01)
            return held, _physical(fake, b"t0#early")

    held, sent = asyncio.run(scenario())
    assert held == []
    assert sent == [SCHEME.salt_key(b"t0#early")]
