"""plan_reads, PageCursor and rewrite_filter: which buckets, which pages, which regexes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from unittest import mock

import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Cell
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
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import saltedtable._read.plan as plan_module
from saltedtable import (
    KeyRange,
    QueryPlanError,
    ReadBudget,
    ReadSettings,
    RowKeyError,
    SaltScheme,
    SubQuery,
    before_last,
    fields,
    plan_reads,
    prefix_end,
    rewrite_filter,
)
from saltedtable._read.plan import MAX_KEYS_PER_REQUEST, PageCursor
from tests.fakes import _apply_filter, in_range, query_keys

PROPERTY = settings(max_examples=60, deadline=None)


@cache
def scheme(buckets: int, hash: str = "crc32", key_part: object = None) -> SaltScheme:
    """One SaltScheme per configuration."""
    return SaltScheme(buckets, hash=hash, key_part=key_part)  # type: ignore[arg-type]


def whole(prefix: bytes) -> KeyRange:
    """The physical range of a whole bucket."""
    return KeyRange(prefix, True, prefix_end(prefix), False)


def logical_range(rng: KeyRange) -> RowRange:
    return rng.to_row_range()


# Keys from a small alphabet (with the separators) so that ranges and prefixes bite.
small_keys = st.binary(min_size=1, max_size=6).map(
    lambda b: bytes(b"ab#-\x00\xff"[x % 6] for x in b)
)
any_keys = st.binary(min_size=1, max_size=12)


@st.composite
def key_ranges(draw: st.DrawFn, keys: st.SearchStrategy[bytes] = small_keys) -> KeyRange:
    """A non-empty logical KeyRange of any boundedness."""
    start = draw(st.one_of(st.just(b""), keys))
    end = draw(st.one_of(st.just(b""), keys))
    if start and end and start > end:
        start, end = end, start
    rng = KeyRange(start, draw(st.booleans()), end, draw(st.booleans()))
    assume(not rng.is_empty)
    return rng


# -- point keys --------------------------------------------------------------


@PROPERTY
@given(keys=st.lists(any_keys, min_size=1, max_size=20), buckets=st.sampled_from([1, 3, 16, 100]))
def test_point_keys_go_to_exactly_their_bucket(keys: list[bytes], buckets: int) -> None:
    """Each point key is sent to its own bucket only, salted, sorted, once; no ranges."""
    s = scheme(buckets)
    plan = plan_reads(ReadRowsQuery(row_keys=keys), s)
    expected: dict[int, set[bytes]] = {}
    for key in keys:
        expected.setdefault(s.bucket_of(key), set()).add(s.salt_key(key))
    assert plan.buckets == tuple(sorted(expected))
    for sub in plan.subqueries:
        assert sub.prefix == s.prefix(sub.bucket)
        assert sub.keys == tuple(sorted(expected[sub.bucket]))
        assert sub.ranges == ()


def test_point_key_plan_carries_limit_and_filter() -> None:
    """The plan keeps the logical limit and filter; each bucket gets a rewritten filter."""
    f = RowKeyRegexFilter(b"a.*")
    plan = plan_reads(ReadRowsQuery(row_keys=[b"a1", b"a2"], limit=5, row_filter=f), scheme(16))
    assert plan.limit == 5
    assert plan.row_filter is f
    for sub in plan.subqueries:
        assert isinstance(sub.row_filter, RowKeyRegexFilter)
        assert re.fullmatch(sub.row_filter.regex, sub.prefix + b"a1")


def test_empty_point_key_is_rejected() -> None:
    """An empty logical key cannot be salted, so planning fails before any read."""
    with pytest.raises(RowKeyError):
        plan_reads(ReadRowsQuery(row_keys=[b""]), scheme(4))


# -- ranges ------------------------------------------------------------------

BOUNDS = [
    pytest.param(KeyRange(), id="unbounded"),
    pytest.param(KeyRange(b"k", True), id="start-closed"),
    pytest.param(KeyRange(b"k", False), id="start-open"),
    pytest.param(KeyRange(end=b"m", end_closed=False), id="end-open"),
    pytest.param(KeyRange(end=b"m", end_closed=True), id="end-closed"),
    pytest.param(KeyRange(b"k", True, b"m", False), id="closed-open"),
    pytest.param(KeyRange(b"k", False, b"m", True), id="open-closed"),
    pytest.param(KeyRange(b"k", True, b"m", True), id="closed-closed"),
    pytest.param(KeyRange(b"k", False, b"m", False), id="open-open"),
]


@pytest.mark.parametrize("rng", BOUNDS)
@pytest.mark.parametrize("hash_", ["crc32", "java", "phoenix"])
def test_range_of_any_boundedness_reads_every_bucket(rng: KeyRange, hash_: str) -> None:
    """A key range goes to every bucket, bounded by the bucket prefix where it is open-ended."""
    s = scheme(16, hash_)
    plan = plan_reads(ReadRowsQuery(row_ranges=[rng.to_row_range()]), s)
    assert plan.buckets == s.bucket_ids
    for sub in plan.subqueries:
        p = sub.prefix
        start, start_closed = (p + rng.start, rng.start_closed) if rng.start else (p, True)
        end, end_closed = (p + rng.end, rng.end_closed) if rng.end else (prefix_end(p), False)
        assert sub.ranges == (KeyRange(start, start_closed, end, end_closed),)
        assert sub.keys == ()


def test_full_scan_reads_every_bucket_whole() -> None:
    """A query with neither keys nor ranges reads every bucket's whole key space."""
    s = scheme(16)
    plan = plan_reads(ReadRowsQuery(), s)
    assert plan.buckets == tuple(range(16))
    assert [sub.ranges for sub in plan.subqueries] == [(whole(p),) for p in s.prefixes]
    assert plan.subqueries[7].ranges == (KeyRange(b"07-", True, b"07.", False),)


