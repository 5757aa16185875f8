# Generated from saltedtable/_async/table.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""SaltedTable: a drop-in for ``Table`` that takes and returns logical keys.

A thin facade. Each method maps its logical arguments through the layout
(:mod:`saltedtable._scheme.layout`, :mod:`saltedtable._read.plan`), calls one engine (reads:
:mod:`.read_call`; writes: :mod:`saltedtable._write` and :mod:`.batcher`; the guard:
:mod:`.guard`)
or the wrapped table, and maps the results back to logical keys.

This module is the source of both flavours: the sync ``SaltedTable`` (module
``_sync_autogen/table.py``) is generated from it by ``.ci/unasync.py``. The two
differ only in how requests run at once (``_engine/runtime_asyncio.py`` and
``_engine/runtime_threads.py``): tasks of the event loop, or worker threads
within the table-wide FIFO-fair slots. Either way a read left early stops
every request it started, and no RPC outlives it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import closing
from time import time as wall_clock
from typing import Any, final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import (
    TABLE_DEFAULT,
    BigtableDataClient,
    ReadRowsQuery,
    RowMutationEntry,
)
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    RowFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from .._admin import schema_reader_for, table_label
from .._contracts import AttemptTimeout, Retryable, Timeout
from .._engine.budget import DEFAULT_MAX_CONCURRENT_SUBSCANS, ReadBudget
from .._engine.runtime_threads import capacity, fan_out, row_stream
from .._engine.slots_threads import Slots
from .._exceptions import UnsaltableKeyError, WindowError
from .._facade import (
    SHARDED_CONCURRENCY,
    Query,
    RowWrite,
    TableAttributes,
    bulk_prepare,
    bulk_report,
    check_arguments,
    check_row_key,
    filter_for,
    plan_for,
    prepare_row_write,
    read_for,
    read_timeouts,
    samples_for,
    sharded_refused,
    sharded_result,
    use_client_internals,
)
from .._guard.decisions import STORE_SAMPLE_ROWS
from .._guard.record import DEFAULT_RECORD_REFRESH, LayoutRecord
from .._guard.window_state import WindowState
from .._hotkeys import HotKeys, wall_micros
from .._read.plan import ReadPlan
from .._read.query import as_query, check_filter, is_reversed
from .._read.settings import OneRequestOdds
from .._read.stats import CallStats, StatsHook, install_retry_counter, report
from .._read.timeouts import (
    Timeouts,
    check_timeouts,
    deadline_exceeded,
    resolve_timeouts,
)
from .._scheme.cutoff import CutoffPolicy
from .._scheme.epochs import instant_of
from .._scheme.hot import HotLayout, SplitFilter
from .._scheme.layout import Layout, relabel
from .._scheme.ranges import KeyRange
from .._scheme.salt import SaltScheme, prefix_end, to_key
from .._scheme.window import BackfillProgress, Window, WindowFilter
from .._write import every_entry_failed, first_family, logical_group, physical_entries
from .batcher import SaltedMutationsBatcherSync
from .bulk import placed_bulk_unavailable, placed_bulk_write
from .guard import SyncTableGuard
from .read_call import ReadContext, SyncReadCall
from .table_like import SyncTableLike
from .window_table import (
    WindowTable,
    backfill_rows,
    drop_tombstones,
    retire_rows,
    verify_rows,
)

__all__ = ["SaltedTable"]


def _watch(rows: Generator[Row, None, None], guard: SyncTableGuard) -> Generator[Row, None, None]:
    with closing(rows):  # leaving this scan closes (cancels) the one inside
        for row in rows:
            if guard.due():
                guard.check()
            yield row
    # The scan may end because the rows behind it were deleted: when the record
    # is due, read it before ending cleanly (see _watched).
    if guard.due():
        guard.check()


def _window_io(
    table: SyncTableLike,
    layout: Layout,
    window: Window | None,
    versions: int | Mapping[str, int] | None,
    *,
    guard: bool,
) -> WindowTable | None:
    """The window's I/O of a table made with ``window`` (None: no window)."""
    if window is None:
        if versions is not None and not guard:
            raise TypeError(
                "window_versions is for a table made with window=, or one whose guard "
                "follows the window its layout record holds"
            )
        return None
    if not isinstance(window, Window):
        raise TypeError(f"window must be a Window, got {type(window).__name__}")
    if layout.cutoff is not None or layout.epochs is not None or layout.scheme != window.new:
        raise WindowError(
            f"a table in the {window} takes scheme={window.new} (the window's new layout), "
            "without a cutoff or epochs"
        )
    if guard:
        raise WindowError(
            f"window= is for a table whose guard is off: with the guard on, the table follows "
            f"the window its layout record holds (`saltedtable window open`), so open it with "
            f"scheme={window.old} (the record's scheme) and without window="
        )
    return WindowTable(table, window, versions)


