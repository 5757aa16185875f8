"""Argument types and option groups shared by every ``saltedtable`` command.

Pure (argparse only). ``main`` (key, advise, emulator), ``admin`` (create,
inspect, guard) and ``migrate`` (migrate) all parse with these, so a bad
number reads the same whichever command it was given to.
"""

from __future__ import annotations

import argparse
import binascii
import math
from collections.abc import Callable
from typing import Any

from .._connection import DEFAULT_TIMEOUT
from .._exceptions import UsageError
from .._scheme.salt import HASHES

__all__ = [
    "add_command",
    "add_hash_options",
    "add_instance_options",
    "add_timeout_option",
    "float_above",
    "float_at_least",
    "int_at_least",
    "key_from_text",
]


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low`` (and at most ``high``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {value}")
        return value

    return parse


def float_above(low: float) -> Callable[[str], float]:
    """An argparse type: a finite number greater than ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (value > low and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a number > {low:g}, got {text}")
        return value

    return parse


def float_at_least(low: float) -> Callable[[str], float]:
    """An argparse type: a finite number of at least ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (value >= low and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a number >= {low:g}, got {text}")
        return value

    return parse


def key_from_text(text: str, *, as_hex: bool, option: str) -> bytes:
    """A row key given to ``option``: its text as UTF-8, or with ``--hex`` the bytes it spells.

    Raises:
        UsageError: Text that is not hex (with ``as_hex``), naming ``option``.
    """
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        raise UsageError(f"{option} {text!r} is not hex (--hex is given): {exc}") from None


def add_command(
    sub: Any, name: str, run: Callable[[argparse.Namespace], int], **options: Any
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, which runs ``run`` (its exit status is the command's).

    Args:
        sub: The main parser's subcommands.
        options: What ``add_parser`` takes besides the name (``help``, ``description``...).
    """
    parser: argparse.ArgumentParser = sub.add_parser(name, **options)
    parser.set_defaults(func=run)
    return parser


def add_timeout_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--timeout SECONDS``: ``what`` it bounds, with the default every command shares."""
    parser.add_argument(
        "--timeout",
        type=float_above(0),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"{what} (default {DEFAULT_TIMEOUT:g})",
    )


def add_instance_options(parser: argparse.ArgumentParser) -> None:
    """``--instance`` and ``--project``: where a table is (each with its environment default)."""
    parser.add_argument("--instance", help="Bigtable instance (default: $SALTEDTABLE_INSTANCE)")
    parser.add_argument("--project", help="Google Cloud project (default: $SALTEDTABLE_PROJECT)")


def add_hash_options(parser: argparse.ArgumentParser) -> None:
    """``--hash``, ``--key-part``, ``--separator`` and ``--hex``: how keys are salted and shown."""
    parser.add_argument("--hash", default="crc32", help=f"one of {', '.join(HASHES)}")
    parser.add_argument(
        "--key-part",
        metavar="SPEC",
        help="hash part of the key: fields:K[:SEP] (first K fields, SEP default '#') "
        "or before-last[:SEP] (before the last SEP, default '-')",
    )
    parser.add_argument("--separator", default="-", help="separator after a decimal prefix")
    parser.add_argument("--hex", action="store_true", help="keys are given (and shown) as hex")
