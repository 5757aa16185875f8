"""SaltedTableAsync against the official Bigtable emulator.

The strongest checks here are differential: the same logical rows are written once to a
plain table (plain client) and once through :class:`SaltedTableAsync`, and every query shape
must answer identically. The rest pins down what only real gRPC streams show: early exit and
cancellation close every sub-scan (observed through an instrumented ``TableLikeAsync`` proxy),
concurrency stays under its bound, a failing bucket is named, and the write-side methods
speak logical keys.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.api_core.exceptions import GoogleAPICallError, PermissionDenied, ServiceUnavailable
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
from google.cloud.bigtable.data.exceptions import (
    FailedQueryShardError,
    MutationsExceptionGroup,
    ShardedReadRowsExceptionGroup,
)
from google.cloud.bigtable.data.read_modify_write_rules import IncrementRule
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import saltedtable
from saltedtable import (
    SCHEME_ROW_KEY,
    CallStats,
    OneRequestOutcome,
    QueryPlanError,
    ReadBudget,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SubScan,
    TableLikeAsync,
    fields,
    prefix_end,
)
from saltedtable._engine.budget import row_cost
from saltedtable._read.cancel_asyncio import find_calls
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, Emulator
from saltedtable.testing import create_table as admin_create_table
from saltedtable.testing import delete_table as admin_delete_table
from tests.sync_view import AsyncView

MakeTable = Callable[..., str]
Snapshot = list[tuple[bytes, list[tuple[str, bytes, bytes, int]]]]

FAMILIES = ("cf", "cg")
SCHEME16 = SaltScheme(16)


# -- helpers -------------------------------------------------------------------


def snapshot(rows: Iterable[Row]) -> Snapshot:
    """Rows as plain data: key, then (family, qualifier, value, timestamp) of every cell.

    Cells are sorted by family: the emulator returns a row's families in an order fixed per
    table (from a Go map), so two tables may disagree on it. Within a family the order
    (qualifier, then newest first) is Bigtable's own and is kept.
    """
    return [
        (
            row.row_key,
            sorted(
                ((c.family, c.qualifier, c.value, c.timestamp_micros) for c in row.cells),
                key=lambda cell: cell[0],
            ),
        )
        for row in rows
    ]


def assert_logical_cells(rows: Iterable[Row]) -> None:
    """Every cell carries its row's (logical) key, as in an unsalted table."""
    for row in rows:
        for cell in row.cells:
            assert cell.row_key == row.row_key, (row.row_key, cell)


def entry(key: bytes, value: bytes = b"v", family: str = "cf", ts: int = 1000) -> RowMutationEntry:
    """One cell ``family:q`` at a fixed timestamp (so two tables can hold identical cells)."""
    return RowMutationEntry(key, [SetCell(family, b"q", value, ts)])


def numbered_keys(count: int, stem: bytes = b"key-") -> list[bytes]:
    """``count`` distinct logical keys in increasing order."""
    return [stem + b"%05d" % i for i in range(count)]


async def fill(salted: SaltedTableAsync, keys: Sequence[bytes]) -> None:
    """Write one cell per logical key through the salted table."""
    for i in range(0, len(keys), 5000):
        await salted.bulk_mutate_rows([entry(k, value=k) for k in keys[i : i + 5000]])


async def collect(stream: AsyncIterator[Row]) -> list[Row]:
    """Every row of a stream, closing it afterwards."""
    async with aclosing(stream):
        return [row async for row in stream]


# The package's own directory, not any path containing "saltedtable": a checkout is
# usually named saltedtable too, and its tests' coroutines must not count as the library's.
PACKAGE_DIR = Path(saltedtable.__file__).resolve().parent


def saltedtable_tasks() -> set[asyncio.Task[Any]]:
    """Running tasks whose coroutine comes from the saltedtable package."""
    found = set()
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if code is not None and Path(code.co_filename).resolve().is_relative_to(PACKAGE_DIR):
            found.add(task)
    return found


async def assert_no_tasks_left(before: set[asyncio.Task[Any]]) -> None:
    """No saltedtable task is left, and the task set returns to ``before`` within a second.

    gRPC keeps one task per call until the call's status arrives; a cancelled call gets its
    status within milliseconds, while an abandoned one streams on until its deadline (~20 s).
    """
    assert not saltedtable_tasks()
    for _ in range(100):  # nothing to wait on: gRPC's tasks end on their own
        if asyncio.all_tasks() == before:
            break
        await asyncio.sleep(0.01)
    assert asyncio.all_tasks() == before


# -- an instrumented TableLikeAsync -------------------------------------------------


@dataclass(eq=False)
class StreamRecord:
    """How one ``read_rows_stream`` of the underlying table was used.

    ``outcome``: ``open`` while rows may still come; then ``exhausted`` (read to its end),
    ``cancelled`` (cancelled while a row was pending: that cancels the gRPC call),
    ``failed`` (raised, including an injected error) or ``abandoned`` (closed while
    neither exhausted nor cancelled: its RPC keeps streaming in the background).
    """

    query: ReadRowsQuery
    outcome: str = "open"
    closed: bool = False
    rows: int = 0


class RecordedStream:
    """Delegates to a real row stream and records how it ended (see :class:`StreamRecord`)."""

    def __init__(
        self,
        owner: RecordingTable,
        inner: AsyncIterator[Row],
        record: StreamRecord,
        inject: BaseException | None,
    ) -> None:
        self._owner = owner
        self._inner = inner
        self._record = record
        self._inject = inject
        self._calls: list[Any] = []  # the gRPC calls under it, once it has started

    def __aiter__(self) -> RecordedStream:
        return self

    async def __anext__(self) -> Row:
        if self._record.outcome != "open":
            raise StopAsyncIteration
        try:
            row = await self._inner.__anext__()
        except StopAsyncIteration:
            if self._inject is not None:
                # The real stream was read to its end (its query was cut short), so
                # the injected failure abandons no RPC.
                self._end("failed")
                raise self._inject from None
            self._end("exhausted")
            raise
        except asyncio.CancelledError:
            self._end("cancelled")
            raise
        except BaseException:
            self._end("failed")
            raise
        if not self._record.rows:
            self._calls = find_calls(self._inner)
        self._record.rows += 1
        return row

    async def aclose(self) -> None:
        if self._record.outcome == "open":
            # Closed between rows: its RPC ended only if its call was cancelled first
            # (as saltedtable's end_stream does).
            ended = self._calls and all(call.cancelled() for call in self._calls)
            self._end("cancelled" if ended else "abandoned")
        self._record.closed = True
        await self._inner.aclose()

    def _end(self, outcome: str) -> None:
        self._record.outcome = outcome
        self._owner.open_streams -= 1


