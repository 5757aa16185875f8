"""Appending a layout epoch to a live table: ``saltedtable resalt`` (I/O).

:func:`append_epoch` reads the layout record, decides the append with the pure
rules of ``_guard.resalt`` (the stored minimum lead, the epoch list's rules),
scans the keys of the rows the new epoch could orphan (keys only), and swaps
the record with a conditional mutation whose predicate is the exact record
it read: of two operators appending at once, one wins and the other is
refused with nothing written. A plain salted table (one scheme) or a cutoff
table becomes a table with epochs (a version 2 record) the same way.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, final

from ._exceptions import LayoutError
from ._guard.decisions import KEYS_ONLY, RECORD_ONLY
from ._guard.record import (
    SCHEME_QUALIFIER,
    LayoutRecord,
    decode_layout,
    exact_value_regex,
    newest_record_cell,
    record_swap_filter,
)
from ._guard.resalt import (
    Appending,
    Misplaced,
    current_epochs,
    late_range,
    misplaced,
    orphaned,
    plan_append,
)
from ._scheme.epochs import Epochs, Unreadable
from ._scheme.layout import Layout
from ._scheme.salt import SCHEME_ROW_KEY, SaltScheme, format_key, prefix_end

__all__ = ["AppendResult", "RepairResult", "append_epoch", "repair_epochs"]

#: Orphaned keys an append's refusal names.
EXAMPLES: Final = 5


@final
@dataclass(frozen=True, slots=True)
class AppendResult:
    """What :func:`append_epoch` did (or, with ``dry_run``, would do).

    Attributes:
        previous: The record found in the table.
        record: The record stored (or that would be stored).
        appending: The epoch lists before and after, and the lead.
        rows_checked: Keys scanned for rows the new epoch would orphan
            (None: the check was skipped).
        stored: Whether the record was swapped (False with ``dry_run``).
        family: The column family holding the record.
    """

    previous: LayoutRecord
    record: LayoutRecord
    appending: Appending
    rows_checked: int | None
    stored: bool
    family: str


def _orphans(table: Any, appending: Appending) -> tuple[int, list[bytes]]:
    """Keys scanned and the orphaned ones among them, over the current newest epoch's prefixes."""
    from google.cloud.bigtable.data import ReadRowsQuery, RowRange

    # The current newest epoch's buckets hold the rows a later start would take
    # away; the new epoch's own prefixes may hold unsalted (legacy) keys that
    # would be read as its rows.
    prefixes = sorted({*appending.current.newest.prefixes, *appending.appended.newest.prefixes})
    # (A prefix inside another's range is read by that range already.)
    outer = [p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)]
    ranges = [RowRange(*_scanned(p, appending)) for p in outer]
    query = ReadRowsQuery(row_ranges=ranges, row_filter=KEYS_ONLY)
    seen = 0
    found: list[bytes] = []
    batch: list[bytes] = []
    for row in table.read_rows_stream(query):
        batch.append(row.row_key)
        if len(batch) >= 1000:
            seen += len(batch)
            found += orphaned(appending.current, appending.appended, batch)
            batch = []
    seen += len(batch)
    found += orphaned(appending.current, appending.appended, batch)
    return seen, found


def _scanned(prefix: bytes, appending: Appending) -> tuple[bytes, bytes | None]:
    """The physical range of ``prefix`` the row check reads: narrowed by key time if proven.

    Under a prefix of the current newest epoch that holds no other prefix, a
    row whose key time lies before the new start keeps its epoch (the prefix
    reads the same before and after), so only the keys :func:`late_range`
    leaves can be orphaned. The new epoch's own prefixes are read whole: an
    unsalted key there changes meaning. So is every prefix when keys without a
    readable time move to the new epoch (``unreadable="last"``).
    """
    whole = (prefix, prefix_end(prefix) or None)
    current, appended = appending.current, appending.appended
    if appended.unreadable == "last" or prefix not in current.newest.prefixes:
        return whole
    if any(q != prefix and q.startswith(prefix) for q in appended.newest.prefixes):
        return whole
    narrowed = late_range(appended.timestamp, appending.start)
    if narrowed is None:
        return whole
    start, end = narrowed
    return prefix + start, (prefix + end) if end else whole[1]


