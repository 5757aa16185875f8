"""Reads: one logical read becomes one request series per bucket, merged by the engine.

The I/O seam of reads, for both tables. A bucket source runs one bounded
ReadRows request of a bucket's sub-query at a time for the merge engine
(:mod:`.._engine.merge`: its :class:`~.._engine.merge_asyncio.Merge` and
:class:`~.._engine.merge_threads.ThreadMerge` drivers), relabelling every row with its
logical key; :class:`~.._async.read_call.ReadCall` (and the sync one generated
from it) ties a plan, its sources, the budget and the call's statistics
together (:mod:`.call`) and hands the caller a list or a stream. This module
holds what both flavours' sources share; :mod:`.sources_asyncio`
(:class:`~.sources_asyncio.BucketSource`) and :mod:`.sources_threads`
(:class:`~.sources_threads.SyncBucketSource`) run them.

Every request has room reserved for all the rows it may return, so a request
runs to its end without waiting for the caller: it holds a concurrency slot
(``max_concurrent_subscans``) only while it runs, and the waiting between
requests happens outside any RPC. (One pause within a request: a bucket of an
ordered read that runs ahead of the slowest one while the merge waits for
that one; see :meth:`~.sources_asyncio.BucketSource._ahead`.)

Errors keep the client's types: a failing sub-scan raises the client's own
exception, with a note naming the bucket, its range and where it stopped,
and a :class:`~saltedtable.SubScan` in its ``saltedtable_subscan`` attribute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, final

from google.cloud.bigtable.data.row import Row

from .._engine.budget import CELL_OVERHEAD_BYTES, ROW_OVERHEAD_BYTES
from .plan import OneRequest, PageCursor, SubQuery
from .stats import BucketStats
from .timeouts import Timeouts

__all__ = [
    "BucketSourceBase",
    "OneRequestSourceBase",
    "SubScan",
    "annotate",
    "count_request",
    "count_row",
    "relabel",
    "row_bytes",
]

#: A source's ``read_rows_stream`` (async or sync), and the table's slots it takes.
S = TypeVar("S", bound=Callable[..., Any])
L = TypeVar("L")


@final
@dataclass(frozen=True, slots=True)
class SubScan:
    """Which sub-scan of a salted read failed (``exc.saltedtable_subscan``).

    Attributes:
        bucket: The salt bucket (None: the legacy side of a cutoff layout).
        subquery: What the bucket was asked for (physical keys and ranges).
        after_key: The last logical key it had read, if any: the failure came after it.
    """

    bucket: int | None
    subquery: SubQuery
    after_key: bytes | None


class BucketSourceBase(Generic[S, L]):
    """What a bucket's source keeps between its requests, async or sync.

    The flavours' sources (:class:`~.sources_asyncio.BucketSource`,
    :class:`~.sources_threads.SyncBucketSource`) add what only their runtime
    keeps in :meth:`_prepare`.
    """

    __slots__ = (
        "_bstats",
        "_cursor",
        "_cut",
        "_deadline",
        "_limiter",
        "_read_rows_stream",
        "_stray",
        "_timeouts",
        "halt",
        "internals",
        "sub",
    )

    def __init__(
        self,
        read_rows_stream: S,
        sub: SubQuery,
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: L,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
        reverse: bool = False,
        internals: bool = True,
    ) -> None:
        self.sub = sub
        #: False: a stopped request is not disarmed through the client's operation
        #: (the table's ``client_internals`` switch; only the sync sources do that).
        self.internals = internals
        self._read_rows_stream: Callable[..., Any] = read_rows_stream
        # (reverse: a reversed read's requests, which read backwards: so do its pages.)
        self._cursor = PageCursor(sub, reverse=reverse, internals=internals)
        self._cut = len(sub.prefix)
        self._deadline = deadline
        self._timeouts = timeouts
        self._bstats = bstats
        #: Says which (logical) keys to leave out (cutoff layouts).
        self._stray = stray
        self._limiter = limiter
        #: The running request ends at its next row: the read is ending, or (after
        #: that row) it gives its slot up to a small read (:meth:`give_way`).
        self.halt = False
        self._prepare()

    def _prepare(self) -> None:
        """Set what only this runtime's source keeps (the constructor's last step)."""
        raise NotImplementedError

    def give_way(self) -> None:
        """End the running request after its next row, for a small read.

        (The slots ask it to: see :mod:`.._engine.slots`.)
        """
        self.halt = True

    def _advance(self, received: int, size: int, key: bytes | None) -> bool:
        """After a request that ran to its end: move past what it read; True if more may follow.

        A request stopped at its byte cap passes ``size == received``: it may have more.
        """
        # A full request may have more after its last row; a short one ends its window.
        self._cursor.advance(received, size, None if key is None else self.sub.prefix + key)
        return not self._cursor.done

    def _annotate(self, exc: BaseException, last: bytes | None) -> BaseException:
        if last is None and (where := self._cursor.position) is not None:
            last = where[self._cut :]
        return annotate(exc, self.sub, last)


class OneRequestSourceBase(Generic[S, L]):
    """What a small read's one request keeps, async or sync (:func:`~.plan.one_request`).

    The flavours' sources (:class:`~.sources_asyncio.OneRequestSource`,
    :class:`~.sources_threads.SyncOneRequestSource`) add what only their
    runtime keeps in :meth:`_prepare`.
    """

    __slots__ = (
        "_at",
        "_deadline",
        "_limiter",
        "_one",
        "_read_rows_stream",
        "_stats",
        "_subs",
        "_timeouts",
        "cap",
        "capped",
        "got",
        "internals",
        "largest",
        "last",
        "received",
    )

    def __init__(
        self,
        read_rows_stream: S,
        one: OneRequest,
        subs: tuple[SubQuery, ...],
        *,
        deadline: float,
        timeouts: Timeouts,
        limiter: L,
        stats: list[BucketStats | None],
        cap: int,
        internals: bool = True,
    ) -> None:
        #: As :attr:`BucketSourceBase.internals`.
        self.internals = internals
        self._read_rows_stream: Callable[..., Any] = read_rows_stream
        self._one = one
        self._subs = subs
        self._deadline = deadline
        self._timeouts = timeouts
        self._stats = stats
        #: Rows the request returned (== ``one.rows``: the read is bigger).
        self.received = 0
        self._at = 0  # the sub-query of the last row
        #: The logical key of the last row.
        self.last: bytes | None = None
        #: Bytes the request may return (the read's budget): it stops after the row past them.
        self.cap = cap
        #: It stopped there (a miss: the read goes on bucket by bucket).
        self.capped = False
        #: Bytes the rows it returned count (:func:`~.._engine.budget.row_cost`), and the largest.
        self.got = 0
        self.largest = 0
        self._limiter = limiter
        self._prepare()

    def _prepare(self) -> None:
        """Set what only this runtime's source keeps (the constructor's last step)."""
        raise NotImplementedError

    def over_cap(self) -> bool:
        """True (and :attr:`capped` set) once the rows returned pass the cap before the limit."""
        if self.got > self.cap and self.received < self._one.rows:
            self.capped = True
        return self.capped

    def _relabel(self, row: Row, started: float) -> bytes:
        """Make the row's key logical, measure it, and count it for its bucket."""
        i = self._one.owner(row.row_key)
        if i is None:  # cannot happen: Bigtable returns only rows of the ranges asked
            raise RuntimeError(f"a row outside every bucket asked: {row.row_key!r}")
        self._at = i
        key, nbytes = relabel(row, len(self._subs[i].prefix))
        self.last = key
        if (stats := self._stats[i]) is not None:
            count_row(stats, nbytes, started)
        self.received += 1
        # (row_cost, inline: what the held row costs the budget)
        cost = nbytes + ROW_OVERHEAD_BYTES + CELL_OVERHEAD_BYTES * len(row.cells)
        self.got += cost
        if cost > self.largest:
            self.largest = cost
        return key

    def annotate(self, exc: BaseException) -> BaseException:
        """The error, with a note and a :class:`SubScan` (the bucket of the last row)."""
        sub = self._subs[self._at]
        if getattr(exc, "saltedtable_subscan", None) is None:
            key = self.last
            exc.add_note(
                f"saltedtable: sub-scan of every bucket in one request ({len(self._subs)} "
                "buckets) failed" + ("" if key is None else f", after logical key {key!r}")
            )
            exc.saltedtable_subscan = SubScan(sub.bucket, sub, key)  # type: ignore[attr-defined]
        return exc


