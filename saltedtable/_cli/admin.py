"""``saltedtable create``, ``inspect`` and ``guard``: salted tables through the admin API.

Registered on the main parser by :func:`add_table_commands`; each command
checks its arguments before any request, and prints one line per error
(exit 1 for a problem with the table, 2 for bad usage, as every command).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._connection import connection_errors, connection_failure, data_timeouts
from .._exceptions import DataError, LayoutError, SchemeMismatchError, UsageError
from .._guard.families import RECORD_FAMILY, check_family_name, parse_family, record_family_problem
from .._guard.record import WINDOW_CLOCK_MARGIN
from .._scheme.salt import SaltScheme
from .args import (
    add_command,
    add_instance_options,
    add_timeout_option,
    float_above,
    float_at_least,
    int_at_least,
    key_from_text,
)
from .inspect import SUMMARY_ABOVE

if TYPE_CHECKING:
    from .._guard.record import LayoutRecord
    from .._scheme.cutoff import CutoffPolicy

__all__ = [
    "add_location_options",
    "add_table_command",
    "add_table_commands",
    "api_errors",
    "located",
]


def add_table_command(
    sub: Any, name: str, run: Callable[[argparse.Namespace], int], *, help: str, description: str
) -> argparse.ArgumentParser:
    """Add the command ``name`` on one table: ``TABLE`` and where it is, ``run`` behind
    :func:`api_errors`; the caller adds the command's own options.

    Args:
        sub: The main parser's subcommands.
        help: The line the main ``--help`` shows for the command.
        description: The command's own ``--help`` text.
    """
    parser = add_command(sub, name, api_errors(run), help=help, description=description)
    parser.add_argument("table", metavar="TABLE", help="table id")
    add_location_options(parser)
    return parser


def add_location_options(parser: argparse.ArgumentParser) -> None:
    """``--instance``, ``--project`` and ``--timeout``: where a table is, how long to wait."""
    add_instance_options(parser)
    add_timeout_option(parser, "seconds each Bigtable request may take, retries included")


def _layout_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    from .specs import add_layout_options

    add_layout_options(parser, required=required, default=None if required else "the record's")


def located(args: argparse.Namespace) -> tuple[str, str]:
    project = args.project or os.environ.get("SALTEDTABLE_PROJECT")
    instance = args.instance or os.environ.get("SALTEDTABLE_INSTANCE")
    if not project or not instance:
        raise UsageError("give --project and --instance (or $SALTEDTABLE_PROJECT/_INSTANCE)")
    return project, instance


def _layout(args: argparse.Namespace) -> tuple[SaltScheme, Any]:
    from .specs import layout_from_args

    return layout_from_args(args)


def _refusal(exc: Exception, table: str | None = None) -> str:
    """One line for a layout refusal or an API error."""
    from .._guard.record import open_differences

    if isinstance(exc, SchemeMismatchError):
        diffs = "; ".join(open_differences(exc.stored, exc.current))
        whose = "the table's layout record" if table is None else f"the layout record of {table!r}"
        return f"{whose} differs ({diffs}): give the stored scheme: {exc.stored.cli_flags()}"
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
    if isinstance(exc, LayoutError):
        return " ".join(line.strip() for line in str(exc).splitlines()) + notes
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"the Bigtable API refused: {first}{notes}"


def api_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One line for an admin or data API refusal (exit 1), naming what was not found."""

    def wrapped(args: argparse.Namespace) -> int:
        from google.api_core.exceptions import GoogleAPICallError, NotFound

        try:
            return run(args)
        except connection_errors() as exc:  # before the API's other errors: it is one of them
            line = connection_failure(exc, timeout=args.timeout, environ=os.environ)
            raise DataError(line or _refusal(exc)) from None
        except LayoutError as exc:
            raise DataError(_refusal(exc, args.table)) from None
        except NotFound as exc:
            raise DataError(
                f"not found: table {args.table!r} in instance {args.instance!r} of project "
                f"{args.project!r} ({exc.message})"
            ) from None
        except GoogleAPICallError as exc:
            raise DataError(_refusal(exc)) from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    return wrapped


# -- create ------------------------------------------------------------------------------------


