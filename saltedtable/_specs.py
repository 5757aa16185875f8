"""Command-line specs of key parts and cutoff policies, shared by the commands.

``saltedtable explain``, ``advise`` and ``migrate`` take the same ``--key-part``
and ``--cutoff``/``--time`` options; this turns their text into the values.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ._cutoff import (
    CutoffPolicy,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from ._exceptions import SaltSchemeError, UsageError
from ._salt import before_last, fields

__all__ = [
    "add_time_arguments",
    "cutoff_policy_from_args",
    "key_part_from_spec",
    "time_reader_from_spec",
]


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


def time_reader_from_spec(spec: str, sep: bytes) -> Callable[[bytes], int]:
    """Parse ``epoch:UNIT[:INDEX[:DIGITS]]``, ``reversed:UNIT[:INDEX[:DIGITS]]``,
    ``iso[:INDEX]`` or ``be:OFFSET:WIDTH:UNIT``."""
    name, *parts = spec.split(":")
    try:
        nums = [int(p) for p in parts[1:]] if name in ("epoch", "reversed") else []
        if name in ("epoch", "reversed"):
            unit = parts[0] if parts else ("s" if name == "epoch" else "ms")
            index = nums[0] if nums else -1
            digits = nums[1] if len(nums) > 1 else None
            reader = epoch_field if name == "epoch" else reversed_epoch_field
            return reader(unit=unit, sep=sep, index=index, digits=digits)
        if name == "iso":
            return iso8601_field(sep=sep, index=int(parts[0]) if parts else -1)
        if name == "be" and len(parts) == 3:
            return big_endian_int(offset=int(parts[0]), width=int(parts[1]), unit=parts[2])
    except ValueError as exc:
        raise UsageError(f"--time {spec!r}: {exc}") from None
    raise UsageError(
        f"--time {spec!r}: use epoch:UNIT[:INDEX[:DIGITS]], reversed:UNIT[:INDEX[:DIGITS]], "
        "iso[:INDEX] or be:OFFSET:WIDTH:UNIT"
    )


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
