"""Reading and writing salted tables from Beam workers.

Each worker opens its own synchronous ``BigtableDataClient`` in
``DoFn.setup`` (clients do not pickle); what travels to workers is plain
values: a :class:`BigtableTarget`, a :class:`~saltedtable.Layout`, a
:class:`~saltedtable.ReadPlan` and its :class:`~saltedtable._split.Split` s.

A read is planned in the driver (pure), split on a worker once the table's
``sample_row_keys`` are known, spread by a reshuffle, and read split by split
with the same paging and layout rules as the async reader.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, final

import apache_beam as beam
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue
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

from .._cutoff import CutoffPolicy
from .._exceptions import QueryPlanError, RowKeyError, SaltedTableError
from .._guard import SchemeMismatchError, describe_layout
from .._layout import Layout
from .._plan import PageCursor, ReadPlan, SubQuery, plan_reads
from .._record import open_differences
from .._salt import SaltScheme
from .._split import DEFAULT_SPLIT_BYTES, Split, split_plan
from ._record import read_record

__all__ = [
    "METRICS_NAMESPACE",
    "BigtableTarget",
    "FailedWrite",
    "ReadSaltedRows",
    "WriteFailedError",
    "WriteSaltedRows",
    "copy_entry",
    "row_digest",
]

_log = logging.getLogger("saltedtable.beam")

#: The namespace of every Beam metric saltedtable reports.
METRICS_NAMESPACE: Final = "saltedtable"
#: Rows one ReadRows request of a split asks for; a page is held in memory.
DEFAULT_ROWS_PER_REQUEST: Final = 2000
#: Bigtable applies at most this many mutations to one row in one request.
MAX_MUTATIONS_PER_ENTRY: Final = 100_000

Rows = Literal["visible", "copies"]


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
        """A new sync client and its table (honours ``BIGTABLE_EMULATOR_HOST``)."""
        client = BigtableDataClient(project=self.project)
        kwargs = {} if self.app_profile_id is None else {"app_profile_id": self.app_profile_id}
        return client, client.get_table(self.instance, self.table, **kwargs)


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


def check_record(table: Table, layout: Layout) -> None:
    """Refuse a table whose stored layout record does not admit ``layout``.

    Raises:
        SchemeMismatchError: The record names another layout.
    """
    stored = read_record(table)
    if stored is None:
        return
    current = describe_layout(layout.scheme, layout.cutoff)
    if open_differences(stored.record, current):
        raise SchemeMismatchError(stored.record, current)


# -- reading -------------------------------------------------------------------


@final
class LocalProgress:
    """What the DoFns of this process have done; shown by the CLI while a local run goes on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.splits_total = 0
        self.splits_done = 0
        self.rows: dict[str, int] = {}

    def reset(self) -> None:
        """Forget an earlier run."""
        with self.lock:
            self.splits_total = self.splits_done = 0
            self.rows = {}

    def add(self, what: str, rows: int) -> None:
        """Count ``rows`` more rows under ``what`` (``read``, ``written``, ...)."""
        with self.lock:
            self.rows[what] = self.rows.get(what, 0) + rows

    def line(self) -> str:
        """One line for humans."""
        with self.lock:
            parts = [f"splits {self.splits_done:,}/{self.splits_total:,}"]
            parts += [f"{what} {n:,}" for what, n in sorted(self.rows.items())]
        return ", ".join(parts)


#: Shared by every DoFn running in this process (the local runner's default).
PROGRESS: Final = LocalProgress()


