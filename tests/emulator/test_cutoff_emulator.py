"""Forward-only migration (time cutoff) against the official Bigtable emulator.

A pre-existing unsalted table is loaded with the plain client (every key before the
cutoff), then the cutoff is turned on and writes continue through every write method on
both sides of the cutoff, late-arriving old rows included. The same logical operations go
to a plain table. Every read shape must then answer exactly like the plain table, and the
physical layout must be the documented one. Finally the ambiguity guard and the runnable
example ``examples/migrate_forward.py``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    Row,
    RowMutationEntry,
    RowRange,
    SetCell,
    TableAsync,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule, IncrementRule
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilterChain,
    RowKeyRegexFilter,
)

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    LayoutError,
    ReadBudget,
    RowKeyError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
    prefix_end,
)
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT
from tests.sync_view import AsyncView

MakeTable = Callable[..., str]
Snapshot = list[tuple[bytes, list[tuple[bytes, str, bytes, bytes, int]]]]

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ("cf", "cg")
SCHEME = SaltScheme(8)
CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
C = 1_704_067_200_000  # the cutoff in epoch milliseconds
MIN = 60_000
POLICY = CutoffPolicy(CUTOFF, epoch_field("ms", index=1, digits=13))
#: Qualifiers written by read_modify_write_row: the server picks their timestamps.
SERVER_TIMED = {b"n", b"log"}


def k(sensor: int, ms: int) -> bytes:
    """``s<n>#<13-digit epoch millis>``."""
    return b"s%d#%013d" % (sensor, ms)


def cell(key: bytes, value: bytes, qualifier: bytes = b"temp", family: str = "cf") -> SetCell:
    """A cell at a fixed timestamp, so two tables can hold identical cells."""
    return SetCell(family, qualifier, value + b"@" + key[-6:], 1_000_000)


def snapshot(rows: Iterable[Row]) -> Snapshot:
    """Rows as data: key, then (cell row key, family, qualifier, value, timestamp) per cell.

    The emulator orders a row's families by a per-table order of its own, so cells are sorted
    by family (stably: qualifiers and versions keep their order). Cells written by
    read_modify_write_row take the server clock (millisecond granularity), which differs
    between two tables, and two quick writes may share a millisecond and leave one version:
    of those cells only the newest value is kept, without its timestamp.
    """
    out: Snapshot = []
    for row in rows:
        cells, seen = [], set()
        for c in sorted(row.cells, key=lambda c: c.family):
            ts = c.timestamp_micros
            if c.qualifier in SERVER_TIMED:
                if (c.family, c.qualifier) in seen:
                    continue  # an older version (cells come newest first)
                seen.add((c.family, c.qualifier))
                ts = 0
            cells.append((c.row_key, c.family, c.qualifier, c.value, ts))
        out.append((row.row_key, cells))
    return out


async def collect(stream: AsyncIterator[Row]) -> list[Row]:
    """Every row of a stream, closing it afterwards."""
    async with aclosing(stream):
        return [row async for row in stream]


# -- the history: one logical story, told to both tables ---------------------------

LEGACY = [k(s, C - m * MIN) for s in range(4) for m in range(1, 7)]  # 24 rows, all before
NEW_BULK = [k(s, C + m * MIN) for s in range(4) for m in (1, 2, 3)]
LATE_BULK = [k(3, C - 1), k(0, C - 30_000)]  # late-arriving old rows, new keys
EXACT = k(1, C)  # exactly at the cutoff: salted
LATE_SINGLE = k(1, C - 90_000)
BATCHED_NEW = [k(4, C + 5), k(4, C + MIN)]
BATCHED_LATE = [k(4, C - 5), k(2, C - 2 * MIN)]  # the second lands on an existing legacy row
DELETED = [k(3, C - 2 * MIN), k(3, C + 2 * MIN), k(4, C - 5)]
MISSING = [k(7, C - 1), k(7, C), k(0, C - 7 * MIN - 1), k(0, C + 9 * MIN)]


