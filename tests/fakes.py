"""FakeTable: an in-memory Bigtable table implementing ``saltedtable.TableLikeAsync``.

The oracle of the unit tests, so it favours plain, obviously correct code over
speed: rows live in a dict of row key -> cells (kept in Bigtable's cell order:
family, qualifier, newest timestamp first) next to a sorted list of the keys.
Reads follow ``ReadRowsQuery`` semantics (no keys and no ranges = whole table;
otherwise the union of keys and ranges, each row once, in byte order; the
limit counts returned rows; rows whose cells are all filtered out are not
returned) and hand out new ``Row``/``Cell`` objects every time, since callers
may relabel what they get. ``read_rows_stream`` records what each stream did
so tests can prove that nothing was left open.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import heapq
import inspect
import math
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
from google.api_core.exceptions import PermissionDenied, Unknown
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.read_modify_write_rules import (
    AppendValueRule,
    IncrementRule,
    ReadModifyWriteRule,
)
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable.data.row_filters import (
    ApplyLabelFilter,
    BlockAllFilter,
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    CellsRowOffsetFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    ConditionalRowFilter,
    FamilyNameRegexFilter,
    PassAllFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueRangeFilter,
    ValueRegexFilter,
)

from saltedtable import SCHEME_ROW_KEY
from saltedtable._guard.families import FamilyInfo
from saltedtable._scheme.window import apply_filter as window_filter

__all__ = [
    "FakeBatcher",
    "FakeTable",
    "StreamStats",
    "SyncFakeBatcher",
    "SyncFakeTable",
    "in_range",
    "query_keys",
]

#: How ``read_rows_stream`` streams end (see :class:`StreamStats`).
EXHAUSTED, CANCELLED, ABANDONED, FAILED = "exhausted", "cancelled", "abandoned", "failed"

# A cell as stored: (family, qualifier, timestamp_micros, value).
_Stored = tuple[str, bytes, int, bytes]


@dataclass
class StreamStats:
    """What the ``read_rows_stream`` streams of a :class:`FakeTable` did.

    Attributes:
        opened: Streams whose body started running.
        closed: Streams that ended, however they ended.
        open_now: Streams open right now.
        max_open: The most streams open at the same time.
        rows_sent: Rows handed out over every stream.
        endings: One entry per ended stream: ``"exhausted"`` (every row was
            handed out), ``"cancelled"`` (a CancelledError hit it while it was
            pending), ``"abandoned"`` (closed by ``aclose()``/GeneratorExit while
            rows remained) or ``"failed"`` (an injected failure).
        queries: Every query passed to ``read_rows_stream``, in call order.
    """

    opened: int = 0
    closed: int = 0
    open_now: int = 0
    max_open: int = 0
    rows_sent: int = 0
    endings: list[str] = field(default_factory=list)
    queries: list[ReadRowsQuery] = field(default_factory=list)

    def count(self, ending: str) -> int:
        """How many streams ended this way."""
        return self.endings.count(ending)


def _to_bytes(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else key


def _bounds(row_range: RowRange) -> tuple[bytes | None, bool, bytes | None, bool]:
    """(start, start inclusive, end, end inclusive) of ``row_range``, read once.

    Reading a ``RowRange``'s keys goes through its protobuf message each time;
    a scan of many keys against a range reads them once, here.
    """
    return (
        row_range.start_key,
        row_range.start_is_inclusive,
        row_range.end_key,
        row_range.end_is_inclusive,
    )


def _within(key: bytes, bounds: tuple[bytes | None, bool, bytes | None, bool]) -> bool:
    start, start_inclusive, end, end_inclusive = bounds
    if start is not None and (key < start or (key == start and not start_inclusive)):
        return False
    return end is None or key < end or (key == end and end_inclusive)


def in_range(key: bytes, row_range: RowRange) -> bool:
    """Whether ``key`` lies in ``row_range`` (a missing end is unbounded)."""
    return _within(key, _bounds(row_range))


def query_keys(query: ReadRowsQuery, keys: Iterable[bytes]) -> list[bytes]:
    """The keys (of sorted ``keys``) that ``query`` selects, before filter and limit."""
    if not query.row_keys and not query.row_ranges:
        return list(keys)
    points = set(query.row_keys)
    ranges = [_bounds(r) for r in query.row_ranges]
    return [k for k in keys if k in points or any(_within(k, r) for r in ranges)]


def _selected(query: ReadRowsQuery, keys: list[bytes]) -> Iterator[bytes]:
    """What :func:`query_keys` returns for the sorted list ``keys``, lazily, found by bisection.

    Each range is a run of consecutive indexes of ``keys`` and each row key at
    most one index; the runs are merged in index order and each index taken
    once, so a read stopped by its limit looks at no more keys than it returns.
    """
    if not query.row_keys and not query.row_ranges:
        yield from keys
        return
    runs: list[Iterable[int]] = []
    for start, start_inclusive, end, end_inclusive in map(_bounds, query.row_ranges):
        lo = 0
        if start is not None:
            lo = (bisect.bisect_left if start_inclusive else bisect.bisect_right)(keys, start)
        hi = len(keys)
        if end is not None:
            hi = (bisect.bisect_right if end_inclusive else bisect.bisect_left)(keys, end)
        runs.append(range(lo, hi))
    points = []
    for key in set(query.row_keys):
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            points.append(at)
    runs.append(sorted(points))
    last = -1
    for at in heapq.merge(*runs):
        if at != last:
            last = at
            yield keys[at]


def _regex_match(regex: bytes, subject: bytes) -> bool:
    # RE2 matches a row-key/family/qualifier/value regex against the whole
    # subject; Python's re on bytes with DOTALL off is the closest stand-in
    # (RE2's end-of-text \z is Python's \Z).
    return re.fullmatch(regex.replace(b"\\z", b"\\Z"), subject) is not None


def _apply_filter(row_filter: RowFilter | None, key: bytes, cells: list[Cell]) -> list[Cell]:
    """Bigtable's filter semantics on one row: the cells that come out (possibly none)."""
    if row_filter is None:
        return cells
    if isinstance(row_filter, PassAllFilter):
        if not row_filter.flag:
            raise ValueError("PassAllFilter(False) is not a valid Bigtable filter")
        return cells
    if isinstance(row_filter, BlockAllFilter):
        if not row_filter.flag:
            raise ValueError("BlockAllFilter(False) is not a valid Bigtable filter")
        return []
    if isinstance(row_filter, RowKeyRegexFilter):
        return cells if _regex_match(row_filter.regex, key) else []
    if isinstance(row_filter, FamilyNameRegexFilter):
        return [c for c in cells if _regex_match(row_filter.regex, c.family.encode())]
    if isinstance(row_filter, ColumnQualifierRegexFilter):
        return [c for c in cells if _regex_match(row_filter.regex, c.qualifier)]
    if isinstance(row_filter, ValueRegexFilter):
        return [c for c in cells if _regex_match(row_filter.regex, c.value)]
    if isinstance(row_filter, CellsRowLimitFilter):
        return cells[: row_filter.num_cells]
    if isinstance(row_filter, CellsRowOffsetFilter):
        return cells[row_filter.num_cells :]
    if isinstance(row_filter, CellsColumnLimitFilter):
        seen: dict[tuple[str, bytes], int] = {}
        out = []
        for c in cells:
            n = seen.get((c.family, c.qualifier), 0)
            if n < row_filter.num_cells:
                out.append(c)
            seen[(c.family, c.qualifier)] = n + 1
        return out
    if isinstance(row_filter, StripValueTransformerFilter):
        if not row_filter.flag:
            return cells
        return [_copy_cell(c, value=b"") for c in cells]
    if isinstance(row_filter, ApplyLabelFilter):
        return [_copy_cell(c, labels=[*c.labels, row_filter.label]) for c in cells]
    if isinstance(row_filter, RowFilterChain):
        for f in row_filter.filters:
            cells = _apply_filter(f, key, cells)
        return cells
    if isinstance(row_filter, RowFilterUnion):
        # Interleave: every sub-filter sees the whole input; the outputs are
        # merged in cell order (family, qualifier, newest first), duplicates kept.
        tagged = [
            (c.family, c.qualifier, -c.timestamp_micros, n, c)
            for n, f in enumerate(row_filter.filters)
            for c in _apply_filter(f, key, [_copy_cell(c) for c in cells])
        ]
        tagged.sort(key=lambda t: t[:4])
        return [t[4] for t in tagged]
    if isinstance(row_filter, ConditionalRowFilter):
        matched = bool(_apply_filter(row_filter.predicate_filter, key, cells))
        branch = row_filter.true_filter if matched else row_filter.false_filter
        # A missing branch outputs nothing.
        return [] if branch is None else _apply_filter(branch, key, cells)
    if isinstance(row_filter, ColumnRangeFilter | TimestampRangeFilter | ValueRangeFilter):
        # Per-cell predicates: the dual-layout window's own semantics of them (checked
        # against the emulator in the window's tests).
        got = window_filter(row_filter, Row(key, cells))
        return [] if got is None else got.cells
    raise NotImplementedError(f"FakeTable does not implement {type(row_filter).__name__}")


