"""SaltedTable: the drop-in for the sync ``google.cloud.bigtable.data.Table``.

The same thin facade as :class:`~saltedtable.SaltedTableAsync` over the sync
data client (``BigtableDataClient``): each method maps its logical arguments
through the layout, calls one engine (reads: :mod:`._reader`; writes:
:mod:`._write`; the guard: :mod:`._guard`) or the wrapped table, and maps the
results back. Everything that decides is shared with the async table; what
differs is how sub-scans run.

How sub-scans run: :class:`~saltedtable._merge.ThreadMerge` drives the merge
engine's decisions with threads. Each request of a bucket runs in a worker
thread of a pool the read owns (at most ``max_concurrent_subscans`` threads,
and table-wide FIFO-fair slots of the same size across reads,
:class:`~saltedtable._slots.Slots`); the caller's thread merges. A request has
room reserved for every row it may return, so it never waits for the caller:
it runs to its end, and the worker goes back to the pool. Leaving a read early
(``break`` then ``close()``, or dropping the iterator) ends every request from
the closing thread (:class:`~saltedtable._cancel.SyncRequest`): the gRPC call
each worker waits in is cancelled, the client's retries are disarmed, and a
worker waiting for a slot gives up; ``close()`` returns once every worker is
back (one second at most: a worker asleep in the client's retry back-off wakes
later and sends nothing) and the pool is shut down, so no RPC outlives the read,
and a stalled server does not hold it up.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.exceptions import (
    MutationsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

from ._admin import schema_reader_for, table_label
from ._batcher_sync import SaltedMutationsBatcherSync
from ._cutoff import CutoffPolicy
from ._exceptions import UnsaltableKeyError
from ._facade import (
    DEFAULT_MAX_CONCURRENT_SUBSCANS,
    SHARDED_CONCURRENCY,
    AttemptTimeout,
    Query,
    Retryable,
    TableAttributes,
    Timeout,
    bulk_prepare,
    bulk_report,
    check_arguments,
    check_row_key,
    filter_for,
    plan_for,
    read_timeouts,
    relabel,
    samples_for,
    sharded_refused,
    sharded_result,
    stray_reasons,
)
from ._guard import DEFAULT_RECORD_REFRESH, family_of
from ._layout import Layout
from ._plan import ReadPlan
from ._query import check_filter
from ._read_call_sync import SyncReadCall
from ._salt import SaltScheme, prefix_end, to_key
from ._slots import Slots
from ._stats import CallStats, StatsHook, install_retry_counter
from ._strategy import OneRequestOdds, ReadBudget
from ._table_guard_sync import SyncTableGuard
from ._timeouts import (
    Timeouts,
    check_timeouts,
    deadline_exceeded,
    resolve_timeouts,
)
from ._write import (
    every_entry_failed,
    first_family,
    logical_group,
)

__all__ = ["SaltedTable", "SyncTableLike"]


class SyncTableLike(Protocol):
    """The part of ``google.cloud.bigtable.data.Table`` (sync) that saltedtable calls."""

    default_operation_timeout: float
    default_attempt_timeout: float | None
    default_read_rows_operation_timeout: float
    default_read_rows_attempt_timeout: float | None
    default_mutate_rows_operation_timeout: float
    default_mutate_rows_attempt_timeout: float | None

    def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> Iterable[Row]:
        """Stream the rows of a query."""
        ...

    def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """Read one row."""
        ...

    def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        """Tell whether a row exists."""
        ...

    def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        """Sample split points of the table."""
        ...

    def mutations_batcher(self, **kwargs: Any) -> Any:
        """Make a mutations batcher."""
        ...

    def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> Any:
        """Apply mutations to one row."""
        ...

    def bulk_mutate_rows(self, mutation_entries: list[RowMutationEntry], **kwargs: Any) -> None:
        """Apply many mutation entries."""
        ...

    def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        """Mutate a row depending on a filter."""
        ...

    def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        """Read, modify and write a row atomically."""
        ...

    def close(self) -> None:
        """Release the table's resources."""
        ...