def test_empty_range_reads_nothing() -> None:
    """A range that holds no key is dropped, and a query of only such ranges plans no read."""
    query = ReadRowsQuery(row_ranges=[RowRange(b"a", b"a"), RowRange(b"b", b"b", False, True)])
    assert plan_reads(query, scheme(8)).subqueries == ()


def test_keys_and_ranges_combine_per_bucket() -> None:
    """Point keys and ranges of one query end up side by side in each bucket's sub-query."""
    s = scheme(4)
    plan = plan_reads(ReadRowsQuery(row_keys=[b"x"], row_ranges=[RowRange(b"a", b"c")]), s)
    bucket = s.bucket_of(b"x")
    for sub in plan.subqueries:
        assert sub.keys == ((s.salt_key(b"x"),) if sub.bucket == bucket else ())
        assert len(sub.ranges) == 1


@PROPERTY
@given(
    rng=key_ranges(),
    keys=st.lists(small_keys, max_size=30),
    part=st.sampled_from([None, fields(1, b"#"), fields(2, b"#"), before_last(b"-")]),
)
def test_planned_buckets_hold_every_key_of_the_range(
    rng: KeyRange, keys: list[bytes], part: object
) -> None:
    """Soundness: every key inside a range lies in a bucket the plan reads, inside its ranges."""
    s = scheme(8, "crc32", part)
    plan = plan_reads(ReadRowsQuery(row_ranges=[rng.to_row_range()]), s)
    by_bucket = {sub.bucket: sub for sub in plan.subqueries}
    for key in keys:
        if in_range(key, rng.to_row_range()):
            bucket, physical = s.locate(key)
            assert bucket in by_bucket, (key, plan.explain())
            sub = by_bucket[bucket]
            assert any(in_range(physical, r.to_row_range()) for r in sub.ranges)


# -- key parts: single-bucket ranges ------------------------------------------


@pytest.mark.parametrize(
    ("k", "start", "end"),
    [
        (1, b"user1#a", b"user1#z"),
        (1, b"user1#", b"user1#2025"),
        (1, b"user1#2024", prefix_end(b"user1#2024")),
        (2, b"u#s#1", b"u#s#9"),
        (2, b"u#s#x", prefix_end(b"u#s#x")),
    ],
)
def test_fields_range_inside_one_part_reads_one_bucket(k: int, start: bytes, end: bytes) -> None:
    """fields(k): a range whose keys share their first k fields is sent to one bucket only."""
    s = scheme(16, "crc32", fields(k, b"#"))
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(start, end)]), s)
    assert plan.buckets == (s.bucket_of(start),)
    (sub,) = plan.subqueries
    assert sub.ranges == (KeyRange(sub.prefix + start, True, sub.prefix + end, False),)


@pytest.mark.parametrize(("k", "prefix"), [(1, b"user1#"), (2, b"u#s#")])
def test_fields_prefix_ending_in_separator_reads_one_bucket(k: int, prefix: bytes) -> None:
    """fields(k): a prefix scan of k whole fields (ending in the separator) reads one bucket."""
    s = scheme(16, "crc32", fields(k, b"#"))
    query = ReadRowsQuery(row_ranges=[RowRange(prefix, prefix_end(prefix))])
    assert plan_reads(query, s).buckets == (s.bucket_of(prefix + b"x"),)