class RecordingTable(TableLikeAsync):
    """A ``TableLikeAsync`` that delegates to a real ``TableAsync`` and records every row stream.

    Args:
        table: The real table.
        fail_prefix: Streams whose keys start with this physical prefix yield at most
            ``fail_after_rows`` rows and then raise ``error``.
    """

    def __init__(
        self,
        table: TableAsync,
        *,
        fail_prefix: bytes | None = None,
        fail_after_rows: int = 3,
        error: BaseException | None = None,
    ) -> None:
        self._table = table
        self._fail_prefix = fail_prefix
        self._fail_after_rows = fail_after_rows
        self._error = error
        self.records: list[StreamRecord] = []
        self.open_streams = 0
        self.max_open_streams = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("default_"):  # the table's default timeouts
            return getattr(self._table, name)
        raise AttributeError(name)

    def _fails(self, query: ReadRowsQuery) -> bool:
        prefix = self._fail_prefix
        if prefix is None:
            return False
        starts = [r.start_key or b"" for r in query.row_ranges] + list(query.row_keys)
        return any(k.startswith(prefix) for k in starts)

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> RecordedStream:
        inject = None
        if self._fails(query):
            inject = self._error
            query = ReadRowsQuery(
                row_keys=list(query.row_keys),
                row_ranges=list(query.row_ranges),
                limit=min(query.limit or self._fail_after_rows, self._fail_after_rows),
                row_filter=query.filter,
            )
        inner = await self._table.read_rows_stream(query, **kwargs)
        record = StreamRecord(query)
        self.records.append(record)
        self.open_streams += 1
        self.max_open_streams = max(self.max_open_streams, self.open_streams)
        return RecordedStream(self, inner, record, inject)

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        return await self._table.read_row(row_key, **kwargs)

    async def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        return await self._table.row_exists(row_key, **kwargs)

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        return await self._table.sample_row_keys(**kwargs)

    def mutations_batcher(self, **kwargs: Any) -> Any:
        return self._table.mutations_batcher(**kwargs)

    async def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> None:
        await self._table.mutate_row(row_key, mutations, **kwargs)

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        await self._table.bulk_mutate_rows(mutation_entries, **kwargs)

    async def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        return await self._table.check_and_mutate_row(row_key, predicate, **kwargs)

    async def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        return await self._table.read_modify_write_row(row_key, rules, **kwargs)

    async def close(self) -> None:
        await self._table.close()

    def assert_clean(self) -> None:
        """Every stream was closed, and none was abandoned with its RPC still running."""
        assert self.records, "no stream was opened"
        abandoned = [r for r in self.records if r.outcome in ("abandoned", "open")]
        assert not abandoned, [(r.outcome, r.rows, r.query) for r in abandoned]
        assert all(r.closed for r in self.records), [r.outcome for r in self.records]
        assert self.open_streams == 0

    def outcomes(self) -> set[str]:
        """The distinct outcomes seen so far."""
        return {r.outcome for r in self.records}


BIG_KEYS = numbered_keys(4800)


@pytest.fixture(scope="module")
def big_table_id(emulator: Emulator) -> Iterator[str]:
    """A table of 4800 rows written through SCHEME16, once for the module.

    Its tests only read it (a write there is a failure they assert against), so they
    share it rather than write the same 4800 rows again, a second or so each.
    """
    table_id = f"big-{uuid.uuid4().hex[:12]}"
    admin_create_table(emulator.address, table_id, ["cf"])

    async def load() -> None:
        async with (
            BigtableDataClientAsync(project=PROJECT) as client,
            client.get_table(INSTANCE, table_id) as table,
        ):
            await fill(SaltedTableAsync(table, SCHEME16), BIG_KEYS)

    try:
        asyncio.run(load())
        yield table_id
    finally:
        admin_delete_table(emulator.address, table_id, missing_ok=True)


@pytest.fixture
async def big_table(
    data_client: BigtableDataClientAsync, big_table_id: str
) -> AsyncIterator[tuple[TableAsync, list[bytes]]]:
    """The module's table of 4800 rows written through SCHEME16 (on this test's client),
    and their logical keys."""
    async with data_client.get_table(INSTANCE, big_table_id) as table:
        # Connected before the test, as when each test wrote the rows itself: the tests
        # that bound how soon a read ends time the read, not the channel's first connect.
        await table.read_row(b"warm-up")
        yield table, list(BIG_KEYS)