# -- the table ---------------------------------------------------------------------------


def _watch(rows: Iterator[Row], guard: SyncTableGuard) -> Iterator[Row]:
    with contextlib.closing(rows) as inner:  # type: ignore[type-var]
        for row in inner:
            if guard.due():
                guard.check()
            yield row
    # The scan may end because the rows behind it were deleted: when the record
    # is due, read it before ending cleanly (see SaltedTableAsync._watched).
    if guard.due():
        guard.check()


@final
class SaltedTable(TableAttributes):
    """A sync Bigtable table whose row keys are salted transparently.

    The sync counterpart of :class:`~saltedtable.SaltedTableAsync`, over a
    ``google.cloud.bigtable.data.Table`` from ``BigtableDataClient``: the same
    methods, arguments, defaults, attributes and errors as ``Table``, on
    logical keys. Scans fan out to one sub-scan per bucket in worker threads
    and merge in logical key order in the caller's thread, within ``budget``;
    see the module documentation for how leaving a scan early stops them.

    Args:
        table: The Bigtable table holding the physical (salted) rows.
        scheme: How logical keys map to physical keys.
        cutoff: Forward-only migration (see :class:`~saltedtable.CutoffPolicy`).
        guard: False switches the layout guard off.
        require_record: Refuse a table without a layout record (see
            :class:`~saltedtable.SaltedTableAsync`).
        record_refresh: Seconds after which the record is read again (see
            :class:`~saltedtable.SaltedTableAsync`; None: once per object).
        budget: What one read may hold at once (:class:`~saltedtable.ReadBudget`).
        max_concurrent_subscans: ReadRows requests in flight for this table,
            across every read running on it at once (also the threads one read uses).
        stats_hook: Called with the :class:`CallStats` of every finished read
            and bulk write.

    Raises:
        TypeError: ``table`` is None, or ``scheme``/``cutoff``/``budget`` of the wrong type.
    """

    def __init__(
        self,
        table: SyncTableLike,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        guard: bool = True,
        require_record: bool = False,
        record_refresh: float | None = DEFAULT_RECORD_REFRESH,
        budget: ReadBudget | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
    ) -> None:
        check_arguments(table, scheme, cutoff, budget, max_concurrent_subscans)
        self._table = table
        self._layout = Layout(scheme, cutoff)
        self._guard = SyncTableGuard(
            table,
            self._layout,
            enabled=guard,
            require_record=require_record,
            refresh=record_refresh,
            schema=schema_reader_for(table),
            name=table_label(table),
        )
        self._budget = budget if budget is not None else ReadBudget()
        self._slots_total = max_concurrent_subscans
        self._slots = Slots(max_concurrent_subscans)
        # Whether small reads try one request over every bucket: (no limit, limit).
        self._odds = (OneRequestOdds(), OneRequestOdds())
        self.stats_hook = stats_hook

    @classmethod
    def from_client(
        cls,
        client: BigtableDataClient,
        instance_id: str,
        table_id: str,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        guard: bool = True,
        require_record: bool = False,
        record_refresh: float | None = DEFAULT_RECORD_REFRESH,
        budget: ReadBudget | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
        **table_kwargs: Any,
    ) -> SaltedTable:
        """Open ``table_id`` through ``client.get_table`` and salt it with ``scheme``."""
        table: Any = client.get_table(instance_id, table_id, **table_kwargs)
        return cls(
            table,
            scheme,
            cutoff=cutoff,
            guard=guard,
            require_record=require_record,
            record_refresh=record_refresh,
            budget=budget,
            max_concurrent_subscans=max_concurrent_subscans,
            stats_hook=stats_hook,
        )

    @classmethod
    def open(
        cls,
        table: SyncTableLike,
        scheme: SaltScheme,
        *,
        cutoff: CutoffPolicy | None = None,
        family: str | None = None,
        override_scheme: bool = False,
        sample_rows: int = 100,
        **kwargs: Any,
    ) -> SaltedTable:
        """Wrap ``table`` after checking its layout now (as ``SaltedTableAsync.open`` does)."""
        salted = cls(table, scheme, cutoff=cutoff, **kwargs)
        salted.guard_scheme(family=family, override=override_scheme)
        if sample_rows:
            salted.check_layout(sample_rows=sample_rows)
        return salted

    @property
    def table(self) -> SyncTableLike:
        """The underlying table of physical rows."""
        return self._table

    @property
    def scheme(self) -> SaltScheme:
        """How keys are salted (fixed for the object's lifetime)."""
        return self._layout.scheme

    @property
    def cutoff(self) -> CutoffPolicy | None:
        """The forward-only migration cutoff, or None (fixed for the object's lifetime)."""
        return self._layout.cutoff

    @property
    def layout(self) -> Layout:
        """The scheme and cutoff together: where every logical key lives."""
        return self._layout

    @property
    def budget(self) -> ReadBudget:
        """What one read may hold at once."""
        return self._budget

    @property
    def stored_layout(self) -> dict[str, Any] | None:
        """The layout record the guard found in the table (None: none, or not read yet)."""
        return self._guard.stored

    def __str__(self) -> str:
        return f"SaltedTable<{self._table}, {self.scheme}>"

    # -- the guard ---------------------------------------------------------------------

    def guard_scheme(self, *, family: str | None = None, override: bool = False) -> None:
        """Compare the layout stored in the table with this one now (``SaltedTableAsync``'s)."""
        self._guard.ensure(family=family, override=override)

    def check_layout(self, *, sample_rows: int = 100) -> None:
        """Sample the key space and check every row there belongs to this layout."""
        self._guard.check_layout(sample_rows=sample_rows, threads=self._slots_total)

    # -- reads -------------------------------------------------------------------------

    def plan(self, query: Query, *, ordered: bool = True) -> ReadPlan:
        """Return how a logical query is read: sub-queries and strategy (nothing is read)."""
        return plan_for(query, self._layout, self._budget, ordered=ordered, slots=self._slots_total)

    def read_rows_stream(
        self,
        query: Query,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> Iterator[Row]:
        """Stream the rows of a logical query, merged in logical key order.

        An iterator that holds at most the read's budget. Leaving it early
        (``break`` then ``close()``, or dropping it) stops every sub-scan; use
        ``contextlib.closing(stream)`` so that happens at once.
        """
        call = self._read_call(
            "read_rows_stream", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered=ordered, stats=stats,
        )  # fmt: skip
        return self._watched(call.stream())

    def read_rows(
        self,
        query: Query,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> list[Row]:
        """Read the rows of a logical query into a list (see :meth:`read_rows_stream`)."""
        call = self._read_call(
            "read_rows", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered=ordered, stats=stats,
        )  # fmt: skip
        rows = call.collect()
        if self._layout.cutoff is not None and self._guard.refreshes and self._guard.due():
            self._guard.check()  # the record moved on while the rows were read?
        return rows

    def read_prefix(
        self,
        prefix: bytes | str,
        *,
        limit: int | None = None,
        row_filter: RowFilter | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> Iterator[Row]:
        """Stream every row whose logical key starts with ``prefix``."""
        key = to_key(prefix)
        query = ReadRowsQuery(
            row_ranges=RowRange(key or None, prefix_end(key) or None),
            limit=limit,
            row_filter=row_filter,
        )
        call = self._read_call(
            "read_prefix", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered=ordered, stats=stats,
        )  # fmt: skip
        return self._watched(call.stream())

    def _watched(self, rows: Iterator[Row]) -> Iterator[Row]:
        """A cutoff layout's scan reads the record again when due, between rows (see async)."""
        if self._layout.cutoff is None or not self._guard.refreshes:
            return rows
        return _watch(rows, self._guard)

    def read_row(
        self,
        row_key: str | bytes,
        *,
        row_filter: RowFilter | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> Row | None:
        """Read one row by its logical key; None if it does not exist."""
        check_row_key(row_key)
        check_timeouts(operation_timeout, attempt_timeout)
        operation_timeout = self._guard.within(
            None, operation_timeout, attempt_timeout, "read_rows"
        )
        key = to_key(row_key)
        try:
            bucket, physical = self._layout.locate(key)
        except UnsaltableKeyError:
            return None  # never written salted
        row = self._table.read_row(
            physical,
            row_filter=filter_for(self._layout, bucket, row_filter),
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        return None if row is None else relabel(row, key)

    def row_exists(
        self,
        row_key: str | bytes,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> bool:
        """Tell whether a row with this logical key exists."""
        check_row_key(row_key)
        check_timeouts(operation_timeout, attempt_timeout)
        operation_timeout = self._guard.within(
            None, operation_timeout, attempt_timeout, "read_rows"
        )
        try:
            physical = self._layout.locate(row_key)[1]
        except UnsaltableKeyError:
            return False  # never written salted
        return bool(
            self._table.row_exists(
                physical,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
        )

    def read_rows_sharded(
        self,
        sharded_query: Sequence[Query],
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> list[Row]:
        """Run several logical queries concurrently; rows come back in query order.

        As in the client: at most 10 queries run at once, ``operation_timeout``
        is the budget of the whole call, and failures come back together in a
        ``ShardedReadRowsExceptionGroup`` with the rows of the other queries.
        """
        if not sharded_query:
            raise ValueError("empty sharded_query")
        operation, attempt = resolve_timeouts(
            self._table, operation_timeout, attempt_timeout, "read_rows"
        )
        deadline = time.monotonic() + operation
        # Once for the whole call, so that a refusal is raised as it is, not once per
        # shard; a request that fails fails every shard, as a failed call does.
        try:
            self._guard.check((deadline, attempt))
        except GoogleAPICallError as exc:
            raise sharded_refused(sharded_query, exc) from None

        def run(i: int) -> list[Row] | Exception:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise deadline_exceeded("Operation timeout exceeded before starting query")
                # A query that cannot be read fails its own shard, as in the client.
                call = self._call(
                    "read_rows_sharded",
                    self.plan(sharded_query[i]),
                    Timeouts(left, min(attempt, left), retryable_errors),
                    ordered=True,
                    stats=None,
                )
                return call.collect()
            except Exception as exc:  # collected like the client's gather
                return exc

        with concurrent.futures.ThreadPoolExecutor(SHARDED_CONCURRENCY) as pool:
            results = list(pool.map(run, range(len(sharded_query))))
        return sharded_result(sharded_query, results)

    def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> list[tuple[bytes, int]]:
        """Sample the table's split points, as logical keys in logical order (estimates).

        Args:
            row_range: Only the samples inside this logical range, the last
                one at its end (the whole table is sampled).
        """
        check_timeouts(operation_timeout, attempt_timeout)
        operation_timeout = self._guard.within(None, operation_timeout, attempt_timeout, "default")
        samples = self._table.sample_row_keys(
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        return samples_for(self._layout, samples, row_range)

    def _read_call(
        self,
        operation: str,
        query: Query,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        *,
        ordered: bool,
        stats: CallStats | None,
    ) -> SyncReadCall:
        timeouts = read_timeouts(self._table, operation_timeout, attempt_timeout, retryable_errors)
        plan = self.plan(query, ordered=ordered)
        return self._call(operation, plan, timeouts, ordered=ordered, stats=stats)

    def _call(
        self,
        operation: str,
        plan: ReadPlan,
        timeouts: Timeouts,
        *,
        ordered: bool,
        stats: CallStats | None,
    ) -> SyncReadCall:
        if stats is not None or self.stats_hook is not None:
            install_retry_counter(self._table)
        stray, salted_stray = stray_reasons(self._layout)
        return SyncReadCall(
            self._table.read_rows_stream,
            plan,
            operation=operation,
            timeouts=timeouts,
            slots=self._slots,
            ordered=ordered,
            budget=self._budget,
            stats=stats,
            hook=self.stats_hook,
            guard=self._guard.check,
            stray=stray,
            salted_stray=salted_stray,
            odds=self._odds[plan.limit is not None],
        )

    # -- writes ------------------------------------------------------------------------

    def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> Any:
        """Apply mutations to the row with this logical key (returns the client's response)."""
        check_timeouts(operation_timeout, attempt_timeout)
        physical = self._layout.locate(row_key)[1]
        operation_timeout = self._guard.within(
            family_of(mutations), operation_timeout, attempt_timeout, "default"
        )
        return self._table.mutate_row(
            physical,
            mutations,
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )

    def bulk_mutate_rows(
        self,
        mutation_entries: list[RowMutationEntry],
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.MUTATE_ROWS,
        stats: CallStats | None = None,
    ) -> None:
        """Apply many logical entries in one ``bulk_mutate_rows`` call across buckets."""
        mutation_entries, physical, stats = bulk_prepare(
            self._layout,
            mutation_entries,
            operation_timeout,
            attempt_timeout,
            stats,
            self.stats_hook,
        )
        error: BaseException | None = None
        try:
            try:
                operation_timeout = self._guard.within(
                    first_family(mutation_entries),
                    operation_timeout,
                    attempt_timeout,
                    "mutate_rows",
                )
            except GoogleAPICallError as exc:
                # Reported as the client reports a call that failed as a whole.
                raise every_entry_failed(mutation_entries, exc) from None
            self._table.bulk_mutate_rows(
                physical,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
        except MutationsExceptionGroup as group:
            error = logical_group(group, self._layout, mutation_entries)
            raise error from None
        except BaseException as exc:
            error = exc
            raise
        finally:
            bulk_report(stats, len(mutation_entries), error, self.stats_hook)

    def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = None,
        false_case_mutations: Mutation | list[Mutation] | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> bool:
        """Mutate the row with this logical key depending on ``predicate``."""
        check_timeouts(operation_timeout, None)
        check_filter(predicate)
        bucket, physical = self._layout.locate(row_key)
        family = family_of(true_case_mutations or ()) or family_of(false_case_mutations or ())
        operation_timeout = self._guard.within(family, operation_timeout, None, "default")
        return bool(
            self._table.check_and_mutate_row(
                physical,
                filter_for(self._layout, bucket, predicate),
                true_case_mutations=true_case_mutations,
                false_case_mutations=false_case_mutations,
                operation_timeout=operation_timeout,
            )
        )

    def read_modify_write_row(
        self,
        row_key: str | bytes,
        rules: ReadModifyWriteRule | list[ReadModifyWriteRule],
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> Row:
        """Atomically read-modify-write the row with this logical key."""
        check_timeouts(operation_timeout, None)
        key = to_key(row_key)
        physical = self._layout.locate(key)[1]
        operation_timeout = self._guard.within(
            family_of(rules),  # type: ignore[arg-type]
            operation_timeout,
            None,
            "default",
        )
        row = self._table.read_modify_write_row(
            physical, rules, operation_timeout=operation_timeout
        )
        return relabel(row, key)

    def mutations_batcher(
        self,
        *,
        flush_interval: float | None = 5,
        flush_limit_mutation_count: int | None = 1000,
        flush_limit_bytes: int = 20 * 1024 * 1024,
        flow_control_max_mutation_count: int = 100_000,
        flow_control_max_bytes: int = 100 * 1024 * 1024,
        batch_operation_timeout: Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_attempt_timeout: AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_retryable_errors: Retryable = TABLE_DEFAULT.MUTATE_ROWS,
    ) -> SaltedMutationsBatcherSync:
        """Return a batcher whose entries are salted as they are appended (see the client's)."""
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
        return SaltedMutationsBatcherSync(inner, self._layout, self._guard)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying table."""
        self._table.close()

    def __enter__(self) -> SaltedTable:
        enter = getattr(self._table, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
