"""Salt schemes: logical row key <-> bucket <-> physical row key.

Pure code, no I/O. A :class:`SaltScheme` is a frozen value; the table, the
planner and the CLI all take one as an argument.

Physical key formats:

* ``crc32`` (default), ``crc32c``, ``farmhash``: the bucket as zero-padded
  decimal of width ``len(str(N - 1))``, the separator, the logical key
  (N=16, bucket 7: ``b"07-" + key``). Fixed width keeps every prefix the same
  length, so no prefix is a prefix of another and bucket ranges never overlap.
* ``java``: the Bigtable key-salting sample, ``rowKey.hashCode() % saltRange``
  over the UTF-16 string with Java's signed remainder, written unpadded:
  ``b"-3-" + key`` is a valid prefix, so there are ``2N - 1`` buckets.
* ``phoenix``: one raw salt byte ``abs(Arrays.hashCode(bytes) % N)``, no
  separator (N <= 256): Apache Phoenix's ``SaltingUtil.getSaltingByte``
  exactly; also HBaseWD's ``RowKeyDistributorByHashPrefix.OneByteSimpleHash``
  (0.1.0 to its last master commit) for every key whose hash is not
  ``Integer.MIN_VALUE``.

``farmhash`` is FarmHash Fingerprint64 taken unsigned; SQL's
``FARM_FINGERPRINT`` returns the same bits as a signed INT64, so SQL needs the
expression in docs/schemes.md ("FarmHash in SQL") to give the same bucket.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, final, runtime_checkable

import farmhash
import google_crc32c

from .._exceptions import RowKeyError, RowKeyTypeError, SaltSchemeError, UnsaltableKeyError

__all__ = [
    "HASHES",
    "MAX_BUCKETS",
    "MAX_ROW_KEY_BYTES",
    "READY_MADE_KEY_PARTS",
    "KeyPart",
    "SaltScheme",
    "before_last",
    "fields",
    "format_key",
    "prefix_end",
    "to_key",
]

SCHEME_ROW_KEY: Final = b"\xff\xfe__saltedtable__/scheme"
"""The reserved row where saltedtable stores a table's layout record (see the guard).

Its leading 0xff 0xfe keeps it outside every decimal salt prefix range."""
MAX_ROW_KEY_BYTES: Final = 4096
"""Bigtable rejects row keys longer than 4 KiB (salt prefix included)."""
MAX_BUCKETS: Final = 4096
"""The most buckets a scheme may have.

Every scan fans out to one sub-scan per bucket; beyond a few thousand the read
cost dwarfs any write spread, so a larger count is a configuration bug."""
_PHOENIX_MAX_BUCKETS: Final = 256
_INT32: Final = 1 << 32
_DIGITS: Final = frozenset(b"0123456789")


def to_key(key: bytes | str) -> bytes:
    """Return a row key as bytes, encoding ``str`` as UTF-8 like the Bigtable client."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RowKeyError(f"row key {key!r} cannot be encoded as UTF-8: {exc}") from exc
    if key is None:
        raise RowKeyError("row keys must not be empty (got None)")
    raise RowKeyTypeError(f"row keys are bytes or str, got {type(key).__name__}: {key!r}")


def format_key(key: bytes) -> str:
    """Show a key as text, escaping anything that is not printable ASCII (``\\xNN``)."""
    return "".join(
        chr(b) if 0x20 <= b < 0x7F and b != 0x5C else ("\\\\" if b == 0x5C else f"\\x{b:02x}")
        for b in key
    )


def prefix_end(prefix: bytes) -> bytes:
    """Return the smallest key greater than every key that starts with ``prefix``.

    ``b""`` means "no upper bound" (the prefix is all ``0xff`` bytes, or empty).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b""
    return stripped[:-1] + bytes((stripped[-1] + 1,))


# -- hashers -----------------------------------------------------------------


def _to_signed32(value: int) -> int:
    value %= _INT32
    return value - _INT32 if value >= 1 << 31 else value


def _java_rem(dividend: int, divisor: int) -> int:
    """Java's ``%``: the result takes the sign of the dividend."""
    rem = abs(dividend) % divisor
    return -rem if dividend < 0 else rem


