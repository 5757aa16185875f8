"""Reading and writing salted tables from Beam workers.

Each worker opens its own synchronous ``BigtableDataClient`` in
``DoFn.setup`` (clients do not pickle); what travels to workers is plain
values: a :class:`BigtableTarget`, a :class:`~saltedtable.Layout`, a
:class:`~saltedtable.ReadPlan` and its :class:`~saltedtable._read.split.Split` s.

A read is planned in the driver (pure), split on a worker once the table's
``sample_row_keys`` are known, spread by a reshuffle, and read split by split
in pages sized by a :class:`~saltedtable.ReadBudget`, with the layout rules of
the async reader.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, ParamSpec, TypeVar, final

import apache_beam as beam
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue
from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import (
    BigtableDataClient,
    ReadRowsQuery,
    RowMutationEntry,
    Table,
)
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

from .._admin import schema_reader_for, table_label
from .._engine.budget import ReadBudget
from .._exceptions import (
    LayoutError,
    QueryPlanError,
    SaltedTableError,
    SchemeMismatchError,
    SplitKeyError,
    WriteFailedError,
)
from .._facade import use_client_internals
from .._guard.hot_record import with_hot
from .._guard.record import (
    DEFAULT_RECORD_REFRESH,
    describe_layout,
    family_of,
    open_differences,
)
from .._guard.resalt import lead_problem
from .._hotkeys import HotKeys
from .._read.plan import PageCursor, ReadPlan, SubQuery, plan_reads
from .._read.query import as_query
from .._read.sources import row_bytes
from .._read.split import DEFAULT_SPLIT_BYTES, Split, split_plan
from .._scheme.cutoff import CutoffPolicy
from .._scheme.hot import HotLayout, SplitFilter
from .._scheme.layout import Layout, relabel
from .._scheme.salt import SaltScheme, format_key, to_key
from .._sync_autogen.guard import SyncTableGuard
from ._record_steps import read_record

__all__ = [
    "METRICS_NAMESPACE",
    "BigtableTarget",
    "FailedWrite",
    "ReadSaltedRows",
    "WriteSaltedRows",
    "copy_entry",
    "row_digest",
]

_log = logging.getLogger("saltedtable.beam")

#: The namespace of every Beam metric saltedtable reports.
METRICS_NAMESPACE: Final = "saltedtable"
#: Bigtable applies at most this many mutations to one row in one request.
MAX_MUTATIONS_PER_ENTRY: Final = 100_000
#: A write batch is sent once its entries hold this many bytes (Bigtable takes 256 MB a request).
FLUSH_BYTES: Final = 20 * 1024 * 1024
#: Write batches one DoFn has in flight at once.
FLUSHES_IN_FLIGHT: Final = 4

#: Which rows of a split a read keeps (see :func:`read_split_pages`).
Rows = Literal["visible", "copies", "all"]


@final
@dataclass(frozen=True, slots=True)
class BigtableTarget:
    """Which table a transform reads or writes; a plain value that pickles.

    Args:
        project: The Google Cloud project.
        instance: The Bigtable instance id.
        table: The table id.
        app_profile_id: The app profile to send requests with (None: the default).
    """

    project: str
    instance: str
    table: str
    app_profile_id: str | None = None

    def open(self) -> tuple[BigtableDataClient, Table]:
        """A new sync client and its table (honours ``BIGTABLE_EMULATOR_HOST``).

        The caller closes both; :meth:`opened` does it for a ``with`` block.
        """
        client = BigtableDataClient(project=self.project)
        kwargs = {} if self.app_profile_id is None else {"app_profile_id": self.app_profile_id}
        return client, client.get_table(self.instance, self.table, **kwargs)

    @contextmanager
    def opened(self) -> Iterator[Table]:
        """The table, on a new sync client, for a ``with`` block that closes both.

        ::

            with target.opened() as table:
                record = read_record(table)
        """
        client, table = self.open()
        try:
            yield table
        finally:
            table.close()
            client.close()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def accepts_legacy_target(init: Callable[_P, _R]) -> Callable[_P, _R]:
    """Let a transform's ``__init__`` still take ``(project, instance, table, ...)``.

    The calling convention of every transform and step is a
    :class:`BigtableTarget` first, then the scheme (or a
    :class:`~saltedtable.Layout`). The older form, three strings first and
    ``app_profile_id=`` among the keywords, still works, with a
    ``DeprecationWarning``.
    """

    @functools.wraps(init)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        self, rest = args[0], args[1:]
        if (rest and isinstance(rest[0], str)) or "project" in kwargs:
            rest, kwargs = _legacy_target(type(self).__name__, rest, kwargs)  # type: ignore[assignment]
        return init(self, *rest, **kwargs)  # type: ignore[arg-type]

    return wrapper


def _legacy_target(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    where = list(args[:3])
    for field_name in ("project", "instance", "table")[len(where) :]:
        if field_name not in kwargs:
            raise TypeError(f"{name}() missing the argument {field_name!r}")
        where.append(kwargs.pop(field_name))
    app_profile_id = kwargs.pop("app_profile_id", None)
    warnings.warn(
        f"{name}(project, instance, table, ..., app_profile_id=...) is deprecated: pass "
        f"{name}(BigtableTarget(project, instance, table, app_profile_id), scheme, ...)",
        DeprecationWarning,
        stacklevel=3,
    )
    target = BigtableTarget(where[0], where[1], where[2], app_profile_id)
    return (target, *args[3:]), kwargs


def layout_of(scheme: SaltScheme | Layout, cutoff: CutoffPolicy | None) -> Layout:
    """The layout a transform or step is given: a scheme (and cutoff), or a Layout.

    Raises:
        TypeError: A Layout together with a separate cutoff.
    """
    if isinstance(scheme, Layout):
        if cutoff is not None:
            raise TypeError("give the cutoff inside the Layout, or a SaltScheme and cutoff=")
        return scheme
    return Layout(scheme, cutoff)


def _bucket_name(bucket: int | None) -> str:
    return "legacy" if bucket is None else f"bucket_{bucket}"


class TableDoFn(beam.DoFn):
    """A DoFn holding a client for one table, opened in ``setup`` on the worker."""

    def __init__(self, target: BigtableTarget) -> None:
        super().__init__()
        self.target = target
        self._client: BigtableDataClient | None = None
        self._table: Table | None = None

    def bigtable(self) -> Table:
        """The table opened by ``setup``."""
        if self._table is None:
            raise RuntimeError("the DoFn was not set up")
        return self._table

    def setup(self) -> None:
        self._client, self._table = self.target.open()

    def teardown(self) -> None:
        if self._table is not None:
            self._table.close()
        if self._client is not None:
            self._client.close()
        self._client = self._table = None

    def __getstate__(self) -> dict[str, Any]:
        # Clients never travel: a worker opens its own in setup().
        state = dict(self.__dict__)
        state["_client"] = state["_table"] = None
        return state


def check_record(table: Table, layout: Layout, hot: HotLayout | None = None) -> None:
    """Refuse a table whose stored layout record does not admit ``layout`` (and ``hot``).

    Raises:
        SchemeMismatchError: The record names another layout, or other hot
            lists (a reader without them would return a split row's sub-rows
            as separate rows).
    """
    stored = read_record(table)
    if stored is None:
        return
    current = with_hot(describe_layout(layout.scheme, layout.cutoff, epochs=layout.epochs), hot)
    if open_differences(stored.record, current):
        raise SchemeMismatchError(stored.record, current)


# -- progress -------------------------------------------------------------------


@final
class LocalProgress:
    """What the DoFns of this process have done; shown by the CLI while a local run goes on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phase = ""
        self.splits_total = 0
        self.splits_done = 0
        self.rows: dict[str, int] = {}

    def reset(self, phase: str = "") -> None:
        """Forget an earlier run; ``phase`` names the one starting (``copy``, ``verify``, ...)."""
        with self.lock:
            self.phase = phase
            self.splits_total = self.splits_done = 0
            self.rows = {}

    def add(self, what: str, rows: int) -> None:
        """Count ``rows`` more rows under ``what`` (``read``, ``written``, ...)."""
        with self.lock:
            self.rows[what] = self.rows.get(what, 0) + rows

    def planned(self, splits: int) -> None:
        """``splits`` more splits are to be read."""
        with self.lock:
            self.splits_total += splits

    def split_done(self) -> None:
        """One more split was read."""
        with self.lock:
            self.splits_done += 1

    def line(self) -> str:
        """One line for humans."""
        with self.lock:
            parts = [f"splits {self.splits_done:,}/{self.splits_total:,}"]
            parts += [f"{what} {n:,}" for what, n in sorted(self.rows.items())]
            phase = f"{self.phase}: " if self.phase else ""
        return phase + ", ".join(parts)