def _copy_cell(cell: Cell, **changes: Any) -> Cell:
    fields = {
        "value": cell.value,
        "row_key": cell.row_key,
        "family": cell.family,
        "qualifier": cell.qualifier,
        "timestamp_micros": cell.timestamp_micros,
        "labels": list(cell.labels),
    }
    fields.update(changes)
    return Cell(**fields)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class FakeTable:
    """An in-memory table with the data methods of ``TableAsync`` that saltedtable uses.

    Args:
        latency: Seconds each ``read_rows_stream`` stream sleeps before its first row.
        fail_when: Called with each read query; when it returns True the stream
            raises ``fail_with`` (after ``fail_after_rows`` rows).
        fail_with: The exception to raise for a failing read.
        fail_after_rows: Rows a failing stream hands out before it raises.
        fail_entry: Called with each ``bulk_mutate_rows`` entry; an exception it
            returns fails that entry (the others are still applied).
        sample_every: ``sample_row_keys`` reports every n-th row key.
        families: The table's column families, as the admin API would
            describe them: writes naming another family fail as Bigtable's
            do, and the guard reads them (``saltedtable_schema``). None: any
            family is accepted and the schema cannot be read.
        schema_readable: False: the schema cannot be read even with ``families``
            (a caller without admin rights).
    """

    # TableAsync's defaults (the salted table resolves timeouts from them).
    default_read_rows_operation_timeout: float = 600
    default_read_rows_attempt_timeout: float | None = 20
    default_mutate_rows_operation_timeout: float = 600
    default_mutate_rows_attempt_timeout: float | None = 60
    default_operation_timeout: float = 60
    default_attempt_timeout: float | None = 20

    def __init__(
        self,
        *,
        latency: float = 0.0,
        fail_when: Callable[[ReadRowsQuery], bool] | None = None,
        fail_with: BaseException | None = None,
        fail_after_rows: int = 0,
        fail_entry: Callable[[RowMutationEntry], Exception | None] | None = None,
        sample_every: int = 100,
        families: Iterable[FamilyInfo | str] | None = None,
        schema_readable: bool = True,
    ) -> None:
        self.families = (
            None
            if families is None
            else {
                f.name if isinstance(f, FamilyInfo) else f: (
                    f if isinstance(f, FamilyInfo) else FamilyInfo(f)
                )
                for f in families
            }
        )
        self.schema_readable = schema_readable
        self.schema_reads = 0
        self._rows: dict[bytes, list[_Stored]] = {}
        self._keys: list[bytes] = []
        self.latency = latency
        self.fail_when = fail_when
        self.fail_with = fail_with
        self.fail_after_rows = fail_after_rows
        self.fail_entry = fail_entry
        self.sample_every = sample_every
        self.stats = StreamStats()
        self.read_kwargs: list[dict[str, Any]] = []
        self.closed = False
        self._clock = 1_700_000_000_000_000

    # -- inspection (sync, for tests) ------------------------------------------

    def row_keys(self) -> list[bytes]:
        """Every row key, in byte order."""
        return list(self._keys)

    def data_keys(self) -> list[bytes]:
        """Every row key but saltedtable's layout record, in byte order."""
        return [k for k in self._keys if k != SCHEME_ROW_KEY]

    def cells_of(self, key: bytes) -> list[tuple[str, bytes, int, bytes]]:
        """The stored cells of a row as (family, qualifier, timestamp, value), or []."""
        return list(self._rows.get(key, []))

    def set_cell(
        self, key: bytes | str, family: str, qualifier: bytes | str, value: bytes, ts: int = 1000
    ) -> None:
        """Write one cell without going through the async API (test setup)."""
        self._apply(_to_bytes(key), [SetCell(family, qualifier, value, ts)])

    def saltedtable_schema(self) -> dict[str, FamilyInfo]:
        """The column families, as saltedtable's guard reads them through the admin API."""
        self.schema_reads += 1
        if self.families is None or not self.schema_readable:
            raise PermissionDenied("the fake table's schema cannot be read")
        return dict(self.families)

    def now_micros(self) -> int:
        """A monotonic fake server clock, millisecond granularity like Bigtable."""
        self._clock += 1000
        return self._clock

    # -- storage ---------------------------------------------------------------

    def _row(self, key: bytes) -> Row | None:
        stored = self._rows.get(key)
        if not stored:
            return None
        return Row(key, [Cell(v, key, f, q, ts) for f, q, ts, v in stored])

    def _store(self, key: bytes, cells: list[_Stored]) -> None:
        if cells:
            if key not in self._rows:
                bisect.insort(self._keys, key)
            cells.sort(key=lambda c: (c[0], c[1], -c[2]))
            self._rows[key] = cells
        elif key in self._rows:
            del self._rows[key]
            self._keys.pop(bisect.bisect_left(self._keys, key))

    def _apply(self, key: bytes, mutations: Sequence[Mutation]) -> None:
        if not key:
            raise ValueError("Bigtable row keys must not be empty")
        cells = list(self._rows.get(key, []))
        if self.families is not None:
            for m in mutations:
                name = getattr(m, "family", None) or getattr(m, "family_to_delete", None)
                if name is not None and name not in self.families:
                    raise Unknown(f'unknown family "{name}"')
        for m in mutations:
            if isinstance(m, SetCell):
                ts = m.timestamp_micros if m.timestamp_micros >= 0 else self.now_micros()
                cells = [c for c in cells if (c[0], c[1], c[2]) != (m.family, m.qualifier, ts)]
                cells.append((m.family, m.qualifier, ts, m.new_value))
            elif isinstance(m, DeleteAllFromRow):
                cells = []
            elif isinstance(m, DeleteAllFromFamily):
                cells = [c for c in cells if c[0] != m.family_to_delete]
            elif isinstance(m, DeleteRangeFromColumn):
                lo = m.start_timestamp_micros or 0
                hi = m.end_timestamp_micros
                qualifier = _to_bytes(m.qualifier)
                cells = [
                    c
                    for c in cells
                    if not (
                        (c[0], c[1]) == (m.family, qualifier)
                        and c[2] >= lo
                        and (hi is None or c[2] < hi)
                    )
                ]
            elif isinstance(m, AddToCell):
                # An aggregate cell (int64, big-endian): the family's kind (from
                # ``families``; sum without them) folds the add into the cell.
                info = None if self.families is None else self.families.get(m.family)
                kind = (info.aggregate if info is not None and info.aggregate else "sum").split()[
                    -1
                ]
                ts = m.timestamp
                qualifier = _to_bytes(m.qualifier)
                old = [c for c in cells if (c[0], c[1], c[2]) == (m.family, qualifier, ts)]
                value = m.value
                if old:
                    was = int.from_bytes(old[0][3], "big", signed=True)
                    if kind == "sum":
                        value = (was + value + (1 << 63)) % (1 << 64) - (1 << 63)
                    else:
                        value = min(was, value) if kind == "min" else max(was, value)
                    cells = [c for c in cells if c not in old]
                cells.append((m.family, qualifier, ts, value.to_bytes(8, "big", signed=True)))
            else:
                raise NotImplementedError(f"FakeTable does not implement {type(m).__name__}")
        self._store(key, cells)

    def _select(self, query: ReadRowsQuery) -> list[Row]:
        """The rows a query returns: selected keys, filtered, non-empty, limited."""
        out: list[Row] = []
        for key in _selected(query, self._keys):
            row = self._row(key)
            assert row is not None
            cells = _apply_filter(query.filter, key, row.cells)
            if cells:
                out.append(Row(key, cells))
                if query.limit and len(out) >= query.limit:
                    break
        return out

    # -- reads -----------------------------------------------------------------

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
        """Stream the rows of ``query`` (an async generator, like the client's)."""
        self.stats.queries.append(query)
        self.read_kwargs.append(kwargs)
        return self._stream(query)

    async def _stream(self, query: ReadRowsQuery) -> AsyncIterator[Row]:
        stats = self.stats
        stats.opened += 1
        stats.open_now += 1
        stats.max_open = max(stats.max_open, stats.open_now)
        ending = EXHAUSTED
        rows: list[Row] = []
        sent = 0
        try:
            if self.latency:
                await anyio.sleep(self.latency)
            rows = self._select(query)
            failing = self.fail_when is not None and self.fail_when(query)
            for row in rows:
                if failing and sent >= self.fail_after_rows:
                    break
                # A checkpoint per row, so cancellation can land mid-stream.
                await anyio.lowlevel.checkpoint()
                sent += 1
                stats.rows_sent += 1
                yield row
            if failing:
                await anyio.lowlevel.checkpoint()
                ending = FAILED
                raise self.fail_with or RuntimeError("injected read failure")
        except anyio.get_cancelled_exc_class():
            ending = CANCELLED
            raise
        except GeneratorExit:
            ending = ABANDONED if sent < len(rows) else EXHAUSTED
            raise
        finally:
            stats.open_now -= 1
            stats.closed += 1
            stats.endings.append(ending)

    async def read_rows(self, query: ReadRowsQuery, **kwargs: Any) -> list[Row]:
        """Read the rows of ``query`` into a list (through ``read_rows_stream``)."""
        return [row async for row in await self.read_rows_stream(query, **kwargs)]

    async def read_row(
        self, row_key: bytes | str, *, row_filter: RowFilter | None = None, **kwargs: Any
    ) -> Row | None:
        """Read one row; None if it does not exist or the filter leaves no cell."""
        query = ReadRowsQuery(row_keys=_to_bytes(row_key), row_filter=row_filter, limit=1)
        rows = self._select(query)
        return rows[0] if rows else None

    async def row_exists(self, row_key: bytes | str, **kwargs: Any) -> bool:
        """Tell whether the row has any cell."""
        return _to_bytes(row_key) in self._rows

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        """Every ``sample_every``-th key with the bytes before it, then ``(b"", total)``."""
        samples: list[tuple[bytes, int]] = []
        total = 0
        for i, key in enumerate(self._keys):
            if i and i % self.sample_every == 0:
                samples.append((key, total))
            total += len(key) + sum(len(c[1]) + len(c[3]) + 8 for c in self._rows[key])
        samples.append((b"", total))
        return samples

    # -- writes ----------------------------------------------------------------

    async def mutate_row(
        self, row_key: bytes | str, mutations: Mutation | list[Mutation], **kwargs: Any
    ) -> None:
        """Apply mutations to one row."""
        self._apply(_to_bytes(row_key), _as_list(mutations))

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        """Apply every entry; failed entries (``fail_entry``) raise together at the end."""
        failures: list[Exception] = []
        for i, entry in enumerate(mutation_entries):
            cause = self.fail_entry(entry) if self.fail_entry is not None else None
            if cause is not None:
                failures.append(FailedMutationEntryError(i, entry, cause))
                continue
            self._apply(_to_bytes(entry.row_key), list(entry.mutations))
        if failures:
            raise MutationsExceptionGroup(failures, len(mutation_entries))

    async def check_and_mutate_row(
        self,
        row_key: bytes | str,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = None,
        false_case_mutations: Mutation | list[Mutation] | None = None,
        **kwargs: Any,
    ) -> bool:
        """Apply the true or false mutations depending on whether the predicate yields cells."""
        key = _to_bytes(row_key)
        row = self._row(key)
        cells = [] if row is None else row.cells
        matched = bool(_apply_filter(predicate, key, cells)) if predicate else bool(cells)
        chosen = true_case_mutations if matched else false_case_mutations
        if chosen:
            self._apply(key, _as_list(chosen))
        return matched

    async def read_modify_write_row(
        self,
        row_key: bytes | str,
        rules: ReadModifyWriteRule | list[ReadModifyWriteRule],
        **kwargs: Any,
    ) -> Row:
        """Apply append/increment rules in order; return a row of the modified cells."""
        key = _to_bytes(row_key)
        rule_list = _as_list(rules)
        if not rule_list:
            raise ValueError("rules must contain at least one item")
        cells = list(self._rows.get(key, []))
        written: dict[tuple[str, bytes], _Stored] = {}
        for rule in rule_list:
            qualifier = _to_bytes(rule.qualifier)
            latest = next((c for c in cells if (c[0], c[1]) == (rule.family, qualifier)), None)
            old = latest[3] if latest else b""
            if isinstance(rule, AppendValueRule):
                new = old + _to_bytes(rule.append_value)
            elif isinstance(rule, IncrementRule):
                value = int.from_bytes(old, "big", signed=True) if old else 0
                new = ((value + rule.increment_amount + 2**63) % 2**64 - 2**63).to_bytes(
                    8, "big", signed=True
                )
            else:
                raise NotImplementedError(f"FakeTable does not implement {type(rule).__name__}")
            # The new timestamp is the greater of the existing one and the server time.
            ts = max(self.now_micros(), latest[2] if latest else 0)
            cell = (rule.family, qualifier, ts, new)
            cells = [c for c in cells if (c[0], c[1], c[2]) != (rule.family, qualifier, ts)]
            cells.insert(0, cell)
            cells.sort(key=lambda c: (c[0], c[1], -c[2]))
            written[(rule.family, qualifier)] = cell
        self._store(key, cells)
        return Row(key, [Cell(v, key, f, q, ts) for f, q, ts, v in sorted(written.values())])

    def mutations_batcher(self, **kwargs: Any) -> FakeBatcher:
        """A minimal batcher: entries are applied (via bulk_mutate_rows) on flush."""
        return FakeBatcher(self, **kwargs)

    async def close(self) -> None:
        """Mark the table closed."""
        self.closed = True


