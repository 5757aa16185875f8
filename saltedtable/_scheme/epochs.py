"""Layout epochs: a table whose layout changes at instants of its keys' time (pure).

An :class:`Epochs` value is an ordered list of :class:`Epoch` values, each a
start time (microseconds since the Unix epoch; the first starts at minus
infinity) and a layout: unsalted (legacy keys, first epoch only) or a
:class:`~saltedtable.SaltScheme`. One key-time reader serves the whole list.
A key lives in the epoch its time selects (``start_i <= t < start_{i+1}``),
under that epoch's physical key. Today's two layouts are the special cases:
a plain salted table is one epoch; a time-cutoff migration is "unsalted,
then salted from the cutoff" (:meth:`saltedtable.Layout.as_epochs`).

Attribution (what makes shared prefixes exact): two epochs of the same
prefix format and width share physical prefixes (bucket ``05-`` exists for
N=16 and N=64). A physical row belongs to exactly one epoch: the epoch its
logical key's time selects, and only if that epoch puts the key under the
very prefix the row was found under (:meth:`Epochs.hidden_under`). Every
other row is hidden from reads, like a migration's misplaced rows. Since a
logical key has one physical key (:meth:`Epochs.locate`), no read shows a
key twice, and a range shared by epochs is read once (:meth:`Epochs.touches`).

Validation, the rules a list must meet (:class:`Epochs` refuses the rest):

* starts strictly increase; only the first epoch may be unsalted; two
  neighbouring epochs differ;
* every pair of salted epochs either writes the same prefix format (same
  ``hash``, ``separator`` and ``marker``: then a physical key parses to the
  same bucket and logical key under both, whatever their bucket counts and
  key parts), or has provably disjoint key spaces: two non-empty markers
  neither of which starts with the other;
* no salted prefix covers the reserved layout row.

Pure code: time is always an argument, never the clock.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, final

from .._exceptions import CutoffError, RowKeyError, SaltSchemeError, UnsaltableKeyError
from .cutoff import read_key_time, to_micros
from .ranges import KeyRange
from .salt import SCHEME_ROW_KEY, SaltScheme, prefix_end, to_key

__all__ = [
    "Epoch",
    "Epochs",
    "Touch",
    "buckets_of_range",
    "instant_of",
    "physical_range",
    "shared_prefix",
]

#: Where keys whose time cannot be read live: nowhere (an error), the first epoch, the last.
Unreadable = Literal["error", "first", "last"]
UNREADABLE: Final = ("error", "first", "last")
_EPOCH_ZERO: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

#: Why a row read under some prefix is left out, or None to show it.
HidingRule = Callable[[bytes], str | None]


def instant_of(micros: int) -> dt.datetime:
    """The UTC datetime of ``micros`` microseconds since the Unix epoch (exact)."""
    return _EPOCH_ZERO + dt.timedelta(microseconds=micros)


@final
@dataclass(frozen=True, slots=True)
class Epoch:
    """One epoch: from ``start`` on, keys are stored with ``scheme``.

    Args:
        start: Microseconds since the Unix epoch (UTC) of the first key time
            of this epoch; None for the first epoch (minus infinity).
        scheme: The salt scheme of its keys; None: unsalted (legacy keys,
            only for the first epoch).
    """

    start: int | None
    scheme: SaltScheme | None

    def __post_init__(self) -> None:
        if self.start is not None and (
            not isinstance(self.start, int) or isinstance(self.start, bool)
        ):
            raise SaltSchemeError(f"an epoch's start must be int microseconds, got {self.start!r}")
        if self.scheme is not None and not isinstance(self.scheme, SaltScheme):
            raise SaltSchemeError(
                f"an epoch's scheme must be a SaltScheme or None, got {self.scheme!r}"
            )

    @classmethod
    def at(cls, start: dt.datetime, scheme: SaltScheme | None) -> Epoch:
        """An epoch starting at an aware datetime."""
        try:
            return cls(to_micros(start), scheme)
        except CutoffError as exc:
            raise SaltSchemeError(f"an epoch's start: {exc}") from None

    def __str__(self) -> str:
        when = "-inf" if self.start is None else instant_of(self.start).isoformat()
        return f"from {when}: {'unsalted' if self.scheme is None else self.scheme}"


@final
@dataclass(frozen=True, slots=True)
class Touch:
    """What a read asks of one physical prefix (see :meth:`Epochs.touches`).

    Attributes:
        prefix: The physical prefix (``b""``: the unsalted, legacy key space).
        bucket: Its bucket (None: the legacy key space).
        epochs: The epochs whose rows the read may find under it.
        ranges: Physical ranges under it (each once, however many epochs share it).
    """

    prefix: bytes
    bucket: int | None
    epochs: tuple[int, ...]
    ranges: tuple[KeyRange, ...]


def _same_format(a: SaltScheme, b: SaltScheme) -> bool:
    return a.hash == b.hash and a.separator == b.separator and a.marker == b.marker


def _disjoint(a: SaltScheme, b: SaltScheme) -> bool:
    ma, mb = a.marker, b.marker
    return bool(ma) and bool(mb) and not ma.startswith(mb) and not mb.startswith(ma)


@final
@dataclass(frozen=True, slots=True)
class Epochs:
    """An ordered list of layout epochs and the key-time reader that picks one.

    Args:
        epochs: The epochs, oldest first; the first has ``start`` None.
        timestamp: Reads a key's time (as :class:`~saltedtable.CutoffPolicy`'s
            ``timestamp``: an int of microseconds, or an aware datetime).
            Needed with more than one epoch.
        unreadable: Where keys whose time cannot be read live: ``"error"``
            (refused; rows already in an unsalted first epoch stay readable),
            ``"first"`` or ``"last"`` epoch.
        min_lead: Seconds an appended epoch must start after the moment it
            is appended (stored in the record; enforced by whoever appends).

    Raises:
        SaltSchemeError: The list breaks a rule of the module docstring.
    """

    epochs: tuple[Epoch, ...]
    timestamp: Callable[[bytes], int | dt.datetime] | None = None
    unreadable: Unreadable = "error"
    min_lead: float | None = None
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _owners: dict[bytes, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _bucket_at: dict[bytes, int] = field(init=False, repr=False, compare=False)
    _widths: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _target: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        epochs = tuple(self.epochs)
        object.__setattr__(self, "epochs", epochs)
        if not epochs or not all(isinstance(e, Epoch) for e in epochs):
            raise SaltSchemeError(f"epochs must be a non-empty list of Epoch, got {self.epochs!r}")
        if epochs[0].start is not None:
            raise SaltSchemeError("the first epoch starts at minus infinity: give it start=None")
        starts: list[int] = []
        for i, epoch in enumerate(epochs[1:], 1):
            if epoch.start is None:
                raise SaltSchemeError(f"epoch {i} has no start; only the first epoch may lack one")
            if starts and epoch.start <= starts[-1]:
                raise SaltSchemeError(
                    f"epoch {i} starts at {instant_of(epoch.start).isoformat()}, not after "
                    f"epoch {i - 1} ({instant_of(starts[-1]).isoformat()}): epochs must be in order"
                )
            if epoch.scheme is None:
                raise SaltSchemeError(f"epoch {i} is unsalted; only the first epoch may be")
            if epoch.scheme == epochs[i - 1].scheme:
                raise SaltSchemeError(f"epoch {i} repeats the layout of epoch {i - 1}")
            starts.append(epoch.start)
        if len(epochs) > 1 and not callable(self.timestamp):
            raise SaltSchemeError(
                f"a layout with {len(epochs)} epochs needs a key-time reader (timestamp=...)"
            )
        if self.unreadable not in UNREADABLE:
            raise SaltSchemeError(
                f"unreadable must be 'error', 'first' or 'last', got {self.unreadable!r}"
            )
        if self.min_lead is not None and (
            not isinstance(self.min_lead, int | float)
            or isinstance(self.min_lead, bool)
            or not self.min_lead > 0
        ):
            raise SaltSchemeError(f"min_lead must be seconds > 0 or None, got {self.min_lead!r}")
        salted = [(i, e.scheme) for i, e in enumerate(epochs) if e.scheme is not None]
        if not salted:
            raise SaltSchemeError("a layout needs at least one salted epoch")
        for n, (i, a) in enumerate(salted):
            if a.has_prefix(SCHEME_ROW_KEY):
                raise SaltSchemeError(
                    f"epoch {i}'s {a} has a prefix covering the reserved row {SCHEME_ROW_KEY!r}"
                )
            for j, b in salted[:n]:
                if not _same_format(a, b) and not _disjoint(a, b):
                    raise SaltSchemeError(
                        f"epoch {i}'s {a} and epoch {j}'s {b} write different prefix formats "
                        "(hash, separator or marker) into the same key space, so a physical "
                        "key could be read as two different logical keys; keep the hash, "
                        "separator and marker, or give both non-empty markers neither of "
                        "which starts with the other"
                    )
        owners: dict[bytes, list[int]] = {}
        bucket_at: dict[bytes, int] = {}
        for i, scheme in salted:
            for bucket, prefix in zip(scheme.bucket_ids, scheme.prefixes, strict=True):
                owners.setdefault(prefix, []).append(i)
                bucket_at[prefix] = bucket
        object.__setattr__(self, "_starts", tuple(starts))
        object.__setattr__(self, "_owners", {p: tuple(o) for p, o in owners.items()})
        object.__setattr__(self, "_bucket_at", bucket_at)
        object.__setattr__(self, "_widths", tuple(sorted({len(p) for p in owners})))
        target = {"error": None, "first": 0, "last": len(epochs) - 1}[self.unreadable]
        object.__setattr__(self, "_target", target)

    def __reduce__(self) -> tuple[type[Epochs], tuple[object, ...]]:
        # A pickle (Beam ships layouts to its workers) holds the arguments only.
        return Epochs, (self.epochs, self.timestamp, self.unreadable, self.min_lead)

    # -- the list --------------------------------------------------------------

    @property
    def has_legacy(self) -> bool:
        """True when the first epoch is unsalted (a time-cutoff table's legacy keys)."""
        return self.epochs[0].scheme is None

    @property
    def schemes(self) -> tuple[SaltScheme, ...]:
        """The salted epochs' schemes, oldest first."""
        return tuple(e.scheme for e in self.epochs if e.scheme is not None)

    @property
    def newest(self) -> SaltScheme:
        """The newest epoch's scheme (the last epoch is always salted)."""
        scheme = self.epochs[-1].scheme
        assert scheme is not None  # validated: only the first epoch may be unsalted
        return scheme

    def __len__(self) -> int:
        return len(self.epochs)

    def __iter__(self) -> Iterator[Epoch]:
        return iter(self.epochs)

    def __str__(self) -> str:
        return "; ".join(f"epoch {i} {e}" for i, e in enumerate(self.epochs))

    def appended(
        self,
        epoch: Epoch,
        *,
        timestamp: Callable[[bytes], int | dt.datetime] | None = None,
        unreadable: Unreadable | None = None,
        min_lead: float | None = None,
    ) -> Epochs:
        """This list with ``epoch`` added at its end (validated like any list).

        The pure step of a resalt: whoever appends also checks the lead, the
        rows already written, and swaps the record atomically. A one-epoch
        list has no reader yet: give ``timestamp`` (and ``unreadable``); an
        argument left None keeps this list's value.
        """
        return Epochs(
            (*self.epochs, epoch),
            self.timestamp if timestamp is None else timestamp,
            self.unreadable if unreadable is None else unreadable,
            self.min_lead if min_lead is None else min_lead,
        )

    def extends(self, older: Epochs) -> bool:
        """True when this list is ``older`` with one or more epochs appended.

        The same epochs first (starts and schemes), and, when ``older`` has
        more than one epoch, the same key-time reader and fallback for
        unreadable times; the stored lead may differ. What a long-lived
        table object may adopt from the record instead of refusing it.
        """
        n = len(older.epochs)
        if len(self.epochs) <= n or self.epochs[:n] != older.epochs:
            return False
        return n == 1 or (self.timestamp, self.unreadable) == (older.timestamp, older.unreadable)

    # -- one key ---------------------------------------------------------------

    def key_time(self, key: bytes) -> int:
        """A key's time in microseconds since the Unix epoch.

        Raises:
            ValueError: The key holds no readable time (or there is no reader).
        """
        if self.timestamp is None:
            raise ValueError("this layout has no key-time reader")
        return read_key_time(self.timestamp, key)

    def epoch_at(self, micros: int) -> int:
        """The index of the epoch that holds key time ``micros``."""
        return bisect.bisect_right(self._starts, micros)

    def epoch_of(self, key: bytes) -> int:
        """The index of the epoch that holds ``key``.

        Raises:
            CutoffError: Its time cannot be read and ``unreadable="error"``.
        """
        if not self._starts:
            return 0
        try:
            when = self.key_time(key)
        except ValueError as exc:
            target = self._target
            if target is None:
                raise CutoffError(
                    f"cannot read a time from row key {key!r} to choose its layout epoch: {exc}"
                ) from exc
            return target
        return bisect.bisect_right(self._starts, when)

    def locate(self, key: bytes | str) -> tuple[int, int | None, bytes]:
        """``(epoch, bucket, physical_key)`` of a logical key (bucket None: unsalted).

        Raises:
            RowKeyError: The key cannot be stored: empty, too long, or an
                unsalted key that would sit inside a salted key space.
            CutoffError: Its time cannot be read and ``unreadable="error"``.
        """
        key = to_key(key)
        if not key:
            raise RowKeyError("row keys must not be empty")
        epoch = self.epoch_of(key)
        scheme = self.epochs[epoch].scheme
        if scheme is not None:
            bucket, physical = scheme.locate(key)
            return epoch, bucket, physical
        if key.startswith(SCHEME_ROW_KEY):
            raise RowKeyError(f"{key!r} is saltedtable's reserved layout row")
        if (prefix := self.prefix_of(key)) is not None:
            raise RowKeyError(
                f"unsalted key {key!r} (epoch {epoch}) starts with the salt prefix {prefix!r} of "
                f"epoch {self._owners[prefix][0]}; it would be read back as a salted row. Give "
                "the schemes a marker (e.g. SaltScheme(..., marker=b'~')) so the two key spaces "
                "cannot meet"
            )
        return epoch, None, key

    # -- one physical row --------------------------------------------------------

    def prefix_of(self, physical: bytes) -> bytes | None:
        """The salted prefix ``physical`` starts with (of any epoch), or None."""
        owners = self._owners
        for width in self._widths:
            if physical[:width] in owners:
                return physical[:width]
        return None

    def logical_of(self, physical: bytes) -> bytes:
        """The logical key of a physical one (its prefix stripped; unsalted keys as they are).

        Only the prefix is parsed: :meth:`owner` says whether the row belongs there.

        Raises:
            RowKeyError: No epoch can hold it (outside every prefix, no unsalted epoch).
        """
        prefix = self.prefix_of(physical)
        if prefix is not None:
            return physical[len(prefix) :]
        if not self.has_legacy:
            raise RowKeyError(f"{physical!r} does not carry a salt prefix of any epoch")
        return physical

    def owner(self, physical: bytes) -> tuple[int, bytes] | None:
        """``(epoch, logical_key)`` of the epoch a physical row belongs to; None: hidden.

        The attribution rule: a row belongs to the epoch its logical key's
        time selects, only if that epoch stores the key at ``physical``.
        """
        if self.why_hidden(physical) is not None:
            return None
        logical = self.logical_of(physical)
        return self.epoch_of(logical), logical

    def why_hidden(self, physical: bytes) -> str | None:
        """Why the row at ``physical`` belongs to no epoch (reads leave it out), or None."""
        if physical.startswith(SCHEME_ROW_KEY):
            return f"{physical!r}: the reserved layout row"
        prefix = self.prefix_of(physical)
        if prefix is None:
            if not self.has_legacy:
                return (
                    f"{physical!r}: outside every salt prefix of every epoch (written unsalted, "
                    "or with another bucket count, hash or marker)"
                )
            prefix = b""
        logical = physical[len(prefix) :]
        if not logical:
            return f"{physical!r}: a salt prefix but no logical key"
        why = self.hidden_under(prefix, logical)
        return None if why is None else f"{physical!r}: {why}"

    def hidden_under(self, prefix: bytes, key: bytes) -> str | None:
        """Why a row read under ``prefix`` with logical ``key`` is left out, or None.

        ``prefix`` is ``b""`` for the unsalted key space. See :meth:`hiding_for`.
        """
        return self.hiding_for(prefix)(key)

    def hiding_for(self, prefix: bytes) -> HidingRule:
        """The attribution rule for the rows under one prefix, as a function of the key.

        Built once per sub-query; each call costs one key-time read (and,
        under a salted prefix, one hash).
        """
        return functools.partial(_hidden, self, prefix, self._owners.get(prefix, ()))

    # -- ranges ----------------------------------------------------------------

    def epochs_of_range(self, rng: KeyRange) -> tuple[int, ...]:
        """The epochs that can hold keys of a logical range, oldest first.

        Ruled out only when sound: the reader bounds every readable time in
        the range (:meth:`~saltedtable.TimestampReader.time_bounds`) and the
        epoch's interval misses those bounds, and keys whose time cannot be
        read do not live there (an unsalted first epoch also keeps whatever
        was written before, unless such keys go to another epoch).
        """
        n = len(self.epochs)
        everything = tuple(range(n))
        bounds_of = getattr(self.timestamp, "time_bounds", None)
        if n == 1 or not rng.start or not rng.end or bounds_of is None:
            return everything
        bounds = bounds_of(rng.start, rng.end, rng.end_closed)
        if bounds is None:
            return everything
        lo, hi = bounds
        first = 0 if lo is None else self.epoch_at(lo)
        last = n - 1 if hi is None else self.epoch_at(hi)
        chosen = set(range(first, last + 1))
        target = self._target
        if target is not None:
            chosen.add(target)
        if self.has_legacy and target in (None, 0):
            chosen.add(0)
        return tuple(sorted(chosen))

    def legacy_gaps(self) -> tuple[KeyRange, ...]:
        """The physical key space outside every salted prefix and the layout row, sorted."""
        return _gaps(tuple(self._owners))

    def touches(self, rng: KeyRange) -> tuple[Touch, ...]:
        """The physical reads that answer a logical range, one per prefix, sorted by prefix.

        Every epoch the range can touch (:meth:`epochs_of_range`) adds its
        buckets (a key part that fixes the bucket for the range adds one);
        a prefix shared by several epochs is read once, its range once.
        """
        found: dict[bytes, tuple[int | None, list[int], list[KeyRange]]] = {}
        for epoch in self.epochs_of_range(rng):
            scheme = self.epochs[epoch].scheme
            if scheme is None:
                pieces = [p for gap in self.legacy_gaps() if (p := rng.intersect(gap)) is not None]
                if pieces:
                    found[b""] = (None, [epoch], pieces)
                continue
            for bucket in buckets_of_range(scheme, rng):
                prefix = scheme.prefix(bucket)
                phys = physical_range(prefix, rng)
                _, owners, ranges = found.setdefault(prefix, (bucket, [], []))
                owners.append(epoch)
                if phys not in ranges:
                    ranges.append(phys)
        return tuple(
            Touch(prefix, bucket, tuple(owners), tuple(ranges))
            for prefix, (bucket, owners, ranges) in sorted(found.items())
        )


def _hidden(epochs: Epochs, prefix: bytes, owners: Sequence[int], key: bytes) -> str | None:
    """The attribution rule of :meth:`Epochs.hiding_for`, for one key under ``prefix``.

    ``owners``: the salted epochs that have ``prefix``.
    """
    try:
        epoch = epochs.epoch_of(key)
    except CutoffError:
        # Unreadable and refused: only the unsalted key space keeps such rows
        # (written before the layout had epochs).
        if not prefix and epochs.has_legacy:
            return None
        return "its key time is unreadable, and such keys are refused"
    scheme = epochs.epochs[epoch].scheme
    if not prefix:
        if scheme is None:
            return None
        return f"its key time puts it in salted epoch {epoch}"
    if epoch not in owners:
        return f"its key time puts it in epoch {epoch}, which has no prefix {prefix!r}"
    assert scheme is not None  # every owner of a prefix is salted
    try:
        bucket = scheme.bucket_of(key)
    except UnsaltableKeyError as exc:
        return f"epoch {epoch} cannot hash it: {exc}"
    if scheme.prefix(bucket) != prefix:
        return f"epoch {epoch} stores it in bucket {bucket}, not under {prefix!r}"
    return None


@functools.lru_cache(maxsize=64)
def _gaps(prefixes: tuple[bytes, ...]) -> tuple[KeyRange, ...]:
    gaps: list[KeyRange] = []
    start = b""
    # The reserved layout row is not data: keep it out of legacy scans too.
    for prefix in sorted({*prefixes, SCHEME_ROW_KEY}):
        if prefix < start:
            continue  # inside the previous hole (it starts with that prefix)
        if start < prefix:
            gaps.append(KeyRange(start, True, prefix, False))
        start = prefix_end(prefix)
        if not start:
            return tuple(gaps)
    gaps.append(KeyRange(start, True, b"", False))
    return tuple(gaps)


# -- ranges of one scheme (shared with the read planner) ---------------------


def shared_prefix(rng: KeyRange) -> bytes:
    """The longest prefix that every key in a bounded range starts with."""
    start, end = rng.start, rng.end
    for n in range(len(start), 0, -1):
        # Keys >= start all start with start[:n] until that prefix's end.
        boundary = prefix_end(start[:n])
        if not boundary or end < boundary or (end == boundary and not rng.end_closed):
            return start[:n]
    return b""


def buckets_of_range(scheme: SaltScheme, rng: KeyRange) -> tuple[int, ...]:
    """The buckets of ``scheme`` that can hold keys of a logical range."""
    if rng.start and rng.end:
        try:
            if rng.start == rng.end:  # a single key (non-empty ranges only get here)
                return (scheme.bucket_of(rng.start),)
            shared_part = getattr(scheme.key_part, "shared_part", None)
            if shared_part is not None:
                part = shared_part(shared_prefix(rng))
                if isinstance(part, bytes):
                    return (scheme.bucket_of_part(part),)
        except UnsaltableKeyError:
            return ()  # never written salted: no bucket holds it
    return scheme.bucket_ids


def physical_range(prefix: bytes, rng: KeyRange) -> KeyRange:
    """A logical range's keys under ``prefix``, as a physical range."""
    start, start_closed = (prefix + rng.start, rng.start_closed) if rng.start else (prefix, True)
    if rng.end:
        end, end_closed = prefix + rng.end, rng.end_closed
    else:
        end, end_closed = prefix_end(prefix), False
    return KeyRange(start, start_closed, end, end_closed)