def test_fields_range_across_parts_fans_out() -> None:
    """fields(1): a range spanning two first fields fans out to every bucket."""
    s = scheme(16, "crc32", fields(1, b"#"))
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"user1#", b"user2#")]), s)
    assert plan.buckets == s.bucket_ids


def test_fields_open_ended_range_fans_out() -> None:
    """fields(1): a range with only one bound cannot be pinned to a bucket."""
    s = scheme(16, "crc32", fields(1, b"#"))
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"user1#a", None)]), s)
    assert plan.buckets == s.bucket_ids


def test_before_last_always_fans_out() -> None:
    """before_last: no prefix fixes the hashed part, so even a narrow range reads every bucket."""
    s = scheme(16, "crc32", before_last(b"-"))
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"user-site-1", b"user-site-2")]), s)
    assert plan.buckets == s.bucket_ids


def test_single_key_range_reads_its_bucket() -> None:
    """A closed range [k, k] is one key: it is sent to k's bucket only."""
    s = scheme(16)
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"k", b"k", True, True)]), s)
    assert plan.buckets == (s.bucket_of(b"k"),)


# -- java and phoenix layouts ------------------------------------------------


def test_java_scheme_plans_negative_buckets() -> None:
    """hash='java': a full scan reads the 2N-1 buckets -(N-1)..N-1 with signed prefixes."""
    s = scheme(16, "java")
    plan = plan_reads(ReadRowsQuery(), s)
    assert plan.buckets == tuple(range(-15, 16))
    by_bucket = {sub.bucket: sub for sub in plan.subqueries}
    assert by_bucket[-3].ranges == (KeyRange(b"-3-", True, b"-3.", False),)
    assert by_bucket[3].ranges == (KeyRange(b"3-", True, b"3.", False),)


def test_java_point_key_in_negative_bucket() -> None:
    """hash='java': a key whose Java hashCode is negative goes to its negative bucket."""
    s = scheme(16, "java")
    assert s.bucket_of(b"user-1") == -1
    (sub,) = plan_reads(ReadRowsQuery(row_keys=[b"user-1"]), s).subqueries
    assert (sub.bucket, sub.prefix, sub.keys) == (-1, b"-1-", (b"-1-user-1",))


def test_java_bucket_ranges_do_not_overlap() -> None:
    """hash='java': no bucket's physical range contains another bucket's prefix (1- vs 10-)."""
    s = scheme(16, "java")
    for p in s.prefixes:
        rng = whole(p).to_row_range()
        assert [q for q in s.prefixes if in_range(q, rng)] == [p]


def test_phoenix_last_bucket_range_is_unbounded() -> None:
    """hash='phoenix', N=256: bucket 255 (prefix 0xff) has no upper bound; the others do."""
    s = scheme(256, "phoenix")
    plan = plan_reads(ReadRowsQuery(), s)
    assert plan.buckets == tuple(range(256))
    last = plan.subqueries[255]
    assert last.ranges == (KeyRange(b"\xff", True, b"", False),)
    assert last.ranges[0].to_row_range().end_key is None
    assert plan.subqueries[254].ranges == (KeyRange(b"\xfe", True, b"\xff", False),)


def test_phoenix_last_bucket_bounded_range_keeps_its_end() -> None:
    """hash='phoenix': a logical end bound is prefixed, even in bucket 255."""
    s = scheme(256, "phoenix")
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"a", b"b")]), s)
    assert plan.subqueries[255].ranges == (KeyRange(b"\xffa", True, b"\xffb", False),)


def test_phoenix_point_key_in_bucket_255() -> None:
    """hash='phoenix': a key of bucket 255 is read under the raw 0xff prefix."""
    s = scheme(256, "phoenix")
    assert s.bucket_of(b"jh") == 255
    (sub,) = plan_reads(ReadRowsQuery(row_keys=[b"jh"]), s).subqueries
    assert (sub.bucket, sub.keys) == (255, (b"\xffjh",))


# -- explain -----------------------------------------------------------------


def test_explain_mentions_every_bucket() -> None:
    """explain() has a head line, how the read runs, and one line naming each bucket."""
    s = scheme(8)
    plan = plan_reads(ReadRowsQuery(limit=3, row_filter=PassAllFilter(True)), s)
    lines = plan.explain().splitlines()
    assert lines[0] == "8 sub-queries, limit 3, filter PassAllFilter"
    assert lines[1].startswith("  how: 8 sub-queries read concurrently, merged in logical key")
    assert "limit 3 in rounds: the first asks 2 rows of each" in lines[1]
    assert len(lines) == 10
    for bucket, prefix in zip(s.bucket_ids, s.prefixes, strict=True):
        assert f"bucket {bucket} prefix {prefix!r}:" in lines[bucket + 2]