class FakeBatcher:
    """A minimal ``MutationsBatcherAsync``: queue entries, write them in flush jobs.

    It has the client's private parts the salted batcher takes
    (google-cloud-bigtable 2.50): ``_schedule_flush()`` starts a flush job (a
    task) of the staged entries and returns it, ``_flush_jobs`` holds the jobs
    not done, and each job hands its failed entries (indexes stripped, as the
    client's batcher does) to ``_add_exceptions``, which keeps the first ten
    and the last ten for ``close()`` to raise as a ``MutationsExceptionGroup``.
    As the client's, ``append`` starts a job once ``flush_limit_mutation_count``
    entries are staged, and nothing is written before a job runs.

    ``blocked`` (physical key -> event): a job holding such an entry waits for
    the event before it writes anything.
    """

    def __init__(self, table: FakeTable, **kwargs: Any) -> None:
        self.table = table
        self.kwargs = kwargs
        self.limit: float = kwargs.get("flush_limit_mutation_count") or math.inf
        self.blocked: dict[bytes, asyncio.Event] = {}
        self._staged_entries: list[RowMutationEntry] = []
        self._flush_jobs: set[asyncio.Task[None]] = set()
        self._errors: list[Exception] = []
        self._attempted = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue an entry; start a flush job at the limit."""
        if self._closed:
            raise RuntimeError("Cannot append to closed MutationsBatcher")
        self._staged_entries.append(mutation_entry)
        if len(self._staged_entries) >= self.limit:
            self._schedule_flush()
            await asyncio.sleep(0)

    def _schedule_flush(self) -> asyncio.Task[None] | None:
        if not self._staged_entries:
            return None
        staged, self._staged_entries = self._staged_entries, []
        job = asyncio.get_running_loop().create_task(self._flush_internal(staged))
        self._flush_jobs.add(job)
        job.add_done_callback(self._flush_jobs.discard)
        return job

    async def _flush_internal(self, entries: list[RowMutationEntry]) -> None:
        for entry in entries:
            event = self.blocked.get(_to_bytes(entry.row_key))
            if event is not None:
                await event.wait()
        self._add_exceptions(await _write_batch(self.table, entries))
        self._attempted += len(entries)

    def _add_exceptions(self, excs: list[Exception]) -> None:
        self._errors = _kept(self._errors, excs)

    async def close(self) -> None:
        """Flush and close; raise the collected failures."""
        self._closed = True
        self._schedule_flush()
        await asyncio.gather(*self._flush_jobs)
        if self._errors:
            errors, self._errors = self._errors, []
            raise MutationsExceptionGroup(errors, self._attempted)  # type: ignore[arg-type]

    async def __aenter__(self) -> FakeBatcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _kept(errors: list[Exception], new: list[Exception]) -> list[Exception]:
    """The failures the client's batcher keeps for close(): the first ten and the last ten."""
    errors = errors + new
    return errors if len(errors) <= 20 else errors[:10] + errors[-10:]


