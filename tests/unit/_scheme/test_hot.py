"""Hot keys (pure): placement of hot parts and rows, routing, combining, filters, the split K."""

from __future__ import annotations

import math
import pickle
from collections import Counter
from typing import Any

import pytest
from google.cloud.bigtable.data import row_filters as rf
from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from saltedtable import RowKeyError, SaltScheme, SaltSchemeError, fields
from saltedtable._exceptions import SplitKeyError
from saltedtable._scheme.hot import (
    HotLayout,
    SplitFilter,
    _piece_level,
    check_hot_change,
    combine_rows,
    jump_hash,
    plan_split_filter,
    propose_split,
    read_buckets,
    read_keys,
    refuse_atomic,
    route_mutations,
    spread_of_token,
    spread_offsets,
)
from saltedtable.advise.model import Access, advise
from tests.hot_model import (
    AGGREGATES,
    RowModel,
    SplitModel,
    cells_of,
    mutation_strategy,
)

N = 8
TENANT = SaltScheme(16, key_part=fields(1))
PROPERTY = settings(max_examples=300, deadline=None)


# -- the K buckets -----------------------------------------------------------------------


@given(st.integers(1, 80), st.data())
def test_spread_offsets_are_distinct_start_at_home_and_grow_by_one(ring: int, data: Any) -> None:
    """Offsets start at 0, never repeat, and the list for K is a prefix of the list for K + 1."""
    k = data.draw(st.integers(1, ring))
    offsets = spread_offsets(ring, k)
    assert offsets[0] == 0
    assert len(set(offsets)) == k
    assert all(0 <= o < ring for o in offsets)
    if k < ring:
        assert spread_offsets(ring, k + 1)[:k] == offsets


def test_spread_offsets_halve_the_ring() -> None:
    """On 16 buckets the K buckets are evenly spread for every power of two."""
    assert spread_offsets(16, 2) == (0, 8)
    assert spread_offsets(16, 4) == (0, 8, 4, 12)
    assert sorted(spread_offsets(16, 8)) == list(range(0, 16, 2))


@given(st.integers(0, 2**64 - 1), st.integers(1, 64), st.integers(1, 64))
def test_jump_hash_moves_a_key_only_to_a_new_bucket(key: int, k1: int, extra: int) -> None:
    """Raising K keeps a key where it was or moves it to one of the new numbers."""
    before, after = jump_hash(key, k1), jump_hash(key, k1 + extra)
    assert 0 <= before < k1
    assert 0 <= after < k1 + extra
    assert after == before or after >= k1


def test_jump_hash_spreads_evenly() -> None:
    """10,000 keys over 5 numbers: each within 10% of its fair share."""
    counts = Counter(jump_hash(spread_of_token(str(i)), 5) for i in range(10_000))
    assert set(counts) == set(range(5))
    assert all(1800 <= c <= 2200 for c in counts.values())


# -- hot parts ---------------------------------------------------------------------------


_part = st.sampled_from((b"t1", b"t2", b"tenant-3", b"x"))
_suffix = st.binary(min_size=0, max_size=6).filter(lambda b: b"#" not in b)


@PROPERTY
@given(_part, st.lists(_suffix, min_size=1, max_size=30), st.integers(2, 16))
def test_a_hot_parts_keys_each_go_to_one_of_its_k_buckets(
    part: bytes, suffixes: list[bytes], k: int
) -> None:
    """Every key of a hot part has one bucket, among the K a scan of the part reads."""
    layout = HotLayout(TENANT, parts={part: k})
    buckets = layout.part_buckets(part)
    assert len(set(buckets)) == k
    assert buckets[0] == TENANT.bucket_of_part(part)
    scan = layout.scan_buckets(part + b"#")
    assert scan == tuple(sorted(buckets))
    for suffix in suffixes:
        key = part + b"#" + suffix
        (physical,) = layout.physical_keys(key)
        assert layout.bucket_of(key) in buckets
        assert physical == TENANT.prefix(layout.bucket_of(key)) + key


