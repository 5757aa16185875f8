"""The read strategy: budgets, per-bucket shares, first rounds and refills (pure)."""

from __future__ import annotations

import bisect
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable._engine.budget import (
    MEDIAN_ONE_ROUND,
    STREAM_MIN_ROWS,
    ReadBudget,
    _one_round_size,
    allowance,
    fetch_bound,
    first_round,
    refills,
    streamable,
    unordered_shares,
)
from saltedtable._read.settings import OneRequestOdds, one_request_size


@pytest.mark.parametrize("bad", [{"rows": 0}, {"bytes": 0}, {"rows": 1.5}, {"bytes": True}])
def test_a_budget_refuses_bounds_below_one(bad: dict[str, object]) -> None:
    """Rows and bytes must be whole numbers of at least one."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        ReadBudget(**bad)  # type: ignore[arg-type]


def test_the_budget_takes_the_tighter_of_rows_and_bytes() -> None:
    """rows_for() applies both bounds, and never less than one row."""
    budget = ReadBudget(rows=1000, bytes=100_000)
    assert budget.rows_for(50) == 1000
    assert budget.rows_for(1000) == 100
    assert budget.rows_for(10**9) == 1


@given(rows=st.integers(1, 10**6), live=st.integers(1, 5000), row_bytes=st.floats(1, 10**6))
def test_shares_never_exceed_the_budget_but_one_row_each(
    rows: int, live: int, row_bytes: float
) -> None:
    """live x allowance stays within the budget, or is one row per bucket."""
    budget = ReadBudget(rows=rows, bytes=8 << 20)
    share = allowance(budget, live, row_bytes)
    assert share >= 1
    assert share * live <= max(budget.rows_for(row_bytes), live)


def one_round_probability(limit: int, n: int, sizes: int | list[int], trials: int = 3000) -> float:
    """Simulated chance that no bucket holds as many of the first ``limit - 1`` keys
    as it was asked for (``sizes``: one size for all, or one per bucket)."""
    asked = [sizes] * n if isinstance(sizes, int) else sizes
    rng = random.Random(limit * 31 + n)
    ok = 0
    for _ in range(trials):
        counts = [0] * n
        for _ in range(limit - 1):
            counts[rng.randrange(n)] += 1
        ok += all(c < a for c, a in zip(counts, asked, strict=True))
    return ok / trials


@pytest.mark.parametrize(
    ("limit", "n"),
    [(1, 4), (10, 4), (100, 4), (10, 16), (100, 16), (1000, 16), (10, 64), (100, 64), (1000, 64)],
)
def test_the_first_round_usually_suffices_and_one_row_less_would_not(limit: int, n: int) -> None:
    """Asking first_round() rows answers evenly spread data in one round more often than not;
    where every bucket asks the same, one row less each would not (within simulation noise)."""
    sizes = first_round(limit, n)
    assert len(sizes) == n
    assert one_round_probability(limit, n, sizes) >= 0.5
    if len(set(sizes)) == 1 and sizes[0] > 1:
        assert one_round_probability(limit, n, sizes[0] - 1) < 0.62


@pytest.mark.parametrize("n", [2, 4, 16, 64, 256, 4096])
@pytest.mark.parametrize("limit", [1, 2, 10, 100, 1000, 10_000])
def test_the_first_round_keeps_to_the_fetch_bound_unless_one_round_needs_more(
    limit: int, n: int
) -> None:
    """sum(first_round()) <= 2L + 2N, except where even a one-in-two chance of a
    single round needs more rows per bucket (then every bucket asks exactly that);
    sizes differ by at most one row."""
    sizes = first_round(limit, n)
    assert max(sizes) - min(sizes) <= 1
    if sum(sizes) > fetch_bound(limit, n):
        assert sizes == [_one_round_size(limit, n, MEDIAN_ONE_ROUND)] * n


def test_the_first_round_spreads_what_the_bound_allows_where_that_mostly_suffices() -> None:
    """At N=64 and L=10 three rows a bucket (192) would pass 2L + 2N = 148: 12 buckets
    ask 3 and 52 ask 2 (140, keeping 8 for a second round), which still answers most
    reads in one round. At L=100 six rows each (384 > 328) are needed for that: 5 or 6
    would answer fewer than a third."""
    sizes = first_round(10, 64)
    assert sum(sizes) == 148 - 64 // 8
    assert sorted(set(sizes)) == [2, 3]
    assert one_round_probability(10, 64, sizes) >= 0.6
    assert first_round(100, 64) == [6] * 64
    assert one_round_probability(100, 64, [5] * 56 + [6] * 8) < 0.35


def test_the_first_round_respects_its_caps() -> None:
    """Never more than the limit, the cap, or less than one."""
    assert first_round(5, 1) == [5]
    assert first_round(1, 1000) == [1] * 1000
    assert first_round(10_000, 4, cap=10) == [10] * 4
    assert min(first_round(10**9, 16)) > 10**9 / 16  # the normal approximation path
    with pytest.raises(ValueError, match="limit"):
        first_round(0, 4)


@st.composite
def read_states(draw: st.DrawFn) -> tuple[int, list[list[int]], list[int]]:
    """A limit, the sorted keys of N buckets, and how many each returned in round one."""
    n = draw(st.integers(1, 8))
    keys = draw(st.lists(st.integers(0, 500), unique=True, max_size=120))
    owners = draw(st.lists(st.integers(0, n - 1), min_size=len(keys), max_size=len(keys)))
    buckets: list[list[int]] = [[] for _ in range(n)]
    for key, owner in zip(keys, owners, strict=True):
        buckets[owner].append(key)
    for b in buckets:
        b.sort()
    limit = draw(st.integers(1, 60))
    first = draw(st.integers(1, 10))
    return limit, buckets, [min(first, len(b)) for b in buckets]


def assert_first_rows_known(limit: int, buckets: list[list[int]], got: list[int]) -> None:
    """Every key at or below the watermark is read, and at least ``limit`` of them (or all
    there are), once each bucket has returned its first ``got[i]`` keys."""
    everything = sorted(k for b in buckets for k in b)
    read = sorted(k for b, g in zip(buckets, got, strict=True) for k in b[:g])
    open_lasts = [b[g - 1] for b, g in zip(buckets, got, strict=True) if g < len(b) and g]
    mark = min(open_lasts) if open_lasts else math.inf
    known = read[: bisect.bisect_right(read, mark)]
    assert known == everything[: len(known)]
    assert len(known) >= min(limit, len(everything)) or any(
        g == 0 and len(b) for b, g in zip(buckets, got, strict=True)
    )


@settings(max_examples=300)
@given(state=read_states())
def test_after_refills_the_first_rows_are_known(
    state: tuple[int, list[list[int]], list[int]],
) -> None:
    """Whatever the data, once every refill is read the smallest ``limit`` keys are final."""
    limit, buckets, got = state
    held = sorted(k for b, g in zip(buckets, got, strict=True) for k in b[:g])
    lasts = [b[g - 1] if g else None for b, g in zip(buckets, got, strict=True)]
    more = [g < len(b) for b, g in zip(buckets, got, strict=True)]
    sizes = refills(limit, 0, held, lasts, more)
    for i, size in sizes.items():
        assert more[i]
        assert size >= 1
        got[i] = min(len(buckets[i]), got[i] + size)
    assert_first_rows_known(limit, buckets, got)


def test_refills_skip_buckets_that_cannot_hold_the_first_rows() -> None:
    """A bucket whose last key lies past the limit-th key is not asked again."""
    # Bucket 0 read 1, 2, 3; bucket 1 read 10. The 2 smallest are known: none ask.
    assert refills(2, 0, [1, 2, 3, 10], [3, 10], [True, True]) == {}
    # limit 4: bucket 0 (last 3 < the 4th key, 10) may hold more; it can add 4 - 3 = 1.
    assert refills(4, 0, [1, 2, 3, 10], [3, 10], [True, True]) == {0: 1}
    # A bucket that read nothing yet may hold them all.
    assert refills(3, 0, [5], [None, 5], [True, False]) == {0: 3}
    assert refills(3, 3, [], [1], [True]) == {}


def test_unordered_shares_double_on_each_refill() -> None:
    """A bucket asked again asks for twice its share, never more than is missing."""
    assert unordered_shares(100, 4, 1) == 25
    assert unordered_shares(100, 4, 2) == 50
    assert unordered_shares(100, 4, 9) == 100
    assert unordered_shares(1, 8, 1) == 1


def test_refills_shrink_to_the_room_left_unless_one_bucket_needs_twice_that() -> None:
    """With ``room``, the sizes scale down to fit it (a row of each at least); when one
    bucket alone could add more than twice the room (data skewed into it), the round
    asks in full, keeping to two rounds."""
    held = [1, 2, 3, 10]
    lasts = [3, None, None]
    more = [True, True, True]
    full = refills(8, 0, held, lasts, more)
    assert full == {0: 5, 1: 8, 2: 8}
    for room in (4, 7, 8, 12):
        shrunk = refills(8, 0, held, lasts, more, room=room)
        assert shrunk.keys() == full.keys()
        assert sum(shrunk.values()) <= room
        assert all(1 <= shrunk[i] <= full[i] for i in full)
    assert refills(8, 0, held, lasts, more, room=3) == full  # 8 > 2 x 3
    assert refills(8, 0, held, lasts, more, room=100) == full
    assert refills(4, 0, [1, 2, 3, 10], [3, 10], [True, True], room=1) == {0: 1}
    assert refills(8, 0, [1, 2, 3, 10], [3, 10], [True, False], room=1) == {0: 5}
    assert refills(8, 0, [1, 2, 3, 10], [3, 10], [True, False], room=3) == {0: 3}


@settings(max_examples=300)
@given(state=read_states(), room=st.integers(1, 40))
def test_a_shrunk_second_round_and_a_full_third_find_the_first_rows(
    state: tuple[int, list[list[int]], list[int]], room: int
) -> None:
    """Whatever the data: a second round kept to ``room`` rows, then (if still
    needed) a third without it, leaves the smallest ``limit`` keys known."""
    limit, buckets, got = state
    for use_room in (room, None):
        read = sorted(k for b, g in zip(buckets, got, strict=True) for k in b[:g])
        lasts = [b[g - 1] if g else None for b, g in zip(buckets, got, strict=True)]
        more = [g < len(b) for b, g in zip(buckets, got, strict=True)]
        sizes = refills(limit, 0, read, lasts, more, room=use_room)
        if use_room is not None and sizes:
            full = refills(limit, 0, read, lasts, more)
            assert sizes.keys() == full.keys()
            if max(full.values()) > 2 * use_room:
                assert sizes == full
            else:
                assert sum(sizes.values()) <= max(use_room, len(sizes))
        for i, size in sizes.items():
            got[i] = min(len(buckets[i]), got[i] + size)
    assert_first_rows_known(limit, buckets, got)


def test_one_request_odds_back_off_after_misses_and_reset_on_a_fit() -> None:
    """After k misses in a row the next 2**k - 1 reads skip the try (at most 63); a fit resets."""
    odds = OneRequestOdds()
    assert odds.try_now()
    pattern = []
    for _ in range(8):
        odds.record(False)
        skipped = 0
        while not odds.try_now():
            skipped += 1
        pattern.append(skipped)
    assert pattern == [1, 3, 7, 15, 31, 63, 63, 63]
    odds.record(True)
    assert odds.try_now()
    assert odds.try_now()


def test_the_budget_takes_one_request_rows_of_zero_but_not_below() -> None:
    """0 turns the one request off; a negative count is refused by name."""
    assert ReadBudget(one_request_rows=0).one_request_rows == 0
    with pytest.raises(ValueError, match="one_request_rows"):
        ReadBudget(one_request_rows=-1)


def test_one_request_size_follows_the_limit_and_the_order() -> None:
    """Up to one_request_rows; an ordered limit: at most 2L + 2N; unordered: L; 0: off;
    never more than the budget's rows."""
    budget = ReadBudget()
    assert one_request_size(budget, None, 16, ordered=True) == 1000
    assert one_request_size(budget, 10, 16, ordered=True) == fetch_bound(10, 16) == 52
    assert one_request_size(budget, 10, 16, ordered=False) == 10
    assert one_request_size(budget, 5000, 16, ordered=True) == 1000
    assert one_request_size(ReadBudget(one_request_rows=0), None, 16, ordered=True) == 0
    assert one_request_size(ReadBudget(rows=300), None, 16, ordered=False) == 300


def test_a_request_streams_only_while_its_cap_holds_enough_of_the_widest_rows() -> None:
    """Unmeasured or narrow rows stream; rows so wide that the cap holds fewer than
    STREAM_MIN_ROWS of them are paged (a stream's transport buffers past the grant)."""
    row = 64 * 1024
    assert not streamable(256 * 1024, 0)  # nothing measured yet: rows of any size
    assert streamable(STREAM_MIN_ROWS * row, row)
    assert not streamable(STREAM_MIN_ROWS * row - 1, row)
    assert not streamable(256 * 1024, row)  # the default budget's page at 16 buckets
    assert streamable(256 * 1024, 110)  # 100-byte values stream