#: Shared by every DoFn running in this process (the local runner's default).
PROGRESS: Final = LocalProgress()


# -- reading -------------------------------------------------------------------


@final
class PageSizer:
    """Rows to ask for in the next page of a split: the budget's bytes over the largest row seen.

    A page is read whole before its rows are handed on, so the budget bounds
    what one page holds. The size grows by doubling from one row, and never
    asks more rows than ``budget.bytes`` allows at the largest row measured
    so far; a page stops after the row that takes it past ``budget.bytes``
    (:func:`read_page`), so a page holds at most the budget plus one row,
    whatever the row sizes (a row larger than the budget: one row a page).
    """

    __slots__ = ("_cap", "_largest", "budget", "last_page_bytes")

    def __init__(self, budget: ReadBudget) -> None:
        self.budget = budget
        self._cap = 1
        self._largest = 1
        #: What the last page held (keys and values), for metrics.
        self.last_page_bytes = 0

    def rows(self) -> int:
        """Rows the next page may hold."""
        return min(self._cap, self.budget.rows_for(self._largest))

    def measure(self, page: Sequence[Row]) -> None:
        """Learn from a page that came back: its largest row sizes the next one."""
        sizes = [row_bytes(row) for row in page]
        self.last_page_bytes = sum(sizes)
        if sizes:
            self._largest = max(self._largest, *sizes)
            self._cap = min(self._cap * 2, self.budget.rows)


