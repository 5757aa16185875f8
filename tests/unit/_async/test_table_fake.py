"""SaltedTableAsync over FakeTable: salted reads answer exactly like a plain table, and clean up."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from google.api_core.exceptions import ServiceUnavailable
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    FailedQueryShardError,
    MutationsExceptionGroup,
    ShardedReadRowsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule, IncrementRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    ConditionalRowFilter,
    FamilyNameRegexFilter,
    PassAllFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    SubScan,
    before_last,
    fields,
)
from saltedtable._engine.merge_asyncio import close_at_once
from tests.fakes import ABANDONED, FakeTable

# -- the differential harness --------------------------------------------------

RowData = dict[bytes, list[tuple[str, bytes, int, bytes]]]
Shape = tuple[bytes, list[tuple[bytes, str, bytes, int, bytes, tuple[str, ...]]]]

SCHEMES = {
    "crc32-1": SaltScheme(1),
    "crc32-3": SaltScheme(3),
    "crc32-16": SaltScheme(16),
    "farmhash-7": SaltScheme(7, hash="farmhash"),
    "fields-1": SaltScheme(8, key_part=fields(1, b"-")),
    "before-last": SaltScheme(8, key_part=before_last(b"-")),
    "phoenix-16": SaltScheme(16, hash="phoenix"),
    "marker": SaltScheme(8, marker=b"~"),
    "underscore": SaltScheme(5, separator=b"_"),
}
TEXT_SCHEMES = {"java-8": SaltScheme(8, hash="java")}  # Java strings: UTF-8 keys only


def shape(rows: Sequence[Row]) -> list[Shape]:
    """Everything a caller can see of rows: keys, and each cell with its own row key."""
    return [
        (
            r.row_key,
            [
                (c.row_key, c.family, c.qualifier, c.timestamp_micros, c.value, tuple(c.labels))
                for c in r.cells
            ],
        )
        for r in rows
    ]


def entries_for(data: RowData) -> list[RowMutationEntry]:
    return [
        RowMutationEntry(key, [SetCell(f, q, v, ts) for f, q, ts, v in cells])
        for key, cells in data.items()
    ]


@dataclass
class Pair:
    """The same logical rows in a plain table and, through SaltedTableAsync, a salted one."""

    plain: FakeTable
    fake: FakeTable
    table: SaltedTableAsync
    scheme: SaltScheme


async def make_pair(scheme: SaltScheme, data: RowData, **kwargs: Any) -> Pair:
    plain, fake = FakeTable(), FakeTable()
    table = SaltedTableAsync(fake, scheme, **kwargs)
    if data:
        await plain.bulk_mutate_rows(entries_for(data))
        await table.bulk_mutate_rows(entries_for(data))
    return Pair(plain, fake, table, scheme)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run on a fresh asyncio loop (sync hypothesis tests drive async code through this)."""
    return asyncio.run(fn())


def assert_physical_keys_salted(pair: Pair) -> None:
    """Every physical key is scheme.salt_key of a logical key the plain table has.

    Beside them, the layout record the guard stored with the first write.
    """
    logical = pair.plain.row_keys()
    physical = pair.fake.row_keys()
    if logical:
        assert SCHEME_ROW_KEY in physical
    data = [k for k in physical if k != SCHEME_ROW_KEY]
    assert sorted(data) == sorted(pair.scheme.salt_key(k) for k in logical)


# -- strategies ----------------------------------------------------------------

# Small alphabets so that keys share prefixes, contain the separator and are
# prefixes of each other; plus arbitrary binary keys.
_ALPHABET = b"ab-\x00\xff\n"
tight_keys = st.binary(min_size=1, max_size=4).map(lambda b: bytes(_ALPHABET[x % 6] for x in b))
binary_keys = st.one_of(tight_keys, st.binary(min_size=1, max_size=8))
text_keys = st.text(alphabet="ab-é", min_size=1, max_size=4).map(str.encode)

REGEXES = [b"a.*", b"^a.*", b".*-.*", b"[^b]*", b"\\x00.*|b", b"(a|-)+", b".*\\xff", b"."]


