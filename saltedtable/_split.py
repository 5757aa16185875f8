"""``split_hot_key``: list a hot part or row in a table's layout record by compare-and-swap.

Reads the record, checks the change (:func:`~saltedtable._guard.hot_record.split_record`),
and writes the new record only if the stored one is still the one read (a
``check_and_mutate_row`` whose predicate is the old record's exact value). The
change starts in the future: table objects with the old lists adopt it at their
next read of the record, and until the start every writer keeps the old placement.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from ._exceptions import LayoutError, SaltSchemeError
from ._guard.from_record import scheme_of_record
from ._guard.hot_record import hot_layout_of, split_record
from ._guard.record import (
    SCHEME_QUALIFIER,
    decode_layout,
    encode_layout,
    newest_record_cell,
    record_swap_filter,
)
from ._scheme.flags import rebuild_key_part
from ._scheme.hot import HotLayout
from ._scheme.salt import SCHEME_ROW_KEY, SaltScheme, format_key, prefix_end, to_key

__all__ = ["split_hot_key"]


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

    Raises:
        LayoutError: No record, a record with a cutoff or epochs, an earlier
            split that has not started yet, a part whose rows exist already
            (listing it, or raising its K, moves them), rows of a part that the
            previous split moved still at their old place, or a record that
            changed between the read and the write (run it again).
        SaltSchemeError: A K outside ``2..N``, a falling K, a change that would
            move a split row's home, a start sooner than now plus the lead (the
            message names the earliest), or a lead other than the stored one.
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
    if kind == "part":
        part = to_key(value)
        current = hot_layout_of(record, scheme) or HotLayout(scheme)
        for bucket in current.part_buckets(part):
            start = scheme.prefix(bucket) + part
            query = ReadRowsQuery(row_ranges=RowRange(start, prefix_end(start)), limit=50)
            for row in table.read_rows(query):
                if scheme.hashed_part(row.row_key[len(scheme.prefix(bucket)) :]) == part:
                    raise LayoutError(
                        f"rows of part {format_key(part)!r} exist already: listing it (or "
                        "raising its K) moves them to other buckets, and this release does "
                        "not read their old place; list a part before its rows are written"
                    )
    taken = table.check_and_mutate_row(
        SCHEME_ROW_KEY,
        record_swap_filter(cell.family, cell.value),
        true_case_mutations=[
            DeleteAllFromRow(),
            SetCell(cell.family, SCHEME_QUALIFIER, encode_layout(new)),
        ],
    )
    if not taken:
        raise LayoutError("the layout record changed while the split was written: run it again")
    return before, after


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
        if previous.parts.get(part, 1) == k:
            continue
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
