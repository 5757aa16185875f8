"""SaltedTableAsync: a drop-in for ``TableAsync`` that takes and returns logical keys.

The only module that talks to Bigtable. Everything it decides comes from the
pure modules: :mod:`._salt` (keys), :mod:`._plan` (which buckets, which
pages, which filters) and :mod:`._merge` (running pages concurrently and
merging them).
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, Protocol, final

import anyio
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
)
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    FailedQueryShardError,
    MutationsExceptionGroup,
    ShardedReadRowsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    RowFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from ._cutoff import CutoffPolicy
from ._exceptions import LayoutError, RowKeyError
from ._guard import (
    SCHEME_QUALIFIER,
    SchemeMismatchError,
    decode_layout,
    describe_layout,
    encode_layout,
)
from ._layout import Layout
from ._merge import FanOut, Merge
from ._migration import open_differences, tolerates_copies, tolerates_legacy_rows
from ._plan import PageCursor, ReadPlan, SubQuery, plan_reads, rewrite_filter
from ._reader import BucketReader
from ._salt import SCHEME_ROW_KEY, SaltScheme, prefix_end, to_key
from ._stats import (
    CallStats,
    StatsHook,
    install_retry_counter,
)

__all__ = ["SaltedMutationsBatcher", "SaltedTableAsync", "TableLike"]

_log = logging.getLogger("saltedtable")

#: Sub-scans in flight per table when the caller does not say otherwise.
DEFAULT_MAX_CONCURRENT_SUBSCANS: Final = 64
#: The client's own cap for read_rows_sharded, kept so behaviour matches.
_SHARDED_CONCURRENCY: Final = 10

_Timeout = float | TABLE_DEFAULT
_AttemptTimeout = float | None | TABLE_DEFAULT
_Retryable = Sequence[type[Exception]] | TABLE_DEFAULT


class TableLike(Protocol):
    """The part of ``google.cloud.bigtable.data.TableAsync`` that saltedtable calls.

    The client's decorated methods reach type checkers as ``Any``; this
    protocol names what is used, and gives tests a seam for an in-memory fake.
    """

    default_read_rows_operation_timeout: float
    default_read_rows_attempt_timeout: float | None

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterable[Row]:
        """Stream the rows of a query."""
        ...

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """Read one row."""
        ...

    async def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        """Tell whether a row exists."""
        ...

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        """Sample split points of the table."""
        ...

    def mutations_batcher(self, **kwargs: Any) -> Any:
        """Make a mutations batcher."""
        ...

    async def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> None:
        """Apply mutations to one row."""
        ...

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        """Apply many mutation entries."""
        ...

    async def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        """Mutate a row depending on a filter."""
        ...

    async def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        """Read, modify and write a row atomically."""
        ...

    async def close(self) -> None:
        """Release the table's resources."""
        ...


def _relabel(row: Row, key: bytes) -> Row:
    """Give a row and every cell in it the logical key (cells carry the key too)."""
    row.row_key = key
    for cell in row.cells:
        cell.row_key = key
    return row


