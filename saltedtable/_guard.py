"""The scheme guard: the layout a table was written with, stored in the table.

Pure code. The bucket count, hash, key part, separator, marker and cutoff are
part of the data's meaning: reading with another scheme silently misses rows.
:func:`describe_layout` turns a layout into a small JSON record that
``SaltedTableAsync.open`` stores in one reserved row the first time a table is
used and compares on every later open.

The reserved row :data:`SCHEME_ROW_KEY` starts with ``0xff 0xfe``: outside
every salted prefix range (decimal prefixes start with a digit, ``-`` or the
marker) and excluded from the legacy side of a cutoff layout, so no read ever
returns it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, Final

from ._cutoff import CutoffPolicy
from ._exceptions import LayoutError
from ._salt import SCHEME_ROW_KEY, SaltScheme

__all__ = [
    "SCHEME_QUALIFIER",
    "SCHEME_ROW_KEY",
    "SchemeMismatchError",
    "describe_layout",
    "layout_differences",
]

#: The column qualifier of the record.
SCHEME_QUALIFIER: Final = b"scheme"
_VERSION: Final = 1


class SchemeMismatchError(LayoutError):
    """The table was written with a different layout than the one it is opened with.

    Attributes:
        stored: The layout record found in the table.
        current: The layout record of the scheme it was opened with.
    """

    def __init__(self, stored: dict[str, Any], current: dict[str, Any]) -> None:
        self.stored = stored
        self.current = current
        lines = "\n".join(f"  {d}" for d in layout_differences(stored, current))
        super().__init__(
            "this table was written with a different salt layout; reading it with the "
            f"new one would miss rows:\n{lines}\n"
            f"  stored:  {json.dumps(stored, sort_keys=True)}\n"
            f"  current: {json.dumps(current, sort_keys=True)}\n"
            "Open it with the stored scheme, or pass override_scheme=True after you have "
            "rewritten the data (the stored record is then replaced)."
        )


def _callable_name(func: Callable[..., Any] | None) -> str | None:
    if func is None:
        return None
    if dataclasses.is_dataclass(func):
        return repr(func)  # the ready-made key parts and readers: a stable repr
    module = getattr(func, "__module__", None) or type(func).__module__
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}.{name}"


def describe_layout(scheme: SaltScheme, cutoff: CutoffPolicy | None = None) -> dict[str, Any]:
    """The JSON-friendly record of a layout (what a reader must agree on)."""
    record: dict[str, Any] = {
        "version": _VERSION,
        "buckets": scheme.buckets,
        "hash": scheme.hash,
        "key_part": _callable_name(scheme.key_part),
        "separator": scheme.separator.hex(),
        "marker": scheme.marker.hex(),
        "cutoff": None,
    }
    if cutoff is not None:
        record["cutoff"] = {
            "at": cutoff.cutoff.isoformat(),
            "at_micros": cutoff.cutoff_micros,
            "timestamp": _callable_name(cutoff.timestamp),
            "unreadable": cutoff.unreadable,
        }
    return record


def encode_layout(record: dict[str, Any]) -> bytes:
    """The stored form of a record."""
    return json.dumps(record, sort_keys=True).encode()


def decode_layout(value: bytes) -> dict[str, Any]:
    """Parse a stored record.

    Raises:
        LayoutError: The reserved row holds something that is not a record.
    """
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(
            f"the reserved row {SCHEME_ROW_KEY!r} holds {value[:80]!r}, not a layout record"
        ) from exc
    if not isinstance(record, dict) or "buckets" not in record:
        raise LayoutError(f"the reserved row {SCHEME_ROW_KEY!r} holds {record!r}")
    return record


def layout_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable differences between two records (empty when they agree).

    The cutoff's ``at`` text is not compared, only the instant it names.
    """
    diffs = []
    for name in sorted(stored.keys() | current.keys()):
        if name == "version":
            continue
        a, b = stored.get(name), current.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            a = {k: v for k, v in a.items() if k != "at"}
            b = {k: v for k, v in b.items() if k != "at"}
        if a != b:
            diffs.append(f"{name}: stored {a!r}, now {b!r}")
    return diffs
