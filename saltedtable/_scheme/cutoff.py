"""Forward-only migration: salt only the keys whose timestamp is past a cutoff.

Pure code. A :class:`CutoffPolicy` says when salting starts and how to read
the timestamp out of a logical key. A :class:`~saltedtable.Layout` combines it
with a :class:`~saltedtable.SaltScheme` and decides, for every key, where it lives:

* key time >= cutoff: the salted physical key (``scheme.salt_key(key)``);
* key time <  cutoff: the legacy key, the logical key itself, unsalted.

The decision depends on the timestamp *in the key*, never on the clock, so a
late row with an old timestamp goes where readers look for it.

Timestamps are integers: microseconds since the Unix epoch, UTC.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, final, runtime_checkable

from .._exceptions import CutoffError

__all__ = [
    "CutoffPolicy",
    "TimestampReader",
    "big_endian_int",
    "epoch_field",
    "iso8601_field",
    "read_key_time",
    "reversed_epoch_field",
]

_UNITS: Final = {"s": 1_000_000, "ms": 1_000, "us": 1}
#: Java's Long.MAX_VALUE, the usual base of "reversed" timestamps.
LONG_MAX: Final = (1 << 63) - 1
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Side = Literal["legacy", "salted"]


def to_micros(instant: dt.datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise CutoffError(
            f"{instant!r} is a naive datetime; give a timezone (e.g. tzinfo=datetime.UTC)"
        )
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def read_key_time(reader: Callable[[bytes], int | dt.datetime], key: bytes) -> int:
    """The time ``reader`` reads out of ``key``, in microseconds since the epoch.

    Raises:
        ValueError: The key holds no readable time, or the reader returned
            something that is neither an int nor a datetime.
    """
    value = reader(key)
    if isinstance(value, dt.datetime):
        return to_micros(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"timestamp reader returned {value!r} for {key!r}; need int or datetime")


@runtime_checkable
class TimestampReader(Protocol):
    """Reads the timestamp (microseconds since the epoch) out of a logical key.

    Raise ``ValueError`` when the key holds no readable timestamp. Readers that
    can also bound the timestamps of every key in a key range implement
    :meth:`time_bounds`; the planner then skips a side that cannot match.
    """

    def __call__(self, key: bytes, /) -> int: ...

    def time_bounds(
        self, start: bytes, end: bytes, end_closed: bool = True, /
    ) -> tuple[int | None, int | None] | None:
        """Inclusive (lowest, highest) time of readable keys in the range, or None.

        Either side may be None (no bound on that side).
        """
        ...


def _unit(unit: str) -> int:
    try:
        return _UNITS[unit]
    except KeyError:
        raise CutoffError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}") from None


def _field(key: bytes, sep: bytes, index: int) -> bytes:
    parts = key.split(sep)
    try:
        return parts[index]
    except IndexError:
        raise ValueError(f"{key!r} has no field {index} separated by {sep!r}") from None


def _decimal(text: bytes, key: bytes) -> int:
    if not text.isdigit():
        raise ValueError(f"timestamp field {text!r} of {key!r} is not a decimal number")
    return int(text)


def _check_field_args(sep: bytes, digits: int | None, unit: str | None) -> None:
    if not isinstance(sep, bytes) or not sep:
        raise CutoffError(f"sep must be non-empty bytes, got {sep!r}")
    if digits is not None and digits < 1:
        raise CutoffError(f"digits must be >= 1, got {digits}")
    if unit is not None:
        _unit(unit)


def _field_bounds(
    sep: bytes, index: int, digits: int | None, start: bytes, end: bytes, end_closed: bool
) -> tuple[int | None, int | None] | None:
    """Bounds of the decimal field ``index`` of every key in a range, or None.

    Sound only for a field counted from the start (``index >= 0``) with a
    declared width: both bounds then share the first ``index`` fields, every
    key between them shares those too, and a readable field (exactly
    ``digits`` digits, which the reader enforces) compares like its number.
    A bound whose field is not ``digits`` digits gives no limit on its side.
    """
    if digits is None or index < 0:
        return None
    pos = 0
    for _ in range(index):
        cut = start.find(sep, pos)
        if cut < 0:
            return None
        pos = cut + len(sep)
    if not end.startswith(start[:pos]):
        return None
    fa, fb = start[pos : pos + digits], end[pos : pos + digits]
    lo = int(fa) if len(fa) == digits and fa.isdigit() else None
    hi = int(fb) if len(fb) == digits and fb.isdigit() else None
    if hi is not None and not end_closed and len(end) == pos + digits:
        hi -= 1  # keys below P+field (exclusive) have a smaller field
    return lo, hi


def _scaled(
    bounds: tuple[int | None, int | None] | None, scale: int, base: int | None = None
) -> tuple[int | None, int | None] | None:
    """Field bounds to time bounds (``base - field`` for reversed timestamps)."""
    if bounds is None:
        return None
    lo, hi = bounds
    if base is None:
        return (None if lo is None else lo * scale, None if hi is None else hi * scale)
    return (
        None if hi is None else (base - hi) * scale,
        None if lo is None else (base - lo) * scale,
    )


def _fixed_width(text: bytes, digits: int | None, key: bytes) -> bytes:
    if digits is not None and len(text) != digits:
        raise ValueError(f"timestamp field {text!r} of {key!r} is not {digits} digits wide")
    return text


@final
@dataclass(frozen=True, slots=True)
class epoch_field:
    """A decimal epoch timestamp in a key field (the last one by default).

    Args:
        unit: ``"s"``, ``"ms"`` or ``"us"``.
        sep: The field separator.
        index: Which field (Python index; -1 = the last).
        digits: The field's fixed width (e.g. 10 for seconds, 13 for
            milliseconds). A field of another width is unreadable. With a
            field counted from the start (``index >= 0``, e.g. ``index=1`` for
            ``user#ts``) it also lets a range scan skip the salted side when
            the range's times all lie before the cutoff.
    """

    unit: str = "s"
    sep: bytes = b"#"
    index: int = -1
    digits: int | None = None

    def __post_init__(self) -> None:
        _check_field_args(self.sep, self.digits, self.unit)

    def __call__(self, key: bytes, /) -> int:
        text = _fixed_width(_field(key, self.sep, self.index), self.digits, key)
        return _decimal(text, key) * _UNITS[self.unit]

    def time_bounds(
        self, start: bytes, end: bytes, end_closed: bool = True, /
    ) -> tuple[int | None, int | None] | None:
        """Bounds of the timestamps of keys in the range (see ``index`` and ``digits``)."""
        bounds = _field_bounds(self.sep, self.index, self.digits, start, end, end_closed)
        return _scaled(bounds, _UNITS[self.unit])


@final
@dataclass(frozen=True, slots=True)
class reversed_epoch_field:
    """A reversed timestamp field, ``base - time``, for latest-first keys.

    The default is Java's ``Long.MAX_VALUE - millis``, written as decimal.
    """

    unit: str = "ms"
    sep: bytes = b"#"
    index: int = -1
    digits: int | None = None
    base: int = LONG_MAX

    def __post_init__(self) -> None:
        _check_field_args(self.sep, self.digits, self.unit)

    def __call__(self, key: bytes, /) -> int:
        text = _fixed_width(_field(key, self.sep, self.index), self.digits, key)
        return (self.base - _decimal(text, key)) * _UNITS[self.unit]

    def time_bounds(
        self, start: bytes, end: bytes, end_closed: bool = True, /
    ) -> tuple[int | None, int | None] | None:
        """Bounds of the timestamps of keys in the range (a larger field is earlier)."""
        bounds = _field_bounds(self.sep, self.index, self.digits, start, end, end_closed)
        return _scaled(bounds, _UNITS[self.unit], self.base)


@final
@dataclass(frozen=True, slots=True)
class iso8601_field:
    """An ISO-8601 timestamp field (``2024-05-01T12:00:00+00:00``).

    A field without an offset is read as UTC when ``assume_utc`` (the
    default), and is unreadable otherwise.
    """

    sep: bytes = b"#"
    index: int = -1
    assume_utc: bool = True

    def __post_init__(self) -> None:
        _check_field_args(self.sep, None, None)

    def __call__(self, key: bytes, /) -> int:
        text = _field(key, self.sep, self.index)
        try:
            instant = dt.datetime.fromisoformat(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{text!r} of {key!r} is not an ISO-8601 timestamp") from exc
        if instant.tzinfo is None:
            if not self.assume_utc:
                raise ValueError(f"{text!r} of {key!r} has no UTC offset")
            instant = instant.replace(tzinfo=dt.UTC)
        return to_micros(instant)


@final
@dataclass(frozen=True, slots=True)
class big_endian_int:
    """A fixed-width unsigned big-endian integer at a byte offset.

    Args:
        offset: Where the integer starts (negative: from the end of the key).
        width: Its size in bytes.
        unit: ``"s"``, ``"ms"`` or ``"us"``.
    """

    offset: int = 0
    width: int = 8
    unit: str = "ms"

    def __post_init__(self) -> None:
        if self.width < 1:
            raise CutoffError(f"width must be >= 1, got {self.width}")
        if self.offset < 0 and -self.offset < self.width:
            raise CutoffError(
                f"offset={self.offset} leaves {-self.offset} bytes, less than width={self.width}"
            )
        _unit(self.unit)

    def _slice(self, key: bytes) -> bytes:
        start = self.offset if self.offset >= 0 else len(key) + self.offset
        raw = key[start : start + self.width] if start >= 0 else b""
        if len(raw) != self.width:
            raise ValueError(f"{key!r} has no {self.width}-byte integer at offset {self.offset}")
        return raw

    def __call__(self, key: bytes, /) -> int:
        return int.from_bytes(self._slice(key), "big") * _UNITS[self.unit]

    def time_bounds(
        self, start: bytes, end: bytes, end_closed: bool = True, /
    ) -> tuple[int | None, int | None] | None:
        """Bounds of the integers of keys in the range (fixed offset from the start only)."""
        # Provable when the integer sits at a fixed offset from the start and
        # both bounds share everything before it: keys in between share that
        # too, so their integers lie between the bounds' (padded) integers.
        if self.offset < 0 or start[: self.offset] != end[: self.offset]:
            return None
        if len(start) < self.offset or len(end) < self.offset:
            return None
        lo = start[self.offset : self.offset + self.width].ljust(self.width, b"\x00")
        hi = end[self.offset : self.offset + self.width].ljust(self.width, b"\xff")
        scale = _unit(self.unit)
        return int.from_bytes(lo, "big") * scale, int.from_bytes(hi, "big") * scale


@final
@dataclass(frozen=True, slots=True)
class CutoffPolicy:
    """Salt keys whose timestamp is at or after ``cutoff``; keep older keys unsalted.

    Args:
        cutoff: When salting starts; a timezone-aware datetime.
        timestamp: Reads a key's timestamp: one of the ready-made readers
            (:class:`epoch_field`, :class:`reversed_epoch_field`,
            :class:`iso8601_field`, :class:`big_endian_int`) or any callable
            ``bytes -> int | datetime`` (int: microseconds since the epoch).
        unreadable: What to do with a key whose timestamp cannot be read:
            ``"error"`` (default) raises :class:`CutoffError`; ``"legacy"`` or
            ``"salted"`` sends every such key to that side.

    Raises:
        CutoffError: A naive cutoff, a bad ``unreadable`` value.
    """

    cutoff: dt.datetime
    timestamp: Callable[[bytes], int | dt.datetime]
    unreadable: Literal["error", "legacy", "salted"] = "error"
    cutoff_micros: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.cutoff, dt.datetime):
            raise CutoffError(f"cutoff must be a datetime, got {self.cutoff!r}")
        object.__setattr__(self, "cutoff_micros", to_micros(self.cutoff))
        if not callable(self.timestamp):
            raise CutoffError(f"timestamp must be callable, got {self.timestamp!r}")
        if self.unreadable not in ("error", "legacy", "salted"):
            raise CutoffError(
                f"unreadable must be 'error', 'legacy' or 'salted', got {self.unreadable!r}"
            )

    def key_time(self, key: bytes) -> int:
        """The timestamp of a key in microseconds since the epoch.

        Raises:
            ValueError: The key holds no readable timestamp.
        """
        return read_key_time(self.timestamp, key)

    def side_of(self, key: bytes) -> Side:
        """``"salted"`` or ``"legacy"``: where the row with this logical key lives.

        Raises:
            CutoffError: The timestamp is unreadable and ``unreadable="error"``.
        """
        try:
            when = self.key_time(key)
        except (ValueError, CutoffError) as exc:
            if self.unreadable == "error":
                raise CutoffError(
                    f"cannot read a timestamp from row key {key!r} to place it before or "
                    f"after the cutoff {self.cutoff.isoformat()}: {exc}"
                ) from exc
            return self.unreadable
        return "salted" if when >= self.cutoff_micros else "legacy"

    def sides_of_range(
        self, start: bytes, end: bytes, end_closed: bool = True
    ) -> tuple[bool, bool]:
        """(legacy possible, salted possible) for the keys of a range.

        A side is ruled out only when that is sound: the salted side holds
        keys written through the layout (readable times at or after the
        cutoff, plus unreadable ones when ``unreadable="salted"``); the legacy
        side also holds whatever was there before, so it is skipped only when
        unreadable keys go to the salted side and every readable time in the
        range is at or after the cutoff.
        """
        bounds_of = getattr(self.timestamp, "time_bounds", None)
        if not start or not end or bounds_of is None:
            return True, True
        bounds = bounds_of(start, end, end_closed)
        if bounds is None:
            return True, True
        lo, hi = bounds
        cutoff = self.cutoff_micros
        salted = hi is None or hi >= cutoff or self.unreadable == "salted"
        legacy = lo is None or lo < cutoff or self.unreadable != "salted"
        return legacy, salted

    def only_unreadable_before(self, start: bytes, end: bytes, end_closed: bool = True) -> bool:
        """True when every readable key time in the range is at or after the cutoff.

        The legacy side of such a range is still read unless unreadable keys
        go to the salted side: keys with no readable time stay unsalted.
        """
        bounds_of = getattr(self.timestamp, "time_bounds", None)
        if not start or not end or bounds_of is None:
            return False
        bounds = bounds_of(start, end, end_closed)
        return bounds is not None and bounds[0] is not None and bounds[0] >= self.cutoff_micros
