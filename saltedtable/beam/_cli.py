"""``saltedtable migrate``: the migration steps from the command line.

The resalt window's steps (``backfill-window``, ``verify-window``,
``retire-window``) are parsed here (:func:`window_parser`): :func:`main` takes
them next to the migration steps.

:mod:`saltedtable._cli.migrate` parses the arguments (it needs no Beam); this
module runs the step. Runs locally by default (Beam's in-process portable
runner); options that Apache Beam knows are handed to its
``PipelineOptions``, so ``--runner DataflowRunner --project ... --region ...
--temp_location gs://...`` runs the same step on Dataflow. Any other unknown
option is refused. Exit codes: 0 done (and verified); 1 a verification found
differences, a step was refused, or Bigtable or the pipeline failed; 2 bad
usage. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import IO, TypedDict

from apache_beam.options.pipeline_options import PipelineOptions
from google.api_core.exceptions import GoogleAPICallError, NotFound

from .._cli.commands import EXIT_DATA, EXIT_OK, EXIT_USAGE, exit_status, one_line
from .._cli.migrate import NEW_SCHEME_FIELDS, PROG, WINDOW_STEPS, parse
from .._cli.specs import cutoff_policy_from_args, key_part_from_spec
from .._exceptions import (
    DataError,
    SaltedTableError,
    UsageError,
)
from .._guard.record import describe_layout
from .._scheme.salt import SaltScheme
from ._io import BigtableTarget
from ._migrate import (
    MigrationReport,
    backfill,
    cut_over,
    delete_legacy,
    progress_stream,
    resalt,
    verify_backfill,
    verify_resalt,
)
from ._record_steps import read_record
from ._window import backfill_window, retire_window, verify_window

__all__ = ["main", "run_step"]

_PROG = PROG


def _scheme(args: argparse.Namespace, new: bool = False) -> SaltScheme:
    def pick(name: str) -> str | None:
        value: str | None = getattr(args, f"to_{name}", None) if new else None
        return value if value is not None else getattr(args, name)

    to_buckets = getattr(args, "to_buckets", None)
    buckets = to_buckets if new and to_buckets is not None else args.buckets
    return SaltScheme(
        buckets,
        hash=pick("hash") or "crc32",
        key_part=key_part_from_spec(pick("key_part")),
        separator=(pick("separator") or "-").encode(),
        marker=(pick("marker") or "").encode(),
    )


def _unknown_to_beam(beam_args: list[str]) -> list[str]:
    """The arguments that Apache Beam's option parser does not know either."""
    leftovers: list[str] = []

    def collect(parser: argparse.ArgumentParser) -> None:
        # Called once every option class has added its options, before Beam parses.
        leftovers.extend(parser.parse_known_args(beam_args)[1])

    PipelineOptions(beam_args).get_all_options(
        add_extra_args_fn=collect, retain_unknown_options=True
    )
    return leftovers


class _Common(TypedDict):
    options: PipelineOptions
    split_bytes: int
    progress: IO[str] | None


def _check_tables(*targets: BigtableTarget, require: bool = False, also: str = "") -> None:
    """Fail with one clear line when a table does not exist (before any pipeline starts).

    With ``require``, the first table must hold a layout record too.
    """
    for i, target in enumerate(targets):
        try:
            with target.opened() as table:
                stored = read_record(table)
        except NotFound:
            raise DataError(
                f"table {target.table!r} not found in instance {target.instance!r} of project "
                f"{target.project!r}"
            ) from None
        if require and i == 0 and stored is None:
            raise DataError(
                f"table {target.table!r} has no layout record, so nothing tells which layout "
                f"wrote it: store one with `saltedtable guard {target.table} --instance "
                f"{target.instance} --project {target.project} --add-family` (with the "
                f"scheme options){also}, or give --no-require-record"
            )


