"""The ``saltedtable`` command line.

Exit codes scripts can trust:

* 0: success (``advise`` succeeds even when it warns).
* 1: a data problem: a key or query the scheme rejects, an input file that
  cannot be read or has a malformed row, a table that cannot be sampled, a
  plot that cannot be written, a Bigtable endpoint that cannot be reached or
  does not answer within ``--timeout``, credentials that cannot be used.
* 2: bad usage, found before any data is read: an unknown option, a bad
  number, an unknown hash, a missing input file, ``--plot`` without
  matplotlib.
* 130: interrupted (Ctrl-C); 141: stdout was closed early (``| head``).

Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import binascii
import contextlib
import importlib
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Final, NoReturn

from .._exceptions import SaltedTableError, UsageError
from .._scheme.layout import Layout
from .._scheme.salt import (
    MAX_BUCKETS,
    SaltScheme,
    format_key,
    prefix_end,
)
from .args import (
    add_command,
    add_hash_options,
    add_instance_options,
    add_timeout_option,
    float_above,
    int_at_least,
)
from .commands import EXIT_DATA, EXIT_USAGE, fail
from .migrate import parse as parse_migrate
from .specs import (
    add_layout_options,
    add_marker_and_cutoff,
    cutoff_policy_from_args,
    key_part_from_spec,
    layout_from_args,
)

__all__ = ["format_key", "main"]

DEFAULT_SAMPLE_LIMIT: Final = 100_000


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked (it costs an import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from .. import __version__

        print(f"saltedtable {__version__}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``saltedtable advise: error: ...``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- shared helpers ------------------------------------------------------------


def _parse_key(text: str, as_hex: bool) -> bytes:
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not hex: {exc}") from exc


def _scheme_factory(args: argparse.Namespace) -> Callable[[int], SaltScheme]:
    key_part = key_part_from_spec(args.key_part)
    separator = args.separator.encode()
    marker = args.marker.encode()

    def make(buckets: int) -> SaltScheme:
        return SaltScheme(
            buckets, hash=args.hash, key_part=key_part, separator=separator, marker=marker
        )

    make(1)  # an unknown hash or a bad separator is a usage error, before any data is read
    return make


def _show(key: bytes, as_hex: bool) -> str:
    return key.hex() if as_hex else format_key(key)


def _candidates(text: str) -> tuple[int, ...]:
    parse = int_at_least(1, MAX_BUCKETS)
    try:
        values = tuple(parse(part.strip()) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"bucket counts: {exc}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one bucket count, e.g. 1,2,4,8")
    return tuple(sorted(set(values)))


#: ``advise``'s model options, in ``--help`` order: flag, type (``bool``: a switch), metavar
#: and help. None has an argparse default: the advisor's own applies, and the help says
#: which (a test keeps the two equal).
_MODEL_OPTIONS: Final[tuple[tuple[str, Callable[[str], object], str | None, str], ...]] = (
    (
        "--candidates",
        _candidates,
        "N,N,...",
        "bucket counts to simulate (default 1,2,4,8,16,32,64)",
    ),
    (
        "--tablets",
        int_at_least(1, 100_000),
        "T",
        "tablets the key space is split into (default 32)",
    ),
    ("--target", float_above(1), None, "max/mean to reach (default 1.5)"),
    (
        "--windows",
        int_at_least(1, 10_000),
        "W",
        "time windows (default: chosen from the data, the coarsest of 1, 2, 4 .. 64 "
        "that still show the unsalted hot spot, at least 32 accesses per tablet per window)",
    ),
    (
        "--count-unit",
        float_above(0),
        "U",
        "the count of one access: a line of count c is c/U accesses (default: the "
        "count when every line has the same one, a 1-in-U sample; else 1)",
    ),
    (
        "--ordered",
        bool,
        None,
        "without a time column, the lines are in arrival order even if sorted",
    ),
    (
        "--limit",
        int_at_least(1),
        None,
        "row limit of the scan whose read cost is shown (default 100)",
    ),
    (
        "--resamples",
        int_at_least(20, 100_000),
        "R",
        "resamples behind each 95%% interval (default 200)",
    ),
)


# -- key, explain, emulator --------------------------------------------------------


def _cmd_key(args: argparse.Namespace) -> int:
    keys = [_parse_key(text, args.hex) for text in args.keys]  # bad hex: before any request
    if args.table is not None:
        given = [flag for dest, flag in _LAYOUT_FLAGS.items() if _given(args, dest)]
        if given:
            raise UsageError(
                f"--table takes the layout from the table's record: leave out {', '.join(given)}"
            )
        from .admin import api_errors

        return api_errors(lambda args: _keys_of_table(args, keys))(args)
    if args.buckets is None:
        raise UsageError("give -n/--buckets N (and the other scheme options), or --table")
    scheme, cutoff = layout_from_args(args)
    return _show_keys(Layout(scheme, cutoff), keys, args)


#: The scheme options ``key --table`` refuses (the record gives them), by destination.
_LAYOUT_FLAGS: Final = {
    "buckets": "-n/--buckets",
    "hash": "--hash",
    "key_part": "--key-part",
    "separator": "--separator",
    "marker": "--marker",
    "cutoff": "--cutoff",
    "time": "--time",
    "time_sep": "--time-sep",
    "unreadable": "--unreadable",
}


def _given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the option ``dest`` was set to something other than its default."""
    return bool(getattr(args, dest) != args.layout_defaults[dest])


