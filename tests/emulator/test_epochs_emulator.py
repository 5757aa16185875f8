"""A table with layout epochs against the official Bigtable emulator, both flavours.

Layout: unsalted rows before ``C``, ``SaltScheme(12)`` from ``C``, ``SaltScheme(40)``
from ``C + 2 min``: the two salted epochs share the prefixes ``00-`` .. ``11-``. Rows
written before the layout existed sit unsalted; a history told through every write
method lands on every epoch. The same logical history goes to a plain table, and every
read shape (points, ranges across both starts, limits, filters, unordered, reversed,
prefixes) must answer exactly as the plain table does. The record stored is version 2
and rebuilds the same layout; a reader that knows only the newest scheme is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
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
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilterChain,
    RowKeyRegexFilter,
)

from saltedtable import (
    SCHEME_ROW_KEY,
    CallStats,
    Layout,
    ReadBudget,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    epoch_field,
    prefix_end,
)
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import record_of_row
from saltedtable._read.query import reversed_request
from saltedtable._scheme.epochs import Epoch, Epochs
from saltedtable.testing import INSTANCE, PROJECT
from tests.cli_helpers import run
from tests.sync_view import AsyncView

MakeTable = Callable[..., str]
Snapshot = list[tuple[bytes, list[tuple[bytes, str, bytes, bytes]]]]

C = 1_704_067_200_000  # ms: the first salted epoch's start
MIN = 60_000
C2 = C + 2 * MIN  # the second salted epoch's start
LAYOUT = Layout.of_epochs(
    Epochs(
        (Epoch(None, None), Epoch(C * 1000, SaltScheme(12)), Epoch(C2 * 1000, SaltScheme(40))),
        epoch_field("ms", index=1, digits=13),
    )
)


def k(sensor: int, ms: int) -> bytes:
    """``s<n>#<13-digit epoch millis>``."""
    return b"s%d#%013d" % (sensor, ms)


def cell(key: bytes, value: bytes, qualifier: bytes = b"v", family: str = "cf") -> SetCell:
    """A cell at a fixed timestamp, so two tables hold identical cells."""
    return SetCell(family, qualifier, value + b"@" + key[-5:], 1_000_000)


def snapshot(rows: list[Row]) -> Snapshot:
    """Rows as data (cells sorted by family: the emulator orders families its own way)."""
    return [
        (
            r.row_key,
            [
                (c.row_key, c.family, c.qualifier, c.value)
                for c in sorted(r.cells, key=lambda c: c.family)
                if c.qualifier != b"log"  # server-timed: compared by point reads below
            ],
        )
        for r in rows
    ]


LEGACY = [k(s, C - m * MIN) for s in range(3) for m in (1, 3)]
WRITTEN = [k(s, t) for s in range(4) for t in (C - 1, C, C + 1, C2 - 1, C2, C2 + MIN)]
DELETED = [k(1, C), k(2, C2), k(0, C - MIN)]
MISSING = [k(7, C - 1), k(7, C2), k(0, C + 9)]
EVERY_KEY = sorted({*LEGACY, *WRITTEN, *MISSING})


async def tell(target: Any) -> None:
    """The history, through every write method (SaltedTableAsync or TableAsync)."""
    third = len(WRITTEN) // 3
    for key in WRITTEN[:third]:
        await target.mutate_row(key, [cell(key, b"one"), cell(key, b"x", b"w", "cg")])
    await target.bulk_mutate_rows(
        [RowMutationEntry(key, cell(key, b"bulk")) for key in WRITTEN[third : 2 * third]]
    )
    async with target.mutations_batcher(flush_interval=None) as batcher:
        for key in WRITTEN[2 * third :]:
            await batcher.append(RowMutationEntry(key, cell(key, b"batched")))
    for key, regex, want in (
        (k(0, C - 1), b"s0#.*", True),  # unsalted epoch
        (k(0, C + 1), b"s0#.*", True),  # N=12
        (k(1, C2), b"s9#.*", False),  # N=40
    ):
        got = await target.check_and_mutate_row(
            key,
            RowKeyRegexFilter(regex),
            true_case_mutations=cell(key, b"yes", b"c"),
            false_case_mutations=cell(key, b"no", b"c"),
        )
        assert got is want
    for key in (k(3, C - 1), k(3, C), k(3, C2)):
        await target.read_modify_write_row(key, AppendValueRule("cf", b"log", b"+"))
    for key in DELETED:
        await target.mutate_row(key, DeleteAllFromRow())