@st.composite
def row_data(draw: st.DrawFn, keys: st.SearchStrategy[bytes]) -> RowData:
    """Up to 25 rows, each with one or two cells in families f1/f2."""
    data: RowData = {}
    for key in draw(st.lists(keys, max_size=25, unique=True)):
        cells = [("f1", b"q", 1000, b"v:" + key)]
        if draw(st.booleans()):
            cells.append(("f2", b"r", 2000, key[:1]))
        data[key] = cells
    return data


@st.composite
def row_ranges(draw: st.DrawFn, keys: st.SearchStrategy[bytes]) -> RowRange:
    """A RowRange of any boundedness (start <= end; may be empty)."""
    start = draw(st.one_of(st.none(), keys))
    end = draw(st.one_of(st.none(), keys))
    if start is not None and end is not None and start > end:
        start, end = end, start
    return RowRange(start, end, draw(st.booleans()), draw(st.booleans()))


@st.composite
def filters(draw: st.DrawFn, regex_ok: bool = True) -> RowFilter | None:
    """No filter, a key regex (alone or nested), or filters that ignore the key."""
    regex = RowKeyRegexFilter(draw(st.sampled_from(REGEXES)))
    options: list[RowFilter | None] = [
        None,
        CellsRowLimitFilter(1),
        FamilyNameRegexFilter(b"f2"),
        RowFilterChain([FamilyNameRegexFilter(b"f1"), StripValueTransformerFilter(True)]),
    ]
    if regex_ok:
        options += [
            regex,
            RowFilterChain([FamilyNameRegexFilter(b"f2"), regex]),
            RowFilterUnion([regex, FamilyNameRegexFilter(b"f2")]),
            ConditionalRowFilter(regex, CellsRowLimitFilter(1), FamilyNameRegexFilter(b"f2")),
        ]
    return draw(st.sampled_from(options))


@st.composite
def queries(draw: st.DrawFn, keys: st.SearchStrategy[bytes], data: RowData) -> ReadRowsQuery:
    """Point sets (present and missing keys), ranges, both, or nothing; limit; filter."""
    present = sorted(data)
    points: list[bytes] = []
    if draw(st.booleans()):
        if present:
            points += draw(st.lists(st.sampled_from(present), max_size=6))
        points += draw(st.lists(keys, max_size=3))  # mostly missing
    # Range bounds are often existing keys, so that open and closed ends matter.
    bounds = st.one_of(keys, st.sampled_from(present)) if present else keys
    ranges = draw(st.lists(row_ranges(bounds), max_size=2)) if draw(st.booleans()) else []
    limit = draw(st.one_of(st.none(), st.integers(1, 12)))
    return ReadRowsQuery(
        row_keys=points, row_ranges=ranges, limit=limit, row_filter=draw(filters())
    )


# -- differential reads --------------------------------------------------------


def differential(
    scheme_name: str, scheme: SaltScheme, keys: st.SearchStrategy[bytes]
) -> Callable[..., None]:
    @settings(max_examples=25, deadline=None)
    @given(data=st.data(), rows=row_data(keys), budget=st.sampled_from([20_000, 3, 1]))
    def check(data: st.DataObject, rows: RowData, budget: int) -> None:
        qs = [data.draw(queries(keys, rows), label=f"query {i}") for i in range(4)]
        prefix_of_a_key = (
            st.sampled_from(sorted(rows)).flatmap(
                lambda k: st.integers(1, len(k)).map(lambda n, k=k: k[:n])
            )
            if rows
            else keys
        )
        prefixes = data.draw(
            st.lists(st.one_of(keys, st.just(b""), prefix_of_a_key), max_size=2), label="prefix"
        )
        prefix_limit = data.draw(st.one_of(st.none(), st.integers(1, 5)), label="prefix limit")

        async def main() -> None:
            pair = await make_pair(scheme, rows, budget=ReadBudget(rows=budget))
            assert_physical_keys_salted(pair)
            for q in qs:
                expected = shape(await pair.plain.read_rows(q))
                assert shape(await pair.table.read_rows(q)) == expected, pair.table.plan(
                    q
                ).explain()
                streamed = [r async for r in await pair.table.read_rows_stream(q)]
                assert shape(streamed) == expected
                unordered = shape(await pair.table.read_rows(q, ordered=False))
                if q.limit is None:
                    assert sorted(unordered) == expected
                else:
                    everything = shape(
                        await pair.plain.read_rows(
                            ReadRowsQuery(q.row_keys, q.row_ranges, row_filter=q.filter)
                        )
                    )
                    assert len(unordered) == len(expected)
                    assert all(r in everything for r in unordered)
            for p in prefixes:
                rng = RowRange(p or None, _end(p))
                expected = shape(await pair.plain.read_rows(ReadRowsQuery(row_ranges=rng)))
                got = [r async for r in pair.table.read_prefix(p, limit=prefix_limit)]
                assert shape(got) == expected[:prefix_limit]
            assert pair.fake.stats.open_now == 0
            assert ABANDONED not in pair.fake.stats.endings

        run(main)

    check.__name__ = f"check_{scheme_name}"
    return check