def test_explain_single_subquery_and_many_keys() -> None:
    """explain() says "1 sub-query" and shortens long key lists."""
    s = scheme(1)
    plan = plan_reads(ReadRowsQuery(row_keys=[b"a", b"b", b"c", b"d", b"e"]), s)
    lines = plan.explain().splitlines()
    assert lines[0] == "1 sub-query"
    assert "(+2 more)" in lines[2]


def test_explain_elides_long_plans_and_states_the_budget() -> None:
    """A 4096-bucket plan lists 32 sub-queries and counts the rest; the budget shows."""
    plan = plan_reads(ReadRowsQuery(), scheme(4096))
    lines = plan.explain().splitlines()
    assert len(lines) == 2 + 32 + 1
    assert lines[-1] == "  ... and 4064 more sub-queries"
    assert "each keeps up to 4 rows asked for" in lines[1]
    unordered = plan.strategy(ReadBudget(rows=100, bytes=1 << 20), ordered=False)
    assert "unordered" in unordered
    assert "budget 100 rows / 1 MiB" in unordered


# -- PageCursor --------------------------------------------------------------


def serve(query: ReadRowsQuery, table: list[bytes]) -> list[bytes]:
    """A minimal server over sorted keys: the keys the query selects, up to its limit."""
    rows = query_keys(query, table)
    return rows[: query.limit] if query.limit else rows


def walk(sub: SubQuery, table: list[bytes], sizes: Iterator[int]) -> list[bytes]:
    """Read a sub-query to the end through a PageCursor, checking every request."""
    cursor = PageCursor(sub)
    out: list[bytes] = []
    for _ in range(100_000):
        size = next(sizes)
        query = cursor.next_query(size)
        if query is None:
            assert cursor.done
            assert cursor.next_query(size) is None
            return out
        assert query.row_keys or query.row_ranges, "an empty query would read the whole table"
        assert len(query.row_keys) <= plan_module.MAX_KEYS_PER_REQUEST
        assert query.limit == size
        assert query.filter is sub.row_filter
        page = serve(query, table)
        out.extend(page)
        cursor.advance(len(page), size, page[-1] if page else None)
        if len(page) == size:
            assert cursor.position == page[-1]  # a full page: resume right after it
    raise AssertionError("the cursor never finished")


@settings(max_examples=150, deadline=None)
@given(
    table=st.lists(small_keys, max_size=40, unique=True).map(sorted),
    extra_keys=st.lists(small_keys, max_size=15),
    ranges=st.lists(key_ranges(), max_size=3),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    chunk=st.integers(1, 4),
    data=st.data(),
)
def test_paging_never_skips_or_duplicates(
    table: list[bytes],
    extra_keys: list[bytes],
    ranges: list[KeyRange],
    sizes: list[int],
    chunk: int,
    data: st.DataObject,
) -> None:
    """Paging a sub-query with any page sizes and key chunking yields exactly its rows, in order."""
    points = sorted(
        set(data.draw(st.lists(st.sampled_from(table))) if table else []) | set(extra_keys)
    )
    sub = SubQuery(0, b"", tuple(points), tuple(ranges))
    full = ReadRowsQuery(row_keys=list(points), row_ranges=[r.to_row_range() for r in ranges])
    expected = serve(full, table) if points or ranges else []

    def cycle() -> Iterator[int]:
        while True:
            yield from sizes

    with mock.patch.object(plan_module, "MAX_KEYS_PER_REQUEST", chunk):
        assert walk(sub, table, cycle()) == expected


def test_key_chunks_respect_max_keys_per_request() -> None:
    """2500 point keys with ranges between them go out in chunks of at most 1000 keys."""
    table = [b"k%05d" % i for i in range(0, 6000)]
    points = tuple(table[0:5000:2])  # 2500 keys
    ranges = (KeyRange(b"k00100", True, b"k00110", False), KeyRange(b"k04000", False, b"", False))
    sub = SubQuery(0, b"", points, ranges)
    cursor = PageCursor(sub)
    seen: list[bytes] = []
    requests = 0
    while (query := cursor.next_query(10_000)) is not None:
        requests += 1
        assert 0 < len(query.row_keys) <= MAX_KEYS_PER_REQUEST or query.row_ranges
        page = serve(query, table)
        seen.extend(page)
        cursor.advance(len(page), 10_000, page[-1] if page else None)
    assert requests >= 3
    full = ReadRowsQuery(row_keys=list(points), row_ranges=[r.to_row_range() for r in ranges])
    assert seen == serve(full, table)