def test_an_unlisted_part_is_unchanged() -> None:
    """Rows of a part not on the list stay in the scheme's bucket; scans read that one bucket."""
    layout = HotLayout(TENANT, parts={b"t1": 4})
    for i in range(200):
        key = f"t9#{i}".encode()
        assert layout.physical_keys(key) == (TENANT.salt_key(key),)
    assert layout.scan_buckets(b"t9#") == (TENANT.bucket_of(b"t9"),)
    assert layout.scan_buckets(b"t") is None  # the prefix fixes no part: every bucket


def test_a_hot_part_spreads_its_rows_evenly() -> None:
    """4,000 rows of one part over K = 4 buckets: each bucket within 10% of 1,000."""
    layout = HotLayout(TENANT, parts={b"t1": 4})
    counts = Counter(layout.bucket_of(f"t1#{i}".encode()) for i in range(4000))
    assert set(counts) == set(layout.part_buckets(b"t1"))
    assert all(900 <= c <= 1100 for c in counts.values())


@pytest.mark.parametrize("hash_name", ["crc32", "java", "phoenix"])
def test_hot_parts_work_on_every_prefix_format(hash_name: str) -> None:
    """java's 2N - 1 buckets and phoenix's salt byte: K distinct buckets of the scheme."""
    scheme = SaltScheme(8, hash=hash_name, key_part=fields(1))
    layout = HotLayout(scheme, parts={b"t1": 8}, rows={b"t2#c": 8})
    assert len(set(layout.part_buckets(b"t1"))) == 8
    assert set(layout.part_buckets(b"t1")) <= set(scheme.bucket_ids)
    subs = layout.physical_keys(b"t2#c")
    assert len(set(subs)) == 8
    assert subs[0] == scheme.salt_key(b"t2#c")


@PROPERTY
@given(
    _part,
    st.lists(_suffix, min_size=1, max_size=30),
    st.integers(1, 16),
    st.integers(0, 15),
)
def test_listing_a_part_or_raising_its_k_never_hides_a_row(
    part: bytes, suffixes: list[bytes], k1: int, more: int
) -> None:
    """Until the backfill, a point read consults the old place too and a scan reads its bucket."""
    k2 = min(16, max(2, k1 + more))
    before = HotLayout(TENANT, parts={part: k1} if k1 > 1 else {})
    after = HotLayout(TENANT, parts={part: k2})
    check_hot_change(before, after)
    scan = read_buckets(before, after, part + b"#")
    assert scan is not None
    for suffix in suffixes:
        key = part + b"#" + suffix
        keys = read_keys(before, after, key)
        assert before.physical_keys(key)[0] in keys
        assert after.physical_keys(key)[0] == keys[-1]  # the new place ranks last
        assert len(keys) <= 2
        assert {before.bucket_of(key), after.bucket_of(key)} <= set(scan)
        # Raising K moves a key only to a new bucket (the fewest rows to backfill).
        assert after.bucket_of(key) in (
            before.bucket_of(key),
            *after.part_buckets(part)[max(k1, 1) :],
        )


# -- hot rows: placement -------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, N])
def test_a_split_row_has_k_sub_rows_in_k_buckets_home_first(k: int) -> None:
    """Sub-rows are ``prefix(b_j) + key``: no suffix, K buckets, sub-row 0 the unsplit row."""
    scheme = SaltScheme(N)
    layout = HotLayout(scheme, rows={b"counter": k})
    subs = layout.physical_keys(b"counter")
    assert len(subs) == k
    assert subs[0] == scheme.salt_key(b"counter")
    assert [scheme.split_key(s)[1] if i == 0 else s[2:] for i, s in enumerate(subs)] == [
        b"counter"
    ] * k
    assert len({s[:2] for s in subs}) == k
    assert layout.is_split(b"counter")
    assert not layout.is_split(b"other")