def _end(prefix: bytes) -> bytes | None:
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else None


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_salted_reads_equal_plain_reads(name: str) -> None:
    """For binary keys, every query shape, limit and key-regex filter: salted == plain."""
    differential(name, SCHEMES[name], binary_keys)()


@pytest.mark.parametrize("name", sorted(TEXT_SCHEMES))
def test_salted_reads_equal_plain_reads_java(name: str) -> None:
    """hash='java' (negative buckets): salted reads of UTF-8 keys equal plain reads."""
    differential(name, TEXT_SCHEMES[name], text_keys)()


async def test_read_row_and_row_exists_are_logical() -> None:
    """read_row returns the logical row (cells too), honours a key regex; row_exists agrees."""
    data: RowData = {b"a-1": [("f1", b"q", 1000, b"x")], b"b": [("f1", b"q", 1000, b"y")]}
    pair = await make_pair(SaltScheme(16), data)
    for key in (b"a-1", b"b", b"missing"):
        assert shape([r for r in [await pair.table.read_row(key)] if r]) == shape(
            [r for r in [await pair.plain.read_row(key)] if r]
        )
        assert await pair.table.row_exists(key) == await pair.plain.row_exists(key)
    assert await pair.table.read_row("a-1", row_filter=RowKeyRegexFilter(b"a.*")) is not None
    assert await pair.table.read_row(b"b", row_filter=RowKeyRegexFilter(b"a.*")) is None


async def test_empty_and_missing_reads() -> None:
    """Empty ranges, missing keys and an empty table read as nothing, like the plain table."""
    pair = await make_pair(SaltScheme(4), {})
    assert await pair.table.read_rows(ReadRowsQuery()) == []
    assert await pair.table.read_rows(ReadRowsQuery(row_keys=[b"nope"])) == []
    assert await pair.table.read_rows(ReadRowsQuery(row_ranges=[RowRange(b"a", b"a")])) == []


