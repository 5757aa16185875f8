"""How ``saltedtable read`` and ``lookup`` print rows: as ``cbt`` does, or as JSON (pure).

Text (:func:`row_text`) follows ``cbt read``/``cbt lookup``: a line of 40
dashes, the row key, then for each cell (by family, then qualifier; newest
first within a column) ``  family:qualifier`` padded to 40 columns, ``@`` and
the cell's time in local time (``2024/05/01-12:00:00.000000``), and on the
next line, indented by four spaces, the value quoted as Go's ``%q`` quotes it;
a blank line ends the row. Keys and qualifiers are shown with
:func:`~saltedtable._scheme.salt.format_key` (printable ASCII as is, other bytes as
``\\xNN``); with ``hex``, keys are shown as hex.

JSON (:func:`row_json`) is one object per row: ``key`` and ``cells``, each
cell with ``family``, ``qualifier``, ``timestamp_micros`` and ``value``.
Bytes are JSON strings with one character per byte, the character whose code
point is the byte's value (ISO-8859-1): ASCII reads as itself, and
``text.encode("latin-1")`` gives the bytes back exactly. With ``hex`` the key
is hex instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from .._scheme.salt import format_key

if TYPE_CHECKING:
    from google.cloud.bigtable.data.row import Cell, Row

__all__ = ["bytes_text", "cbt_time", "go_quote", "row_json", "row_text", "text_bytes"]

_RULE: Final = "-" * 40
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: Go's short escapes (strconv.Quote).
_SHORT: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(data: bytes) -> str:
    """``data`` as Go's ``%q`` writes a byte string (``strconv.Quote``).

    Valid UTF-8 that prints stays as it is; ``\\n``-style escapes for the
    usual control characters; ``\\xNN`` for other control bytes and for bytes
    that are not UTF-8; ``\\uNNNN``/``\\UNNNNNNNN`` for characters that do
    not print.
    """
    out = ['"']
    i = 0
    while i < len(data):
        char, size = _next_char(data, i)
        if char is None:
            out.append(f"\\x{data[i]:02x}")
        elif char in _SHORT:
            out.append(_SHORT[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
        i += size
    out.append('"')
    return "".join(out)


def _next_char(data: bytes, i: int) -> tuple[str | None, int]:
    """The UTF-8 character at ``data[i]`` and its length; (None, 1) for a byte that starts none."""
    first = data[i]
    size = 1 if first < 0x80 else 2 if 0xC2 <= first < 0xE0 else 3 if first < 0xF0 else 4
    if first >= 0xF5 or 0x80 <= first < 0xC2:
        return None, 1
    try:
        return data[i : i + size].decode("utf-8"), size
    except UnicodeDecodeError:
        return None, 1


def cbt_time(micros: int, tz: dt.tzinfo | None = None) -> str:
    """A cell's time as cbt shows it: ``YYYY/MM/DD-HH:MM:SS.ffffff`` in ``tz`` (None: local)."""
    when = (_EPOCH + dt.timedelta(microseconds=micros)).astimezone(tz)
    return when.strftime("%Y/%m/%d-%H:%M:%S.%f")


def _ordered(cells: Iterable[Cell]) -> list[Cell]:
    # Stable: the server's order (newest first) stays within a column.
    return sorted(cells, key=lambda cell: (cell.family, cell.qualifier))


def row_text(row: Row, *, hex: bool = False, tz: dt.tzinfo | None = None) -> str:
    """The row as ``cbt read`` prints it, ending with its blank line (see the module)."""
    lines = [_RULE, row.row_key.hex() if hex else format_key(row.row_key)]
    for cell in _ordered(row.cells):
        column = f"{cell.family}:{format_key(cell.qualifier)}"
        lines.append(f"  {column:<40} @ {cbt_time(cell.timestamp_micros, tz)}")
        lines.append(f"    {go_quote(cell.value)}")
    lines.append("")
    return "\n".join(lines) + "\n"


def bytes_text(data: bytes) -> str:
    """Bytes as a JSON-safe string, one character per byte (ISO-8859-1); see :func:`text_bytes`."""
    return data.decode("latin-1")


def text_bytes(text: str) -> bytes:
    """The bytes :func:`bytes_text` rendered."""
    return text.encode("latin-1")


def row_json(row: Row, *, hex: bool = False) -> dict[str, Any]:
    """The row as one JSON object (see the module for how bytes are written)."""
    return {
        "key": row.row_key.hex() if hex else bytes_text(row.row_key),
        "cells": [
            {
                "family": cell.family,
                "qualifier": bytes_text(cell.qualifier),
                "timestamp_micros": cell.timestamp_micros,
                "value": bytes_text(cell.value),
            }
            for cell in _ordered(row.cells)
        ],
    }
