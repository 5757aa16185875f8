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
   cutoff readers (which read the legacy rows). Writes to keys before the
   cutoff stay paused while every service is redeployed without the cutoff.
4. :func:`delete_legacy`, once no service runs with the cutoff, moves the
   record to ``deleting`` (cutoff readers are refused from then on; the
   copies are the rows), deletes every legacy row (:class:`DeleteLegacy`)
   and writes the fully salted record.

:func:`resalt` copies a table from one scheme to another into a new table,
verifies it the same way and writes the new record there, once.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final, TypeVar, final

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.runners.runner import PipelineResult
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, Table
from google.cloud.bigtable.data.mutations import DeleteAllFromRow
from google.cloud.bigtable.data.row import Row

from .._engine.budget import ReadBudget
from .._exceptions import LayoutError, RowKeyError, SchemeMismatchError
from .._guard.decisions import KEYS_ONLY
from .._guard.migration import migration_record, migration_state
from .._guard.record import (
    BACKFILL,
    CUTOVER,
    DEFAULT_LEGACY_GRACE,
    DELETING,
    LayoutRecord,
    MigrationState,
    describe_layout,
    open_differences,
)
from .._guard.window_state import window_of
from .._read.plan import SubQuery, plan_reads
from .._read.split import DEFAULT_SPLIT_BYTES, Split
from .._scheme.cutoff import CutoffPolicy
from .._scheme.hot import HotLayout
from .._scheme.layout import Layout, relabel
from .._scheme.salt import SaltScheme
from ._io import (
    METRICS_NAMESPACE,
    PROGRESS,
    BigtableTarget,
    FailedWrite,
    PageSizer,
    PlannedSplits,
    ReadSaltedRows,
    ReadSplitRows,
    SplitScan,
    TableDoFn,
    WriteSaltedRows,
    accepts_legacy_target,
    copy_entry,
    read_keys,
    read_split_pages,
    row_digest,
    scan_pages,
)
from ._record_steps import StoredRecord, read_record, swap_record

