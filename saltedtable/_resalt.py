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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, final

from ._exceptions import LayoutError
from ._guard.decisions import KEYS_ONLY, RECORD_ONLY
from ._guard.record import (
    SCHEME_QUALIFIER,
    LayoutRecord,
    decode_layout,
    newest_record_cell,
    record_swap_filter,
)
from ._guard.resalt import Appending, late_range, orphaned, plan_append
from ._scheme.epochs import Unreadable
from ._scheme.layout import Layout
from ._scheme.salt import SCHEME_ROW_KEY, SaltScheme, format_key, prefix_end

__all__ = ["AppendResult", "append_epoch"]

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