@dataclass
class Grown:
    """A plain table and a table with epochs holding the same logical rows."""

    plain: TableAsync
    raw: TableAsync
    table: SaltedTableAsync


@pytest.fixture
async def grown(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> AsyncIterator[Grown]:
    """Legacy rows loaded raw into both tables, the layout stored, the history told to both."""
    plain = data_client.get_table(INSTANCE, make_table(("cf", "cg")))
    raw = data_client.get_table(INSTANCE, make_table(("cf", "cg")))
    legacy = [RowMutationEntry(key, cell(key, b"old")) for key in LEGACY]
    await plain.bulk_mutate_rows(legacy)
    await raw.bulk_mutate_rows(legacy)
    table = await SaltedTableAsync.open(raw, LAYOUT, family="cf", budget=ReadBudget(rows=8))
    await tell(table)
    await tell(plain)
    yield Grown(plain, raw, table)
    await plain.close()
    await raw.close()


QUERIES: dict[str, ReadRowsQuery] = {
    "full": ReadRowsQuery(),
    "full-limit": ReadRowsQuery(limit=7),
    "points": ReadRowsQuery(row_keys=[*EVERY_KEY[::4], *MISSING]),
    "points-limit": ReadRowsQuery(row_keys=EVERY_KEY[::2], limit=5),
    "across-both": ReadRowsQuery(row_ranges=RowRange(k(1, C - MIN), k(1, C2 + MIN), True, True)),
    "inside-12": ReadRowsQuery(row_ranges=RowRange(k(2, C), k(2, C2), True, False)),
    "open-ends": ReadRowsQuery(row_ranges=RowRange(k(0, C), k(0, C2), False, False), limit=3),
    "start-only": ReadRowsQuery(row_ranges=RowRange(start_key=k(2, C + 1))),
    "end-only": ReadRowsQuery(row_ranges=RowRange(end_key=k(1, C2), end_is_inclusive=True)),
    "ranges-and-keys": ReadRowsQuery(
        row_keys=[k(0, C - MIN), k(3, C2)],
        row_ranges=[RowRange(k(1, C - 1), k(1, C + 1)), RowRange(b"s3", b"s4")],
        limit=6,
    ),
    "regex": ReadRowsQuery(row_filter=RowKeyRegexFilter(b"s[13]#.*")),
    "family": ReadRowsQuery(row_filter=FamilyNameRegexFilter(b"cg")),
    # (One family: the emulator orders a row's families its own way, per table.)
    "one-cell-limit": ReadRowsQuery(
        row_filter=RowFilterChain([FamilyNameRegexFilter(b"cf"), CellsRowLimitFilter(1)]), limit=9
    ),
}
PREFIXES = [b"", b"s1#", b"s3#17040672", b"s9"]


async def collect(stream: AsyncIterator[Row]) -> list[Row]:
    """Every row of a stream, closing it afterwards."""
    async with aclosing(stream):
        return [row async for row in stream]


async def assert_reads_like_plain(table: Any, plain: TableAsync) -> None:
    """Every read shape, forward and reversed, point reads, prefixes: the plain answers."""
    for name, query in QUERIES.items():
        want = snapshot(await plain.read_rows(query))
        assert snapshot(await table.read_rows(query)) == want, name
        assert snapshot(await collect(await table.read_rows_stream(query))) == want, name
        unordered = snapshot(await table.read_rows(query, ordered=False))
        assert len({key for key, _ in unordered}) == len(unordered), name
        if query.limit is None:
            assert sorted(unordered) == want, name
        else:
            assert len(unordered) == len(want), name
        whole = ReadRowsQuery(query.row_keys, query.row_ranges, row_filter=query.filter)
        backwards = snapshot(await plain.read_rows(whole))[::-1][: query.limit]
        assert snapshot(await table.read_rows(reversed_request(query))) == backwards, name
    for prefix in PREFIXES:
        rng = RowRange(prefix or None, prefix_end(prefix) or None)
        want = snapshot(await plain.read_rows(ReadRowsQuery(row_ranges=rng)))
        assert snapshot(await collect(table.read_prefix(prefix))) == want, prefix
        assert snapshot(await collect(table.read_prefix(prefix, limit=2))) == want[:2], prefix
    for key in EVERY_KEY:
        got, want_row = await table.read_row(key), await plain.read_row(key)
        assert (got is None) == (want_row is None), key
        if got is not None and want_row is not None:
            assert sorted((c.qualifier, c.value) for c in got.cells) == sorted(
                (c.qualifier, c.value) for c in want_row.cells
            ), key
        assert await table.row_exists(key) == await plain.row_exists(key), key


async def test_the_async_table_reads_every_epoch_like_the_plain_table(grown: Grown) -> None:
    """SaltedTableAsync on epochs: every shape equals the plain table; rows sit in their epoch."""
    await assert_reads_like_plain(grown.table, grown.plain)
    epochs = LAYOUT.epochs
    assert epochs is not None
    physical = sorted(r.row_key for r in await grown.raw.read_rows(ReadRowsQuery()))
    physical.remove(SCHEME_ROW_KEY)
    logical = sorted(r.row_key for r in await grown.plain.read_rows(ReadRowsQuery()))
    assert physical == sorted(epochs.locate(key)[2] for key in logical)
    assert {epochs.epoch_of(key) for key in logical} == {0, 1, 2}


async def test_the_sync_table_reads_every_epoch_like_the_plain_table(grown: Grown) -> None:
    """SaltedTable (sync client) opened on the same layout: the same answers."""
    with BigtableDataClient(project=PROJECT) as client:
        table = AsyncView(SaltedTable(client.get_table(INSTANCE, grown.raw.table_id), LAYOUT))
        await assert_reads_like_plain(table, grown.plain)


async def test_a_scan_over_two_epochs_reads_each_shared_prefix_once(grown: Grown) -> None:
    """Whole table: one sub-query per distinct prefix (40 + the unsalted side), not 12 + 40 + 1."""
    stats = CallStats()
    await grown.table.read_rows(ReadRowsQuery(), stats=stats)
    assert len(grown.table.plan(ReadRowsQuery()).subqueries) == 41
    assert len(stats.buckets) == 41


async def test_the_record_is_version_2_and_refuses_a_reader_of_the_newest_scheme_only(
    grown: Grown,
) -> None:
    """The stored record rebuilds the layout; a table object without the epochs is refused."""
    record = record_of_row(await grown.raw.read_row(SCHEME_ROW_KEY))
    assert record is not None
    assert record.version == 2
    assert layout_of_record(record) == LAYOUT
    newest_only = SaltedTableAsync(grown.raw, SaltScheme(40))
    with pytest.raises(SchemeMismatchError, match="epochs"):
        await newest_only.read_row(k(0, C2))


async def test_the_command_line_reads_a_table_with_epochs_from_its_record(
    grown: Grown, capsys: pytest.CaptureFixture[str]
) -> None:
    """`saltedtable read` and `count` rebuild the epochs from the record: logical rows."""
    where = ("--project", PROJECT, "--instance", INSTANCE)
    logical = [r.row_key.decode() for r in await grown.plain.read_rows(ReadRowsQuery())]
    code, out, err = run(capsys, "read", grown.raw.table_id, *where)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [lines[i + 1] for i, line in enumerate(lines) if line == "-" * 40] == logical
    assert run(capsys, "count", grown.raw.table_id, *where) == (0, f"{len(logical)}\n", "")
    s1 = [key for key in logical if key.startswith("s1#")]
    got = run(capsys, "count", grown.raw.table_id, *where, "--prefix", "s1#")
    assert got == (0, f"{len(s1)}\n", "")