def read_page(table: Table, query: ReadRowsQuery, size: int, cap: int) -> tuple[list[Row], bool]:
    """The rows of one page request, and whether it stopped after the row past ``cap`` bytes."""
    page: list[Row] = []
    got = 0
    stream = iter(table.read_rows_stream(query))
    try:
        for row in stream:
            page.append(row)
            got += row_bytes(row)
            if got > cap and len(page) < size:
                return page, True  # closing the stream below cancels the rest
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return page, False


def scan_pages(table: Table, sub: SubQuery, sizer: PageSizer) -> Iterator[list[Row]]:
    """Every row of ``sub`` with physical keys, page by page (each page read whole)."""
    cursor = PageCursor(sub)
    while (query := cursor.next_query(size := sizer.rows())) is not None:
        # A whole page is read before any row is handed on, so no RPC stays
        # open while the rest of the pipeline works.
        page, capped = read_page(table, query, size, sizer.budget.bytes)
        # A page stopped at the byte cap may have more after its last row.
        cursor.advance(len(page), len(page) if capped else size, page[-1].row_key if page else None)
        sizer.measure(page)
        yield page


def read_keys(
    table: Table, keys: Iterable[bytes], sizer: PageSizer, row_filter: RowFilter | None = None
) -> Iterator[Row]:
    """The rows of ``keys`` that exist (physical keys), read in requests of bounded size."""
    sub = SubQuery(None, b"", tuple(sorted(set(keys))), (), row_filter)
    for page in scan_pages(table, sub, sizer):
        yield from page


def read_split_pages(
    table: Table,
    sub: SubQuery,
    layout: Layout,
    sizer: PageSizer,
    rows: Rows = "visible",
    *,
    on_stray: Callable[[bytes, str], None] | None = None,
) -> Iterator[list[Row]]:
    """Every row of one split, relabelled with its logical key, a page at a time.

    ``rows="visible"`` keeps what a reader of ``layout`` sees (the layout's
    stray rules, on both sides), calling ``on_stray`` with the key and the
    reason of each row left out of the legacy side; ``"copies"`` keeps only
    the bucket rows those rules hide (the backfilled copies of legacy rows);
    ``"all"`` keeps every row.
    """
    cut = len(sub.prefix)
    hidden = None if rows == "all" else layout.hiding_under(sub.bucket, sub.prefix)
    want_hidden = rows == "copies"
    report = on_stray if sub.bucket is None and rows == "visible" else None
    for page in scan_pages(table, sub, sizer):
        kept = []
        for row in page:
            key = row.row_key[cut:]
            why = None if hidden is None else hidden(key)
            if (why is not None) != want_hidden:
                if why is not None and report is not None:
                    report(key, why)
                continue
            kept.append(relabel(row, key))
        yield kept


@final
@dataclass(frozen=True, slots=True)
class SplitScan:
    """One read here before its splits are planned: what every layer of a read passes down.

    ``subqueries`` of ``layout`` on ``target``, cut at the table's sample
    points into splits of about ``split_bytes``; ``check_layout`` refuses a
    table whose stored record names another layout before planning.

    Raises:
        ValueError: ``split_bytes`` is below 1.
    """

    target: BigtableTarget
    layout: Layout
    subqueries: tuple[SubQuery, ...]
    split_bytes: int
    check_layout: bool
    #: The hot lists the record must hold (None: none).
    hot: HotLayout | None = None

    def __post_init__(self) -> None:
        if self.split_bytes < 1:
            raise ValueError(f"split_bytes must be >= 1, got {self.split_bytes}")