def _only_buckets(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(
            f"--only-buckets takes comma-separated bucket numbers, not {text!r}"
        ) from None


def _run_window(args: argparse.Namespace, beam_args: list[str]) -> MigrationReport:
    """Run a resalt window step."""
    scheme = _scheme(args)
    target = BigtableTarget(args.bigtable_project, args.instance, args.table, args.app_profile)
    common: _Common = {
        "options": PipelineOptions(beam_args),
        "split_bytes": max(1, int(args.split_mb * 1024 * 1024)),
        "progress": progress_stream(args.progress),
    }
    _check_tables(target)
    if args.step == "backfill-window":
        only = _only_buckets(args.only_buckets)
        return backfill_window(
            target,
            scheme,
            buckets=only,
            max_cells=args.max_cells,
            clock_margin=args.clock_margin,
            **common,
        )
    if args.step == "verify-window":
        only = _only_buckets(args.only_buckets)
        return verify_window(target, scheme, buckets=only, clock_margin=args.clock_margin, **common)
    return retire_window(target, scheme, grace=args.grace, notify=_say, **common)


def _run(args: argparse.Namespace, beam_args: list[str]) -> MigrationReport:
    """Check the arguments, then run the step."""
    unknown = _unknown_to_beam(beam_args)
    if unknown:
        raise UsageError(
            f"unrecognized arguments: {' '.join(unknown)}: neither this step nor Apache Beam "
            "knows them"
        )
    if args.step in WINDOW_STEPS:
        return _run_window(args, beam_args)
    scheme = _scheme(args)
    cutoff = cutoff_policy_from_args(args.cutoff, args.time, args.time_sep, args.unreadable)
    target = BigtableTarget(args.bigtable_project, args.instance, args.table, args.app_profile)
    common: _Common = {
        "options": PipelineOptions(beam_args),
        "split_bytes": max(1, int(args.split_mb * 1024 * 1024)),
        "progress": progress_stream(args.progress),
    }
    if args.step == "resalt" or (args.step == "verify" and args.to_table):
        destination = BigtableTarget(
            args.bigtable_project, args.instance, args.to_table, args.app_profile
        )
        new_scheme = _scheme(args, new=True)
        if not describe_layout(scheme, cutoff).differences(describe_layout(new_scheme)):
            raise UsageError(
                "the copy would have the same layout: give --to-buckets, --to-hash, "
                "--to-key-part, --to-separator or --to-marker"
            )
        _check_tables(target, destination, require=args.require_record)
        if args.step == "resalt":
            return resalt(
                target, scheme, destination, new_scheme, cutoff=cutoff, family=args.family, **common
            )
        return verify_resalt(target, scheme, destination, new_scheme, cutoff=cutoff, **common)
    given = [name for name in NEW_SCHEME_FIELDS if getattr(args, f"to_{name}", None) is not None]
    new_options = ["--to-" + name.replace("_", "-") for name in given]
    if new_options:
        raise UsageError(f"{' '.join(new_options)} describe a resalted copy: give --to-table too")
    if cutoff is None:
        more = " (or --to-table to compare a resalted copy)" if args.step == "verify" else ""
        raise UsageError(f"{args.step} finishes a forward-only migration: give --cutoff{more}")
    # A backfill given --family stores the record itself.
    _check_tables(
        target,
        require=args.require_record and not getattr(args, "family", None),
        also=", give --family FAMILY to store it with this step" if args.step == "backfill" else "",
    )
    if args.step == "backfill":
        return backfill(
            target, scheme, cutoff, family=args.family, prune_orphans=args.prune, **common
        )
    if args.step == "verify":
        return verify_backfill(target, scheme, cutoff, **common)
    if args.step == "cutover":
        return cut_over(target, scheme, cutoff, **common)
    return delete_legacy(target, scheme, cutoff, notify=_say, grace=args.grace, **common)


def _say(line: str) -> None:
    print(f"{_PROG}: {line}", file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    """Parse a ``migrate`` command line and run its step; return the exit code."""
    parsed = parse(argv)
    if isinstance(parsed, int):
        return parsed
    return run_step(*parsed)


def run_step(args: argparse.Namespace, beam_args: list[str]) -> int:
    """Run the step that :func:`saltedtable._cli.migrate.parse` read; return the exit code."""
    prog = f"{_PROG} {args.step}"
    _quiet_beam(args.verbose)
    try:
        report = _run(args, beam_args)
    except Exception as exc:  # a command prints one line, never a traceback
        status = exit_status(exc)  # the one mapping of errors to statuses (_commands)
        if status == EXIT_USAGE:
            print(f"{prog}: error: {one_line(str(exc))} (see {prog} --help)", file=sys.stderr)
        else:
            print(f"{prog}: error: {_describe(exc)}", file=sys.stderr)
        return status
    print("\n".join(report.lines()))
    return EXIT_OK if report.ok else EXIT_DATA


def _quiet_beam(verbose: bool) -> None:
    """Beam logs a failing worker's traceback before re-raising it; the command says it once."""
    if verbose:
        logging.getLogger().setLevel(logging.INFO)
    else:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def _describe(exc: BaseException) -> str:
    """One line for an error, from the error that caused it where one is known."""
    found: BaseException | None = exc
    seen: set[int] = set()
    while found is not None and id(found) not in seen:
        # Beam re-raises a worker's error as a RuntimeError carrying its text,
        # and, in this process, with the original as its context.
        if isinstance(found, (SaltedTableError, GoogleAPICallError)):
            break
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    cause = exc if found is None or id(found) in seen else found
    if isinstance(cause, SaltedTableError):
        return one_line(str(cause))
    text = one_line(str(cause))
    if isinstance(cause, RuntimeError) and " [while running " in text:
        text = text[: text.rindex(" [while running ")]
        # "package.module.SomeError: message" -> "SomeError: message"
        head, sep, rest = text.partition(": ")
        if sep and " " not in head and "." in head:
            return f"{head.rpartition('.')[2]}: {rest}"
        return text
    return f"{type(cause).__name__}: {text}"