class PlanSplits(TableDoFn):
    """Samples the table once and cuts the plan into splits (runs on one worker)."""

    def __init__(
        self,
        target: BigtableTarget,
        layout: Layout,
        subqueries: tuple[SubQuery, ...],
        split_bytes: int,
        check_layout: bool,
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.subqueries = subqueries
        self.split_bytes = split_bytes
        self.check_layout = check_layout
        self._splits = Metrics.counter(METRICS_NAMESPACE, "splits")

    def process(self, _: object) -> Iterator[Split]:
        if self.check_layout:
            check_record(self.bigtable(), self.layout)
        samples = self.bigtable().sample_row_keys()
        splits = split_plan(self.subqueries, samples, target_bytes=self.split_bytes)
        self._splits.inc(len(splits))
        with PROGRESS.lock:
            PROGRESS.splits_total += len(splits)
        _log.info(
            "%s: %d split(s) over %d sub-quer(ies)",
            self.target.table,
            len(splits),
            len(self.subqueries),
        )
        yield from splits


class _ReadSplits(TableDoFn):
    """Reads each split, page by page, and yields rows with logical keys."""

    def __init__(
        self, target: BigtableTarget, layout: Layout, rows_per_request: int, rows: Rows
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.rows_per_request = rows_per_request
        self.rows = rows
        self._counters: dict[int | None, Any] = {}

    def _counter(self, bucket: int | None) -> Any:
        counter = self._counters.get(bucket)
        if counter is None:
            name = f"rows_read.{_bucket_name(bucket)}"
            counter = self._counters[bucket] = Metrics.counter(METRICS_NAMESPACE, name)
        return counter

    def process(self, split: Split) -> Iterator[Row]:
        sub = split.sub
        read = 0
        for row in read_split(self.bigtable(), sub, self.layout, self.rows_per_request, self.rows):
            read += 1
            yield row
        self._counter(sub.bucket).inc(read)
        PROGRESS.add("rows read", read)
        with PROGRESS.lock:
            PROGRESS.splits_done += 1


def read_split(
    table: Table, sub: SubQuery, layout: Layout, rows_per_request: int, rows: Rows = "visible"
) -> Iterator[Row]:
    """Every row of one split, relabelled with its logical key.

    ``rows="visible"`` keeps what a reader of ``layout`` sees (the layout's
    stray rules, on both sides); ``"copies"`` keeps only the bucket rows those
    rules hide: the backfilled copies of legacy rows.
    """
    cursor = PageCursor(sub)
    cut = len(sub.prefix)
    if layout.cutoff is None:
        hidden: Callable[[bytes], str | None] | None = None
    elif sub.bucket is None:
        hidden = layout.stray_reason
    else:
        hidden = layout.salted_stray_reason
    want_hidden = rows == "copies"
    while (query := cursor.next_query(rows_per_request)) is not None:
        # A whole page is read before any row is handed on, so no RPC stays
        # open while the rest of the pipeline works.
        page = table.read_rows(query)
        cursor.advance(len(page), rows_per_request, page[-1].row_key if page else None)
        for row in page:
            key = row.row_key[cut:]
            if (hidden is not None and hidden(key) is not None) != want_hidden:
                continue
            row.row_key = key
            for cell in row.cells:
                cell.row_key = key
            yield row


class ReadSplitRows(beam.PTransform[PBegin, PCollection[Row]]):
    """Plan -> splits -> reshuffle -> rows; the core of every read here."""

    def __init__(
        self,
        target: BigtableTarget,
        layout: Layout,
        subqueries: tuple[SubQuery, ...],
        *,
        split_bytes: int,
        rows_per_request: int,
        rows: Rows = "visible",
        check_layout: bool = True,
    ) -> None:
        super().__init__()
        if split_bytes < 1 or rows_per_request < 1:
            raise ValueError(
                f"split_bytes and rows_per_request must be >= 1, got {split_bytes}, "
                f"{rows_per_request}"
            )
        self.target = target
        self.layout = layout
        self.subqueries = subqueries
        self.split_bytes = split_bytes
        self.rows_per_request = rows_per_request
        self.rows = rows
        self.check_layout = check_layout

    def expand(self, pbegin: PBegin) -> PCollection[Row]:
        plan = PlanSplits(
            self.target, self.layout, self.subqueries, self.split_bytes, self.check_layout
        )
        out: PCollection[Row] = (
            pbegin
            | "Start" >> beam.Impulse()
            | "Plan splits" >> beam.ParDo(plan)
            | "Spread splits" >> beam.Reshuffle()
            | "Read splits"
            >> beam.ParDo(_ReadSplits(self.target, self.layout, self.rows_per_request, self.rows))
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
        project: The Google Cloud project.
        instance: The Bigtable instance id.
        table: The table id.
        scheme: The table's salt scheme.
        query: The logical read (None: the whole table). A row limit is
            refused: a parallel read has no order to cut it at.
        cutoff: The forward-only migration policy, if the table has one.
        split_bytes: About how much data one split reads.
        rows_per_request: Rows per ReadRows request within a split.
        app_profile_id: The app profile to send requests with.
        check_layout: Refuse a table whose stored layout record names another layout.

    Raises:
        QueryPlanError: A query with a limit, or one the planner refuses.
    """

    def __init__(
        self,
        project: str,
        instance: str,
        table: str,
        scheme: SaltScheme,
        query: ReadRowsQuery | None = None,
        cutoff: CutoffPolicy | None = None,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        rows_per_request: int = DEFAULT_ROWS_PER_REQUEST,
        app_profile_id: str | None = None,
        check_layout: bool = True,
    ) -> None:
        super().__init__()
        query = ReadRowsQuery() if query is None else query
        if query.limit:
            raise QueryPlanError(
                f"ReadSaltedRows reads in parallel and in no order, so limit={query.limit} "
                "has no meaning; drop the limit (or read with SaltedTableAsync.read_rows)"
            )
        self.layout = Layout(scheme, cutoff)
        self.plan: ReadPlan = plan_reads(query, self.layout)
        self._read = ReadSplitRows(
            BigtableTarget(project, instance, table, app_profile_id),
            self.layout,
            self.plan.subqueries,
            split_bytes=split_bytes,
            rows_per_request=rows_per_request,
            check_layout=check_layout,
        )

    def expand(self, pbegin: PBegin) -> PCollection[Row]:
        out: PCollection[Row] = pbegin | "Read" >> self._read
        return out


# -- writing -------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FailedWrite:
    """A logical entry that could not be written, and why."""

    row_key: bytes
    error: str
    mutations: tuple[Mutation, ...] = field(default=(), compare=False)


class WriteFailedError(SaltedTableError):
    """Entries failed after the client's retries; names their logical keys.

    Attributes:
        failures: Every failed entry.
    """

    def __init__(self, failures: list[FailedWrite]) -> None:
        self.failures = failures
        shown = "\n  ".join(f"{f.row_key!r}: {f.error}" for f in failures[:5])
        more = f"\n  (+{len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} salted write(s) failed:\n  {shown}{more}")


class _WriteEntries(TableDoFn):
    """Salts each logical entry and hands it to the client's batcher (one per bundle)."""

    def __init__(
        self,
        target: BigtableTarget,
        layout: Layout,
        *,
        on_failure: Literal["raise", "output"],
        flush_mutations: int,
        counter_prefix: str,
        check_layout: bool,
    ) -> None:
        super().__init__(target)
        self.layout = layout
        self.on_failure = on_failure
        self.flush_mutations = flush_mutations
        self.counter_prefix = counter_prefix
        self.check_layout = check_layout
        self._batcher: Any = None
        self._failures: list[FailedWrite] = []
        self._counters: dict[int | None, Any] = {}

    def setup(self) -> None:
        super().setup()
        if self.check_layout:
            check_record(self.bigtable(), self.layout)

    def teardown(self) -> None:
        # After a failed bundle: send what was queued (every entry is idempotent
        # to a re-run) rather than leave the batcher open.
        if self._batcher is not None and not self._batcher.closed:
            with contextlib.suppress(Exception):
                self._batcher.close()
        super().teardown()

    def _counter(self, bucket: int | None) -> Any:
        counter = self._counters.get(bucket)
        if counter is None:
            name = f"{self.counter_prefix}.{_bucket_name(bucket)}"
            counter = self._counters[bucket] = Metrics.counter(METRICS_NAMESPACE, name)
        return counter

    def start_bundle(self) -> None:
        self._failures = []
        self._batcher = self.bigtable().mutations_batcher(
            flush_interval=None, flush_limit_mutation_count=self.flush_mutations
        )

    def process(self, entry: RowMutationEntry) -> Iterator[FailedWrite]:
        bucket, physical = self.layout.locate(entry.row_key)
        mutations = list(entry.mutations)
        if len(mutations) >= MAX_MUTATIONS_PER_ENTRY:
            # Too many for one request: applied in order, so not atomically.
            for i in range(0, len(mutations), MAX_MUTATIONS_PER_ENTRY - 1):
                self.bigtable().mutate_row(physical, mutations[i : i + MAX_MUTATIONS_PER_ENTRY - 1])
        else:
            try:
                self._batcher.append(RowMutationEntry(physical, mutations))
            except MutationsExceptionGroup as group:  # an earlier flush failed
                self._failures += self._logical(group)
        self._counter(bucket).inc()
        PROGRESS.add(self.counter_prefix.replace("_", " "), 1)
        return iter(())

    def finish_bundle(self) -> Iterator[WindowedValue]:
        try:
            self._batcher.close()
        except MutationsExceptionGroup as group:
            self._failures += self._logical(group)
        failures, self._failures = self._failures, []
        if failures and self.on_failure == "raise":
            raise WriteFailedError(failures)
        for failure in failures:
            yield GlobalWindows.windowed_value(failure)

    def _logical(self, group: MutationsExceptionGroup) -> list[FailedWrite]:
        out = []
        for exc in group.exceptions:
            if isinstance(exc, FailedMutationEntryError):
                physical = exc.entry.row_key
                try:
                    key = self.layout.to_logical(physical)
                except RowKeyError:
                    key = physical
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                out.append(
                    FailedWrite(key, f"{type(cause).__name__}: {cause}", tuple(exc.entry.mutations))
                )
            else:
                out.append(FailedWrite(b"", f"{type(exc).__name__}: {exc}"))
        return out


class WriteSaltedRows(beam.PTransform[PCollection[RowMutationEntry], PCollection[FailedWrite]]):
    """Write ``RowMutationEntry`` elements with logical keys to a salted table.

    Each key is salted (or, with a cutoff, routed to its side) by the same
    layout rules as ``SaltedTableAsync``; entries go through the client's
    mutations batcher, flushed at the end of every bundle. Each entry is
    applied atomically, as in Bigtable (an entry of 100,000 mutations or more
    is applied in order, in several requests).

    Args:
        project: The Google Cloud project.
        instance: The Bigtable instance id.
        table: The table id.
        scheme: The table's salt scheme.
        cutoff: The forward-only migration policy, if the table has one.
        on_failure: ``"raise"`` (default) fails the bundle with
            :class:`WriteFailedError` naming the logical keys (the runner
            retries it); ``"output"`` emits a :class:`FailedWrite` per failed
            entry instead.
        flush_mutations: A batch is sent once its entries hold this many mutations.
        app_profile_id: The app profile to send requests with.
        check_layout: Refuse a table whose stored layout record names another layout.

    Returns:
        From ``expand``: the :class:`FailedWrite` elements (empty with ``"raise"``).
    """

    def __init__(
        self,
        project: str,
        instance: str,
        table: str,
        scheme: SaltScheme,
        cutoff: CutoffPolicy | None = None,
        *,
        on_failure: Literal["raise", "output"] = "raise",
        flush_mutations: int = 10_000,
        app_profile_id: str | None = None,
        check_layout: bool = True,
        counter_prefix: str = "rows_written",
    ) -> None:
        super().__init__()
        if on_failure not in ("raise", "output"):
            raise ValueError(f"on_failure is 'raise' or 'output', got {on_failure!r}")
        if flush_mutations < 1:
            raise ValueError(f"flush_mutations must be >= 1, got {flush_mutations}")
        self._write = _WriteEntries(
            BigtableTarget(project, instance, table, app_profile_id),
            Layout(scheme, cutoff),
            on_failure=on_failure,
            flush_mutations=flush_mutations,
            counter_prefix=counter_prefix,
            check_layout=check_layout,
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
