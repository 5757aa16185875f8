"""``saltedtable read``, ``lookup`` and ``count``: a salted table read by logical key.

Each opens the table with the layout its record describes
(:func:`recorded_table`: the scheme, and the cutoff of a forward-only
migration) and reads through the table's own read path, so the keys given and
shown are logical, a cutoff table's legacy rows are read where they are, and
the record row is never shown or counted. ``saltedtable key --table`` takes
its layout the same way. Output: :mod:`.row_output`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._exceptions import DataError, LayoutError, SaltSchemeError, UsageError
from .._scheme.salt import format_key, prefix_end
from .admin import add_table_command, located
from .args import int_at_least
from .row_output import row_json, row_text

if TYPE_CHECKING:
    from google.cloud.bigtable.data import ReadRowsQuery, RowRange
    from google.cloud.bigtable.data.row import Row

    from .._sync_autogen.table import SaltedTable

__all__ = ["add_read_commands", "add_table_source", "parse_key", "recorded_table"]


def parse_key(text: str, as_hex: bool, what: str = "key") -> bytes:
    """A key given on the command line: its UTF-8 bytes, or with ``as_hex`` the bytes of its hex.

    Raises:
        UsageError: ``as_hex`` and ``text`` is not hex.
    """
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not hex") from None


def add_table_source(parser: argparse.ArgumentParser) -> None:
    """``--app-profile``: the app profile of a command that reads a table's data."""
    parser.add_argument("--app-profile", metavar="ID", help="the app profile of the requests")


@contextlib.contextmanager
def recorded_table(args: argparse.Namespace) -> Iterator[SaltedTable]:
    """The table ``args`` names, opened with the layout its record describes.

    The record is read, its layout rebuilt (:func:`~.._guard.from_record.layout_of_record`)
    and the table opened as :meth:`SaltedTable.open` opens it: the guard reads
    the record again and refuses one that differs. Every request ends within
    ``args.timeout``.

    Raises:
        DataError: The table has no layout record.
        LayoutError: The record names a layout only Python code can rebuild
            (or one this saltedtable does not know), or the table refuses it.
    """
    from .._admin import data_client
    from .._connection import data_timeouts
    from .._create import check_table_id
    from .._guard.from_record import layout_of_record
    from .._guard.record import record_of_row
    from .._scheme.salt import SCHEME_ROW_KEY
    from .._sync_autogen.table import SaltedTable

    args.project, args.instance = located(args)
    check_table_id(args.table)  # a usage error, before any request
    with data_client(args.project) as client:
        raw = client.get_table(
            args.instance,
            args.table,
            app_profile_id=args.app_profile,
            **data_timeouts(args.timeout),
        )
        try:
            record = record_of_row(raw.read_row(SCHEME_ROW_KEY))
            if record is None:
                raise DataError(
                    f"table {args.table!r} has no layout record, so its scheme is unknown: "
                    f"store one with `saltedtable guard {args.table} --add-family` and the "
                    "scheme options"
                )
            from .._guard.record import DEFAULT_RECORD_REFRESH

            try:
                layout = layout_of_record(record)
            except SaltSchemeError as exc:  # a hash a newer saltedtable knows, say
                raise LayoutError(f"the table's layout record cannot be read here: {exc}") from None
            # A table with epochs, or in a window, stores the lead its readers must re-read
            # the record within.
            from .._guard.window_state import window_of

            window = window_of(record)
            lead = None if layout.epochs is None else layout.epochs.min_lead
            if window is not None:
                lead = window.min_lead_s if lead is None else min(lead, window.min_lead_s)
            refresh = DEFAULT_RECORD_REFRESH if lead is None else min(lead, DEFAULT_RECORD_REFRESH)
            yield SaltedTable.open(
                raw, layout, sample_rows=0, require_record=True, record_refresh=refresh
            )
        finally:
            raw.close()  # type: ignore[no-untyped-call]


# -- read, lookup, count ---------------------------------------------------------------------------


def _ranges(args: argparse.Namespace) -> list[RowRange]:
    """The row ranges of ``--prefix`` or ``--start``/``--end`` (none: the whole table)."""
    from google.cloud.bigtable.data import RowRange

    if args.prefix is not None and (args.start is not None or args.end is not None):
        raise UsageError("give --prefix or --start/--end, not both")
    if args.prefix is not None:
        prefix = parse_key(args.prefix, args.hex, "--prefix")
        return [RowRange(prefix or None, prefix_end(prefix) or None)]
    start = None if args.start is None else parse_key(args.start, args.hex, "--start")
    end = None if args.end is None else parse_key(args.end, args.hex, "--end")
    if start is not None and end is not None and end and start >= end:
        raise UsageError(f"--end {args.end!r} is not after --start {args.start!r}")
    if not start and not end:
        return []
    return [RowRange(start or None, end or None)]