async def _write_batch(table: FakeTable, entries: list[RowMutationEntry]) -> list[Exception]:
    """Write a flush job's entries; its failures, without their batch positions."""
    try:
        await table.bulk_mutate_rows(entries)
    except MutationsExceptionGroup as group:
        for exc in group.exceptions:
            if isinstance(exc, FailedMutationEntryError):
                exc.index = None  # the real batcher strips batch positions
        return list(group.exceptions)
    return []


class SyncFakeTable:
    """A sync ``Table`` over a :class:`FakeTable` (same rows, same stats), for ``SaltedTable``.

    Each call drives the fake's coroutine on an event loop of its own thread;
    a stream pulls one row at a time, so leaving it early leaves the rest unread.
    """

    def __init__(self, fake: FakeTable) -> None:
        self.fake = fake
        self.default_read_rows_operation_timeout = fake.default_read_rows_operation_timeout
        self.default_read_rows_attempt_timeout = fake.default_read_rows_attempt_timeout

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.fake, name)
        if name == "mutations_batcher":
            return lambda **kwargs: SyncFakeBatcher(self.fake, **kwargs)
        if not callable(attr) or name.startswith("_") or name == "saltedtable_schema":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run(attr(*args, **kwargs))

        return call

    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Iterator[Row]:
        """The fake's stream, pulled row by row on a loop of its own."""
        loop = asyncio.new_event_loop()
        try:
            stream = loop.run_until_complete(self.fake.read_rows_stream(query, **kwargs))
        except BaseException:
            loop.close()
            raise
        return _Pulled(loop, stream)


