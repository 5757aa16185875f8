"""split_plan: a plan cut into independent splits that cover every sub-query exactly once."""

from __future__ import annotations

import itertools
import pickle

import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row_filters import FamilyNameRegexFilter
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import SCHEME_ROW_KEY, KeyRange, Layout, SaltScheme, SubQuery, plan_reads
from saltedtable._read.split import Split, split_plan

ALPHABET = b"\x00ab\xff"
#: Every non-empty key up to four bytes over the alphabet: bounds have at most three,
#: so this also holds every bound's immediate successor (bound + b"\x00").
UNIVERSE = [bytes(t) for n in range(1, 5) for t in itertools.product(ALPHABET, repeat=n)]


def contains(rng: KeyRange, key: bytes) -> bool:
    """Whether ``key`` lies in ``rng`` (empty bounds are unbounded)."""
    if rng.start and (key < rng.start or (key == rng.start and not rng.start_closed)):
        return False
    return not (rng.end and (key > rng.end or (key == rng.end and not rng.end_closed)))


def half_open_start(rng: KeyRange) -> bytes:
    """The first key of a range (an open start at k begins at k + b"\\x00")."""
    return rng.start if rng.start_closed or not rng.start else rng.start + b"\x00"


def covers(sub: SubQuery, key: bytes) -> bool:
    """Whether a sub-query reads ``key``."""
    return key in sub.keys or any(contains(r, key) for r in sub.ranges)


short = st.binary(max_size=3).map(lambda b: bytes(ALPHABET[x % 4] for x in b))
bounds = st.builds(KeyRange, short, st.booleans(), short, st.booleans())
subqueries = st.builds(
    SubQuery,
    st.integers(0, 3),
    st.just(b""),
    st.lists(short.filter(bool), max_size=6).map(lambda ks: tuple(sorted(set(ks)))),
    st.lists(bounds, max_size=4).map(tuple),
)
sample_lists = st.lists(st.tuples(short, st.integers(0, 50)), max_size=12).map(
    lambda pairs: _as_samples(pairs)
)