def append_epoch(
    table: Any,
    scheme: SaltScheme,
    at: dt.datetime,
    *,
    timestamp: Callable[[bytes], int | dt.datetime] | None = None,
    unreadable: Unreadable | None = None,
    min_lead: float | None = None,
    current: Layout | None = None,
    check_rows: bool = True,
    dry_run: bool = False,
    clock: Callable[[], dt.datetime] | None = None,
) -> AppendResult:
    """Append an epoch to a live table: from ``at`` on, new keys are stored with ``scheme``.

    Forward only: rows already written stay where they are, reads see one
    table. The table's record must exist (``saltedtable create`` or
    ``guard`` store it); a plain salted or cutoff table becomes a table with
    epochs (a version 2 record storing the minimum lead).

    Args:
        table: A sync Bigtable data-API ``Table`` (the physical table), or a
            :class:`~saltedtable.SaltedTable` (its table and layout are used).
        scheme: The new epoch's scheme (its hash, separator and marker must
            match the other salted epochs', or its key space be disjoint).
        at: When the new epoch starts (an aware datetime of key time), at
            least the minimum lead after now.
        timestamp: The key-time reader, for a table that has none yet (one
            scheme); otherwise the stored one is used.
        unreadable: Where keys whose time cannot be read live, for a table
            without epochs yet (``"error"``, ``"first"`` or ``"last"``).
        min_lead: Seconds stored as the minimum lead with the table's first
            epoch record (default 120: twice the default record refresh
            plus 60 s for clocks that disagree).
        current: The table's layout as the caller holds it (needed when the
            record names a custom key part or time reader).
        check_rows: Scan the keys of the newest epoch's buckets for rows the
            new epoch would orphan (keys with a time at or after ``at`` written
            before the append); False skips it (you vouch there are none).
        dry_run: Decide and check, but store nothing.
        clock: The appender's clock (default: ``datetime.now(UTC)``).

    Raises:
        SaltSchemeError: ``at`` sooner than now plus the lead (naming the
            earliest start allowed), or an epoch list the rules refuse.
        LayoutError: No record; a migration in progress; rows the epoch would
            orphan (naming some); or the record changed while this ran
            (another operator appended first): nothing was written.
    """
    from google.api_core.exceptions import FailedPrecondition
    from google.cloud.bigtable.data.mutations import DeleteRangeFromColumn, SetCell

    now = clock if clock is not None else (lambda: dt.datetime.now(dt.UTC))
    physical = getattr(table, "table", None)
    if current is None and isinstance(getattr(table, "layout", None), Layout):
        current = table.layout
    if physical is not None and hasattr(table, "layout"):
        table = physical
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY))
    if cell is None:
        raise LayoutError(
            "the table has no layout record to append an epoch to: store one first "
            "(`saltedtable guard TABLE --add-family` with its scheme)"
        )
    previous, family = decode_layout(cell.value), cell.family

    def decide() -> Appending:
        return plan_append(
            previous,
            scheme,
            at,
            now(),
            timestamp=timestamp,
            unreadable=unreadable,
            min_lead=min_lead,
            current=current,
        )

    appending = decide()
    checked: int | None = None
    if check_rows:
        checked, found = _orphans(table, appending)
        if found:
            shown = ", ".join(format_key(k) for k in found[:EXAMPLES])
            raise LayoutError(
                f"{len(found)} row(s) already written would be hidden by the new epoch (a "
                f"key time at or after {at.astimezone(dt.UTC).isoformat()}, or an unsalted "
                f"key that starts with one of its prefixes), e.g. {shown}; nothing was "
                "changed. Start the epoch after their times, choose a bucket count whose "
                "prefixes they do not start with, or move those rows (read, delete, and "
                "write them again once the epoch is appended)"
            )
    if dry_run:
        return AppendResult(previous, appending.record, appending, checked, False, family)
    # Again just before the swap: the scan took time, and the lead counts from the swap.
    appending = decide()
    new = appending.record.encode()
    try:
        swapped = table.check_and_mutate_row(
            SCHEME_ROW_KEY,
            record_swap_filter(family, cell.value),
            true_case_mutations=[
                DeleteRangeFromColumn(family, SCHEME_QUALIFIER),
                SetCell(family, SCHEME_QUALIFIER, new),
            ],
        )
    except FailedPrecondition as exc:
        # No plain write instead: without the swap, two operators could both append.
        raise LayoutError(
            f"the app profile refuses single-row transactions ({exc.message}): an epoch is "
            "appended only with a compare-and-swap on the record; use an app profile that "
            "allows them. Nothing was written"
        ) from None
    if not swapped:
        raise LayoutError(
            "the layout record changed while this append ran (another operator appended an "
            "epoch, or the record was replaced): nothing was written; look at the record "
            "again (`saltedtable inspect TABLE`) and retry"
        )
    return AppendResult(previous, appending.record, appending, checked, True, family)