def java_string_hash(part: bytes) -> int:
    """``java.lang.String.hashCode`` of the UTF-8 string ``part`` (over UTF-16 units)."""
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsaltableKeyError(
            f"hash='java' needs UTF-8 row keys (Java strings), got {part!r}"
        ) from exc
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) % _INT32
    return _to_signed32(h)


def java_bytes_hash(part: bytes) -> int:
    """``java.util.Arrays.hashCode(byte[])`` of ``part`` (bytes are signed in Java)."""
    h = 1
    for b in part:
        h = (31 * h + (b - 256 if b >= 128 else b)) % _INT32
    return _to_signed32(h)


def _bucket_crc32(part: bytes, n: int) -> int:
    return zlib.crc32(part) % n


def _bucket_crc32c(part: bytes, n: int) -> int:
    return int(google_crc32c.value(part)) % n


def _bucket_farmhash(part: bytes, n: int) -> int:
    return int(farmhash.fingerprint64(part)) % n


def _bucket_java(part: bytes, n: int) -> int:
    return _java_rem(java_string_hash(part), n)


def _bucket_phoenix(part: bytes, n: int) -> int:
    # abs() of the remainder, not of the hash: Math.abs(Integer.MIN_VALUE) is
    # still negative in Java, so abs(hash) % N could yield a negative bucket.
    return abs(_java_rem(java_bytes_hash(part), n))


_BUCKET_FUNCS: Final[dict[str, Callable[[bytes, int], int]]] = {
    "crc32": _bucket_crc32,
    "crc32c": _bucket_crc32c,
    "farmhash": _bucket_farmhash,
    "java": _bucket_java,
    "phoenix": _bucket_phoenix,
}
HASHES: Final = tuple(sorted(_BUCKET_FUNCS))
"""The hash names a :class:`SaltScheme` accepts."""


# -- key parts ---------------------------------------------------------------


@runtime_checkable
class KeyPart(Protocol):
    """The part of a logical key that is hashed; rows with equal parts share a bucket.

    Any ``Callable[[bytes], bytes]`` works as a key part. Key parts that can
    also tell which part *every* key with a given prefix shares implement
    :meth:`shared_part`, which lets the planner send such a prefix or range to
    a single bucket instead of fanning out.
    """

    def __call__(self, key: bytes, /) -> bytes: ...

    def shared_part(self, prefix: bytes, /) -> bytes | None:
        """Return the hashed part shared by every key that starts with ``prefix``, or None."""
        ...


def _check_sep(sep: bytes, what: str) -> None:
    if not isinstance(sep, bytes) or not sep:
        raise SaltSchemeError(f"{what} must be non-empty bytes, got {sep!r}")


@final
@dataclass(frozen=True, slots=True)
class fields:
    """Hash only the first ``k`` fields of the key (the key up to its ``k``-th separator).

    Keys with fewer than ``k`` separators are hashed whole. With
    ``fields(1, b"#")``, ``user1#2024`` and ``user1#2025`` share a bucket, so a
    scan of the prefix ``user1#`` touches that one bucket only.
    """

    k: int
    sep: bytes = b"#"

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise SaltSchemeError(f"fields(k=...) needs an integer k >= 1, got {self.k!r}")
        _check_sep(self.sep, "fields(sep=...)")

    def _cut(self, key: bytes) -> int:
        """Index of the k-th separator in ``key``, or -1 when it has fewer."""
        pos = -len(self.sep)
        for _ in range(self.k):
            pos = key.find(self.sep, pos + len(self.sep))
            if pos < 0:
                return -1
        return pos

    def __call__(self, key: bytes, /) -> bytes:
        cut = self._cut(key)
        return key if cut < 0 else key[:cut]

    def shared_part(self, prefix: bytes, /) -> bytes | None:
        cut = self._cut(prefix)
        # Only once the prefix holds k whole fields is the part fixed for
        # every key that extends it.
        return None if cut < 0 else prefix[:cut]


@final
@dataclass(frozen=True, slots=True)
class before_last:
    """Hash everything before the last separator (the whole key if there is none).

    This is the partial-key variant of the Bigtable salting sample
    (``rowKey.substring(0, rowKey.lastIndexOf("-"))``): ``user-site-ts`` is
    hashed on ``user-site``, so one user's site stays in one bucket.
    """

    sep: bytes = b"-"

    def __post_init__(self) -> None:
        _check_sep(self.sep, "before_last(sep=...)")

    def __call__(self, key: bytes, /) -> bytes:
        cut = key.rfind(self.sep)
        return key if cut < 0 else key[:cut]

    def shared_part(self, prefix: bytes, /) -> bytes | None:
        # A longer key may hold more separators, so a prefix never fixes the part.
        return None


