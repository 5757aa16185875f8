"""``saltedtable window``: open, follow and close a dual-layout window on a live table.

``window open | status | backfill | verify | close TABLE``; the work is in
``saltedtable._window_ops`` (each record change a compare-and-swap).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from .._connection import data_timeouts
from .._exceptions import DataError, UsageError
from .._scheme.salt import MAX_BUCKETS
from .admin import add_table_command, located
from .args import float_above, int_at_least

__all__ = ["STALE_WRITERS", "add_window_command"]

#: What ``window open`` warns: objects that never re-read the record are not bound by
#: the lead, and nothing can repair their writes after a delete in the window.
STALE_WRITERS = (
    "warning: table objects opened with record_refresh=None, a refresh longer than the "
    "lead, or guard=False do not see the window and keep writing the old layout after its "
    "start (a write after a delete in the window is then lost): restart them with a "
    "refresh within the lead before the window starts"
)


def _when(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--at {text!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise UsageError(f"--at {text!r} has no UTC offset (add +00:00)")
    return when


def _describe(step: Any) -> str:
    """One line for the window a step leaves in the record."""
    from .._scheme.epochs import instant_of

    state = step.window
    if state is None:
        return f"no window; the record names {step.record.buckets} buckets"
    start = instant_of(state.start_micros).isoformat()
    now = dt.datetime.now(dt.UTC).timestamp() * 1_000_000
    when = "started" if now >= state.start_micros else "starts"
    return (
        f"window {state.old_buckets} -> {state.new_buckets} buckets, {state.state}, {when} "
        f"{start} (lead {state.min_lead_s:g} s)"
    )


def _run(args: argparse.Namespace) -> int:
    from .._admin import data_client
    from .._create import check_table_id
    from .._window_ops import (
        backfill_resalt_window,
        close_resalt_window,
        open_resalt_window,
        resalt_window_status,
        verify_resalt_window,
    )

    args.project, args.instance = located(args)
    check_table_id(args.table)
    action = args.window_action
    at = _when(args.at) if action == "open" and args.at is not None else None
    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            if action == "open":
                try:
                    step = open_resalt_window(
                        table, args.buckets, at=at, min_lead=args.lead, dry_run=args.dry_run
                    )
                except ValueError as exc:
                    raise UsageError(str(exc)) from None
                verb = "would store" if args.dry_run else "stored"
                print(f"{args.table}: {verb} {_describe(step)}")
                print(STALE_WRITERS, file=sys.stderr)
            elif action == "status":
                print(f"{args.table}: {_describe(resalt_window_status(table))}")
            elif action == "backfill":
                step = backfill_resalt_window(table, limit=args.step)
                p = step.progress
                assert p is not None
                print(
                    f"{args.table}: backfill visited {p.keys} old row(s), copied {p.copied} "
                    f"cell(s), {p.replans} re-planned after a racing write"
                )
            elif action == "verify":
                step = verify_resalt_window(table)
                p = step.progress
                assert p is not None
                moved = "; the window is now backfilled" if step.changed else ""
                print(
                    f"{args.table}: verify visited {p.keys} old row(s), {p.left} left to "
                    f"copy{moved}"
                )
                if p.left:
                    raise DataError(
                        f"{args.table}: {p.left} old row(s) left to copy: run "
                        f"`saltedtable window backfill {args.table}`"
                    )
            else:
                step = close_resalt_window(table, wait=not args.no_wait)
                p = step.progress
                assert p is not None
                print(
                    f"{args.table}: retired {p.retired} old row(s), dropped the tombstones of "
                    f"{step.tombstones} row(s); {_describe(step)}"
                )
        finally:
            table.close()  # type: ignore[no-untyped-call]
    return 0


_HELP = {
    "open": "store a window from the table's bucket count to -n buckets, starting ahead",
    "status": "show the window the layout record holds",
    "backfill": "copy the old layout's rows into the new one (after the start; resumable)",
    "verify": "count old rows left to copy; with none, mark the window backfilled",
    "close": "retire the old rows and tombstones, then store the new scheme alone",
}


def add_window_command(sub: Any) -> None:
    """Add ``window`` and its steps to the main parser's subcommands."""
    window = sub.add_parser(
        "window",
        help="change the bucket count of a table without key times (a dual-layout window)",
        description="A dual-layout window moves a live table from N to M buckets: from its "
        "start, writes go to the new layout and reads combine both; a backfill copies the old "
        "rows, a verify pass finds none left, and close retires the old layout. Table objects "
        "with the guard on follow each step from the layout record. See docs/epochs-window.md.",
    )
    steps = window.add_subparsers(dest="window_action", required=True, metavar="STEP")
    parsers = {}
    for name, line in _HELP.items():
        parsers[name] = add_table_command(steps, name, _run, help=line, description=line + ".")
    opening = parsers["open"]
    opening.add_argument(
        "-n",
        "--buckets",
        type=int_at_least(1, MAX_BUCKETS),
        required=True,
        help="the new number of salt buckets M (a multiple of N keeps buckets apart)",
    )
    opening.add_argument(
        "--at",
        metavar="ISO",
        help="when the window starts (default: now plus the lead), e.g. 2026-12-01T00:00:00+00:00",
    )
    opening.add_argument(
        "--lead",
        type=float_above(0),
        metavar="SECONDS",
        help="the least time between storing the window and its start, longer than every "
        "table object's record_refresh (default 120)",
    )
    opening.add_argument(
        "--dry-run", action="store_true", help="check, and print the window it would store"
    )
    parsers["backfill"].add_argument(
        "--step",
        type=int_at_least(1, 10**9),
        default=10_000,
        metavar="ROWS",
        help="old rows one backfill step visits before the next (default 10000)",
    )
    parsers["close"].add_argument(
        "--no-wait",
        action="store_true",
        help="do not wait the lead after the close to drop tombstones a late writer left",
    )