async def test_empty_plan_read_unordered() -> None:
    """An unordered read of an empty range returns nothing and leaks no resource."""
    pair = await make_pair(SaltScheme(4), {b"a": [("f1", b"q", 1, b"v")]})
    query = ReadRowsQuery(row_ranges=[RowRange(b"a", b"a")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await pair.table.read_rows(query, ordered=False) == []
        gc.collect()
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []


async def test_read_rows_sharded_equals_plain_reads_in_query_order() -> None:
    """read_rows_sharded returns each logical query's rows, in query order, as plain reads do."""
    data: RowData = {b"k%02d" % i: [("f1", b"q", 1000, b"v")] for i in range(40)}
    pair = await make_pair(SaltScheme(16), data)
    shards = [
        ReadRowsQuery(row_ranges=RowRange(b"k20", b"k30")),
        ReadRowsQuery(row_keys=[b"k05", b"k01", b"missing"]),
        ReadRowsQuery(row_ranges=RowRange(b"k35", None), limit=3),
    ]
    expected = [row for q in shards for row in await pair.plain.read_rows(q)]
    assert shape(await pair.table.read_rows_sharded(shards)) == shape(expected)


async def test_read_rows_sharded_failure_names_the_query() -> None:
    """A shard whose bucket fails is reported by index; the other shards' rows are kept."""
    table, _, cause = await failing_pair(5)
    bad_key = next(b"k%03d" % i for i in range(200) if table.scheme.bucket_of(b"k%03d" % i) == 5)
    good_key = next(b"k%03d" % i for i in range(200) if table.scheme.bucket_of(b"k%03d" % i) != 5)
    shards = [ReadRowsQuery(row_keys=[good_key]), ReadRowsQuery(row_keys=[bad_key])]
    with pytest.raises(ShardedReadRowsExceptionGroup) as info:
        await table.read_rows_sharded(shards)
    (failed,) = info.value.exceptions
    assert isinstance(failed, FailedQueryShardError)
    assert failed.index == 1
    assert failed.__cause__ is cause
    assert [r.row_key for r in info.value.successful_rows] == [good_key]


# -- writes ----------------------------------------------------------------------


async def test_bulk_mutate_partial_failure_names_logical_entries() -> None:
    """A failed bulk entry comes back with the caller's logical entry, index and cause."""
    scheme = SaltScheme(16)
    cause = ServiceUnavailable("bucket down")
    bad = {scheme.salt_key(b"bad-1"), scheme.salt_key(b"bad-2")}
    fake = FakeTable(fail_entry=lambda e: cause if e.row_key in bad else None)
    table = SaltedTableAsync(fake, scheme)
    keys = [b"ok-1", b"bad-1", b"ok-2", b"bad-2"]
    entries = [RowMutationEntry(k, SetCell("f1", b"q", k, 1000)) for k in keys]
    with pytest.raises(MutationsExceptionGroup) as info:
        await table.bulk_mutate_rows(entries)
    failed = info.value.exceptions
    assert all(isinstance(e, FailedMutationEntryError) for e in failed)
    assert [(e.index, e.entry.row_key) for e in failed] == [(1, b"bad-1"), (3, b"bad-2")]
    assert [e.entry for e in failed] == [entries[1], entries[3]]
    assert all(e.__cause__ is cause for e in failed)
    assert info.value.total_entries_attempted == 4
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == [b"ok-1", b"ok-2"]


async def test_mutate_row_writes_salted_keys() -> None:
    """mutate_row writes under the physical key; deleting the row removes it."""
    scheme = SaltScheme(16)
    pair = await make_pair(scheme, {})
    await pair.table.mutate_row(b"k", SetCell("f1", b"q", b"v", 1000))
    assert pair.fake.data_keys() == [scheme.salt_key(b"k")]
    await pair.table.mutate_row("k", [DeleteAllFromRow()])
    assert pair.fake.data_keys() == []


@pytest.mark.parametrize(
    "predicate",
    [
        RowKeyRegexFilter(b"user.*"),
        RowKeyRegexFilter(b"other"),
        RowFilterChain([FamilyNameRegexFilter(b"f1"), RowKeyRegexFilter(b"^user-\\d+")]),
        None,
    ],
)
@pytest.mark.parametrize("key", [b"user-1", b"absent"])
async def test_check_and_mutate_row_matches_plain(predicate: RowFilter | None, key: bytes) -> None:
    """check_and_mutate_row with a key-regex predicate decides and writes as on a plain table."""
    pair = await make_pair(SaltScheme(16), {b"user-1": [("f1", b"q", 1000, b"v")]})
    results = []
    for t in (pair.plain, pair.table):
        results.append(
            await t.check_and_mutate_row(
                key,
                predicate,
                true_case_mutations=SetCell("f1", b"t", b"yes", 2000),
                false_case_mutations=[SetCell("f1", b"f", b"no", 2000)],
            )
        )
    assert results[0] == results[1]
    q = ReadRowsQuery()
    assert shape(await pair.table.read_rows(q)) == shape(await pair.plain.read_rows(q))


async def test_read_modify_write_row_returns_logical_row() -> None:
    """read_modify_write_row returns the modified cells under the logical key."""
    pair = await make_pair(SaltScheme(16), {b"counter": [("f1", b"n", 1000, (5).to_bytes(8))]})
    rules = [IncrementRule("f1", b"n", 3), AppendValueRule("f1", b"s", b"x")]
    row = await pair.table.read_modify_write_row(b"counter", rules)
    plain_row = await pair.plain.read_modify_write_row(b"counter", rules)
    assert row.row_key == b"counter"
    assert all(c.row_key == b"counter" for c in row.cells)
    assert [(c.family, c.qualifier, c.value) for c in row.cells] == [
        (c.family, c.qualifier, c.value) for c in plain_row.cells
    ]
    assert int(row.cells[0]) == 8
    assert pair.fake.data_keys() == [pair.scheme.salt_key(b"counter")]


async def test_mutations_batcher_salts_and_reports_logical_keys() -> None:
    """The salted batcher writes physical keys and its close() failures name logical keys."""
    scheme = SaltScheme(16)
    cause = ServiceUnavailable("nope")
    fake = FakeTable(fail_entry=lambda e: cause if e.row_key == scheme.salt_key(b"bad") else None)
    table = SaltedTableAsync(fake, scheme)
    batcher = table.mutations_batcher()
    for k in (b"a", b"bad", b"c"):
        await batcher.append(RowMutationEntry(k, SetCell("f1", b"q", b"v", 1000)))
    assert fake.data_keys() == []  # nothing is written before the flush
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.close()
    assert batcher.closed
    (failed,) = info.value.exceptions
    assert isinstance(failed, FailedMutationEntryError)
    assert failed.entry.row_key == b"bad"
    assert failed.__cause__ is cause
    assert sorted(fake.data_keys()) == sorted(scheme.salt_key(k) for k in (b"a", b"c"))


async def test_sample_row_keys_are_logical_and_increasing() -> None:
    """sample_row_keys reports logical keys in order with increasing offsets, then the total."""
    scheme = SaltScheme(8)
    data: RowData = {b"k%03d" % i: [("f1", b"q", 1000, b"v" * 10)] for i in range(300)}
    pair = await make_pair(scheme, data)
    pair.fake.sample_every = 10
    samples = await pair.table.sample_row_keys()
    keys = [k for k, _ in samples[:-1]]
    offsets = [o for _, o in samples]
    assert keys == sorted(keys)
    assert all(k in data for k in keys)
    assert offsets == sorted(offsets)
    assert samples[-1] == (b"", (await pair.fake.sample_row_keys())[-1][1])


# -- failures, cancellation, concurrency -------------------------------------------


def bucket_query(scheme: SaltScheme, bucket: int) -> Callable[[ReadRowsQuery], bool]:
    """A fail_when predicate: the query reads inside ``bucket``."""
    prefix = scheme.prefix(bucket)

    def reads_bucket(query: ReadRowsQuery) -> bool:
        starts = [r.start_key or b"" for r in query.row_ranges] + query.row_keys
        return any(s.startswith(prefix) for s in starts)

    return reads_bucket


async def failing_pair(bucket: int) -> tuple[SaltedTableAsync, FakeTable, ServiceUnavailable]:
    scheme = SaltScheme(16)
    cause = ServiceUnavailable(f"bucket {bucket} is down")
    fake = FakeTable(fail_with=cause, latency=0.001)
    table = SaltedTableAsync(fake, scheme)
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"k%03d" % i, SetCell("f1", b"q", b"v", 1000)) for i in range(200)]
    )
    # The bucket fails from now on (the first write's sample of the rows, taken
    # before it stored the layout record, read it too).
    fake.fail_when = bucket_query(scheme, bucket)
    return table, fake, cause


