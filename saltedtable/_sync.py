"""SaltedTable: the drop-in for the sync ``google.cloud.bigtable.data.Table``.

The same facade as :class:`~saltedtable.SaltedTableAsync` over the sync data
client (``BigtableDataClient``): logical keys in and out, ordered merged
streaming scans within a :class:`~saltedtable.ReadBudget`, exact limits, the
cutoff mode, the guard and statistics. Everything that decides is shared with
the async table (layout, planner, strategy, merge decisions, guard rules,
writes); what differs is how sub-scans run.

How sub-scans run: :class:`ThreadMerge` drives the merge engine's decisions
(:class:`~saltedtable._merge.MergeCore`) with threads. Each request of a
bucket runs in a worker thread of a pool the read owns (at most
``max_concurrent_subscans`` threads, and a table-wide semaphore of the same
size across reads); the caller's thread merges. A request has room reserved
for every row it may return, so it never waits for the caller: it runs to its
end, and the worker goes back to the pool. Leaving a read early (``break``,
``close()``, or dropping the iterator) stops every request at its next row:
the worker closes its stream, whose RPC gRPC cancels once the stream object is
gone, and ``close()`` returns only after every worker is back and the pool is
shut down, so no thread and no RPC outlives the read. A request waiting on a
server that sends nothing ends at its attempt deadline at the latest.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import operator
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar, final

from google.api_core.exceptions import FailedPrecondition, GoogleAPICallError
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.exceptions import (
    FailedQueryShardError,
    MutationsExceptionGroup,
    ShardedReadRowsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

from ._cutoff import CutoffPolicy
from ._exceptions import UnsaltableKeyError
from ._facade import TableAttributes, relabel
from ._guard import (
    RECORD_ONLY,
    GuardCore,
    family_of,
    layout_error,
    layout_offenders,
    operation_only,
    record_of_row,
    sample_queries,
)
from ._layout import Layout, samples_in_range
from ._merge import Feed, MergeCore, Sent, Wait
from ._plan import PageCursor, ReadPlan, SubQuery, plan_reads, rewrite_filter
from ._query import as_query, check_filter
from ._reader import (
    SAMPLE_EVERY,
    StrayRows,
    annotate,
    count_request,
    count_row,
    describe_read,
    finish_read,
    row_bytes,
)
from ._salt import SCHEME_ROW_KEY, SaltScheme, prefix_end, to_key
from ._stats import BucketStats, CallStats, StatsHook, current_bucket, install_retry_counter, report
from ._strategy import DEFAULT_ROW_BYTES, ReadBudget
from ._timeouts import (
    GuardTime,
    Timeouts,
    check_timeouts,
    deadline_exceeded,
    guard_limit,
    guard_timeouts,
    request_timeouts,
    resolve_timeouts,
    slot_timeout,
    time_left,
)
from ._write import (
    SaltedMutationsBatcherSync,
    every_entry_failed,
    first_family,
    logical_group,
    physical_entries,
)

__all__ = ["SaltedMutationsBatcherSync", "SaltedTable", "SyncTableLike", "ThreadMerge"]

T = TypeVar("T")

#: Sub-scan requests in flight per table when the caller does not say otherwise.
DEFAULT_MAX_CONCURRENT_SUBSCANS: Final = 64
#: The client's own cap for read_rows_sharded, kept so behaviour matches.
_SHARDED_CONCURRENCY: Final = 10

_Timeout = float | TABLE_DEFAULT
_AttemptTimeout = float | None | TABLE_DEFAULT
_Retryable = Sequence[type[Exception]] | TABLE_DEFAULT
Query = ReadRowsQuery | Mapping[str, Any]


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


# -- the thread driver of the merge ------------------------------------------------------


class SyncSource(Protocol[T]):
    """Runs one request of at most ``size`` items, pushing them with ``merge.push``."""

    def __call__(self, size: int, feed: Feed[T], merge: ThreadMerge[T], /) -> Sent: ...


@final
class ThreadMerge(MergeCore[T]):
    """Run sync sources in worker threads; the caller's thread merges and iterates batches.

    Everything the engine decides happens under one lock (a
    :class:`threading.Condition`). A feed's request is submitted to the pool
    when the engine grants it (:meth:`_release`); the worker pushes items
    under the lock, and at the request's end asks for the next one itself.

    Args:
        sources: One per source (see :class:`MergeCore` for the ordering contract).
        threads: Workers at most (the pool is the read's own).
        ordered, limit, budget, row_bytes, wake_batch, wake_delay: As for
            :class:`~saltedtable._merge.Merge`.
    """

    def __init__(
        self,
        sources: Sequence[SyncSource[T]],
        *,
        threads: int,
        ordered: bool = True,
        limit: int | None = None,
        budget: ReadBudget | None = None,
        row_bytes: int = DEFAULT_ROW_BYTES,
        wake_batch: int = 8,
        wake_delay: float = 0.002,
    ) -> None:
        super().__init__(
            len(sources),
            ordered=ordered,
            limit=limit,
            budget=budget,
            row_bytes=row_bytes,
            wake_batch=wake_batch,
            wake_delay=wake_delay,
        )
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._sources = list(sources)
        self._threads = min(threads, max(1, len(sources)))
        self._cond = threading.Condition()
        self._running: set[int] = set()  # feeds with a request submitted or running
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._steps_iter: Iterator[list[T] | Wait] | None = None

    @property
    def stopping(self) -> bool:
        """True once sources should stop at their next item (limit met, closed, failed)."""
        return self._stopping

    def push(self, feed: Feed[T], item: T, key: Any) -> None:
        """Called by a source, in its worker, for each item it reads."""
        with self._cond:
            feed.items.append(item)
            feed.keys.append(key)
            if len(feed.keys) >= feed.wake_at:
                feed.wake()

    def __iter__(self) -> ThreadMerge[T]:
        return self

    def __next__(self) -> list[T]:
        with self._cond:
            if self._closed:
                raise StopIteration
            if self._steps_iter is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._threads, thread_name_prefix="saltedtable-subscan"
                )
                self._first_round()
                self._steps_iter = self._steps()
                for feed in self._feeds:
                    self._release(feed)
            try:
                while True:
                    step = next(self._steps_iter)
                    if not isinstance(step, Wait):
                        return step
                    self._wait(step)
            except StopIteration:
                pass
        self.close()
        raise StopIteration

    def __enter__(self) -> ThreadMerge[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every source at its next item and wait until every worker is back.

        Safe to call more than once; never raises a source's error.
        """
        with self._cond:
            self._closed = self._stopping = True
            self._cond.notify_all()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- the driver's part ---------------------------------------------------------

    def _wake(self) -> None:
        self._cond.notify_all()

    def _release(self, feed: Feed[T]) -> None:
        # Called with the lock held: start the feed's next request if the engine grants one.
        if feed.done or feed.index in self._running or self._pool is None:
            return
        size = self._demand(feed)
        if size is None:
            return  # released again when the consumer takes or grants
        if not size:
            self._source_done(feed)
            return
        self._start(feed, size)
        self._running.add(feed.index)
        self._pool.submit(self._run, feed, size)

    def _run(self, feed: Feed[T], size: int) -> None:
        source = self._sources[feed.index]
        try:
            sent = source(size, feed, self)
        except BaseException as exc:
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._stopping = True
                self._running.discard(feed.index)
                self._source_done(feed)
                if not self._running:
                    self._gone = True
            if not isinstance(exc, Exception):
                raise
            return
        with self._cond:
            self._running.discard(feed.index)
            self._end(feed, size, sent.pushed)
            if not sent.more or self._stopping:
                self._source_done(feed)
            else:
                self._release(feed)
            if not self._running and self._live == 0:
                self._gone = True
            self._cond.notify_all()

    def _wait(self, step: Wait) -> None:
        """Wait (the lock held) as the consumer loop asks; raise if the merge stopped."""
        if self._error is not None or self._closed:
            self._stopped()
        if step.batch is not None:
            for feed in step.feeds:
                feed.wake_at = step.batch
        timeout = self._wake_delay if step.batch is not None and step.batch > 1 else None
        try:
            self._cond.wait(timeout)
        finally:
            for feed in step.feeds:
                feed.wake_at = 1 << 62
        if self._error is not None or self._closed:
            self._stopped()


# -- a bucket's requests -----------------------------------------------------------------


@final
class SyncBucketSource:
    """Reads one :class:`SubQuery` for a :class:`ThreadMerge`, one bounded request at a time."""

    __slots__ = (
        "_bstats",
        "_cursor",
        "_cut",
        "_deadline",
        "_read_rows_stream",
        "_slots",
        "_slots_total",
        "_stray",
        "_timeouts",
        "sub",
    )

    def __init__(
        self,
        read_rows_stream: Callable[..., Iterable[Row]],
        sub: SubQuery,
        *,
        deadline: float,
        timeouts: Timeouts,
        slots: threading.Semaphore,
        slots_total: int,
        bstats: BucketStats | None,
        stray: Callable[[bytes], bool] | None,
    ) -> None:
        self.sub = sub
        self._read_rows_stream = read_rows_stream
        self._cursor = PageCursor(sub)
        self._cut = len(sub.prefix)
        self._deadline = deadline
        self._timeouts = timeouts
        self._slots = slots
        self._slots_total = slots_total
        self._bstats = bstats
        self._stray = stray

    def __call__(self, size: int, feed: Feed[Row], merge: ThreadMerge[Row]) -> Sent:
        """Run the next request of at most ``size`` rows, pushing each row into ``feed``."""
        query = self._cursor.next_query(size)
        if query is None:
            return Sent(0, False)
        stats = self._bstats
        token = None if stats is None else current_bucket().set(stats)
        try:
            # The slot is held for this one request; waiting for it counts
            # against the read's operation_timeout like the request itself.
            if not self._slots.acquire(timeout=max(0.0, self._deadline - time.monotonic())):
                raise annotate(slot_timeout(self._timeouts, self._slots_total), self.sub, None)
            try:
                return self._request(query, size, feed, merge, stats)
            finally:
                self._slots.release()
        finally:
            if token is not None:
                current_bucket().reset(token)

    def _request(
        self,
        query: ReadRowsQuery,
        size: int,
        feed: Feed[Row],
        merge: ThreadMerge[Row],
        stats: BucketStats | None,
    ) -> Sent:
        started = time.monotonic()
        cut = self._cut
        stray = self._stray
        received = pushed = 0
        key: bytes | None = None
        complete = False
        try:
            stream = iter(
                self._read_rows_stream(query, **request_timeouts(self._deadline, self._timeouts))
            )
            try:
                for row in stream:
                    if merge.stopping:
                        break  # left early, or another sub-scan failed: end this one here
                    key = row.row_key[cut:]
                    row.row_key = key
                    for cell in row.cells:
                        cell.row_key = key
                    received += 1
                    if stray is not None and stray(key):
                        continue
                    if received % SAMPLE_EVERY == 1:
                        feed.sampled_rows += 1
                        feed.sampled_bytes += row_bytes(row)
                    if stats is not None:
                        count_row(stats, row, started)
                    merge.push(feed, row, key)
                    pushed += 1
                else:
                    complete = True
            finally:
                # Closing the generator frees the client's stream; gRPC cancels
                # a call that is still running once nothing refers to it.
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
                del stream
        except Exception as exc:
            last = key
            if last is None and (where := self._cursor.position) is not None:
                last = where[cut:]
            raise annotate(exc, self.sub, last) from None
        finally:
            if stats is not None:
                count_request(stats, time.monotonic() - started)
        if not complete:
            return Sent(pushed, False)
        self._cursor.advance(received, size, None if key is None else self.sub.prefix + key)
        return Sent(pushed, not self._cursor.done)


# -- one read --------------------------------------------------------------------------


@final
class SyncReadCall:
    """One logical read on a sync table: its sources, the thread merge, its statistics."""

    __slots__ = ("_guard", "_hook", "_limit", "_merge", "_stats", "_stray")

    def __init__(
        self,
        read_rows_stream: Callable[..., Iterable[Row]],
        plan: ReadPlan,
        *,
        operation: str,
        timeouts: Timeouts,
        slots: threading.Semaphore,
        slots_total: int,
        ordered: bool,
        budget: ReadBudget,
        stats: CallStats | None,
        hook: StatsHook | None,
        guard: Callable[[GuardTime], bool] | None = None,
        stray: Callable[[bytes], str | None] | None = None,
        salted_stray: Callable[[bytes], str | None] | None = None,
    ) -> None:
        if stats is None and hook is not None:
            stats = CallStats()
        deadline = time.monotonic() + timeouts.operation
        self._limit: GuardTime = (deadline, timeouts.attempt)
        self._stray = None if stray is None else StrayRows(stray)
        in_buckets = None if salted_stray is None else StrayRows(salted_stray)
        sources = [
            SyncBucketSource(
                read_rows_stream,
                sub,
                deadline=deadline,
                timeouts=timeouts,
                slots=slots,
                slots_total=slots_total,
                bstats=None if stats is None else stats.bucket(sub.bucket),
                stray=self._stray if sub.bucket is None else in_buckets,
            )
            for sub in plan.subqueries
        ]
        self._merge = ThreadMerge(
            sources, threads=slots_total, ordered=ordered, limit=plan.limit, budget=budget
        )
        if stats is not None:
            stats.operation = operation
            stats.strategy = describe_read(plan, budget, ordered)
        self._stats = stats
        self._hook = hook
        self._guard = guard

    def collect(self) -> list[Row]:
        """Every row of the read, in a list."""
        rows: list[Row] = []
        error: BaseException | None = None
        merge = self._merge
        try:
            if self._guard is not None:
                self._guard(self._limit)
            with merge:
                for batch in merge:
                    rows += batch
        except BaseException as exc:
            error = exc
            raise
        finally:
            merge.close()
            finish_read(merge, self._stats, self._hook, self._stray, merge.emitted, error)
        return rows

    def stream(self) -> Iterator[Row]:
        """Flatten the batches; closing this iterator stops every sub-scan."""
        error: BaseException | None = None
        merge = self._merge
        rows: Iterator[Row] = iter(())
        try:
            if self._guard is not None:
                self._guard(self._limit)
            for batch in merge:
                rows = iter(batch)
                yield from rows
        except BaseException as exc:
            error = exc
            raise
        finally:
            merge.close()
            # Left early: what the caller had not taken of the last batch was not read.
            emitted = merge.emitted - operator.length_hint(rows)
            finish_read(merge, self._stats, self._hook, self._stray, emitted, error)


# -- the guard -----------------------------------------------------------------------------


class SyncTableGuard(GuardCore):
    """The guard of one sync table object (see ``_guard.TableGuard``)."""

    def __init__(self, table: Any, layout: Layout, *, enabled: bool = True) -> None:
        super().__init__(layout, enabled=enabled)
        self._table = table
        self._lock = threading.Lock()

    def check(self, limit: GuardTime = None) -> bool:
        """Before any operation: read the stored record once and refuse a different one.

        Returns:
            Whether the guard sent requests (the operation has less time left).
        """
        return self._settle(None, limit)

    def before_write(self, family: str | None, limit: GuardTime = None) -> bool:
        """Before a write: check, and store the record if the table has none yet."""
        return self._settle(family, limit)

    def _settle(self, family: str | None, limit: GuardTime) -> bool:
        if not self._pending(family):
            return False
        with self._lock:
            if not self._pending(family):  # another thread settled it meanwhile
                return False
            self._run(self._judging(family), limit)
        return True

    def ensure(self, *, family: str | None, override: bool = False) -> None:
        """The explicit guard (``guard_scheme``): check, store if absent, or replace."""
        if self._refuse_unstorable(family, override):
            with self._lock:
                self._error = None
                if self._state == "refused":
                    self._state = "unread"
                self._run(self._judging(family, override), None)

    def _stored_record(self, limit: GuardTime = None) -> dict[str, Any] | None:
        return record_of_row(
            self._table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY, **guard_timeouts(limit))
        )

    def _run(
        self,
        steps: Generator[tuple[str, str | None], dict[str, Any] | None, None],
        limit: GuardTime,
    ) -> None:
        answer: dict[str, Any] | None = None
        with contextlib.suppress(StopIteration):
            while True:
                kind, family = steps.send(answer)
                answer = None
                if kind == "read":
                    answer = self._stored_record(limit)
                    continue
                assert family is not None
                mutations = self._record_mutations(kind, family)
                if kind == "create":
                    try:
                        self._table.check_and_mutate_row(
                            SCHEME_ROW_KEY,
                            None,
                            false_case_mutations=mutations,
                            **operation_only(guard_timeouts(limit)),
                        )
                        continue
                    except FailedPrecondition as exc:
                        self._plain_store_warning(exc)
                self._table.mutate_row(SCHEME_ROW_KEY, mutations, **guard_timeouts(limit))

    def check_layout(self, *, sample_rows: int, threads: int) -> None:
        """Sample the key space and refuse rows that do not fit the layout."""
        stored = self._stored if self.checked else self._stored_record()
        queries = sample_queries(self._layout, sample_rows, stored)

        def sample(query: ReadRowsQuery) -> list[bytes]:
            # The limit ends the stream on the server side: reading it to the
            # end leaves no RPC behind.
            return [row.row_key for row in self._table.read_rows_stream(query)]

        with concurrent.futures.ThreadPoolExecutor(min(threads, len(queries))) as pool:
            samples = list(pool.map(sample, queries))
        offenders = layout_offenders(self._layout, samples, stored)
        if offenders:
            raise layout_error(self._layout, offenders)


