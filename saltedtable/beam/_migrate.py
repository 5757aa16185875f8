"""Pipelines that move data between layouts: backfill, verify, cut-over, delete, resalt.

Finishing a forward-only migration (a table with a time cutoff), in order:

1. :func:`backfill` moves the layout record to the ``backfill`` state and
   runs :class:`BackfillLegacy`: every legacy row is copied, with every cell,
   timestamp and version, to its salted key. Cutoff readers leave the copies
   out of scans, so they see each row once throughout. A re-run (after a
   crash, or after legacy rows changed) rewrites each copy whole and
   converges to the same table.
2. :func:`verify_backfill` compares the legacy rows with their copies: per
   bucket row counts and an order-free content checksum.
3. :func:`cut_over` verifies again and moves the record to ``cutover``: from
   now on fully salted readers open too (they read the copies), next to the
   cutoff readers (which read the legacy rows). Redeploy every service
   without the cutoff.
4. :func:`delete_legacy`, once no cutoff reader is left, deletes each legacy
   row whose copy is identical (:class:`DeleteLegacy`) and, when none is
   left, writes the fully salted record; cutoff readers are refused from then on.

:func:`resalt` copies a table from one scheme to another into a new table,
verifies it the same way and writes the new record there, once.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, final

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.runners.runner import PipelineResult
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import DeleteAllFromRow
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from .._cutoff import CutoffPolicy
from .._exceptions import LayoutError, RowKeyError
from .._guard import SchemeMismatchError, describe_layout, layout_differences
from .._layout import Layout
from .._migration import (
    BACKFILL,
    CUTOVER,
    MIGRATION_KEY,
    migration_record,
    migration_state,
)
from .._plan import PageCursor, SubQuery, plan_reads
from .._salt import SaltScheme
from .._split import DEFAULT_SPLIT_BYTES
from ._io import (
    DEFAULT_ROWS_PER_REQUEST,
    METRICS_NAMESPACE,
    PROGRESS,
    BigtableTarget,
    FailedWrite,
    PlanSplits,
    ReadSplitRows,
    TableDoFn,
    WriteSaltedRows,
    copy_entry,
    read_split,
    row_digest,
)
from ._record import StoredRecord, read_record, swap_record

__all__ = [
    "BackfillLegacy",
    "Checksums",
    "DeleteLegacy",
    "MigrationReport",
    "PruneOrphanCopies",
    "backfill",
    "cut_over",
    "delete_legacy",
    "resalt",
    "run_pipeline",
    "verify_backfill",
    "verify_resalt",
]

_log = logging.getLogger("saltedtable.beam")

_VERIFY_NAMESPACE: Final = f"{METRICS_NAMESPACE}.verify"
_MASK: Final = (1 << 64) - 1
_CHUNKS: Final = 4  # a 64-bit digest summed as four 16-bit counters, so no counter overflows


# -- running -------------------------------------------------------------------


def run_pipeline(
    build: Callable[[beam.Pipeline], Any],
    options: PipelineOptions | None = None,
    *,
    progress: IO[str] | None = None,
) -> PipelineResult:
    """Build a pipeline with ``build`` and run it to the end.

    Without ``--runner`` in ``options`` it runs locally on Beam's portable
    in-process runner (``--direct_num_workers`` and ``--direct_running_mode``
    apply); with one (e.g. ``DataflowRunner``), on that runner. ``progress``
    shows what this process's workers did, redrawn on one line.
    """
    options = PipelineOptions([]) if options is None else options
    if options.view_as(StandardOptions).runner is None:
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    else:
        pipeline = beam.Pipeline(options=options)
    build(pipeline)
    PROGRESS.reset()
    stop = threading.Event()
    shower = None
    if progress is not None:
        shower = threading.Thread(target=_show_progress, args=(progress, stop), daemon=True)
        shower.start()
    try:
        result = pipeline.run()
        result.wait_until_finish()
    finally:
        stop.set()
        if shower is not None:
            shower.join()
    return result


def _show_progress(stream: IO[str], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        stream.write(f"\r{PROGRESS.line()}")
        stream.flush()
    stream.write(f"\r{PROGRESS.line()}\n")
    stream.flush()


def counters(result: PipelineResult, namespace: str = METRICS_NAMESPACE) -> dict[str, int]:
    """The run's counters in ``namespace`` by name (committed values where the runner has them)."""
    out: dict[str, int] = {}
    for metric in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
        value = metric.committed if metric.committed is not None else metric.attempted
        name = metric.key.metric.name
        out[name] = out.get(name, 0) + int(value or 0)
    return out