def test_key_chunks_respect_max_key_bytes() -> None:
    """Long keys are chunked by bytes too: no request carries more than 512 KiB of keys."""
    points = tuple(sorted(bytes([65 + i % 26]) * 3000 + b"%04d" % i for i in range(400)))
    cursor = PageCursor(SubQuery(0, b"", points))
    chunks = []
    while (query := cursor.next_query(1000)) is not None:
        chunks.append(query.row_keys)
        assert sum(map(len, query.row_keys)) <= plan_module.MAX_KEY_BYTES_PER_REQUEST
        cursor.advance(0, 1000, None)
    assert [k for c in chunks for k in c] == list(points)
    assert len(chunks) >= 3


def test_cursor_of_empty_subquery_sends_nothing() -> None:
    """A sub-query without keys or ranges never turns into a (whole-table) ReadRowsQuery."""
    cursor = PageCursor(SubQuery(0, b"07-"))
    assert cursor.next_query(10) is None
    assert cursor.done


def test_cursor_stops_when_ranges_are_consumed() -> None:
    """After a full page ending at the range's last key, the next request is None, not empty."""
    sub = SubQuery(0, b"", (), (KeyRange(b"a", True, b"c", True),))
    cursor = PageCursor(sub)
    assert cursor.next_query(2) is not None
    cursor.advance(2, 2, b"c")
    assert cursor.next_query(2) is None


# -- rewrite_filter ----------------------------------------------------------

REGEXES = [
    b"a.*",
    b"^a.*",
    b"\\Aab?",
    b".*-.*",
    b"[^a]*",
    b"(a|b)+#?",
    b"a|b",
    b"^#|-.*",
    b"[]a-]+",
    b"[^]a]+",
    b"[\\^a]+",
    b"\\^a|a",
    b"(?:ab)*",
    b".*b$",
    b"\\w+",
    b"\\W.*",
    b"\\bab.*",
    b"\\B.*",
    b"[a#]{2,3}",
    b"(a)(b)?.",
    b"\\x00.*",
    b".",
    b"",
]
NEWLINE_FREE_KEYS = st.binary(min_size=1, max_size=6).map(
    lambda b: bytes(b"ab#-^\\]\x00 "[x % 9] for x in b)
)


@settings(max_examples=200, deadline=None)
@given(
    key=NEWLINE_FREE_KEYS,
    regex=st.sampled_from(REGEXES),
    prefix=st.sampled_from([b"07-", b"-3-", b"3-", b"0#", b"\x05", b"\x7f", b"*", b"."]),
)
def test_rewritten_regex_matches_iff_original_matches(
    key: bytes, regex: bytes, prefix: bytes
) -> None:
    """fullmatch(rewritten, prefix + key) holds exactly when fullmatch(original, key) does."""
    rewritten = rewrite_filter(RowKeyRegexFilter(regex), prefix)
    assert isinstance(rewritten, RowKeyRegexFilter)
    original = re.fullmatch(regex, key) is not None
    assert (re.fullmatch(rewritten.regex, prefix + key) is not None) == original


@pytest.mark.parametrize("regex", [b"^abc", b"\\Aabc", b"[a^b]", b"\\^", b"[^^]", b"a\\\\b"])
def test_leading_anchor_and_literal_carets_are_accepted(regex: bytes) -> None:
    """A leading ^ or \\A and carets that are literals (escaped, in a class) are rewritten."""
    rewritten = rewrite_filter(RowKeyRegexFilter(regex), b"07-")
    assert isinstance(rewritten, RowKeyRegexFilter)
    assert rewritten.regex.startswith(b"\\x30\\x37\\x2d(?:")


@pytest.mark.parametrize("regex", [b"a^b", b"a\\Ab", b"x(\\Ay)", b"(^a)", b"^^a", b"[a]^b"])
def test_start_anchor_after_the_first_character_is_rejected(regex: bytes) -> None:
    """A ^ or \\A anywhere but the very start would match nothing on salted keys: refused."""
    with pytest.raises(QueryPlanError, match="start anchor"):
        rewrite_filter(RowKeyRegexFilter(regex), b"07-")


def test_word_boundary_against_word_prefix_is_rejected() -> None:
    """A leading \\b would see a salt prefix ending in a word character: refused."""
    with pytest.raises(QueryPlanError, match="word-boundary"):
        rewrite_filter(RowKeyRegexFilter(b"\\bfoo"), b"07_")