async def tell(target: Any) -> list[Row]:
    """Write the history through ``target`` (SaltedTableAsync or TableAsync); return RMW rows."""
    await target.mutate_row(EXACT, cell(EXACT, b"exact"))
    await target.mutate_row(
        LATE_SINGLE, [cell(LATE_SINGLE, b"late"), cell(LATE_SINGLE, b"x", b"t", "cg")]
    )
    await target.bulk_mutate_rows(
        [RowMutationEntry(key, cell(key, b"new")) for key in NEW_BULK]
        + [RowMutationEntry(key, cell(key, b"late")) for key in LATE_BULK]
    )
    async with target.mutations_batcher(flush_interval=None) as batcher:
        for key in BATCHED_NEW + BATCHED_LATE:
            await batcher.append(RowMutationEntry(key, cell(key, b"batched", b"b")))
    # check_and_mutate_row with a (logical) row-key regex, on each side, true and false.
    outcomes = []
    for key, regex in (
        (k(0, C - MIN), b"s0#.*"),  # legacy, matches
        (k(0, C + MIN), b"s0#.*"),  # salted, matches
        (k(1, C - MIN), b"s9#.*"),  # legacy, does not match
        (k(1, C + MIN), b"s9#.*"),  # salted, does not match
    ):
        outcomes.append(
            await target.check_and_mutate_row(
                key,
                RowKeyRegexFilter(regex),
                true_case_mutations=cell(key, b"yes", b"checked"),
                false_case_mutations=cell(key, b"no", b"checked"),
            )
        )
    assert outcomes == [True, True, False, False]
    rmw = []
    for key in RMW_KEYS:
        for _ in range(2):
            rmw.append(
                await target.read_modify_write_row(
                    key, [IncrementRule("cf", b"n", 1), AppendValueRule("cf", b"log", b"+")]
                )
            )
    for key in DELETED:
        await target.mutate_row(key, DeleteAllFromRow())
    return rmw


@dataclass
class Migrated:
    """A plain table and a migrated one holding the same logical rows."""

    plain: TableAsync
    raw: TableAsync  # the migrated table's physical rows
    table: SaltedTableAsync
    rmw: tuple[list[Row], list[Row]]


@pytest.fixture
async def migrated(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> AsyncIterator[Migrated]:
    """Legacy rows loaded with the plain client into both tables, then the same history told."""
    plain = data_client.get_table(INSTANCE, make_table(FAMILIES))
    raw = data_client.get_table(INSTANCE, make_table(FAMILIES))
    legacy = [RowMutationEntry(key, cell(key, b"old")) for key in LEGACY]
    await plain.bulk_mutate_rows(legacy)
    await raw.bulk_mutate_rows(legacy)
    table = await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY, budget=ReadBudget(rows=16))
    rmw_salted = await tell(table)
    rmw_plain = await tell(plain)
    yield Migrated(plain, raw, table, (rmw_salted, rmw_plain))
    await plain.close()
    await raw.close()


# -- differential reads ----------------------------------------------------------------

RMW_KEYS = [k(2, C - MIN), k(2, C + MIN), k(5, C - 1), k(5, C)]  # two of them new rows
EVERY_KEY = sorted(
    {*LEGACY, *NEW_BULK, *LATE_BULK, EXACT, LATE_SINGLE, *BATCHED_NEW, *BATCHED_LATE, *MISSING}
    | set(RMW_KEYS)
)