def test_a_hot_row_under_a_hot_part_widens_the_parts_scan() -> None:
    """A split row spreads from its own bucket; a scan of its part reads its sub-rows too."""
    layout = HotLayout(TENANT, parts={b"t1": 2}, rows={b"t1#ctr": 4})
    subs = layout.row_buckets(b"t1#ctr")
    assert subs[0] == layout.bucket_of(b"t1#ctr")
    assert len(set(subs)) == 4
    scan = layout.scan_buckets(b"t1#")
    assert scan is not None
    assert set(layout.part_buckets(b"t1")) | set(subs) == set(scan)
    assert layout.scan_buckets(b"t1#other") == tuple(sorted(layout.part_buckets(b"t1")))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rows": {b"r": 1}}, "K = 1 is the unsplit row"),
        ({"rows": {b"r": N + 1}}, "1 < K <= N=8"),
        ({"rows": {b"r": True}}, "K must be an integer"),
        ({"rows": {b"": 2}}, "must not be empty"),
        ({"parts": {b"t": 2}}, "list 't' as a hot row instead"),
    ],
)
def test_bad_hot_lists_are_refused(kwargs: dict[str, Any], match: str) -> None:
    """A K outside 2..N, an empty key, or hot parts on a whole-key scheme: a clear error."""
    with pytest.raises(SaltSchemeError, match=match):
        HotLayout(SaltScheme(N), **kwargs)


def test_a_change_may_only_list_more_and_raise_k() -> None:
    """Lowering K, unlisting, or a new scheme is refused; listing and raising pass."""
    one = HotLayout(TENANT, parts={b"t1": 4}, rows={b"t2#c": 3})
    check_hot_change(one, HotLayout(TENANT, parts={b"t1": 8, b"t3": 2}, rows={b"t2#c": 3}))
    with pytest.raises(SaltSchemeError, match="K may only rise \\(from 4 to 2\\)"):
        check_hot_change(one, HotLayout(TENANT, parts={b"t1": 2}, rows={b"t2#c": 3}))
    with pytest.raises(SaltSchemeError, match="hot row 't2#c': K may only rise \\(from 3 to 1\\)"):
        check_hot_change(one, HotLayout(TENANT, parts={b"t1": 4}))
    with pytest.raises(SaltSchemeError, match="keeps the scheme"):
        check_hot_change(one, HotLayout(SaltScheme(16, key_part=fields(2)), parts={b"t1": 4}))


def test_a_change_that_moves_a_split_rows_home_is_refused() -> None:
    """Listing a part moves most of its rows; a split row under it must not move."""
    before = HotLayout(TENANT, rows={b"t1#a": 3, b"t1#b": 3})
    after = HotLayout(TENANT, parts={b"t1": 4}, rows={b"t1#a": 3, b"t1#b": 3})
    moved = [r for r in (b"t1#a", b"t1#b") if before.bucket_of(r) != after.bucket_of(r)]
    assert moved  # (the jump hash moves 3 rows in 4 when a part is listed with K = 4)
    with pytest.raises(SaltSchemeError, match=r"is split, and this change .* moves its home"):
        check_hot_change(before, after)
    # Listing the part first, then splitting its rows: accepted.
    listed = HotLayout(TENANT, parts={b"t1": 4})
    check_hot_change(HotLayout(TENANT), listed)
    check_hot_change(listed, after)


def test_a_sub_row_key_too_long_for_bigtable_is_refused() -> None:
    """java's negative buckets have a longer prefix than the home's: the sub-row must fit."""
    scheme = SaltScheme(8, hash="java")
    key = next(
        k
        for k in (b"%04d" % i + b"x" * 4090 for i in range(100))
        if len(scheme.prefix(scheme.bucket_of(k))) == 2
    )
    layout = HotLayout(scheme, rows={key: 8})
    with pytest.raises(RowKeyError, match=r"sub-row key .* is 4097 bytes"):
        layout.physical_keys(key)


def test_layouts_compare_and_hash_by_value() -> None:
    """Layouts with the same lists are equal whatever the key types given; they pickle."""
    a = HotLayout(TENANT, parts={"t1": 4}, rows={b"t2#c": 3})
    b = HotLayout(TENANT, parts={b"t1": 4}, rows={"t2#c": 3})
    assert a == b
    assert hash(a) == hash(b)
    assert a != HotLayout(TENANT, parts={b"t1": 4})
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a) == f"HotLayout({TENANT}, parts={{b't1': 4}}, rows={{b't2#c': 3}})"