def _keys_of_table(args: argparse.Namespace, keys: list[bytes]) -> int:
    from .read import recorded_table

    with recorded_table(args) as table:
        layout = table.layout
    return _show_keys(layout, keys, args)


def _show_keys(layout: Layout, keys: list[bytes], args: argparse.Namespace) -> int:
    """Print each key's bucket (or ``legacy``) and its physical (or logical) key."""
    status = 0
    for key in keys:
        try:
            bucket, other = _unsalt(layout, key) if args.unsalt else layout.locate(key)
        except SaltedTableError as exc:
            print(f"saltedtable key: error: {exc}", file=sys.stderr)
            status = EXIT_DATA
            continue
        where = "legacy" if bucket is None else f"bucket {bucket}"
        print(f"{_show(key, args.hex)}\t{where}\t{_show(other, args.hex)}")
    return status


def _unsalt(layout: Layout, physical: bytes) -> tuple[int | None, bytes]:
    """``(bucket, logical key)`` of a physical key; bucket None for a cutoff's legacy key."""
    if layout.cutoff is not None and not layout.scheme.has_prefix(physical):
        return None, physical
    return layout.scheme.split_key(physical)


def _cmd_explain(args: argparse.Namespace) -> int:
    from google.cloud.bigtable.data import ReadRowsQuery, RowRange

    from .._read.plan import plan_reads

    scheme, cutoff = layout_from_args(args)
    keys: list[str | bytes] = [_parse_key(k, args.hex) for k in args.key or ()]
    ranges: list[RowRange] = []
    if args.prefix is not None:
        p = _parse_key(args.prefix, args.hex)
        ranges.append(RowRange(p or None, prefix_end(p) or None))
    if args.start is not None or args.end is not None:
        ranges.append(
            RowRange(
                _parse_key(args.start, args.hex) if args.start else None,
                _parse_key(args.end, args.hex) if args.end else None,
            )
        )
    query = ReadRowsQuery(row_keys=keys, row_ranges=ranges, limit=args.limit)
    print(plan_reads(query, scheme, cutoff).explain())
    return 0