QUERIES: dict[str, ReadRowsQuery] = {
    "full": ReadRowsQuery(),
    "full-limit": ReadRowsQuery(limit=7),
    "points": ReadRowsQuery(row_keys=[k(1, C - MIN), EXACT, LATE_SINGLE, k(4, C + 5), *MISSING]),
    "points-limit": ReadRowsQuery(row_keys=EVERY_KEY[::3], limit=5),
    "before": ReadRowsQuery(row_ranges=RowRange(k(1, C - 6 * MIN), k(1, C - 1), True, True)),
    "after": ReadRowsQuery(row_ranges=RowRange(k(1, C), k(1, C + 3 * MIN), True, True)),
    "across": ReadRowsQuery(row_ranges=RowRange(k(1, C - 2 * MIN), k(1, C + 2 * MIN))),
    "across-open": ReadRowsQuery(row_ranges=RowRange(k(1, C - MIN), k(1, C + MIN), False, False)),
    "start-only": ReadRowsQuery(row_ranges=RowRange(start_key=k(3, C - 1))),
    "start-only-open": ReadRowsQuery(row_ranges=RowRange(k(2, C), None, False)),
    "end-only": ReadRowsQuery(row_ranges=RowRange(end_key=k(1, C), end_is_inclusive=True)),
    "end-only-open": ReadRowsQuery(row_ranges=RowRange(end_key=k(0, C - MIN))),
    "two-sensors": ReadRowsQuery(row_ranges=RowRange(k(1, C + MIN), k(2, C - MIN))),
    "ranges-and-keys": ReadRowsQuery(
        row_keys=[k(0, C - MIN), k(3, C + MIN)],
        row_ranges=[RowRange(k(1, C - MIN), k(1, C + MIN)), RowRange(b"s4", b"s5")],
        limit=9,
    ),
    "regex": ReadRowsQuery(row_filter=RowKeyRegexFilter(b"s[14]#.*")),
    "regex-range-limit": ReadRowsQuery(
        row_ranges=RowRange(b"s", b"t"), row_filter=RowKeyRegexFilter(b".*#17040672.*"), limit=6
    ),
    "regex-before": ReadRowsQuery(
        row_ranges=RowRange(k(2, C - 6 * MIN), k(2, C - 1)),
        row_filter=RowKeyRegexFilter(b"s2#.*"),
    ),
    "family": ReadRowsQuery(row_filter=FamilyNameRegexFilter(b"cg")),
    "one-cell-chain": ReadRowsQuery(
        row_filter=RowFilterChain([CellsRowLimitFilter(1), RowKeyRegexFilter(b"s[0-2]#.*")]),
        limit=11,
    ),
}
PREFIXES = [b"", b"s", b"s1#", b"s4#", b"s1#17040672", b"s9"]


async def test_the_sync_table_reads_every_shape_like_the_plain_table(migrated: Migrated) -> None:
    """SaltedTable (sync client) over the migrated table: every read shape equals plain."""
    m = migrated
    with BigtableDataClient(project=PROJECT) as client:
        table = AsyncView(
            SaltedTable(client.get_table(INSTANCE, m.raw.table_id), SCHEME, cutoff=POLICY)
        )
        for name, query in QUERIES.items():
            expected = snapshot(await m.plain.read_rows(query))
            assert snapshot(await table.read_rows(query)) == expected, name
            assert snapshot(await collect(await table.read_rows_stream(query))) == expected, name
            unordered = snapshot(await table.read_rows(query, ordered=False))
            if query.limit is None:
                assert sorted(unordered) == expected, name
            else:
                assert len(unordered) == len(expected), name
        for prefix in PREFIXES:
            rng = RowRange(prefix or None, prefix_end(prefix) or None)
            expected = snapshot(await m.plain.read_rows(ReadRowsQuery(row_ranges=rng)))
            assert snapshot(await collect(table.read_prefix(prefix))) == expected, prefix


async def test_every_read_shape_matches_the_plain_table(
    migrated: Migrated, caplog: pytest.LogCaptureFixture
) -> None:
    """Full scans, ranges of every boundedness, point sets, limits, regexes: plain == migrated."""
    m = migrated
    caplog.set_level(logging.WARNING, logger="saltedtable")
    assert snapshot(m.rmw[0]) == snapshot(m.rmw[1])
    for name, query in QUERIES.items():
        expected = snapshot(await m.plain.read_rows(query))
        got = await m.table.read_rows(query)
        assert snapshot(got) == expected, f"{name}:\n{m.table.plan(query).explain()}"
        assert snapshot(await collect(await m.table.read_rows_stream(query))) == expected, name
        unordered = snapshot(await m.table.read_rows(query, ordered=False))
        if query.limit is None:
            assert sorted(unordered) == expected, name
        else:
            assert len(unordered) == len(expected), name
    assert expected, "the last query matched nothing: the test data is off"
    full = snapshot(await m.plain.read_rows(ReadRowsQuery()))
    assert len(full) > 40
    # No stray row exists: the legacy side never met a salted row (a scan would drop and
    # log it, which would hide a planning bug from the comparison).
    assert caplog.records == []