# -- hot rows: routing -----------------------------------------------------------------------


def test_each_column_lives_in_one_sub_row_and_adds_of_a_call_stay_together() -> None:
    """SetCell by column, AddToCell by spread (one sub-row per call), deletes to every sub-row."""
    layout = HotLayout(SaltScheme(N), rows={b"r": 4})
    subs = layout.physical_keys(b"r")
    muts: list[Mutation] = [
        SetCell("cf", b"a", b"1", 1000),
        AddToCell("sm", b"n", 1, 0),
        AddToCell("mx", b"n", 7, 0),
        DeleteAllFromFamily("cg"),
    ]
    for spread in range(8):
        routed = dict(
            route_mutations(b"r", muts, layout=layout, aggregates=AGGREGATES, spread=spread)
        )
        adds = [p for p, m in routed.items() if any(isinstance(x, AddToCell) for x in m)]
        assert adds == [subs[spread % 4]]
        assert len(routed[subs[spread % 4]]) >= 2
        sets = [p for p, m in routed.items() if any(isinstance(x, SetCell) for x in m)]
        assert sets == [subs[layout.sub_row(b"r", "cf", b"a")]]
        assert set(routed) == set(subs)  # the family delete reaches all four
    assert spread_of_token("writer-7") == spread_of_token(b"writer-7")


def test_an_unsplit_row_is_one_write() -> None:
    """A row not on the list gets its mutations unchanged, at its one physical key."""
    layout = HotLayout(SaltScheme(N), rows={b"other": 2})
    muts: list[Mutation] = [SetCell("cf", b"a", b"1", 1000), DeleteAllFromRow()]
    assert route_mutations(b"r", muts, layout=layout, aggregates={}) == [
        (SaltScheme(N).salt_key(b"r"), muts)
    ]


