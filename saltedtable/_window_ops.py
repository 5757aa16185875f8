"""Running a dual-layout window on a live table: ``saltedtable window`` (I/O, sync).

A window moves a table without key times (entity keys) from N to M buckets
(docs/epochs-window.md). Its state lives in the layout record
(``_guard.window_state``), which every guarded table object follows; these
functions are the operator's steps, each record change a compare-and-swap of
the record (``record_swap_filter``), so two operators never both change it:

1. :func:`open_resalt_window` stores the window, starting at least its lead ahead.
2. :func:`backfill_resalt_window` copies the old rows into the new layout
   (after the start), through the table's ``backfill_window``.
3. :func:`verify_resalt_window` counts what is left; when nothing is, the
   record moves to ``backfilled``.
4. :func:`close_resalt_window` (``backfilled`` only, and verify again finds
   nothing) deletes the old rows and the tombstones and stores the new scheme
   alone; after the lead it drops the tombstones once more, in case a writer
   that had not read the close yet deleted a row meanwhile.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

from ._exceptions import LayoutError
from ._guard.decisions import RECORD_ONLY
from ._guard.from_record import layout_of_record
from ._guard.record import DEFAULT_RECORD_REFRESH, LayoutRecord, record_of_row
from ._guard.resalt import DEFAULT_MIN_LEAD
from ._guard.window_state import WindowState, advance_window, open_window, window_of
from ._scheme.salt import SCHEME_ROW_KEY
from ._scheme.window import BackfillProgress
from ._sync_autogen.table import SaltedTable
from ._sync_autogen.window_table import drop_tombstones, swap_record

__all__ = [
    "WindowStep",
    "backfill_resalt_window",
    "close_resalt_window",
    "open_resalt_window",
    "resalt_window_status",
    "verify_resalt_window",
]


@final
@dataclass(frozen=True, slots=True)
class WindowStep:
    """What one window operation did.

    Attributes:
        record: The layout record after the step (the one stored, or found).
        window: The window it holds (None: none, or it closed).
        changed: Whether the step swapped the record.
        progress: What the rows' step did (copied, left, retired ...), summed
            over its passes (None: it touched no row).
        tombstones: Rows whose tombstones :func:`close_resalt_window` dropped
            (before the close, and after it once the lead has passed).
    """

    record: LayoutRecord
    window: WindowState | None
    changed: bool
    progress: BackfillProgress | None = None
    tombstones: int = 0


def _raw(table: Any) -> Any:
    """The physical table of a :class:`SaltedTable`, or ``table`` itself."""
    return table.table if isinstance(table, SaltedTable) else table


def _stored(table: Any) -> LayoutRecord:
    record = record_of_row(table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY))
    if record is None:
        raise LayoutError(
            "the table has no layout record to hold a window: store one first "
            "(`saltedtable guard TABLE --add-family` with its scheme)"
        )
    return record


def _window(record: LayoutRecord) -> WindowState:
    state = window_of(record)
    if state is None:
        raise LayoutError(
            "the table's layout record holds no window: open one with "
            "`saltedtable window open TABLE -n M`"
        )
    return state


def _salted(raw: Any, record: LayoutRecord, state: WindowState) -> SaltedTable:
    """A guarded table object on the record's scheme: it follows the window as services do."""
    return SaltedTable(
        raw,
        layout_of_record(record),
        record_refresh=min(DEFAULT_RECORD_REFRESH, state.min_lead_s),
    )


def _sum(a: BackfillProgress, b: BackfillProgress) -> BackfillProgress:
    return BackfillProgress(
        b.cursor if b.cursor is not None else a.cursor,
        a.keys + b.keys,
        a.copied + b.copied,
        a.replans + b.replans,
        a.left + b.left,
        a.retired + b.retired,
        b.done,
    )