# -- repairing rows written where no epoch looks ------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class RepairResult:
    """What :func:`repair_epochs` found and did.

    Attributes:
        scanned: Keys read (every epoch's prefixes, and the unsalted key space
            when an epoch is unsalted).
        found: The hidden rows, each with where it belongs (or why it cannot move).
        moved: Source keys of the rows moved (empty with ``dry_run``).
        kept: ``(source key, why)`` of hidden rows left where they are: they
            cannot be moved, or a write raced the move (run the repair again).
    """

    scanned: int
    found: tuple[Misplaced, ...]
    moved: tuple[bytes, ...]
    kept: tuple[tuple[bytes, str], ...]


def _scan_ranges(epochs: Epochs) -> list[Any]:
    """Row ranges covering every epoch's prefixes (and the unsalted gaps with a legacy epoch)."""
    from google.cloud.bigtable.data import RowRange

    prefixes = sorted({p for s in epochs.schemes for p in s.prefixes})
    outer = [p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)]
    ranges = [RowRange(p, prefix_end(p) or None) for p in outer]
    if epochs.has_legacy:
        for gap in epochs.legacy_gaps():
            ranges.append(
                RowRange(
                    gap.start or None,
                    gap.end or None,
                    start_is_inclusive=gap.start_closed,
                    end_is_inclusive=gap.end_closed,
                )
            )
    return ranges


def _cell_filter(family: str, qualifier: bytes, start: int, end: int | None) -> Any:
    """Cells of one column with a timestamp in ``[start, end)`` (end None: unbounded)."""
    from google.cloud.bigtable.data.row_filters import (
        ColumnQualifierRegexFilter,
        FamilyNameRegexFilter,
        RowFilterChain,
        TimestampRangeFilter,
    )

    return RowFilterChain(
        [
            FamilyNameRegexFilter(re.escape(family)),
            ColumnQualifierRegexFilter(exact_value_regex(qualifier)),
            TimestampRangeFilter(start=_at(start), end=_at(end)),
        ]
    )


def _at(micros: int | None) -> dt.datetime | None:
    if micros is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def _union(filters: list[Any]) -> Any:
    from google.cloud.bigtable.data.row_filters import RowFilterUnion

    return filters[0] if len(filters) == 1 else RowFilterUnion(filters)


def _coordinates(cells: list[Any]) -> dict[tuple[str, bytes], list[int]]:
    columns: dict[tuple[str, bytes], list[int]] = {}
    for cell in cells:
        columns.setdefault((cell.family, cell.qualifier), []).append(cell.timestamp_micros)
    return columns


def _changed_since(cells: list[Any]) -> Any:
    """A predicate true when the row holds a cell other than ``cells``' coordinates.

    Every cell newer than the newest copied one, and in each copied column
    every timestamp the copy does not hold (cell timestamps have millisecond
    granularity). Not seen: a cell rewritten at a copied coordinate, or an
    older cell in a column the copy does not have.
    """
    newest = max(c.timestamp_micros for c in cells)
    filters = [_cell_filter_any(newest + 1000)]
    for (family, qualifier), stamps in _coordinates(cells).items():
        start = 0
        for ts in sorted(set(stamps)):
            if start < ts:
                filters.append(_cell_filter(family, qualifier, start, ts))
            start = ts + 1000
        filters.append(_cell_filter(family, qualifier, start, None))
    return _union(filters)


def _cell_filter_any(start: int) -> Any:
    from google.cloud.bigtable.data.row_filters import TimestampRangeFilter

    return TimestampRangeFilter(start=_at(start))


def _coordinate(cell: Any) -> tuple[str, bytes, int]:
    return cell.family, cell.qualifier, cell.timestamp_micros


def _copy_if_free(table: Any, destination: bytes, cells: list[Any]) -> bool:
    """Write ``cells`` to ``destination`` unless a cell is at any of their coordinates; copied?"""
    from google.cloud.bigtable.data.mutations import SetCell

    taken = table.check_and_mutate_row(
        destination,
        _union([_cell_filter(f, q, ts, ts + 1000) for f, q, ts in map(_coordinate, cells)]),
        true_case_mutations=None,
        false_case_mutations=[
            SetCell(c.family, c.qualifier, c.value, c.timestamp_micros) for c in cells
        ],
    )
    return not taken