def _query(
    args: argparse.Namespace, *, limit: int | None, key_only: bool, window: bool = False
) -> ReadRowsQuery:
    from google.cloud.bigtable.data import ReadRowsQuery
    from google.cloud.bigtable.data.row_filters import (
        CellsColumnLimitFilter,
        CellsRowLimitFilter,
        RowFilterChain,
        StripValueTransformerFilter,
    )

    # A count needs the keys only: one cell per row, its value stripped. In a resalt
    # window a whole-row cell limit is refused: one cell per column instead.
    first = CellsColumnLimitFilter(1) if window else CellsRowLimitFilter(1)
    only_keys = RowFilterChain([first, StripValueTransformerFilter(True)])
    return ReadRowsQuery(
        row_ranges=_ranges(args), limit=limit, row_filter=only_keys if key_only else None
    )


def _print_row(row: Row, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(row_json(row, hex=args.hex)))
    else:
        sys.stdout.write(row_text(row, hex=args.hex))


def _cmd_read(args: argparse.Namespace) -> int:
    query: Any = _query(args, limit=args.count, key_only=False)  # usage errors before any request
    if args.reverse:
        from .._read.query import reversed_request

        query = reversed_request(query)
    with recorded_table(args) as table, contextlib.closing(table.read_rows_stream(query)) as rows:
        for row in rows:
            _print_row(row, args)
    return 0


def _cmd_lookup(args: argparse.Namespace) -> int:
    key = parse_key(args.key, args.hex)
    if not key:
        raise UsageError("the key is empty")
    with recorded_table(args) as table:
        row = table.read_row(key)
    if row is None:
        shown = key.hex() if args.hex else format_key(key)
        raise DataError(f"no row {shown} in table {args.table!r}")
    _print_row(row, args)
    return 0


def _cmd_count(args: argparse.Namespace) -> int:
    query = _query(args, limit=None, key_only=True)
    with recorded_table(args) as table:
        if table.window() is not None:
            query = _query(args, limit=None, key_only=True, window=True)
        with contextlib.closing(table.read_rows_stream(query)) as rows:
            count = sum(1 for _ in rows)
    print(json.dumps({"count": count}) if args.json else count)
    return 0


# -- the parsers ---------------------------------------------------------------------------------


def _add_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", metavar="P", help="rows whose logical key starts with P")
    parser.add_argument("--start", metavar="S", help="rows from logical key S (inclusive)")
    parser.add_argument("--end", metavar="E", help="rows before logical key E (exclusive)")


def _add_output(parser: argparse.ArgumentParser, *, rows: bool) -> None:
    parser.add_argument("--hex", action="store_true", help="keys are given (and shown) as hex")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per row (bytes: one character per byte, ISO-8859-1)"
        if rows
        else 'print {"count": N}',
    )


def add_read_commands(sub: Any) -> None:
    """Add ``read``, ``lookup`` and ``count`` to the main parser's subcommands."""
    common = (
        "The table is read with the layout its record describes (scheme, marker and cutoff), "
        "through saltedtable's own read path; the record row is left out."
    )
    read = add_table_command(
        sub,
        "read",
        _cmd_read,
        help="read rows by logical key, printed as cbt prints them",
        description="Read rows of a salted table by logical key: all of them, a --prefix, "
        "or a --start/--end range, in logical key order, printed as `cbt read` prints "
        "them (or --json). " + common,
    )
    add_table_source(read)
    _add_range(read)
    read.add_argument("--count", type=int_at_least(1), metavar="N", help="read at most N rows")
    read.add_argument(
        "--reverse",
        action="store_true",
        help="in descending logical key order (--count N: the last N rows)",
    )
    _add_output(read, rows=True)

    lookup = add_table_command(
        sub,
        "lookup",
        _cmd_lookup,
        help="read one row by its logical key",
        description="Read the row of one logical key, printed as `cbt lookup` prints it "
        "(or --json); exit 1 when there is none. " + common,
    )
    lookup.add_argument("key", metavar="KEY", help="the logical row key")
    add_table_source(lookup)
    _add_output(lookup, rows=True)

    count = add_table_command(
        sub,
        "count",
        _cmd_count,
        help="count rows (logical keys), leaving out the layout record",
        description="Count the rows of a salted table, or of a --prefix or --start/--end "
        "range of logical keys; keys only are read (one cell per row, its value "
        "stripped). " + common,
    )
    add_table_source(count)
    _add_range(count)
    _add_output(count, rows=False)
