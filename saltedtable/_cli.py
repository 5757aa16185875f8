"""The ``saltedtable`` command line.

Exit codes: 0 success, 1 a key or query the scheme rejects, 2 bad usage
(unknown option, bad number, unknown hash). Errors are one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import binascii
import sys
from collections.abc import Callable, Sequence

from google.cloud.bigtable.data import ReadRowsQuery, RowRange

from . import __version__
from ._exceptions import SaltedTableError, SaltSchemeError
from ._plan import plan_reads
from ._salt import HASHES, SaltScheme, before_last, fields, prefix_end

__all__ = ["main"]


def format_key(key: bytes) -> str:
    """Show a key as text, escaping anything that is not printable ASCII (``\\xNN``)."""
    return "".join(
        chr(b) if 0x20 <= b < 0x7F and b != 0x5C else ("\\\\" if b == 0x5C else f"\\x{b:02x}")
        for b in key
    )


def _parse_key(text: str, as_hex: bool) -> bytes:
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not hex: {exc}") from exc


def _key_part(spec: str | None) -> Callable[[bytes], bytes] | None:
    """Parse ``fields:K[:SEP]`` or ``before-last[:SEP]``."""
    if spec is None:
        return None
    name, _, rest = spec.partition(":")
    if name == "fields":
        count, _, sep = rest.partition(":")
        try:
            k = int(count)
        except ValueError:
            raise SaltSchemeError(
                f"--key-part fields:K needs an integer K, got {count!r}"
            ) from None
        return fields(k, sep.encode() if sep else b"#")
    if name == "before-last":
        return before_last(rest.encode() if rest else b"-")
    raise SaltSchemeError(f"unknown --key-part {spec!r}; use fields:K[:SEP] or before-last[:SEP]")


def _add_scheme_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--buckets", type=int, required=True, help="number of salt buckets N")
    parser.add_argument("--hash", default="crc32", help=f"one of {', '.join(HASHES)}")
    parser.add_argument(
        "--key-part",
        metavar="SPEC",
        help="hash part of the key: fields:K[:SEP] (first K fields, SEP default '#') "
        "or before-last[:SEP] (before the last SEP, default '-')",
    )
    parser.add_argument("--separator", default="-", help="separator after a decimal prefix")
    parser.add_argument("--hex", action="store_true", help="keys are given (and shown) as hex")


def _scheme(args: argparse.Namespace) -> SaltScheme:
    return SaltScheme(
        args.buckets,
        hash=args.hash,
        key_part=_key_part(args.key_part),
        separator=args.separator.encode(),
    )


def _show(key: bytes, as_hex: bool) -> str:
    return key.hex() if as_hex else format_key(key)


def _cmd_key(args: argparse.Namespace) -> int:
    scheme = _scheme(args)
    status = 0
    for text in args.keys:
        key = _parse_key(text, args.hex)
        try:
            if args.unsalt:
                bucket, logical = scheme.split_key(key)
                print(f"{_show(key, args.hex)}\tbucket {bucket}\t{_show(logical, args.hex)}")
            else:
                bucket, physical = scheme.locate(key)
                print(f"{_show(key, args.hex)}\tbucket {bucket}\t{_show(physical, args.hex)}")
        except SaltedTableError as exc:
            print(f"saltedtable key: {exc}", file=sys.stderr)
            status = 1
    return status


def _cmd_explain(args: argparse.Namespace) -> int:
    scheme = _scheme(args)
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
    print(plan_reads(query, scheme).explain())
    return 0


def _cmd_emulator(args: argparse.Namespace) -> int:
    from .testing import main as emulator_main

    argv: list[str] = []
    if args.port:
        argv += ["--port", str(args.port)]
    for table in args.table or ():
        argv += ["--table", table]
    return emulator_main(argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="saltedtable", description="Salted row keys for Google Cloud Bigtable."
    )
    parser.add_argument("--version", action="version", version=f"saltedtable {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    key = sub.add_parser("key", help="logical -> physical key (or back with --unsalt)")
    _add_scheme_options(key)
    key.add_argument("--unsalt", action="store_true", help="physical -> logical")
    key.add_argument("keys", nargs="+", metavar="KEY")
    key.set_defaults(func=_cmd_key)

    explain = sub.add_parser("explain", help="the physical sub-queries of a logical read")
    _add_scheme_options(explain)
    explain.add_argument("--key", action="append", help="a point key (repeatable)")
    explain.add_argument("--prefix", help="a key prefix to scan")
    explain.add_argument("--start", help="range start (inclusive)")
    explain.add_argument("--end", help="range end (exclusive)")
    explain.add_argument("--limit", type=int, help="row limit")
    explain.set_defaults(func=_cmd_explain)

    emu = sub.add_parser("emulator", help="run the Bigtable emulator in the foreground")
    emu.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    emu.add_argument("--table", action="append", help="create ID[:fam1,fam2] (repeatable)")
    emu.set_defaults(func=_cmd_emulator)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except argparse.ArgumentTypeError as exc:
        parser.print_usage(sys.stderr)
        print(f"saltedtable: error: {exc}", file=sys.stderr)
        return 2
    except SaltSchemeError as exc:
        print(f"saltedtable: error: {exc}", file=sys.stderr)
        return 2
    except SaltedTableError as exc:
        print(f"saltedtable: error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