class PlanSplits(TableDoFn):
    """Samples the table once and cuts the plan into splits (runs on one worker)."""

    def __init__(self, scan: SplitScan) -> None:
        super().__init__(scan.target)
        self.scan = scan
        self._splits = Metrics.counter(METRICS_NAMESPACE, "splits")

    def process(self, _: object) -> Iterator[Split]:
        scan = self.scan
        if scan.check_layout:
            check_record(self.bigtable(), scan.layout, scan.hot)
        samples = self.bigtable().sample_row_keys()
        splits = split_plan(scan.subqueries, samples, target_bytes=scan.split_bytes)
        self._splits.inc(len(splits))
        PROGRESS.planned(len(splits))
        _log.info(
            "%s: %d split(s) over %d sub-quer(ies)",
            self.target.table,
            len(splits),
            len(scan.subqueries),
        )
        yield from splits


class PlannedSplits(beam.PTransform[PBegin, PCollection[Split]]):
    """The splits of a scan, spread by a reshuffle: how every read here starts."""

    def __init__(self, scan: SplitScan) -> None:
        super().__init__()
        self.plan = PlanSplits(scan)

    def expand(self, pbegin: PBegin) -> PCollection[Split]:
        out: PCollection[Split] = (
            pbegin
            | "Start" >> beam.Impulse()
            | "Plan splits" >> beam.ParDo(self.plan)
            | "Spread splits" >> beam.Reshuffle()
        )
        return out