# -- checksums -----------------------------------------------------------------


class _Checksum(beam.DoFn):
    """Counts rows and sums their digests per bucket of ``scheme``, as Beam counters."""

    def __init__(self, side: str, scheme: SaltScheme) -> None:
        super().__init__()
        self.side = side
        self.scheme = scheme
        self._counters: dict[tuple[str, str], Any] = {}

    def _inc(self, bucket: str, what: str, value: int) -> None:
        counter = self._counters.get((bucket, what))
        if counter is None:
            name = f"{self.side}.{bucket}.{what}"
            counter = self._counters[bucket, what] = Metrics.counter(_VERIFY_NAMESPACE, name)
        counter.inc(value)

    def process(self, row: Row) -> Iterator[None]:
        try:
            bucket = str(self.scheme.bucket_of(row.row_key))
        except RowKeyError:
            bucket = "unsaltable"
        self._inc(bucket, "rows", 1)
        digest = row_digest(row)
        for i in range(_CHUNKS):
            self._inc(bucket, f"sum{i}", (digest >> (16 * i)) & 0xFFFF)
        return iter(())


@final
@dataclass(frozen=True, slots=True)
class Checksums:
    """Per bucket: rows and the sum of their digests (mod 2**64) on two sides."""

    sides: tuple[str, str]
    buckets: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)

    @classmethod
    def from_counters(cls, sides: tuple[str, str], values: dict[str, int]) -> Checksums:
        """Rebuild the sums from the counters :class:`_Checksum` reported."""
        found: dict[str, list[int]] = {}
        for name, value in values.items():
            side, bucket, what = name.split(".", 2)
            if side not in sides:
                continue
            slot = found.setdefault(bucket, [0, 0, 0, 0])
            at = 0 if side == sides[0] else 2
            if what == "rows":
                slot[at] += value
            else:
                slot[at + 1] = (slot[at + 1] + (value << (16 * int(what[3:])))) & _MASK
        return cls(sides, {b: (s[0], s[1], s[2], s[3]) for b, s in found.items()})

    @property
    def ok(self) -> bool:
        """True when every bucket has the same rows and checksum on both sides."""
        return all(a == c and b == d for a, b, c, d in self.buckets.values())

    @property
    def rows(self) -> tuple[int, int]:
        """Total rows on each side."""
        return (
            sum(v[0] for v in self.buckets.values()),
            sum(v[2] for v in self.buckets.values()),
        )

    def lines(self) -> list[str]:
        """A table for humans, differing buckets marked."""
        a, b = self.sides
        out = [f"{'bucket':>10} {a + ' rows':>14} {b + ' rows':>14}  checksums"]
        for bucket in sorted(
            self.buckets, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s)
        ):
            ra, sa, rb, sb = self.buckets[bucket]
            same = "equal" if (ra, sa) == (rb, sb) else f"DIFFER {sa:016x} {sb:016x}"
            out.append(f"{bucket:>10} {ra:>14,} {rb:>14,}  {same}")
        ra, rb = self.rows
        verdict = "verified: equal" if self.ok else "NOT equal"
        out.append(f"{'total':>10} {ra:>14,} {rb:>14,}  {verdict}")
        return out


