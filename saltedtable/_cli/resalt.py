"""``saltedtable resalt``: append a layout epoch to a live table (change its bucket count).

Registered on the main parser by :func:`add_resalt_command`; the work is
:func:`saltedtable.append_epoch`.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from .._connection import data_timeouts
from .._exceptions import DataError, SaltSchemeError, UsageError
from .._scheme.salt import MAX_BUCKETS, SaltScheme, format_key
from .admin import add_table_command, located
from .args import add_hash_options, float_above, int_at_least

__all__ = ["add_resalt_command", "resalt_command"]


def resalt_command(table: str, buckets: int, *, instance: str = "", project: str = "") -> str:
    """The ``saltedtable resalt`` line that appends an epoch of ``buckets`` buckets.

    ``TIME`` is left for the operator: at least the table's minimum lead from now.
    """
    where = ""
    if instance:
        where += f" --instance {instance}"
    if project:
        where += f" --project {project}"
    return f"saltedtable resalt {table}{where} -n {buckets} --at TIME"


def _when(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--at {text!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise UsageError(f"--at {text!r} has no UTC offset (add +00:00)")
    return when


def _cmd_repair(args: argparse.Namespace) -> int:
    """``resalt TABLE --repair``: move rows written where no epoch looks (exit 1: some left)."""
    from .._admin import data_client
    from .._create import check_table_id
    from .._resalt import repair_epochs

    check_table_id(args.table)
    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            result = repair_epochs(table, dry_run=args.dry_run)
        finally:
            table.close()  # type: ignore[no-untyped-call]
    print(f"{args.table}: {result.scanned} key(s) scanned, {len(result.found)} hidden row(s)")
    for hit in result.found:
        where = "cannot move" if hit.destination is None else format_key(hit.destination)
        print(f"  {format_key(hit.source)} -> {where}: {hit.why}")
    if args.dry_run:
        return 1 if result.found else 0
    print(f"moved {len(result.moved)}, kept {len(result.kept)}")
    for source, why in result.kept:
        print(f"  kept {format_key(source)}: {why}")
    return 1 if result.kept else 0


def _cmd_resalt(args: argparse.Namespace) -> int:
    from .._admin import data_client
    from .._create import check_table_id
    from .._resalt import append_epoch
    from .._scheme.flags import time_reader_from_spec
    from .specs import key_part_from_spec

    args.project, args.instance = located(args)
    if args.repair:
        given = [
            option
            for option, value in (
                ("-n/--buckets", args.buckets),
                ("--at", args.at),
                ("--time", args.time),
                ("--unreadable", args.unreadable),
                ("--min-lead", args.min_lead),
                ("--skip-row-check", args.skip_row_check or None),
            )
            if value is not None
        ]
        if given:
            raise UsageError(
                f"--repair moves rows by the stored layout and appends nothing: drop "
                f"{', '.join(given)}"
            )
        return _cmd_repair(args)
    if args.buckets is None or args.at is None:
        raise UsageError("resalt needs -n/--buckets and --at (or --repair)")
    check_table_id(args.table)
    at = _when(args.at)
    scheme = SaltScheme(
        args.buckets,
        hash=args.hash,
        key_part=key_part_from_spec(args.key_part),
        separator=args.separator.encode(),
        marker=args.marker.encode(),
    )
    reader = None if args.time is None else time_reader_from_spec(args.time, args.time_sep.encode())
    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            result = append_epoch(
                table,
                scheme,
                at,
                timestamp=reader,
                unreadable=args.unreadable,
                min_lead=args.min_lead,
                check_rows=not args.skip_row_check,
                dry_run=args.dry_run,
            )
        except SaltSchemeError as exc:
            # The table's record refused it (its lead, its epochs' rules): not a usage error.
            raise DataError(f"{args.table}: {exc}; nothing was changed") from None
        finally:
            table.close()  # type: ignore[no-untyped-call]
    epochs = result.appending.appended
    checked = (
        "rows not checked (--skip-row-check)"
        if result.rows_checked is None
        else f"{result.rows_checked} key(s) of the newest epoch checked, none orphaned"
    )
    verb = "would store" if args.dry_run else "stored"
    lead = result.appending.min_lead
    print(f"{args.table}: {verb} {len(epochs)} epochs (minimum lead {lead:g} s; {checked}):")
    for i, epoch in enumerate(epochs):
        print(f"  epoch {i} {epoch}")
    if args.dry_run:
        print(f"record: {result.record}")
    return 0


def add_resalt_command(sub: Any) -> None:
    """Add ``resalt`` to the main parser's subcommands."""
    parser = add_table_command(
        sub,
        "resalt",
        _cmd_resalt,
        help="change a live table's bucket count from a future time (append a layout epoch)",
        description="Append a layout epoch: keys whose time is at or after --at are stored "
        "with the new scheme, older keys stay where they are, and reads see one table. "
        "Refused when --at is sooner than the table's minimum lead from now, when rows "
        "already written would be hidden by the new epoch, or when another operator "
        "changed the record meanwhile (nothing is written then). See docs/resalt.md.",
    )
    parser.add_argument(
        "-n",
        "--buckets",
        type=int_at_least(1, MAX_BUCKETS),
        help="the new epoch's number of salt buckets N (required unless --repair)",
    )
    add_hash_options(parser)
    parser.add_argument("--marker", default="", help="bytes written before every prefix (text)")
    parser.add_argument(
        "--at",
        metavar="ISO",
        help="when the new epoch starts, as a key time (e.g. 2026-12-01T00:00:00+00:00; "
        "required unless --repair)",
    )
    parser.add_argument(
        "--time",
        metavar="READER",
        help="where a key's time is, for a table without epochs yet: epoch:UNIT[:INDEX"
        "[:DIGITS]], reversed:UNIT[:INDEX[:DIGITS]], iso[:INDEX] or be:OFFSET:WIDTH:UNIT",
    )
    parser.add_argument("--time-sep", default="#", help="field separator for --time (#)")
    parser.add_argument(
        "--unreadable",
        choices=("error", "first", "last"),
        help="where keys without a readable time live, for a table without epochs yet "
        "(default error)",
    )
    parser.add_argument(
        "--min-lead",
        type=float_above(0),
        metavar="SECONDS",
        help="the minimum lead stored with the table's first epoch record (default 120)",
    )
    parser.add_argument(
        "--skip-row-check",
        action="store_true",
        help="do not scan the newest epoch's keys for rows the new epoch would hide",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="instead of appending: find rows written where no epoch looks (a key dated "
        "past an epoch's start, salted with an older epoch's scheme by an object that had "
        "not read the record) and move each to its epoch's key; with --dry-run only list "
        "them (exit 1 when any)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check, and print the record it would store (with --repair: list, move nothing)",
    )
