"""A stored layout record as the command-line flags that reproduce it (pure).

The layout record names a key part and a cutoff's time reader by a stable
text (``fields(k=1, sep=b'#')``, ``epoch_field(unit='ms', sep=b'#', index=1,
digits=13)``): the value of a ready-made one, the name of a custom one. The
commands take ``--key-part fields:1`` and ``--time epoch:ms:1:13`` instead.
:func:`layout_flags` turns a record into those flags, so that ``inspect``
and a refusal can say what to type; :func:`rebuild_time_reader` and
:func:`rebuild_key_part` give back the ready-made value a text names, and
:func:`time_reader_from_spec` the reader a ``--time`` spec names.

The record is read as its stored JSON object (what
:meth:`~saltedtable.LayoutRecord.as_dict` returns), and never changed.
"""

from __future__ import annotations

import ast
import datetime as dt
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from .._exceptions import UsageError
from .cutoff import (
    LONG_MAX,
    CutoffPolicy,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from .salt import before_last, fields

__all__ = [
    "LayoutFlags",
    "layout_flags",
    "rebuild_cutoff",
    "rebuild_key_part",
    "rebuild_time_reader",
    "stored_instant",
    "time_reader_from_spec",
]

#: The ready-made time readers, by the name their stored text starts with.
_READERS: Final[dict[str, Callable[..., Any]]] = {
    "epoch_field": epoch_field,
    "reversed_epoch_field": reversed_epoch_field,
    "iso8601_field": iso8601_field,
    "big_endian_int": big_endian_int,
}
_KEY_PARTS: Final[dict[str, Callable[..., Any]]] = {"fields": fields, "before_last": before_last}
#: What the commands assume when a flag is left out.
_DEFAULT_HASH: Final = "crc32"
_DEFAULT_SEPARATOR: Final = b"-"
_DEFAULT_TIME_SEP: Final = b"#"


def _rebuild(text: str | None, known: Mapping[str, Callable[..., Any]]) -> Any:
    """The ready-made value whose stored text is ``text``, or None (a custom one, or not one).

    Only a call of a known name with literal keyword arguments is read, and only
    when the value built from them is stored as exactly ``text``: nothing is run.
    """
    if not text:
        return None
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or call.args:
        return None
    make = known.get(call.func.id)
    if make is None:
        return None
    try:
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        value = make(**kwargs)
    except (ValueError, TypeError, SyntaxError, ArithmeticError):
        return None
    return value if repr(value) == text else None


def rebuild_time_reader(text: str | None) -> Any:
    """The ready-made time reader a record's ``cutoff.timestamp`` names, or None.

    None for a custom function (stored as ``module.name``) or any other text.
    """
    return _rebuild(text, _READERS)


def rebuild_key_part(text: str | None) -> Any:
    """The ready-made key part (``fields``, ``before_last``) a record's ``key_part`` names.

    None for a named or custom part, or any other text.
    """
    return _rebuild(text, _KEY_PARTS)


def rebuild_cutoff(cutoff: Mapping[str, Any] | None) -> CutoffPolicy | None:
    """The cutoff policy a record's ``cutoff`` object stores, or None.

    None without a cutoff, and for one whose time reader is not ready-made (a
    custom function only its author's code has) or whose fields do not make a
    policy.
    """
    if not isinstance(cutoff, Mapping):
        return None
    reader = rebuild_time_reader(cutoff.get("timestamp"))
    instant = stored_instant(cutoff)
    if reader is None or instant is None:
        return None
    try:
        return CutoffPolicy(
            dt.datetime.fromisoformat(instant),
            reader,
            unreadable=cutoff.get("unreadable") or "error",
        )
    except ValueError:
        return None


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


def _text(value: bytes) -> str | None:
    """``value`` as the text a flag gives it (the commands encode flags as UTF-8), or None."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hex(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def _time_flags(reader: Any) -> list[str] | None:
    """``--time SPEC`` (and ``--time-sep``) for a ready-made reader, or None if no spec says it."""
    if isinstance(reader, big_endian_int):
        return ["--time", f"be:{reader.offset}:{reader.width}:{reader.unit}"]
    if isinstance(reader, epoch_field | reversed_epoch_field):
        if isinstance(reader, reversed_epoch_field) and reader.base != LONG_MAX:
            return None  # --time reversed: always counts back from Java's Long.MAX_VALUE
        spec = f"{'epoch' if isinstance(reader, epoch_field) else 'reversed'}:{reader.unit}"
        if reader.index != -1 or reader.digits is not None:
            spec += f":{reader.index}"
        if reader.digits is not None:
            spec += f":{reader.digits}"
    elif isinstance(reader, iso8601_field):
        if not reader.assume_utc:
            return None  # --time iso always reads a field without an offset as UTC
        spec = "iso" if reader.index == -1 else f"iso:{reader.index}"
    else:
        return None
    words = ["--time", spec]
    if reader.sep != _DEFAULT_TIME_SEP:
        sep = _text(reader.sep)
        if sep is None:
            return None
        words += ["--time-sep", sep]
    return words


def _key_part_flags(part: Any) -> list[str] | None:
    if isinstance(part, fields):
        sep = _text(part.sep)
        if sep is None:
            return None
        return ["--key-part", f"fields:{part.k}" + ("" if part.sep == b"#" else f":{sep}")]
    if isinstance(part, before_last):
        sep = _text(part.sep)
        if sep is None:
            return None
        return ["--key-part", "before-last" + ("" if part.sep == b"-" else f":{sep}")]
    return None


def stored_instant(cutoff: Mapping[str, Any]) -> str | None:
    """The cutoff as ISO text with an offset: the stored text when it names the stored instant."""
    micros = cutoff.get("at_micros")
    text = cutoff.get("at")
    if isinstance(text, str):
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            exact = (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
            if micros is None or exact == micros:
                return text
    if isinstance(micros, int) and not isinstance(micros, bool):
        try:
            moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
        except OverflowError:
            return None
        return moment.isoformat()
    return None


@final
@dataclass(frozen=True, slots=True)
class LayoutFlags:
    """The command-line flags of a layout record, and what no flag can say.

    ``str()`` gives the flags as one shell-quoted line, followed by what they
    leave out (``-n 8 --cutoff 2024-05-01T00:00:00+00:00 --time epoch:ms:1:13``;
    ``-n 8 (no flag gives the key part name:tenant/v1)``).
    """

    #: The flags, one word each (``("-n", "8", "--time", "epoch:ms:1:13")``).
    words: tuple[str, ...]
    #: What the flags cannot give, as the record names it (``"the key part name:tenant/v1"``).
    missing: tuple[str, ...] = ()

    def __str__(self) -> str:
        line = shlex.join(self.words)
        if self.missing:
            line += f" (no flag gives {', '.join(self.missing)})"
        return line


def layout_flags(record: Mapping[str, Any]) -> LayoutFlags:
    """The flags of ``create``/``inspect``/``guard`` that describe the layout ``record`` stores.

    Flags left at the commands' defaults (hash ``crc32``, separator ``-``, no
    marker, ``--time-sep '#'``, ``--unreadable error``) are left out; the time
    reader always shows, as ``--time``. A custom key part or time reader, or
    bytes that are not UTF-8, have no flag: :attr:`LayoutFlags.missing` names them.

    Args:
        record: The record's stored JSON object (``LayoutRecord.as_dict()``).
    """
    words = ["-n", str(record.get("buckets"))]
    missing: list[str] = []
    hash_name = record.get("hash")
    if hash_name not in (None, _DEFAULT_HASH):
        words += ["--hash", str(hash_name)]
    part_text = record.get("key_part")
    if part_text is not None:
        part = _key_part_flags(rebuild_key_part(part_text))
        if part is None:
            missing.append(f"the key part {part_text}")
        else:
            words += part
    for name, flag, default in (
        ("separator", "--separator", _DEFAULT_SEPARATOR),
        ("marker", "--marker", b""),
    ):
        value = _hex(record.get(name))
        if value is None or value == default:
            continue
        text = _text(value)
        if text is None:
            missing.append(f"the {name} {value!r}")
        else:
            words += [flag, text]
    cutoff = record.get("cutoff")
    if isinstance(cutoff, Mapping):
        instant = stored_instant(cutoff)
        if instant is None:
            missing.append(f"the cutoff instant {cutoff.get('at_micros')!r}")
        else:
            words += ["--cutoff", instant]
        reader_text = cutoff.get("timestamp")
        reader = _time_flags(rebuild_time_reader(reader_text))
        if reader is None:
            missing.append(f"the time reader {reader_text}")
        else:
            words += reader
        unreadable = cutoff.get("unreadable")
        if unreadable not in (None, "error"):
            words += ["--unreadable", str(unreadable)]
    return LayoutFlags(tuple(words), tuple(missing))
