"""How a fan-out read asks its buckets for rows: the memory budget and request sizes.

Pure code. A read of N buckets sends each bucket a series of ReadRows
requests, one at a time, each with a row limit. Every row a request may
return has room reserved before the request is sent, so a request never
waits for the caller and never holds a concurrency slot while the merge is
behind; what a read can hold at once is what its buckets have asked for and
not handed over yet. :class:`ReadBudget` bounds that across all buckets, in
rows and in bytes, so memory does not grow with N or with the scan's size.

Reads without a limit keep each bucket topped up to its share of the budget
(:func:`allowance`). Reads with a limit go in rounds: the first asks every
bucket for enough that data spread evenly by the salt is answered in one
round (:func:`first_round`), and the second asks each bucket that may still
hold one of the first ``limit`` rows for at most what it could contribute
(:func:`refills`), which answers any data in two rounds.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = [
    "DEFAULT_ROW_BYTES",
    "ReadBudget",
    "allowance",
    "first_round",
    "refills",
    "unordered_shares",
]

#: Bytes assumed per row until a read has measured its own rows.
DEFAULT_ROW_BYTES: Final = 512
#: The first round of a limited read is sized so that rows spread evenly over
#: the buckets need no second round with at least this probability.
ONE_ROUND_PROBABILITY: Final = 0.6


@final
@dataclass(frozen=True, slots=True)
class ReadBudget:
    """The most one read holds: rows asked of buckets and not yet handed to the caller.

    Both bounds apply; ``bytes`` counts row keys and cell values, estimated
    from the rows the read has seen. A read always allows one row per bucket
    that still has rows, whatever the budget: an ordered merge cannot emit a
    row before it has seen the head of every bucket.

    Args:
        rows: Rows across all buckets.
        bytes: Bytes of keys and values across all buckets.

    Raises:
        ValueError: A bound below 1.
    """

    rows: int = 20_000
    bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("rows", "bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ReadBudget.{name} must be an int >= 1, got {value!r}")

    def rows_for(self, row_bytes: float) -> int:
        """Rows the budget allows across all buckets, with rows of ``row_bytes`` each."""
        return max(1, min(self.rows, int(self.bytes // max(1.0, row_bytes))))


def allowance(budget: ReadBudget, live: int, row_bytes: float) -> int:
    """Rows one of ``live`` buckets may have asked for and not handed over (at least 1)."""
    return max(1, budget.rows_for(row_bytes) // max(1, live))


def first_round(limit: int, buckets: int, cap: int | None = None) -> int:
    """Rows to ask each bucket for in the first round of a read of ``limit`` rows.

    With keys spread by the salt, the number of the first ``limit - 1`` rows
    that lie in one bucket is binomial (``limit - 1`` draws, ``1 / buckets``).
    One round is enough when no bucket holds as many of them as it was asked
    for, so this is the smallest size for which that holds in every bucket
    with probability :data:`ONE_ROUND_PROBABILITY`.

    Args:
        limit: The read's row limit (>= 1).
        buckets: Buckets that may hold rows (>= 1).
        cap: Ask no bucket for more (the budget's allowance).
    """
    if limit < 1 or buckets < 1:
        raise ValueError(f"need limit >= 1 and buckets >= 1, got {limit}, {buckets}")
    if buckets == 1:
        size = limit
    else:
        per_bucket = ONE_ROUND_PROBABILITY ** (1 / buckets)
        size = _binomial_quantile(limit - 1, 1 / buckets, per_bucket) + 1
    size = min(size, limit)
    return max(1, size if cap is None else min(size, cap))


def _binomial_quantile(draws: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(draws, p) <= k) >= q."""
    if draws <= 0:
        return 0
    mean = draws * p
    if mean > 500:  # the point masses would underflow; the normal shape is close by then
        sd = math.sqrt(mean * (1 - p))
        return max(0, math.ceil(mean + statistics.NormalDist().inv_cdf(q) * sd - 0.5))
    k = 0
    mass = (1 - p) ** draws
    cdf = mass
    while cdf < q and k < draws:
        mass *= (draws - k) / (k + 1) * p / (1 - p)
        k += 1
        cdf += mass
    return k


def refills(
    limit: int,
    emitted: int,
    held: Sequence[Any],
    lasts: Sequence[Any | None],
    more: Sequence[bool],
    cap: int | None = None,
) -> dict[int, int]:
    """Rows to ask of each bucket in the next round of an ordered read with a limit.

    Called when no request is in flight. A bucket that has more rows and
    whose last key read lies below the ``limit``-th smallest key known so far
    may hold some of the first ``limit`` rows; any other bucket cannot. Such a
    bucket can contribute at most the rows that still rank above its last
    key, so asking exactly that many makes this the last round whatever the
    data (unless ``cap`` is smaller).

    Args:
        limit: The read's row limit.
        emitted: Rows already handed to the caller (all below every last key).
        held: The sorted keys of rows read and not yet handed over, across buckets.
        lasts: Per bucket, the last key it returned (None: none yet).
        more: Per bucket, whether it may have more rows.
        cap: Ask no bucket for more (the budget's allowance).

    Returns:
        ``{bucket index: rows to ask}`` for the buckets to read again.
    """
    missing = limit - emitted
    if missing <= 0:
        return {}
    threshold = held[missing - 1] if len(held) >= missing else None
    sizes: dict[int, int] = {}
    for i, last in enumerate(lasts):
        if not more[i] or (threshold is not None and last is not None and last >= threshold):
            continue
        size = missing - (0 if last is None else bisect.bisect_right(held, last))
        if size > 0:
            sizes[i] = size if cap is None else max(1, min(size, cap))
    return sizes


def unordered_shares(missing: int, idle: int, refill: int) -> int:
    """Rows to ask of each of ``idle`` buckets when an unordered read still misses rows.

    A bucket asks for its share of what is missing, doubled each time it is
    asked again (``refill`` counts from 1): a bucket that holds most of the
    matching rows reaches large requests quickly, while an even spread asks
    for little more than is missing.
    """
    share = math.ceil(missing / max(1, idle)) << min(max(refill - 1, 0), 20)
    return max(1, min(missing, share))
