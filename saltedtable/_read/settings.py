"""The settings of one read against Bigtable: what a read is set up with, and what a table
learns of its reads.

:class:`ReadSettings` says how a read runs (``explain()``'s ``how:`` line);
:class:`OneRequestOdds` and :func:`one_request_size` decide whether and how a
small read tries one request over every bucket; :class:`RowSizes` keeps the
row sizes recent reads measured. The sizing of each request is the engine's
(:mod:`saltedtable._engine.budget`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final, final

from .._engine.budget import (
    DEFAULT_MAX_CONCURRENT_SUBSCANS,
    DEFAULT_ROW_BYTES,
    ReadBudget,
    allowance,
    fetch_bound,
    first_request,
    first_round,
)

__all__ = ["OneRequestOdds", "ReadSettings", "RowSizes", "one_request_size"]


@final
class OneRequestOdds:
    """Whether a table's next bounded read tries one request over every bucket first.

    A read that tries it and gets as many rows back as it asked for (the
    read is bigger), or whose request fails, wasted that request, so after
    ``k`` such misses in a row the next ``2**k - 1`` bounded reads (at most
    :attr:`MAX_SKIP`) go bucket by bucket at once; one read that fits resets
    it. A table keeps one of these for reads with a limit and one for reads
    without; reads of both shapes share it, so a table that mixes small and
    big bounded reads of one kind pays a wasted request on more of the big
    ones. Threads of a sync table update it without a lock: a lost update
    only shifts when the next try comes.
    """

    #: The most reads skipped after misses in a row.
    MAX_SKIP: Final = 63

    __slots__ = ("_misses", "_skip")

    def __init__(self) -> None:
        self._misses = 0
        self._skip = 0

    def try_now(self) -> bool:
        """True if this read should try the one request (counts a skipped read)."""
        if self._skip > 0:
            self._skip -= 1
            return False
        return True

    def record(self, fitted: bool) -> None:
        """How a try went: the whole read fitted in the one request, or not."""
        if fitted:
            self._misses = 0
        else:
            self._misses = min(self._misses + 1, 16)
            self._skip = min(2**self._misses - 1, self.MAX_SKIP)


def one_request_size(
    budget: ReadBudget,
    limit: int | None,
    buckets: int,
    *,
    ordered: bool,
) -> int:
    """The row limit of a small read's one request over every bucket (0: do not try it).

    ``budget.one_request_rows``, within what the budget allows at rows of
    :data:`DEFAULT_ROW_BYTES` (nothing of the read is measured yet). The
    request also stops after the row that takes it past ``budget.bytes``,
    which makes it a miss. For an
    ordered read with a limit, at most :func:`fetch_bound` (a read bigger
    than that is better served by rounds, and a miss costs no more); for an
    unordered read with a limit, the limit itself (any ``limit`` rows answer
    it, so the one request always does).
    """
    rows = min(budget.one_request_rows, budget.rows_for(DEFAULT_ROW_BYTES))
    if limit is not None:
        rows = min(rows, fetch_bound(limit, buckets) if ordered else limit)
    return max(0, rows)


@final
class RowSizes:
    """What a table object's recent reads measured of its rows, by filter: a hint for the next.

    A read that has measured no row of its own sizes its buckets' first
    requests from :meth:`hint` (the largest row of the last :attr:`KEEP`
    reads with the same filter that measured any) instead of probing each
    bucket with :data:`PROBE_ROWS`; its own first measure then replaces it
    (see :func:`ramp`). Reads with another
    filter (a keys-only read, a few columns) keep hints of their own, so
    they do not shrink a full row's. Threads of a sync table share it: a
    lock keeps its books whole.
    """

    #: Measures kept per filter (the hint is their largest).
    KEEP: Final = 4
    #: Filters kept (the oldest is dropped past this).
    MOST_FILTERS: Final = 64

    __slots__ = ("_lock", "_measures")

    def __init__(self) -> None:
        self._measures: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def hint(self, key: str) -> int | None:
        """Bytes of the largest row recent reads with filter ``key`` measured (None: none)."""
        measures = self._measures.get(key)
        return max(measures) if measures else None

    def learn(self, key: str, largest: int | None) -> None:
        """Remember a read's largest row (None or 0: it measured none; nothing changes)."""
        if not largest:
            return
        with self._lock:
            measures = self._measures.pop(key, ())
            self._measures[key] = (*measures, largest)[-self.KEEP :]
            while len(self._measures) > self.MOST_FILTERS:
                del self._measures[next(iter(self._measures))]