__all__ = [
    "BackfillLegacy",
    "Checksums",
    "DeleteLegacy",
    "MigrationReport",
    "PruneOrphanCopies",
    "backfill",
    "counters",
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
#: What a transform over a cutoff table puts out.
_Out = TypeVar("_Out")


# -- running -------------------------------------------------------------------


def run_pipeline(
    build: Callable[[beam.Pipeline], Any],
    options: PipelineOptions | None = None,
    *,
    progress: IO[str] | None = None,
    phase: str = "",
) -> PipelineResult:
    """Build a pipeline with ``build`` and run it to the end.

    Without ``--runner`` in ``options`` it runs locally on Beam's portable
    in-process runner (``--direct_num_workers`` and ``--direct_running_mode``
    apply); with one (e.g. ``DataflowRunner``), on that runner.

    Args:
        build: Called with the new pipeline to add its transforms.
        options: Beam pipeline options (None: none, a local run).
        progress: Where to show what this process's workers did, redrawn on
            one line (None: nowhere).
        phase: What the run does, shown first on the progress line (``copy``,
            ``verify``, ...).

    Returns:
        The finished run (its metrics hold the counters, see :func:`counters`).
    """
    options = PipelineOptions([]) if options is None else options
    if options.view_as(StandardOptions).runner is None:
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    else:
        pipeline = beam.Pipeline(options=options)
    build(pipeline)
    PROGRESS.reset(phase)
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
    """The counters of a finished run in ``namespace``, by name.

    Args:
        result: What :func:`run_pipeline` (or ``Pipeline.run``) returned.
        namespace: The metrics namespace (saltedtable's own by default).

    Returns:
        Committed values where the runner has them, else attempted ones.
    """
    out: dict[str, int] = {}
    for metric in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
        value = metric.committed if metric.committed is not None else metric.attempted
        name = metric.key.metric.name
        out[name] = out.get(name, 0) + int(value or 0)
    return out


# -- checksums -----------------------------------------------------------------


@final
class _Sums:
    """Per bucket of ``scheme``: rows and digest sums on one side, as Beam counters."""

    def __init__(self, side: str, scheme: SaltScheme) -> None:
        self.side = side
        self.scheme = scheme
        self._counters: dict[tuple[str, str], Any] = {}

    def _inc(self, bucket: str, what: str, value: int) -> None:
        counter = self._counters.get((bucket, what))
        if counter is None:
            name = f"{self.side}.{bucket}.{what}"
            counter = self._counters[bucket, what] = Metrics.counter(_VERIFY_NAMESPACE, name)
        counter.inc(value)

    def _bucket(self, key: bytes) -> str:
        try:
            return str(self.scheme.bucket_of(key))
        except RowKeyError:
            return "unsaltable"

    def add(self, row: Row, *, count: bool = True, digest: bool = True) -> None:
        """Count the row (``count``) and add its digest (``digest``) to its bucket."""
        bucket = self._bucket(row.row_key)
        if count:
            self._inc(bucket, "rows", 1)
        if digest:
            value = row_digest(row)
            for i in range(_CHUNKS):
                self._inc(bucket, f"sum{i}", (value >> (16 * i)) & 0xFFFF)


class _Checksum(beam.DoFn):
    """Counts rows and sums their digests per bucket of ``scheme``, as Beam counters."""

    def __init__(self, side: str, scheme: SaltScheme, *, digest: bool = True) -> None:
        super().__init__()
        self.sums = _Sums(side, scheme)
        self.digest = digest

    def process(self, row: Row) -> Iterator[None]:
        self.sums.add(row, digest=self.digest)
        return iter(())


@final
@dataclass(frozen=True, slots=True)
class Checksums:
    """Per bucket: rows and the sum of their digests (mod 2**64) on two sides."""

    sides: tuple[str, str]
    buckets: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)

    @classmethod
    def from_counters(cls, sides: tuple[str, str], values: dict[str, int]) -> Checksums:
        """Rebuild the sums from the verification counters of a run."""
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
    record: LayoutRecord | None = None
    notes: tuple[str, ...] = ()
    done: bool = True

    @property
    def ok(self) -> bool:
        """False when a verification found a difference or the step could not finish."""
        return self.done and (self.checksums is None or self.checksums.ok)

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


def _describe_state(record: LayoutRecord) -> str:
    window = window_of(record)
    if window is not None:
        return f"resalt window {window.old_buckets} -> {window.new_buckets} buckets, {window.state}"
    state = migration_state(record)
    if state is not None:
        at = None if record.cutoff is None else record.cutoff.at
        return f"{state} (cutoff {at})"
    return "cutoff" if record.cutoff is not None else "fully salted"


# -- plans -----------------------------------------------------------------------


def _legacy_subqueries(layout: Layout, keys_only: bool = False) -> tuple[SubQuery, ...]:
    if layout.cutoff is None:
        raise LayoutError("a migration moves the legacy side of a cutoff layout: give the cutoff")
    plan = plan_reads(ReadRowsQuery(), layout)
    subs = tuple(s for s in plan.subqueries if s.bucket is None)
    return tuple(dataclasses.replace(s, row_filter=KEYS_ONLY) for s in subs) if keys_only else subs


def _salted_subqueries(layout: Layout, keys_only: bool = False) -> tuple[SubQuery, ...]:
    plan = plan_reads(ReadRowsQuery(), layout)
    subs = tuple(s for s in plan.subqueries if s.bucket is not None)
    return tuple(dataclasses.replace(s, row_filter=KEYS_ONLY) for s in subs) if keys_only else subs


# -- the backfill --------------------------------------------------------------