class _MergeToCell(Mutation):
    """A mutation kind the router does not know (MergeToCell is not in the 2.50 client)."""

    def _to_dict(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(
    ("mutation", "match"),
    [
        (SetCell("sm", b"n", b"\x00" * 8, 0), "SetCell in the aggregate family 'sm'"),
        (AddToCell("hll", b"n", 1, 0), "aggregates with 'int64 hllpp_unique_count'"),
        (AddToCell("cf", b"n", 1, 0), "not an aggregate family this table object knows"),
        (_MergeToCell(), "_MergeToCell cannot be spread"),
    ],
)
def test_writes_a_split_row_cannot_combine_are_refused(mutation: Mutation, match: str) -> None:
    """SetCell in an aggregate family, HLL, unknown families and kinds: refused, naming the row."""
    layout = HotLayout(SaltScheme(N), rows={b"r": 2})
    aggregates = {**AGGREGATES, "hll": "int64 hllpp_unique_count"}
    with pytest.raises(SplitKeyError, match=f"row 'r' is split into 2 sub-rows: .*{match}"):
        route_mutations(b"r", [mutation], layout=layout, aggregates=aggregates)


def test_single_row_atomics_are_refused_on_a_split_row() -> None:
    """check_and_mutate_row / read_modify_write_row: refused on split rows and rows being moved."""
    layout = HotLayout(SaltScheme(N), rows={b"r": 3})
    refuse_atomic(layout, b"other", "check_and_mutate_row")
    with pytest.raises(SplitKeyError, match=r"read_modify_write_row .* 'r' is split into 3"):
        refuse_atomic(layout, "r", "read_modify_write_row")
    # A hot part's row being moved sits in two places until the backfill.
    before, after = HotLayout(TENANT), HotLayout(TENANT, parts={b"t1": 4})
    moving = next(
        k for k in (b"t1#%d" % i for i in range(99)) if len(read_keys(before, after, k)) > 1
    )
    staying = next(
        k for k in (b"t1#%d" % i for i in range(99)) if len(read_keys(before, after, k)) == 1
    )
    refuse_atomic(after, staying, "check_and_mutate_row", before)
    refuse_atomic(after, moving, "check_and_mutate_row")  # after the backfill
    with pytest.raises(SplitKeyError, match="is moving between 2 places"):
        refuse_atomic(after, moving, "check_and_mutate_row", before)


# -- the single-row model ------------------------------------------------------------------

_call = st.tuples(st.lists(mutation_strategy(), min_size=1, max_size=3), st.integers(0, 1000))


@PROPERTY
@given(
    st.lists(st.tuples(st.sampled_from((1, 2, 3, N)), st.lists(_call, max_size=12)), max_size=4),
)
def test_a_split_row_reads_as_the_plain_row_through_splits_and_raises(
    phases: list[tuple[int, list[tuple[list[Mutation], int]]]],
) -> None:
    """Random calls through the routing, K rising mid-sequence (home row first): equal reads."""
    scheme = SaltScheme(N)
    key = b"hot-row"
    plain, split = RowModel(), SplitModel()
    k_now = 1
    previous: HotLayout | None = None
    for k, calls in phases:
        k_now = max(k_now, k)
        layout = HotLayout(scheme, rows={key: k_now} if k_now > 1 else {})
        for mutations, spread in calls:
            for mutation in mutations:
                plain.apply(mutation)
            split.write(key, mutations, layout, spread, previous)
        assert cells_of(split.read(key, layout, previous)) == cells_of(plain.row(key))
        previous = layout


@PROPERTY
@given(
    st.lists(
        st.tuples(st.lists(mutation_strategy(big=True), min_size=1, max_size=3), st.integers()),
        max_size=10,
    ),
    st.sampled_from((2, 3, N)),
)
def test_big_sums_combine_exactly(calls: list[tuple[list[Mutation], int]], k: int) -> None:
    """Sums, minimums and maximums over the whole int64 range combine as in one row."""
    layout = HotLayout(SaltScheme(N), rows={b"r": k})
    plain, split = RowModel(), SplitModel()
    for mutations, spread in calls:
        for mutation in mutations:
            plain.apply(mutation)
        split.write(b"r", mutations, layout, spread)
    assert cells_of(split.read(b"r", layout)) == cells_of(plain.row(b"r"))


def _backfill(model: SplitModel, before: HotLayout, after: HotLayout, key: bytes) -> None:
    """Move a row from its old place to its new one, never over a newer cell; delete the old."""
    new = after.physical_keys(key)[0]
    for old in read_keys(before, after, key)[:-1]:
        source = model.rows.pop(old, None)
        if source is None:
            continue
        target = model.rows.setdefault(new, RowModel())
        for column, cells in source.cells.items():
            kept = target.cells.setdefault(column, {})
            for ts, value in cells.items():
                if column[0] in AGGREGATES and ts in kept:
                    AGGREGATE = AGGREGATES[column[0]].split()[-1]
                    a, b = kept[ts], value
                    assert isinstance(a, int)
                    assert isinstance(b, int)
                    kept[ts] = (
                        (a + b + 2**63) % 2**64 - 2**63
                        if AGGREGATE == "sum"
                        else (min if AGGREGATE == "min" else max)(a, b)
                    )
                else:
                    kept.setdefault(ts, value)


@PROPERTY
@given(
    st.lists(_call, max_size=6),
    st.lists(_call, max_size=6),
    st.sampled_from((1, 2, 4)),
    st.integers(0, 12),
    st.integers(0, 50),
)
def test_a_part_change_reads_both_places_until_the_backfill(
    early: list[tuple[list[Mutation], int]],
    late: list[tuple[list[Mutation], int]],
    k1: int,
    more: int,
    row: int,
) -> None:
    """Rows of a part listed or raised mid-stream read as one row, before and after a backfill."""
    key = b"t1#" + str(row).encode()
    before = HotLayout(TENANT, parts={b"t1": k1} if k1 > 1 else {})
    after = HotLayout(TENANT, parts={b"t1": min(16, max(2, k1 + more))})
    plain, split = RowModel(), SplitModel()
    for mutations, spread in early:
        for mutation in mutations:
            plain.apply(mutation)
        split.write(key, mutations, before, spread)
    for mutations, spread in late:
        for mutation in mutations:
            plain.apply(mutation)
        split.write(key, mutations, after, spread, previous=before)
    assert cells_of(split.read(key, after, before)) == cells_of(plain.row(key))
    _backfill(split, before, after, key)
    assert cells_of(split.read(key, after)) == cells_of(plain.row(key))
    assert set(split.rows) <= {after.physical_keys(key)[0]}


@PROPERTY
@given(
    st.lists(_call, max_size=6),
    st.lists(_call, max_size=6),
    st.sampled_from((1, 2, 4)),
    st.integers(0, 12),
    st.sampled_from((1, 2, 3)),
    st.integers(0, 5),
    st.integers(0, 50),
)
def test_a_split_row_under_a_hot_part_reads_as_one_row_through_changes(
    early: list[tuple[list[Mutation], int]],
    late: list[tuple[list[Mutation], int]],
    k1: int,
    more: int,
    r1: int,
    r_more: int,
    row: int,
) -> None:
    """A hot part and a split row in it, both raised mid-stream (where allowed): one row."""
    key = b"t1#" + str(row).encode()
    before = HotLayout(
        TENANT, parts={b"t1": k1} if k1 > 1 else {}, rows={key: r1} if r1 > 1 else {}
    )
    after = HotLayout(
        TENANT, parts={b"t1": min(16, max(2, k1 + more))}, rows={key: r1 + r_more + 1}
    )
    try:
        check_hot_change(before, after)
    except SaltSchemeError:
        assume(False)
    plain, split = RowModel(), SplitModel()
    for mutations, spread in early:
        for mutation in mutations:
            plain.apply(mutation)
        split.write(key, mutations, before, spread)
    for mutations, spread in late:
        for mutation in mutations:
            plain.apply(mutation)
        split.write(key, mutations, after, spread, previous=before)
    assert cells_of(split.read(key, after, before)) == cells_of(plain.row(key))
    assert set(split.rows) <= set(after.physical_keys(key))


# -- combining -----------------------------------------------------------------------------


def _row(key: bytes, *cells: tuple[str, bytes, int, bytes]) -> Row:
    return Row(key, [Cell(v, key, f, q, ts) for f, q, ts, v in cells])


def _i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def test_combine_sums_mins_maxes_and_keeps_the_latest_tie() -> None:
    """Aggregates combine by kind; a plain tie keeps the later sub-row's cell; newest first."""
    a = _row(
        b"p0",
        ("cf", b"x", 2000, b"old"),
        ("mn", b"m", 0, _i64(5)),
        ("mx", b"m", 0, _i64(5)),
        ("sm", b"s", 0, _i64(3)),
    )
    b = _row(
        b"p1",
        ("cf", b"x", 2000, b"new"),
        ("cf", b"x", 1000, b"older"),
        ("mn", b"m", 0, _i64(-2)),
        ("mx", b"m", 0, _i64(9)),
        ("sm", b"s", 0, _i64(4)),
    )
    row = combine_rows(b"k", [a, None, b], AGGREGATES)
    assert row is not None
    assert row.row_key == b"k"
    assert cells_of(row) == [
        ("cf", b"x", 2000, b"new", ()),
        ("cf", b"x", 1000, b"older", ()),
        ("mn", b"m", 0, _i64(-2), ()),
        ("mx", b"m", 0, _i64(9), ()),
        ("sm", b"s", 0, _i64(7), ()),
    ]
    assert combine_rows(b"k", [None, None], AGGREGATES) is None


def test_combined_sums_wrap_at_64_bits() -> None:
    """Partials whose sum leaves int64 wrap around, as the emulator's int64 sum does."""
    top = [_row(b"p", ("sm", b"s", 0, _i64(2**63 - 1))), _row(b"q", ("sm", b"s", 0, _i64(2)))]
    assert cells_of(combine_rows(b"k", top, AGGREGATES)) == [
        ("sm", b"s", 0, _i64(-(2**63) + 1), ())
    ]


def test_combine_keeps_stripped_aggregates_empty_and_refuses_hll() -> None:
    """A stripped value stays empty; HLL partials in two sub-rows cannot be combined."""
    stripped = [_row(b"p", ("sm", b"s", 0, b"")), _row(b"q", ("sm", b"s", 0, b""))]
    assert cells_of(combine_rows(b"k", stripped, AGGREGATES)) == [("sm", b"s", 0, b"", ())]
    hll = [_row(b"p", ("h", b"s", 0, b"sketch1")), _row(b"q", ("h", b"s", 0, b"sketch2"))]
    with pytest.raises(SplitKeyError, match="'h' aggregates with 'int64 hllpp_unique_count'"):
        combine_rows(b"k", hll, {"h": "int64 hllpp_unique_count"})
    bad = [_row(b"p", ("sm", b"s", 0, b"\x01")), _row(b"q", ("sm", b"s", 0, _i64(1)))]
    with pytest.raises(SplitKeyError, match="not a big-endian int64"):
        combine_rows(b"k", bad, AGGREGATES)


# -- filters -------------------------------------------------------------------------------


def test_cell_predicates_go_down_and_limits_are_re_applied() -> None:
    """Predicates and the first column limit go to each sub-row; row steps run on the whole."""
    fam = rf.FamilyNameRegexFilter("cf")
    ts = rf.TimestampRangeFilter()
    plan = plan_split_filter(
        rf.RowFilterChain(
            [
                fam,
                rf.RowFilterChain([ts, rf.CellsColumnLimitFilter(2)]),
                rf.CellsRowOffsetFilter(1),
                rf.CellsRowLimitFilter(3),
                rf.StripValueTransformerFilter(True),
                rf.ApplyLabelFilter("x"),
            ]
        )
    )
    assert plan.down == rf.RowFilterChain([fam, ts, rf.CellsColumnLimitFilter(2)])
    assert plan.after == (
        ("column_limit", 2),
        ("row_offset", 1),
        ("row_limit", 3),
        ("strip", 0),
        ("label", "x"),
    )
    assert plan_split_filter(None) == SplitFilter(None)
    keys_only = plan_split_filter(
        rf.RowFilterChain([rf.CellsRowLimitFilter(1), rf.StripValueTransformerFilter(True)])
    )
    assert keys_only == SplitFilter(None, (("row_limit", 1), ("strip", 0)))
    regex = rf.RowKeyRegexFilter(b"k.*")
    assert plan_split_filter(rf.RowFilterChain([rf.CellsRowLimitFilter(1), regex])).down == regex


def test_the_after_steps_run_in_order_on_the_combined_row() -> None:
    """Column limit, offset, limit, strip and label act on the logical row's cells."""
    row = _row(
        b"k",
        ("cf", b"a", 3, b"3"),
        ("cf", b"a", 2, b"2"),
        ("cf", b"a", 1, b"1"),
        ("cf", b"b", 1, b"b"),
    )
    plan = SplitFilter(
        None, (("column_limit", 2), ("row_offset", 1), ("row_limit", 2), ("strip", 0))
    )
    assert cells_of(plan.apply(row)) == [("cf", b"a", 2, b"", ()), ("cf", b"b", 1, b"", ())]
    assert cells_of(SplitFilter(None, (("label", "x"),)).apply(row))[0][4] == ("x",)
    assert SplitFilter(None, (("row_offset", 9),)).apply(row) is None
    assert SplitFilter(None).apply(None) is None


@pytest.mark.parametrize(
    ("row_filter", "match"),
    [
        (rf.ValueRegexFilter(b"v.*"), "ValueRegexFilter"),
        (rf.LiteralValueFilter(b"v"), "LiteralValueFilter"),
        (rf.ValueRangeFilter(b"a", b"b"), "ValueRangeFilter"),
        (rf.RowSampleFilter(0.5), "RowSampleFilter"),
        (rf.SinkFilter(True), "SinkFilter"),
        (rf.RowFilterUnion([rf.PassAllFilter(True)]), "RowFilterUnion"),
        (
            rf.ConditionalRowFilter(rf.PassAllFilter(True), rf.PassAllFilter(True)),
            "ConditionalRowFilter",
        ),
        (
            rf.RowFilterChain([rf.CellsColumnLimitFilter(1), rf.TimestampRangeFilter()]),
            "TimestampRangeFilter after a cell limit",
        ),
        (
            rf.RowFilterChain([rf.CellsRowLimitFilter(1), rf.FamilyNameRegexFilter("cf")]),
            "FamilyNameRegexFilter after a cell limit",
        ),
    ],
)
def test_filters_that_judge_parts_are_refused(row_filter: rf.RowFilter, match: str) -> None:
    """Value tests, sampling, conditions, sinks, interleaves, predicates after limits: refused."""
    with pytest.raises(SplitKeyError, match=f"{match} cannot be answered on row 'ctr'"):
        plan_split_filter(row_filter, b"ctr")


# -- the advisor's K -----------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.05, 0.1, 0.2, 0.4, 0.6])
def test_the_proposed_k_is_the_smallest_that_meets_the_target(share: float) -> None:
    """Level at K at or below the target, at K - 1 above it; the command names part and K."""
    p = propose_split(
        "part", b"tenant 7", share, buckets=64, tablets=32, distinct=10_000, target=1.5
    )
    assert p is not None
    assert p.meets
    assert p.level <= 1.5
    assert _piece_level(share, p.k - 1, 10_000, 32) > 1.5 or p.k == 2
    assert p.command == f"saltedtable split TABLE --part 'tenant 7' -k {p.k}"


def test_no_proposal_when_the_key_is_not_hot_and_the_cap_is_said() -> None:
    """A key within the target gets None; a K capped at N says it does not meet the target."""
    cold = propose_split("row", b"r", 0.001, buckets=8, tablets=32, distinct=1000, target=1.5)
    assert cold is None
    p = propose_split(
        "row", b"r", 0.5, buckets=4, tablets=32, distinct=1000, target=1.5, share_high=0.6
    )
    assert p is not None
    assert p.k == 4
    assert p.k_high == 4
    assert not p.meets
    assert p.command == "saltedtable split TABLE --row r -k 4"
    with pytest.raises(ValueError, match="shares are between 0 and 1"):
        propose_split("row", b"r", 1.5, buckets=4, tablets=32, distinct=1000, target=1.5)


def test_the_advisors_k_on_synthetic_skew() -> None:
    """One key at 40%: the advisor's hot_key_floor is the K = 1 level; K pieces meet the target."""
    hot, rest = b"hot", [f"k{i:04d}".encode() for i in range(999)]
    accesses = [Access(hot, 666.0)] + [Access(k, 1.0) for k in rest]
    advice = advise(accesses, candidates=(1, 8), resamples=20, windows=1)
    key, share = advice.top_keys[0]
    assert key == hot
    assert share == pytest.approx(0.4, abs=0.001)
    assert _piece_level(share, 1, advice.distinct_keys, advice.tablets) == pytest.approx(
        advice.hot_key_floor
    )
    p = propose_split(
        "row",
        key,
        share,
        buckets=64,
        tablets=advice.tablets,
        distinct=advice.distinct_keys,
        target=advice.target,
        share_high=0.45,
    )
    assert p is not None
    assert p.k_high >= p.k
    # The sample with the hot key as K pieces spread over the key space (sub-rows sit in K
    # buckets far apart), cut into the advisor's T equal tablets: the hottest meets the target.
    others = [1.0] * len(rest)
    loads = list(others)
    total = len(others) + p.k
    for j in range(p.k):
        loads.insert(round((j + 0.5) * total / p.k), 666.0 / p.k)
    tablets = [0.0] * advice.tablets
    for rank, load in enumerate(loads):
        tablets[rank * advice.tablets // len(loads)] += load
    level = max(tablets) / (sum(tablets) / advice.tablets)
    assert level <= advice.target * 1.05
    assert math.isclose(p.level, _piece_level(share, p.k, advice.distinct_keys, advice.tablets))