@pytest.mark.parametrize("ordered", [True, False])
async def test_failing_bucket_fails_the_read_and_closes_everything(ordered: bool) -> None:
    """A bucket that fails makes the whole read raise, with no stream or task left behind."""
    before = asyncio.all_tasks()
    table, fake, _ = await failing_pair(5)
    with anyio.fail_after(5), pytest.raises(ServiceUnavailable):
        await table.read_rows(ReadRowsQuery(), ordered=ordered)
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before
    assert fake.stats.open_now == 0
    assert ABANDONED not in fake.stats.endings
    assert "failed" in fake.stats.endings


@pytest.mark.parametrize("ordered", [True, False])
async def test_failing_bucket_raises_the_bigtable_error_naming_it(ordered: bool) -> None:
    """A failing bucket raises the Bigtable error itself, noted and tagged with its bucket."""
    table, _, cause = await failing_pair(5)
    with anyio.fail_after(5), pytest.raises(ServiceUnavailable) as info:
        await table.read_rows(ReadRowsQuery(), ordered=ordered)
    assert info.value is cause
    where = info.value.saltedtable_subscan  # type: ignore[attr-defined]
    assert isinstance(where, SubScan)
    assert where.bucket == 5
    assert any("bucket 5" in note for note in info.value.__notes__)