def _copy(table: Any, destination: bytes, cells: list[Any]) -> str | None:
    """Copy ``cells`` to ``destination`` without overwriting a cell there; why not (None: done).

    Cells the destination already holds with the same value (a repair that
    stopped after copying) count as copied.
    """
    if _copy_if_free(table, destination, cells):
        return None
    there = table.read_row(destination)
    held = {_coordinate(c): c.value for c in (there.cells if there is not None else [])}
    if any(held.get(_coordinate(c), c.value) != c.value for c in cells):
        return (
            f"{format_key(destination)} already holds other cells at the same columns and "
            "timestamps (a write there wins): merge the two rows by hand"
        )
    rest = [c for c in cells if _coordinate(c) not in held]
    if rest and not _copy_if_free(table, destination, rest):
        return (
            f"{format_key(destination)} was written while the row was copied: run the repair again"
        )
    return None


def _move(table: Any, found: Misplaced) -> str | None:
    """Move one hidden row to its destination, race-safely; why it was kept (None: moved).

    1. Copy its cells, with their timestamps, to the destination in one
       ``CheckAndMutateRow`` whose predicate matches a cell already at any
       copied coordinate: then nothing is copied (a write there wins), unless
       those cells are this copy's own (a repair that stopped after copying).
    2. Delete the copied cells from the source (each coordinate, never the
       whole row) with a predicate that matches a cell written there since it
       was read: then nothing is deleted. A cell the predicate cannot see (an
       older one in a column the copy does not have) is not deleted either:
       the row stays hidden with it, and the next repair moves it.
    """
    from google.cloud.bigtable.data.mutations import DeleteRangeFromColumn

    assert found.destination is not None
    row = table.read_row(found.source)
    if row is None or not row.cells:
        return "deleted meanwhile"
    cells = list(row.cells)
    why = _copy(table, found.destination, cells)
    if why is not None:
        return why
    changed = table.check_and_mutate_row(
        found.source,
        _changed_since(cells),
        true_case_mutations=None,
        false_case_mutations=[
            DeleteRangeFromColumn(family, qualifier, ts, ts + 1000)
            for family, qualifier, ts in sorted(set(map(_coordinate, cells)))
        ],
    )
    if changed:
        return "written while it was moved (copied, not deleted): run the repair again"
    return None


def repair_epochs(
    table: Any, *, current: Layout | None = None, dry_run: bool = False
) -> RepairResult:
    """Find rows no epoch owns and move each to the physical key its epoch gives it.

    A table object that had not read an appended epoch (opened before the
    table's first lead was stored, or with ``record_refresh=None``, a refresh
    longer than the lead, or the guard off) can write a key dated at or after
    the new epoch's start with the old epoch's scheme: readers then never find
    it. Run this after the start plus the longest refresh in use (and after
    restarting objects that never re-read): it scans every epoch's prefixes
    (keys only), applies the append's row check to the stored layout, and
    moves each hidden row: its cells are copied with their timestamps unless the
    destination holds a cell at one of their columns and timestamps (a write there
    wins), then the source is deleted only if no cell was written there meanwhile
    (the row is reported; running the repair again finishes it). Rows that cannot
    be moved (a key no epoch can hold, or an ambiguous one) are reported, not touched.

    Args:
        table: A sync Bigtable data-API ``Table``, or a
            :class:`~saltedtable.SaltedTable` (its table and layout are used).
        current: The table's layout as the caller holds it (needed when the
            record names a custom key part or time reader).
        dry_run: Report the hidden rows, move nothing.

    Raises:
        LayoutError: No layout record, or one naming a key part or reader
            that cannot be rebuilt (give ``current``).
    """
    from google.cloud.bigtable.data import ReadRowsQuery

    physical = getattr(table, "table", None)
    if current is None and isinstance(getattr(table, "layout", None), Layout):
        current = table.layout
    if physical is not None and hasattr(table, "layout"):
        table = physical
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY))
    if cell is None:
        raise LayoutError("the table has no layout record: there is no epoch to repair against")
    epochs = current_epochs(decode_layout(cell.value), current)
    query = ReadRowsQuery(row_ranges=_scan_ranges(epochs), row_filter=KEYS_ONLY)
    scanned = 0
    found: list[Misplaced] = []
    for row in table.read_rows_stream(query):
        scanned += 1
        hit = misplaced(epochs, row.row_key)
        if hit is not None:
            found.append(hit)
    moved: list[bytes] = []
    kept: list[tuple[bytes, str]] = []
    for hit in found:
        if hit.destination is None:
            kept.append((hit.source, hit.why))
            continue
        if dry_run:
            continue
        why = _move(table, hit)
        if why is None:
            moved.append(hit.source)
        else:
            kept.append((hit.source, why))
    return RepairResult(scanned, tuple(found), tuple(moved), tuple(kept))
