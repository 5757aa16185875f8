"""``saltedtable migrate``'s arguments, parsed without Apache Beam.

The steps run on Beam (``saltedtable.beam._cli``), but their options, their
help and their usage errors need none of it: ``saltedtable migrate --help`` and
``saltedtable migrate STEP --help`` work where Beam is not installed, and the
missing package is reported only when a step is to run. Options the parser
does not know are handed on; Beam's own option parser decides about them when
the step runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Final, NoReturn

from .._guard.record import DEFAULT_LEGACY_GRACE, DEFAULT_RECORD_REFRESH, WINDOW_CLOCK_MARGIN
from .._scheme.salt import HASHES
from .args import float_above, float_at_least, int_at_least
from .commands import EXIT_USAGE
from .specs import add_time_arguments

__all__ = ["NEW_SCHEME_FIELDS", "PROG", "WINDOW_STEPS", "parse", "parser", "window_parser"]

PROG: Final = "saltedtable migrate"

_EPILOG = """\
finishing a forward-only migration (a table with --cutoff), in order:
  backfill        copy every legacy row to its salted key (re-runnable)
  verify          compare legacy rows and copies per bucket (rows, checksum)
  cutover         verify, then let fully salted readers open the table too
  delete-legacy   once every service runs without the cutoff: refuse cutoff
                  readers, delete the legacy rows, write the fully salted record
the resalt window (a table whose record holds one: `saltedtable window open`):
  backfill-window copy the old layout's rows into the new one (re-runnable)
  verify-window   count what is left per old bucket; none left: backfilled
  retire-window   on a backfilled window: delete the old rows and the
                  tombstones, close the window
changing the scheme:
  resalt          copy into --to-table with --to-buckets/--to-hash/...,
                  verify, write the new layout record there
  verify --to-table ...   compare a table and its resalted copy again

Options Apache Beam knows go to Beam, e.g. --runner DataflowRunner --project P
--region us-central1 --temp_location gs://bucket/tmp
--extra_packages dist/saltedtable-0.1.0-py3-none-any.whl (from `make dist`).
`saltedtable migrate STEP --help` lists a step's own options.
"""

_RESALT_HELP = "the resalted table (with the same column families)"
NEW_SCHEME_FIELDS: Final = ("buckets", "hash", "key_part", "separator", "marker")
"""The scheme fields a resalted copy may change (``--to-buckets`` ...)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _common_options() -> _Parser:
    p = _Parser(add_help=False, allow_abbrev=False)
    table = p.add_argument_group("the table")
    table.add_argument("--bigtable-project", required=True, help="the table's Google Cloud project")
    table.add_argument("--instance", required=True, help="Bigtable instance id")
    table.add_argument("--table", required=True, help="table id")
    table.add_argument("--app-profile", help="Bigtable app profile id")
    table.add_argument(
        "--no-require-record",
        dest="require_record",
        action="store_false",
        help="run on a table that has no layout record (default: refuse it)",
    )
    scheme = p.add_argument_group("its layout")
    scheme.add_argument(
        "-n", "--buckets", type=int_at_least(1), required=True, help="the table's bucket count"
    )
    scheme.add_argument("--hash", default="crc32", help=f"one of {', '.join(HASHES)}")
    scheme.add_argument("--key-part", metavar="SPEC", help="fields:K[:SEP] or before-last[:SEP]")
    scheme.add_argument("--separator", default="-", help="separator after a decimal prefix")
    scheme.add_argument("--marker", default="", help="bytes before every prefix (text)")
    scheme.add_argument("--cutoff", metavar="ISO", help="its cutoff, e.g. 2024-01-01T00:00:00Z")
    add_time_arguments(scheme)
    run = p.add_argument_group("running")
    run.add_argument(
        "--split-mb",
        type=float_above(0),
        default=64.0,
        help="about how much one split reads (MB, 64)",
    )
    run.add_argument("--progress", action="store_true", help="show progress even if not a terminal")
    run.add_argument(
        "-v", "--verbose", action="store_true", help="show Apache Beam's own log (INFO and up)"
    )
    return p


def _add_new_scheme(p: argparse.ArgumentParser, *, required: bool) -> None:
    new = p.add_argument_group("the resalted copy")
    new.add_argument("--to-table", required=required, help=_RESALT_HELP)
    new.add_argument("--to-buckets", type=int_at_least(1), help="the new bucket count")
    new.add_argument("--to-hash", help="the new hash (default: unchanged)")
    new.add_argument("--to-key-part", metavar="SPEC", help="the new key part")
    new.add_argument("--to-separator", help="the new separator")
    new.add_argument("--to-marker", help="the new marker")


