"""A read with split rows counts the sub-row request and its rows in its CallStats."""

from __future__ import annotations

import asyncio

from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import AddToCell, SetCell
from google.cloud.bigtable.data.read_rows_query import RowRange

from saltedtable import CallStats, HotLayout, SaltedTable, SaltedTableAsync, SaltScheme, fields
from saltedtable._guard.families import FamilyInfo
from tests.fakes import FakeTable, SyncFakeTable
from tests.hot_model import AGGREGATES, PLAIN

SCHEME = SaltScheme(8, key_part=fields(1))
HOT = HotLayout(SCHEME, rows={b"t1#ctr": 4})
FAMILIES = [FamilyInfo(f) for f in PLAIN] + [
    FamilyInfo(f, aggregate=kind) for f, kind in AGGREGATES.items()
]


def _fill(fake: FakeTable) -> None:
    async def go() -> None:
        table = SaltedTableAsync(fake, SCHEME, guard=False, hot=HOT, aggregates=AGGREGATES)
        for _ in range(4):  # one add in each of the four sub-rows (the round robin)
            await table.mutate_row(b"t1#ctr", AddToCell("sm", b"n", 1, 0))
        for key in (b"t1#a", b"t1#z"):
            await table.mutate_row(key, SetCell("cf", b"q", b"v", 1000))

    asyncio.run(go())


def test_a_scan_with_a_split_row_counts_the_sub_row_request_and_its_rows() -> None:
    fake = FakeTable(families=FAMILIES)
    _fill(fake)
    hooked: list[CallStats] = []
    sent: list[int] = []

    async def go() -> tuple[CallStats, CallStats]:
        table = SaltedTableAsync(
            fake, SCHEME, guard=False, hot=HOT, aggregates=AGGREGATES, stats_hook=hooked.append
        )
        scan = CallStats()
        sent.append(len(fake.stats.queries))
        rows = await table.read_rows(
            ReadRowsQuery(row_ranges=[RowRange(b"t1#", b"t1$")]), stats=scan
        )
        assert [r.row_key for r in rows] == [b"t1#a", b"t1#ctr", b"t1#z"]
        sent.append(len(fake.stats.queries))
        only = CallStats()
        assert len(await table.read_rows(ReadRowsQuery(row_keys=[b"t1#ctr"]), stats=only)) == 1
        return scan, only

    scan, only = asyncio.run(go())
    # Every request the scan sent: the engine's (the ranges cut around the split
    # row, in the part's bucket) and the one for the four sub-rows.
    assert scan.requests == sent[1] - sent[0]
    assert scan.requests >= 2
    assert scan.rows == 3
    assert sum(b.rows for b in scan.buckets.values()) == 2 + 4
    assert only.operation == "read_rows"
    assert only.requests == 1
    assert only.rows == 1
    assert sorted(only.buckets) == sorted(HOT.row_buckets(b"t1#ctr"))
    assert all(b.rows == 1 for b in only.buckets.values())
    assert hooked == [scan, only]  # the hook gets them once each, complete
    assert only.elapsed is not None


def test_the_sync_table_counts_them_too() -> None:
    fake = FakeTable(families=FAMILIES)
    _fill(fake)
    table = SaltedTable(SyncFakeTable(fake), SCHEME, guard=False, hot=HOT, aggregates=AGGREGATES)
    stats = CallStats()
    before = len(fake.stats.queries)
    rows = list(table.read_prefix(b"t1#", stats=stats))
    assert len(rows) == 3
    assert stats.requests == len(fake.stats.queries) - before
    assert sum(b.rows for b in stats.buckets.values()) == 6


def test_a_read_left_early_reports_its_sub_row_request_once() -> None:
    fake = FakeTable(families=FAMILIES)
    _fill(fake)
    hooked: list[CallStats] = []

    async def go() -> CallStats:
        table = SaltedTableAsync(
            fake, SCHEME, guard=False, hot=HOT, aggregates=AGGREGATES, stats_hook=hooked.append
        )
        stats = CallStats()
        stream = table.read_prefix(b"t1#", stats=stats)
        async for _ in stream:
            break
        await stream.aclose()
        return stats

    stats = asyncio.run(go())
    assert hooked == [stats]
    assert stats.ended_early
    assert stats.rows == 1
    assert stats.requests >= 2  # the engine's and the sub-rows'
    assert sum(b.rows for b in stats.buckets.values()) >= 4  # the four sub-rows
