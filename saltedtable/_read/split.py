"""Splitting a read plan into many independent physical reads, for parallel workers.

Pure code. :func:`split_plan` takes the sub-queries of a
:class:`~saltedtable.ReadPlan` (one per bucket, plus the legacy side of a
cutoff layout) and the table's ``sample_row_keys`` answer, and cuts every
sub-query's ranges at the sampled split points, then merges neighbouring
pieces until each split holds about ``target_bytes``. Each
:class:`Split` is an ordinary :class:`~saltedtable.SubQuery`, so a worker reads
it with the same paging rules as the async reader.

Within a sub-query the splits cover its rows exactly once: overlapping ranges
are united and point keys that a range already covers are dropped first, so
no two splits can return the same row, and the cuts leave no gap.

Ranges are handled internally as half-open ``[start, end)`` byte intervals:
the key right after ``k`` in Bigtable's order is ``k + b"\\x00"``, so an open
start ``(k`` is exactly ``[k\\x00`` and a closed end ``k]`` is exactly ``k\\x00)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, final

from .._scheme.ranges import KeyRange
from .._scheme.salt import SCHEME_ROW_KEY
from .plan import ReadPlan, SubQuery

__all__ = ["DEFAULT_KEYS_PER_SPLIT", "DEFAULT_SPLIT_BYTES", "Split", "split_plan"]

#: About how much data one split reads when the caller does not say.
DEFAULT_SPLIT_BYTES: Final = 64 * 1024 * 1024
#: Point keys read by one split at most.
DEFAULT_KEYS_PER_SPLIT: Final = 10_000

_Interval = tuple[bytes, bytes]  # [start, end); end b"" = no end


@final
@dataclass(frozen=True, slots=True)
class Split:
    """One independent read: part of one bucket's sub-query.

    Attributes:
        sub: What to read (the bucket, prefix and filter of its sub-query, and
            a disjoint part of its keys and ranges).
        estimated_bytes: The share of the table's sampled size it covers (an
            estimate from ``sample_row_keys``; 0 for point keys).
    """

    sub: SubQuery
    estimated_bytes: int


def split_plan(
    plan: ReadPlan | Iterable[SubQuery],
    samples: Sequence[tuple[bytes, int]],
    *,
    target_bytes: int = DEFAULT_SPLIT_BYTES,
    keys_per_split: int = DEFAULT_KEYS_PER_SPLIT,
) -> list[Split]:
    """Cut every sub-query at the sampled split points and merge the pieces up to a size.

    Args:
        plan: A read plan, or its sub-queries.
        samples: ``sample_row_keys`` of the physical table: ``(key, offset)``
            pairs in key order, where ``offset`` is the bytes before ``key``. The
            reserved layout row and the final empty key (the table's end) are
            not used as split points.
        target_bytes: Merge neighbouring pieces of a sub-query while together
            they stay within this estimate (a piece larger than it stays whole).
        keys_per_split: Point keys per split at most.

    Returns:
        Splits in the order of the plan's sub-queries, then key order.

    Raises:
        ValueError: A non-positive size.
    """
    if target_bytes < 1 or keys_per_split < 1:
        raise ValueError(
            f"target_bytes and keys_per_split must be >= 1, got {target_bytes}, {keys_per_split}"
        )
    subs = plan.subqueries if isinstance(plan, ReadPlan) else tuple(plan)
    sizes = _Sizes(samples)
    out: list[Split] = []
    for sub in subs:
        out.extend(_split_sub(sub, sizes, target_bytes, keys_per_split))
    return out


@final
class _Sizes:
    """Split points and the sampled offsets around any key."""

    __slots__ = ("cuts", "keys", "offsets", "total")

    def __init__(self, samples: Sequence[tuple[bytes, int]]) -> None:
        ordered = sorted((key, offset) for key, offset in samples if key)
        self.keys = [key for key, _ in ordered]
        self.offsets = [offset for _, offset in ordered]
        ends = [offset for key, offset in samples if not key]
        self.total = max([*ends, *self.offsets, 0])
        # The layout row is not data: a cut there would only make a tiny split.
        self.cuts = [key for key in self.keys if not key.startswith(SCHEME_ROW_KEY)]

    def below(self, key: bytes) -> int:
        """The offset of the last sample at or before ``key`` (0 before the first)."""
        i = bisect.bisect_right(self.keys, key)
        return self.offsets[i - 1] if i else 0

    def above(self, key: bytes) -> int:
        """The offset of the first sample at or after ``key`` (the total past the last)."""
        if not key:
            return self.total
        i = bisect.bisect_left(self.keys, key)
        return self.offsets[i] if i < len(self.offsets) else self.total

    def estimate(self, interval: _Interval) -> int:
        """Bytes in ``[start, end)``, rounded out to the enclosing samples."""
        return max(0, self.above(interval[1]) - self.below(interval[0]))

    def cut(self, interval: _Interval) -> list[_Interval]:
        """``interval`` cut at every split point strictly inside it."""
        start, end = interval
        lo = bisect.bisect_right(self.cuts, start)
        hi = bisect.bisect_left(self.cuts, end) if end else len(self.cuts)
        points = self.cuts[lo:hi]
        bounds = [start, *points, end]
        pieces = ((bounds[i], bounds[i + 1]) for i in range(len(points) + 1))
        return [piece for piece in pieces if not _empty(piece)]


def _split_sub(sub: SubQuery, sizes: _Sizes, target: int, keys_per_split: int) -> list[Split]:
    intervals = _union(_to_interval(r) for r in sub.ranges)
    starts = [start for start, _ in intervals]
    keys = [key for key in sub.keys if not _covered(starts, intervals, key)]
    out: list[Split] = []
    group: list[_Interval] = []
    group_bytes = 0

    def emit() -> None:
        ranges = tuple(_to_range(i) for i in group)
        out.append(Split(_with(sub, (), ranges), group_bytes))

    for interval in intervals:
        for piece in sizes.cut(interval):
            size = sizes.estimate(piece)
            if group and group_bytes + size > target:
                emit()
                group, group_bytes = [], 0
            if group and group[-1][1] == piece[0]:
                group[-1] = (group[-1][0], piece[1])  # the next piece of the same range
            else:
                group.append(piece)
            group_bytes += size
    if group:
        emit()
    for i in range(0, len(keys), keys_per_split):
        out.append(Split(_with(sub, tuple(keys[i : i + keys_per_split]), ()), 0))
    return out


def _with(sub: SubQuery, keys: tuple[bytes, ...], ranges: tuple[KeyRange, ...]) -> SubQuery:
    return SubQuery(sub.bucket, sub.prefix, keys, ranges, sub.row_filter)


def _to_interval(rng: KeyRange) -> _Interval:
    start = rng.start if rng.start_closed or not rng.start else rng.start + b"\x00"
    end = rng.end + b"\x00" if rng.end and rng.end_closed else rng.end
    return start, end


def _to_range(interval: _Interval) -> KeyRange:
    start, end = interval
    # The exact equivalents with the caller's own bounds: [k\x00 is (k, k\x00) is k].
    # (A bare b"\x00" stays: b"" would mean no bound.)
    open_start = len(start) > 1 and start.endswith(b"\x00")
    closed_end = len(end) > 1 and end.endswith(b"\x00")
    return KeyRange(
        start[:-1] if open_start else start,
        not open_start,
        end[:-1] if closed_end else end,
        closed_end,
    )


def _empty(interval: _Interval) -> bool:
    start, end = interval
    # [b"", b"\x00") holds only the empty key, which is no row key.
    return bool(end) and (start >= end or end == b"\x00")


def _union(intervals: Iterable[_Interval]) -> list[_Interval]:
    """Sorted, non-overlapping, non-touching intervals covering the same keys."""
    merged: list[_Interval] = []
    for start, end in sorted(i for i in intervals if not _empty(i)):
        if merged:
            last_start, last_end = merged[-1]
            if not last_end:
                continue  # the last one runs to the end of the table
            if start <= last_end:
                merged[-1] = (last_start, b"" if not end else max(last_end, end))
                continue
        merged.append((start, end))
    return merged


def _covered(starts: Sequence[bytes], intervals: Sequence[_Interval], key: bytes) -> bool:
    """True when ``key`` lies in one of the sorted, disjoint ``intervals`` (at ``starts``)."""
    i = bisect.bisect_right(starts, key) - 1
    if i < 0:
        return False
    start, end = intervals[i]
    return start <= key and (not end or key < end)
