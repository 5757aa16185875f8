"""The dual-layout window's steps on Beam: backfill, verify, retire.

The window itself is read from the layout record
(:func:`saltedtable._guard.window_state.window_of`): its old and new bucket
counts, its start and its state. The rules are the pure ones of
:class:`saltedtable.Window` (docs/epochs-window.md), the same as the table's
own ``backfill_window``, ``verify_window`` and ``retire_window`` use; here
the old layout's buckets are cut at the table's sample points and spread
over workers.

1. :func:`backfill_window` copies each old row into its new row, one
   ``check_and_mutate_row`` per at most 100 cells whose predicate lets a racing
   write or delete win (the key is then read and planned again). Idempotent:
   run it again, whole or on some buckets, after a crash.
2. :func:`verify_window` counts, per old bucket, the old rows whose cells the
   new rows do not all show yet. When none is left anywhere, it moves the
   record's window from ``open`` to ``backfilled``.
3. :func:`retire_window` (only on a ``backfilled`` window) deletes every old
   row, then the tombstones, closes the window in the record (the record then
   names the new bucket count alone), waits for table objects to read that,
   and deletes the tombstones written meanwhile.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, Literal, final

import apache_beam as beam
from apache_beam.metrics.metric import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from google.cloud.bigtable.data import ReadRowsQuery, Table
from google.cloud.bigtable.data.mutations import DeleteAllFromFamily
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from .._engine.budget import ReadBudget
from .._exceptions import LayoutError, WindowError
from .._guard.decisions import KEYS_ONLY
from .._guard.record import WINDOW_CLOCK_MARGIN, LayoutRecord, describe_layout
from .._guard.window_state import WINDOW_KEY, WindowState, advance_window, window_of
from .._read.plan import SubQuery
from .._read.split import DEFAULT_SPLIT_BYTES, Split
from .._scheme.layout import Layout
from .._scheme.ranges import KeyRange
from .._scheme.salt import SaltScheme, prefix_end
from .._scheme.window import Window
from .._sync_autogen.window_table import MAX_REPLANS
from ._io import (
    METRICS_NAMESPACE,
    PROGRESS,
    BigtableTarget,
    PageSizer,
    PlannedSplits,
    SplitScan,
    TableDoFn,
    read_keys,
    scan_pages,
)
from ._migrate import MigrationReport, counters, run_pipeline
from ._record_steps import StoredRecord, read_record, swap_record

__all__ = ["WindowSteps", "backfill_window", "open_window_of", "retire_window", "verify_window"]

#: What a sweep of the old rows does with each key.
Action = Literal["backfill", "verify", "retire"]
#: The counters of the window steps (``<name>.bucket_<old bucket>`` where per bucket).
KEYS_VISITED: Final = "window_old_rows_visited"
CELLS_COPIED: Final = "window_cells_copied"
REPLANS: Final = "window_replans"
LEFT: Final = "window_rows_left"
RETIRED: Final = "window_old_rows_deleted"
TOMBSTONES: Final = "window_tombstone_rows_cleaned"


@final
@dataclass(frozen=True, slots=True)
class WindowSteps:
    """A table's window as its layout record holds it, checked against the caller's scheme.

    Attributes:
        stored: The record as read (for a compare-and-swap).
        state: The window stored in it.
        window: The :class:`Window` of the old and new layouts.
    """

    stored: StoredRecord
    state: WindowState
    window: Window


def open_window_of(table: Table, scheme: SaltScheme, step: str) -> WindowSteps:
    """The window stored in ``table``'s layout record, for ``step``.

    Args:
        table: The table.
        scheme: The table's salt scheme: its hash, key part, separator and
            marker (its bucket count may be the window's old or new one; the
            record decides which is which).
        step: What is about to run, for the errors.

    Raises:
        LayoutError: The table has no record, the record holds no window, or
            its scheme fields differ from ``scheme``'s.
    """
    stored = read_record(table)
    if stored is None:
        raise LayoutError(
            f"cannot {step}: the table has no layout record, so it holds no resalt window "
            "(open one with `saltedtable window open` first)"
        )
    state = window_of(stored.record)
    if state is None:
        raise LayoutError(
            f"cannot {step}: the layout record holds no resalt window (it names "
            f"{stored.record.buckets} bucket(s) alone; open a window first, or it was closed)"
        )
    if scheme.buckets not in (state.old_buckets, state.new_buckets):
        raise LayoutError(
            f"cannot {step}: the record's window moves rows from {state.old_buckets} to "
            f"{state.new_buckets} buckets, but the scheme given has {scheme.buckets}"
        )
    old = dataclasses.replace(scheme, buckets=state.old_buckets)
    plain = dataclasses.replace(
        stored.record, extra=tuple(kv for kv in stored.record.extra if kv[0] != WINDOW_KEY)
    )
    diffs = plain.differences(describe_layout(old))
    if diffs:
        raise LayoutError(
            f"cannot {step}: the layout record names another scheme than the one given: "
            + "; ".join(diffs)
        )
    return WindowSteps(stored, state, state.window(old))


#: Seconds after the window's start before a backfill or verify runs (by default).
CLOCK_MARGIN: Final = WINDOW_CLOCK_MARGIN


def _started(steps: WindowSteps, step: str, now_micros: int, clock_margin: float) -> None:
    """Refuse a step before the window starts (plus a margin for writers' clocks).

    Each writer moves to the window at the start by its own clock; one whose
    clock runs behind still writes, and deletes in, the old layout alone for a
    while, and a copy made before its delete would bring the row back.
    """
    if clock_margin < 0:
        raise ValueError(f"clock_margin must be >= 0 seconds, got {clock_margin!r}")
    ready = steps.state.start_micros + round(clock_margin * 1_000_000)
    if now_micros < ready:
        raise WindowError(
            f"cannot {step}: the {steps.window} starts at {steps.state.start_micros} µs since "
            f"the epoch; with a clock margin of {clock_margin:g} s it may run "
            f"{(ready - now_micros) / 1e6:.1f} s from now. Until then writers may still write "
            "(and delete in) the old layout alone, so a copy could bring a deleted row back"
        )


# -- the sweep over the old rows ---------------------------------------------------


def old_bucket_subqueries(window: Window, buckets: Sequence[int] | None) -> tuple[SubQuery, ...]:
    """A keys-only sub-query over each old bucket's whole prefix (``buckets``: those only).

    Raises:
        LayoutError: A bucket the old layout does not have.
    """
    wanted = list(window.old.bucket_ids) if buckets is None else list(buckets)
    unknown = sorted(set(wanted) - set(window.old.bucket_ids))
    if unknown:
        raise LayoutError(
            f"the old layout ({window.old.buckets} buckets) has no bucket {unknown[0]}"
        )
    out = []
    for bucket in sorted(set(wanted)):
        prefix = window.old.prefix(bucket)
        whole = KeyRange(prefix, True, prefix_end(prefix), False)
        out.append(SubQuery(bucket, prefix, (), (whole,), KEYS_ONLY))
    return tuple(out)


def old_rows(window: Window, page: Sequence[Row]) -> list[tuple[bytes, bytes]]:
    """``(old physical key, logical key)`` of the page's rows that are a key's old row.

    Shared rows (one row in both layouts), new rows that live under an old
    prefix and rows no layout writes there are left out, as the table's own
    backfill leaves them out.
    """
    out = []
    for row in page:
        placed = window.place(row.row_key)
        if placed.key is None or not placed.old or placed.shared:
            continue
        if window.physical_keys(placed.key)[1] != row.row_key:
            continue  # a new row of a key whose old row is elsewhere
        out.append((row.row_key, placed.key))
    return out


class _SweepOldRows(TableDoFn):
    """Visits every old row of a split: copies, counts or deletes it (``action``)."""

    def __init__(
        self,
        target: BigtableTarget,
        window: Window,
        action: Action,
        budget: ReadBudget,
        max_cells: int = 100,
    ) -> None:
        super().__init__(target)
        self.window = window
        self.action = action
        self.max_cells = max_cells
        self.sizer = PageSizer(budget)
        self.rows_sizer = PageSizer(budget)  # both rows of each key, read by key
        self._counters: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_counters"] = {}
        return state

    def _inc(self, name: str, value: int) -> None:
        if not value:
            return
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Metrics.counter(METRICS_NAMESPACE, name)
        counter.inc(value)

    def process(self, split: Split) -> Iterator[None]:
        table = self.bigtable()
        bucket = f"bucket_{split.sub.bucket}"
        visited = left = 0
        for page in scan_pages(table, split.sub, self.sizer):
            keys = old_rows(self.window, page)
            if not keys:
                continue
            both: list[bytes] = []
            for physical, key in keys:
                both += [physical, self.window.physical_keys(key)[0]]
            found = {row.row_key: row for row in read_keys(table, both, self.rows_sizer)}
            for physical, key in keys:
                new_key = self.window.physical_keys(key)[0]
                old, new = found.get(physical), found.get(new_key)
                left += self._handle(table, key, old, new)
            visited += len(keys)
            PROGRESS.add(f"old rows ({self.action})", len(keys))
        self._inc(f"{KEYS_VISITED}.{bucket}", visited)
        self._inc(f"{LEFT}.{bucket}", left)
        PROGRESS.split_done()
        return iter(())

    def _handle(self, table: Table, key: bytes, old: Row | None, new: Row | None) -> int:
        """Do the action on one key; 1 when its old row still has cells to copy."""
        if self.action == "verify":
            return 1 if self.window.to_copy(old, new) else 0
        if self.action == "retire":
            retire = self.window.retire_old(key, old, new)
            if retire is None:
                return 1 if old is not None else 0
            table.mutate_row(retire[0], list(retire[1]))
            self._inc(RETIRED, 1)
            return 0
        self._copy(table, key, old, new)
        return 0

    def _copy(self, table: Table, key: bytes, old: Row | None, new: Row | None) -> None:
        """The window's race-safe copy of one key (as the table's own backfill sends it)."""
        for _ in range(MAX_REPLANS):
            matched = False
            for copy in self.window.backfill(key, old, new, max_cells=self.max_cells):
                if table.check_and_mutate_row(
                    copy.row_key, copy.predicate, false_case_mutations=list(copy.mutations)
                ):
                    # A write or delete reached the new row after it was read:
                    # nothing was written; read both rows again and plan again.
                    matched = True
                    self._inc(REPLANS, 1)
                    break
                self._inc(CELLS_COPIED, len(copy.mutations))
            if not matched:
                return
            old, new = self._both(table, key)
        raise WindowError(
            f"the backfill of {key!r} was overtaken {MAX_REPLANS} times by writes to its new "
            "row; run the step again"
        )

    def _both(self, table: Table, key: bytes) -> tuple[Row | None, Row | None]:
        new_key, old_key = self.window.physical_keys(key)
        keys: list[str | bytes] = [new_key] if old_key is None else [new_key, old_key]
        found = {row.row_key: row for row in table.read_rows(ReadRowsQuery(row_keys=keys))}
        return (None if old_key is None else found.get(old_key)), found.get(new_key)


def _sweep(
    target: BigtableTarget,
    window: Window,
    action: Action,
    buckets: Sequence[int] | None,
    *,
    options: PipelineOptions | None,
    split_bytes: int,
    progress: IO[str] | None,
    max_cells: int = 100,
) -> dict[str, int]:
    """Run one sweep of the old rows; return its counters."""
    if split_bytes < 1:
        raise ValueError(f"split_bytes must be >= 1, got {split_bytes}")
    if max_cells < 1:
        raise ValueError(f"max_cells must be >= 1, got {max_cells}")
    subs = old_bucket_subqueries(window, buckets)
    scan = SplitScan(target, Layout(window.old), subs, split_bytes, check_layout=False)
    sweeper = _SweepOldRows(target, window, action, ReadBudget(), max_cells)

    def build(p: beam.Pipeline) -> None:
        _ = p | "Old rows" >> PlannedSplits(scan) | action.title() >> beam.ParDo(sweeper)

    return counters(run_pipeline(build, options, progress=progress, phase=action))


def _per_bucket(found: dict[str, int], name: str) -> dict[str, int]:
    prefix = f"{name}.bucket_"
    return {k[len(prefix) :]: v for k, v in found.items() if k.startswith(prefix) and v}


def _left_note(found: dict[str, int], what: str) -> str:
    left = _per_bucket(found, LEFT)
    where = ", ".join(
        f"bucket {b}: {n:,}" for b, n in sorted(left.items(), key=lambda kv: int(kv[0]))
    )
    return f"{sum(left.values()):,} old row(s) {what} ({where})"


# -- the steps --------------------------------------------------------------------


def backfill_window(
    target: BigtableTarget,
    scheme: SaltScheme,
    *,
    buckets: Sequence[int] | None = None,
    max_cells: int = 100,
    clock_margin: float = CLOCK_MARGIN,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Copy every old row of the table's resalt window into its new row, on Beam.

    Each key's old cells that the new row does not show yet are sent as
    ``check_and_mutate_row`` requests of at most ``max_cells`` cells, with the
    window's predicate: a write or delete that reached the new row after it was
    read wins (nothing is written; the key is read and planned again). Every
    state in between reads the same, so a crashed run is resumed by running
    the step again, whole or on the ``buckets`` it had not finished.

    Args:
        target: The table.
        scheme: Its salt scheme (hash, key part, separator, marker); the
            bucket counts come from the window in the layout record.
        buckets: Copy these old buckets only (None: all).
        max_cells: Cells one copy request writes at most.
        clock_margin: Seconds after the window's start before the step may
            run: writers whose clocks run behind by less keep to the window.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.

    Raises:
        LayoutError: No window in the record, or it names another scheme.
        WindowError: The window has not started yet.
    """
    with target.opened() as table:
        steps = open_window_of(table, scheme, "backfill the window")
    _started(steps, "backfill the window", time.time_ns() // 1000, clock_margin)
    found = _sweep(
        target,
        steps.window,
        "backfill",
        buckets,
        options=options,
        split_bytes=split_bytes,
        progress=progress,
        max_cells=max_cells,
    )
    notes = (f"{steps.window}: run verify-window next",)
    return MigrationReport("backfill window", found, record=steps.stored.record, notes=notes)


def verify_window(
    target: BigtableTarget,
    scheme: SaltScheme,
    *,
    buckets: Sequence[int] | None = None,
    clock_margin: float = CLOCK_MARGIN,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Count, per old bucket, the old rows whose cells their new rows do not all show yet.

    Writes no row. When every bucket was verified (``buckets`` None) and none
    is left, an ``open`` window moves to ``backfilled`` in the record (a
    compare-and-swap), which lets :func:`retire_window` run. Nothing written
    after the start can make an old cell needed again, so a clean verify stays
    clean. ``buckets`` and ``clock_margin`` as for :func:`backfill_window`.

    Returns:
        The report: ``report.ok`` is False while rows are left to copy (its
        counters ``window_rows_left.bucket_<n>`` say where).

    Raises:
        LayoutError: No window in the record, or it names another scheme.
        WindowError: The window has not started yet.
    """
    with target.opened() as table:
        steps = open_window_of(table, scheme, "verify the window")
        _started(steps, "verify the window", time.time_ns() // 1000, clock_margin)
        found = _sweep(
            target,
            steps.window,
            "verify",
            buckets,
            options=options,
            split_bytes=split_bytes,
            progress=progress,
        )
        left = sum(_per_bucket(found, LEFT).values())
        if left:
            note = _left_note(found, "left to copy") + ": run backfill-window again"
            return MigrationReport("verify window", found, notes=(note,), done=False)
        record: LayoutRecord = steps.stored.record
        notes = ["nothing left to copy"]
        if buckets is not None:
            notes.append("only some buckets were verified: the record is left as it is")
        elif steps.state.state == "open":
            record = advance_window(steps.stored.record, "backfilled")
            swap_record(table, steps.stored, record)
            notes.append("the window is backfilled: run retire-window to close it")
    return MigrationReport("verify window", found, record=record, notes=tuple(notes))


class _DropTombstones(TableDoFn):
    """Deletes the window family's cells from every row of a split."""

    def __init__(self, target: BigtableTarget, family: str, budget: ReadBudget) -> None:
        super().__init__(target)
        self.family = family
        self.sizer = PageSizer(budget)
        self._cleaned = Metrics.counter(METRICS_NAMESPACE, TOMBSTONES)

    def process(self, split: Split) -> Iterator[None]:
        table = self.bigtable()
        for page in scan_pages(table, split.sub, self.sizer):
            for row in page:
                table.mutate_row(row.row_key, [DeleteAllFromFamily(self.family)])
            self._cleaned.inc(len(page))
        PROGRESS.split_done()
        return iter(())


def _drop_tombstones(
    target: BigtableTarget,
    window: Window,
    *,
    options: PipelineOptions | None,
    split_bytes: int,
    progress: IO[str] | None,
) -> dict[str, int]:
    """Delete every tombstone: the rows of the new layout's prefixes holding the window family."""
    only_tombstones = RowFilterChain(
        [
            FamilyNameRegexFilter(re.escape(window.family)),
            CellsRowLimitFilter(1),
            StripValueTransformerFilter(True),
        ]
    )
    subs = []
    for bucket in window.new.bucket_ids:
        prefix = window.new.prefix(bucket)
        whole = KeyRange(prefix, True, prefix_end(prefix), False)
        subs.append(SubQuery(bucket, prefix, (), (whole,), only_tombstones))
    scan = SplitScan(target, Layout(window.new), tuple(subs), split_bytes, check_layout=False)
    dropper = _DropTombstones(target, window.family, ReadBudget())

    def build(p: beam.Pipeline) -> None:
        _ = p | "Rows with tombstones" >> PlannedSplits(scan) | "Drop" >> beam.ParDo(dropper)

    return counters(run_pipeline(build, options, progress=progress, phase="tombstones"))


def retire_window(
    target: BigtableTarget,
    scheme: SaltScheme,
    *,
    grace: float | None = None,
    notify: Callable[[str], None] | None = None,
    options: PipelineOptions | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: IO[str] | None = None,
) -> MigrationReport:
    """Close a verified window: delete the old rows, the tombstones, then the window.

    In order: every old row its new row shows is deleted (an old row with
    cells still to copy stops the step before the record changes); every
    tombstone is deleted; the record's window is closed (a compare-and-swap:
    the record then names the new bucket count alone); after ``grace``
    seconds, the tombstones written meanwhile by table objects that had not
    read the closed record yet are deleted too.

    Args:
        target: The table.
        scheme: Its salt scheme (hash, key part, separator, marker).
        grace: Seconds to wait between closing the window and the last sweep
            of tombstones (None: the window's stored lead, which is longer
            than every table object's record refresh).
        notify: Called with a line for humans before the wait.
        options: Beam pipeline options (None: run locally).
        split_bytes: About how much data one split reads.
        progress: Where to show progress of a local run.

    Raises:
        LayoutError: No window in the record, or it names another scheme.
        WindowError: The window is not ``backfilled`` (run verify-window first).
    """
    with target.opened() as table:
        steps = open_window_of(table, scheme, "retire the window")
        if steps.state.state != "backfilled":
            raise WindowError(
                f"cannot retire the {steps.window}: the record's window is "
                f"{steps.state.state}, not backfilled; run verify-window, which moves it to "
                "backfilled once no old row has cells left to copy"
            )
        common: dict[str, Any] = {
            "options": options,
            "split_bytes": split_bytes,
            "progress": progress,
        }
        found = _sweep(target, steps.window, "retire", None, **common)
        if _per_bucket(found, LEFT):
            note = (
                _left_note(found, "still have cells to copy")
                + ": the verify was not clean after all; run backfill-window and "
                "verify-window again"
            )
            return MigrationReport("retire window (refused)", found, notes=(note,), done=False)
        found = _merge(found, _drop_tombstones(target, steps.window, **common))
        closed = advance_window(steps.stored.record, "closed")
        swap_record(table, steps.stored, closed)
        wait = steps.state.min_lead_s if grace is None else grace
        if wait > 0:
            if notify is not None:
                notify(
                    f"the window is closed; waiting {wait:g} s for table objects to read the "
                    "record, then deleting the tombstones they wrote meanwhile"
                )
            time.sleep(wait)
        found = _merge(found, _drop_tombstones(target, steps.window, **common))
    return MigrationReport(
        "retire window",
        found,
        record=closed,
        notes=(f"closed: the table has {closed.buckets} buckets",),
    )


def _merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + value
    return out