@pytest.mark.parametrize("ordered", [True, False])
async def test_breaking_out_of_a_stream_closes_every_subscan(ordered: bool) -> None:
    """break + aclose on read_rows_stream leaves no stream open, none abandoned, no task."""
    before = asyncio.all_tasks()
    scheme = SaltScheme(16)
    fake = FakeTable(latency=0.001)
    table = SaltedTableAsync(fake, scheme, budget=ReadBudget(rows=80))
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"k%04d" % i, SetCell("f1", b"q", b"v", 1000)) for i in range(2000)]
    )
    stream = await table.read_rows_stream(ReadRowsQuery(), ordered=ordered)
    async with aclosing(stream):  # type: ignore[type-var]
        async for _row in stream:
            break
    await asyncio.sleep(0)
    assert fake.stats.open_now == 0
    assert fake.stats.opened == fake.stats.closed
    assert ABANDONED not in fake.stats.endings
    assert fake.stats.rows_sent < 2000
    assert asyncio.all_tasks() == before


async def idle_stream_tasks(table: SaltedTableAsync, fake: FakeTable) -> None:
    """Wait until no request of ``table`` runs or waits for a slot (its reads' tasks idle)."""
    with anyio.fail_after(10):
        while fake.stats.open_now or table.limiter.borrowed_tokens or table.limiter.waiting:  # noqa: ASYNC110 - the fake has no event for this
            await asyncio.sleep(0.001)


@pytest.mark.parametrize(
    ("limit", "ordered"), [(40, True), (40, False), (None, True), (None, False)]
)
async def test_a_stream_left_with_a_bare_break_leaves_no_task_a_loop_turn_later(
    limit: int | None, ordered: bool
) -> None:
    """Issue 36: a stream left with a bare ``break`` while its read waits idle (the
    requests of its round, or of its budget, have ended) leaves no task one event-loop
    turn later, with no garbage collection; before, a supervisor and a producer per
    bucket waited until asyncio closed the stream, turns later."""
    fake = FakeTable()
    # (No one request first: the read fans out to its 16 buckets at once.)
    table = SaltedTableAsync(fake, SaltScheme(16), budget=ReadBudget(rows=320, one_request_rows=0))
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"k%04d" % i, SetCell("f1", b"q", b"v", 1000)) for i in range(2000)]
    )
    before = asyncio.all_tasks()
    gc.disable()  # the claim: no garbage collection needed
    try:
        async for _row in await table.read_rows_stream(ReadRowsQuery(limit=limit), ordered=ordered):
            await idle_stream_tasks(table, fake)
            idle = asyncio.all_tasks() - before
            break
        await asyncio.sleep(0)
        left = asyncio.all_tasks() - before
    finally:
        gc.enable()
    assert len(idle) >= 17, idle  # a supervisor and a producer per bucket, waiting
    assert not left, left
    assert fake.stats.open_now == 0
    assert ABANDONED not in fake.stats.endings
    assert table.limiter.borrowed_tokens == 0