#: The ready-made key parts: the layout record names one by its value (its repr).
READY_MADE_KEY_PARTS: Final = (fields, before_last)


# -- the scheme --------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class SaltScheme:
    """How a logical row key maps to its salted physical key, and back.

    Args:
        buckets: N, the number of salt values (the "salt range").
        hash: One of :data:`HASHES`. ``crc32`` (default), ``crc32c`` and
            ``farmhash`` (FarmHash Fingerprint64 taken unsigned; SQL's
            ``FARM_FINGERPRINT`` is the same value signed) write zero-padded
            decimal prefixes; ``java`` and ``phoenix`` read and write tables
            made by the Bigtable Java sample and by Apache Phoenix (and
            HBaseWD's ``OneByteSimpleHash``, but for keys hashing to
            ``Integer.MIN_VALUE``). docs/schemes.md says exactly what each matches.
        key_part: What to hash: the whole key (None), a ready-made part such as
            :class:`fields` or :class:`before_last`, or any callable
            ``bytes -> bytes``.
        separator: Written between a decimal prefix and the logical key.
            Unused by ``phoenix``.
        marker: Bytes written before every prefix (default none). A marker
            such as ``b"~"`` moves the salted key space away from existing
            unsalted keys that look like salted ones (``07-...``), which the
            time-cutoff migration needs when such keys exist.

    Raises:
        SaltSchemeError: The configuration cannot work.
    """

    buckets: int
    hash: str = "crc32"
    key_part: Callable[[bytes], bytes] | None = None
    separator: bytes = b"-"
    marker: bytes = b""

    _bucket_func: Callable[[bytes, int], int] = field(init=False, repr=False, compare=False)
    _prefix_by_bucket: dict[int, bytes] = field(init=False, repr=False, compare=False)
    _width: int = field(init=False, repr=False, compare=False)
    _locate: Callable[[bytes | str], tuple[int, bytes]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        n = self.buckets
        if not isinstance(n, int) or isinstance(n, bool):
            raise SaltSchemeError(f"buckets must be an integer, got {n!r}")
        if n < 1:
            raise SaltSchemeError(f"buckets must be >= 1, got {n}")
        if n > MAX_BUCKETS:
            raise SaltSchemeError(
                f"buckets={n} is more than {MAX_BUCKETS}: every scan would fan out to "
                f"{n} sub-scans; choose a smaller count (see `saltedtable advise`)"
            )
        func = _BUCKET_FUNCS.get(self.hash) if isinstance(self.hash, str) else None
        if func is None:
            raise SaltSchemeError(f"unknown hash {self.hash!r}; choose one of {', '.join(HASHES)}")
        if self.hash == "phoenix" and n > _PHOENIX_MAX_BUCKETS:
            raise SaltSchemeError(
                f"hash='phoenix' stores the bucket in one byte: buckets must be <= "
                f"{_PHOENIX_MAX_BUCKETS}, got {n}"
            )
        if self.key_part is not None and not callable(self.key_part):
            raise SaltSchemeError(
                f"key_part must be callable bytes -> bytes, got {self.key_part!r}"
            )
        _check_sep(self.separator, "separator")
        if any(b in _DIGITS for b in self.separator):
            raise SaltSchemeError(
                f"separator {self.separator!r} contains a digit, so a prefix could not be "
                "told apart from the key"
            )
        if not isinstance(self.marker, bytes):
            raise SaltSchemeError(f"marker must be bytes, got {self.marker!r}")
        mark = self.marker
        if self.hash == "phoenix":
            width = 0
            prefixes = {b: mark + bytes((b,)) for b in range(n)}
        elif self.hash == "java":
            width = 0
            prefixes = {b: mark + str(b).encode() + self.separator for b in range(-(n - 1), n)}
        else:
            width = len(str(n - 1))
            prefixes = {b: mark + str(b).zfill(width).encode() + self.separator for b in range(n)}
        object.__setattr__(self, "_bucket_func", func)
        object.__setattr__(self, "_prefix_by_bucket", prefixes)
        object.__setattr__(self, "_width", width)
        object.__setattr__(self, "_locate", self._fast_locate())

    def __reduce__(
        self,
    ) -> tuple[type[SaltScheme], tuple[int, str, Callable[[bytes], bytes] | None, bytes, bytes]]:
        # A pickle holds the arguments only: the derived fields hold a private hash
        # function, and a pickle naming it would tie itself to this release's modules.
        return SaltScheme, (self.buckets, self.hash, self.key_part, self.separator, self.marker)

    # -- mapping ------------------------------------------------------------

    def hashed_part(self, key: bytes | str) -> bytes:
        """Return the part of the logical key that decides its bucket."""
        key = to_key(key)
        if self.key_part is None:
            return key
        part = self.key_part(key)
        if not isinstance(part, bytes):
            raise SaltSchemeError(
                f"key_part {self.key_part!r} must return bytes, returned "
                f"{type(part).__name__} for key {key!r}"
            )
        return part

    def bucket_of(self, key: bytes | str) -> int:
        """Return the bucket of a logical key.

        Buckets are in ``range(N)``, except for ``hash="java"`` where Java's
        signed remainder gives buckets in ``range(-(N-1), N)``.
        """
        return self._bucket_func(self.hashed_part(key), self.buckets)

    def bucket_of_part(self, part: bytes) -> int:
        """Return the bucket of an already extracted hashed part (see :meth:`hashed_part`)."""
        return self._bucket_func(part, self.buckets)

    def prefix(self, bucket: int) -> bytes:
        """Return the physical key prefix of ``bucket``.

        Raises:
            SaltSchemeError: ``bucket`` is not a bucket of this scheme.
        """
        try:
            return self._prefix_by_bucket[bucket]
        except KeyError:
            raise SaltSchemeError(f"{bucket!r} is not a bucket of {self}") from None

    @property
    def bucket_ids(self) -> tuple[int, ...]:
        """Every bucket this scheme can produce, in ascending order."""
        return tuple(self._prefix_by_bucket)

    @property
    def prefixes(self) -> tuple[bytes, ...]:
        """Every physical prefix, in the order of :attr:`bucket_ids`."""
        return tuple(self._prefix_by_bucket.values())

    def salt_key(self, key: bytes | str) -> bytes:
        """Return the physical row key of a logical row key.

        Raises:
            RowKeyError: The key is empty, or too long for Bigtable once salted.
        """
        return self.locate(key)[1]

    def salter(self) -> Callable[[bytes | str], bytes]:
        """:meth:`salt_key` for the write path: the fewest calls for a plain key.

        A write salts every key it sends, so this is per row: a non-empty
        ``bytes`` key short enough for any prefix is salted with one hash
        call; any other key (and every key of a ``key_part`` scheme) takes
        :meth:`salt_key`, which raises what it raises.
        """
        prefixes = self._prefix_by_bucket
        n = self.buckets
        # Longer keys may still fit under a shorter prefix: salt_key decides.
        longest = MAX_ROW_KEY_BYTES - max(len(p) for p in prefixes.values())
        slow = self.salt_key
        if self.key_part is not None:
            return slow
        if self.hash == "crc32":
            crc32 = zlib.crc32

            def salt_crc32(key: bytes | str) -> bytes:
                # (Slicing, not len(): no call. A key too long gives a non-empty tail.)
                if type(key) is bytes and key and not key[longest:]:
                    return prefixes[crc32(key) % n] + key
                return slow(key)

            return salt_crc32
        bucket_of = self._bucket_func

        def salt(key: bytes | str) -> bytes:
            if type(key) is bytes and key and not key[longest:]:
                return prefixes[bucket_of(key, n)] + key
            return slow(key)

        return salt

    def locator(self) -> Callable[[bytes | str], tuple[int, bytes]]:
        """:meth:`locate` for point writes: one call and one hash for a plain key.

        Made once per scheme; like :meth:`salter`, any key but a non-empty
        ``bytes`` key short enough for any prefix (and every key of a
        ``key_part`` scheme) takes :meth:`locate`, which raises what it raises.
        """
        return self._locate

    def _fast_locate(self) -> Callable[[bytes | str], tuple[int, bytes]]:
        prefixes = self._prefix_by_bucket
        n = self.buckets
        longest = MAX_ROW_KEY_BYTES - max(len(p) for p in prefixes.values())
        slow = self.locate
        if self.key_part is not None:
            return slow
        bucket_of = zlib.crc32 if self.hash == "crc32" else None
        if bucket_of is not None:
            crc32 = bucket_of

            def locate_crc32(key: bytes | str) -> tuple[int, bytes]:
                if type(key) is bytes and key and not key[longest:]:
                    bucket = crc32(key) % n
                    return bucket, prefixes[bucket] + key
                return slow(key)

            return locate_crc32
        func = self._bucket_func

        def locate(key: bytes | str) -> tuple[int, bytes]:
            if type(key) is bytes and key and not key[longest:]:
                bucket = func(key, n)
                return bucket, prefixes[bucket] + key
            return slow(key)

        return locate

    def locate(self, key: bytes | str) -> tuple[int, bytes]:
        """Return ``(bucket, physical_key)`` of a logical row key (see :meth:`salt_key`)."""
        key = to_key(key)
        if not key:
            raise RowKeyError("row keys must not be empty")
        bucket = self.bucket_of(key)
        physical = self._prefix_by_bucket[bucket] + key
        if len(physical) > MAX_ROW_KEY_BYTES:
            raise RowKeyError(
                f"salted row key is {len(physical)} bytes; Bigtable allows at most "
                f"{MAX_ROW_KEY_BYTES} (logical key starts {key[:40]!r})"
            )
        return bucket, physical

    def split_key(self, physical: bytes | str) -> tuple[int, bytes]:
        """Return ``(bucket, logical_key)`` of a physical key, checking its prefix.

        Raises:
            RowKeyError: The key does not carry a prefix this scheme writes, or
                its prefix is not the one the scheme computes for its logical key.
        """
        physical = to_key(physical)
        bucket, cut = self._parse_prefix(physical)
        logical = physical[cut:]
        if not logical:
            raise RowKeyError(f"{physical!r} has a salt prefix but no logical key")
        expected = self.bucket_of(logical)
        if expected != bucket:
            raise RowKeyError(
                f"{physical!r} carries bucket {bucket}, but {self} puts {logical!r} in "
                f"bucket {expected}: the key was not written with this scheme"
            )
        return bucket, logical

    def unsalt_key(self, physical: bytes | str) -> bytes:
        """Return the logical row key of a physical row key (see :meth:`split_key`)."""
        return self.split_key(physical)[1]

    def has_prefix(self, physical: bytes | str) -> bool:
        """True when ``physical`` starts with one of this scheme's prefixes.

        Only the prefix is checked, not that the hash of the rest matches it.
        """
        try:
            self._parse_prefix(to_key(physical))
        except RowKeyError:
            return False
        return True

    def _parse_prefix(self, physical: bytes) -> tuple[int, int]:
        mark = len(self.marker)
        if physical[:mark] != self.marker:
            raise RowKeyError(f"{physical!r} does not start with the marker {self.marker!r}")
        bucket, cut = self._parse_bucket(physical[mark:])
        return bucket, mark + cut

    def _parse_bucket(self, physical: bytes) -> tuple[int, int]:
        if self.hash == "phoenix":
            if physical and physical[0] < self.buckets:
                return physical[0], 1
            raise RowKeyError(f"{physical!r} does not start with a salt byte below {self.buckets}")
        sep = self.separator
        if self.hash == "java":
            digits_start = 1 if physical[:1] == b"-" else 0
            cut = physical.find(sep, digits_start)
            digits = physical[digits_start:cut] if cut > 0 else b""
            canonical = digits.isdigit() and (digits == b"0" or not digits.startswith(b"0"))
        else:
            cut = self._width
            digits = physical[:cut]
            canonical = len(digits) == cut and digits.isdigit()
            if physical[cut : cut + len(sep)] != sep:
                canonical = False
        if canonical:
            bucket = int(physical[:cut])
            if bucket in self._prefix_by_bucket and (bucket != 0 or physical[:1] != b"-"):
                return bucket, cut + len(sep)
        raise RowKeyError(f"{physical!r} does not start with a salt prefix of {self}")

    def __str__(self) -> str:
        part = "" if self.key_part is None else f", key_part={self.key_part!r}"
        sep = "" if self.separator == b"-" else f", separator={self.separator!r}"
        mark = "" if not self.marker else f", marker={self.marker!r}"
        return f"SaltScheme(buckets={self.buckets}, hash={self.hash!r}{part}{sep}{mark})"
