# Generated from saltedtable/_async/window_table.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""A table's reads and writes during a dual-layout window, and the backfill's steps.

The rules live in :mod:`saltedtable._scheme.window` (pure); this module only
sends what they return (docs/epochs-window.md, "Using a window"). It is the
source of both flavours: ``_sync_autogen/window_table.py`` is generated from it.

* Writes: :meth:`Window.write` (the new row's mutations and tombstones first,
  then the old row's deletes).
* Point reads: one ``ReadRows`` request carrying every key's two physical keys,
  then :meth:`Window.combine`.
* Scans: one request per physical prefix of either layout (a prefix the two
  layouts share is read once), merged by logical key, then
  :meth:`Window.logical_rows`, the user's filter re-applied
  (:func:`plan_filter`) and the limit counted in logical rows. A scan in the
  window is always ordered (an unordered one would have to hold a key's first
  half until its second came); reversed scans are refused.
* The backfill: :func:`backfill_rows` copies (``check_and_mutate_row`` with the
  window's race-safe predicate), :func:`verify_rows` counts what is left,
  :func:`retire_rows` deletes old rows the new ones show, and
  :func:`drop_tombstones` removes the tombstones once reads stop asking the
  old layout. Each step is idempotent and resumable from a cursor.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from typing import Any, Final, final

from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromFamily,
    DeleteAllFromRow,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    ColumnRangeFilter,
    ConditionalRowFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
)

from .._exceptions import LayoutError, WindowError
from .._guard.decisions import RECORD_ONLY
from .._guard.record import (
    SCHEME_QUALIFIER,
    LayoutRecord,
    encode_layout,
    newest_record_cell,
    record_swap_filter,
)
from .._read.plan import plan_reads, rewrite_filter
from .._read.query import as_query, is_reversed
from .._read.stats import CallStats, StatsHook, report
from .._scheme.layout import Layout
from .._scheme.salt import SCHEME_ROW_KEY, prefix_end, to_key
from .._scheme.window import BackfillProgress, Window, WindowFilter, plan_filter
from .table_like import SyncTableLike

__all__ = [
    "WindowTable",
    "backfill_rows",
    "drop_tombstones",
    "retire_rows",
    "swap_record",
    "verify_rows",
]

#: Logical keys one point-read request asks for (two physical keys each).
KEYS_PER_REQUEST: Final = 500
#: How often the backfill re-reads and re-plans one key whose predicate matched.
MAX_REPLANS: Final = 20

Versions = int | Mapping[str, int] | None


def _has_key_regex(row_filter: RowFilter | None) -> bool:
    if isinstance(row_filter, RowKeyRegexFilter):
        return True
    if isinstance(row_filter, RowFilterChain | RowFilterUnion):
        return any(_has_key_regex(f) for f in row_filter.filters)
    return isinstance(row_filter, ConditionalRowFilter)


def _collect(table: SyncTableLike, query: ReadRowsQuery, **kwargs: Any) -> list[Row]:
    stream = table.read_rows_stream(query, **kwargs)
    return [row for row in stream]


def _pull(stream: Iterator[Row]) -> Row | None:
    try:
        return stream.__next__()
    except StopIteration:
        return None


def _close(streams: Iterable[Any]) -> None:
    for stream in streams:
        closer = getattr(stream, "close", None)
        if closer is not None:
            closer()


def _merged(
    sources: Sequence[tuple[int, Iterator[Row]]],
) -> Generator[Row, None, None]:
    """Rows of several streams, each ordered by ``row_key[cut:]``, in that order.

    Rows of one logical key come out next to each other (in source order), as
    :meth:`Window.logical_rows` needs. No task is started: each stream is pulled
    in turn, so the sync twin needs no thread either.
    """
    try:
        heap: list[tuple[bytes, int, Row]] = []
        for i, (cut, stream) in enumerate(sources):
            row = _pull(stream)
            if row is not None:
                heap.append((row.row_key[cut:], i, row))
        heapq.heapify(heap)
        while heap:
            _, i, row = heap[0]
            yield row
            cut, stream = sources[i]
            nxt = _pull(stream)
            if nxt is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (nxt.row_key[cut:], i, nxt))
    finally:
        _close(s for _, s in sources)


