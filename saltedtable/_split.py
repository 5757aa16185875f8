"""``split_hot_key``: list a hot part or row in a table's layout record by compare-and-swap.

Reads the record, checks the change (:func:`~saltedtable._guard.hot_record.split_record`),
and writes the new record only if the stored one is still the one read (a
``check_and_mutate_row`` whose predicate is the old record's exact value). The
change starts in the future: table objects with the old lists adopt it at their
next read of the record, and until the start every writer keeps the old placement.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import DeleteAllFromFamily, DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    ColumnRangeFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from ._exceptions import LayoutError, SaltSchemeError
from ._guard.from_record import scheme_of_record
from ._guard.hot_record import hot_layout_of, split_record, with_hot
from ._guard.record import (
    SCHEME_QUALIFIER,
    WINDOW_CLOCK_MARGIN,
    decode_layout,
    encode_layout,
    newest_record_cell,
    record_swap_filter,
)
from ._scheme.epochs import instant_of
from ._scheme.flags import rebuild_key_part
from ._scheme.hot import HotLayout
from ._scheme.hot_move import (
    MOVE_FAMILY,
    finished,
    move_copies,
    move_place,
    move_retire,
    old_buckets,
    part_ranges,
)
from ._scheme.ranges import KeyRange
from ._scheme.salt import SCHEME_ROW_KEY, SaltScheme, format_key, prefix_end, to_key

__all__ = ["MoveProgress", "finish_hot_move", "split_hot_key"]

#: Keys only: one cell, no value (rows are found, not read).
_KEYS_ONLY: Final = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])


def _scheme(record: Any) -> SaltScheme:
    part = rebuild_key_part(record.key_part)
    if record.key_part is not None and part is None:
        raise LayoutError(
            f"the record names the custom key part {record.key_part!r}, which only its "
            "author's code can rebuild: change the record from that code"
        )
    return scheme_of_record(record, part)


def split_hot_key(
    table: Any,
    kind: Literal["part", "row"],
    value: bytes | str,
    k: int,
    *,
    at: dt.datetime | None = None,
    min_lead: float | None = None,
    now: dt.datetime | None = None,
) -> tuple[HotLayout, HotLayout]:
    """List a hot key part or row with fan-out ``k`` (or raise its K) in ``table``'s record.

    The change starts in the future (``at``, default now plus the lead):
    until then every writer places rows by the lists before it, and table
    objects that read the record meanwhile adopt it (see docs/hot-keys.md,
    "A split starts in the future").

    Args:
        table: The client's (sync) ``Table`` holding the salted rows and the record.
        kind: ``"part"`` (a key part's rows spread over K buckets) or ``"row"``
            (one row split into K sub-rows).
        value: The part value or the logical row key.
        k: The fan-out, ``2..N``; a listed key's K may only rise.
        at: When writers switch to the new lists (an aware datetime); at least
            the lead from now.
        min_lead: The minimum lead to store (seconds; default that of
            ``saltedtable resalt``, 120); a table whose hot lists store one keeps it.
        now: The clock to judge ``at`` by (default the machine's).

    Returns:
        The hot lists before and after (the latter with its start, lead and
        previous lists).

    A part whose rows exist already is recorded as **moving** (``HotLayout.moving``):
    readers consult its old and new placement until :func:`finish_hot_move` has
    moved the rows (docs/hot-keys.md, "Listing a part whose rows exist").

    Raises:
        LayoutError: No record, a record with a cutoff or epochs, an earlier
            split that has not started yet, rows of a part that the previous
            split changed still at their old place while the record no longer
            names it as moving, or a record that changed between the read and
            the write (run it again).
        SaltSchemeError: A K outside ``2..N``, a falling K, a change that would
            move a split row's home, a part still moving, a part under a key
            part other than ``fields``, a start sooner than now plus the lead
            (the message names the earliest), or a lead other than the stored one.
    """
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
    if cell is None:
        raise LayoutError(
            "the table has no layout record: store one first (saltedtable guard --add-family)"
        )
    record = decode_layout(cell.value)
    scheme = _scheme(record)
    clock = dt.datetime.now(dt.UTC) if now is None else now
    if at is not None and at.tzinfo is None:
        raise SaltSchemeError(f"give the split's start with a UTC offset, got {at.isoformat()}")
    before, after, new = split_record(
        record,
        scheme,
        kind,
        value,
        k,
        now_micros=_micros(clock),
        at_micros=None if at is None else _micros(at),
        min_lead=min_lead,
    )
    if before.previous is not None:
        _check_previous_moved(table, before)
    _swap(table, cell, new, "the split")
    return before, after


def _swap(table: Any, cell: Any, new: Any, what: str) -> None:
    taken = table.check_and_mutate_row(
        SCHEME_ROW_KEY,
        record_swap_filter(cell.family, cell.value),
        true_case_mutations=[
            DeleteAllFromRow(),
            SetCell(cell.family, SCHEME_QUALIFIER, encode_layout(new)),
        ],
    )
    if not taken:
        raise LayoutError(f"the layout record changed while {what} was written: run it again")


def _micros(when: dt.datetime) -> int:
    return int(when.timestamp() * 1_000_000)


def _check_previous_moved(table: Any, stored: HotLayout) -> None:
    """Refuse a change that would forget where the stored split's ``previous`` put rows.

    Rows of a part written before the stored split's start sit where the lists
    before it placed them, and readers find them through ``previous``; a new
    change replaces ``previous``, so no such row may be left.
    """
    previous = stored.previous
    assert previous is not None
    scheme = stored.scheme
    keys_only = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])
    for part, k in stored.parts.items():
        if previous.parts.get(part, 1) == k or part in stored.moving:
            continue  # (unchanged, or still moving: the new lists keep its move)
        for bucket in previous.part_buckets(part):
            start = scheme.prefix(bucket) + part
            query = ReadRowsQuery(
                row_ranges=RowRange(start, prefix_end(start)), row_filter=keys_only
            )
            for row in table.read_rows(query):
                key = row.row_key[len(scheme.prefix(bucket)) :]
                if scheme.hashed_part(key) != part or row.row_key in stored.physical_keys(key):
                    continue
                raise LayoutError(
                    f"row {format_key(key)!r} of part {format_key(part)!r} was written before "
                    "the last split's start, where the lists before it put it; a new change "
                    "would forget that place: move such rows first (the hot-key backfill)"
                )


@dataclass(slots=True)
class MoveProgress:
    """What :func:`finish_hot_move` did.

    Attributes:
        keys: Old rows visited.
        copied: Cells copied to their new place.
        replans: Copies refused by their predicate (a racing write or delete),
            then read and planned again.
        retired: Old rows deleted.
        tombstones: New rows whose move tombstones were dropped.
        finished: The record no longer names the part as moving.
    """

    keys: int = 0
    copied: int = 0
    replans: int = 0
    retired: int = 0
    tombstones: int = 0
    finished: bool = False


def _old_rows(table: Any, layout: HotLayout, part: bytes) -> Iterator[bytes]:
    """The physical keys of the part's rows still at their old place."""
    scheme = layout.scheme
    for bucket in old_buckets(layout, part):
        prefix = scheme.prefix(bucket)
        for piece in part_ranges(layout, part):
            rng = KeyRange(
                prefix + piece.start, piece.start_closed, prefix + piece.end, piece.end_closed
            )
            query = ReadRowsQuery(row_ranges=rng.to_row_range(), row_filter=_KEYS_ONLY)
            for row in table.read_rows(query):
                placed = move_place(layout, row.row_key)
                if placed.key is not None and placed.old and not placed.new:
                    yield row.row_key


def _both(table: Any, layout: HotLayout, key: bytes) -> tuple[Any, Any]:
    new, old = layout.move_keys(key)
    assert old is not None
    found = {r.row_key: r for r in table.read_rows(ReadRowsQuery(row_keys=[old, new]))}
    return found.get(old), found.get(new)


def finish_hot_move(
    table: Any,
    part: bytes | str,
    *,
    max_cells: int = 100,
    max_replans: int = 20,
    clock_margin: float = WINDOW_CLOCK_MARGIN,
) -> MoveProgress:
    """Move a moving hot part's rows to their new place, then record that the move is done.

    For each row still at its old place: read its old and new rows (one
    request), copy the old cells the new row does not show with
    ``check_and_mutate_row`` (a racing write or delete makes the predicate
    match: read and plan again), then delete the old row. Then verify that
    no old row is left, drop the move's tombstones from the part's rows, and
    remove the part's ``moving`` entry from the record by compare-and-swap.

    Run it when no other backfill of the part is in flight (a copy planned
    before the tombstones are dropped and sent after could bring a deleted
    cell back). Writers keep writing throughout; it is resumable: run it again.

    It refuses before the latest split's start plus ``clock_margin``: a
    writer whose clock runs behind still places the part's rows at their old
    place until its own clock reaches the start, and a write routed just
    before the start may reach Bigtable a little later (a batcher flushes an
    entry it routed by the lists before a start at once, so that it is sent
    then); a row written at the old place after the finish would be hidden.

    Args:
        table: The client's (sync) ``Table``.
        part: The moving part.
        max_cells: The most cells one copy request carries.
        max_replans: How often one key is read and planned again.
        clock_margin: Seconds after the split's start before the move may be
            finished (default 60, the window's margin): a bound on how far
            behind a writer's clock runs, plus how long a write routed
            before the start takes to reach Bigtable.

    Raises:
        ValueError: ``clock_margin`` is negative or not finite.
        LayoutError: No record; the part is not moving; the split's start
            plus ``clock_margin`` has not passed; rows are left at the
            old place (named; run it again); or the record changed meanwhile.
    """
    if not math.isfinite(clock_margin) or clock_margin < 0:
        raise ValueError(f"clock_margin must be a finite number >= 0 seconds, not {clock_margin!r}")
    part = to_key(part)
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
    if cell is None:
        raise LayoutError("the table has no layout record")
    record = decode_layout(cell.value)
    scheme = _scheme(record)
    layout = hot_layout_of(record, scheme)
    if layout is None or part not in layout.moving:
        raise LayoutError(f"hot part {format_key(part)!r} is not moving: nothing to finish")
    now = _micros(dt.datetime.now(dt.UTC))
    if layout.start_micros is not None and now < layout.start_micros + round(clock_margin * 1e6):
        raise LayoutError(
            f"the split of hot part {format_key(part)!r} starts at "
            f"{instant_of(layout.start_micros).isoformat()}: until then writers place its "
            "rows at their old place, and writers whose clocks run behind do so for a "
            f"while longer, so the move can be finished only {clock_margin:g} s after the "
            "start (clock_margin)"
        )
    progress = MoveProgress()
    for physical in list(_old_rows(table, layout, part)):
        placed = move_place(layout, physical)
        assert placed.key is not None
        key = placed.key
        progress.keys += 1
        for _ in range(max_replans):
            old, new = _both(table, layout, key)
            copies = move_copies(layout, key, old, new, max_cells=max_cells)
            matched = False
            for copy in copies:
                if table.check_and_mutate_row(
                    copy.row_key, copy.predicate, false_case_mutations=list(copy.mutations)
                ):
                    matched = True
                    progress.replans += 1
                    break
                progress.copied += len(copy.mutations)
            if not matched:
                break
        old, new = _both(table, layout, key)
        retire = move_retire(layout, key, old, new)
        if retire is not None:
            table.mutate_row(retire[0], list(retire[1]))
            progress.retired += 1
    left = list(_old_rows(table, layout, part))
    if left:
        shown = ", ".join(repr(format_key(k)) for k in left[:5])
        raise LayoutError(
            f"{len(left)} row(s) of hot part {format_key(part)!r} are still at their old "
            f"place ({shown}{', ...' if len(left) > 5 else ''}): the move is not finished; "
            "run it again"
        )
    for bucket in layout.part_buckets(part):
        prefix = scheme.prefix(bucket)
        for piece in part_ranges(layout, part):
            rng = KeyRange(
                prefix + piece.start, piece.start_closed, prefix + piece.end, piece.end_closed
            )
            query = ReadRowsQuery(
                row_ranges=rng.to_row_range(),
                row_filter=RowFilterChain([ColumnRangeFilter(MOVE_FAMILY), _KEYS_ONLY]),
            )
            for row in table.read_rows(query):
                table.mutate_row(row.row_key, [DeleteAllFromFamily(MOVE_FAMILY)])
                progress.tombstones += 1
    _swap(table, cell, with_hot(record, finished(layout, part)), "the move's end")
    progress.finished = True
    return progress
