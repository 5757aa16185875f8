"""The layout record from the driver: read it, and move it from one state to the next.

Every change is a compare-and-swap on the record's stored bytes (one
``check_and_mutate_row``), so a step runs once even if two drivers race, and
a record that changed meanwhile is never overwritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, final

from google.cloud.bigtable.data import Table
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilterChain,
    ValueRegexFilter,
)

from .._exceptions import LayoutError
from .._record import SCHEME_QUALIFIER, decode_layout, encode_layout, newest_record_cell
from .._salt import SCHEME_ROW_KEY

__all__ = ["StoredRecord", "read_record", "swap_record"]


@final
@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The layout record as stored: parsed, raw, and the family it lives in."""

    record: dict[str, Any]
    value: bytes
    family: str


def read_record(table: Table) -> StoredRecord | None:
    """The table's current layout record, or None when it has none."""
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
    if cell is None:
        return None
    return StoredRecord(decode_layout(cell.value), cell.value, cell.family)


def _exactly(value: bytes) -> bytes:
    """An RE2 pattern matching exactly ``value`` (every byte escaped)."""
    return b"".join(b"\\x%02x" % b for b in value) if value else b"^$"


def swap_record(
    table: Table, expected: StoredRecord | None, new: dict[str, Any], *, family: str | None = None
) -> None:
    """Replace the record ``expected`` by ``new``; create it when ``expected`` is None.

    Raises:
        LayoutError: The record is no longer ``expected`` (another driver
            moved it), or there is no family to create it in.
    """
    encoded = encode_layout(new)
    if expected is None:
        if family is None:
            raise LayoutError(
                "the table has no layout record yet: give the column family to store it in "
                "(--family on the command line, family= in Python)"
            )
        existed = table.check_and_mutate_row(
            SCHEME_ROW_KEY, None, false_case_mutations=[SetCell(family, SCHEME_QUALIFIER, encoded)]
        )
        if existed:  # the row already held something: someone else created a record first
            raise LayoutError("another process created the layout record meanwhile")
        return
    predicate = RowFilterChain(
        [
            ColumnQualifierRegexFilter(re.escape(SCHEME_QUALIFIER)),
            CellsColumnLimitFilter(1),
            ValueRegexFilter(_exactly(expected.value)),
        ]
    )
    swapped = table.check_and_mutate_row(
        SCHEME_ROW_KEY,
        predicate,
        true_case_mutations=[
            DeleteAllFromRow(),
            SetCell(family or expected.family, SCHEME_QUALIFIER, encoded),
        ],
    )
    if not swapped:
        raise LayoutError(
            "the layout record changed while this step ran (another driver?); "
            "nothing was written: read it again and retry"
        )
