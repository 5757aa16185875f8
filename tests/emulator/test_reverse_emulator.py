"""Reversed scans on the emulator, against a sorted model.

Every bucket reads backwards (ReadRows ``reversed`` with the ``bigtable-features`` header)
and the merge runs descending: a reversed read must give the rows the same query reads
forwards, in descending key order, its limit the first rows in that order. Both flavours,
several N, paged and streamed, filters that rewrite keys, a cutoff table (both sides).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
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
)
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilterChain,
    RowKeyRegexFilter,
)

from saltedtable import QueryPlanError, ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable._read.query import reversed_request
from saltedtable.testing import INSTANCE, PROJECT
from tests.cli_helpers import run as cli_run
from tests.emulator.test_cutoff_emulator import QUERIES as CUTOFF_QUERIES
from tests.emulator.test_cutoff_emulator import Migrated, migrated, snapshot
from tests.emulator.test_read_commands import (
    USERS,
    WHERE,
    client,
    shown_keys,
    table_id,
    users,
)
from tests.sync_view import AsyncView

pytestmark = pytest.mark.emulator
__all__ = ["client", "migrated", "table_id", "users"]  # (fixtures)
MakeTable = Callable[..., str]

#: 20 users, 15 events each, a few rows with a second family.
KEYS = [b"u%02d#%04d" % (u, e) for u in range(20) for e in range(0, 150, 10)]


def _entry(key: bytes) -> RowMutationEntry:
    cells = [SetCell("cf", b"q", key, 1_000_000)]
    if key.endswith(b"0#0030") or key.endswith(b"#0100"):
        cells.append(SetCell("cg", b"r", b"g" + key, 1_000_000))
    return RowMutationEntry(key, cells)


def _dict(query: ReadRowsQuery) -> dict[str, Any]:
    """``query`` as a reversed dict query (the client's ``ReadRowsRequest`` fields)."""
    return reversed_request(query)


QUERIES: dict[str, ReadRowsQuery] = {
    "full": ReadRowsQuery(),
    "limit-1": ReadRowsQuery(limit=1),
    "limit-7": ReadRowsQuery(limit=7),
    "limit-120": ReadRowsQuery(limit=120),
    "prefix": ReadRowsQuery(row_ranges=RowRange(b"u07#", b"u07$")),
    "prefix-limit": ReadRowsQuery(row_ranges=RowRange(b"u07#", b"u07$"), limit=4),
    "range-closed": ReadRowsQuery(row_ranges=RowRange(b"u03#0040", b"u05#0100", True, True)),
    "range-open": ReadRowsQuery(row_ranges=RowRange(b"u03#0040", b"u05#0100", False, False)),
    "start-only": ReadRowsQuery(row_ranges=RowRange(start_key=b"u17#0055"), limit=9),
    "end-only": ReadRowsQuery(row_ranges=RowRange(end_key=b"u02#0070"), limit=12),
    "keys-and-ranges": ReadRowsQuery(
        row_keys=[b"u00#0000", b"u19#0140", b"u09#0090", b"nope"],
        row_ranges=[RowRange(b"u11#", b"u12#"), RowRange(b"u15#0100", b"u16#0020")],
        limit=10,
    ),
    "regex": ReadRowsQuery(row_filter=RowKeyRegexFilter(b"u1[24]#.*0")),
    "regex-limit": ReadRowsQuery(row_filter=RowKeyRegexFilter(b".*#01[0-4]0"), limit=6),
    "family": ReadRowsQuery(row_filter=FamilyNameRegexFilter(b"cg")),
    "chain-limit": ReadRowsQuery(
        # (cf only: the emulator's family order differs between directions, so the
        # first cell of a two-family row would too.)
        row_filter=RowFilterChain(
            [FamilyNameRegexFilter(b"cf"), CellsRowLimitFilter(1), RowKeyRegexFilter(b"u0[0-5]#.*")]
        ),
        limit=11,
    ),
}


def _rows(rows: list[Row]) -> list[tuple[bytes, list[tuple[str, bytes, bytes]]]]:
    return [(r.row_key, sorted((c.family, c.qualifier, c.value) for c in r.cells)) for r in rows]


def _model(forward: list[Row], limit: int | None) -> list[Any]:
    """The sorted model: the forward read (no limit), descending, its first ``limit`` rows."""
    return _rows(sorted(forward, key=lambda r: r.row_key, reverse=True))[:limit]


async def _collect(stream: AsyncIterator[Row]) -> list[Row]:
    async with aclosing(stream):  # type: ignore[type-var]
        return [row async for row in stream]


def _unlimited(query: ReadRowsQuery) -> ReadRowsQuery:
    return ReadRowsQuery(
        row_keys=list(query.row_keys),
        row_ranges=list(query.row_ranges),
        row_filter=query.filter,
    )


@contextlib.asynccontextmanager
async def _salted(
    flavour: str, name: str, n: int, client: BigtableDataClientAsync, **kwargs: Any
) -> AsyncIterator[Any]:
    if flavour == "async":
        yield SaltedTableAsync.from_client(client, INSTANCE, name, SaltScheme(n), **kwargs)
        return
    with BigtableDataClient(project=PROJECT) as sync_client:
        yield AsyncView(
            SaltedTable.from_client(sync_client, INSTANCE, name, SaltScheme(n), **kwargs)
        )


@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize(
    ("n", "kwargs"),
    [
        (1, {}),
        (4, {"budget": ReadBudget(rows=16)}),
        (16, {}),
        (16, {"max_concurrent_subscans": 3, "budget": ReadBudget(rows=40)}),  # paged
    ],
    ids=["n1", "n4-small-budget", "n16", "n16-paged"],
)
async def test_reversed_reads_are_the_sorted_model(
    data_client: BigtableDataClientAsync,
    make_table: MakeTable,
    flavour: str,
    n: int,
    kwargs: dict[str, Any],
) -> None:
    name = make_table(("cf", "cg"))
    async with _salted(flavour, name, n, data_client, **kwargs) as table:
        await table.bulk_mutate_rows([_entry(k) for k in KEYS])
        for label, query in QUERIES.items():
            forward = await table.read_rows(_unlimited(query))
            expected = _model(forward, query.limit)
            got = await table.read_rows(_dict(query))
            assert _rows(got) == expected, label
            streamed = await _collect(await table.read_rows_stream(_dict(query)))
            assert _rows(streamed) == expected, label
            loose = await table.read_rows(_dict(query), ordered=False)
            if query.limit is None:
                assert sorted(_rows(loose)) == sorted(expected), label
            else:
                # Unordered: `limit` rows of the query, not necessarily the first ones.
                assert len(loose) == len(expected), label
                assert set(r.row_key for r in loose) <= {r.row_key for r in forward}, label


async def test_a_plain_table_through_saltedtable_reads_backwards_in_bucket_order(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Unordered reverse: each bucket's rows descend (how buckets interleave is free)."""
    name = make_table(("cf", "cg"))
    table = SaltedTableAsync.from_client(data_client, INSTANCE, name, SaltScheme(8))
    await table.bulk_mutate_rows([_entry(k) for k in KEYS])
    rows = await table.read_rows({"reversed": True}, ordered=False)
    assert sorted(r.row_key for r in rows) == sorted(KEYS)
    by_bucket: dict[int, list[bytes]] = {}
    for r in rows:
        by_bucket.setdefault(SaltScheme(8).bucket_of(r.row_key), []).append(r.row_key)
    for keys in by_bucket.values():
        assert keys == sorted(keys, reverse=True)


async def test_the_cutoff_table_reads_both_sides_backwards(migrated: Migrated) -> None:
    for label, query in CUTOFF_QUERIES.items():
        forward = await migrated.table.read_rows(_unlimited(query))
        expected = snapshot(sorted(forward, key=lambda r: r.row_key, reverse=True))[: query.limit]
        got = await migrated.table.read_rows(_dict(query))
        assert snapshot(got) == expected, label
        plain = await migrated.plain.read_rows(_unlimited(query))
        assert {r.row_key for r in got} <= {r.row_key for r in plain}, label


async def test_a_wrapper_table_refuses_a_reversed_scan_before_sending(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """The fallback path (a table that is not the client's) cannot read backwards: a clear
    error at the call, and no request sent."""
    name = make_table(("cf",))
    inner = data_client.get_table(INSTANCE, name)
    sent: list[Any] = []

    class Wrapper:
        def __init__(self, table: Any) -> None:
            self._t = table

        def __getattr__(self, attr: str) -> Any:
            return getattr(self._t, attr)

        async def read_rows_stream(self, query: Any, **kw: Any) -> Any:
            sent.append(query)
            return await self._t.read_rows_stream(query, **kw)

    table = SaltedTableAsync(Wrapper(inner), SaltScheme(4), guard=False)  # type: ignore[arg-type]
    with pytest.raises(QueryPlanError, match="reversed scan needs saltedtable's own read path"):
        await table.read_rows_stream({"reversed": True})
    with pytest.raises(QueryPlanError, match="Wrapper, whose read_rows_stream is its own"):
        await table.read_rows({"reversed": True, "rows_limit": 3})
    assert sent == []


# -- saltedtable read --reverse ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ((), USERS[::-1]),
        (("--count", "3"), USERS[::-1][:3]),
        (("--prefix", "user01", "--count", "4"), USERS[10:20][::-1][:4]),
        (("--start", "user005", "--end", "user008"), USERS[5:8][::-1]),
    ],
)
def test_read_reverse_prints_the_rows_in_descending_key_order(
    capsys: pytest.CaptureFixture[str],
    users: SaltedTable,
    table_id: str,
    options: tuple[str, ...],
    expected: list[str],
) -> None:
    code, out, err = cli_run(capsys, "read", table_id, *WHERE, "--reverse", *options)
    assert (code, err) == (0, "")
    assert shown_keys(out) == expected