class _Pulled(Iterator[Row]):
    """The rows of a fake stream, pulled one at a time; closing it before its first row
    still closes the stream and its loop (a generator that never started would not)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: Any) -> None:
        self._loop = loop
        self._stream = stream
        self._rows = _pull(loop, stream)

    def __next__(self) -> Row:
        return next(self._rows)

    def close(self) -> None:
        if inspect.getgeneratorstate(self._rows) == inspect.GEN_CREATED:
            self._loop.run_until_complete(self._stream.aclose())
            self._loop.close()
        self._rows.close()


def _pull(loop: asyncio.AbstractEventLoop, stream: Any) -> Iterator[Row]:
    try:
        while True:
            try:
                yield loop.run_until_complete(stream.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(stream.aclose())
        loop.close()


class SyncFakeBatcher:
    """The fake batcher, sync: flush jobs run on worker threads, as the client's do.

    ``blocked`` (physical key -> ``threading.Event``): as for :class:`FakeBatcher`.
    """

    def __init__(self, table: FakeTable, **kwargs: Any) -> None:
        self.table = table
        self.kwargs = kwargs
        self.limit: float = kwargs.get("flush_limit_mutation_count") or math.inf
        self.blocked: dict[bytes, threading.Event] = {}
        self._staged_entries: list[RowMutationEntry] = []
        self._flush_jobs: set[concurrent.futures.Future[None]] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        self._errors: list[Exception] = []
        self._attempted = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue an entry; start a flush job at the limit."""
        if self._closed:
            raise RuntimeError("Cannot append to closed MutationsBatcher")
        self._staged_entries.append(mutation_entry)
        if len(self._staged_entries) >= self.limit:
            self._schedule_flush()

    def _schedule_flush(self) -> concurrent.futures.Future[None] | None:
        if not self._staged_entries:
            return None
        staged, self._staged_entries = self._staged_entries, []
        job = self._executor.submit(self._flush_internal, staged)
        if not job.done():
            self._flush_jobs.add(job)
            job.add_done_callback(self._flush_jobs.discard)
        return job

    def _flush_internal(self, entries: list[RowMutationEntry]) -> None:
        for entry in entries:
            event = self.blocked.get(_to_bytes(entry.row_key))
            if event is not None:
                event.wait()
        self._add_exceptions(asyncio.run(_write_batch(self.table, entries)))
        self._attempted += len(entries)

    def _add_exceptions(self, excs: list[Exception]) -> None:
        self._errors = _kept(self._errors, excs)

    def close(self) -> None:
        """Flush and close; raise the collected failures."""
        self._closed = True
        self._schedule_flush()
        self._executor.shutdown(wait=True)
        if self._errors:
            errors, self._errors = self._errors, []
            raise MutationsExceptionGroup(errors, self._attempted)  # type: ignore[arg-type]

    def __enter__(self) -> SyncFakeBatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