async def test_prefixes_point_reads_and_sharded_reads_match(
    migrated: Migrated, caplog: pytest.LogCaptureFixture
) -> None:
    """read_prefix (with limits), read_row, row_exists and read_rows_sharded: plain == migrated."""
    m = migrated
    caplog.set_level(logging.WARNING, logger="saltedtable")
    for prefix in PREFIXES:
        rng = RowRange(prefix or None, prefix_end(prefix) or None)
        expected = snapshot(await m.plain.read_rows(ReadRowsQuery(row_ranges=rng)))
        assert snapshot(await collect(m.table.read_prefix(prefix))) == expected, prefix
        assert snapshot(await collect(m.table.read_prefix(prefix, limit=3))) == expected[:3]
    for key in EVERY_KEY:
        got, want = await m.table.read_row(key), await m.plain.read_row(key)
        assert snapshot([got] if got else []) == snapshot([want] if want else []), key
        assert await m.table.row_exists(key) == await m.plain.row_exists(key), key
    row = await m.table.read_row(k(0, C - MIN), row_filter=RowKeyRegexFilter(b"s0#.*"))
    assert row is not None
    assert await m.table.read_row(k(0, C + MIN), row_filter=RowKeyRegexFilter(b"s1#.*")) is None
    shards = [QUERIES["before"], QUERIES["after"], QUERIES["regex"]]
    plain_rows = [r for q in shards for r in await m.plain.read_rows(q)]
    assert snapshot(await m.table.read_rows_sharded(shards)) == snapshot(plain_rows)
    assert caplog.records == []


async def test_physical_layout_on_both_sides(migrated: Migrated) -> None:
    """Raw table: keys before the cutoff unsalted, keys from it on under scheme.salt_key."""
    m = migrated
    logical = [row.row_key for row in await m.plain.read_rows(ReadRowsQuery())]
    physical = [row.row_key for row in await m.raw.read_rows(ReadRowsQuery())]
    expected = sorted(key if int(key[-13:]) < C else SCHEME.salt_key(key) for key in logical)
    assert physical == [*expected, SCHEME_ROW_KEY]  # and the layout record, stored by the guard
    assert b"s3#%013d" % (C - 1) in physical  # a late old row, unsalted
    assert SCHEME.salt_key(EXACT) in physical  # exactly at the cutoff, salted
    assert EXACT not in physical
    for key in DELETED:
        assert key not in physical
        assert SCHEME.salt_key(key) not in physical
    raw_late = await m.raw.read_row(k(2, C - 2 * MIN))  # legacy row + a late batched cell
    assert raw_late is not None
    assert {c.qualifier for c in raw_late.cells} == {b"temp", b"b"}


async def test_time_bounded_ranges_read_one_side(migrated: Migrated) -> None:
    """A range wholly before the cutoff reads only the legacy side, one after only buckets."""
    m = migrated
    assert m.table.plan(QUERIES["before"]).buckets == (None,)
    # After the cutoff the legacy side may still hold keys with unreadable times
    # (unreadable="error" keeps them there), so it is read unless they go salted.
    assert m.table.plan(QUERIES["after"]).buckets == (None, *SCHEME.bucket_ids)
    salted_fallback = CutoffPolicy(CUTOFF, POLICY.timestamp, unreadable="salted")
    assert (
        None
        not in SaltedTableAsync(m.raw, SCHEME, cutoff=salted_fallback)
        .plan(QUERIES["after"])
        .buckets
    )
    assert m.table.plan(QUERIES["across"]).buckets == (None, *SCHEME.bucket_ids)
    assert m.table.plan(QUERIES["full"]).buckets == (None, *SCHEME.bucket_ids)
    before = await m.table.read_rows(QUERIES["before"])
    ages = (6 * MIN, 5 * MIN, 4 * MIN, 3 * MIN, 2 * MIN, 90_000, MIN)
    assert [r.row_key for r in before] == [k(1, C - age) for age in ages]


async def test_cell_row_keys_are_logical(migrated: Migrated) -> None:
    """Rows and every cell in them carry the logical key, on both sides of the cutoff."""
    rows = await migrated.table.read_rows(ReadRowsQuery())
    for row in rows:
        assert all(c.row_key == row.row_key for c in row.cells)
        assert not SCHEME.has_prefix(row.row_key)
    for row in migrated.rmw[0]:
        assert all(c.row_key == row.row_key for c in row.cells)


# -- the guard -------------------------------------------------------------------


