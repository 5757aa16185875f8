"""The layout a table's record describes, rebuilt as values (pure).

The layout record names saltedtable's ready-made key parts (``fields``,
``before_last``) and time readers (``epoch_field``, ...) by their ``repr``.
:func:`layout_of_record` turns a record back into the :class:`Layout` it was
made from, so the command line reads a table with the scheme stored in it
instead of one typed by hand. The names are parsed, never evaluated: only a
call of one of those classes with literal arguments is accepted.
"""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._cutoff import (
    CutoffPolicy,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from ._exceptions import LayoutError
from ._layout import Layout
from ._record import DELETING, LayoutRecord
from ._salt import SaltScheme, before_last, fields

__all__ = ["layout_of_record", "ready_made"]

_KEY_PARTS: Final[Mapping[str, Callable[..., Any]]] = {
    "fields": fields,
    "before_last": before_last,
}
_TIME_READERS: Final[Mapping[str, Callable[..., Any]]] = {
    "epoch_field": epoch_field,
    "reversed_epoch_field": reversed_epoch_field,
    "iso8601_field": iso8601_field,
    "big_endian_int": big_endian_int,
}
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ready_made(text: str, known: Mapping[str, Callable[..., Any]]) -> Any | None:
    """The value whose ``repr`` is ``text``, if it is a call of one of ``known``; else None.

    ``text`` is parsed as one call expression whose arguments are literals
    (``fields(k=1, sep=b'#')``); nothing is evaluated but those literals.
    """
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    make = known.get(node.func.id)
    if make is None:
        return None
    try:
        args = [ast.literal_eval(arg) for arg in node.args]
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, TypeError, SyntaxError):
        return None
    if len(kwargs) != len(node.keywords):  # a **mapping argument
        return None
    try:
        return make(*args, **kwargs)
    except (TypeError, ValueError):  # arguments this saltedtable does not take
        return None


def _cutoff_instant(at_micros: int | None, at: str | None) -> dt.datetime:
    if at_micros is not None:
        return _EPOCH + dt.timedelta(microseconds=at_micros)
    if at is not None:
        try:
            when = dt.datetime.fromisoformat(at)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            return when
    raise LayoutError(f"the layout record's cutoff has no instant ({at!r})")


def layout_of_record(record: LayoutRecord) -> Layout:
    """The layout ``record`` describes: the scheme, and the cutoff unless it is being removed.

    A record during a migration's ``deleting`` step describes the cutoff
    layout while only the fully salted one may read (the legacy rows are
    going): that one is returned.

    Raises:
        LayoutError: The record names a custom key part or time reader, which
            only the code that wrote it can rebuild, or a cutoff without an
            instant.
        SaltSchemeError: The record's scheme is one this saltedtable refuses
            (an unknown hash, say).
    """
    key_part = None
    if record.key_part is not None:
        key_part = ready_made(record.key_part, _KEY_PARTS)
        if key_part is None:
            raise LayoutError(
                f"the layout record names the key part {record.key_part!r}, which only the "
                "code that wrote it can rebuild; read the table from Python with that scheme"
            )
    scheme = SaltScheme(
        record.buckets,
        hash=record.hash or "crc32",
        key_part=key_part,
        separator=b"-" if record.separator is None else record.separator,
        marker=record.marker or b"",
    )
    found = record.cutoff
    if found is None or record.migration == DELETING:
        return Layout(scheme)
    reader = None if found.timestamp is None else ready_made(found.timestamp, _TIME_READERS)
    if reader is None:
        raise LayoutError(
            f"the layout record names the time reader {found.timestamp!r}, which only the "
            "code that wrote it can rebuild; read the table from Python with that cutoff"
        )
    unreadable = found.unreadable or "error"
    if unreadable not in ("error", "legacy", "salted"):
        raise LayoutError(f"the layout record's cutoff has unreadable={unreadable!r}")
    policy = CutoffPolicy(
        _cutoff_instant(found.at_micros, found.at),
        reader,
        unreadable=unreadable,  # type: ignore[arg-type]
    )
    return Layout(scheme, policy)