def open_resalt_window(
    table: Any,
    buckets: int,
    *,
    at: dt.datetime | None = None,
    min_lead: float | None = None,
    dry_run: bool = False,
    clock: Callable[[], dt.datetime] | None = None,
) -> WindowStep:
    """Store a window from the table's bucket count to ``buckets``, starting at ``at``.

    Until the start every table object keeps the old layout; from it, writes
    go to the new layout and reads combine both (docs/epochs-window.md).

    Args:
        table: A sync data-API ``Table`` (the physical table) or a
            :class:`~saltedtable.SaltedTable` (its table is used).
        buckets: The new bucket count M (a multiple of the old N keeps each
            new bucket's keys in one old bucket).
        at: When the window starts (an aware datetime; default: now plus the lead).
        min_lead: Seconds the start must lie after the store (default 120):
            longer than every table object's ``record_refresh``.
        dry_run: Decide, but store nothing.
        clock: The operator's clock (default ``datetime.now(UTC)``).

    Raises:
        LayoutError: No record; a cutoff, epochs, a migration or a window in it;
            the same bucket count; a start sooner than the lead (naming the
            earliest); or the record changed meanwhile (nothing written).
        ValueError: ``at`` without a UTC offset, or a lead that is not > 0.
    """
    lead = DEFAULT_MIN_LEAD if min_lead is None else min_lead
    if not lead > 0:
        raise ValueError(f"the window's lead must be seconds > 0, got {lead!r}")
    if at is not None and at.tzinfo is None:
        raise ValueError(f"give the window's start with a UTC offset, got {at.isoformat()}")
    now = clock if clock is not None else (lambda: dt.datetime.now(dt.UTC))

    def change(record: LayoutRecord) -> LayoutRecord:
        micros = int(now().timestamp() * 1_000_000)
        start = micros + round(lead * 1_000_000) if at is None else int(at.timestamp() * 1e6)
        return open_window(
            record, new_buckets=buckets, start_micros=start, now_micros=micros, min_lead_s=lead
        )

    raw = _raw(table)
    if dry_run:
        record = change(_stored(raw))
        return WindowStep(record, window_of(record), False)
    record = swap_record(raw, change)
    return WindowStep(record, window_of(record), True)


def resalt_window_status(table: Any) -> WindowStep:
    """The table's record and the window it holds (None: none); changes nothing."""
    record = _stored(_raw(table))
    return WindowStep(record, window_of(record), False)


def backfill_resalt_window(table: Any, *, limit: int | None = None) -> WindowStep:
    """Copy every old row into the new layout (after the window's start); resumable.

    Runs the table's ``backfill_window`` step after step (``limit`` old rows
    each) to the end. Running it again is safe: it copies only what is missing.

    Raises:
        LayoutError: No window, or it has not started yet (WindowError).
    """
    raw = _raw(table)
    record = _stored(raw)
    salted = _salted(raw, record, _window(record))
    done = BackfillProgress()
    step = salted.backfill_window(limit=limit)
    done = _sum(done, step)
    while not step.done:
        step = salted.backfill_window(after=step.cursor, limit=limit)
        done = _sum(done, step)
    return WindowStep(record, window_of(record), False, done)


def verify_resalt_window(table: Any) -> WindowStep:
    """Count the old rows the new layout does not fully show; with none, store ``backfilled``.

    Raises:
        LayoutError: No window, it has not started, or the record changed
            meanwhile.
    """
    raw = _raw(table)
    record = _stored(raw)
    state = _window(record)
    progress = _salted(raw, record, state).verify_window()
    if progress.left or state.state != "open":
        return WindowStep(record, state, False, progress)
    stored = swap_record(raw, functools.partial(advance_window, to="backfilled"))
    return WindowStep(stored, window_of(stored), True, progress)


def close_resalt_window(
    table: Any, *, wait: bool = True, sleep: Callable[[float], None] = time.sleep
) -> WindowStep:
    """Retire the old rows and the tombstones, and store the new scheme alone.

    Only from ``backfilled``, and only when a verify pass now finds nothing
    left. The order keeps every read right: the old rows go first (the new
    rows show all they hold), then the tombstones (which hide old cells
    only), then the record names the new bucket count. Table objects still in
    the window until they read the close may write tombstones with a delete:
    with ``wait``, the tombstones are dropped once more after the lead, by when
    every object has read the close.

    Raises:
        LayoutError: No window; its state is not ``backfilled`` (naming it);
            rows are left to copy (naming how many); or the record changed
            meanwhile. Nothing is deleted then.
    """
    raw = _raw(table)
    record = _stored(raw)
    state = _window(record)
    if state.state != "backfilled":
        raise LayoutError(
            f"the window is {state.state}, not backfilled: run `saltedtable window backfill` "
            "and then `saltedtable window verify` (which moves it to backfilled once nothing "
            "is left to copy); nothing was changed"
        )
    salted = _salted(raw, record, state)
    verified = salted.verify_window()
    if verified.left:
        raise LayoutError(
            f"{verified.left} old row(s) are not fully copied yet: run `saltedtable window "
            "backfill` again; nothing was changed"
        )
    retired = salted.retire_window()
    if retired.left:
        raise LayoutError(
            f"{retired.left} old row(s) gained cells to copy since the verify pass: run "
            "`saltedtable window backfill` again; the old rows already shown were deleted"
        )
    window = state.window(layout_of_record(record).scheme)
    dropped = salted.drop_window_tombstones()
    stored = swap_record(raw, functools.partial(advance_window, to="closed"))
    tombstones = dropped.retired
    if wait:
        sleep(state.min_lead_s)
        tombstones += drop_tombstones(raw, window).retired
    return WindowStep(stored, None, True, retired, tombstones)