def _table_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``ID`` or ``ID:FAMILY[,FAMILY...]`` (default family ``cf``), checked as ``create``
    checks them: ids Bigtable would refuse are usage errors before the emulator starts."""
    from .._create import check_table_id
    from .._guard.families import check_family_name

    table_id, _, families = spec.partition(":")
    names = tuple(name for name in families.split(",") if name) if families else ("cf",)
    if not table_id or not names:
        raise argparse.ArgumentTypeError(f"expected ID or ID:FAMILY[,FAMILY...], got {spec!r}")
    try:
        check_table_id(table_id)
        for name in names:
            check_family_name(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"family {twice[0]!r} is given twice in {spec!r}")
    return table_id, names


def _resource_id(text: str) -> str:
    """A project or instance id for the emulator: not empty, no space (it is exported)."""
    if not text or text != text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"expected an id without spaces, got {text!r}")
    return text


@contextlib.contextmanager
def _quiet_import_logs() -> Iterator[None]:
    """Say nothing of what Apache Beam logs while it is imported (optional packages it lacks)."""
    logging.basicConfig()  # the handler Beam sets up anyway, made before its import logs
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


def _cmd_migrate(args: argparse.Namespace) -> int:
    # Parsed without Beam, so --help and usage errors work where it is not installed.
    parsed = parse_migrate(args.argv)
    if isinstance(parsed, int):
        return parsed
    step_args, beam_args = parsed
    try:
        with _quiet_import_logs():
            beam_cli = importlib.import_module("saltedtable.beam._cli")
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "apache_beam":
            raise
        raise UsageError(
            f"the {step_args.step} step runs on Apache Beam, which is not installed: "
            "pip install 'apache-beam>=2.60' (saltedtable's beam extra)"
        ) from None
    code: int = beam_cli.run_step(step_args, beam_args)
    return code


def _cmd_emulator(args: argparse.Namespace) -> int:
    # Imported here: it loads the Bigtable admin client, which no other command needs.
    from .emulator import run_emulator

    return run_emulator(
        port=args.port,
        tables=args.table,
        command=args.command,
        project=args.project,
        instance=args.instance,
        binary=args.binary,
        startup_timeout=args.startup_timeout,
    )


def _cmd_advise(args: argparse.Namespace) -> int:
    if (args.input is None) == (args.table is None):
        raise UsageError("give a sample FILE (or - for stdin), or --table to sample a table")
    if args.table is not None:
        args.project = args.project or os.environ.get("SALTEDTABLE_PROJECT")
        args.instance = args.instance or os.environ.get("SALTEDTABLE_INSTANCE")
        if not args.project or not args.instance:
            raise UsageError("--table needs --project and --instance")
    # The advisor is imported only here: `saltedtable key` does not pay for it.
    # (Its defaults are spelled out in the --help texts; a test keeps them equal.)
    from ..advise import model
    from ..advise.run import AdviseRequest, run

    candidates = tuple(args.candidates or model.DEFAULT_CANDIDATES)
    if args.buckets is not None:
        candidates += (args.buckets,)
    request = AdviseRequest(
        scheme_for=_scheme_factory(args),
        candidates=candidates,
        cutoff=cutoff_policy_from_args(args.cutoff, args.time, args.time_sep, args.unreadable),
        input=args.input,
        table=args.table,
        project=args.project,
        instance=args.instance,
        sample_limit=args.sample_limit,
        timeout=args.timeout,
        format=args.format,
        hex=args.hex,
        tablets=args.tablets,
        target=args.target,
        windows=args.windows,
        limit=args.limit,
        ordered=args.ordered,
        resamples=args.resamples,
        seed=args.seed,
        count_unit=args.count_unit,
        buckets=args.buckets,
        plot=args.plot,
        json=args.json,
        hash_name=args.hash,
        key_part=args.key_part,
        progress=args.progress,
    )
    return run(request)


# -- the parser ------------------------------------------------------------------------------

_ADVISE_EPILOG: Final = """\
input: CSV with columns key[,count][,time] (a header line "key,count,time" is
optional and may reorder them) or NDJSON lines {"key": ..., "count": ..., "time": ...}.
count is the load of the line (default 1): that many accesses, or one access a
line when every line has the same count (a 1-in-U sample; --count-unit sets U).
A count of 0 lists a key for storage only (no time needed). time is a number
(e.g. epoch seconds) or an ISO 8601 date. Without times the line order is the
time axis, unless the lines are sorted by key (a key dump) or give each key
once with counts that differ (per-key totals): one window.

