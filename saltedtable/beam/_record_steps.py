"""The layout record from the driver: read it, and move it from one state to the next.

Every change is a compare-and-swap on the record's stored bytes (one
``check_and_mutate_row``), so a step runs once even if two drivers race, and
a record that changed meanwhile is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import Table
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

from .._admin import schema_reader_for
from .._exceptions import LayoutError
from .._facade import use_client_internals
from .._guard.families import RECORD_FAMILY, place_record, record_family_problem
from .._guard.record import (
    SCHEME_QUALIFIER,
    LayoutRecord,
    decode_layout,
    encode_layout,
    newest_record_cell,
    record_swap_filter,
)
from .._scheme.salt import SCHEME_ROW_KEY

__all__ = ["StoredRecord", "read_record", "record_family", "swap_record"]


@final
@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The layout record as stored: parsed, raw, and the family it lives in."""

    record: LayoutRecord
    value: bytes
    family: str


def read_record(table: Table) -> StoredRecord | None:
    """The table's current layout record, or None when it has none."""
    cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
    if cell is None:
        return None
    return StoredRecord(decode_layout(cell.value), cell.value, cell.family)


def record_family(table: Table, family: str | None) -> str | None:
    """The family a migration's record goes into: checked where the schema can be read.

    The reserved family when the table has it (a record found elsewhere moves
    there with the swap); otherwise ``family``, refused when its GC rule could
    collect the record or it is an aggregate family. A caller that cannot
    read the schema gets ``family`` unchecked.

    Raises:
        LayoutError: ``family`` cannot hold the record (or the table lacks it).
    """
    reader = schema_reader_for(table, internals=use_client_internals(None))
    try:
        schema = None if reader is None else reader(None)
    except GoogleAPICallError:
        return family
    if schema is None:
        return family
    reserved = schema.get(RECORD_FAMILY)
    if reserved is not None and record_family_problem(reserved) is None:
        return RECORD_FAMILY
    if family is None:
        return None
    return place_record(schema, family=family, explicit=True).family


def swap_record(
    table: Table, expected: StoredRecord | None, new: LayoutRecord, *, family: str | None = None
) -> None:
    """Replace the record ``expected`` by ``new``; create it when ``expected`` is None.

    Raises:
        LayoutError: The record is no longer ``expected`` (another driver
            moved it), or there is no family to create it in.
    """
    encoded = encode_layout(new)
    family = record_family(table, family if expected is None else family or expected.family)
    if expected is None:
        if family is None:
            raise LayoutError(
                "the table has no layout record yet: give the column family to store it in "
                "(--family on the command line, family= in Python), or add the reserved "
                f"family {RECORD_FAMILY!r} (saltedtable guard TABLE --add-family)"
            )
        existed = table.check_and_mutate_row(
            SCHEME_ROW_KEY, None, false_case_mutations=[SetCell(family, SCHEME_QUALIFIER, encoded)]
        )
        if existed:  # the row already held something: someone else created a record first
            raise LayoutError("another process created the layout record meanwhile")
        return
    swapped = table.check_and_mutate_row(
        SCHEME_ROW_KEY,
        record_swap_filter(expected.family, expected.value),
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