@pytest.mark.parametrize("regex", [b"(\\bfoo)", b".*\\bfoo", b"(?:\\Bx|\\bfoo)"])
@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param(SaltScheme(16, separator=b"_").prefix(7), id="separator-underscore"),
        pytest.param(SaltScheme(64, hash="phoenix").prefix(48), id="phoenix-byte-0"),
    ],
)
def test_word_boundary_not_at_first_byte_is_safe(regex: bytes, prefix: bytes) -> None:
    """A word boundary that can apply at the key's start either keeps its meaning or is refused."""
    assert prefix[-1:] in (b"_", b"0")  # salt prefixes that end in a word character
    try:
        rewritten = rewrite_filter(RowKeyRegexFilter(regex), prefix)
    except QueryPlanError:
        return
    assert isinstance(rewritten, RowKeyRegexFilter)
    assert re.fullmatch(regex, b"foo")
    assert re.fullmatch(rewritten.regex, prefix + b"foo")


def test_binary_phoenix_prefix_is_rejected() -> None:
    """A phoenix prefix byte >= 0x80 cannot be put into an RE2 regex: QueryPlanError."""
    s = scheme(256, "phoenix")
    with pytest.raises(QueryPlanError, match="binary salt prefix"):
        rewrite_filter(RowKeyRegexFilter(b"a.*"), s.prefix(200))
    with pytest.raises(QueryPlanError):
        plan_reads(ReadRowsQuery(row_filter=RowKeyRegexFilter(b"a.*")), s)
    assert rewrite_filter(RowKeyRegexFilter(b"a.*"), s.prefix(0x7F)) is not None


def test_filters_without_row_key_are_kept() -> None:
    """Filters that do not look at the key are passed through as the same object; None stays."""
    f = FamilyNameRegexFilter(b"cf")
    assert rewrite_filter(f, b"07-") is f
    assert rewrite_filter(None, b"07-") is None


def nested_filter() -> RowFilter:
    return RowFilterChain(
        [
            RowFilterUnion(
                [
                    RowKeyRegexFilter(b"a.*"),
                    RowFilterChain([FamilyNameRegexFilter(b"f2"), RowKeyRegexFilter(b".*b")]),
                ]
            ),
            ConditionalRowFilter(
                RowKeyRegexFilter(b"ab.*"),
                RowFilterChain([RowKeyRegexFilter(b"a.*"), CellsRowLimitFilter(1)]),
                RowFilterUnion([RowKeyRegexFilter(b"b.*"), StripValueTransformerFilter(True)]),
            ),
        ]
    )


def regexes_of(f: RowFilter | None) -> list[bytes]:
    if f is None:
        return []
    if isinstance(f, RowKeyRegexFilter):
        return [f.regex]
    if isinstance(f, RowFilterChain | RowFilterUnion):
        return [r for g in f.filters for r in regexes_of(g)]
    if isinstance(f, ConditionalRowFilter):
        return [
            r for g in (f.predicate_filter, f.true_filter, f.false_filter) for r in regexes_of(g)
        ]
    return []


def test_nested_filters_are_rewritten_everywhere() -> None:
    """Every row-key regex in chains, unions and conditions gets the prefix; nothing else moves."""
    original = nested_filter()
    rewritten = rewrite_filter(original, b"07-")
    assert isinstance(rewritten, RowFilterChain)
    assert isinstance(rewritten.filters[0], RowFilterUnion)
    assert isinstance(rewritten.filters[1], ConditionalRowFilter)
    before, after = regexes_of(original), regexes_of(rewritten)
    assert len(before) == len(after) == 5
    assert after == [b"\\x30\\x37\\x2d(?:" + r + b")" for r in before]
    assert regexes_of(original) == before  # the caller's filter is left untouched


@PROPERTY
@given(key=NEWLINE_FREE_KEYS)
def test_nested_rewritten_filter_selects_the_same_cells(key: bytes) -> None:
    """On a row, the rewritten nested filter keeps the same cells as the original does."""
    prefix = b"07-"

    def cells(row_key: bytes) -> list[Cell]:
        return [
            Cell(b"v1", row_key, "f1", b"q", 2000),
            Cell(b"v2", row_key, "f2", b"q", 1000),
        ]

    logical = _apply_filter(nested_filter(), key, cells(key))
    physical = _apply_filter(
        rewrite_filter(nested_filter(), prefix), prefix + key, cells(prefix + key)
    )
    shape = [(c.family, c.qualifier, c.timestamp_micros, c.value) for c in logical]
    assert [(c.family, c.qualifier, c.timestamp_micros, c.value) for c in physical] == shape