model: the distinct keys, in their unsalted or salted order, are cut into
--tablets tablets of equal key count (Bigtable splits tablets by size); each
line adds its count to its tablet in its time window. max/mean is the hottest
tablet's load over the mean tablet's, per window, weighted by load. Chance
alone raises it: each max/mean is shown corrected, with a 95% interval, next
to the noise floor (what a perfectly uniform workload sampled the same way
shows). The recommendation is the smallest candidate N whose interval is at or
below --target, or whose max/mean is within the noise floor: every scan of a
salted table costs N sub-scans. Keys that rise with time (timestamp-first) also
need the "ends" column (the max/mean at one moment, every new key at the end of
its bucket) at or below --target, and never get N = 1. With --table, a salted
table's keys are unsalted with its layout record first. Details: docs/advise.md.

examples:
  saltedtable advise access-log.csv
  saltedtable advise --json --plot heat.png events.ndjson
  saltedtable advise --table events --instance my-instance --project my-project
"""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="saltedtable", description="Salted row keys for Google Cloud Bigtable.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # The table commands (create, guard, inspect; read, lookup, count) and key's table
    # options: the Bigtable clients are imported only when one of them runs.
    from .admin import add_location_options, add_table_commands
    from .read import add_read_commands, add_table_source
    from .resalt import add_resalt_command
    from .window import add_window_command

    key = add_command(
        sub,
        "key",
        _cmd_key,
        help="logical -> physical key (or back with --unsalt)",
        description="Show the bucket (or 'legacy', before a cutoff) and the physical key of "
        "logical keys, or the reverse. The layout is the scheme options', or with --table "
        "the one a table's layout record describes.",
    )
    add_layout_options(key, required=False, default="the record's, with --table")
    key.add_argument("--unsalt", action="store_true", help="physical -> logical")
    key.add_argument("--table", metavar="ID", help="take the layout from this table's record")
    add_location_options(key)
    add_table_source(key)
    key.add_argument("keys", nargs="+", metavar="KEY")
    key.set_defaults(layout_defaults={dest: key.get_default(dest) for dest in _LAYOUT_FLAGS})

    explain = add_command(
        sub,
        "explain",
        _cmd_explain,
        help="the physical sub-queries of a logical read",
        description="Show the physical sub-queries a logical read turns into.",
    )
    add_layout_options(explain, required=True)
    explain.add_argument("--key", action="append", help="a point key (repeatable)")
    explain.add_argument("--prefix", help="a key prefix to scan")
    explain.add_argument("--start", help="range start (inclusive)")
    explain.add_argument("--end", help="range end (exclusive)")
    explain.add_argument("--limit", type=int_at_least(1), help="row limit")

    adv = add_command(
        sub,
        "advise",
        _cmd_advise,
        help="simulate hot tablets unsalted vs salted and recommend a bucket count",
        description="Simulate how a range-partitioned store spreads the load of a key sample\n"
        "or access log, unsalted and salted with each candidate bucket count N, and\n"
        "recommend the smallest N that meets the target.",
        epilog=_ADVISE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adv.add_argument("input", nargs="?", metavar="FILE", help="CSV or NDJSON sample; - for stdin")
    adv.add_argument(
        "--format", choices=("auto", "csv", "ndjson"), default="auto", help="input format"
    )
    adv.add_argument("--table", metavar="ID", help="sample the keys of this Bigtable table")
    add_instance_options(adv)
    adv.add_argument(
        "--sample-limit",
        type=int_at_least(1),
        default=DEFAULT_SAMPLE_LIMIT,
        metavar="ROWS",
        help=f"rows to sample with --table (default {DEFAULT_SAMPLE_LIMIT:,})",
    )
    add_timeout_option(adv, "operation timeout of each Bigtable call with --table")
    for flag, kind, metavar, text in _MODEL_OPTIONS:
        if kind is bool:
            adv.add_argument(flag, action="store_true", help=text)
        else:
            adv.add_argument(flag, type=kind, metavar=metavar, help=text)
    adv.add_argument(
        "--seed", type=int, default=0, help="random seed of the resampling (default 0)"
    )
    adv.add_argument(
        "-n",
        "--buckets",
        type=int_at_least(1, MAX_BUCKETS),
        help="also simulate N and draw it in --plot (default: the recommended N)",
    )
    add_hash_options(adv)
    add_marker_and_cutoff(adv)
    adv.add_argument("--json", action="store_true", help="print the report as JSON")
    adv.add_argument("--plot", metavar="PNG", help="write a Key Visualizer-style heat map")
    adv.add_argument(
        "--progress", action="store_true", help="show progress on stderr even if not a terminal"
    )

    # Apache Beam pipelines: parsed and run by saltedtable.beam, imported only here.
    migrate = add_command(
        sub,
        "migrate",
        _cmd_migrate,
        help="backfill, verify, cut over or resalt a table on Apache Beam (the beam extra)",
        add_help=False,
    )
    migrate.add_argument("argv", nargs=argparse.REMAINDER)

    emu = add_command(
        sub,
        "emulator",
        _cmd_emulator,
        help="run the Bigtable emulator, in the foreground or around a command",
        description="Run the official Bigtable emulator (cbtemulator) on 127.0.0.1. Without "
        "COMMAND it runs in the foreground until Ctrl-C and prints the export lines for "
        "BIGTABLE_EMULATOR_HOST, SALTEDTABLE_PROJECT and SALTEDTABLE_INSTANCE (what the other "
        "commands read); with `-- COMMAND ARGS...` it runs COMMAND with them set, then stops "
        "and exits with COMMAND's exit code.",
        usage="%(prog)s [--port N] [--table ID[:FAM1,FAM2]]... [-- COMMAND ARGS...]",
    )
    emu.add_argument(
        "--port",
        type=int_at_least(1, 65535),
        metavar="N",
        help="port on 127.0.0.1 (default: a free one)",
    )
    emu.add_argument(
        "--table",
        action="append",
        type=_table_spec,
        default=[],
        metavar="ID[:FAM1,FAM2]",
        help="create this table (default family: cf); repeatable",
    )
    emu.add_argument(
        "--project", type=_resource_id, default="test-project", help="default: test-project"
    )
    emu.add_argument(
        "--instance", type=_resource_id, default="test-instance", help="default: test-instance"
    )
    emu.add_argument(
        "--binary",
        metavar="PATH",
        help="cbtemulator to run (default: $SALTEDTABLE_CBTEMULATOR, the Cloud SDK, PATH)",
    )
    emu.add_argument(
        "--startup-timeout",
        type=float_above(0),
        default=30.0,
        metavar="SECONDS",
        help="seconds to wait for the emulator (default 30)",
    )
    emu.add_argument("command", nargs="*", metavar="-- COMMAND", help="run this, then stop")

    add_table_commands(sub)
    add_resalt_command(sub)
    add_window_command(sub)
    add_read_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 1 data problem, 2 usage)."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["migrate"]:  # everything after it, --help included, is the step's
            args = argparse.Namespace(command="migrate", func=_cmd_migrate, argv=argv[1:])
        else:
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
    prog = f"saltedtable {args.command}"
    try:
        code: int = args.func(args)
    except BrokenPipeError as exc:
        # `saltedtable advise ... | head`: the reader left; say nothing more.
        _silence_stdout()
        return fail(prog, exc)
    except (argparse.ArgumentTypeError, SaltedTableError, KeyboardInterrupt) as exc:
        return fail(prog, exc)  # the one mapping of errors to statuses (_commands)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