@final
@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How a read runs: what the table set it up with, and the shape of its plan.

    A read's statistics carry it (:attr:`~saltedtable.CallStats.settings`);
    ``plan(query).settings()`` gives the same without reading. Its
    :meth:`describe` is the ``how:`` line of ``explain()``.

    Attributes:
        ordered: Rows are merged in logical key order (False: handed over as
            they arrive).
        budget: What the read may hold at once (the table's
            :class:`ReadBudget`).
        slots: Requests the table runs at once (``max_concurrent_subscans``),
            or None where it is not known.
        subqueries: Sub-queries the read runs: one per bucket that can hold
            matching rows, plus the legacy side of a cutoff layout.
        limit: The logical row limit (None: no limit).
        one_request_rows: The row limit of the one request over every bucket
            that the read sends first, when the table's recent ones fitted;
            0 when the read does not try one (it is not small, its sub-queries
            cannot be one request, or the layout has a cutoff).
    """

    ordered: bool
    budget: ReadBudget
    slots: int | None
    subqueries: int
    limit: int | None = None
    one_request_rows: int = 0

    def describe(self) -> str:
        """How the read runs, in words: requests per bucket and what it holds at most."""
        budget, ordered, n, limit = self.budget, self.ordered, self.subqueries, self.limit
        if n == 0:
            return "nothing to read"
        merged = "merged in logical key order" if ordered else "unordered"
        rows = budget.rows_for(DEFAULT_ROW_BYTES)
        holds = (
            f"budget {budget.rows} rows / {_size(budget.bytes)}, about {rows} rows at "
            f"{DEFAULT_ROW_BYTES} B a row until the read measures its rows"
        )
        where = "1 sub-query" if n == 1 else f"{n} sub-queries read concurrently, {merged}"
        if self.one_request_rows:
            where = (
                f"first one request naming all {n} sub-queries' keys and ranges, for up to "
                f"{_rows(self.one_request_rows)} (fewer back: that was the whole read; the "
                f"table tries it less often after full ones); else {where}"
            )
        if limit is None:
            share = allowance(budget, n, DEFAULT_ROW_BYTES)
            each = "it keeps" if n == 1 else "each keeps"
            slots_note = ""
            slots = self.slots or DEFAULT_MAX_CONCURRENT_SUBSCANS
            if ordered and n > slots:
                slots_note = (
                    f"; with {n} sub-queries and {slots} requests at once "
                    f"(max_concurrent_subscans), each first request asks "
                    f"{_rows(first_request(share, n, slots))} (one row while neither the read "
                    "nor the table's recent reads with its filter have measured a row)"
                )
            return (
                f"{where}; {each} up to {_rows(share)} asked for and not yet handed over, "
                f"asking again at half{slots_note} ({holds})"
            )
        if not ordered or n == 1:
            first = -(-limit // n)
            return (
                f"{where}; limit {limit}: {_rows(first)} asked of each, then what is "
                f"still missing ({holds})"
            )
        sizes = first_round(limit, n, allowance(budget, n, DEFAULT_ROW_BYTES))
        low, high = min(sizes), max(sizes)
        each = _rows(low) if low == high else f"{low} or {high} rows"
        return (
            f"{where}; limit {limit} in rounds: the first asks {each} of each, "
            f"{sum(sizes)} in all (enough for evenly salted data more often than not), a "
            f"second asks each sub-query that may hold more of the first {limit} rows "
            f"at most what it could add, together about what is left of "
            f"{fetch_bound(limit, n)} rows (2 x limit + 2 x sub-queries), and a rare "
            f"third all it could add ({holds})"
        )


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