async def test_open_refuses_a_legacy_key_that_looks_salted(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """b'3-abc#...' loaded unsalted: open() raises LayoutError; a marker scheme opens and reads."""
    raw = data_client.get_table(INSTANCE, make_table())
    look_alike, normal = b"3-abc#%013d" % (C - MIN), k(1, C - MIN)
    await raw.bulk_mutate_rows([RowMutationEntry(x, cell(x, b"old")) for x in (look_alike, normal)])
    with pytest.raises(LayoutError, match=r"(?s)3-abc#.*marker"):
        await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY)
    with pytest.raises(RowKeyError, match="salt prefix"):
        await SaltedTableAsync(raw, SCHEME, cutoff=POLICY).mutate_row(
            look_alike, cell(look_alike, b"x")
        )
    marked = SaltScheme(8, marker=b"~")
    table = await SaltedTableAsync.open(raw, marked, cutoff=POLICY)
    await table.mutate_row(k(1, C), cell(k(1, C), b"new"))
    logical = [r.row_key for r in await table.read_rows(ReadRowsQuery())]
    assert logical == [look_alike, normal, k(1, C)]
    assert await table.read_row(look_alike) is not None
    physical = [r.row_key for r in await raw.read_rows(ReadRowsQuery())]
    assert physical == [look_alike, normal, marked.salt_key(k(1, C)), SCHEME_ROW_KEY]
    await raw.close()


async def test_stray_unsalted_row_after_the_cutoff_is_refused_and_skipped(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """An unsalted row whose key time is past the cutoff: open() refuses, scans leave it out."""
    raw = data_client.get_table(INSTANCE, make_table())
    stray, normal = k(1, C + MIN), k(1, C - MIN)
    await raw.bulk_mutate_rows([RowMutationEntry(x, cell(x, b"old")) for x in (stray, normal)])
    with pytest.raises(LayoutError, match="at or after the cutoff"):
        await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY)
    table = SaltedTableAsync(raw, SCHEME, cutoff=POLICY)
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == [normal]
    assert await table.read_row(stray) is None
    await raw.close()


async def test_from_client_accepts_a_cutoff(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """from_client(..., cutoff=policy) builds a cutoff table like the constructor does."""
    table = SaltedTableAsync.from_client(data_client, INSTANCE, make_table(), SCHEME, cutoff=POLICY)
    assert table.cutoff is POLICY


# -- the example -------------------------------------------------------------------


def test_migrate_forward_example_runs_on_the_emulator() -> None:
    """examples/migrate_forward.py runs under ``saltedtable emulator`` and says so."""
    env = {k: v for k, v in os.environ.items() if k != EMULATOR_HOST_ENV}
    script = shutil.which("saltedtable", path=str(Path(sys.executable).parent))
    assert script is not None, "the saltedtable console script is not installed (make install)"
    harness = [script, "emulator", "--table", "legacy_events:cf"]
    command = [*harness, "--", sys.executable, "examples/migrate_forward.py"]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in (
        "1. legacy table: 6 unsalted rows written with the plain client",
        "2. cutoff on at 2024-01-01T00:00:00+00:00",
        "b'sensor1#1704067200000'     -> salted (bucket 1)   b'1-sensor1#1704067200000'",
        "b'sensor1#1704067110000'     -> legacy (unsalted)   b'sensor1#1704067110000'",
        "4. merged scan of sensor1#:",
        "b'sensor1#1704067110000'   19.9  (legacy)",
        "b'sensor1#1704067200000'   30.1  (salted)",
        "point read b'sensor2#1704067080000' -> 22.2",
        "point read b'sensor2#1704067260000' -> 31.2",
        "salted b'1-sensor1#1704067200000'",
        "legacy b'sensor2#1704067020000'",
        "9 sub-queries, limit 5",
        "how: 9 sub-queries read concurrently, merged in logical key order",
        "1 sub-query",
        "legacy side (unsalted keys, before the cutoff): range [b'sensor1#1704066900000', "
        "b'sensor1#1704067199999']",
        "record b'\\xff\\xfe__saltedtable__/scheme'",
        "7. guard: open() refused with LayoutError:",
        "b'3-import#1704067140000'",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    scan = out.split("4. merged scan of sensor1#:")[1].split("point read")[0]
    keys = [line.split()[0] for line in scan.strip().splitlines()]
    assert keys == sorted(keys)
    assert len(keys) == 6