async def test_recording_table_tells_abandoned_from_cancelled_streams(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """The instrument: the plain client's break abandons its RPC; a pending cancel does not."""
    table, _ = big_table
    proxy = RecordingTable(table)
    before = asyncio.all_tasks()
    stream = await proxy.read_rows_stream(ReadRowsQuery())
    async for _ in stream:
        break
    await stream.aclose()
    assert proxy.outcomes() == {"abandoned"}
    # The abandoned RPC streams on in the background (until the client closes).
    with pytest.raises(AssertionError):
        await assert_no_tasks_left(before)

    cancelled = RecordingTable(table)
    stream = await cancelled.read_rows_stream(ReadRowsQuery())
    with anyio.move_on_after(0.001):
        async for _ in stream:
            pass
    await stream.aclose()
    assert cancelled.outcomes() == {"cancelled"}
    cancelled.assert_clean()


# -- smoke: salted keys round-trip between the plain and the salted client -------


async def test_plain_writes_read_back_salted_and_salted_writes_are_salted_on_disk(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Rows written with scheme.salt_key are read by SaltedTableAsync, and vice versa."""
    scheme = SCHEME16
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, scheme)
        by_plain = [b"user1#2024", b"user2", b"a-b"]
        by_salted = [b"user3", b"\x00bin\xff", b"z#1"]
        for key in by_plain:
            await table.mutate_row(scheme.salt_key(key), SetCell("cf", b"q", key, 1000))
        await salted.bulk_mutate_rows([entry(k, value=k) for k in by_salted])

        rows = await salted.read_rows(ReadRowsQuery())
        logical = sorted(by_plain + by_salted)
        assert [r.row_key for r in rows] == logical
        assert [r.cells[0].value for r in rows] == logical
        assert_logical_cells(rows)
        for key in by_plain + by_salted:
            row = await salted.read_row(key)
            assert row is not None
            assert row.row_key == key
            assert row.cells[0].row_key == key

        physical = await data_keys(table)
        assert sorted(physical) == sorted(scheme.salt_key(k) for k in logical)
        for key in physical:
            bucket, logical_key = scheme.split_key(key)
            assert key == scheme.prefix(bucket) + logical_key
            assert key == scheme.salt_key(logical_key)
            assert key[:2].isdigit()
            assert key[2:3] == b"-"
        assert not set(physical) & set(logical), "a row was written unsalted"


# -- differential: a plain table and a salted table answer every query alike ----

_BINARY_TOKENS = [b"\x00", b"\xff", b"a", b"b", b"ab", b"-", b"#", b"\n", b"\x7f"]
_TEXT_TOKENS = [s.encode() for s in ("\x00", "a", "b", "ab", "-", "#", "\n", "é", "ÿ")]

# Regexes over the whole logical key (Bigtable matches row-key regexes in full).
_REGEXES = [
    b"a\\C*",
    b"^a\\C*",
    b"\\C*b",
    b"(?s).*#.*",
    b"[^a]\\C*",
    b"a|b\\C*",  # top-level alternation: the rewrite must group it under the prefix
    b"\\C*\\xff",
]


def _tokens_key(tokens: Sequence[bytes]) -> bytes:
    return b"".join(tokens)


@dataclass(frozen=True)
class Case:
    """One differential example: the logical rows and the keys the queries are built from."""

    rows: dict[bytes, list[tuple[str, bytes, int, bytes]]]
    bounds: tuple[bytes, bytes]
    missing: tuple[bytes, ...]
    prefixes: tuple[bytes, ...]
    picked: tuple[bytes, ...]
    budget: int


@st.composite
def cases(draw: st.DrawFn, tokens: Sequence[bytes], binary: bool) -> Case:
    token = st.sampled_from(tokens)
    if binary:
        token = st.one_of(token, st.binary(min_size=1, max_size=2))
    key_tokens = st.lists(token, min_size=1, max_size=5).map(tuple)
    base = draw(st.lists(key_tokens, min_size=1, max_size=20, unique_by=_tokens_key))
    # Keys that are prefixes of other keys (cut at token boundaries: stays UTF-8 for java).
    cuts = draw(st.lists(st.tuples(st.sampled_from(base), st.integers(1, 4)), max_size=6))
    all_tokens = {*base, *(t[:n] for t, n in cuts)}
    keys = sorted({_tokens_key(t) for t in all_tokens})
    cell = st.tuples(
        st.sampled_from(FAMILIES),
        st.sampled_from([b"q", b"r"]),
        st.integers(1, 4).map(lambda n: n * 1000),
        st.binary(max_size=3),
    )
    rows = {k: draw(st.lists(cell, min_size=1, max_size=3)) for k in keys}
    any_key = key_tokens.map(_tokens_key)
    bound = st.one_of(st.sampled_from(keys), any_key)
    lo, hi = sorted(draw(st.tuples(bound, bound)))
    missing = tuple(draw(st.lists(any_key, min_size=1, max_size=3)))
    prefixes = tuple(
        draw(
            st.lists(
                st.one_of(
                    st.sampled_from(keys),
                    st.tuples(st.sampled_from(keys), st.integers(1, 3)).map(
                        lambda kn: kn[0][: kn[1]]
                    ),
                    any_key,
                ),
                min_size=1,
                max_size=3,
            )
        )
    )
    picked = tuple(draw(st.lists(st.sampled_from(keys), max_size=8)))
    # Tiny budgets make even a few rows span several requests per bucket.
    budget = draw(st.sampled_from([1, 8, 20_000]))
    return Case(rows, (lo, hi), missing, prefixes, picked, budget)


def _range_shapes(lo: bytes, hi: bytes) -> list[RowRange]:
    """Every boundedness and inclusivity of a range between ``lo`` and ``hi``."""
    shapes = [RowRange()]
    for start_in in (True, False):
        shapes.append(RowRange(start_key=lo, start_is_inclusive=start_in))
        shapes.append(RowRange(end_key=hi, end_is_inclusive=start_in))
        for end_in in (True, False):
            shapes.append(RowRange(lo, hi, start_in, end_in))
            shapes.append(RowRange(lo, lo, start_in, end_in))  # a single key, or empty
    return shapes


def _queries(case: Case) -> list[tuple[str, ReadRowsQuery]]:
    keys = sorted(case.rows)
    lo, hi = case.bounds
    n = len(keys)
    point = [*case.picked, *case.missing]
    queries: list[tuple[str, ReadRowsQuery]] = [
        ("all", ReadRowsQuery()),
        ("points", ReadRowsQuery(row_keys=list(point))),
        ("missing points", ReadRowsQuery(row_keys=list(case.missing))),
        ("one point", ReadRowsQuery(row_keys=[keys[0]])),
        (
            "points+ranges",
            ReadRowsQuery(
                row_keys=list(point),
                row_ranges=[RowRange(lo, hi), RowRange(start_key=hi, start_is_inclusive=False)],
            ),
        ),
        ("overlapping ranges", ReadRowsQuery(row_ranges=[RowRange(end_key=hi), RowRange(lo)])),
    ]
    queries += [(f"range {r}", ReadRowsQuery(row_ranges=[r])) for r in _range_shapes(lo, hi)]
    for limit in sorted({1, 2, 3, n + 5}):
        queries.append((f"all limit {limit}", ReadRowsQuery(limit=limit)))
    queries.append(
        ("range limit 2", ReadRowsQuery(row_ranges=[RowRange(lo, hi, True, True)], limit=2))
    )
    queries.append(("points limit 1", ReadRowsQuery(row_keys=list(point), limit=1)))
    # CellsRowLimitFilter keeps a row's first cells, and the first family differs between
    # tables (see snapshot), so the exact comparison reads one family.
    one_cell = RowFilterChain([FamilyNameRegexFilter("cf"), CellsRowLimitFilter(1)])
    queries.append(("cells-row-limit", ReadRowsQuery(row_filter=one_cell)))
    queries.append(("cells-row-limit limit 2", ReadRowsQuery(row_filter=one_cell, limit=2)))
    queries.append(("family cg", ReadRowsQuery(row_filter=FamilyNameRegexFilter("cg"), limit=3)))
    return queries


def _regex_queries(case: Case) -> list[tuple[str, ReadRowsQuery]]:
    lo, hi = case.bounds
    queries: list[tuple[str, ReadRowsQuery]] = []
    for regex in _REGEXES:
        queries.append((f"regex {regex!r}", ReadRowsQuery(row_filter=RowKeyRegexFilter(regex))))
    chain = RowFilterChain([FamilyNameRegexFilter("cf"), RowKeyRegexFilter(b"\\C*b\\C*")])
    queries.append(("chain", ReadRowsQuery(row_filter=chain)))
    queries.append(("chain limit 1", ReadRowsQuery(row_filter=chain, limit=1)))
    union = RowFilterUnion([RowKeyRegexFilter(b"a\\C*"), RowKeyRegexFilter(b"\\C*#\\C*")])
    queries.append(("union range", ReadRowsQuery(row_ranges=[RowRange(lo, hi)], row_filter=union)))
    queries.append(
        ("regex limit 2", ReadRowsQuery(row_filter=RowKeyRegexFilter(b"[ab]\\C*"), limit=2))
    )
    return queries


def _regex_ok(scheme: SaltScheme) -> bool:
    """RowKeyRegexFilter is refused (QueryPlanError) for salt prefixes with bytes >= 0x80."""
    return all(b < 0x80 for prefix in scheme.prefixes for b in prefix)


async def _compare(
    plain: TableAsync, salted: SaltedTableAsync, label: str, query: ReadRowsQuery
) -> None:
    got = await salted.read_rows(query)
    expected = await plain.read_rows(query)
    assert_logical_cells(got)
    assert snapshot(got) == snapshot(expected), label


async def _compare_prefix(plain: TableAsync, salted: SaltedTableAsync, prefix: bytes) -> None:
    got = await collect(salted.read_prefix(prefix))
    expected = await plain.read_rows(
        ReadRowsQuery(row_ranges=[RowRange(prefix, prefix_end(prefix) or None)])
    )
    assert_logical_cells(got)
    assert snapshot(got) == snapshot(expected), f"prefix {prefix!r}"


async def _compare_unordered(
    plain: TableAsync, salted: SaltedTableAsync, label: str, query: ReadRowsQuery
) -> None:
    got = await salted.read_rows(query, ordered=False)
    expected = await plain.read_rows(query)
    assert_logical_cells(got)
    assert sorted(snapshot(got)) == snapshot(expected), f"unordered {label}"


async def _differential(
    scheme: SaltScheme, case: Case, plain_id: str, salted_id: str, flavour: str
) -> None:
    async with (
        BigtableDataClientAsync(project=PROJECT) as client,
        client.get_table(INSTANCE, plain_id) as plain,
        client.get_table(INSTANCE, salted_id) as table,
    ):
        budget = ReadBudget(rows=case.budget)
        if flavour == "sync":
            sync_client = BigtableDataClient(project=PROJECT)
            sync_table = sync_client.get_table(INSTANCE, salted_id)
            salted: Any = AsyncView(SaltedTable(sync_table, scheme, budget=budget))
        else:
            salted = SaltedTableAsync(table, scheme, budget=budget)
        try:
            await _compare_everything(plain, salted, scheme, case)
        finally:
            if flavour == "sync":
                sync_client.close()


async def _compare_everything(
    plain: TableAsync, salted: SaltedTableAsync, scheme: SaltScheme, case: Case
) -> None:
    entries = [
        RowMutationEntry(key, [SetCell(f, q, v, ts) for f, q, ts, v in cells])
        for key, cells in case.rows.items()
    ]
    await plain.bulk_mutate_rows(entries)
    await salted.bulk_mutate_rows(entries)

    for label, query in _queries(case):
        await _compare(plain, salted, label, query)
    for prefix in case.prefixes:
        await _compare_prefix(plain, salted, prefix)
    await _compare_unordered(plain, salted, "all", ReadRowsQuery())
    await _compare_unordered(
        plain, salted, "points", ReadRowsQuery(row_keys=[*case.picked, *case.missing])
    )
    await _compare_unordered(
        plain, salted, "range", ReadRowsQuery(row_ranges=[RowRange(*case.bounds)])
    )
    # Across families the first cell is the table's choice: compare keys and counts only.
    query = ReadRowsQuery(row_filter=CellsRowLimitFilter(1), limit=len(case.rows) - 1 or 1)
    got = await salted.read_rows(query)
    expected = await plain.read_rows(query)
    assert [(r.row_key, len(r.cells)) for r in got] == [(r.row_key, len(r.cells)) for r in expected]
    for label, query in _regex_queries(case):
        if _regex_ok(scheme):
            await _compare(plain, salted, label, query)
        else:
            with pytest.raises(QueryPlanError):
                await salted.read_rows(query)


DIFFERENTIAL_SCHEMES = [
    pytest.param(SaltScheme(16), _BINARY_TOKENS, True, id="crc32-16"),
    pytest.param(SaltScheme(4, hash="java"), _TEXT_TOKENS, False, id="java-4"),
    pytest.param(SaltScheme(8, hash="phoenix"), _BINARY_TOKENS, True, id="phoenix-8"),
    pytest.param(SaltScheme(16, key_part=fields(1, b"#")), _BINARY_TOKENS, True, id="fields1-16"),
]


@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize(("scheme", "tokens", "binary"), DIFFERENTIAL_SCHEMES)
@settings(
    max_examples=10,
    deadline=None,
    database=None,
    # An example costs two tables and ~80 reads (~0.5 s): shrinking would outlast the
    # test timeout. A failure names the query, and Hypothesis prints the drawn case.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_salted_table_answers_every_query_like_a_plain_table(
    emulator: Emulator,
    scheme: SaltScheme,
    tokens: Sequence[bytes],
    binary: bool,
    flavour: str,
    data: st.DataObject,
) -> None:
    """Keys, ranges, prefixes, limits and filters read alike from salted and plain tables.

    Both flavours: ``SaltedTableAsync``, and ``SaltedTable`` over the sync client.
    """
    case = data.draw(cases(tokens, binary), label="case")
    assert os.environ.get(EMULATOR_HOST_ENV) == emulator.address
    suffix = uuid.uuid4().hex[:12]
    plain_id, salted_id = f"plain-{suffix}", f"salted-{suffix}"
    for table_id in (plain_id, salted_id):
        admin_create_table(emulator.address, table_id, FAMILIES)
    try:
        asyncio.run(_differential(scheme, case, plain_id, salted_id, flavour))
    finally:
        for table_id in (plain_id, salted_id):
            admin_delete_table(emulator.address, table_id, missing_ok=True)


async def test_regex_filters_on_binary_phoenix_prefixes_are_refused(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """A row-key regex over phoenix salt bytes >= 0x80 is refused with QueryPlanError, no RPC."""
    scheme = SaltScheme(200, hash="phoenix")
    keys = numbered_keys(300)
    low = next(k for k in keys if scheme.bucket_of(k) < 0x80)
    high = next(k for k in keys if scheme.bucket_of(k) >= 0x80)
    async with data_client.get_table(INSTANCE, make_table()) as table:
        proxy = RecordingTable(table)
        salted = SaltedTableAsync(proxy, scheme)
        await fill(salted, keys)
        proxy.records.clear()  # the first write's sample of the rows, before it stores a record
        regex = RowKeyRegexFilter(b"key-\\C*")
        with pytest.raises(QueryPlanError):
            await salted.read_rows(ReadRowsQuery(row_filter=regex))
        with pytest.raises(QueryPlanError):
            await salted.read_rows_stream(ReadRowsQuery(row_keys=[high], row_filter=regex))
        assert proxy.records == []
        # Buckets below 0x80 are fine.
        rows = await salted.read_rows(ReadRowsQuery(row_keys=[low, high[:-1]], row_filter=regex))
        assert [r.row_key for r in rows] == [low]
        # ... and without a regex every bucket reads.
        assert [r.row_key for r in await salted.read_rows(ReadRowsQuery())] == keys


async def test_unordered_reads_return_the_same_rows(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """ordered=False returns the same set of rows as ordered reads, and honours limits."""
    table, keys = big_table
    salted = SaltedTableAsync(table, SCHEME16, budget=ReadBudget(rows=800))
    ordered = await salted.read_rows(ReadRowsQuery())
    unordered = await salted.read_rows(ReadRowsQuery(), ordered=False)
    assert [r.row_key for r in ordered] == keys
    assert sorted(snapshot(unordered)) == snapshot(ordered)
    assert_logical_cells(unordered)
    stream = await salted.read_rows_stream(
        ReadRowsQuery(row_ranges=[RowRange(keys[100], keys[900])]), ordered=False
    )
    assert sorted(r.row_key for r in await collect(stream)) == keys[100:900]
    limited = await salted.read_rows(ReadRowsQuery(limit=333), ordered=False)
    assert len({r.row_key for r in limited}) == 333
    assert {r.row_key for r in limited} <= set(keys)


# -- early exit and cancellation close every sub-scan ---------------------------


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_break_after_first_row_returns_promptly_and_leaves_nothing_running(
    big_table: tuple[TableAsync, list[bytes]], ordered: bool
) -> None:
    """Breaking out of read_rows_stream and aclose() cancel every sub-scan at once."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    started = time.monotonic()
    with anyio.fail_after(5):
        stream = await salted.read_rows_stream(ReadRowsQuery(), ordered=ordered)
        first = None
        async for row in stream:
            first = row
            break
        await stream.aclose()
    assert time.monotonic() - started < 2
    assert first is not None
    if ordered:
        assert first.row_key == keys[0]
    assert first.row_key in keys
    await assert_no_tasks_left(before)
    proxy.assert_clean()
    assert salted.limiter.borrowed_tokens == 0


async def test_dropped_stream_is_closed_by_the_finaliser(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """A read_prefix stream left after one row and garbage-collected still cancels its sub-scans."""
    table, _ = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    stream = salted.read_prefix(b"key-")
    async for _ in stream:
        break
    del stream
    gc.collect()  # asyncio's async-generator finaliser schedules aclose() in a new task
    for _ in range(500):  # the finaliser's task runs on its own schedule
        # (Its aclose() returns once the merge's supervisor has ended, a turn or
        # two of the loop after the last stream closed.)
        closed = not proxy.open_streams and all(r.closed for r in proxy.records)
        if closed and not saltedtable_tasks():
            break
        await asyncio.sleep(0.01)
    proxy.assert_clean()
    await assert_no_tasks_left(before)


async def test_stream_closed_before_its_first_row_leaves_nothing_unclosed(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """A stream closed (as aclosing() does) before its first row leaves no resource unclosed."""
    table, _ = big_table
    salted = SaltedTableAsync(table, SCHEME16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with aclosing(await salted.read_rows_stream(ReadRowsQuery())):
            pass  # e.g. the caller decided it needs no rows after all
        async with aclosing(salted.read_prefix(b"key-")):
            pass
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, f"{len(leaks)} unclosed: {leaks[:2]}"


async def test_limit_satisfied_mid_page_closes_every_stream(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """A limit reached in the middle of pages reads the first rows and abandons no stream."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    with anyio.fail_after(10):
        rows = await salted.read_rows(ReadRowsQuery(limit=150))
        streamed = await collect(
            await salted.read_rows_stream(ReadRowsQuery(row_ranges=[RowRange(keys[7])], limit=77))
        )
    assert [r.row_key for r in rows] == keys[:150]
    assert [r.row_key for r in streamed] == keys[7:84]
    await assert_no_tasks_left(before)
    proxy.assert_clean()


async def test_cancelled_caller_cancels_every_stream(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """Cancelling the caller mid-iteration (move_on_after) cancels the sub-scans, none abandoned."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    seen = 0
    with anyio.fail_after(10):
        stream = await salted.read_rows_stream(ReadRowsQuery())
        with anyio.move_on_after(30) as scope:
            async for _ in stream:
                seen += 1
                if seen == 700:
                    scope.cancel()
        # The cancellation reached the stream itself: it cleaned up without an aclose().
        assert scope.cancelled_caught
        assert 700 <= seen < len(keys)
        proxy.assert_clean()
        await stream.aclose()
    await assert_no_tasks_left(before)


async def test_deadline_cancelling_caller_leaves_no_stream_open(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """A move_on_after deadline that fires while pages are in flight abandons no stream."""
    table, keys = big_table
    before = asyncio.all_tasks()
    cancelled_in_flight = False
    for timeout in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1):
        for collect_all in (False, True):
            proxy = RecordingTable(table)
            salted = SaltedTableAsync(proxy, SCHEME16, budget=ReadBudget(rows=3200))
            with anyio.fail_after(10):
                if collect_all:
                    with anyio.move_on_after(timeout):
                        assert len(await salted.read_rows(ReadRowsQuery())) == len(keys)
                else:
                    stream = await salted.read_rows_stream(ReadRowsQuery())
                    with anyio.move_on_after(timeout):
                        async for _ in stream:
                            pass
                    await stream.aclose()
            await assert_no_tasks_left(before)
            if proxy.records:
                proxy.assert_clean()
            assert salted.limiter.borrowed_tokens == 0
            cancelled_in_flight |= "cancelled" in proxy.outcomes()
    assert cancelled_in_flight, "no deadline landed while a stream was in flight"


# -- concurrency bound ----------------------------------------------------------


async def test_scans_respect_max_concurrent_subscans_below_the_bucket_count(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """Five ordered full scans with 16 buckets and 2 slots finish; never more than 2 streams."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(
        proxy, SCHEME16, max_concurrent_subscans=2, budget=ReadBudget(rows=640)
    )
    results: dict[int, list[bytes]] = {}

    async def scan(i: int) -> None:
        stream = await salted.read_rows_stream(ReadRowsQuery())
        results[i] = [r.row_key for r in await collect(stream)]

    before = asyncio.all_tasks()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(scan, i)
    assert results == {i: keys for i in range(5)}
    assert proxy.max_open_streams <= 2
    assert len(proxy.records) > 5 * 16  # several pages per bucket, so the slots were shared
    assert proxy.outcomes() == {"exhausted"}
    proxy.assert_clean()
    await assert_no_tasks_left(before)


async def data_keys(table: TableLikeAsync) -> list[bytes]:
    """The physical keys of a raw table but the layout record (which the guard stored)."""
    keys = [r.row_key async for r in await table.read_rows_stream(ReadRowsQuery())]
    assert SCHEME_ROW_KEY in keys
    return [k for k in keys if k != SCHEME_ROW_KEY]


async def test_first_operations_at_once_on_a_wrongly_opened_table_are_all_refused(
    data_client: BigtableDataClientAsync, make_table: Callable[[], str]
) -> None:
    """Concurrent first reads, writes and a sharded read of a wrong scheme all raise."""
    table_id = make_table()
    raw = data_client.get_table(INSTANCE, table_id)
    await SaltedTableAsync(raw, SaltScheme(8)).bulk_mutate_rows(
        [RowMutationEntry(b"k%03d" % i, SetCell("cf", b"q", b"v")) for i in range(50)]
    )
    before = [r.row_key async for r in await raw.read_rows_stream(ReadRowsQuery())]
    wrong = SaltedTableAsync(raw, SaltScheme(16))
    calls = [wrong.read_row(b"k%03d" % i) for i in range(4)]
    calls += [wrong.mutate_row(b"new%d" % i, SetCell("cf", b"q", b"v")) for i in range(4)]
    calls += [wrong.read_rows_sharded([ReadRowsQuery(limit=2), ReadRowsQuery(limit=3)])]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["SchemeMismatchError"] * len(calls)
    assert [r.row_key async for r in await raw.read_rows_stream(ReadRowsQuery())] == before


# -- a failing bucket -------------------------------------------------------------


def subscan_of(error: BaseException) -> SubScan:
    """Which sub-scan a read error came from (saltedtable tags the client's error)."""
    subscan = getattr(error, "saltedtable_subscan", None)
    assert isinstance(subscan, SubScan), f"{error!r} names no sub-scan"
    assert any("saltedtable: sub-scan of" in note for note in error.__notes__)
    return subscan


@pytest.mark.parametrize("error_type", [ServiceUnavailable, PermissionDenied])
async def test_failing_bucket_raises_the_bigtable_error_naming_it(
    data_client: BigtableDataClientAsync,
    make_table: MakeTable,
    error_type: type[GoogleAPICallError],
) -> None:
    """A sub-scan that fails after a few rows fails the read with its own error, noted."""
    keys = numbered_keys(800)
    bucket = SCHEME16.bucket_of(keys[42])
    error = error_type("injected failure")
    async with data_client.get_table(INSTANCE, make_table()) as table:
        await fill(SaltedTableAsync(table, SCHEME16), keys)
        for ordered in (True, False):
            proxy = RecordingTable(table, fail_prefix=SCHEME16.prefix(bucket), error=error)
            salted = SaltedTableAsync(proxy, SCHEME16)
            before = asyncio.all_tasks()
            with anyio.fail_after(10), pytest.raises(error_type) as info:
                await collect(await salted.read_rows_stream(ReadRowsQuery(), ordered=ordered))
            assert info.value is error
            assert subscan_of(info.value).bucket == bucket
            assert [r.outcome for r in proxy.records].count("failed") == 1
            proxy.assert_clean()
            await assert_no_tasks_left(before)

            error.__notes__ = []  # the same instance is raised again
            del error.saltedtable_subscan  # type: ignore[attr-defined]
            with anyio.fail_after(10), pytest.raises(error_type) as info:
                await salted.read_rows(ReadRowsQuery(row_keys=[keys[42], keys[43]]))
            assert info.value is error
            assert subscan_of(info.value).bucket == bucket
            await assert_no_tasks_left(before)


# -- mutations and the other TableAsync methods ---------------------------------


async def test_mutations_batcher_writes_logical_keys(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Entries appended to the salted batcher are stored salted and read back logically."""
    keys = numbered_keys(250, b"batch#")
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        async with salted.mutations_batcher(flush_limit_mutation_count=40) as batcher:
            for key in keys:
                await batcher.append(entry(key, value=key))
        assert batcher.closed
        rows = await salted.read_rows(ReadRowsQuery())
        assert [r.row_key for r in rows] == keys
        assert [r.cells[0].value for r in rows] == keys
        physical = sorted(await data_keys(table))
        assert physical == sorted(SCHEME16.salt_key(k) for k in keys)


async def test_check_and_mutate_row_matches_regex_against_the_logical_key(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """A RowKeyRegexFilter predicate sees the logical key: true/false mutations apply correctly."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        await salted.mutate_row(b"user-7", SetCell("cf", b"q", b"v", 1000))
        matched = await salted.check_and_mutate_row(
            b"user-7",
            RowKeyRegexFilter(b"user-7"),
            true_case_mutations=SetCell("cf", b"hit", b"yes", 2000),
            false_case_mutations=SetCell("cf", b"miss", b"yes", 2000),
        )
        assert matched is True
        not_matched = await salted.check_and_mutate_row(
            b"user-7",
            RowKeyRegexFilter(b"user-8"),
            true_case_mutations=SetCell("cf", b"hit2", b"yes", 2000),
            false_case_mutations=SetCell("cf", b"miss2", b"yes", 2000),
        )
        assert not_matched is False
        row = await salted.read_row(b"user-7")
        assert row is not None
        assert sorted(c.qualifier for c in row.cells) == [b"hit", b"miss2", b"q"]
        assert_logical_cells([row])
        # read_row's filter sees the logical key as well.
        assert await salted.read_row(b"user-7", row_filter=RowKeyRegexFilter(b"user-\\d")) == row
        assert await salted.read_row(b"user-7", row_filter=RowKeyRegexFilter(b"\\d.*")) is None


class CountingFilter(FamilyNameRegexFilter):
    """A family filter that counts how often its protobuf is built."""

    built = 0

    def _to_pb(self) -> Any:
        CountingFilter.built += 1
        return super()._to_pb()


async def test_check_and_mutate_row_refuses_a_value_that_is_no_filter_with_nothing_sent(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Before the guard settles and after: the client's AttributeError, no row, no record."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        no_filter: Any = "cf"
        with pytest.raises(AttributeError):  # the guard would store a record: checked first
            await salted.check_and_mutate_row(
                b"k", no_filter, true_case_mutations=SetCell("cf", b"q", b"v", 1000)
            )
        assert await table.read_row(SCHEME_ROW_KEY) is None
        await salted.mutate_row(b"other", SetCell("cf", b"q", b"v", 1000))  # settles the guard
        with pytest.raises(AttributeError):  # the client's own build fails, nothing sent
            await salted.check_and_mutate_row(
                b"k", no_filter, true_case_mutations=SetCell("cf", b"q", b"v", 1000)
            )
        assert await salted.read_row(b"k") is None


async def test_check_and_mutate_row_builds_a_settled_table_s_filter_once(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Once the guard is settled the predicate's protobuf is built by the client alone."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        await salted.mutate_row(b"k", SetCell("cf", b"q", b"v", 1000))
        CountingFilter.built = 0
        matched = await salted.check_and_mutate_row(
            b"k", CountingFilter(b"cf"), true_case_mutations=SetCell("cf", b"t", b"y", 2000)
        )
        assert (matched, CountingFilter.built) == (True, 1)
        row = await salted.read_row(b"k")
        assert row is not None
        assert sorted(c.qualifier for c in row.cells) == [b"q", b"t"]


async def test_read_modify_write_row_returns_logical_row(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """IncrementRule through the salted table returns a row (and cells) under the logical key."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        await salted.read_modify_write_row(b"counter#1", IncrementRule("cf", b"n", 2))
        row = await salted.read_modify_write_row(b"counter#1", IncrementRule("cf", b"n", 5))
        assert row.row_key == b"counter#1"
        assert [c.row_key for c in row.cells] == [b"counter#1"]
        assert int(row.cells[0]) == 7
        physical = await data_keys(table)
        assert physical == [SCHEME16.salt_key(b"counter#1")]


async def test_row_exists_uses_logical_keys(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """row_exists is True for a written logical key and False for others."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        await salted.mutate_row("here", SetCell("cf", b"q", b"v", 1000))
        assert await salted.row_exists(b"here") is True
        assert await salted.row_exists("here") is True
        assert await salted.row_exists(b"there") is False
        assert await salted.read_row(b"there") is None


async def test_read_rows_sharded_returns_rows_in_query_order(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """read_rows_sharded returns the first logical query's rows, then the second's."""
    table, keys = big_table
    salted = SaltedTableAsync(table, SCHEME16)
    late = ReadRowsQuery(row_ranges=[RowRange(keys[3000], keys[3100])])
    early = ReadRowsQuery(row_keys=[keys[5], keys[1], keys[9]])
    rows = await salted.read_rows_sharded([late, early])
    assert [r.row_key for r in rows] == [*keys[3000:3100], keys[1], keys[5], keys[9]]
    assert_logical_cells(rows)


async def test_read_rows_sharded_reports_the_failed_query_and_keeps_the_others(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """A failing bucket fails only its shard: the group names the query and keeps other rows."""
    table, keys = big_table
    bucket = SCHEME16.bucket_of(keys[10])
    proxy = RecordingTable(
        table, fail_prefix=SCHEME16.prefix(bucket), error=PermissionDenied("injected")
    )
    salted = SaltedTableAsync(proxy, SCHEME16)
    ok = ReadRowsQuery(row_keys=[k for k in keys[:40] if SCHEME16.bucket_of(k) != bucket])
    bad = ReadRowsQuery(row_ranges=[RowRange(keys[0], keys[100])])
    with pytest.raises(ShardedReadRowsExceptionGroup) as info:
        await salted.read_rows_sharded([ok, bad])
    (failed,) = info.value.exceptions
    assert isinstance(failed, FailedQueryShardError)
    assert failed.index == 1
    assert isinstance(failed.__cause__, PermissionDenied)
    assert subscan_of(failed.__cause__).bucket == bucket
    assert [r.row_key for r in info.value.successful_rows] == list(ok.row_keys)
    proxy.assert_clean()


async def test_failed_mutation_entries_name_logical_keys(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Entries Bigtable rejects come back with their logical key, from bulk writes and batchers."""
    async with data_client.get_table(INSTANCE, make_table()) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        with pytest.raises(MutationsExceptionGroup) as info:
            await salted.bulk_mutate_rows([entry(b"fine"), entry(b"bad#1", family="nope")])
        assert [(e.index, e.entry.row_key) for e in info.value.exceptions] == [(1, b"bad#1")]
        with pytest.raises(MutationsExceptionGroup) as info:
            async with salted.mutations_batcher() as batcher:
                await batcher.append(entry(b"bad#2", family="nope"))
        assert [e.entry.row_key for e in info.value.exceptions] == [b"bad#2"]
        assert await salted.row_exists(b"fine")


async def test_sample_row_keys_returns_logical_keys_in_order(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """sample_row_keys: increasing logical keys and offsets, ending (b"", total); they shard."""
    table, keys = big_table
    salted = SaltedTableAsync(table, SCHEME16)
    physical = await table.sample_row_keys()
    samples = await salted.sample_row_keys()
    assert samples, "no samples"
    assert samples[-1] == (b"", physical[-1][1])
    inner = samples[:-1]
    sample_keys = [k for k, _ in inner]
    assert sample_keys == sorted(set(sample_keys))
    assert set(sample_keys) <= set(keys)
    offsets = [o for _, o in samples]
    assert offsets == sorted(offsets)
    # They shard a logical query as the client's own samples shard a plain one.
    rows = await salted.read_rows_sharded(ReadRowsQuery().shard(samples))
    assert [r.row_key for r in rows] == keys


async def test_many_point_keys_are_chunked_and_merged_in_order(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """2500 point keys (over 1000 per bucket, so sent in chunks) all come back in logical order."""
    scheme = SaltScheme(2)
    keys = numbered_keys(3000)
    wanted = random.Random(7).sample(keys, 2400) + [k + b"-missing" for k in keys[:100]]
    random.Random(8).shuffle(wanted)
    async with data_client.get_table(INSTANCE, make_table()) as table:
        await fill(SaltedTableAsync(table, scheme), keys)
        proxy = RecordingTable(table)
        salted = SaltedTableAsync(proxy, scheme)
        rows = await salted.read_rows(ReadRowsQuery(row_keys=wanted))
        assert [r.row_key for r in rows] == sorted(k for k in wanted if k in set(keys))
        assert len(rows) == 2400
        assert_logical_cells(rows)
        sizes = [len(r.query.row_keys) for r in proxy.records]
        assert max(sizes) <= 1000
        assert sum(sizes) >= len(wanted)
        proxy.assert_clean()


# -- small reads in one request --------------------------------------------------


class FailingMultiRange(RecordingTable):
    """Fails every request that names more than one range, after a few rows."""

    def _fails(self, query: ReadRowsQuery) -> bool:
        return len(query.row_ranges) > 1


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_a_small_bounded_read_is_one_request_over_every_bucket(
    big_table: tuple[TableAsync, list[bytes]], ordered: bool
) -> None:
    """A 100-row prefix read, a limited range and a key list at N=16: one ReadRows request
    each, naming all 16 buckets' ranges (or keys), with the plain table's rows."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    stats = CallStats()
    with anyio.fail_after(10):
        rows = await collect(salted.read_prefix(b"key-001", ordered=ordered, stats=stats))
    got = [r.row_key for r in rows]
    assert (got if ordered else sorted(got)) == keys[100:200]
    assert len(proxy.records) == 1
    assert len(proxy.records[0].query.row_ranges) == 16
    assert stats.requests == 1
    one = stats.one_request
    assert one is not None
    assert one == OneRequestOutcome("answered", 1000, 100, one.bytes)
    # The outcome counts the rows as the budget does (their objects too), the buckets'
    # statistics their keys and values.
    assert one.bytes == sum(
        row_cost(len(r.row_key) + sum(len(c.value) for c in r.cells), len(r.cells)) for r in rows
    )
    assert sum(b.bytes for b in stats.buckets.values()) > 0
    assert stats.settings is not None
    assert (stats.settings.subqueries, stats.settings.one_request_rows) == (16, 1000)
    assert stats.settings.ordered is ordered
    assert stats.rows == 100

    proxy.records.clear()
    # An ordered limit tries one request of up to 2 x 25 + 2 x 16 = 82 rows: 50 fit.
    limited = await salted.read_rows(
        ReadRowsQuery(row_ranges=RowRange(keys[10], keys[60]), limit=25), stats=stats
    )
    assert [r.row_key for r in limited] == keys[10:35]
    assert len(proxy.records) == 1
    assert (stats.requests, stats.rounds) == (1, 1)

    proxy.records.clear()
    wanted = [keys[i] for i in (4000, 7, 2500, 99)]
    some = await salted.read_rows(ReadRowsQuery(row_keys=wanted), stats=stats)
    assert [r.row_key for r in some] == sorted(wanted)
    assert [len(r.query.row_keys) for r in proxy.records] == [4]
    assert all(c.row_key == r.row_key for r in some for c in r.cells)
    proxy.assert_clean()
    await assert_no_tasks_left(before)


async def test_a_bounded_read_bigger_than_one_request_goes_on_bucket_by_bucket(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """The one request comes back full: the read goes on per bucket with exact results,
    and the next bounded read skips the one request (the table tries less often)."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16, budget=ReadBudget(one_request_rows=50))
    before = asyncio.all_tasks()
    stats = CallStats()
    query = ReadRowsQuery(row_ranges=RowRange(keys[1000], keys[1400]))
    rows = await salted.read_rows(query, stats=stats)
    assert [r.row_key for r in rows] == keys[1000:1400]
    first = proxy.records[0].query
    assert (len(first.row_ranges), first.limit) == (16, 50)
    assert all(len(r.query.row_ranges) == 1 for r in proxy.records[1:])
    one = stats.one_request
    assert one is not None
    assert one == OneRequestOutcome("full", 50, 50, one.bytes, went_on=True)
    assert stats.requests == len(proxy.records)

    proxy.records.clear()
    again = await salted.read_rows(query, stats=stats)
    assert [r.row_key for r in again] == keys[1000:1400]
    assert all(len(r.query.row_ranges) == 1 for r in proxy.records)
    assert stats.one_request == OneRequestOutcome("skipped", 50)
    assert not stats.one_request.tried
    assert "skipped this time" in stats.strategy  # the words say what the fields say
    assert stats.requests == len(proxy.records)  # the skipped one request is not counted
    proxy.assert_clean()
    await assert_no_tasks_left(before)


async def test_a_failed_one_request_falls_back_to_the_buckets(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """An error in the one request (here after 3 rows) is not the read's: the buckets'
    own requests answer it; the statistics say what happened."""
    table, keys = big_table
    proxy = FailingMultiRange(table, error=ServiceUnavailable("multi-range refused"))
    salted = SaltedTableAsync(proxy, SCHEME16)
    before = asyncio.all_tasks()
    stats = CallStats()
    rows = await collect(salted.read_prefix(b"key-002", stats=stats))
    assert [r.row_key for r in rows] == keys[200:300]
    assert [r.outcome for r in proxy.records].count("failed") == 1
    one = stats.one_request
    assert one is not None
    assert (one.result, one.error, one.rows, one.went_on) == (
        "failed",
        "ServiceUnavailable",
        3,
        True,
    )
    proxy.assert_clean()
    await assert_no_tasks_left(before)


class StallingMultiRange(RecordingTable):
    """Multi-range requests (a small read's one request) hand out 2 rows, then wait."""

    def __init__(self, table: TableAsync) -> None:
        super().__init__(table)
        self.stalled = anyio.Event()

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> RecordedStream:
        stream = await super().read_rows_stream(query, **kwargs)
        if len(query.row_ranges) <= 1:
            return stream
        table = self

        class Stalling(RecordedStream):
            async def __anext__(self) -> Row:
                if self._record.rows >= 2:
                    table.stalled.set()
                    await anyio.sleep_forever()
                return await super().__anext__()

        stream.__class__ = Stalling
        return stream


async def test_a_caller_that_leaves_during_the_one_request_leaves_nothing_running(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """Cancelled while the one request waits for its next row: the request is cancelled,
    not abandoned, no task is left, and the statistics count it."""
    table, _ = big_table
    proxy = StallingMultiRange(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    await salted.read_row(b"warm-up")  # the layout check, before the tasks are counted
    before = asyncio.all_tasks()
    stats = CallStats()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                await salted.read_rows(
                    ReadRowsQuery(row_ranges=RowRange(b"key-010", b"key-011")), stats=stats
                )

            tg.start_soon(read)
            await proxy.stalled.wait()
            tg.cancel_scope.cancel()
    (record,) = proxy.records
    assert len(record.query.row_ranges) == 16
    assert (record.outcome, record.rows) == ("cancelled", 2)
    assert stats.requests == 1
    one = stats.one_request
    assert one is not None
    assert (one.result, one.error, one.rows, one.went_on) == ("failed", "cancelled", 2, False)
    assert stats.ended_early
    proxy.assert_clean()
    await assert_no_tasks_left(before)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_one_request_reads_with_filters_keys_and_limits_match_the_plain_table(
    data_client: BigtableDataClientAsync, make_table: MakeTable, ordered: bool
) -> None:
    """Filters that drop whole rows (the row limit counts rows after the filter), keys
    with ranges, and limits, at one_request_rows just above and below what they return."""
    keys = numbered_keys(400)
    async with data_client.get_table(INSTANCE, make_table(families=("cf", "other"))) as table:
        salted = SaltedTableAsync(table, SCHEME16)
        await salted.bulk_mutate_rows(
            [entry(k, family="cf" if i % 4 else "other", value=k) for i, k in enumerate(keys)]
        )
        only_cf = FamilyNameRegexFilter("cf")
        queries = [
            (ReadRowsQuery(row_ranges=RowRange(keys[0], keys[200]), row_filter=only_cf), 150),
            (
                ReadRowsQuery(
                    row_keys=[keys[399], keys[5], keys[5], b"absent"],
                    row_ranges=[RowRange(keys[10], keys[20]), RowRange(keys[15], keys[30])],
                ),
                22,
            ),
            (ReadRowsQuery(row_ranges=RowRange(keys[100], keys[300]), limit=7), 7),
        ]
        for query, count in queries:
            want = [r.row_key for r in await salted.read_rows(query, ordered=True)]
            assert len(want) == count
            for rows in (count + 1, count, count - 1):
                one = SaltedTableAsync(table, SCHEME16, budget=ReadBudget(one_request_rows=rows))
                stats = CallStats()
                got = [r.row_key for r in await one.read_rows(query, ordered=ordered, stats=stats)]
                if ordered or query.limit is None:
                    assert (got if ordered else sorted(got)) == (want if ordered else sorted(want))
                else:  # any `limit` rows of the range answer an unordered read
                    assert len(got) == len(set(got)) == query.limit
                    assert all(keys[100] <= k < keys[300] for k in got)
                # Fewer rows back than asked: the whole read. As many: it went on (an
                # unordered limit is answered by any `limit` rows).
                limit = query.limit
                if limit is None:
                    size, total = rows, count
                else:  # the range keys[100:300] holds 200 rows
                    size, total = (min(rows, 2 * limit + 32) if ordered else min(rows, limit)), 200
                fits = total < size or (not ordered and limit is not None and size >= limit)
                assert stats.one_request is not None
                assert stats.one_request.result == ("answered" if fits else "full"), (
                    rows,
                    count,
                    stats.one_request,
                )
                assert stats.one_request.asked == size


async def test_an_unordered_limited_read_is_always_one_request(
    big_table: tuple[TableAsync, list[bytes]],
) -> None:
    """Any ``limit`` rows answer an unordered read: one request of ``limit`` rows does,
    however big the range."""
    table, keys = big_table
    proxy = RecordingTable(table)
    salted = SaltedTableAsync(proxy, SCHEME16)
    stats = CallStats()
    query = ReadRowsQuery(row_ranges=RowRange(keys[0], keys[4000]), limit=30)
    rows = await salted.read_rows(query, ordered=False, stats=stats)
    assert len(rows) == len({r.row_key for r in rows}) == 30
    assert all(keys[0] <= r.row_key < keys[4000] for r in rows)
    assert [(len(r.query.row_ranges), r.query.limit) for r in proxy.records] == [(16, 30)]
    one = stats.one_request
    assert one is not None
    assert (one.result, one.asked, one.rows) == ("answered", 30, 30)

    # Ordered limited reads that miss make the table skip their one request for a while;
    # unordered limited reads neither wait for that nor reset it.
    await salted.read_rows(ReadRowsQuery(row_ranges=RowRange(keys[0], keys[4000]), limit=10))
    proxy.records.clear()
    await salted.read_rows(query, ordered=False, stats=stats)
    assert [(len(r.query.row_ranges), r.query.limit) for r in proxy.records] == [(16, 30)]
    proxy.records.clear()
    await salted.read_rows(
        ReadRowsQuery(row_ranges=RowRange(keys[0], keys[4000]), limit=10), stats=stats
    )
    assert stats.one_request is not None
    assert stats.one_request.result == "skipped"
    assert all(len(r.query.row_ranges) == 1 for r in proxy.records)
    proxy.assert_clean()