def _as_samples(pairs: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """Sorted keys with increasing offsets, the final empty key last (as Bigtable answers)."""
    out, total = [], 0
    for key, size in sorted({k: s for k, s in pairs if k}.items()):
        total += size
        out.append((key, total))
    return [*out, (b"", total + 7)]


@settings(max_examples=400, deadline=None)
@given(subqueries, sample_lists, st.integers(1, 120), st.integers(1, 3))
def test_splits_cover_each_subquery_exactly_once(
    sub: SubQuery, samples: list[tuple[bytes, int]], target: int, per_split: int
) -> None:
    """Over every short key: one split reads each key the sub-query reads; none reads others."""
    splits = split_plan([sub], samples, target_bytes=target, keys_per_split=per_split)
    for key in UNIVERSE:
        hits = sum(covers(s.sub, key) for s in splits)
        assert hits == (1 if covers(sub, key) else 0), key
    for s in splits:
        assert (s.sub.bucket, s.sub.prefix) == (sub.bucket, sub.prefix)
        assert all(not r.is_empty for r in s.sub.ranges)
        assert len(s.sub.keys) <= per_split
        assert bool(s.sub.keys) != bool(s.sub.ranges)  # point keys and ranges apart


@settings(max_examples=300, deadline=None)
@given(subqueries, sample_lists, st.integers(1, 120))
def test_cuts_fall_on_samples_and_pieces_merge_up_to_the_target(
    sub: SubQuery, samples: list[tuple[bytes, int]], target: int
) -> None:
    """New bounds are sample keys; a split over the target is one piece; neighbours cannot merge."""
    originals = {r.start for r in sub.ranges} | {r.end for r in sub.ranges}
    originals |= {r.start + b"\x00" for r in sub.ranges} | {r.end + b"\x00" for r in sub.ranges}
    sample_keys = {k for k, _ in samples if k}
    # A bound k + b"\x00" may come back as the equivalent open start / closed end at k.
    originals |= {k[:-1] for k in originals | sample_keys if k.endswith(b"\x00")}
    ranged = [s for s in split_plan([sub], samples, target_bytes=target) if s.sub.ranges]
    for s in ranged:
        for r in s.sub.ranges:
            for bound in (r.start, r.end):
                assert bound in originals or bound in sample_keys, bound
        if s.estimated_bytes > target:
            inner = [k for k in sample_keys if any(contains(r, k) for r in s.sub.ranges)]
            assert all(any(half_open_start(r) == k for r in s.sub.ranges) for k in inner)
    for a, b in itertools.pairwise(ranged):
        assert a.estimated_bytes + b.estimated_bytes > target


def test_layout_row_and_final_empty_key_are_never_cuts() -> None:
    """The reserved layout row and the table's end (b"") split nothing."""
    sub = SubQuery(None, b"", (), (KeyRange(b"z"),))
    samples = [(b"zz", 10), (SCHEME_ROW_KEY, 20), (SCHEME_ROW_KEY + b"x", 30), (b"", 40)]
    splits = split_plan([sub], samples, target_bytes=1)
    assert [s.sub.ranges for s in splits] == [(KeyRange(b"z", True, b"zz"),), (KeyRange(b"zz"),)]
    assert splits[1].estimated_bytes == 30  # from the sample at b"zz" to the table's end


def test_a_sixteen_bucket_scan_becomes_many_more_splits() -> None:
    """A 16-bucket full scan sampled every 100 rows: ~10 splits a bucket, each inside it."""
    scheme = SaltScheme(16)
    physical = sorted(scheme.salt_key(b"key%06d" % i) for i in range(16_000))
    samples = [(physical[i], i * 150) for i in range(99, len(physical), 100)]
    samples += [(SCHEME_ROW_KEY, len(physical) * 150), (b"", len(physical) * 150 + 60)]
    plan = plan_reads(ReadRowsQuery(row_filter=FamilyNameRegexFilter("cf")), Layout(scheme))
    splits = split_plan(plan, samples, target_bytes=150 * 100)
    assert 150 <= len(splits) <= 200
    assert {s.sub.bucket for s in splits} == set(scheme.bucket_ids)
    for s in splits:
        prefix = scheme.prefix(s.sub.bucket or 0)
        assert s.sub.prefix == prefix
        assert all(r.start.startswith(prefix) for r in s.sub.ranges)
        assert isinstance(s.sub.row_filter, FamilyNameRegexFilter)
    # Every physical row is read by exactly one split.
    for key in physical[::37]:
        assert sum(covers(s.sub, key) for s in splits) == 1


def test_overlapping_ranges_and_covered_keys_are_read_once() -> None:
    """Ranges that overlap or touch are united; a point key inside a range is not read again."""
    sub = SubQuery(
        3,
        b"3-",
        (b"3-b", b"3-m", b"3-z"),
        (KeyRange(b"3-a", True, b"3-f"), KeyRange(b"3-e", True, b"3-n"), KeyRange(b"3-n")),
    )
    splits = split_plan([sub], [], target_bytes=10)
    assert [s.sub for s in splits] == [SubQuery(3, b"3-", (), (KeyRange(b"3-a"),))]


def test_open_and_closed_bounds_come_back_as_given() -> None:
    """An open start and a closed end survive the half-open arithmetic unchanged."""
    rng = KeyRange(b"a", False, b"c", True)
    assert [s.sub.ranges for s in split_plan([SubQuery(0, b"", (), (rng,))], [])] == [(rng,)]
    cut = split_plan([SubQuery(0, b"", (), (rng,))], [(b"b", 5), (b"", 9)], target_bytes=1)
    assert [s.sub.ranges for s in cut] == [
        (KeyRange(b"a", False, b"b", False),),
        (KeyRange(b"b", True, b"c", True),),
    ]


def test_splits_and_plans_pickle() -> None:
    """Plans, splits and their filters survive pickling (Beam ships them to workers)."""
    plan = plan_reads(
        ReadRowsQuery(row_ranges=RowRange(b"a", b"q"), row_filter=FamilyNameRegexFilter("cf")),
        Layout(SaltScheme(4)),
    )
    splits = split_plan(plan, [(b"1-c", 10), (b"", 20)], target_bytes=1)
    assert pickle.loads(pickle.dumps(plan)) == plan
    again = pickle.loads(pickle.dumps(splits))
    assert again == splits
    assert all(isinstance(s, Split) for s in again)


def test_bad_sizes_are_refused() -> None:
    """A non-positive target or key count is a ValueError naming both."""
    with pytest.raises(ValueError, match="target_bytes and keys_per_split"):
        split_plan([], [], target_bytes=0)