@final
class WindowTable:
    """The I/O of a salted table during a dual-layout window (see the module docstring).

    Args:
        table: The table of physical rows.
        window: The window: rows move from ``window.old`` to ``window.new``.
        max_versions: The column families' ``max_versions`` (an int for all, a
            mapping per family, None: keep every version), re-applied to the
            union of a key's two rows.
    """

    __slots__ = ("_table", "max_versions", "window")

    def __init__(self, table: SyncTableLike, window: Window, max_versions: Versions) -> None:
        self._table = table
        self.window = window
        self.max_versions = max_versions

    # -- writes -------------------------------------------------------------------

    def mutate_row(self, key: bytes, mutations: Sequence[Mutation], **kwargs: Any) -> None:
        """One logical ``mutate_row``: the new row's request first, then the old row's."""
        write = self.window.write(
            key, mutations, token=uuid.uuid4().bytes, now_micros=time.time_ns() // 1000
        )
        self._table.mutate_row(write.new_key, list(write.new_mutations), **kwargs)
        if write.old_key is not None:
            self._table.mutate_row(write.old_key, list(write.old_mutations), **kwargs)

    def entries(
        self, entries: Sequence[RowMutationEntry]
    ) -> tuple[list[RowMutationEntry], list[tuple[int, RowMutationEntry]]]:
        """The physical entries of a bulk write: ``(new rows' entries, (index, old row's))``.

        The first list has one entry per logical entry, in order (so a failure's
        index names the caller's entry); the old rows' deletes follow it.
        """
        now = time.time_ns() // 1000
        first: list[RowMutationEntry] = []
        then: list[tuple[int, RowMutationEntry]] = []
        for i, entry in enumerate(entries):
            write = self.window.write(
                entry.row_key, list(entry.mutations), token=uuid.uuid4().bytes, now_micros=now
            )
            first.append(RowMutationEntry(write.new_key, list(write.new_mutations)))
            if write.old_key is not None:
                then.append((i, RowMutationEntry(write.old_key, list(write.old_mutations))))
        return first, then

    # -- reads --------------------------------------------------------------------

    def _filter(self, row_filter: RowFilter | None) -> WindowFilter:
        return plan_filter(row_filter, window=str(self.window), family=self.window.family)

    def read_keys(
        self, keys: Sequence[bytes], row_filter: RowFilter | None, **kwargs: Any
    ) -> list[Row]:
        """The logical rows of ``keys`` (sorted, unique), each from one request with both keys.

        Up to :data:`KEYS_PER_REQUEST` keys share a request.
        """
        plan = self._filter(row_filter)
        # One request names keys of many prefixes: a row-key regex cannot be rewritten
        # for all of them, so such a filter is applied after the union only.
        server = None if _has_key_regex(plan.server) else plan.server
        out: list[Row] = []
        for start in range(0, len(keys), KEYS_PER_REQUEST):
            chunk = keys[start : start + KEYS_PER_REQUEST]
            physical: list[str | bytes] = []
            for key in chunk:
                new, old = self.window.physical_keys(key)
                physical.append(new)
                if old is not None:
                    physical.append(old)
            rows = _collect(
                self._table, ReadRowsQuery(row_keys=physical, row_filter=server), **kwargs
            )
            found = {row.row_key: row for row in rows}
            for key in chunk:
                new, old = self.window.physical_keys(key)
                got = self.window.combine(
                    key,
                    None if old is None else found.get(old),
                    found.get(new),
                    max_versions=self.max_versions,
                )
                got = plan.apply(got)
                if got is not None:
                    out.append(got)
        return out

    def read_row(self, key: bytes, row_filter: RowFilter | None, **kwargs: Any) -> Row | None:
        """One logical row (one request for both physical keys), or None."""
        rows = self.read_keys([key], row_filter, **kwargs)
        return rows[0] if rows else None

    def _prefix_queries(
        self, query: ReadRowsQuery, server: RowFilter | None
    ) -> list[tuple[bytes, ReadRowsQuery]]:
        """One physical query per prefix of either layout that can hold matching rows."""
        keys: dict[bytes, set[bytes]] = {}
        ranges: dict[bytes, list[Any]] = {}
        for scheme in (self.window.old, self.window.new):
            for sub in plan_reads(query, Layout(scheme)).subqueries:
                keys.setdefault(sub.prefix, set()).update(sub.keys)
                bucket = ranges.setdefault(sub.prefix, [])
                # A prefix both layouts write is planned twice: read it once.
                bucket.extend(r for r in sub.ranges if r not in bucket)
        out = []
        for prefix in sorted(keys):
            if not keys[prefix] and not ranges[prefix]:
                continue
            out.append(
                (
                    prefix,
                    ReadRowsQuery(
                        row_keys=sorted(keys[prefix]) or None,
                        row_ranges=[r.to_row_range() for r in ranges[prefix]] or None,
                        row_filter=rewrite_filter(server, prefix),
                    ),
                )
            )
        return out

    def prepare(self, request: Any) -> ReadRowsQuery:
        """Check a logical query before anything is sent; return it as a ``ReadRowsQuery``.

        Raises:
            WindowError: A reversed scan.
            WindowFilterError: A filter the window cannot re-apply after the union.
            RowKeyError: A point key that cannot be salted.
        """
        if is_reversed(request):
            raise WindowError(
                f"reversed scans are refused during the {self.window}: read forwards, or "
                "after the window closes"
            )
        query = as_query(request)
        self._filter(query.filter)
        for key in query.row_keys:
            self.window.physical_keys(key)  # a key that cannot be salted fails now
        return query

    def scan(
        self,
        query: ReadRowsQuery,
        *,
        stats: CallStats | None = None,
        hook: StatsHook | None = None,
        **kwargs: Any,
    ) -> Generator[Row, None, None]:
        """The logical rows of a checked query (:meth:`prepare`), in logical key order.

        ``stats`` (made when only ``hook`` is given) counts the ReadRows requests
        and the logical rows handed over; the hook gets it when the scan ends.
        """
        if stats is None and hook is not None:
            stats = CallStats()
        if stats is not None and not stats.operation:
            stats.operation = "read_rows"
        rows = self._rows(query, stats, **kwargs)
        error: BaseException | None = None
        try:
            with closing(rows):
                for row in rows:
                    if stats is not None:
                        stats.rows += 1
                    yield row
        except GeneratorExit:  # the caller left early (a break, or the stream dropped)
            if stats is not None:
                stats.ended_early = True
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            if stats is not None:
                report(stats, error, hook)

    def _rows(
        self, query: ReadRowsQuery, stats: CallStats | None, **kwargs: Any
    ) -> Generator[Row, None, None]:
        plan = self._filter(query.filter)
        limit = query.limit or None
        if query.row_keys and not query.row_ranges:
            keys = sorted({to_key(k) for k in query.row_keys})
            if stats is not None:
                stats.requests += -(-len(keys) // KEYS_PER_REQUEST)
            rows = self.read_keys(keys, query.filter, **kwargs)
            for sent, row in enumerate(rows):
                if limit is not None and sent >= limit:
                    return
                yield row
            return
        sources: list[tuple[int, Iterator[Row]]] = []
        try:
            for prefix, sub in self._prefix_queries(query, plan.server):
                stream = self._table.read_rows_stream(sub, **kwargs)
                sources.append((len(prefix), stream.__iter__()))
                if stats is not None:
                    stats.requests += 1
        except BaseException:
            _close(s for _, s in sources)  # the streams opened before the failure
            raise
        merged = _merged(sources)
        combined = _logical(self.window, merged, self.max_versions)
        sent = 0
        try:
            for logical in combined:
                got = plan.apply(logical)
                if got is None:
                    continue
                yield got
                sent += 1
                if limit is not None and sent >= limit:
                    return
        finally:
            # A limit met, a break or an error: close every stream at once.
            combined.close()
            merged.close()


def _logical(
    window: Window, rows: Generator[Row, None, None], max_versions: Versions
) -> Generator[Row, None, None]:
    """:meth:`Window.logical_rows` over a stream: one key's rows at a time."""
    group: list[Row] = []
    key: bytes | None = None
    for row in rows:
        placed = window.place(row.row_key)
        if placed.key is None:
            continue
        if placed.key != key and group:
            for got in window.logical_rows(group, max_versions=max_versions):
                yield got
            group = []
        key = placed.key
        group.append(row)
    for got in window.logical_rows(group, max_versions=max_versions):
        yield got


# -- the backfill --------------------------------------------------------------------


def _old_ranges(window: Window, after: bytes | None) -> list[tuple[bytes, ReadRowsQuery]]:
    """A key-only scan of each old prefix, from just after ``after``."""
    out = []
    for prefix in sorted(set(window.old.prefixes)):
        end = prefix_end(prefix)
        if after is not None and end and after >= end:
            continue
        start = after if after is not None and after >= prefix else prefix
        closed = not (after is not None and after >= prefix)
        out.append(
            (
                prefix,
                ReadRowsQuery(
                    row_ranges=RowRange(start, end or None, start_is_inclusive=closed),
                    # Keys only: each key's rows are read again, whole, when it is handled.
                    row_filter=RowFilterChain(
                        [CellsRowLimitFilter(1), StripValueTransformerFilter(True)]
                    ),
                ),
            )
        )
    return out


def _old_rows(
    table: SyncTableLike, window: Window, after: bytes | None, limit: int | None
) -> Generator[tuple[bytes, bytes], None]:
    """``(old physical key, logical key)`` of old rows (not shared ones), in physical order."""
    seen = 0
    for _, query in _old_ranges(window, after):
        rows = _collect(table, query)
        for row in rows:  # (keys only: a bucket's keys fit in memory)
            placed = window.place(row.row_key)
            if placed.key is None or not placed.old or placed.shared:
                continue
            if window.physical_keys(placed.key)[1] != row.row_key:
                continue  # a new row of a key whose old row is elsewhere
            yield row.row_key, placed.key
            seen += 1
            if limit is not None and seen >= limit:
                return


def _both(table: SyncTableLike, window: Window, key: bytes) -> tuple[Row | None, Row | None]:
    """A key's old and new rows, in one request."""
    new, old = window.physical_keys(key)
    keys: list[str | bytes] = [new] if old is None else [new, old]
    found = {row.row_key: row for row in _collect(table, ReadRowsQuery(row_keys=keys))}
    return (None if old is None else found.get(old)), found.get(new)


def backfill_rows(
    table: SyncTableLike,
    window: Window,
    *,
    after: bytes | None = None,
    limit: int | None = None,
    max_cells: int = 100,
) -> BackfillProgress:
    """Copy old rows into their new rows (:meth:`Window.backfill`), resumable.

    Each key's copies are ``check_and_mutate_row`` requests whose predicate
    matches when a write or delete reached the new row after it was read: then
    nothing is written, and the key is read and planned again. A crash at any
    point leaves the table reading the same; run again (from the last cursor,
    or from the start) to go on.

    Args:
        table: The table of physical rows.
        window: The window.
        after: Resume after this old physical key (a previous step's cursor).
        limit: Old rows to visit at most (None: to the end).
        max_cells: Cells one copy request writes at most.
    """
    progress = BackfillProgress(cursor=after)
    for physical, key in _old_rows(table, window, after, limit):
        for _ in range(MAX_REPLANS):
            old, new = _both(table, window, key)
            copies = window.backfill(key, old, new, max_cells=max_cells)
            matched = False
            for copy in copies:
                if table.check_and_mutate_row(
                    copy.row_key, copy.predicate, false_case_mutations=list(copy.mutations)
                ):
                    matched = True
                    progress.replans += 1
                    break
                progress.copied += len(copy.mutations)
            if not matched:
                break
        else:
            raise WindowError(
                f"the backfill of {key!r} was overtaken {MAX_REPLANS} times by writes to its "
                "new row; run the step again"
            )
        progress.keys += 1
        progress.cursor = physical
    progress.done = limit is None or progress.keys < limit
    return progress


def verify_rows(
    table: SyncTableLike, window: Window, *, after: bytes | None = None, limit: int | None = None
) -> BackfillProgress:
    """Count old rows whose cells the new rows do not all show yet (``left``); writes nothing."""
    progress = BackfillProgress(cursor=after)
    for physical, key in _old_rows(table, window, after, limit):
        old, new = _both(table, window, key)
        if window.to_copy(old, new):
            progress.left += 1
        progress.keys += 1
        progress.cursor = physical
    progress.done = limit is None or progress.keys < limit
    return progress


def retire_rows(
    table: SyncTableLike, window: Window, *, after: bytes | None = None, limit: int | None = None
) -> BackfillProgress:
    """Delete each old row its new row fully shows (:meth:`Window.retire_old`).

    An old row with cells still to copy is kept and counted in ``left``.
    """
    progress = BackfillProgress(cursor=after)
    for physical, key in _old_rows(table, window, after, limit):
        old, new = _both(table, window, key)
        retire = window.retire_old(key, old, new)
        if retire is None:
            progress.left += old is not None
        else:
            table.mutate_row(retire[0], list(retire[1]))
            progress.retired += 1
        progress.keys += 1
        progress.cursor = physical
    progress.done = limit is None or progress.keys < limit
    return progress


def drop_tombstones(table: SyncTableLike, window: Window) -> BackfillProgress:
    """Delete the window family's cells from every row: the window's last step.

    Only once no reader combines the old layout any more (the old rows are
    retired and every table object reads the new layout alone).
    """
    progress = BackfillProgress()
    rows = _collect(table, ReadRowsQuery(row_filter=ColumnRangeFilter(window.family)))
    for row in rows:
        table.mutate_row(row.row_key, [DeleteAllFromFamily(window.family)])
        progress.retired += 1
        progress.keys += 1
        progress.cursor = row.row_key
    progress.done = True
    return progress


def swap_record(
    table: SyncTableLike, change: Callable[[LayoutRecord], LayoutRecord]
) -> LayoutRecord:
    """Replace the stored layout record by ``change(stored)``, if no one changed it meanwhile.

    A compare-and-swap: one ``CheckAndMutateRow`` of the reserved row whose
    predicate matches only while the newest record cell still holds the value
    read. Used to open and advance a window (``saltedtable._guard.window_state``).

    Returns:
        The record stored.

    Raises:
        LayoutError: The table has no record, ``change`` refused it, or another
            writer changed the record between the read and the swap (read it
            again and decide again).
    """
    row = table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY)
    cell = newest_record_cell(row)
    if cell is None:
        raise LayoutError("the table has no layout record to change: store one first")
    before = LayoutRecord.decode(cell.value)
    after = change(before)
    still = record_swap_filter(cell.family, cell.value)
    swapped = table.check_and_mutate_row(
        SCHEME_ROW_KEY,
        still,
        true_case_mutations=[
            # As the guard replaces a record: the row holds the record alone.
            DeleteAllFromRow(),
            SetCell(cell.family, SCHEME_QUALIFIER, encode_layout(after)),
        ],
    )
    if not swapped:
        raise LayoutError(
            "the layout record changed while it was being changed (another operator?): "
            "read it again and decide again"
        )
    return after