def parser() -> argparse.ArgumentParser:
    """The ``saltedtable migrate`` parser: one subcommand per step."""
    p = _Parser(
        prog=PROG,
        description="Backfill, verify, cut over or resalt a salted table with Apache Beam.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP", parser_class=_Parser)
    common = _common_options()

    def step(name: str, summary: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = steps.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary,
            allow_abbrev=False,
            epilog="Options Apache Beam knows (--runner, --region, ...) go to Beam.",
        )
        return sub

    back = step("backfill", "Copy every legacy row to its salted key (needs --cutoff).")
    back.add_argument("--family", help="column family for the layout record, if there is none")
    back.add_argument(
        "--prune",
        action="store_true",
        help="also delete copies whose legacy row is gone (reads the keys of every bucket)",
    )
    verify = step(
        "verify",
        "Compare legacy rows with their copies (with --cutoff), or a table with its "
        "resalted copy (with --to-table).",
    )
    _add_new_scheme(verify, required=False)
    step("cutover", "Verify the copies, then let fully salted readers open (needs --cutoff).")
    delete = step(
        "delete-legacy",
        "Once every service runs without the cutoff: delete the legacy rows and write the "
        "fully salted record (needs --cutoff).",
    )
    delete.add_argument(
        "--grace",
        type=float_at_least(0),
        default=DEFAULT_LEGACY_GRACE,
        metavar="SECONDS",
        help="wait this long after moving the record to deleting, before deleting a row, "
        "so table objects still open with the cutoff (record_refresh, "
        f"{DEFAULT_RECORD_REFRESH:g} s by default) stop; keep it longer than their "
        f"record_refresh (default {DEFAULT_LEGACY_GRACE:g})",
    )
    copy = step("resalt", "Copy the table under a new scheme into --to-table and verify it.")
    _add_new_scheme(copy, required=True)
    copy.add_argument("--family", required=True, help="column family for the new layout record")
    return p


#: The resalt window's steps, parsed by :func:`window_parser`.
WINDOW_STEPS: Final = ("backfill-window", "verify-window", "retire-window")


class _WindowParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def window_parser() -> argparse.ArgumentParser:
    """The parser of the resalt window's steps (one subcommand each)."""
    p = _WindowParser(
        prog=PROG,
        description="The resalt window's Beam steps: the window (its old and new bucket "
        "counts and state) is read from the table's layout record.",
        allow_abbrev=False,
    )
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP", parser_class=_WindowParser)
    common = _WindowParser(add_help=False, allow_abbrev=False)
    table = common.add_argument_group("the table")
    table.add_argument("--bigtable-project", required=True, help="the table's Google Cloud project")
    table.add_argument("--instance", required=True, help="Bigtable instance id")
    table.add_argument("--table", required=True, help="table id")
    table.add_argument("--app-profile", help="Bigtable app profile id")
    scheme = common.add_argument_group("its scheme (the bucket counts come from the record)")
    scheme.add_argument(
        "-n",
        "--buckets",
        type=int_at_least(1),
        required=True,
        help="the window's old or new bucket count",
    )
    scheme.add_argument("--hash", default="crc32", help="the hash (default crc32)")
    scheme.add_argument("--key-part", metavar="SPEC", help="fields:K[:SEP] or before-last[:SEP]")
    scheme.add_argument("--separator", default="-", help="separator after a decimal prefix")
    scheme.add_argument("--marker", default="", help="bytes before every prefix (text)")
    run = common.add_argument_group("running")
    run.add_argument(
        "--split-mb", type=float_above(0), default=64.0, help="about how much one split reads"
    )
    run.add_argument("--progress", action="store_true", help="show progress even if not a terminal")
    run.add_argument("-v", "--verbose", action="store_true", help="show Apache Beam's own log")

    def step(name: str, summary: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = steps.add_parser(
            name, parents=[common], help=summary, description=summary, allow_abbrev=False
        )
        return sub

    run.add_argument(
        "--clock-margin",
        type=float_at_least(0),
        default=WINDOW_CLOCK_MARGIN,
        metavar="SECONDS",
        help="backfill and verify run only this long after the window's start, so "
        f"writers whose clocks run behind have moved to it (default {WINDOW_CLOCK_MARGIN:g})",
    )
    only = "only these old buckets (comma-separated; default all)"
    back = step("backfill-window", "Copy the old layout's rows into the new one (re-runnable).")
    back.add_argument("--only-buckets", metavar="B,B,...", help=only)
    back.add_argument(
        "--max-cells", type=int_at_least(1), default=100, help="cells one copy request writes"
    )
    verify = step(
        "verify-window",
        "Count the old rows left to copy, per old bucket; when none is left, mark the "
        "window backfilled in the record.",
    )
    verify.add_argument("--only-buckets", metavar="B,B,...", help=only)
    retire = step(
        "retire-window",
        "On a backfilled window: delete the old rows and the tombstones, close the window.",
    )
    retire.add_argument(
        "--grace",
        type=float_at_least(0),
        metavar="SECONDS",
        help="wait this long after closing the window before the last sweep of tombstones "
        "(default: the window's stored lead)",
    )
    return p


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]] | int:
    """Parse a ``migrate`` command line: the step's arguments and the rest (Beam's options).

    Returns:
        ``(args, beam_args)``, or the exit code when argparse already answered:
        0 after ``--help``, 2 after a usage error (printed on stderr).
    """
    steps = window_parser() if argv and argv[0] in WINDOW_STEPS else parser()
    try:
        return steps.parse_known_args(list(argv))
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