async def test_a_row_stream_is_an_async_generator_of_its_rows() -> None:
    """What read_rows_stream returns passes asend, athrow and aclose to the read's stream."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4))
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"k%d" % i, SetCell("f1", b"q", b"v", 1000)) for i in range(6)]
    )
    stream = await table.read_rows_stream(ReadRowsQuery())
    assert isinstance(stream, AsyncGenerator)
    assert (await anext(stream)).row_key == b"k0"
    assert (await stream.asend(None)).row_key == b"k1"
    with pytest.raises(KeyError):
        await stream.athrow(KeyError("from the caller"))
    await stream.aclose()
    assert [row async for row in stream] == []
    assert fake.stats.open_now == 0


async def test_close_at_once_refuses_a_generator_whose_cleanup_awaits() -> None:
    """close_at_once is for cleanups that never suspend: one that does is a bug, said so."""

    async def rows() -> AsyncGenerator[int, None]:
        try:
            yield 1
        finally:
            await asyncio.sleep(0)

    stream = rows()
    assert await anext(stream) == 1
    with pytest.raises(RuntimeError, match="awaited while it was being closed"):
        close_at_once(stream)


async def test_cancelled_read_closes_every_subscan() -> None:
    """A read cancelled while its sub-scans are pending leaves no stream open, none abandoned."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(16))
    await table.mutate_row(b"k", SetCell("f1", b"q", b"v", 1000))
    fake.latency = 60  # after the write, whose sample before storing the record reads too
    fake.stats.endings.clear()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(table.read_rows, ReadRowsQuery())
            while fake.stats.open_now < 16:  # noqa: ASYNC110 - the fake has no event for this
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
    await asyncio.sleep(0)
    assert fake.stats.open_now == 0
    assert fake.stats.endings == ["cancelled"] * 16


async def test_concurrency_is_bounded_by_max_concurrent_subscans() -> None:
    """max_concurrent_subscans=2, 16 buckets: concurrent ordered scans finish, <= 2 streams open."""
    scheme = SaltScheme(16)
    pair = await make_pair(
        scheme,
        {b"k%04d" % i: [("f1", b"q", 1000, b"v")] for i in range(800)},
        max_concurrent_subscans=2,
        budget=ReadBudget(rows=160),
    )
    pair.fake.latency = 0.0005
    expected = shape(await pair.plain.read_rows(ReadRowsQuery()))
    results: list[list[Shape]] = []

    async def scan(q: ReadRowsQuery) -> None:
        results.append(shape(await pair.table.read_rows(q)))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(scan, ReadRowsQuery())
            tg.start_soon(scan, ReadRowsQuery(limit=50))
    assert sorted(map(len, results)) == [50, 800, 800, 800]
    assert all(r == expected[: len(r)] for r in results)
    assert 1 <= pair.fake.stats.max_open <= 2
    assert pair.fake.stats.open_now == 0


async def test_timeouts_reach_the_table() -> None:
    """Sub-scans get the table defaults as budgets: <= 600 s per operation, <= 20 s per attempt."""
    pair = await make_pair(SaltScheme(4), {b"a": [("f1", b"q", 1, b"v")]})
    pair.fake.read_kwargs.clear()  # the first write's sample, within the write's budget
    await pair.table.read_rows(ReadRowsQuery())
    for kwargs in pair.fake.read_kwargs:
        assert 0 < kwargs["operation_timeout"] <= 600
        assert 0 < kwargs["attempt_timeout"] <= 20
    await pair.table.read_rows(ReadRowsQuery(), operation_timeout=5, attempt_timeout=None)
    assert all(0 < kw["attempt_timeout"] <= 5 for kw in pair.fake.read_kwargs[-4:])


async def test_close_closes_the_table() -> None:
    """SaltedTableAsync.close (and async with) close the underlying table."""
    fake = FakeTable()
    async with SaltedTableAsync(fake, SaltScheme(2)):
        pass
    assert fake.closed


async def test_fake_sanity_pass_all() -> None:
    """The oracle itself: PassAllFilter and no filter return the same rows."""
    fake = FakeTable()
    fake.set_cell(b"x", "f1", b"q", b"v")
    assert shape(await fake.read_rows(ReadRowsQuery(row_filter=PassAllFilter(True)))) == shape(
        await fake.read_rows(ReadRowsQuery())
    )