@final
class SaltedTableAsync:
    """An async Bigtable table whose row keys are salted transparently.

    Offers the data methods of ``google.cloud.bigtable.data.TableAsync`` with
    the same names, arguments and defaults. Keys going in are logical and are
    salted with ``scheme``; keys coming out (rows, cells, failed mutation
    entries) are logical again. Reads that span keys fan out to one sub-scan
    per bucket, run them concurrently and merge the rows in logical key order.

    Args:
        table: The Bigtable table holding the physical (salted) rows.
        scheme: How logical keys map to physical keys.
        cutoff: Forward-only migration: keys whose timestamp is before
            ``cutoff.cutoff`` stay unsalted where they are; newer keys are
            salted. Reads see one table. Use :meth:`open` to check the
            existing rows against this layout first.
        max_concurrent_subscans: Sub-scan pages in flight for this table, across
            every read running on it at once.
        first_page: Rows asked of each bucket in a scan's first page (no limit).
        max_page: Largest page; bounds memory per bucket.
        stats_hook: Called with the :class:`CallStats` of every finished read
            and bulk write (for logging or metrics export).
    """

    def __init__(
        self,
        table: TableLike,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        first_page: int = 100,
        max_page: int = 1000,
        stats_hook: StatsHook | None = None,
    ) -> None:
        if not isinstance(scheme, SaltScheme):
            raise TypeError(f"scheme must be a SaltScheme, got {type(scheme).__name__}")
        if cutoff is not None and not isinstance(cutoff, CutoffPolicy):
            raise TypeError(f"cutoff must be a CutoffPolicy, got {type(cutoff).__name__}")
        if max_concurrent_subscans < 1:
            raise ValueError(f"max_concurrent_subscans must be >= 1, got {max_concurrent_subscans}")
        if first_page < 1 or max_page < first_page:
            raise ValueError(f"need 1 <= first_page <= max_page, got {first_page}, {max_page}")
        self._table = table
        self.scheme = scheme
        self.cutoff = cutoff
        self.layout = Layout(scheme, cutoff)
        self.limiter = anyio.CapacityLimiter(max_concurrent_subscans)
        self._first_page = first_page
        self._max_page = max_page
        self.stats_hook = stats_hook
        #: The layout record found by :meth:`guard_scheme` (None: not read, or absent).
        self.stored_layout: dict[str, Any] | None = None
        install_retry_counter(table)

    @classmethod
    def from_client(
        cls,
        client: BigtableDataClientAsync,
        instance_id: str,
        table_id: str,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
        **table_kwargs: Any,
    ) -> SaltedTableAsync:
        """Open ``table_id`` through ``client.get_table`` and salt it with ``scheme``.

        ``table_kwargs`` go to ``get_table`` (default timeouts and retryable
        errors). Nothing is checked or sent; see :meth:`open` for the guard.
        """
        table = client.get_table(instance_id, table_id, **table_kwargs)
        return cls(
            table,
            scheme,
            cutoff=cutoff,
            max_concurrent_subscans=max_concurrent_subscans,
            stats_hook=stats_hook,
        )

    @classmethod
    async def open(
        cls,
        table: TableLike,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        family: str | None = None,
        override_scheme: bool = False,
        sample_rows: int = 100,
        **kwargs: Any,
    ) -> SaltedTableAsync:
        """Wrap ``table`` after checking that it was written with this layout.

        1. The scheme guard: the layout (bucket count, hash, key part,
           separator, marker, cutoff) is stored in a reserved row the first
           time a table is opened with ``family`` set (the column family to
           store it in), and compared on every later open. A different layout
           raises :class:`SchemeMismatchError` showing both, unless
           ``override_scheme=True`` (after you rewrote the data), which
           replaces the stored record.
        2. :meth:`check_layout` samples up to ``sample_rows`` rows from each
           salted prefix range (and the legacy side) and refuses with
           :class:`LayoutError` if any row there does not fit.

        ``kwargs`` go to the constructor.
        """
        salted = cls(table, scheme, cutoff=cutoff, **kwargs)
        await salted.guard_scheme(family=family, override=override_scheme)
        if sample_rows:
            await salted.check_layout(sample_rows=sample_rows)
        return salted

    async def guard_scheme(self, *, family: str | None = None, override: bool = False) -> None:
        """Compare the layout stored in the table with this one; store it if absent.

        Args:
            family: Column family for the reserved row; without it nothing is
                stored (an existing record is still checked).
            override: Replace a different stored record instead of refusing.

        Raises:
            SchemeMismatchError: The stored layout differs and ``override`` is False.
            LayoutError: The record cannot be stored (no family for an override,
                or a scheme whose prefixes cover the reserved row).
        """
        record = describe_layout(self.scheme, self.cutoff)
        if self.scheme.has_prefix(SCHEME_ROW_KEY):
            if family is not None or override:
                raise LayoutError(
                    f"{self.scheme} has a prefix covering the reserved row {SCHEME_ROW_KEY!r}, "
                    "so the layout cannot be stored; give the scheme a marker or open without "
                    "family="
                )
            return
        stored = await self._stored_layout()
        if stored is None:
            if family is None:
                return
            # Create the record only if the row is still empty: two services
            # opening a new table at once agree on one record.
            await self._table.check_and_mutate_row(
                SCHEME_ROW_KEY,
                None,
                false_case_mutations=[SetCell(family, SCHEME_QUALIFIER, encode_layout(record))],
            )
            stored = await self._stored_layout()
            if stored is None:
                raise LayoutError(f"the layout record {SCHEME_ROW_KEY!r} did not persist")
        self.stored_layout = stored
        if not open_differences(stored, record):
            return
        if not override:
            raise SchemeMismatchError(stored, record)
        if family is None:
            raise LayoutError("override_scheme=True needs family= to store the new layout record")
        _log.warning("replacing the stored salt layout %s with %s", stored, record)
        await self._table.mutate_row(
            SCHEME_ROW_KEY,
            [DeleteAllFromRow(), SetCell(family, SCHEME_QUALIFIER, encode_layout(record))],
        )

    async def _stored_layout(self) -> dict[str, Any] | None:
        row = await self._table.read_row(SCHEME_ROW_KEY)
        if row is None:
            return None
        cells = [c for c in row.cells if c.qualifier == SCHEME_QUALIFIER]
        if not cells:
            return None
        newest = max(cells, key=lambda c: c.timestamp_micros)
        return decode_layout(newest.value)

    async def check_layout(self, *, sample_rows: int = 100) -> None:
        """Sample the salted key space and check every row there belongs to it.

        A row inside a salted prefix range must carry the bucket the scheme
        computes for the rest of its key and, with a cutoff, a timestamp at or
        after the cutoff. Anything else is a legacy key that looks salted (for
        example a pre-migration key ``07-abc``), or data written with another
        scheme: reading it would mix rows.

        Raises:
            LayoutError: With up to five offending keys and the way out.
        """
        key_only = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])
        offenders: list[str] = []

        async def sample(prefix: bytes) -> None:
            query = ReadRowsQuery(
                row_ranges=RowRange(prefix, prefix_end(prefix) or None),
                limit=sample_rows,
                row_filter=key_only,
            )
            async with self.limiter:
                # The limit ends the stream on the server side: reading it to
                # the end leaves no RPC behind.
                stream = await self._table.read_rows_stream(query)
                keys = [row.row_key async for row in stream]
            copies = tolerates_copies(self.stored_layout)
            for key in keys:
                problem = self.layout.misplaced(key, copies=copies)
                if problem is not None:
                    offenders.append(problem)

        async def sample_outside() -> None:
            # Rows outside every salt prefix: the legacy side of a cutoff
            # layout, and otherwise rows this scheme never writes (unsalted
            # data, or another bucket count: 16 buckets write "07-", 8 "7-").
            if self.cutoff is None and tolerates_legacy_rows(self.stored_layout):
                return  # the legacy rows of a migration's cut-over, still being retired
            outside = SubQuery(None, b"", (), self.layout.legacy_gaps(), key_only)
            page = PageCursor(outside).next_query(sample_rows)
            if page is None:
                return
            async with self.limiter:
                stream = await self._table.read_rows_stream(page)
                keys = [row.row_key async for row in stream]
            offenders.extend(p for key in keys if (p := self.layout.unexpected_outside(key)))

        errors: list[Exception] = []

        async def guarded(probe: Callable[..., Awaitable[None]], *args: Any) -> None:
            try:
                await probe(*args)
            except Exception as exc:  # the first one is raised as it is, below
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for prefix in self.scheme.prefixes:
                tg.start_soon(guarded, sample, prefix)
            tg.start_soon(guarded, sample_outside)
        if errors:
            raise errors[0]
        if offenders:
            shown = "\n  ".join(offenders[:5])
            raise LayoutError(
                f"{len(offenders)} sampled row(s) do not fit the layout of {self.scheme}"
                f"{'' if self.cutoff is None else ' with ' + repr(self.cutoff)}, e.g.\n  {shown}\n"
                "If these are older unsalted keys that look salted, give the scheme a marker "
                "(SaltScheme(..., marker=b'~')) so salted keys cannot meet them; if the table "
                "was written with another bucket count or hash, open it with that scheme."
            )

    def _filter_for(self, bucket: int | None, row_filter: RowFilter | None) -> RowFilter | None:
        """The filter to send for a row in ``bucket`` (legacy rows need no rewrite)."""
        if bucket is None:
            return row_filter
        return rewrite_filter(row_filter, self.scheme.prefix(bucket))

    @property
    def table(self) -> TableLike:
        """The underlying table of physical rows."""
        return self._table

    def plan(self, query: ReadRowsQuery) -> ReadPlan:
        """Return the physical sub-queries a logical query turns into (nothing is read)."""
        return plan_reads(query, self.layout)

    # -- reads -----------------------------------------------------------------

    async def read_rows_stream(
        self,
        query: ReadRowsQuery,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> AsyncGenerator[Row, None]:
        """Stream the rows of a logical query, merged in logical key order.

        The query is planned before anything is sent, so bad keys and filters
        fail here. Leaving the stream early (``break``, ``aclose()``, a
        cancelled caller) cancels every sub-scan still running; prefer
        ``async with contextlib.aclosing(stream)`` so that happens at once.

        Args:
            query: Logical keys, ranges, filter and limit.
            operation_timeout: Time budget for the whole read, all sub-scans included.
            attempt_timeout: Time budget of each request.
            retryable_errors: Errors the client retries within the budget.
            ordered: False hands rows over as they arrive, in no particular order.
            stats: Filled in with per-bucket statistics as the read runs.

        Raises:
            BucketReadError: While iterating, when a sub-scan failed after the
                client's retries; its ``__cause__`` is the Bigtable error.
        """
        call = self._read_call(
            "read_rows_stream",
            self.plan(query),
            operation_timeout,
            attempt_timeout,
            retryable_errors,
            ordered,
            stats,
        )
        return call.stream()

    async def read_rows(
        self,
        query: ReadRowsQuery,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> list[Row]:
        """Read the rows of a logical query into a list (see :meth:`read_rows_stream`)."""
        call = self._read_call(
            "read_rows",
            self.plan(query),
            operation_timeout,
            attempt_timeout,
            retryable_errors,
            ordered,
            stats,
        )
        return await call.collect()

    def read_prefix(
        self,
        prefix: bytes | str,
        *,
        limit: int | None = None,
        row_filter: RowFilter | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> AsyncGenerator[Row, None]:
        """Stream every row whose logical key starts with ``prefix``.

        ``ReadRowsQuery`` has no prefix helper; this builds the range
        ``[prefix, prefix_end)``. With a key part that fixes the bucket for the
        prefix (for example ``fields(2)`` and a prefix holding two fields) only
        one bucket is read.

        Example::

            async with aclosing(table.read_prefix(b"user42#", limit=10)) as rows:
                async for row in rows:
                    print(row.row_key)
        """
        key = to_key(prefix)
        row_range = RowRange(key or None, prefix_end(key) or None)
        query = ReadRowsQuery(row_ranges=row_range, limit=limit, row_filter=row_filter)
        call = self._read_call(
            "read_prefix",
            self.plan(query),
            operation_timeout,
            attempt_timeout,
            retryable_errors,
            ordered,
            stats,
        )
        return call.stream()

    async def read_row(
        self,
        row_key: str | bytes,
        *,
        row_filter: RowFilter | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> Row | None:
        """Read one row by its logical key; None if it does not exist."""
        key = to_key(row_key)
        bucket, physical = self.layout.locate(key)
        row = await self._table.read_row(
            physical,
            row_filter=self._filter_for(bucket, row_filter),
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        return None if row is None else _relabel(row, key)

    async def row_exists(
        self,
        row_key: str | bytes,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> bool:
        """Tell whether a row with this logical key exists."""
        return await self._table.row_exists(
            self.layout.locate(row_key)[1],
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )

    async def read_rows_sharded(
        self,
        sharded_query: Sequence[ReadRowsQuery],
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> list[Row]:
        """Run several logical queries concurrently; rows come back in query order.

        As in the client: at most 10 queries run at once, and if any fails a
        ``ShardedReadRowsExceptionGroup`` carries one ``FailedQueryShardError``
        per failed query plus the rows of the queries that succeeded.
        """
        if not sharded_query:
            raise ValueError("empty sharded_query")
        plans = [self.plan(q) for q in sharded_query]  # bad input fails before any request
        results: list[list[Row] | Exception] = [[] for _ in plans]
        gate = anyio.Semaphore(_SHARDED_CONCURRENCY)

        async def run(i: int) -> None:
            async with gate:
                call = self._read_call(
                    "read_rows_sharded",
                    plans[i],
                    operation_timeout,
                    attempt_timeout,
                    retryable_errors,
                    True,
                    None,
                )
                try:
                    results[i] = await call.collect()
                except Exception as exc:  # collected like the client's gather
                    results[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(len(plans)):
                tg.start_soon(run, i)
        failed = [
            FailedQueryShardError(i, sharded_query[i], r)
            for i, r in enumerate(results)
            if isinstance(r, Exception)
        ]
        ok = [row for r in results if not isinstance(r, Exception) for row in r]
        if failed:
            raise ShardedReadRowsExceptionGroup(failed, ok, len(sharded_query))
        return ok

    async def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: _Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> list[tuple[bytes, int]]:
        """Sample the table's split points, as logical keys in logical order.

        Bigtable samples the physical table. Each sample's share of the data
        (the offset delta since the previous sample) is re-attributed to its
        logical key; offsets are the running total in logical order, so they
        stay increasing and usable with ``ReadRowsQuery.shard``. They are an
        estimate: a bucket's data is spread across the whole logical range.
        ``row_range`` (logical) is not supported by salted tables and must be None.
        """
        if row_range is not None:
            raise NotImplementedError(
                "sample_row_keys(row_range=...) has no salted equivalent: a logical range "
                "spans every bucket; sample the whole table instead"
            )
        samples = await self._table.sample_row_keys(
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        return self.layout.logical_samples(samples)

    def _read_call(
        self,
        operation: str,
        plan: ReadPlan,
        operation_timeout: _Timeout,
        attempt_timeout: _AttemptTimeout,
        retryable_errors: _Retryable,
        ordered: bool,
        stats: CallStats | None,
    ) -> _ReadCall:
        op_timeout = (
            self._table.default_read_rows_operation_timeout
            if isinstance(operation_timeout, TABLE_DEFAULT)
            else operation_timeout
        )
        att_timeout = (
            self._table.default_read_rows_attempt_timeout
            if isinstance(attempt_timeout, TABLE_DEFAULT)
            else attempt_timeout
        )
        deadline = time.monotonic() + op_timeout
        if stats is None and self.stats_hook is not None:
            stats = CallStats()
        if stats is not None:
            stats.operation = operation
        stray = self._is_stray_legacy_row if self.cutoff is not None else None
        salted_stray = self._is_stray_salted_row if self.cutoff is not None else None
        readers = [
            BucketReader(
                self._table.read_rows_stream,
                sub,
                deadline=deadline,
                attempt_timeout=att_timeout,
                retryable_errors=retryable_errors,
                limiter=self.limiter,
                bstats=None if stats is None else stats.bucket(sub.bucket),
                stray=stray if sub.bucket is None else salted_stray,
            )
            for sub in plan.subqueries
        ]
        limiter = self.limiter

        def begin() -> FanOut[Row] | Merge[Row]:
            # Chosen when iteration starts. Without a limit, stream each
            # bucket when the free slots cover every bucket of this read
            # twice over: its slots are taken together (two reads can never
            # each hold half of what they need), and as many stay free for
            # paged reads, so a read nested inside a streaming one still gets
            # slots. Otherwise: pages, a slot per request.
            n = len(readers)
            if plan.limit is None and n and limiter.available_tokens >= 2 * n:
                for reader in readers:
                    limiter.acquire_on_behalf_of_nowait(reader)

                async def release() -> None:
                    for reader in readers:
                        limiter.release_on_behalf_of(reader)

                return Merge([reader.pump for reader in readers], ordered=ordered, on_close=release)
            return FanOut(
                [reader.fetch for reader in readers],
                ordered=ordered,
                limit=plan.limit,
                first_page=self._first_page,
                max_page=self._max_page,
            )

        return _ReadCall(begin, stats, self.stats_hook)

    def _is_stray_legacy_row(self, key: bytes) -> bool:
        """True (and logged) for a legacy row that scans leave out (see ``Layout.stray_reason``)."""
        why = self.layout.stray_reason(key)
        if why is None:
            return False
        _log.warning("skipping legacy row %r: %s", key, why)
        return True

    def _is_stray_salted_row(self, key: bytes) -> bool:
        """True for a bucket row that scans leave out (see ``Layout.salted_stray_reason``)."""
        return self.layout.salted_stray_reason(key) is not None

    # -- writes ----------------------------------------------------------------

    async def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: _Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> None:
        """Apply mutations to the row with this logical key."""
        await self._table.mutate_row(
            self.layout.locate(row_key)[1],
            mutations,
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )

    async def bulk_mutate_rows(
        self,
        mutation_entries: list[RowMutationEntry],
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.MUTATE_ROWS,
        stats: CallStats | None = None,
    ) -> None:
        """Apply many logical entries in one ``bulk_mutate_rows`` call across buckets.

        Every key is salted before anything is sent, so a bad key fails the
        call with nothing written.

        Raises:
            MutationsExceptionGroup: Some entries failed; each
                ``FailedMutationEntryError.entry`` is the caller's logical entry
                and ``.index`` its position in ``mutation_entries``.
        """
        if stats is None and self.stats_hook is not None:
            stats = CallStats()
        locate = self.layout.locate
        physical = []
        for entry in mutation_entries:
            bucket, key = locate(entry.row_key)
            physical.append(RowMutationEntry(key, list(entry.mutations)))
            if stats is not None:
                b = stats.bucket(bucket)
                b.rows += 1
                b.bytes += len(key) + sum(m.size() for m in entry.mutations)
        error: BaseException | None = None
        try:
            await self._table.bulk_mutate_rows(
                physical,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
        except MutationsExceptionGroup as group:
            error = _logical_group(group, self.layout, mutation_entries)
            raise error from None
        except BaseException as exc:
            error = exc
            raise
        finally:
            if stats is not None:
                stats.operation = "bulk_mutate_rows"
                stats.rows = len(mutation_entries)
                _report_stats(stats, error, self.stats_hook)

    async def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = None,
        false_case_mutations: Mutation | list[Mutation] | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> bool:
        """Mutate the row with this logical key depending on ``predicate``.

        Row-key regexes in the predicate are matched against the logical key.
        """
        bucket, physical = self.layout.locate(row_key)
        return await self._table.check_and_mutate_row(
            physical,
            self._filter_for(bucket, predicate),
            true_case_mutations=true_case_mutations,
            false_case_mutations=false_case_mutations,
            operation_timeout=operation_timeout,
        )

    async def read_modify_write_row(
        self,
        row_key: str | bytes,
        rules: ReadModifyWriteRule | list[ReadModifyWriteRule],
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> Row:
        """Atomically read-modify-write the row with this logical key."""
        key = to_key(row_key)
        row = await self._table.read_modify_write_row(
            self.layout.locate(key)[1], rules, operation_timeout=operation_timeout
        )
        return _relabel(row, key)

    def mutations_batcher(
        self,
        *,
        flush_interval: float | None = 5,
        flush_limit_mutation_count: int | None = 1000,
        flush_limit_bytes: int = 20 * 1024 * 1024,
        flow_control_max_mutation_count: int = 100_000,
        flow_control_max_bytes: int = 100 * 1024 * 1024,
        batch_operation_timeout: _Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_retryable_errors: _Retryable = TABLE_DEFAULT.MUTATE_ROWS,
    ) -> SaltedMutationsBatcher:
        """Return a batcher whose entries are salted as they are appended."""
        inner = self._table.mutations_batcher(
            flush_interval=flush_interval,
            flush_limit_mutation_count=flush_limit_mutation_count,
            flush_limit_bytes=flush_limit_bytes,
            flow_control_max_mutation_count=flow_control_max_mutation_count,
            flow_control_max_bytes=flow_control_max_bytes,
            batch_operation_timeout=batch_operation_timeout,
            batch_attempt_timeout=batch_attempt_timeout,
            batch_retryable_errors=batch_retryable_errors,
        )
        return SaltedMutationsBatcher(inner, self.layout)

    # -- lifecycle -------------------------------------------------------------

    async def close(self) -> None:
        """Close the underlying table."""
        await self._table.close()

    async def __aenter__(self) -> SaltedTableAsync:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@final
class _ReadCall:
    """One read: the fan-out it starts when iterated, and the statistics to finish when it ends."""

    __slots__ = ("_begin", "_hook", "_stats")

    def __init__(
        self,
        begin: Callable[[], FanOut[Row] | Merge[Row]],
        stats: CallStats | None,
        hook: StatsHook | None,
    ):
        self._begin = begin
        self._stats = stats
        self._hook = hook

    async def collect(self) -> list[Row]:
        rows: list[Row] = []
        error: BaseException | None = None
        fanout = self._begin()
        try:
            async with fanout:
                async for batch in fanout:
                    rows += batch
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._finish(fanout.emitted, error)
        return rows

    async def stream(self) -> AsyncGenerator[Row, None]:
        """Flatten the batches; closing this generator cancels every sub-scan."""
        error: BaseException | None = None
        fanout = self._begin()
        rows: Iterator[Row] = iter(())
        try:
            async for batch in fanout:
                rows = iter(batch)
                for row in rows:
                    yield row
        except BaseException as exc:
            error = exc
            raise
        finally:
            await fanout.aclose()
            # Left early: what the caller had not taken of the last batch was not read.
            self._finish(fanout.emitted - operator.length_hint(rows), error)

    def _finish(self, emitted: int, error: BaseException | None) -> None:
        stats = self._stats
        if stats is not None:
            stats.rows = emitted
            _report_stats(stats, error, self._hook)


def _report_stats(stats: CallStats, error: BaseException | None, hook: StatsHook | None) -> None:
    """End a call's statistics: log a summary and hand them to the hook."""
    stats.finish(error)
    _log.debug(
        "%s: %d rows over %d bucket(s) in %.3fs, skew %.2f, %d retries%s",
        stats.operation,
        stats.rows,
        len(stats.buckets),
        stats.elapsed or 0.0,
        stats.skew,
        stats.retries,
        "" if error is None else f", failed: {error!r}",
    )
    if hook is not None:
        try:
            hook(stats)
        except Exception:  # a broken exporter must not break the call
            _log.exception("saltedtable stats_hook raised")


def _logical_group(
    group: MutationsExceptionGroup,
    layout: Layout,
    originals: Sequence[RowMutationEntry] | None = None,
) -> MutationsExceptionGroup:
    """The same failures, naming the caller's logical entries instead of physical ones."""
    failures: list[FailedMutationEntryError] = []
    for exc in group.exceptions:
        if not isinstance(exc, FailedMutationEntryError):
            failures.append(exc)  # anything else passes through unchanged
            continue
        if originals is not None and exc.index is not None and exc.index < len(originals):
            entry = originals[exc.index]
        else:
            try:
                key = layout.to_logical(to_key(exc.entry.row_key))
            except RowKeyError:
                key = to_key(exc.entry.row_key)
            entry = RowMutationEntry(key, list(exc.entry.mutations))
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        failures.append(FailedMutationEntryError(exc.index, entry, cause))
    return MutationsExceptionGroup(
        failures, group.total_entries_attempted, message=str(group.message)
    )


@final
class SaltedMutationsBatcher:
    """A ``MutationsBatcherAsync`` that salts each entry's key as it is appended.

    Failures raised by ``close()`` (or on leaving ``async with``) name the
    logical keys of the failed entries.
    """

    def __init__(self, inner: Any, layout: Layout) -> None:
        self._inner = inner
        self._layout = layout

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        return bool(self._inner.closed)

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue a logical entry; it is flushed with others under its physical key."""
        physical = RowMutationEntry(
            self._layout.locate(mutation_entry.row_key)[1], list(mutation_entry.mutations)
        )
        try:
            await self._inner.append(physical)
        except MutationsExceptionGroup as group:
            raise _logical_group(group, self._layout) from None

    async def close(self) -> None:
        """Flush what is queued and close; raise failures with logical keys."""
        try:
            await self._inner.close()
        except MutationsExceptionGroup as group:
            raise _logical_group(group, self._layout) from None

    async def __aenter__(self) -> SaltedMutationsBatcher:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