class _OnCutoffTable(beam.PTransform[PBegin, _Out]):
    """A transform over a cutoff table: the constructor of the backfill and the sweeps.

    Checks ``split_bytes`` at once, so that a bad value fails before any
    record moves; the steps are built in ``expand``.
    """

    @accepts_legacy_target
    def __init__(
        self,
        target: BigtableTarget,
        scheme: SaltScheme,
        cutoff: CutoffPolicy,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        budget: ReadBudget | None = None,
    ) -> None:
        super().__init__()
        if split_bytes < 1:
            raise ValueError(f"split_bytes must be >= 1, got {split_bytes}")
        self.target = target
        self.layout = Layout(scheme, cutoff)
        self.split_bytes = split_bytes
        self.budget = ReadBudget() if budget is None else budget


class BackfillLegacy(_OnCutoffTable[PCollection[FailedWrite]]):
    """Copy every legacy row of a cutoff table to its salted key, cells and versions included.

    Reads the legacy (pre-cutoff) side as cutoff readers see it, and writes
    each row with :func:`~saltedtable.beam.copy_entry`: the salted row is
    cleared and rewritten in one atomic entry, so a re-run converges. Use
    :func:`backfill`, which also moves the layout record first; run alone,
    cutoff readers that have not seen the ``backfill`` record refuse the
    copies at open.

    Args:
        target: The table (and the app profile to send requests with).
        scheme: The table's salt scheme.
        cutoff: Its cutoff policy.
        split_bytes: About how much data one split reads.
        budget: What one read request may return (rows and bytes).

    The older ``(project, instance, table, scheme, cutoff, ..., app_profile_id=...)``
    still works and warns (deprecated).

    Returns:
        From ``expand``: the failed writes (empty unless ``on_failure="output"``).
    """

    def expand(self, pbegin: PBegin) -> PCollection[FailedWrite]:
        legacy = _legacy_subqueries(self.layout)
        scan = SplitScan(self.target, self.layout, legacy, self.split_bytes, check_layout=True)
        read = ReadSplitRows(scan, self.budget)
        write = WriteSaltedRows(
            self.target,
            self.layout.scheme,
            check_layout=False,  # the record names the cutoff layout until the cut-over
            counter_prefix="rows_copied",
        )
        out: PCollection[FailedWrite] = (
            pbegin
            | "Read legacy rows" >> read
            | "As copies" >> beam.Map(copy_entry)
            | "Write copies" >> write
        )
        return out