class ReadSplits(TableDoFn):
    """Reads each split, page by page, and yields rows with logical keys."""

    def __init__(
        self, target: BigtableTarget, layout: Layout, budget: ReadBudget, rows: Rows
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.budget = budget
        self.rows = rows
        self._counters: dict[str, Any] = {}
        self._sizer = PageSizer(budget)
        self._page_bytes = Metrics.distribution(METRICS_NAMESPACE, "page_bytes")

    def _counter(self, name: str) -> Any:
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Metrics.counter(METRICS_NAMESPACE, name)
        return counter

    def process(self, split: Split) -> Iterator[Row]:
        sub = split.sub
        read = 0
        strays: list[tuple[bytes, str]] = []

        def stray(key: bytes, why: str) -> None:
            strays.append((key, why))

        pages = read_split_pages(
            self.bigtable(), sub, self.layout, self._sizer, self.rows, on_stray=stray
        )
        requests = 0
        for page in pages:
            requests += 1
            self._page_bytes.update(self._sizer.last_page_bytes)
            read += len(page)
            yield from page
        self._counter("read_requests").inc(requests)
        self._counter(f"rows_read.{_bucket_name(sub.bucket)}").inc(read)
        if strays:
            # As the async reader does: stray rows are left out, counted and reported once.
            self._counter("stray_rows.legacy").inc(len(strays))
            key, why = strays[0]
            _log.warning(
                "%s: %d stray row(s) left out of the legacy side of %s, e.g. %r: %s",
                self.target.table,
                len(strays),
                sub.describe(),
                key,
                why,
            )
        PROGRESS.add("rows read", read)
        PROGRESS.split_done()


class ReadSplitRows(beam.PTransform[PBegin, PCollection[Row]]):
    """Plan -> splits -> reshuffle -> rows; the core of every read here."""

    def __init__(self, scan: SplitScan, budget: ReadBudget, rows: Rows = "visible") -> None:
        super().__init__()
        self.splits = PlannedSplits(scan)
        self.read = ReadSplits(scan.target, scan.layout, budget, rows)

    def expand(self, pbegin: PBegin) -> PCollection[Row]:
        out: PCollection[Row] = (
            pbegin | "Splits" >> self.splits | "Read splits" >> beam.ParDo(self.read)
        )
        return out


class ReadSaltedRows(beam.PTransform[PBegin, PCollection[Row]]):
    """Read a salted table in parallel: rows with logical keys, in no particular order.

    The logical query is planned like ``SaltedTableAsync.read_rows`` (one
    sub-query per bucket, plus the legacy side of a cutoff layout); each
    sub-query is then cut at the table's ``sample_row_keys`` split points and
    the pieces merged up to ``split_bytes``, so a 16-bucket table can keep
    many more than 16 workers busy. Rows come out relabelled with their
    logical keys (cells too), with every cell and version the query selects.

    Args:
        target: The table (and the app profile to send requests with).
        scheme: The table's salt scheme, or its :class:`~saltedtable.Layout`.
        query: The logical read, a ``ReadRowsQuery`` or a dict of
            ``ReadRowsRequest`` fields as ``TableAsync`` takes (None: the
            whole table). A row limit is refused: a parallel read has no order
            to cut it at.
        cutoff: The forward-only migration policy, if the table has one.
        split_bytes: About how much data one split reads.
        budget: What one ReadRows request of a split may return, in rows and
            bytes: a worker holds one such page at a time.
        check_layout: Refuse a table whose stored layout record names another layout.
        hot: The table's hot lists (as ``SaltedTableAsync(hot=...)`` takes
            them; a table whose record lists hot parts or rows is refused
            without them). A hot part's rows are read in its K buckets; a
            split row comes out once, combined from its sub-rows (read by one
            worker in one request) as the table combines it.
        aggregates: With ``hot``: the table's aggregate families,
            ``{family: "int64 sum"}``, whose partials a split row sums.

    ``ReadSaltedRows(project, instance, table, scheme, ..., app_profile_id=...)``
    still works and warns (deprecated).

    Raises:
        QueryPlanError: A query with a limit, or one the planner refuses.
        SplitKeyError: A hot part is moving (finish the move first), or a
            filter that cannot keep its meaning on a split row the
            query covers (the error names the row).
        SaltSchemeError: Hot lists of another scheme, or with a cutoff or epochs.
    """

    @accepts_legacy_target
    def __init__(
        self,
        target: BigtableTarget,
        scheme: SaltScheme | Layout,
        query: ReadRowsQuery | Mapping[str, Any] | None = None,
        cutoff: CutoffPolicy | None = None,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        budget: ReadBudget | None = None,
        check_layout: bool = True,
        hot: HotLayout | None = None,
        aggregates: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        query = ReadRowsQuery() if query is None else as_query(query)
        if query.limit:
            raise QueryPlanError(
                f"ReadSaltedRows reads in parallel and in no order, so limit={query.limit} "
                "has no meaning; drop the limit (or read with SaltedTableAsync.read_rows)"
            )
        if budget is not None and not isinstance(budget, ReadBudget):
            raise TypeError(f"budget must be a ReadBudget, got {budget!r}")
        if hot is not None and hot.moving:
            # A moving part's rows may sit in two places, combined by the window's rule,
            # which the parallel read does not apply: finish the move first.
            moving = ", ".join(repr(format_key(p)) for p in hot.moving)
            raise SplitKeyError(
                f"hot part(s) {moving} are moving between placements: finish the move "
                "(saltedtable split TABLE --finish --part VALUE) before reading the table "
                "with Beam"
            )
        self.target = target
        self.layout = layout_of(scheme, cutoff)
        hot_keys = HotKeys.for_table(self.layout, hot, aggregates)
        rest: ReadRowsQuery | None = query
        self._split_rows: ReadSplitRowsCombined | None = None
        if hot_keys is not None:
            # Split rows are read apart (their sub-rows lie in K buckets) and combined.
            rest, split_keys = hot_keys.cut(query)
            if split_keys:
                self._split_rows = ReadSplitRowsCombined(
                    target,
                    self.layout,
                    hot_keys.layout,
                    dict(hot_keys.aggregates),
                    split_keys,
                    hot_keys.split_filter(query.filter, split_keys),
                    check_layout=check_layout,
                )
        self.plan: ReadPlan = (
            ReadPlan((), row_filter=query.filter)
            if rest is None
            else plan_reads(rest, self.layout, hot=hot)
        )
        scan = SplitScan(
            target,
            self.layout,
            self.plan.subqueries,
            split_bytes,
            check_layout=check_layout,
            hot=hot,
        )
        self._read = ReadSplitRows(scan, ReadBudget() if budget is None else budget)

    def expand(self, pbegin: PBegin) -> PCollection[Row]:
        out: PCollection[Row] = pbegin | "Read" >> self._read
        if self._split_rows is None:
            return out
        combined = (
            pbegin
            | "Start split rows" >> beam.Impulse()
            | "Read split rows" >> beam.ParDo(self._split_rows)
        )
        both: PCollection[Row] = (out, combined) | "With split rows" >> beam.Flatten()
        return both


class ReadSplitRowsCombined(TableDoFn):
    """Reads the sub-rows of split rows (one request) and yields each row combined, once."""

    def __init__(
        self,
        target: BigtableTarget,
        layout: Layout,
        hot: HotLayout,
        aggregates: dict[str, str],
        keys: tuple[bytes, ...],
        split: SplitFilter,
        *,
        check_layout: bool,
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.hot = hot
        self.aggregates = aggregates
        self.keys = keys
        self.split = split
        self.check_layout = check_layout
        self._read = Metrics.counter(METRICS_NAMESPACE, "split_rows_read")

    def process(self, _: object) -> Iterator[Row]:
        table = self.bigtable()
        if self.check_layout:
            check_record(table, self.layout, self.hot)
        # (HotKeys holds read-only mappings, which do not pickle: made here, on the worker.)
        hot_keys = HotKeys(self.hot, self.aggregates)
        found: dict[bytes, Row] = {}
        for query in hot_keys.sub_row_queries(self.keys, self.split.down):
            for row in table.read_rows(query):
                found[row.row_key] = row
        rows = hot_keys.combined(self.keys, found, self.split)
        self._read.inc(len(rows))
        PROGRESS.add("rows read", len(rows))
        yield from rows


# -- writing -------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FailedWrite:
    """A logical entry that could not be written, and why."""

    row_key: bytes
    error: str
    mutations: tuple[Mutation, ...] = field(default=(), compare=False)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@final
@dataclass(slots=True)
class _Batch:
    """Salted entries sent in one ``bulk_mutate_rows``, with their logical keys and buckets."""

    entries: list[RowMutationEntry] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    buckets: list[int | None] = field(default_factory=list)
    mutations: int = 0
    bytes: int = 0


class WriteEntries(TableDoFn):
    """Salts each logical entry and writes it in batches; every failure by its logical key.

    Batches go through ``bulk_mutate_rows`` (a few in flight), which reports
    every failed entry; the client's mutations batcher keeps only a few of them.
    """

    def __init__(
        self,
        target: BigtableTarget,
        layout: Layout,
        *,
        on_failure: Literal["raise", "output"],
        flush_mutations: int,
        counter_prefix: str,
        check_layout: bool,
        store_record: bool = False,
        record_family: str | None = None,
        require_record: bool = False,
        record_refresh: float | None = None,
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.record_refresh = record_refresh
        self.store_record = store_record
        self.record_family = record_family
        self.require_record = require_record
        self._guard: SyncTableGuard | None = None
        self.on_failure = on_failure
        self.flush_mutations = flush_mutations
        self.counter_prefix = counter_prefix
        self.check_layout = check_layout
        self._pool: ThreadPoolExecutor | None = None
        self._batch = _Batch()
        self._in_flight: list[tuple[Future[None], _Batch]] = []
        self._failures: list[FailedWrite] = []
        self._counters: dict[int | None, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(
            _pool=None, _batch=_Batch(), _in_flight=[], _failures=[], _counters={}, _guard=None
        )
        return state

    def _refresh(self, table: Table) -> float:
        """How often this worker reads the record again: ``record_refresh``, or by default
        the table objects' default, shortened to a lead the layout or the record stores."""
        if self.record_refresh is not None:
            return self.record_refresh
        leads = [DEFAULT_RECORD_REFRESH]
        if self.layout.epochs is not None and self.layout.epochs.min_lead is not None:
            leads.append(self.layout.epochs.min_lead)
        stored = read_record(table)
        epochs = None if stored is None else stored.record.epochs
        if epochs is not None and epochs.min_lead_s is not None:
            leads.append(epochs.min_lead_s)
        return min(leads)

    def _adopt(self, layout: Layout) -> None:
        """The guard adopted a record that extends the layout (an epoch appended)."""
        self.layout = layout

    def setup(self) -> None:
        super().setup()
        self._pool = ThreadPoolExecutor(FLUSHES_IN_FLIGHT, thread_name_prefix="saltedtable-write")
        if self.check_layout:
            # Every worker reads the record before its first write and refuses
            # another layout (or, with require_record, a table without one); it
            # reads it again every record_refresh, as a table object does, so an
            # appended epoch is adopted within the stored lead.
            table = self.bigtable()
            self._guard = SyncTableGuard(
                table,
                self.layout,
                require_record=self.require_record,
                refresh=self._refresh(table),
                schema=schema_reader_for(table, internals=use_client_internals(None)),
                name=table_label(table),
            )
            self._guard.on_adopt = self._adopt
            if self.record_family is not None:
                self._guard.ensure(family=self.record_family)  # store (conditionally) or check
            else:
                self._guard.check()

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # after a failed bundle: let sent batches end
            self._pool = None
        super().teardown()

    def start_bundle(self) -> None:
        self._batch = _Batch()
        self._in_flight = []
        self._failures = []

    def process(self, entry: RowMutationEntry) -> Iterator[FailedWrite]:
        guard = self._guard
        if guard is not None and not guard.settled():
            if self.store_record:
                # No record yet: stored (a conditional create) before the first write,
                # where a service's first write would store it.
                guard.before_write(family_of(entry.mutations))
            else:
                guard.check()  # the record is due to be read again
        key = to_key(entry.row_key)
        mutations = list(entry.mutations)
        try:
            if guard is not None and guard.horizon_applies:
                # As the table does: a key at or past the last read of the record
                # plus the stored lead may belong to an epoch this worker has not seen.
                guard.check_horizon(key)
            bucket, physical = self.layout.locate(key)
        except SaltedTableError as exc:  # a key this layout cannot place
            self._failures.append(FailedWrite(key, _describe(exc), tuple(mutations)))
            return iter(())
        if len(mutations) >= MAX_MUTATIONS_PER_ENTRY:
            self._write_in_parts(key, bucket, physical, mutations)
            return iter(())
        salted = RowMutationEntry(physical, mutations)
        batch = self._batch
        batch.entries.append(salted)
        batch.keys.append(key)
        batch.buckets.append(bucket)
        batch.mutations += len(mutations)
        batch.bytes += salted.size()
        if batch.mutations >= self.flush_mutations or batch.bytes >= FLUSH_BYTES:
            self._send()
        return iter(())

    def _write_in_parts(
        self, key: bytes, bucket: int | None, physical: bytes, mutations: list[Mutation]
    ) -> None:
        # Too many for one request: applied in order, so not atomically.
        step = MAX_MUTATIONS_PER_ENTRY - 1
        for i in range(0, len(mutations), step):
            try:
                self.bigtable().mutate_row(physical, mutations[i : i + step])
            except GoogleAPICallError as exc:  # after the client's retries
                applied = f" (its first {i} mutations were applied)" if i else ""
                error = _describe(exc) + applied
                self._failures.append(FailedWrite(key, error, tuple(mutations)))
                return
        self._written({bucket: 1})

    def _send(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if not batch.entries:
            return
        if self._pool is None:
            raise RuntimeError("the DoFn was not set up")
        while len(self._in_flight) >= FLUSHES_IN_FLIGHT:
            self._settle(*self._in_flight.pop(0))
        future = self._pool.submit(self.bigtable().bulk_mutate_rows, batch.entries)
        self._in_flight.append((future, batch))

    def _settle(self, future: Future[None], batch: _Batch) -> None:
        failed: dict[int, BaseException] = {}
        try:
            future.result()
        except MutationsExceptionGroup as group:
            for one in group.exceptions:
                if isinstance(one, FailedMutationEntryError) and one.index is not None:
                    failed[one.index] = one.__cause__ if one.__cause__ is not None else one
                else:  # not tied to an entry: none of them is known to be written
                    failed = dict.fromkeys(range(len(batch.entries)), one)
                    break
        except GoogleAPICallError as exc:
            failed = dict.fromkeys(range(len(batch.entries)), exc)
        written: dict[int | None, int] = {}
        for i, bucket in enumerate(batch.buckets):
            error = failed.get(i)
            if error is None:
                written[bucket] = written.get(bucket, 0) + 1
            else:
                entry = batch.entries[i]
                self._failures.append(
                    FailedWrite(batch.keys[i], _describe(error), tuple(entry.mutations))
                )
        self._written(written)

    def _written(self, by_bucket: dict[int | None, int]) -> None:
        for bucket, n in by_bucket.items():
            counter = self._counters.get(bucket)
            if counter is None:
                name = f"{self.counter_prefix}.{_bucket_name(bucket)}"
                counter = self._counters[bucket] = Metrics.counter(METRICS_NAMESPACE, name)
            counter.inc(n)
        PROGRESS.add(self.counter_prefix.replace("_", " "), sum(by_bucket.values()))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        self._send()
        while self._in_flight:
            self._settle(*self._in_flight.pop(0))
        failures, self._failures = self._failures, []
        if failures and self.on_failure == "raise":
            raise WriteFailedError(failures)
        for failure in failures:
            yield GlobalWindows.windowed_value(failure)


class WriteSaltedRows(beam.PTransform[PCollection[RowMutationEntry], PCollection[FailedWrite]]):
    """Write ``RowMutationEntry`` elements with logical keys to a salted table.

    Each key is salted (or, with a cutoff, routed to its side) by the same
    layout rules as ``SaltedTableAsync``; entries are sent in batches
    (``bulk_mutate_rows``), the last one at the end of every bundle. Each
    entry is applied atomically, as in Bigtable (an entry of 100,000
    mutations or more is applied in order, in several requests). Failures,
    including keys the layout cannot place, are reported by logical key.

    Args:
        target: The table (and the app profile to send requests with).
        scheme: The table's salt scheme, or its :class:`~saltedtable.Layout`.
        cutoff: The forward-only migration policy, if the table has one.
        on_failure: ``"raise"`` (default) fails the bundle with
            :class:`WriteFailedError` naming the logical keys (the runner
            retries it); ``"output"`` emits a :class:`FailedWrite` per failed
            entry instead.
        flush_mutations: A batch is sent once its entries hold this many mutations.
        check_layout: Refuse a table whose stored layout record names another
            layout; every worker reads it before its first write.
        store_record: With ``check_layout``, a table without a record gets
            one before the first write (a conditional create, in the reserved
            family ``saltedtable`` when the table has it, else the first
            entry's family if its GC rule keeps it), as a service's first
            write does.
        record_family: Store the record in this family (checked as
            ``guard_scheme(family=...)`` checks it) before the first write.
        require_record: Refuse a table that has no record yet.
        record_refresh: With ``check_layout``, each worker reads the record
            again this often (seconds), as a table object does, and adopts an
            epoch appended meanwhile. None (default): 30 s, or the stored
            lead of a table with epochs when that is shorter. On a table with
            a stored lead, a worker refuses each key whose time is at or past
            its last read of the record plus the lead (a :class:`FailedWrite`
            naming the horizon): write such scheduled keys later.
        counter_prefix: The name of the counters of written rows
            (``<prefix>.bucket_<n>``, ``<prefix>.legacy``).

    Returns:
        From ``expand``: the :class:`FailedWrite` elements (empty with ``"raise"``).

    ``WriteSaltedRows(project, instance, table, scheme, ..., app_profile_id=...)``
    still works and warns (deprecated).
    """

    @accepts_legacy_target
    def __init__(
        self,
        target: BigtableTarget,
        scheme: SaltScheme | Layout,
        cutoff: CutoffPolicy | None = None,
        *,
        on_failure: Literal["raise", "output"] = "raise",
        flush_mutations: int = 10_000,
        check_layout: bool = True,
        store_record: bool = True,
        record_family: str | None = None,
        require_record: bool = False,
        record_refresh: float | None = None,
        counter_prefix: str = "rows_written",
    ) -> None:
        super().__init__()
        if on_failure not in ("raise", "output"):
            raise ValueError(f"on_failure is 'raise' or 'output', got {on_failure!r}")
        if record_refresh is not None and not record_refresh > 0:
            raise ValueError(f"record_refresh must be > 0 seconds or None, got {record_refresh!r}")
        layout = layout_of(scheme, cutoff)
        lead = None if layout.epochs is None else layout.epochs.min_lead
        if lead is not None:
            # Refused here rather than on every worker (a lead the record stores
            # but the layout given lacks is checked by each worker's guard).
            problem = lead_problem(
                lead,
                enabled=check_layout,
                refresh=min(DEFAULT_RECORD_REFRESH, lead)
                if record_refresh is None
                else record_refresh,
                name=target.table,
            )
            if problem is not None:
                raise LayoutError(
                    problem.replace("open it with the guard on", "give check_layout=True")
                )
        if not 1 <= flush_mutations <= MAX_MUTATIONS_PER_ENTRY:
            raise ValueError(
                f"flush_mutations must be from 1 to {MAX_MUTATIONS_PER_ENTRY:,}, "
                f"got {flush_mutations}"
            )
        self.target = target
        self.layout = layout
        self._write = WriteEntries(
            self.target,
            self.layout,
            on_failure=on_failure,
            flush_mutations=flush_mutations,
            counter_prefix=counter_prefix,
            check_layout=check_layout,
            store_record=store_record,
            record_family=record_family,
            require_record=require_record,
            record_refresh=record_refresh,
        )

    def expand(self, entries: PCollection[RowMutationEntry]) -> PCollection[FailedWrite]:
        out: PCollection[FailedWrite] = entries | "Write salted" >> beam.ParDo(self._write)
        return out


# -- copies and digests ---------------------------------------------------------


def copy_entry(row: Row) -> RowMutationEntry:
    """An entry that makes the row at ``row.row_key`` exactly ``row``: every cell and version.

    The row is cleared first, in the same atomic entry, so writing it again
    (a re-run after a crash) gives the same row, and cells deleted from the
    source since an earlier copy do not survive.
    """
    mutations: list[Mutation] = [DeleteAllFromRow()]
    mutations += [SetCell(c.family, c.qualifier, c.value, c.timestamp_micros) for c in row.cells]
    return RowMutationEntry(row.row_key, mutations)


def row_digest(row: Row) -> int:
    """A 64-bit digest of a row's key and cells, independent of cell order."""
    h = hashlib.blake2b(digest_size=8)
    h.update(len(row.row_key).to_bytes(4, "big") + row.row_key)
    cells = sorted((c.family, c.qualifier, -c.timestamp_micros, c.value) for c in row.cells)
    for family, qualifier, neg_ts, value in cells:
        fam = family.encode()
        h.update(len(fam).to_bytes(4, "big") + fam)
        h.update(len(qualifier).to_bytes(4, "big") + qualifier)
        h.update((-neg_ts).to_bytes(8, "big", signed=True))
        h.update(len(value).to_bytes(4, "big") + value)
    return int.from_bytes(h.digest(), "big")