@final
@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migration step did: its counters and, for verifying steps, the checksums."""

    step: str
    counters: dict[str, int]
    checksums: Checksums | None = None
    record: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """False when a verification found a difference."""
        return self.checksums is None or self.checksums.ok

    def lines(self) -> list[str]:
        """A summary for humans."""
        out = [f"{self.step}:"]
        for name, value in sorted(self.counters.items()):
            out.append(f"  {name}: {value:,}")
        if self.checksums is not None:
            out += ["  " + line for line in self.checksums.lines()]
        out += [f"  {note}" for note in self.notes]
        if self.record is not None:
            out.append(f"  layout record: {_describe_state(self.record)}")
        return out


def _describe_state(record: dict[str, Any]) -> str:
    state = migration_state(record)
    if state is not None:
        return f"{state} (cutoff {record['cutoff']['at']})"
    return "cutoff" if record.get("cutoff") else "fully salted"


# -- the backfill --------------------------------------------------------------


def _legacy_subqueries(layout: Layout) -> tuple[SubQuery, ...]:
    if layout.cutoff is None:
        raise LayoutError("a backfill moves the legacy side of a cutoff layout: give the cutoff")
    plan = plan_reads(ReadRowsQuery(), layout)
    return tuple(s for s in plan.subqueries if s.bucket is None)


def _salted_subqueries(layout: Layout) -> tuple[SubQuery, ...]:
    plan = plan_reads(ReadRowsQuery(), layout)
    return tuple(s for s in plan.subqueries if s.bucket is not None)


class BackfillLegacy(beam.PTransform[PBegin, PCollection[FailedWrite]]):
    """Copy every legacy row of a cutoff table to its salted key, cells and versions included.

    Reads the legacy (pre-cutoff) side as cutoff readers see it, and writes
    each row with :func:`~saltedtable.beam.copy_entry`: the salted row is
    cleared and rewritten in one atomic entry, so a re-run converges. Use
    :func:`backfill`, which also moves the layout record first; run alone,
    cutoff readers that have not seen the ``backfill`` record refuse the
    copies at open.

    Returns:
        From ``expand``: the failed writes (empty unless ``on_failure="output"``).
    """

    def __init__(
        self,
        project: str,
        instance: str,
        table: str,
        scheme: SaltScheme,
        cutoff: CutoffPolicy,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        rows_per_request: int = DEFAULT_ROWS_PER_REQUEST,
        app_profile_id: str | None = None,
    ) -> None:
        super().__init__()
        self.target = BigtableTarget(project, instance, table, app_profile_id)
        self.layout = Layout(scheme, cutoff)
        self._read = ReadSplitRows(
            self.target,
            self.layout,
            _legacy_subqueries(self.layout),
            split_bytes=split_bytes,
            rows_per_request=rows_per_request,
        )
        self._write = WriteSaltedRows(
            project,
            instance,
            table,
            scheme,
            app_profile_id=app_profile_id,
            check_layout=False,  # the record names the cutoff layout until the cut-over
            counter_prefix="rows_copied",
        )

    def expand(self, pbegin: PBegin) -> PCollection[FailedWrite]:
        out: PCollection[FailedWrite] = (
            pbegin
            | "Read legacy rows" >> self._read
            | "As copies" >> beam.Map(copy_entry)
            | "Write copies" >> self._write
        )
        return out


def _start_backfill(stored: StoredRecord | None, layout: Layout) -> dict[str, Any]:
    """The backfill record, after checking that ``stored`` allows a backfill to start or go on."""
    assert layout.cutoff is not None
    wanted = migration_record(layout.scheme, layout.cutoff, BACKFILL)
    if stored is None:
        return wanted
    cutoff_record = describe_layout(layout.scheme, layout.cutoff)
    base = {k: v for k, v in stored.record.items() if k != MIGRATION_KEY}
    if layout_differences(base, cutoff_record):
        raise SchemeMismatchError(stored.record, cutoff_record)
    if migration_state(stored.record) == CUTOVER:
        raise LayoutError(
            "this table is already cut over: fully salted writers may have changed the copies, "
            "so a backfill would overwrite their writes. Run delete-legacy to finish instead"
        )
    return wanted


def backfill(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    family: str | None = None,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
    prune_orphans: bool = False,
) -> MigrationReport:
    """Step 1: move the record to ``backfill`` (once) and copy every legacy row.

    Args:
        target: The table.
        scheme: Its salt scheme.
        cutoff: Its cutoff policy.
        family: Column family for the record, if the table has none yet.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.
        prune_orphans: Also delete copies whose legacy row no longer exists
            (deleted after an earlier run copied it). This reads every bucket.

    Raises:
        SchemeMismatchError: The stored record names another layout.
        LayoutError: The table is already cut over.
    """
    layout = Layout(scheme, cutoff)
    client, table = target.open()
    try:
        stored = read_record(table)
        wanted = _start_backfill(stored, layout)
        if stored is None or migration_state(stored.record) != BACKFILL:
            swap_record(table, stored, wanted, family=family)
    finally:
        table.close()
        client.close()
    transform = BackfillLegacy(
        target.project,
        target.instance,
        target.table,
        scheme,
        cutoff,
        split_bytes=split_bytes,
        app_profile_id=target.app_profile_id,
    )
    prune = (
        PruneOrphanCopies(target, scheme, cutoff, split_bytes=split_bytes)
        if prune_orphans
        else None
    )

    def build(p: beam.Pipeline) -> None:
        _ = p | "Backfill" >> transform
        if prune is not None:
            # Safe next to the copying: a copy written now has its legacy row.
            _ = p | "Prune orphans" >> prune

    result = run_pipeline(build, options, progress=progress)
    return MigrationReport("backfill", counters(result), record=wanted)


class _PruneOrphans(TableDoFn):
    """Deletes the copies of a split whose legacy row is gone."""

    def __init__(self, target: BigtableTarget, layout: Layout, rows_per_request: int) -> None:
        super().__init__(target)
        self.layout = layout
        self.rows_per_request = rows_per_request
        self._pruned = Metrics.counter(METRICS_NAMESPACE, "orphan_copies_deleted")

    def process(self, split: Any) -> Iterator[None]:
        page: list[bytes] = []
        rows = read_split(self.bigtable(), split.sub, self.layout, self.rows_per_request, "copies")
        for row in rows:
            page.append(row.row_key)
            if len(page) >= 500:
                self._prune(page)
                page = []
        if page:
            self._prune(page)
        return iter(())

    def _prune(self, keys: list[bytes]) -> None:
        only_keys = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])
        query = ReadRowsQuery(row_keys=list[str | bytes](keys), row_filter=only_keys)
        legacy = self.bigtable().read_rows(query)
        present = {row.row_key for row in legacy}
        scheme = self.layout.scheme
        doomed = [
            RowMutationEntry(scheme.salt_key(key), [DeleteAllFromRow()])
            for key in keys
            if key not in present
        ]
        if doomed:
            self.bigtable().bulk_mutate_rows(doomed)
            self._pruned.inc(len(doomed))


class PruneOrphanCopies(beam.PTransform[PBegin, PCollection[None]]):
    """Delete the bucket copies of legacy rows that no longer exist.

    A legacy row deleted after a backfill copied it leaves its copy behind,
    which a fully salted reader would show. This reads every bucket.
    """

    def __init__(
        self,
        target: BigtableTarget,
        scheme: SaltScheme,
        cutoff: CutoffPolicy,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        rows_per_request: int = DEFAULT_ROWS_PER_REQUEST,
    ) -> None:
        super().__init__()
        self.target = target
        self.layout = Layout(scheme, cutoff)
        self.split_bytes = split_bytes
        self.rows_per_request = rows_per_request

    def expand(self, pbegin: PBegin) -> PCollection[None]:
        plan = PlanSplits(
            self.target, self.layout, _salted_subqueries(self.layout), self.split_bytes, False
        )
        out: PCollection[None] = (
            pbegin
            | "Start" >> beam.Impulse()
            | "Plan splits" >> beam.ParDo(plan)
            | "Spread splits" >> beam.Reshuffle()
            | "Prune" >> beam.ParDo(_PruneOrphans(self.target, self.layout, self.rows_per_request))
        )
        return out


# -- verifying -------------------------------------------------------------------


def verify_backfill(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Step 2: compare legacy rows with their copies, per bucket (counts and checksums)."""
    layout = Layout(scheme, cutoff)
    legacy = ReadSplitRows(
        target,
        layout,
        _legacy_subqueries(layout),
        split_bytes=split_bytes,
        rows_per_request=DEFAULT_ROWS_PER_REQUEST,
        check_layout=False,
    )
    copies = ReadSplitRows(
        target,
        layout,
        _salted_subqueries(layout),
        split_bytes=split_bytes,
        rows_per_request=DEFAULT_ROWS_PER_REQUEST,
        rows="copies",
        check_layout=False,
    )

    def build(p: beam.Pipeline) -> None:
        _ = p | "Legacy" >> legacy | "Sum legacy" >> beam.ParDo(_Checksum("legacy", scheme))
        _ = p | "Copies" >> copies | "Sum copies" >> beam.ParDo(_Checksum("copies", scheme))

    result = run_pipeline(build, options, progress=progress)
    sums = Checksums.from_counters(("legacy", "copies"), counters(result, _VERIFY_NAMESPACE))
    return MigrationReport("verify backfill", counters(result), sums)