def _cmd_create(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import NotFound

    from .._create import check_split_keys, create_salted_table

    args.project, args.instance = located(args)
    scheme, cutoff = _layout(args)
    for spec in args.family:
        parse_family(spec)  # bad ids and rules are usage errors, before any request
    splits = check_split_keys(
        [key_from_text(text, as_hex=args.hex, option="--split") for text in args.split], "--split"
    )
    try:
        result = create_salted_table(
            args.project,
            args.instance,
            args.table,
            scheme,
            families=args.family or ["cf"],
            cutoff=cutoff,
            extra_splits=splits,
            if_not_exists=args.if_not_exists,
            timeout=args.timeout,
        )
    except NotFound as exc:  # a missing table is no error here: the instance or project
        raise DataError(
            f"not found: instance {args.instance!r} of project {args.project!r} "
            f"({exc.message}); nothing was created"
        ) from None
    if result.created:
        print(
            f"created {args.table}: {len(result.splits)} split points (every bucket prefix), "
            f"layout record in family {result.record_family!r}"
        )
    else:
        outcome = "stored" if result.record_stored else "agrees"
        did = _what_the_guard_did(outcome, result.record_family, result.sampled_rows)
        print(f"{args.table} exists; {did}")
        return _family_at_risk(args, result.record_family)
    return 0


# -- guard ---------------------------------------------------------------------------------------


def _cmd_guard(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import GoogleAPICallError
    from google.cloud.bigtable_admin_v2 import types

    from .._admin import admin_client, data_client, read_schema, table_path
    from .._create import check_table_id
    from .._sync_autogen.table import SaltedTable

    args.project, args.instance = located(args)
    check_table_id(args.table)  # a usage error, before any request
    scheme, cutoff = _layout(args)
    if args.family is not None and args.add_family:
        raise UsageError("give --family or --add-family, not both")
    if args.family is not None:
        check_family_name(args.family)
    # --override stores the new record in the reserved family unless --family names another.
    reserved = args.add_family or args.override
    family = args.family if args.family is not None else RECORD_FAMILY if reserved else None
    added = False
    if args.add_family:
        name = table_path(args.project, args.instance, args.table)
        with admin_client() as admin:
            schema = read_schema(admin, name, timeout=args.timeout)
            if RECORD_FAMILY not in schema:
                # Check before changing anything: a record that differs, or rows that do
                # not fit, refuse the command with the schema as it was.
                with data_client(args.project) as client:
                    first = SaltedTable.from_client(
                        client, args.instance, args.table, scheme, cutoff=cutoff,
                        record_refresh=None, **data_timeouts(args.timeout),
                    )  # fmt: skip
                    first.guard_scheme()  # reads the record only; refuses one that differs
                    if first.stored_layout is None:
                        try:
                            first.check_layout()
                        except LayoutError as exc:
                            raise LayoutError(
                                f"the layout record of {args.table} was not stored, and no "
                                f"family was added: {_refusal(exc)}"
                            ) from None
                request = types.ModifyColumnFamiliesRequest(
                    name=name,
                    modifications=[
                        types.ModifyColumnFamiliesRequest.Modification(
                            id=RECORD_FAMILY, create=types.ColumnFamily()
                        )
                    ],
                )
                admin.modify_column_families(request=request, timeout=args.timeout)
                added = True
                print(f"added the column family {RECORD_FAMILY!r} (no GC rule)")
            else:
                problem = record_family_problem(schema[RECORD_FAMILY])
                if problem is not None:
                    raise LayoutError(f"{problem}; give it no GC rule, or a max-versions one")
    try:
        with data_client(args.project) as client:
            table = SaltedTable.from_client(
                client, args.instance, args.table, scheme, cutoff=cutoff, record_refresh=None,
                **data_timeouts(args.timeout),
            )  # fmt: skip
            table.guard_scheme(family=family, override=args.override)
            stored, where = table.stored_layout, table._guard.stored_family
            outcome, sampled = table._guard.outcome, table._guard.sampled
    except (GoogleAPICallError, LayoutError) as exc:
        if not added:
            raise
        # Half done: say what was changed (the empty family is harmless and stays).
        why = _refusal(exc).rstrip(".")
        raise DataError(
            f"added the column family {RECORD_FAMILY!r} to {args.table}, but the layout "
            f"record was not stored there: {why}; the new family is empty, and the command "
            "may be run again"
        ) from None
    if stored is None:
        print(
            f"{args.table} has no layout record; store one with --add-family "
            f"(the reserved family {RECORD_FAMILY!r}) or --family FAMILY"
        )
        return 1
    print(f"{args.table}: {_what_the_guard_did(outcome, where, sampled)}: {stored}")
    return _family_at_risk(args, where)


def _what_the_guard_did(outcome: str | None, family: str | None, sampled: int | None) -> str:
    """How ``guard`` and ``create --if-not-exists`` say what happened to the record."""
    rows = f"{sampled} sampled row{'s' * (sampled != 1)}" if sampled else ""
    checked = f"{rows} fit it" if rows else "the table holds no rows"
    if outcome == "stored":
        return f"stored the layout record in family {family!r} (there was none; {checked})"
    if outcome == "replaced":
        return f"replaced the layout record, in family {family!r} ({checked})"
    if outcome == "moved":
        return f"the layout record agrees; moved it to family {family!r}"
    return f"the layout record agrees, in family {family!r}"


def _family_at_risk(args: argparse.Namespace, family: str | None) -> int:
    """1 (and a line saying why and what fixes it) if ``family`` can lose the record, else 0.

    A caller that may not read the schema is told nothing more here: the guard
    warned already.
    """
    from google.api_core.exceptions import GoogleAPICallError

    from .._admin import admin_client, read_schema, table_path

    if family is None:
        return 0
    try:
        with admin_client() as admin:
            schema = read_schema(
                admin, table_path(args.project, args.instance, args.table), timeout=args.timeout
            )
    except GoogleAPICallError:
        return 0
    problem = record_family_problem(schema[family]) if family in schema else None
    if problem is None:
        return 0
    print(
        f"the layout record is at risk: its {problem}; move it with "
        f"`saltedtable guard {args.table} --add-family` (and the scheme options)"
    )
    return 1


# -- inspect ---------------------------------------------------------------------------------------


def _layout_of_record(record: LayoutRecord) -> tuple[SaltScheme, CutoffPolicy | None, bool]:
    """The scheme and cutoff a record stores, and whether they are the whole layout.

    A ready-made key part and time reader are rebuilt from their stored text; a
    custom one (only its author's code has it) is left out, and the layout is
    then not whole: the bucket count, hash, separator and marker still give the
    buckets' sizes, but not where each key belongs.
    """
    from .._guard.from_record import scheme_of_record
    from .._guard.record import describe_layout, open_differences
    from .._scheme.flags import rebuild_cutoff, rebuild_key_part

    part = rebuild_key_part(record.key_part)
    cutoff = rebuild_cutoff(None if record.cutoff is None else record.cutoff.as_dict())
    scheme = scheme_of_record(record, part)
    whole = (record.key_part is None or part is not None) and (
        record.cutoff is None or cutoff is not None
    )
    return scheme, cutoff, whole and not open_differences(record, describe_layout(scheme, cutoff))


def _newest_of_record(record: LayoutRecord) -> SaltScheme:
    """The newest epoch's scheme, without its key part (enough to measure its buckets)."""
    from .._guard.from_record import scheme_of_record

    return scheme_of_record(record, None)


def _epochs_of(record: LayoutRecord) -> list[tuple[str, SaltScheme | None]]:
    """Each epoch's start (ISO text; ``-inf``) and scheme, without key parts (for sizes)."""
    assert record.epochs is not None
    out: list[tuple[str, SaltScheme | None]] = []
    for found in record.epochs.epochs:
        start = "-inf" if found.start is None else found.start
        if found.buckets is None:
            out.append((start, None))
            continue
        scheme = SaltScheme(
            found.buckets,
            hash=found.hash or "crc32",
            separator=b"-" if found.separator is None else found.separator,
            marker=found.marker or b"",
        )
        out.append((start, scheme))
    return out


def _cmd_inspect(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import PermissionDenied

    from .._admin import admin_client, data_client, read_schema, table_path
    from .._create import check_table_id
    from .._guard.decisions import layout_offenders, sample_queries
    from .._guard.from_record import layout_of_record
    from .._guard.hot_record import describe_hot, hot_layout_of, without_hot
    from .._guard.record import decode_layout, describe_layout, newest_record_cell, open_differences
    from .._guard.window_state import window_of, without_window
    from .._scheme.epochs import instant_of
    from .._scheme.layout import Layout
    from .._scheme.salt import SCHEME_ROW_KEY, format_key
    from ..advise.input import Progress, progress_stream
    from .inspect import Inspection, bucket_sizes, epoch_sizes, skew, split_alignment

    args.project, args.instance = located(args)
    check_table_id(args.table)  # a usage error, before any request
    given = _layout(args) if args.buckets is not None else None
    epoch_layout: Layout | None = None  # the record's layout with epochs, when it has them
    whole = False  # the record gave the whole layout (else only the buckets can be judged)
    report = Inspection(table=args.table)
    name = table_path(args.project, args.instance, args.table)
    schema = None
    try:
        with admin_client() as admin:
            schema = read_schema(admin, name, timeout=args.timeout)
    except PermissionDenied as exc:
        report.notes.append(f"the schema cannot be read ({exc.message}): GC rules not checked")
    if schema is not None:
        for info in schema.values():
            report.families.append(
                {"name": info.name, "gc_rule": info.gc_rule, "aggregate": info.aggregate}
            )
    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            cell = newest_record_cell(table.read_row(SCHEME_ROW_KEY))
            if cell is not None:
                report.record, report.record_family = decode_layout(cell.value), cell.family
            state = None if report.record is None else window_of(report.record)
            if state is not None:
                report.window = {
                    "old_buckets": state.old_buckets,
                    "new_buckets": state.new_buckets,
                    "start": instant_of(state.start_micros).isoformat(),
                    "state": state.state,
                    "min_lead_s": state.min_lead_s,
                }
            if report.record is None:
                report.problems.append(
                    "no layout record: nothing stops a reader with another layout; store one "
                    f"with `saltedtable guard {args.table} --add-family` and the scheme options"
                )
            elif schema is not None and report.record_family in schema:
                problem = record_family_problem(schema[report.record_family])
                if problem is not None:
                    report.problems.append(
                        f"the layout record is at risk: its {problem}; move it with "
                        f"`saltedtable guard {args.table} --add-family`"
                    )
            if given is not None:
                scheme, cutoff = given
                if report.record is not None:
                    diffs = open_differences(
                        without_window(without_hot(report.record)), describe_layout(scheme, cutoff)
                    )
                    if diffs:
                        report.problems.append(
                            "the given layout disagrees with the record: " + "; ".join(diffs)
                        )
            elif report.record is not None and report.record.epochs is not None:
                scheme, cutoff = _newest_of_record(report.record), None
                try:
                    epoch_layout = layout_of_record(report.record)
                    whole = True
                except LayoutError:
                    report.notes.append(
                        "the record names a custom key part or time reader: only the bucket "
                        "sizes are judged"
                    )
            elif report.record is not None:
                record = without_window(without_hot(report.record))
                scheme, cutoff, whole = _layout_of_record(record)
                if not whole:
                    report.notes.append(
                        "the record names a custom key part or time reader: give the scheme "
                        f"options to check where keys belong: {report.record.cli_flags()}"
                    )
            else:
                return _emit(report, args)  # no record and no scheme: nothing more to judge
            layout = Layout(scheme, cutoff) if epoch_layout is None else epoch_layout
            hot = None
            if report.record is not None and cutoff is None and report.record.epochs is None:
                hot = hot_layout_of(report.record, scheme)
            report.hot = describe_hot(hot)
            report.scheme = str(scheme) + ("" if cutoff is None else f", {cutoff!r}")
            samples = [(bytes(k), int(o)) for k, o in table.sample_row_keys()]
            report.samples = len(samples)
            report.buckets = bucket_sizes(scheme, samples)
            if given is None and report.record is not None and report.record.epochs is not None:
                report.scheme = f"{len(report.record.epochs.epochs)} epochs, the newest {scheme}"
                report.epochs = epoch_sizes(_epochs_of(report.record), samples)
            report.skew = skew(report.buckets)
            aligned, missing = split_alignment(scheme, samples)
            report.splits_aligned = [format_key(p) for p in aligned]
            report.splits_missing = [format_key(p) for p in missing]
            if (
                args.max_skew is not None
                and report.skew is not None
                and report.skew > args.max_skew
            ):
                report.problems.append(
                    f"skew {report.skew:.2f} is above --max-skew {args.max_skew}"
                )
            if given is not None or whole:
                queries = sample_queries(layout, args.sample_rows, report.record)
                # One read a bucket: at N=4,096 that is seconds, so say how far it is.
                bar = Progress("sampling keys", len(queries), progress_stream(args.progress))
                keys: list[list[bytes]] = []
                for query in queries:
                    keys.append([row.row_key for row in table.read_rows(query)])
                    bar.update(len(keys))
                bar.close(len(keys))
                # A hot part's rows and a split row's sub-rows are where the lists put them.
                report.stray = layout_offenders(layout, keys, report.record, hot)[: args.show]
                if report.stray:
                    report.problems.append(
                        f"{len(report.stray)} sampled key(s) do not fit the layout"
                    )
        finally:
            table.close()  # type: ignore[no-untyped-call]
    return _emit(report, args)


def _cmd_split(args: argparse.Namespace) -> int:
    from .._admin import data_client
    from .._create import check_table_id
    from .._scheme.salt import format_key
    from .._split import split_hot_key

    args.project, args.instance = located(args)
    check_table_id(args.table)
    kind: Literal["part", "row"] = "part" if args.part is not None else "row"
    option = "--part" if args.part is not None else "--row"
    value = key_from_text(
        args.part if args.part is not None else args.row, as_hex=args.hex, option=option
    )
    if args.finish:
        if kind != "part" or args.k is not None:
            raise UsageError("--finish takes --part VALUE only (no --row, no -k)")
        return _finish_move(args, value)
    if args.clock_margin is not None:
        raise UsageError("--clock-margin goes with --finish only")
    if args.k is None:
        raise UsageError("give -k K (or --finish --part VALUE)")
    at = None if args.at is None else _start_time(args.at)
    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            before, after = split_hot_key(table, kind, value, args.k, at=at, min_lead=args.min_lead)
        finally:
            table.close()  # type: ignore[no-untyped-call]
    if value in after.moving:
        print(
            f"{args.table}: hot part {format_key(value)!r} moves from K="
            f"{after.moving[value]} to K={after.parts[value]}; readers consult both places "
            f"until `saltedtable split {args.table} --finish --part ...`, run after the "
            "start, has moved its rows"
        )
    listed = after.parts if kind == "part" else after.rows
    was = (before.parts if kind == "part" else before.rows).get(value)
    buckets = after.part_buckets(value) if kind == "part" else after.row_buckets(value)
    change = "listed" if was is None else f"raised from K={was}"
    print(
        f"{args.table}: hot {kind} {format_key(value)!r} {change} to K={listed[value]} "
        f"(buckets {', '.join(map(str, buckets))})"
    )
    assert after.start_micros is not None
    start = dt.datetime.fromtimestamp(after.start_micros / 1e6, dt.UTC).isoformat()
    print(
        f"it starts at {start} (minimum lead {after.min_lead_s:g} s): until then writers "
        "place rows as before; table objects with the old lists adopt the new ones at their "
        "next read of the record"
    )
    return 0


def _start_time(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--at {text!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise UsageError(f"--at {text!r} has no UTC offset (add +00:00)")
    return when


def _finish_move(args: argparse.Namespace, part: bytes) -> int:
    from .._admin import data_client
    from .._scheme.salt import format_key
    from .._split import finish_hot_move

    with data_client(args.project) as client:
        table = client.get_table(args.instance, args.table, **data_timeouts(args.timeout))
        try:
            margin = WINDOW_CLOCK_MARGIN if args.clock_margin is None else args.clock_margin
            done = finish_hot_move(table, part, clock_margin=margin)
        finally:
            table.close()  # type: ignore[no-untyped-call]
    print(
        f"{args.table}: hot part {format_key(part)!r} moved: {done.keys} old rows, "
        f"{done.copied} cells copied ({done.replans} re-planned), {done.retired} old rows "
        f"deleted, {done.tombstones} rows' tombstones dropped; the record no longer names "
        "it as moving"
    )
    return 0


def _emit(report: Any, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(report.text(all_buckets=args.all_buckets))
    return 1 if report.problems else 0


# -- the parsers ---------------------------------------------------------------------------------


def add_table_commands(sub: Any) -> None:
    """Add ``create``, ``inspect`` and ``guard`` to the main parser's subcommands."""

    create = add_table_command(
        sub,
        "create",
        _cmd_create,
        help="create a salted table: pre-split, with a family for its layout record",
        description="Create a table split at every bucket prefix, with the given column "
        f"families plus {RECORD_FAMILY!r} (no GC rule) holding the layout record, which is "
        "stored before this returns. A failed create leaves no table.",
    )
    _layout_options(create, required=True)
    create.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME[:RULE]",
        help="a column family (repeatable; default cf); RULE: max_age=7d, max_versions=3, "
        "A|B (union), A&B (intersection), or agg=sum|min|max|hll",
    )
    create.add_argument(
        "--split",
        action="append",
        default=[],
        metavar="KEY",
        help="another split point (the legacy key space's own; repeatable; hex with --hex)",
    )
    create.add_argument(
        "--if-not-exists",
        action="store_true",
        help="accept an existing table whose layout record agrees (one without a record "
        "gets one, if a sample of its rows fits the scheme)",
    )

    guard = add_table_command(
        sub,
        "guard",
        _cmd_guard,
        help="check a table's layout record; store or move it",
        description="Check the table's layout record against the scheme; with --add-family "
        f"add the reserved family {RECORD_FAMILY!r} and store (or move) the record there, "
        "with --family store (or move) it in that family, after checking its GC rule. A "
        "record is stored (or, with --override, replaces another) only when a sample of the "
        "table's rows fits the scheme; otherwise nothing is written (exit 1).",
    )
    _layout_options(guard, required=True)
    guard.add_argument("--family", help="store or move the record into this family")
    guard.add_argument(
        "--add-family",
        action="store_true",
        help=f"add the family {RECORD_FAMILY!r} if missing and keep the record there",
    )
    guard.add_argument(
        "--override",
        action="store_true",
        help="replace a different stored record, after the data was rewritten with this "
        f"layout (in the family {RECORD_FAMILY!r} unless --family names another); refused "
        "if sampled rows do not fit",
    )

    split = add_table_command(
        sub,
        "split",
        _cmd_split,
        help="spread a hot key part over K buckets, or a hot row over K sub-rows",
        description="List a key part (--part) or a row (--row) with fan-out K in the table's "
        "layout record, or raise its K, by compare-and-swap, from a start at least the "
        "minimum lead ahead (--at). Until the start writers place rows as before; a part "
        "listed or raised moves: readers consult its old and new place until --finish "
        "(after the start) has moved the rows; a split row stays where readers look (its "
        "first sub-row is the unsplit row). See docs/hot-keys.md.",
    )
    which = split.add_mutually_exclusive_group(required=True)
    which.add_argument("--part", metavar="VALUE", help="a key part value (hex with --hex)")
    which.add_argument("--row", metavar="KEY", help="a logical row key (hex with --hex)")
    split.add_argument("-k", type=int_at_least(2), metavar="K", help="the fan-out, 2..N")
    split.add_argument(
        "--finish",
        action="store_true",
        help="with --part: move a moving part's rows to their new place (race-safe), "
        "verify none is left, and record that the move is done; refused until the split's "
        "start plus --clock-margin",
    )
    split.add_argument(
        "--clock-margin",
        type=float_at_least(0),
        metavar="SECONDS",
        help="with --finish: how long after the split's start the move may be finished, so "
        "writers whose clocks run behind and writes routed before the start have landed "
        f"(default {WINDOW_CLOCK_MARGIN:g})",
    )
    split.add_argument("--hex", action="store_true", help="VALUE or KEY is hex")
    split.add_argument(
        "--at",
        metavar="ISO",
        help="when writers switch to the new lists (default: now plus the minimum lead; "
        "e.g. 2026-12-01T00:00:00+00:00)",
    )
    split.add_argument(
        "--min-lead",
        type=float_above(0),
        metavar="SECONDS",
        help="the minimum lead stored with the table's first split that has one (default 120)",
    )

    inspect = add_table_command(
        sub,
        "inspect",
        _cmd_inspect,
        help="show a table's salted state: record, families, bucket sizes, splits, strays",
        description="Show the layout record and where it lives, the column families with "
        "their GC rules and types, per-bucket size estimates from sample_row_keys with the "
        "skew, which bucket boundaries are split points, and a sample of keys that do not "
        "fit the layout. Exit 1 when it finds a problem.",
    )
    _layout_options(inspect, required=False)
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument(
        "--sample-rows",
        type=int_at_least(1),
        default=100,
        metavar="ROWS",
        help="rows sampled from each bucket (each of 16 runs of buckets, with more than "
        "16) and outside them (default 100)",
    )
    inspect.add_argument(
        "--show", type=int_at_least(1), default=10, metavar="K", help="stray keys shown (10)"
    )
    inspect.add_argument(
        "--all-buckets",
        action="store_true",
        help=f"list every bucket (above {SUMMARY_ABOVE} buckets the text report shows the "
        "largest, the smallest and a histogram of their sizes)",
    )
    inspect.add_argument(
        "--progress",
        action="store_true",
        help="show the key sampling's progress on stderr even if it is not a terminal",
    )
    inspect.add_argument(
        "--max-skew",
        type=float_above(1),
        metavar="X",
        help="report a skew (max/mean bucket size) above X as a problem",
    )