# -- one request over every bucket (small reads) ------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        ReadRowsQuery(row_ranges=RowRange(b"user42", b"user43")),
        ReadRowsQuery(row_keys=[b"a", b"b", b"zz"]),
        ReadRowsQuery(row_keys=[b"a"], row_ranges=[RowRange(b"m", b"n"), RowRange(b"p", b"q")]),
        ReadRowsQuery(
            row_ranges=RowRange(b"a", b"b"), limit=10, row_filter=FamilyNameRegexFilter("cf")
        ),
    ],
)
def test_a_bounded_read_becomes_one_request_naming_every_bucket(query: ReadRowsQuery) -> None:
    """Every bucket's keys and ranges, the filter, and a row limit, in one request; each
    physical key maps back to the sub-query of its bucket."""
    s = scheme(16)
    plan = plan_reads(query, s)
    one = plan_module.one_request(plan, 500)
    assert one is not None
    assert one.rows == 500
    assert one.query.limit == 500
    assert one.query.filter == query.filter
    subs = plan.subqueries
    assert sorted(one.query.row_keys) == sorted(k for sub in subs for k in sub.keys)
    assert len(one.query.row_ranges) == sum(len(sub.ranges) for sub in subs)
    for i, sub in enumerate(subs):
        assert one.owner(sub.prefix + b"anything") == i
    assert one.owner(b"\x00not salted") is None


@pytest.mark.parametrize(
    ("query", "why"),
    [
        (ReadRowsQuery(), "whole buckets"),
        (ReadRowsQuery(row_ranges=RowRange(start_key=b"a")), "open end"),
        (ReadRowsQuery(row_ranges=RowRange(end_key=b"a")), "open start"),
        (ReadRowsQuery(row_keys=[b"k"]), "one bucket"),
        (ReadRowsQuery(row_keys=[b"k%d" % i for i in range(MAX_KEYS_PER_REQUEST + 1)]), "keys"),
        (
            ReadRowsQuery(row_ranges=RowRange(b"a", b"b"), row_filter=RowKeyRegexFilter(b"a.*")),
            "a key regex is rewritten per bucket",
        ),
    ],
)
def test_reads_that_are_rarely_small_or_cannot_be_one_request_stay_per_bucket(
    query: ReadRowsQuery, why: str
) -> None:
    """Whole buckets, half-open ranges, one bucket, too many keys, per-bucket filters."""
    assert plan_module.one_request(plan_reads(query, scheme(16)), 500) is None, why


def test_a_cutoff_plan_with_a_legacy_side_stays_per_bucket() -> None:
    """The legacy side's keys carry no prefix: no one request."""
    legacy = SubQuery(None, b"", ranges=(KeyRange(b"a", True, b"b", False),))
    salted = SubQuery(0, b"0-", ranges=(KeyRange(b"0-a", True, b"0-b", False),))
    plan = plan_module.ReadPlan((salted, legacy))
    assert plan_module.one_request(plan, 10) is None
    assert plan_module.one_request(plan_module.ReadPlan((salted, salted)), 0) is None


def test_one_request_counts_ranges_against_the_request_caps() -> None:
    """Each logical range is sent once per bucket: 100 ranges over 16 buckets (1,600) are
    too many for one request; 50 over 16 (800) are not."""
    many = [RowRange(b"r%03d" % i, b"r%03d~" % i) for i in range(100)]
    assert (
        plan_module.one_request(plan_reads(ReadRowsQuery(row_ranges=many), scheme(16)), 9) is None
    )
    fewer = ReadRowsQuery(row_ranges=many[:50])
    one = plan_module.one_request(plan_reads(fewer, scheme(16)), 9)
    assert one is not None
    assert len(one.query.row_ranges) == 800


def test_explain_promises_the_one_request_only_where_a_read_tries_it() -> None:
    """A cutoff layout's plan never says it tries one request; a plain one does, with the
    row limit the read would use (2L + 2N for an ordered limit, L unordered)."""
    from datetime import UTC, datetime

    from saltedtable import CutoffPolicy, Layout
    from saltedtable._facade import plan_for

    query = ReadRowsQuery(row_ranges=RowRange(b"a#1", b"a#2"), limit=10)
    plain = plan_for(query, Layout(scheme(16)), ReadBudget(), ordered=True, slots=64)
    # The how: line of explain() is rendered from these settings (test_guard_stats checks
    # the words): a one request for up to 52 rows.
    assert plain.settings() == ReadSettings(
        ordered=True, budget=ReadBudget(), slots=64, subqueries=16, limit=10, one_request_rows=52
    )
    unordered = plan_for(query, Layout(scheme(16)), ReadBudget(), ordered=False, slots=64)
    assert unordered.settings().one_request_rows == 10
    assert unordered.settings().ordered is False
    cutoff = CutoffPolicy(datetime(2024, 1, 1, tzinfo=UTC), before_last(b"#"))
    layout = Layout(scheme(16), cutoff)
    cut = plan_for(query, layout, ReadBudget(), ordered=True, slots=64)
    assert cut.settings().one_request_rows == 0  # no one request promised