def _start_backfill(
    stored: StoredRecord | None, scheme: SaltScheme, cutoff: CutoffPolicy
) -> LayoutRecord:
    """The backfill record, after checking that ``stored`` allows a backfill to start or go on."""
    wanted = migration_record(scheme, cutoff, BACKFILL)
    if stored is None:
        return wanted
    cutoff_record = describe_layout(scheme, cutoff)
    state = migration_state(stored.record)
    if state in (CUTOVER, DELETING):
        raise LayoutError(
            f"this table is already past the backfill (the record is in the {state} state): "
            "fully salted writers own the copies now, so a backfill would overwrite their "
            "writes. Run delete-legacy to finish instead"
        )
    if open_differences(stored.record, cutoff_record):
        raise SchemeMismatchError(stored.record, cutoff_record)
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
            (deleted after an earlier run copied it). This reads the keys of
            every bucket.

    Raises:
        SchemeMismatchError: The stored record names another layout.
        LayoutError: The table is already cut over, or has no record and no
            ``family`` was given.
    """
    with target.opened() as table:
        stored = read_record(table)
        wanted = _start_backfill(stored, scheme, cutoff)
        if stored is None or migration_state(stored.record) != BACKFILL:
            swap_record(table, stored, wanted, family=family)
    transform = BackfillLegacy(target, scheme, cutoff, split_bytes=split_bytes)
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

    result = run_pipeline(build, options, progress=progress, phase="copy")
    return MigrationReport("backfill", counters(result), record=wanted)


class _KeySweep(_OnCutoffTable[PCollection[None]]):
    """Read the keys of one side of a cutoff table in planned splits, and act on each split.

    Takes the arguments of :class:`BackfillLegacy`; a subclass names the step,
    the sub-queries and the DoFn (:meth:`_sweep`).
    """

    def _sweep(self) -> tuple[str, tuple[SubQuery, ...], beam.DoFn]:
        raise NotImplementedError

    def expand(self, pbegin: PBegin) -> PCollection[None]:
        label, subs, sweeper = self._sweep()
        scan = SplitScan(self.target, self.layout, subs, self.split_bytes, check_layout=False)
        out: PCollection[None] = (
            pbegin | "Splits" >> PlannedSplits(scan) | label >> beam.ParDo(sweeper)
        )
        return out


class _PruneOrphans(TableDoFn):
    """Deletes the copies of a split whose legacy row is gone."""

    def __init__(self, target: BigtableTarget, layout: Layout, budget: ReadBudget) -> None:
        super().__init__(target)
        self.layout = layout
        self.sizer = PageSizer(budget)
        self.legacy = PageSizer(budget)  # the legacy rows' keys, read by key
        self._pruned = Metrics.counter(METRICS_NAMESPACE, "orphan_copies_deleted")

    def process(self, split: Split) -> Iterator[None]:
        table = self.bigtable()
        for page in read_split_pages(table, split.sub, self.layout, self.sizer, "copies"):
            if not page:
                continue
            keys = [row.row_key for row in page]
            present = {row.row_key for row in read_keys(table, keys, self.legacy, KEYS_ONLY)}
            doomed = [
                RowMutationEntry(self.layout.scheme.salt_key(key), [DeleteAllFromRow()])
                for key in keys
                if key not in present
            ]
            if doomed:
                table.bulk_mutate_rows(doomed)
                self._pruned.inc(len(doomed))
        PROGRESS.split_done()
        return iter(())


class PruneOrphanCopies(_KeySweep):
    """Delete the bucket copies of legacy rows that no longer exist.

    A legacy row deleted after a backfill copied it leaves its copy behind,
    which a fully salted reader would show. This reads the keys of every
    bucket. Takes the arguments of :class:`BackfillLegacy`.
    """

    def _sweep(self) -> tuple[str, tuple[SubQuery, ...], beam.DoFn]:
        subs = _salted_subqueries(self.layout, keys_only=True)
        return "Prune", subs, _PruneOrphans(self.target, self.layout, self.budget)


# -- verifying -------------------------------------------------------------------


class _CompareCopies(TableDoFn):
    """Sums each legacy row of a split and, read by its salted key, its copy."""

    def __init__(self, target: BigtableTarget, layout: Layout, budget: ReadBudget) -> None:
        super().__init__(target)
        self.layout = layout
        self.sizer = PageSizer(budget)
        self.copies_sizer = PageSizer(budget)
        self.legacy = _Sums("legacy", layout.scheme)
        self.copies = _Sums("copies", layout.scheme)

    def process(self, split: Split) -> Iterator[None]:
        table = self.bigtable()
        scheme = self.layout.scheme
        read = 0
        for page in read_split_pages(table, split.sub, self.layout, self.sizer):
            if not page:
                continue
            for row in page:
                self.legacy.add(row)
            keys = [scheme.salt_key(row.row_key) for row in page]
            for copy in read_keys(table, keys, self.copies_sizer):
                # Counted by the keys-only scan of the buckets, which also finds orphans.
                self.copies.add(relabel(copy, scheme.unsalt_key(copy.row_key)), count=False)
            read += len(page)
        PROGRESS.add("rows compared", read)
        PROGRESS.split_done()
        return iter(())


def verify_backfill(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Step 2: compare legacy rows with their copies, per bucket (counts and checksums).

    Each legacy row is read with its cells and its copy read by its salted
    key, for the checksums; the copies are counted by a keys-only scan of
    the buckets, so a copy whose legacy row is gone (an orphan) shows too.

    Args:
        target: The table.
        scheme: Its salt scheme.
        cutoff: Its cutoff policy.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.

    Returns:
        The report; ``report.ok`` is True when every bucket agrees.
    """
    layout = Layout(scheme, cutoff)
    budget = ReadBudget()
    legacy = PlannedSplits(
        SplitScan(target, layout, _legacy_subqueries(layout), split_bytes, check_layout=False)
    )
    copies = ReadSplitRows(
        SplitScan(
            target,
            layout,
            _salted_subqueries(layout, keys_only=True),
            split_bytes,
            check_layout=False,
        ),
        budget,
        rows="copies",
    )

    def build(p: beam.Pipeline) -> None:
        _ = (
            p
            | "Legacy splits" >> legacy
            | "Compare" >> beam.ParDo(_CompareCopies(target, layout, budget))
        )
        _ = (
            p
            | "Copies" >> copies
            | "Count copies" >> beam.ParDo(_Checksum("copies", scheme, digest=False))
        )

    result = run_pipeline(build, options, progress=progress, phase="verify")
    sums = Checksums.from_counters(("legacy", "copies"), counters(result, _VERIFY_NAMESPACE))
    notes: tuple[str, ...] = ()
    if not sums.ok:
        notes = (
            "run the backfill again (with --prune / prune_orphans=True if the copies "
            "outnumber the legacy rows); pause writes to keys before the cutoff first",
        )
    return MigrationReport("verify backfill", counters(result), sums, notes=notes)


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
    the backfill). Writes to keys before the cutoff must be paused before
    this step starts: one that lands after its verification read that key
    would make the two layouts differ.

    Args:
        target: The table.
        scheme: Its salt scheme.
        cutoff: Its cutoff policy.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.

    Raises:
        LayoutError: The record is not in the backfill state.
    """
    with target.opened() as table:
        stored = _expect_state(read_record(table), scheme, cutoff, (BACKFILL,), "cut over")
        report = verify_backfill(
            target, scheme, cutoff, options=options, split_bytes=split_bytes, progress=progress
        )
        if not report.ok:
            return MigrationReport(
                "cut-over refused",
                report.counters,
                report.checksums,
                notes=report.notes,
                done=False,
            )
        wanted = migration_record(scheme, cutoff, CUTOVER)
        swap_record(table, stored, wanted)
    return MigrationReport(
        "cut-over",
        report.counters,
        report.checksums,
        record=wanted,
        notes=(
            "fully salted readers and writers may open the table now; redeploy every "
            "service without the cutoff (writes to keys before the cutoff stay paused), "
            "then run delete-legacy",
        ),
    )


def _expect_state(
    stored: StoredRecord | None,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    states: tuple[MigrationState, ...],
    step: str,
) -> StoredRecord:
    for state in states:
        if stored is not None and not stored.record.differences(
            migration_record(scheme, cutoff, state)
        ):
            return stored
    found = "no layout record" if stored is None else _describe_state(stored.record)
    wanted = " or ".join(states)
    raise LayoutError(
        f"cannot {step}: the layout record must be in the {wanted} state of this layout, "
        f"found {found}"
    )


# -- deleting the legacy rows --------------------------------------------------


class _DeleteRows(TableDoFn):
    """Deletes every legacy row of a split (its keys read without values)."""

    def __init__(self, target: BigtableTarget, layout: Layout, budget: ReadBudget) -> None:
        super().__init__(target)
        self.layout = layout
        self.sizer = PageSizer(budget)
        self._deleted = Metrics.counter(METRICS_NAMESPACE, "legacy_rows_deleted")

    def process(self, split: Split) -> Iterator[None]:
        table = self.bigtable()
        for page in read_split_pages(table, split.sub, self.layout, self.sizer):
            if page:
                table.bulk_mutate_rows(
                    [RowMutationEntry(row.row_key, [DeleteAllFromRow()]) for row in page]
                )
                self._deleted.inc(len(page))
                PROGRESS.add("legacy rows deleted", len(page))
        PROGRESS.split_done()
        return iter(())


class DeleteLegacy(_KeySweep):
    """Delete every legacy row of a cutoff table (stray rows are left alone).

    No comparison: from the cut-over on, the verified copies are the rows
    (fully salted writers change them, not the legacy rows). Use
    :func:`delete_legacy`, which moves the layout record so that no cutoff
    reader opens any more before it runs this, and writes the fully salted
    record afterwards. Takes the arguments of :class:`BackfillLegacy`.
    """

    def _sweep(self) -> tuple[str, tuple[SubQuery, ...], beam.DoFn]:
        subs = _legacy_subqueries(self.layout, keys_only=True)
        return "Delete", subs, _DeleteRows(self.target, self.layout, self.budget)


def delete_legacy(
    target: BigtableTarget,
    scheme: SaltScheme,
    cutoff: CutoffPolicy,
    *,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
    notify: Callable[[str], None] | None = None,
    grace: float = DEFAULT_LEGACY_GRACE,
) -> MigrationReport:
    """Step 4: record -> ``deleting``, delete every legacy row, record -> fully salted.

    Run it only once every service opens the table without the cutoff: the
    record's move to ``deleting`` refuses cutoff readers that open from then
    on, but one already open would miss the deleted rows. From that move on,
    writes to keys before the cutoff may resume (fully salted writers put
    them in the copies). A re-run after a crash goes on from ``deleting``.

    Args:
        target: The table.
        scheme: Its salt scheme.
        cutoff: Its cutoff policy.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.
        notify: Called with a line for humans once the record is in the
            ``deleting`` state, before any row is deleted.
        grace: Seconds to wait after moving the record to ``deleting`` before
            deleting a row, so table objects still open with the cutoff read
            the record again (their ``record_refresh``, 30 s by default) and
            stop: keep it longer than their ``record_refresh``. The default
            (40 s) is the command line's ``--grace`` default.

    Raises:
        LayoutError: The record is neither in the cut-over nor in the deleting state.
    """
    layout = Layout(scheme, cutoff)
    with target.opened() as table:
        stored = _expect_state(
            read_record(table), scheme, cutoff, (CUTOVER, DELETING), "delete the legacy rows"
        )
        deleting = migration_record(scheme, cutoff, DELETING)
        if migration_state(stored.record) == CUTOVER:
            swap_record(table, stored, deleting)
            stored = _expect_state(read_record(table), scheme, cutoff, (DELETING,), "go on")
            if grace > 0:
                if notify is not None:
                    notify(
                        f"waiting {grace:g} s before deleting, so open cutoff readers read "
                        "the deleting record and stop"
                    )
                time.sleep(grace)
        if notify is not None:
            notify(
                "layout record: deleting: cutoff readers are refused from now on; writes "
                "to keys before the cutoff may resume"
            )
        transform = DeleteLegacy(target, scheme, cutoff, split_bytes=split_bytes)
        result = run_pipeline(
            lambda p: p | "Delete" >> transform, options, progress=progress, phase="delete"
        )
        found = counters(result)
        left, strays = _legacy_left(table, layout)
        if left:
            note = (
                f"{left:,} legacy row(s) were written while this step ran (a service still "
                "runs with the cutoff?): stop it, then run delete-legacy again"
            )
            return MigrationReport(
                "delete legacy (incomplete)", found, record=deleting, notes=(note,), done=False
            )
        if strays:
            note = (
                f"{strays:,} stray row(s) outside the salt prefixes (unsalted keys from after "
                "the cutoff, hidden from every reader) block the final record; delete them by "
                "hand, then run delete-legacy again"
            )
            return MigrationReport(
                "delete legacy (strays left)", found, record=deleting, notes=(note,), done=False
            )
        wanted = describe_layout(scheme)
        swap_record(table, stored, wanted)
    return MigrationReport("delete legacy", found, record=wanted)


def _legacy_left(table: Table, layout: Layout) -> tuple[int, int]:
    """(legacy rows, stray rows) still outside the salt prefixes (a keys-only scan)."""
    left = strays = 0
    sizer = PageSizer(ReadBudget())
    for sub in _legacy_subqueries(layout, keys_only=True):
        for page in scan_pages(table, sub, sizer):
            for row in page:
                if layout.hidden_reason(None, row.row_key) is None:
                    left += 1
                else:
                    strays += 1
    return left, strays


# -- resalt --------------------------------------------------------------------


def _read_all(
    target: BigtableTarget,
    layout: Layout,
    split_bytes: int,
    hot: HotLayout | None = None,
    aggregates: Mapping[str, str] | None = None,
) -> ReadSaltedRows:
    """Every row a reader of ``layout`` (and ``hot``) sees: the whole table, split rows combined."""
    return ReadSaltedRows(
        target, layout, None, split_bytes=split_bytes, hot=hot, aggregates=aggregates
    )


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
    hot: HotLayout | None = None,
    aggregates: Mapping[str, str] | None = None,
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
        hot: The source's hot lists (see :class:`ReadSaltedRows`): a split
            row is copied as one row, combined from its sub-rows.
        aggregates: With ``hot``: the source's aggregate families.

    Raises:
        LayoutError: Source and destination are the same table, the layout
            would not change, or the destination's record names another layout.
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
    if not describe_layout(scheme, cutoff).differences(new_record):
        raise LayoutError(
            f"resalt to {new_scheme} changes nothing: give another bucket count, hash, key "
            "part, separator or marker (or a cutoff to finish)"
        )
    with destination.opened() as table:
        stored = read_record(table)
        if stored is not None and stored.record.differences(new_record):
            raise SchemeMismatchError(stored.record, new_record)
    read = _read_all(source, Layout(scheme, cutoff), split_bytes, hot, aggregates)
    write = WriteSaltedRows(
        destination,
        new_scheme,
        record_family=family,  # stored before the first copy, checked on every worker
        counter_prefix="rows_written",
    )

    def build(p: beam.Pipeline) -> None:
        rows = p | "Read source" >> read
        _ = rows | "As copies" >> beam.Map(copy_entry) | "Write" >> write

    copied = counters(run_pipeline(build, options, progress=progress, phase="copy"))
    report = verify_resalt(
        source,
        scheme,
        destination,
        new_scheme,
        cutoff=cutoff,
        options=options,
        split_bytes=split_bytes,
        progress=progress,
        hot=hot,
        aggregates=aggregates,
    )
    if not report.ok:
        return MigrationReport("resalt (NOT verified)", copied, report.checksums, done=False)
    with destination.opened() as table:
        stored = read_record(table)
        if stored is None:
            swap_record(table, None, new_record, family=family)
    return MigrationReport("resalt", copied, report.checksums, record=new_record)


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
    hot: HotLayout | None = None,
    aggregates: Mapping[str, str] | None = None,
) -> MigrationReport:
    """Compare a table and its resalted copy per destination bucket (rows and checksum).

    Args:
        source: The table that was copied.
        scheme: Its scheme.
        destination: The copy.
        new_scheme: The copy's scheme.
        cutoff: The source's cutoff policy, if it has one.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.
        hot: The source's hot lists: a split row counts once, combined, and a
            hot part's rows are read in their K buckets.
        aggregates: With ``hot``: the source's aggregate families.

    Returns:
        The report; ``report.ok`` is True when every bucket agrees.
    """
    src = _read_all(source, Layout(scheme, cutoff), split_bytes, hot, aggregates)
    dst = _read_all(destination, Layout(new_scheme), split_bytes)

    def build(p: beam.Pipeline) -> None:
        _ = p | "Source" >> src | "Sum source" >> beam.ParDo(_Checksum("source", new_scheme))
        _ = (
            p
            | "Destination" >> dst
            | "Sum destination" >> beam.ParDo(_Checksum("destination", new_scheme))
        )

    result = run_pipeline(build, options, progress=progress, phase="verify")
    sums = Checksums.from_counters(("source", "destination"), counters(result, _VERIFY_NAMESPACE))
    return MigrationReport("verify resalt", counters(result), sums)


def progress_stream(force: bool) -> IO[str] | None:
    """stderr when it is a terminal (or ``force``), else None."""
    return sys.stderr if force or sys.stderr.isatty() else None