def annotate(exc: BaseException, sub: SubQuery, last: bytes | None) -> BaseException:
    """The client's error, with a note and an attribute saying which sub-scan failed."""
    if getattr(exc, "saltedtable_subscan", None) is None:
        resume = "" if last is None else f", after logical key {last!r}"
        exc.add_note(f"saltedtable: sub-scan of {sub.describe()} failed{resume}")
        exc.saltedtable_subscan = SubScan(sub.bucket, sub, last)  # type: ignore[attr-defined]
    return exc


def relabel(row: Row, cut: int) -> tuple[bytes, int]:
    """Give the row and its cells their logical key (the physical one less ``cut`` bytes).

    Returns:
        The logical key, and the bytes the row counts (see :func:`row_bytes`).
    """
    key = row.row_key = row.row_key[cut:]
    nbytes = len(key)
    for cell in row.cells:
        cell.row_key = key
        nbytes += len(cell.value)
    return key, nbytes


def row_bytes(row: Row) -> int:
    """What a row counts in budgets and statistics: its (logical) key and cell values."""
    return len(row.row_key) + sum(len(c.value) for c in row.cells)


def count_row(stats: BucketStats, nbytes: int, started: float) -> None:
    """Count a row of ``nbytes`` bytes a bucket sent (and, for its first, the latency to it)."""
    if stats.first_page_seconds is None:
        stats.first_page_seconds = time.monotonic() - started  # to the first row
    stats.rows += 1
    stats.bytes += nbytes


def count_request(stats: BucketStats, took: float) -> None:
    """Count a request a bucket ran."""
    stats.pages += 1
    stats.seconds += took
    if stats.first_page_seconds is None:  # it sent no rows
        stats.first_page_seconds = took