def test_a_reads_settings_are_decided_once_and_shown_apart_from_its_plan() -> None:
    """``read_for`` returns the plan (what) and the settings (how) apart: the bare plan
    carries no settings, the cutoff gate of the one request is set there only, a setting
    changed later keeps that gate, and ``explain(settings=...)`` shows the settings given."""
    import dataclasses
    from datetime import UTC, datetime

    from saltedtable import CutoffPolicy, Layout
    from saltedtable._facade import plan_for, read_for

    query = ReadRowsQuery(row_ranges=RowRange(b"a#1", b"a#2"), limit=10)
    plan, settings = read_for(query, Layout(scheme(16)), ReadBudget(), ordered=True, slots=64)
    assert plan.how is None
    assert plan == plan_reads(query, scheme(16))
    assert settings.one_request_rows == 52
    assert "for up to 52 rows" in plan.explain(settings=settings)
    assert (
        plan.explain(settings=settings)
        == plan_for(query, Layout(scheme(16)), ReadBudget(), ordered=True, slots=64).explain()
    )
    cutoff = CutoffPolicy(datetime(2024, 1, 1, tzinfo=UTC), before_last(b"#"))
    _, cut = read_for(query, Layout(scheme(16), cutoff), ReadBudget(), ordered=True, slots=64)
    assert cut.one_request_rows == 0
    shut = dataclasses.replace(plan, how=plan.settings(ReadBudget(), slots=64, one_request=False))
    assert shut.settings().one_request_rows == 0
    shown = shut.settings(ordered=False)  # another setting changed: the table's gate stays shut
    assert (shown.one_request_rows, shown.ordered, shown.slots) == (0, False, 64)
    assert (
        plan_for(query, Layout(scheme(16)), ReadBudget(), ordered=True, slots=64)
        .settings(ordered=False)
        .one_request_rows
        == 10
    )


_KEY_BYTES = st.binary(max_size=4)


@given(_KEY_BYTES, st.booleans(), _KEY_BYTES, st.booleans())
def test_a_requests_row_range_is_the_one_key_range_converts_to(
    start: bytes, start_closed: bool, end: bytes, end_closed: bool
) -> None:
    """The cheaply built ranges of a request equal ``KeyRange.to_row_range``'s, hash alike
    (``ReadRowsQuery`` files them in a dict) and make the same request."""
    from saltedtable._scheme.ranges import KeyRange

    assume(not start or not end or start <= end)  # the planner never sends an inverted range
    rng = KeyRange(start, start_closed, end, end_closed)
    made, plain = plan_module._request_range(rng), rng.to_row_range()
    assert made == plain
    assert plain == made
    assert hash(made) == hash(plain)
    assert made._pb == plain._pb
    assert repr(made) == repr(plain)
    target = mock.Mock(app_profile_id=None, _request_path={"table_name": "t"})
    assert ReadRowsQuery(row_ranges=[made])._to_pb(target) == ReadRowsQuery(
        row_ranges=[plain]
    )._to_pb(target)
    assert len(ReadRowsQuery(row_ranges=[made, plain]).row_ranges) == 1


def test_whether_a_plan_can_be_one_request_is_worked_out_once() -> None:
    plan = plan_reads(ReadRowsQuery(row_ranges=RowRange(b"a", b"b")), SaltScheme(4))
    with mock.patch.object(
        plan_module, "_one_request_order", wraps=plan_module._one_request_order
    ) as order:
        assert plan.one_request_order is not None
        plan.settings(ReadBudget())
        assert plan_module.one_request(plan, 10) is not None
    assert order.call_count == 1


@pytest.mark.parametrize("fast", [True, False])
def test_requests_use_public_ranges_when_the_client_internals_are_off(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch (or a client whose RowRange is built otherwise) gets ranges built publicly."""
    monkeypatch.setattr(plan_module, "_FAST_RANGES", fast)
    scheme = SaltScheme(4)
    plan = plan_reads(ReadRowsQuery(row_ranges=[RowRange(b"a", b"m")]), scheme)
    for internals in (True, False):
        for sub in plan.subqueries:
            query = PageCursor(sub, internals=internals).next_query(10)
            assert query is not None
            public = [r.to_row_range() for r in sub.ranges]
            assert query.row_ranges == public
            builds = {type(r) is RowRange for r in query.row_ranges}
            assert builds == {not (internals and fast)}
        one = plan_module.one_request(plan, 10, internals=internals)
        assert one is not None
        assert {type(r) is RowRange for r in one.query.row_ranges} == {not (internals and fast)}