# -- the table ---------------------------------------------------------------------------


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
        budget: ReadBudget | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
    ) -> None:
        if table is None:
            raise TypeError("table must be a Bigtable table (client.get_table(...)), got None")
        if not isinstance(scheme, SaltScheme):
            raise TypeError(f"scheme must be a SaltScheme, got {type(scheme).__name__}")
        if cutoff is not None and not isinstance(cutoff, CutoffPolicy):
            raise TypeError(f"cutoff must be a CutoffPolicy, got {type(cutoff).__name__}")
        if budget is not None and not isinstance(budget, ReadBudget):
            raise TypeError(f"budget must be a ReadBudget, got {type(budget).__name__}")
        if max_concurrent_subscans < 1:
            raise ValueError(f"max_concurrent_subscans must be >= 1, got {max_concurrent_subscans}")
        self._table = table
        self._layout = Layout(scheme, cutoff)
        self._guard = SyncTableGuard(table, self._layout, enabled=guard)
        self._budget = budget if budget is not None else ReadBudget()
        self._slots_total = max_concurrent_subscans
        self._slots = threading.BoundedSemaphore(max_concurrent_subscans)
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
        plan = plan_reads(as_query(query), self._layout)
        return dataclasses.replace(plan, budget=self._budget, ordered=ordered)

    def read_rows_stream(
        self,
        query: Query,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
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
        return call.stream()

    def read_rows(
        self,
        query: Query,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> list[Row]:
        """Read the rows of a logical query into a list (see :meth:`read_rows_stream`)."""
        call = self._read_call(
            "read_rows", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered=ordered, stats=stats,
        )  # fmt: skip
        return call.collect()

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
        return call.stream()

    def read_row(
        self,
        row_key: str | bytes,
        *,
        row_filter: RowFilter | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> Row | None:
        """Read one row by its logical key; None if it does not exist."""
        if row_key is None:
            raise ValueError("row_key must be string or bytes")
        check_timeouts(operation_timeout, attempt_timeout)
        limit = guard_limit(self._table, operation_timeout, attempt_timeout, "read_rows")
        if self._guard.check(limit):
            operation_timeout = time_left(limit, operation_timeout)
        key = to_key(row_key)
        try:
            bucket, physical = self._layout.locate(key)
        except UnsaltableKeyError:
            return None  # never written salted
        row = self._table.read_row(
            physical,
            row_filter=self._filter_for(bucket, row_filter),
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        return None if row is None else relabel(row, key)

    def row_exists(
        self,
        row_key: str | bytes,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
    ) -> bool:
        """Tell whether a row with this logical key exists."""
        if row_key is None:
            raise ValueError("row_key must be string or bytes")
        check_timeouts(operation_timeout, attempt_timeout)
        limit = guard_limit(self._table, operation_timeout, attempt_timeout, "read_rows")
        if self._guard.check(limit):
            operation_timeout = time_left(limit, operation_timeout)
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
        operation_timeout: _Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.READ_ROWS,
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
            failed = [
                FailedQueryShardError(i, query, exc)  # type: ignore[arg-type]
                for i, query in enumerate(sharded_query)
            ]
            raise ShardedReadRowsExceptionGroup(failed, [], len(sharded_query)) from None

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

        with concurrent.futures.ThreadPoolExecutor(_SHARDED_CONCURRENCY) as pool:
            results = list(pool.map(run, range(len(sharded_query))))
        failed = [
            FailedQueryShardError(i, sharded_query[i], r)  # type: ignore[arg-type]
            for i, r in enumerate(results)
            if isinstance(r, Exception)
        ]
        ok = [row for r in results if not isinstance(r, Exception) for row in r]
        if failed:
            raise ShardedReadRowsExceptionGroup(failed, ok, len(sharded_query))
        return ok

    def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: _Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> list[tuple[bytes, int]]:
        """Sample the table's split points, as logical keys in logical order (estimates).

        Args:
            row_range: Only the samples inside this logical range, the last
                one at its end (the whole table is sampled).
        """
        check_timeouts(operation_timeout, attempt_timeout)
        limit = guard_limit(self._table, operation_timeout, attempt_timeout, "default")
        if self._guard.check(limit):
            operation_timeout = time_left(limit, operation_timeout)
        samples = self._table.sample_row_keys(
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )
        logical = self._layout.logical_samples(samples)
        if row_range is None:
            return logical
        return samples_in_range(logical, row_range.start_key, row_range.end_key)

    def _read_call(
        self,
        operation: str,
        query: Query,
        operation_timeout: _Timeout,
        attempt_timeout: _AttemptTimeout,
        retryable_errors: _Retryable,
        *,
        ordered: bool,
        stats: CallStats | None,
    ) -> SyncReadCall:
        op, attempt = resolve_timeouts(self._table, operation_timeout, attempt_timeout, "read_rows")
        plan = self.plan(query, ordered=ordered)
        return self._call(
            operation, plan, Timeouts(op, attempt, retryable_errors), ordered=ordered, stats=stats
        )

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
        cutoff = self._layout.cutoff is not None
        return SyncReadCall(
            self._table.read_rows_stream,
            plan,
            operation=operation,
            timeouts=timeouts,
            slots=self._slots,
            slots_total=self._slots_total,
            ordered=ordered,
            budget=self._budget,
            stats=stats,
            hook=self.stats_hook,
            guard=self._guard.check,
            stray=self._layout.stray_reason if cutoff else None,
            salted_stray=self._layout.salted_stray_reason if cutoff else None,
        )

    # -- writes ------------------------------------------------------------------------

    def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: _Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> Any:
        """Apply mutations to the row with this logical key (returns the client's response)."""
        check_timeouts(operation_timeout, attempt_timeout)
        physical = self._layout.locate(row_key)[1]
        limit = guard_limit(self._table, operation_timeout, attempt_timeout, "default")
        if self._guard.before_write(family_of(mutations), limit):
            operation_timeout = time_left(limit, operation_timeout)
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
        operation_timeout: _Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        retryable_errors: _Retryable = TABLE_DEFAULT.MUTATE_ROWS,
        stats: CallStats | None = None,
    ) -> None:
        """Apply many logical entries in one ``bulk_mutate_rows`` call across buckets."""
        if stats is None and self.stats_hook is not None:
            stats = CallStats()
        check_timeouts(operation_timeout, attempt_timeout)
        if not isinstance(mutation_entries, list):  # any iterable, as the client takes
            mutation_entries = list(mutation_entries)
        physical = physical_entries(self._layout, mutation_entries, stats)
        error: BaseException | None = None
        try:
            limit = guard_limit(self._table, operation_timeout, attempt_timeout, "mutate_rows")
            try:
                if self._guard.before_write(first_family(mutation_entries), limit):
                    operation_timeout = time_left(limit, operation_timeout)
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
            if stats is not None:
                stats.operation = "bulk_mutate_rows"
                stats.rows = len(mutation_entries)
                report(stats, error, self.stats_hook)

    def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = None,
        false_case_mutations: Mutation | list[Mutation] | None = None,
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> bool:
        """Mutate the row with this logical key depending on ``predicate``."""
        check_timeouts(operation_timeout, None)
        check_filter(predicate)
        bucket, physical = self._layout.locate(row_key)
        family = family_of(true_case_mutations or ()) or family_of(false_case_mutations or ())
        limit = guard_limit(self._table, operation_timeout, None, "default")
        if self._guard.before_write(family, limit):
            operation_timeout = time_left(limit, operation_timeout)
        return bool(
            self._table.check_and_mutate_row(
                physical,
                self._filter_for(bucket, predicate),
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
        operation_timeout: _Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> Row:
        """Atomically read-modify-write the row with this logical key."""
        check_timeouts(operation_timeout, None)
        key = to_key(row_key)
        physical = self._layout.locate(key)[1]
        limit = guard_limit(self._table, operation_timeout, None, "default")
        if self._guard.before_write(family_of(rules), limit):  # type: ignore[arg-type]
            operation_timeout = time_left(limit, operation_timeout)
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
        batch_operation_timeout: _Timeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_attempt_timeout: _AttemptTimeout = TABLE_DEFAULT.MUTATE_ROWS,
        batch_retryable_errors: _Retryable = TABLE_DEFAULT.MUTATE_ROWS,
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

    def _filter_for(self, bucket: int | None, row_filter: RowFilter | None) -> RowFilter | None:
        check_filter(row_filter)
        if bucket is None:
            return row_filter
        return rewrite_filter(row_filter, self.scheme.prefix(bucket))

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
