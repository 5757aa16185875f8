"""Command-line specs of key parts and cutoff policies, shared by the commands.

``saltedtable key``, ``explain``, ``advise``, ``create``, ``guard``, ``inspect``
and ``migrate`` take the same scheme options (``-n``, ``--hash``,
``--key-part``, ``--separator``, ``--marker``, ``--cutoff``/``--time``...):
:func:`add_layout_options` adds them and :func:`layout_from_args` turns their
text into the values. A ``--time`` spec is read in :mod:`.._scheme.flags`,
beside the way from a reader back to its spec.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .._exceptions import SaltSchemeError, UsageError
from .._scheme.cutoff import CutoffPolicy
from .._scheme.flags import time_reader_from_spec
from .._scheme.salt import MAX_BUCKETS, SaltScheme, before_last, fields
from .args import add_hash_options, int_at_least

__all__ = [
    "add_layout_options",
    "add_marker_and_cutoff",
    "add_time_arguments",
    "cutoff_policy_from_args",
    "key_part_from_spec",
    "layout_from_args",
]


def add_layout_options(parser: Any, *, required: bool, default: str | None = None) -> None:
    """Add every scheme option: ``-n``, the hash options, ``--marker`` and the cutoff's.

    Args:
        parser: An argparse parser or argument group.
        required: Whether ``-n/--buckets`` must be given.
        default: Where ``-n`` comes from when it is not given (shown in the help).
    """
    parser.add_argument(
        "-n",
        "--buckets",
        type=int_at_least(1, MAX_BUCKETS),
        required=required,
        help="number of salt buckets N" + ("" if default is None else f" (default: {default})"),
    )
    add_hash_options(parser)
    add_marker_and_cutoff(parser)


def add_marker_and_cutoff(parser: Any) -> None:
    """Add ``--marker``, ``--cutoff``, ``--time``, ``--time-sep`` and ``--unreadable``."""
    parser.add_argument("--marker", default="", help="bytes written before every prefix (text)")
    parser.add_argument(
        "--cutoff",
        metavar="ISO",
        help="forward-only migration: keys with a time before this are unsalted "
        "(e.g. 2024-01-01T00:00:00+00:00)",
    )
    add_time_arguments(parser)


def layout_from_args(args: Any) -> tuple[SaltScheme, CutoffPolicy | None]:
    """The scheme and cutoff of the options :func:`add_layout_options` added.

    Raises:
        SaltSchemeError: A scheme that cannot work (an unknown hash, say).
        UsageError: A bad ``--cutoff`` or ``--time``.
    """
    scheme = SaltScheme(
        args.buckets,
        hash=args.hash,
        key_part=key_part_from_spec(args.key_part),
        separator=args.separator.encode(),
        marker=args.marker.encode(),
    )
    cutoff = cutoff_policy_from_args(args.cutoff, args.time, args.time_sep, args.unreadable)
    return scheme, cutoff


def add_time_arguments(parser: Any) -> None:
    """Add ``--time``, ``--time-sep`` and ``--unreadable`` (the parts of a cutoff policy
    besides ``--cutoff``) to an argparse parser or argument group."""
    parser.add_argument(
        "--time",
        metavar="READER",
        help="where a key's time is: epoch:UNIT[:INDEX[:DIGITS]] (default epoch:s), "
        "reversed:UNIT[:INDEX[:DIGITS]], iso[:INDEX] or be:OFFSET:WIDTH:UNIT",
    )
    parser.add_argument("--time-sep", default="#", help="field separator for --time (#)")
    parser.add_argument(
        "--unreadable",
        choices=("error", "legacy", "salted"),
        default="error",
        help="where keys without a readable time go",
    )


def key_part_from_spec(spec: str | None) -> Callable[[bytes], bytes] | None:
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


def cutoff_policy_from_args(
    cutoff: str | None, time: str | None, time_sep: str, unreadable: str
) -> CutoffPolicy | None:
    """The policy of ``--cutoff WHEN [--time SPEC] [--time-sep SEP] [--unreadable SIDE]``.

    Raises:
        UsageError: A time that is not ISO 8601 with an offset, ``--time``
            without ``--cutoff``, or a bad reader spec.
    """
    if cutoff is None:
        if time is not None:
            raise UsageError("--time needs --cutoff")
        return None
    try:
        when = datetime.fromisoformat(cutoff)
    except ValueError:
        raise UsageError(f"--cutoff {cutoff!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise UsageError(f"--cutoff {cutoff!r} has no UTC offset (add +00:00)")
    reader = time_reader_from_spec(time or "epoch:s", time_sep.encode())
    return CutoffPolicy(when, reader, unreadable=unreadable)  # type: ignore[arg-type]