def cut_over(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Step 3: verify the copies, then move the record from ``backfill`` to ``cutover``.

    Nothing is changed when the verification finds a difference (re-run
    the backfill: writes to rows before the cutoff must pause meanwhile).

    Raises:
        LayoutError: The record is not in the backfill state.
    """
    client, table = target.open()
    try:
        stored = read_record(table)
        _expect_state(stored, scheme, cutoff, BACKFILL, "cut over")
        report = verify_backfill(
            target, scheme, cutoff, options=options, split_bytes=split_bytes, progress=progress
        )
        if not report.ok:
            return MigrationReport(
                "cut-over refused",
                report.counters,
                report.checksums,
                notes=("the copies differ from the legacy rows: run the backfill again",),
            )
        wanted = migration_record(scheme, cutoff, CUTOVER)
        swap_record(table, stored, wanted)
    finally:
        table.close()
        client.close()
    return MigrationReport(
        "cut-over",
        report.counters,
        report.checksums,
        record=wanted,
        notes=(
            "fully salted readers and writers may open the table now; redeploy every "
            "service without the cutoff, then run delete-legacy",
        ),
    )


def _expect_state(
    stored: StoredRecord | None,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    state: str,
    step: str,
) -> StoredRecord:
    wanted = migration_record(scheme, cutoff, state)  # type: ignore[arg-type]
    if stored is None or layout_differences(stored.record, wanted):
        found = "no layout record" if stored is None else _describe_state(stored.record)
        raise LayoutError(
            f"cannot {step}: the layout record must be in the {state} state of this "
            f"layout, found {found}"
        )
    return stored


# -- deleting the legacy rows --------------------------------------------------


class _DeleteVerified(TableDoFn):
    """Deletes each legacy row of a split whose salted copy is identical."""

    def __init__(self, target: BigtableTarget, layout: Layout, rows_per_request: int) -> None:
        super().__init__(target)
        self.layout = layout
        self.rows_per_request = rows_per_request
        self._deleted = Metrics.counter(METRICS_NAMESPACE, "legacy_rows_deleted")
        self._kept = Metrics.counter(METRICS_NAMESPACE, "legacy_rows_differing")

    def process(self, split: Any) -> Iterator[None]:
        page: list[Row] = []
        for row in read_split(self.bigtable(), split.sub, self.layout, self.rows_per_request):
            page.append(row)
            if len(page) >= 500:
                self._settle(page)
                page = []
        if page:
            self._settle(page)
        with PROGRESS.lock:
            PROGRESS.splits_done += 1
        return iter(())

    def _settle(self, rows: list[Row]) -> None:
        scheme = self.layout.scheme
        copies = {
            row.row_key: row
            for row in self.bigtable().read_rows(
                ReadRowsQuery(row_keys=[scheme.salt_key(r.row_key) for r in rows])
            )
        }
        doomed = []
        for row in rows:
            copy = copies.get(scheme.salt_key(row.row_key))
            if copy is not None:
                copy.row_key = row.row_key
                for cell in copy.cells:
                    cell.row_key = row.row_key
            if copy is not None and row_digest(copy) == row_digest(row):
                doomed.append(RowMutationEntry(row.row_key, [DeleteAllFromRow()]))
            else:
                _log.warning(
                    "legacy row %r kept: its salted copy is %s",
                    row.row_key,
                    "missing" if copy is None else "different",
                )
                self._kept.inc()
        if doomed:
            self.bigtable().bulk_mutate_rows(doomed)
            self._deleted.inc(len(doomed))
            PROGRESS.add("legacy rows deleted", len(doomed))


class DeleteLegacy(beam.PTransform[PBegin, PCollection[None]]):
    """Delete every legacy row whose salted copy holds exactly the same cells.

    A row whose copy is missing or differs is kept and counted
    (``legacy_rows_differing``). Use :func:`delete_legacy`, which checks the
    record's state first and writes the fully salted record afterwards.
    """

    def __init__(
        self,
        target: BigtableTarget,
        scheme: SaltScheme,
        cutoff: CutoffPolicy,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        rows_per_request: int = DEFAULT_ROWS_PER_REQUEST,
    ) -> None:
        super().__init__()
        self.target = target
        self.layout = Layout(scheme, cutoff)
        self.split_bytes = split_bytes
        self.rows_per_request = rows_per_request

    def expand(self, pbegin: PBegin) -> PCollection[None]:
        plan = PlanSplits(
            self.target, self.layout, _legacy_subqueries(self.layout), self.split_bytes, False
        )
        out: PCollection[None] = (
            pbegin
            | "Start" >> beam.Impulse()
            | "Plan splits" >> beam.ParDo(plan)
            | "Spread splits" >> beam.Reshuffle()
            | "Delete verified"
            >> beam.ParDo(_DeleteVerified(self.target, self.layout, self.rows_per_request))
        )
        return out


def delete_legacy(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Step 4: delete the verified legacy rows; with none left, write the fully salted record.

    Run it only once every service opens the table without the cutoff:
    a cutoff reader still running would miss the deleted rows.

    Raises:
        LayoutError: The record is not in the cut-over state.
    """
    layout = Layout(scheme, cutoff)
    client, table = target.open()
    try:
        stored = _expect_state(
            read_record(table), scheme, cutoff, CUTOVER, "delete the legacy rows"
        )
        transform = DeleteLegacy(target, scheme, cutoff, split_bytes=split_bytes)
        result = run_pipeline(lambda p: p | "Delete" >> transform, options, progress=progress)
        found = counters(result)
        left, strays = _legacy_left(table, layout)
        notes = []
        if left or found.get("legacy_rows_differing", 0):
            notes.append(
                f"{left} legacy row(s) left (their copies differ or are missing): run the "
                "backfill's verify to see them; the record stays in the cut-over state"
            )
            return MigrationReport("delete legacy (incomplete)", found, notes=tuple(notes))
        if strays:
            notes.append(
                f"{strays} stray row(s) outside the salt prefixes (unsalted keys from after the "
                "cutoff, hidden from every reader) block the final record; delete them by hand"
            )
            return MigrationReport("delete legacy (strays left)", found, notes=tuple(notes))
        wanted = describe_layout(scheme)
        swap_record(table, stored, wanted)
    finally:
        table.close()
        client.close()
    return MigrationReport("delete legacy", found, record=wanted)


def _legacy_left(table: Any, layout: Layout) -> tuple[int, int]:
    """(legacy rows, stray rows) still outside the salt prefixes."""
    left = strays = 0
    for sub in _legacy_subqueries(layout):
        cursor = PageCursor(sub)
        while (query := cursor.next_query(DEFAULT_ROWS_PER_REQUEST)) is not None:
            page = table.read_rows(query)
            cursor.advance(len(page), DEFAULT_ROWS_PER_REQUEST, page[-1].row_key if page else None)
            for row in page:
                if layout.stray_reason(row.row_key) is None:
                    left += 1
                else:
                    strays += 1
    return left, strays


# -- resalt --------------------------------------------------------------------


def resalt(
    source: BigtableTarget,
    scheme: SaltScheme,
    destination: BigtableTarget,
    new_scheme: SaltScheme,
    *,
    cutoff: CutoffPolicy | None = None,
    family: str,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Copy every row from ``scheme`` (with its cutoff) to ``new_scheme`` in another table.

    Cells, timestamps and versions are kept; each destination row is cleared
    and rewritten atomically, so a re-run converges. Then both tables are
    read again and compared per destination bucket (rows and checksum), and
    only when they agree is the new layout record written to the destination,
    once, from here.

    Args:
        source: The table to copy.
        scheme: Its scheme.
        destination: A different table with the same column families.
        new_scheme: The scheme to write.
        cutoff: The source's cutoff policy, if it has one (the destination is fully salted).
        family: The column family for the destination's layout record.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.

    Raises:
        LayoutError: Source and destination are the same table, or the
            destination's record names another layout.
    """
    if (source.project, source.instance, source.table) == (
        destination.project,
        destination.instance,
        destination.table,
    ):
        raise LayoutError(
            "resalt writes into another table: the source's readers and guard would meet the "
            "new rows in the same one"
        )
    new_record = describe_layout(new_scheme)
    client, table = destination.open()
    try:
        stored = read_record(table)
        if stored is not None and layout_differences(stored.record, new_record):
            raise SchemeMismatchError(stored.record, new_record)
    finally:
        table.close()
        client.close()
    read = ReadSource(source, Layout(scheme, cutoff), split_bytes)
    write = WriteSaltedRows(
        destination.project,
        destination.instance,
        destination.table,
        new_scheme,
        app_profile_id=destination.app_profile_id,
        counter_prefix="rows_written",
    )

    def build(p: beam.Pipeline) -> None:
        rows = p | "Read source" >> read
        _ = rows | "As copies" >> beam.Map(copy_entry) | "Write" >> write

    copied = counters(run_pipeline(build, options, progress=progress))
    report = verify_resalt(
        source,
        scheme,
        destination,
        new_scheme,
        cutoff=cutoff,
        options=options,
        split_bytes=split_bytes,
        progress=progress,
    )
    if not report.ok:
        return MigrationReport("resalt (NOT verified)", copied, report.checksums)
    client, table = destination.open()
    try:
        stored = read_record(table)
        if stored is None:
            swap_record(table, None, new_record, family=family)
    finally:
        table.close()
        client.close()
    return MigrationReport("resalt", copied, report.checksums, record=new_record)


class ReadSource(ReadSplitRows):
    """Every row a reader of ``layout`` sees (the whole table)."""

    def __init__(self, target: BigtableTarget, layout: Layout, split_bytes: int) -> None:
        plan = plan_reads(ReadRowsQuery(), layout)
        super().__init__(
            target,
            layout,
            plan.subqueries,
            split_bytes=split_bytes,
            rows_per_request=DEFAULT_ROWS_PER_REQUEST,
        )


def verify_resalt(
    source: BigtableTarget,
    scheme: SaltScheme,
    destination: BigtableTarget,
    new_scheme: SaltScheme,
    *,
    cutoff: CutoffPolicy | None = None,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Compare a table and its resalted copy per destination bucket (rows and checksum)."""
    src = ReadSource(source, Layout(scheme, cutoff), split_bytes)
    dst = ReadSource(destination, Layout(new_scheme), split_bytes)

    def build(p: beam.Pipeline) -> None:
        _ = p | "Source" >> src | "Sum source" >> beam.ParDo(_Checksum("source", new_scheme))
        _ = (
            p
            | "Destination" >> dst
            | "Sum destination" >> beam.ParDo(_Checksum("destination", new_scheme))
        )

    result = run_pipeline(build, options, progress=progress)
    sums = Checksums.from_counters(("source", "destination"), counters(result, _VERIFY_NAMESPACE))
    return MigrationReport("verify resalt", counters(result), sums)


def progress_stream(force: bool) -> IO[str] | None:
    """stderr when it is a terminal (or ``force``), else None."""
    return sys.stderr if force or sys.stderr.isatty() else None