@final
class SaltedTable(TableAttributes):
    """A Bigtable table whose row keys are salted transparently.

    Offers the data methods and attributes of ``google.cloud.bigtable.data.
    Table`` with the same names, arguments, defaults and errors. Keys
    going in are logical and are salted with ``scheme``; keys coming out
    (rows, cells, failed mutation entries) are logical again. Reads that span
    keys fan out to one sub-scan per bucket, run them concurrently and merge
    the rows in logical key order, holding at most ``budget``.

    The layout is guarded by default: the table object's first operation
    reads the layout record stored in the table (one extra request per
    object) and refuses a different one with :class:`SchemeMismatchError`;
    the first write that names a column family stores the record if the
    table has none, once a sample of the rows already there fits this
    layout (otherwise :class:`LayoutError`, and nothing is written).

    Args:
        table: The Bigtable table holding the physical (salted) rows.
        scheme: How logical keys map to physical keys; or a whole
            :class:`~saltedtable.Layout` (one with layout epochs included:
            ``Layout.of_epochs``), given without ``cutoff``.
        cutoff: Forward-only migration: keys whose timestamp is before
            ``cutoff.cutoff`` stay unsalted where they are; newer keys are
            salted. Reads see one table.
        guard: False switches the layout guard off (for tables written by
            other tools, or when you check the layout yourself).
        require_record: Refuse a table that has no layout record
            (:class:`~saltedtable.RecordMissingError`, saying how to store
            one) instead of reading it.
        record_refresh: Seconds after which the next operation reads the
            record again, so a long-lived object sees a migration move on
            (one ``ReadRow`` of the reserved row per interval, only while
            operations run; None: once per object). A scan with a cutoff
            checks it between rows and at its end, and stops with
            :class:`~saltedtable.SchemeMismatchError`. A record that extends
            this object's layout with appended epochs (``saltedtable
            resalt``) is adopted; on a table whose record stores a minimum
            lead, a refresh longer than the lead, None, or ``guard=False`` is
            refused, and writes of keys whose time is at or after the last
            read of the record plus the lead raise ``RowKeyError`` (see
            docs/resalt.md).
        budget: What one read may hold at once (rows and bytes asked of
            buckets and not yet handed over); see :class:`ReadBudget`.
        max_concurrent_subscans: ReadRows requests in flight for this table,
            across every read running on it at once (also the most one read
            runs at once; a read of the sync table runs two at most, see
            docs/table.md).
        stats_hook: Called with the :class:`CallStats` of every finished read
            and bulk write (for logging or metrics export).
        client_internals: False keeps saltedtable off the Bigtable client's
            private internals: every read goes through the table's own
            ``read_rows_stream`` (and its public ``read_row``, ``row_exists``,
            ``sample_row_keys``), retries are not counted in the statistics,
            and the batcher's :meth:`~SaltedMutationsBatcherSync.flush`
            raises ``NotImplementedError`` (see docs/table.md, "Switching off
            the client's internals"). None (the default): the environment
            variable ``SALTEDTABLE_CLIENT_INTERNALS`` (``off`` or ``on``;
            unset: on), read when the table is made.
        hot: Hot key parts spread over K buckets and hot rows split into K
            sub-rows (a :class:`~saltedtable.HotLayout` of this table's scheme;
            see docs/hot-keys.md). None, or empty lists: today's table, whose
            requests are unchanged.
        aggregates: The table's aggregate families, ``{family: "int64 sum"}``
            (sum, min, max): ``AddToCell`` to a split row is refused in any
            other family.
        window: A dual-layout window (docs/epochs-window.md) for a table whose
            guard is off: keys move from ``window.old`` to ``window.new``, which
            must be ``scheme``. Writes go to the new layout (deletes to both,
            with tombstones), reads combine both, atomic single-row operations
            are refused with :class:`~saltedtable.WindowError`. With the guard
            on, leave it unset: the table follows the window its layout record
            holds (``saltedtable window open``), from its start to its close.
        window_versions: In a window: the column families' ``max_versions``
            (an int, or a mapping family -> versions; None: every version),
            re-applied to the union of a key's two rows.

    Raises:
        TypeError: ``table`` is None, or ``scheme``/``cutoff``/``budget`` of the wrong type.
        WindowError: ``window`` whose new layout is not ``scheme``, with a
            cutoff or epochs, with hot keys, or with the guard on.
        LayoutError: On first use, a record holding a window whose lead this
            object cannot keep (``record_refresh`` longer than it, or None), or
            hot keys with a window.
        ValueError: ``SALTEDTABLE_CLIENT_INTERNALS`` is set to something other
            than on or off (and ``client_internals`` is None).
    """

    def __init__(
        self,
        table: SyncTableLike,
        scheme: SaltScheme | Layout,
        *,
        cutoff: CutoffPolicy | None = None,
        guard: bool = True,
        require_record: bool = False,
        record_refresh: float | None = DEFAULT_RECORD_REFRESH,
        budget: ReadBudget | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
        client_internals: bool | None = None,
        hot: HotLayout | None = None,
        aggregates: Mapping[str, str] | None = None,
        window: Window | None = None,
        window_versions: int | Mapping[str, int] | None = None,
    ) -> None:
        check_arguments(table, scheme, cutoff, budget, max_concurrent_subscans)
        internals = use_client_internals(client_internals)
        self._table = table
        self._layout = scheme if isinstance(scheme, Layout) else Layout(scheme, cutoff)
        self._hot = HotKeys.for_table(self._layout, hot, aggregates)
        hot = None if self._hot is None else self._hot.layout
        #: Kept for hot lists adopted from the record (a split made while this object lives).
        self._aggregates = dict(aggregates or {})
        #: Which sub-row a split row's next AddToCell call goes to (a round robin).
        self._spread = itertools.count()
        if self._hot is not None and window is not None:
            raise WindowError(
                "a table in a dual-layout window cannot have hot keys yet: "
                "close the window first, then split the hot keys"
            )
        self._window = _window_io(table, self._layout, window, window_versions, guard=guard)
        self.limiter = Slots(max_concurrent_subscans)
        self._guard = SyncTableGuard(
            table,
            self._layout,
            enabled=guard,
            limiter=self.limiter,
            require_record=require_record,
            refresh=record_refresh,
            schema=schema_reader_for(table, internals=internals),
            name=table_label(table),
            hot=hot,
        )
        # What every read of this table shares; the odds say whether small reads
        # try one request over every bucket: (no limit, limit).
        self._reads = ReadContext(
            table=table,
            layout=self._layout,
            limiter=self.limiter,
            budget=budget if budget is not None else ReadBudget(),
            guard=self._guard.check,
            odds=(OneRequestOdds(), OneRequestOdds()),
            hook=stats_hook,
            client_internals=internals,
        )
        # A stored record that extends this layout (an epoch appended) is adopted.
        self._guard.on_adopt = self._adopt
        # So are hot lists that extend this object's (a split made since).
        self._guard.on_adopt_hot = self._adopt_hot
        # A window the record opens, advances or closes is followed.
        self._window_versions = window_versions
        self._guard.window_io = self._window
        self._guard.on_window = self._follow_window

    def _follow_window(self, state: WindowState | None) -> None:
        """Use the window the guard read (None: none, or it closed), once its start has come.

        Before the start the table writes and reads the old layout alone; the
        guard reads the record again at the start, and this switches then.
        """
        window: WindowTable | None = None
        if state is not None and state.mode_at(int(wall_clock() * 1_000_000)) == "window":
            held = self._window
            if held is not None and held.window == state.window(self._layout.scheme):
                window = held
            else:
                window = WindowTable(
                    self._table, state.window(self._layout.scheme), self._window_versions
                )
        # One assignment each: an operation reads the window once when it starts.
        self._window = window
        self._guard.window_io = window

    def _adopt(self, layout: Layout) -> None:
        """Use ``layout`` (the guard adopted it) for every operation from now on."""
        # One assignment each: an operation reads the layout once when it starts.
        self._reads = dataclasses.replace(self._reads, layout=layout)
        self._layout = layout

    def _adopt_hot(self, hot: HotLayout) -> None:
        """Use ``hot`` (the guard adopted the record's hot lists) from now on."""
        self._hot = HotKeys.for_table(self._layout, hot, self._aggregates)

    def _placed(self, write: RowWrite, layout: Layout) -> RowWrite:
        """``write`` placed by the layout held now (the guard may have adopted a longer
        one since ``layout`` placed it), refused past the guard's horizon."""
        if self._layout is not layout:
            bucket, physical = self._layout.locate(write.key)
            write = RowWrite(write.key, bucket, physical, write.family)
        self._guard.check_horizon(write.key)
        return write

    def _refreshed(self, operation_timeout: Timeout, attempt_timeout: AttemptTimeout) -> Timeout:
        """Before a scan is planned: read the record again when it is due (it may be adopted).

        The first read of the record is sent before the scan is planned too:
        the record may hold a window that has started, which the scan must read.
        """
        guard = self._guard
        if guard.due() and (guard.refreshes or not guard.checked):
            return guard.within(None, operation_timeout, attempt_timeout, "read_rows")
        return operation_timeout

    @classmethod
    def from_client(
        cls,
        client: BigtableDataClient,
        instance_id: str,
        table_id: str,
        scheme: SaltScheme | Layout,
        *,
        cutoff: CutoffPolicy | None = None,
        guard: bool = True,
        require_record: bool = False,
        record_refresh: float | None = DEFAULT_RECORD_REFRESH,
        budget: ReadBudget | None = None,
        max_concurrent_subscans: int = DEFAULT_MAX_CONCURRENT_SUBSCANS,
        stats_hook: StatsHook | None = None,
        client_internals: bool | None = None,
        hot: HotLayout | None = None,
        aggregates: Mapping[str, str] | None = None,
        window_versions: int | Mapping[str, int] | None = None,
        **table_kwargs: Any,
    ) -> SaltedTable:
        """Open ``table_id`` through ``client.get_table`` and salt it with ``scheme``.

        ``table_kwargs`` go to ``get_table`` (app profile, default timeouts and
        retryable errors). Nothing is sent until the first operation.
        """
        return cls(
            client.get_table(instance_id, table_id, **table_kwargs),
            scheme,
            cutoff=cutoff,
            guard=guard,
            require_record=require_record,
            record_refresh=record_refresh,
            budget=budget,
            max_concurrent_subscans=max_concurrent_subscans,
            stats_hook=stats_hook,
            client_internals=client_internals,
            hot=hot,
            aggregates=aggregates,
            window_versions=window_versions,
        )

    @classmethod
    def open(
        cls,
        table: SyncTableLike,
        scheme: SaltScheme | Layout,
        *,
        cutoff: CutoffPolicy | None = None,
        family: str | None = None,
        override_scheme: bool = False,
        sample_rows: int = 100,
        **kwargs: Any,
    ) -> SaltedTable:
        """Wrap ``table`` after checking it against this layout now, not on first use.

        1. The scheme guard (:meth:`guard_scheme`): the stored layout record is
           compared with this one; with ``family`` set, a missing record is
           stored now, and ``override_scheme=True`` (after you rewrote the
           data) replaces a different one. Either is written only after a
           sample of the rows fits this layout (``sample_rows`` per request,
           100 when it is 0): otherwise :class:`LayoutError`, and nothing is
           written.
        2. :meth:`check_layout` samples up to ``sample_rows`` rows per request
           from the salted prefix ranges (and the rest of the key space) and
           refuses with :class:`LayoutError` if any row there does not fit
           (skipped when step 1 just sampled them, or ``sample_rows`` is 0).

        ``kwargs`` go to the constructor.
        """
        salted = cls(table, scheme, cutoff=cutoff, **kwargs)
        rows = sample_rows or STORE_SAMPLE_ROWS
        salted._guard.ensure(family=family, override=override_scheme, sample_rows=rows)
        if sample_rows and salted._guard.sampled is None:
            salted.check_layout(sample_rows=sample_rows)
        return salted

    # -- what Table exposes ---------------------------------------------------

    @property
    def table(self) -> SyncTableLike:
        """The underlying table of physical rows."""
        return self._table

    @property
    def scheme(self) -> SaltScheme:
        """How keys are salted (fixed for the object's lifetime; with epochs, the newest's)."""
        return self._layout.scheme

    @property
    def cutoff(self) -> CutoffPolicy | None:
        """The forward-only migration cutoff, or None (fixed for the object's lifetime)."""
        return self._layout.cutoff

    @property
    def layout(self) -> Layout:
        """The scheme and cutoff (or the layout epochs) together: where every logical key lives."""
        return self._layout

    @property
    def hot(self) -> HotLayout | None:
        """The hot key parts and split rows this table object reads and writes (None: none)."""
        return None if self._hot is None else self._hot.layout

    def window(self) -> Window | None:
        """The dual-layout window the table reads and writes through now, or None.

        The one it was made with (``window=``), or, with the guard on, the one its
        layout record holds once its start has come (until the record says closed).
        """
        return None if self._window is None else self._window.window

    @property
    def stored_layout(self) -> LayoutRecord | None:
        """The layout record the guard found in the table (None: none, or not read yet)."""
        return self._guard.stored

    @property
    def budget(self) -> ReadBudget:
        """What one read may hold at once."""
        return self._reads.budget

    @property
    def client_internals(self) -> bool:
        """Whether this table uses the client's private internals (see the constructor)."""
        return self._reads.client_internals

    @property
    def stats_hook(self) -> StatsHook | None:
        """Called with the :class:`CallStats` of every finished read and bulk write."""
        return self._reads.hook

    @stats_hook.setter
    def stats_hook(self, hook: StatsHook | None) -> None:
        self._reads = dataclasses.replace(self._reads, hook=hook)

    def __str__(self) -> str:
        return f"SaltedTable<{self._table}, {self.scheme}>"

    # -- the guard -------------------------------------------------------------------

    def guard_scheme(self, *, family: str | None = None, override: bool = False) -> None:
        """Compare the layout stored in the table with this one now; store it if absent.

        Args:
            family: Column family to keep the record in: a missing record is
                stored there, one found in another family is moved there
                (whole, in one row mutation). Its GC rule is checked through
                the admin API first (see docs/guard.md); without
                ``family`` nothing is stored (an existing record is still
                checked). A missing record is stored only after a sample of
                the rows (see :meth:`check_layout`) fits this layout.
            override: Replace a different stored record instead of refusing,
                after the same sample.

        Raises:
            SchemeMismatchError: The stored layout differs and ``override`` is False.
            RecordMissingError: No record, no ``family`` and ``require_record=True``.
            LayoutError: The record cannot be stored: a sampled row does not
                fit this layout, no family for an override, a family the table
                lacks, an aggregate family, a GC rule that could collect it, or
                a scheme whose prefixes cover the reserved row.
        """
        self._guard.ensure(family=family, override=override)

    def check_layout(self, *, sample_rows: int = 100) -> None:
        """Sample the key space and check every row there belongs to this layout.

        A row inside a salted prefix range must carry the bucket the scheme
        computes for the rest of its key and, with a cutoff, a timestamp at or
        after the cutoff. A row outside them must, with a cutoff, be a legacy
        row; without one, none should be there.

        The sample is bounded whatever the bucket count: one request per
        bucket up to 16 buckets, else one per run of neighbouring buckets (16
        requests), plus one for the key space outside the prefixes; each reads
        up to ``sample_rows`` row keys (see docs/guard.md).

        Raises:
            LayoutError: With up to five offending keys and the way out.
        """
        self._guard.check_layout(sample_rows=sample_rows, limiter=self.limiter)

    # -- reads -----------------------------------------------------------------

    def plan(self, query: Query, *, ordered: bool = True) -> ReadPlan:
        """Return how a logical query is read: sub-queries and strategy (nothing is read)."""
        slots = capacity(self.limiter)
        hot = None if self._hot is None else self._hot.layout
        return plan_for(query, self._layout, self.budget, ordered=ordered, slots=slots, hot=hot)

    def read_rows_stream(
        self,
        query: Query,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.READ_ROWS,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.READ_ROWS,
        retryable_errors: Retryable = TABLE_DEFAULT.READ_ROWS,
        ordered: bool = True,
        stats: CallStats | None = None,
    ) -> Generator[Row, None, None]:
        """Stream the rows of a logical query, merged in logical key order.

        The query and timeouts are checked before anything is sent, so bad
        keys, filters and timeouts fail here, as with ``Table``. The
        stream holds at most the read's budget. Leaving it early (``break``
        then ``close()``, or dropping it; in async code, cancelling the
        caller too) stops every sub-scan still running; prefer ``with
        contextlib.closing(stream)`` so that happens at once.

        Args:
            query: Logical keys, ranges, filter and limit (a ``ReadRowsQuery``,
                or a dict of ``ReadRowsRequest`` fields).
            operation_timeout: Time budget for the whole read, all sub-scans included.
            attempt_timeout: Time budget of each request.
            retryable_errors: Errors the client retries within the budget.
            ordered: False hands rows over as they arrive, in no particular order.
            stats: Filled in with per-bucket statistics as the read runs.

        Raises:
            google.api_core.exceptions.GoogleAPIError: While iterating, what a
                failing sub-scan raised after the client's retries (the first
                one), with a note naming its bucket and range.
        """
        return self._scan(
            "read_rows_stream", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered, stats,
        )  # fmt: skip

    def _scan(
        self,
        operation: str,
        query: Query,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        ordered: bool,
        stats: CallStats | None,
    ) -> Generator[Row, None, None]:
        """The stream of a scan (``read_rows_stream``, ``read_prefix``).

        While the record's refresh is due (or it was never read), the scan is
        checked now (bad input fails here, as the client's own stream does),
        the record is read when the stream starts (its errors, a missing table
        or a deadline, are raised while iterating, as the client's are), and
        the scan is planned by what it says (a window may have started, an
        epoch or hot lists been adopted).
        """
        guard = self._guard
        if guard.due() and (guard.refreshes or not guard.checked):
            if self._window is not None:
                self._window.prepare(query)
                check_timeouts(operation_timeout, attempt_timeout)
            else:
                self._read_call(
                    operation, query, operation_timeout, attempt_timeout, retryable_errors,
                    ordered=ordered, stats=None,
                )  # fmt: skip
            return self._refreshed_scan(
                operation, query, operation_timeout, attempt_timeout, retryable_errors,
                ordered, stats,
            )  # fmt: skip
        return self._planned_scan(
            operation, query, operation_timeout, attempt_timeout, retryable_errors,
            ordered, stats,
        )  # fmt: skip

    def _planned_scan(
        self,
        operation: str,
        query: Query,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        ordered: bool,
        stats: CallStats | None,
    ) -> Generator[Row, None, None]:
        """A scan planned by the layout (and window) held now."""
        if self._window is not None:
            return self._window_scan(
                query, operation_timeout, attempt_timeout, retryable_errors, stats
            )
        call = self._read_call(
            operation, query, operation_timeout, attempt_timeout, retryable_errors,
            ordered=ordered, stats=stats,
        )  # fmt: skip
        return self._stream(call)

    def _refreshed_scan(
        self,
        operation: str,
        query: Query,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        ordered: bool,
        stats: CallStats | None,
    ) -> Generator[Row, None, None]:
        """A scan that reads the due record first, then scans as it says."""
        operation_timeout = self._refreshed(operation_timeout, attempt_timeout)
        scan = self._planned_scan(
            operation, query, operation_timeout, attempt_timeout, retryable_errors,
            ordered, stats,
        )  # fmt: skip
        with closing(scan) as rows:
            for row in rows:  # noqa: RUF100, UP028 (the sync twin: a loop inside closing())
                yield row

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
        operation_timeout = self._refreshed(operation_timeout, attempt_timeout)
        if self._window is not None:
            scan = self._window_scan(
                query, operation_timeout, attempt_timeout, retryable_errors, stats
            )
            with closing(scan):
                return [row for row in scan]
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
    ) -> Generator[Row, None, None]:
        """Stream every row whose logical key starts with ``prefix``.

        ``ReadRowsQuery`` has no prefix helper; this builds the range
        ``[prefix, prefix_end)``. With a key part that fixes the bucket for the
        prefix (for example ``fields(2)`` and a prefix holding two fields) only
        one bucket is read.

        Example::

            with closing(table.read_prefix(b"user42#", limit=10)) as rows:
                for row in rows:
                    print(row.row_key)
        """
        key = to_key(prefix)
        query = ReadRowsQuery(
            row_ranges=RowRange(key or None, prefix_end(key) or None),
            limit=limit,
            row_filter=row_filter,
        )
        return self._scan(
            "read_prefix", query, operation_timeout, attempt_timeout, retryable_errors,
            ordered, stats,
        )  # fmt: skip

    def _window_scan(
        self,
        query: Query,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        stats: CallStats | None = None,
    ) -> Generator[Row, None, None]:
        """A scan in the window: checked now, read as it is iterated (always in key order).

        Its requests and rows are counted in ``stats`` (and the table's stats hook).
        """
        assert self._window is not None
        checked = self._window.prepare(query)
        check_timeouts(operation_timeout, attempt_timeout)
        return self._window.scan(
            checked,
            stats=stats,
            hook=self._reads.hook,
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
            retryable_errors=retryable_errors,
        )

    def _stream(self, call: SyncReadCall | _HotRead) -> Generator[Row, None, None]:
        """The stream a read's caller iterates (see ``row_stream``: it stops when dropped)."""
        return row_stream(self._watched(call.stream()), call.abandon)

    def _watched(self, rows: Generator[Row, None, None]) -> Generator[Row, None, None]:
        """A cutoff layout's scan reads the record again when due, between rows and at its end.

        A migration that moves the record to ``deleting`` starts removing the
        legacy rows such a scan reads: it stops with SchemeMismatchError
        instead of missing them, also when it ends because the rows after its
        last one were deleted. The end is checked only when the record is due:
        ``delete-legacy`` waits longer than the refresh interval (counted from
        before the record's last read was sent) after the move before it
        deletes a row, so a record that is not due yet was read after any
        deletion could have started. Other scans are handed over as they are.
        """
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
        hot = self._hot
        bucket: int | None
        if self._window is not None:
            return self._window.read_row(
                key,
                row_filter,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
        try:
            if hot is not None and hot.is_hot(key):
                if hot.reads_combined(key):
                    split = hot.split_filter(row_filter, (key,))
                    rows = self._split_rows(
                        (key,), split, operation_timeout, attempt_timeout, retryable_errors
                    )
                    return rows[0] if rows else None
                if hot.is_moving(key):  # one request carrying its old and new keys
                    plan = hot.move_filter(row_filter)
                    rows = self._moving_rows(
                        (key,), (), plan, operation_timeout, attempt_timeout, retryable_errors
                    )
                    return rows[0] if rows else None
                bucket, physical = hot.place(key)
            else:
                bucket, physical = self._layout.locate(key)
        except UnsaltableKeyError:
            return None  # never written salted
        row = self._table.read_row(
            physical,
            row_filter=filter_for(self._layout, bucket, row_filter, physical=physical, key=key),
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
        hot = self._hot
        if self._window is not None:
            row = self._window.read_row(
                to_key(row_key),
                None,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
            return row is not None
        try:
            key = to_key(row_key)
            if hot is not None and hot.is_hot(key):
                if hot.reads_combined(key):
                    probe = RowFilterChain(
                        [CellsRowLimitFilter(1), StripValueTransformerFilter(True)]
                    )
                    split = hot.split_filter(probe, (key,))
                    found = self._split_rows(
                        (key,), split, operation_timeout, attempt_timeout, retryable_errors
                    )
                    return bool(found)
                if hot.is_moving(key):
                    found = self._moving_rows(
                        (key,),
                        (),
                        hot.move_filter(None),
                        operation_timeout,
                        attempt_timeout,
                        retryable_errors,
                    )
                    return bool(found)
                physical = hot.place(key)[1]
            else:
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
        is the budget of the whole call (a query that starts late gets what is
        left), and if any query fails (one that cannot be read included) a
        ``ShardedReadRowsExceptionGroup`` carries one ``FailedQueryShardError``
        per failed query plus the rows of the queries that succeeded.
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
        if self._window is not None:  # (after the check: the window may have started)
            # In the window: one query after another (each one ordered, see read_rows).
            out: list[Row] = []
            for one in sharded_query:
                out.extend(
                    self.read_rows(
                        one,
                        operation_timeout=operation_timeout,
                        attempt_timeout=attempt_timeout,
                        retryable_errors=retryable_errors,
                    )
                )
            return out

        def run(i: int) -> list[Row] | Exception:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise deadline_exceeded("Operation timeout exceeded before starting query")
                # A query that cannot be read fails its own shard, as in the client.
                call = self._call(
                    "read_rows_sharded",
                    sharded_query[i],
                    Timeouts(left, min(attempt, left), retryable_errors),
                    ordered=True,
                    stats=None,
                )
                return call.collect()
            except Exception as exc:  # collected like the client's gather
                return exc

        results = fan_out(run, len(sharded_query), limit=SHARDED_CONCURRENCY)
        return sharded_result(sharded_query, results)

    def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> list[tuple[bytes, int]]:
        """Sample the table's split points, as logical keys in logical order.

        Bigtable samples the physical table. Each sample's share of the data
        (the offset delta since the previous sample) is re-attributed to its
        logical key; offsets are the running total in logical order, so they
        stay increasing and usable with ``ReadRowsQuery.shard``. They are an
        estimate: a bucket's data is spread across the whole logical range.

        Args:
            row_range: Only the samples inside this logical range, the last
                one at its end (the whole table is sampled: a logical range
                spans every bucket).
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
    ) -> SyncReadCall | _HotRead:
        timeouts = read_timeouts(self._table, operation_timeout, attempt_timeout, retryable_errors)
        return self._call(operation, query, timeouts, ordered=ordered, stats=stats)

    def _call(
        self,
        operation: str,
        query: Query,
        timeouts: Timeouts,
        *,
        ordered: bool,
        stats: CallStats | None,
    ) -> SyncReadCall | _HotRead:
        hot = self._hot
        if hot is not None:
            logical = as_query(query, reversed_ok=True)
            reverse = is_reversed(query)
            cut, keys = hot.cut(logical)
            moving: tuple[bytes, ...] = ()
            pieces: tuple[KeyRange, ...] = ()
            if cut is not None and hot.layout.moving:
                # A moving part's keys and pieces of ranges: read by the table too.
                cut, moving, pieces = hot.cut_moving(cut, reverse=reverse)
            if keys or moving or pieces:
                # The split rows are read and combined by the table; the engine reads
                # the rest, ordered, so that the two merge in key order.
                split = hot.split_filter(logical.filter, keys) if keys else None
                move = hot.move_filter(logical.filter) if moving or pieces else None
                # The read's statistics count the sub-row request too: the engine
                # fills them in, then the hot read adds its own and reports them.
                hook = self._reads.hook
                if stats is None and hook is not None:
                    stats = CallStats()
                if stats is not None:
                    stats.operation = operation
                engine = None
                if cut is not None:
                    engine = self._engine_call(
                        operation, hot.engine_query(cut, reverse), timeouts, True, stats, False
                    )
                return _HotRead(
                    self, keys, split, engine, reverse, logical.limit, timeouts, stats, hook,
                    moving=(moving, pieces, move),
                )  # fmt: skip
        return self._engine_call(operation, query, timeouts, ordered, stats)

    def _engine_call(
        self,
        operation: str,
        query: Query,
        timeouts: Timeouts,
        ordered: bool,
        stats: CallStats | None,
        report: bool = True,
    ) -> SyncReadCall:
        ctx = self._reads
        if not report:  # (the caller reports the statistics)
            ctx = dataclasses.replace(ctx, hook=None)
        hot = None if self._hot is None else self._hot.layout
        plan, settings = read_for(
            query, ctx.layout, ctx.budget, ordered=ordered, slots=capacity(ctx.limiter), hot=hot
        )
        if (stats is not None or ctx.hook is not None) and ctx.client_internals:
            install_retry_counter(self._table)
        return SyncReadCall(ctx, plan, settings, timeouts, operation=operation, stats=stats)

    def _split_rows(
        self,
        keys: Sequence[bytes],
        split: SplitFilter,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        stats: CallStats | None = None,
    ) -> list[Row]:
        """The combined rows of split ``keys``: their sub-rows in one request (see HotKeys).

        ``stats``: the read's statistics, which count the request(s) and, per
        bucket, the sub-rows read.
        """
        hot = self._hot
        assert hot is not None
        found: dict[bytes, Row] = {}
        for query in hot.sub_row_queries(keys, split.down):
            rows = self._table.read_rows_stream(
                query,
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
            if stats is not None:
                stats.requests += 1
            for row in rows:
                found[row.row_key] = row
        if stats is not None:
            for key in keys:
                for physical, bucket in hot.place_buckets(key).items():
                    sub = found.get(physical)
                    if sub is not None:
                        counted = stats.bucket(bucket)
                        counted.rows += 1
                        counted.bytes += len(physical) + sum(len(c.value) for c in sub.cells)
        return hot.combined(keys, found, split)

    def _moving_rows(
        self,
        keys: Sequence[bytes],
        pieces: Sequence[KeyRange],
        plan: WindowFilter,
        operation_timeout: Timeout,
        attempt_timeout: AttemptTimeout,
        retryable_errors: Retryable,
        stats: CallStats | None = None,
    ) -> list[Row]:
        """The combined rows of a moving part's keys (one request) and pieces, in key order.

        ``stats`` counts the requests (the rows are counted as the read emits them).
        """
        hot = self._hot
        assert hot is not None
        kwargs: dict[str, Any] = {
            "operation_timeout": operation_timeout,
            "attempt_timeout": attempt_timeout,
            "retryable_errors": retryable_errors,
        }
        out: list[Row] = []
        if keys:
            found: dict[bytes, Row] = {}
            stream = self._table.read_rows_stream(hot.moving_key_query(keys, plan), **kwargs)
            if stats is not None:
                stats.requests += 1
            for row in stream:
                found[row.row_key] = row
            out.extend(hot.moving_combined(keys, found, plan))
        for piece in pieces:
            physical: list[Row] = []
            for query in hot.piece_queries(piece, plan):
                stream = self._table.read_rows_stream(query, **kwargs)
                if stats is not None:
                    stats.requests += 1
                for row in stream:
                    physical.append(row)
            out.extend(hot.moving_rows(physical, plan))
        out.sort(key=lambda r: r.row_key)
        return out

    # -- writes ----------------------------------------------------------------

    def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
        attempt_timeout: AttemptTimeout = TABLE_DEFAULT.DEFAULT,
        retryable_errors: Retryable = TABLE_DEFAULT.DEFAULT,
    ) -> Any:
        """Apply mutations to the row with this logical key.

        Returns what the client's ``mutate_row`` returns (the RPC's response).
        """
        layout = self._layout
        write = prepare_row_write(
            layout,
            row_key,
            mutations,
            operation_timeout=operation_timeout,
            attempt_timeout=attempt_timeout,
        )
        operation_timeout = self._guard.within(
            write.family, operation_timeout, attempt_timeout, "default"
        )
        hot = self._hot
        if hot is not None:
            self._guard.check_hot_horizon()
        if hot is not None and hot.is_hot(write.key):
            # A split row's call becomes one write per sub-row it touches (not atomic
            # together); a hot part's row is one write to its bucket.
            answer: Any = None
            now = wall_micros()
            for physical, share in hot.route(write.key, mutations, next(self._spread), now):
                answer = self._table.mutate_row(  # type: ignore[func-returns-value]
                    physical,
                    share,
                    operation_timeout=operation_timeout,
                    attempt_timeout=attempt_timeout,
                    retryable_errors=retryable_errors,
                )
            return answer
        if self._window is not None:
            self._guard.check_window_horizon()
            return self._window.mutate_row(
                write.key,
                mutations if isinstance(mutations, list) else [mutations],
                operation_timeout=operation_timeout,
                attempt_timeout=attempt_timeout,
                retryable_errors=retryable_errors,
            )
        if self._layout is not layout or layout.epochs is not None:
            # (tested without a call: a plain table's point write pays none)
            write = self._placed(write, layout)
        return self._table.mutate_row(
            write.physical,
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
        """Apply many logical entries in one ``bulk_mutate_rows`` call across buckets.

        Every key is salted before anything is sent, so a bad key fails the
        call with nothing written.

        Raises:
            MutationsExceptionGroup: Some entries failed; each
                ``FailedMutationEntryError.entry`` is the caller's logical entry
                and ``.index`` its position in ``mutation_entries``.
        """
        layout = self._layout
        mutation_entries, keys, stats = bulk_prepare(
            layout,
            mutation_entries,
            operation_timeout,
            attempt_timeout,
            stats,
            self.stats_hook,
        )
        # Entries sent under keys of their own (hot rows, a window); None: each
        # logical entry goes to its one physical key.
        physical: list[RowMutationEntry] | None = None
        owners: list[int] | None = None
        hot = self._hot
        if hot is not None and any(hot.is_hot(to_key(e.row_key)) for e in mutation_entries):
            physical, owners = self._hot_entries(hot, mutation_entries)
        later: list[tuple[int, RowMutationEntry]] = []
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
            if self._window is not None:  # (placed after the guard: it may have started)
                self._guard.check_window_horizon()
                physical, later = self._window.entries(mutation_entries)
            if self._layout is not layout:  # adopted a longer layout: place them again
                _, keys, _ = bulk_prepare(
                    self._layout, mutation_entries, operation_timeout, attempt_timeout, None, None
                )
            if self._hot is not hot:  # adopted hot lists: route them again
                hot = self._hot
                physical = owners = None
                if hot is not None and any(hot.is_hot(to_key(e.row_key)) for e in mutation_entries):
                    physical, owners = self._hot_entries(hot, mutation_entries)
            if hot is not None:
                self._guard.check_hot_horizon()
            if self._layout.epochs is not None and self._guard.horizon_applies:
                for entry in mutation_entries:
                    self._guard.check_horizon(to_key(entry.row_key))
            if physical is not None:
                self._table.bulk_mutate_rows(
                    physical,
                    operation_timeout=operation_timeout,
                    attempt_timeout=attempt_timeout,
                    retryable_errors=retryable_errors,
                )
                if later:
                    self._window_old_deletes(later, mutation_entries, operation_timeout)
            elif placed_bulk_unavailable(self._table, internals=self._reads.client_internals):
                self._table.bulk_mutate_rows(
                    physical_entries(mutation_entries, keys),
                    operation_timeout=operation_timeout,
                    attempt_timeout=attempt_timeout,
                    retryable_errors=retryable_errors,
                )
            else:
                # The client's own call, with the caller's entries: no object a row
                # more than the client keeps (see saltedtable._async.bulk).
                placed_bulk_write(
                    self._table,
                    mutation_entries,
                    keys,
                    operation_timeout=operation_timeout,
                    attempt_timeout=attempt_timeout,
                    retryable_errors=retryable_errors,
                )
        except MutationsExceptionGroup as group:
            if owners is not None:
                group = _owned(group, owners, len(mutation_entries))
            error = logical_group(group, self._layout, mutation_entries)
            raise error from None
        except BaseException as exc:
            error = exc
            raise
        finally:
            bulk_report(stats, len(mutation_entries), error, self.stats_hook)

    def _hot_entries(
        self, hot: HotKeys, entries: list[RowMutationEntry]
    ) -> tuple[list[RowMutationEntry], list[int]]:
        """The physical entries of a bulk write with hot keys, and each one's caller's entry."""
        physical: list[RowMutationEntry] = []
        owners: list[int] = []
        now = wall_micros()
        for i, entry in enumerate(entries):
            for key, share in hot.route(entry.row_key, entry.mutations, next(self._spread), now):
                physical.append(RowMutationEntry(key, share))
                owners.append(i)
        return physical, owners

    def _window_old_deletes(
        self,
        later: list[tuple[int, RowMutationEntry]],
        entries: list[RowMutationEntry],
        operation_timeout: Timeout,
    ) -> None:
        """The old rows' deletes of a bulk write in the window, after the new rows'.

        A failure names the caller's entry; retrying it is safe (deletes and
        tombstones are idempotent), and reads are already right without it.
        """
        try:
            self._table.bulk_mutate_rows(
                [entry for _, entry in later], operation_timeout=operation_timeout
            )
        except MutationsExceptionGroup as group:
            for exc in group.exceptions:
                index = getattr(exc, "index", None)
                if index is not None and index < len(later):
                    exc.index = later[index][0]
            raise logical_group(group, self._layout, entries) from None

    def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = None,
        false_case_mutations: Mutation | list[Mutation] | None = None,
        operation_timeout: Timeout = TABLE_DEFAULT.DEFAULT,
    ) -> bool:
        """Mutate the row with this logical key depending on ``predicate``.

        Row-key regexes in the predicate are matched against the logical key.
        Refused in a dual-layout window (:class:`~saltedtable.WindowError`).
        """
        if self._hot is not None:
            self._hot.refuse_atomic(row_key, "check_and_mutate_row")
        if self._window is not None:
            self._window.window.refuse_atomic("check_and_mutate_row", row_key)
        if not self._guard.settled():
            # The guard may send requests first: a value that is no filter fails before
            # them. Settled, the client's own build of the filter fails the same way with
            # nothing sent, and builds it once.
            check_filter(predicate)
        layout = self._layout
        write = prepare_row_write(
            layout,
            row_key,
            true_case_mutations,
            false_case_mutations,
            operation_timeout=operation_timeout,
        )
        operation_timeout = self._guard.within(write.family, operation_timeout, None, "default")
        if self._hot is not None:
            # (after the guard: it may have adopted hot lists meanwhile)
            self._hot.refuse_atomic(write.key, "check_and_mutate_row")
            write = self._hot_placed(write)
        if self._window is not None:  # (the guard may have read the window's start just now)
            self._window.window.refuse_atomic("check_and_mutate_row", row_key)
        if self._layout is not layout or layout.epochs is not None:
            write = self._placed(write, layout)
        return bool(
            self._table.check_and_mutate_row(
                write.physical,
                filter_for(
                    self._layout,
                    write.bucket,
                    predicate,
                    checked=True,
                    physical=write.physical,
                    key=write.key,
                ),
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
        """Atomically read-modify-write the row with this logical key.

        Refused in a dual-layout window (:class:`~saltedtable.WindowError`).
        """
        if self._hot is not None:
            self._hot.refuse_atomic(row_key, "read_modify_write_row")
        if self._window is not None:
            self._window.window.refuse_atomic("read_modify_write_row", row_key)
        layout = self._layout
        write = prepare_row_write(layout, row_key, rules, operation_timeout=operation_timeout)
        operation_timeout = self._guard.within(write.family, operation_timeout, None, "default")
        if self._hot is not None:
            # (after the guard: it may have adopted hot lists meanwhile)
            self._hot.refuse_atomic(write.key, "read_modify_write_row")
            write = self._hot_placed(write)
        if self._window is not None:  # (the guard may have read the window's start just now)
            self._window.window.refuse_atomic("read_modify_write_row", row_key)
        if self._layout is not layout or layout.epochs is not None:
            write = self._placed(write, layout)
        row = self._table.read_modify_write_row(
            write.physical, rules, operation_timeout=operation_timeout
        )
        return relabel(row, write.key)

    def _hot_placed(self, write: RowWrite) -> RowWrite:
        """A single-row write to a hot part's row, sent to the bucket it lives in."""
        hot = self._hot
        if hot is None:  # (callers test for None: no call)
            return write
        self._guard.check_hot_horizon()
        if not hot.is_hot(write.key):
            return write
        bucket, physical = hot.place(write.key, wall_micros())
        return dataclasses.replace(write, bucket=bucket, physical=physical)

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
        return SaltedMutationsBatcherSync(
            inner,
            self._layout,
            self._guard,
            internals=self._reads.client_internals,
            hot=self._hot,
            spread=self._spread,
            window=self._window,
            aggregates=self._aggregates,
            flush_interval=flush_interval,
        )

    # -- the dual-layout window's steps ------------------------------------------------

    def _open_window(self) -> Window:
        """The window the backfill's steps work in (the guard's record read first)."""
        self._guard.check()
        if self._window is None:
            state = self._guard.window_state
            if state is not None:
                raise WindowError(
                    f"the window from {state.old_buckets} to {state.new_buckets} buckets starts "
                    f"at {instant_of(state.start_micros).isoformat()}: its backfill and the "
                    "steps after it run once it has started"
                )
            raise WindowError(
                "this table is in no window: its layout record holds none (open one with "
                "`saltedtable window open`), and it was made without window="
            )
        return self._window.window

    def backfill_window(
        self, *, after: bytes | None = None, limit: int | None = None, max_cells: int = 100
    ) -> BackfillProgress:
        """Copy old-layout rows into their new rows, cells with their timestamps.

        Idempotent and resumable: pass the returned ``cursor`` as ``after`` to
        go on, or run again from the start; a crash at any point leaves reads
        unchanged. A copy that a write or delete overtook is read and planned
        again (``replans``), never applied over it.

        Args:
            after: Resume after this old physical key (a previous ``cursor``).
            limit: Old rows to visit at most in this step (None: to the end).
            max_cells: Cells one ``CheckAndMutateRow`` copies at most.
        """
        return backfill_rows(
            self._table, self._open_window(), after=after, limit=limit, max_cells=max_cells
        )

    def verify_window(
        self, *, after: bytes | None = None, limit: int | None = None
    ) -> BackfillProgress:
        """Count old rows the new layout does not fully show yet (``left``); writes nothing."""
        return verify_rows(self._table, self._open_window(), after=after, limit=limit)

    def retire_window(
        self, *, after: bytes | None = None, limit: int | None = None
    ) -> BackfillProgress:
        """Delete every old row whose cells its new row shows (``retired``).

        Rows still to copy are kept (``left``). Safe at any time: reads are the
        same before and after.
        """
        return retire_rows(self._table, self._open_window(), after=after, limit=limit)

    def drop_window_tombstones(self) -> BackfillProgress:
        """Delete the window's tombstones: the last step, after the window closed.

        Run it only once no table object reads through the window any more
        (every reader opened without ``window=``) and :meth:`retire_window`
        left no old row: a tombstone is what hides an old cell a delete
        removed.
        """
        return drop_tombstones(self._table, self._open_window())

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying table."""
        self._table.close()

    def __enter__(self) -> SaltedTable:
        # The client's table warms its channels for the instance here.
        enter = getattr(self._table, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _owned(
    group: MutationsExceptionGroup, owners: list[int], total: int
) -> MutationsExceptionGroup:
    """A hot table's failed physical entries as failures of the caller's entries (by index).

    A split row's entry is written as several physical entries: it failed if
    any of them did (reported once, with the first cause).
    """
    failures: list[Exception] = []
    seen: set[int] = set()
    for exc in group.exceptions:
        if isinstance(exc, FailedMutationEntryError) and exc.index is not None:
            owner = owners[exc.index]
            if owner in seen:
                continue
            seen.add(owner)
            cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            failures.append(FailedMutationEntryError(owner, exc.entry, cause))
        else:
            failures.append(exc)
    return MutationsExceptionGroup(failures, total, message=str(group.message))  # type: ignore[arg-type]


@final
class _HotRead:
    """A read of a table with split rows: the engine's rows and the combined split rows, merged.

    The split rows are read first (one request), then spliced into the
    engine's ordered stream in key order (backwards for a reversed read); the
    limit counts logical rows.
    """

    def __init__(
        self,
        table: SaltedTable,
        keys: tuple[bytes, ...],
        split: SplitFilter | None,
        engine: SyncReadCall | None,
        reverse: bool,
        limit: int | None,
        timeouts: Timeouts,
        stats: CallStats | None = None,
        hook: StatsHook | None = None,
        *,
        moving: tuple[tuple[bytes, ...], tuple[KeyRange, ...], WindowFilter | None] = (
            (),
            (),
            None,
        ),
    ) -> None:
        self._table = table
        self._keys = keys
        self._split = split
        self._moving = moving
        self._engine = engine
        self._reverse = reverse
        self._limit = limit or None
        self._timeouts = timeouts
        self._stats = stats
        self._hook = hook
        #: What the split rows' request added to the statistics (the engine's end
        #: overwrites its own counts, so they are added again after it).
        self._requests = 0
        self._buckets: dict[int | None, tuple[int, int]] = {}

    def _direct(self) -> list[Row]:
        if self._engine is None:
            self._table._guard.check()  # (the engine's read checks it otherwise)
        t = self._timeouts
        mine = None if self._stats is None else CallStats()
        rows: list[Row] = []
        if self._keys and self._split is not None:
            rows = self._table._split_rows(
                self._keys, self._split, t.operation, t.attempt, t.retryable, mine
            )
        keys, pieces, plan = self._moving
        if plan is not None:
            # (Never reversed: cut_moving refuses a reversed read of a moving part.)
            rows.extend(
                self._table._moving_rows(
                    keys, pieces, plan, t.operation, t.attempt, t.retryable, mine
                )
            )
            rows.sort(key=lambda r: r.row_key)
        if mine is not None:
            self._requests = mine.requests
            self._buckets = {b: (s.rows, s.bytes) for b, s in mine.buckets.items()}
        return rows[::-1] if self._reverse else rows

    def _report(self, emitted: int, error: BaseException | None) -> None:
        """The read's statistics: the engine's (if any) plus the split rows' request."""
        stats = self._stats
        if stats is None:
            return
        if self._engine is None:
            stats.requests = 0
        stats.requests += self._requests
        for bucket, (rows, size) in self._buckets.items():
            counted = stats.bucket(bucket)
            counted.rows += rows
            counted.bytes += size
        stats.rows = emitted
        if isinstance(error, GeneratorExit | asyncio.CancelledError):
            stats.ended_early = True  # the caller left: not a failure
            error = None
        report(stats, error, self._hook)

    def _first(self, direct: Row, row: Row) -> bool:
        if self._reverse:
            return direct.row_key > row.row_key
        return direct.row_key < row.row_key

    def collect(self) -> list[Row]:
        """Every row of the read, in a list."""
        out = []
        with closing(self.stream()) as rows:
            for row in rows:
                out.append(row)
        return out

    def abandon(self) -> bool:
        """Stop the engine's read now if nothing runs (see ``SyncReadCall.abandon``)."""
        return self._engine is None or self._engine.abandon()

    def stream(self) -> Generator[Row, None, None]:
        """The merged rows; closing this generator stops the engine's read."""
        n = 0
        error: BaseException | None = None
        try:
            # (closed before the report: the engine's own end fills in its counts first)
            with closing(self._merged()) as rows:
                for row in rows:
                    n += 1
                    yield row
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._report(n, error)

    def _merged(self) -> Generator[Row, None, None]:
        direct = self._direct()
        limit = self._limit
        i = n = 0
        if self._engine is not None:
            with closing(self._engine.stream()) as rows:
                for row in rows:
                    while i < len(direct) and self._first(direct[i], row):
                        if limit is not None and n >= limit:
                            return
                        yield direct[i]
                        i += 1
                        n += 1
                    if limit is not None and n >= limit:
                        return
                    yield row
                    n += 1
        while i < len(direct) and (limit is None or n < limit):
            yield direct[i]
            i += 1
            n += 1
