"""``split_hot_key``: list a hot part or row in a table's layout record by compare-and-swap.

Reads the record, checks the change (:func:`~saltedtable._guard.hot_record.split_record`),
and writes the new record only if the stored one is still the one read (a
``check_and_mutate_row`` whose predicate is the old record's exact value). Table
objects made with the old lists are refused by their guard at their next read of
the record; make them again with the new lists (``hot=``).
"""

from __future__ import annotations

from typing import Any, Literal

from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_rows_query import RowRange

from ._exceptions import LayoutError
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
    table: Any, kind: Literal["part", "row"], value: bytes | str, k: int
) -> tuple[HotLayout, HotLayout]:
    """List a hot key part or row with fan-out ``k`` (or raise its K) in ``table``'s record.

    Args:
        table: The client's (sync) ``Table`` holding the salted rows and the record.
        kind: ``"part"`` (a key part's rows spread over K buckets) or ``"row"``
            (one row split into K sub-rows).
        value: The part value or the logical row key.
        k: The fan-out, ``2..N``; a listed key's K may only rise.

    Returns:
        The hot lists before and after.

    Raises:
        LayoutError: No record, a record with a cutoff or epochs, a part whose
            rows exist already (listing it, or raising its K, moves them, and
            this release does not read their old place), or a record that
            changed between the read and the write (run it again).
        SaltSchemeError: A K outside ``2..N``, a falling K, or a change that
            would move a split row's home.
    """
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
    if cell is None:
        raise LayoutError(
            "the table has no layout record: store one first (saltedtable guard --add-family)"
        )
    record = decode_layout(cell.value)
    scheme = _scheme(record)
    before, after, new = split_record(record, scheme, kind, value, k)
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
