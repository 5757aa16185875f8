"""Layout: where every logical key lives, and the rules every reader and writer shares.

Pure code. A :class:`Layout` is a salt scheme plus, for a forward-only
migration, a cutoff policy. It answers every question about the physical key
space without I/O: where a logical key is stored (:meth:`Layout.locate`), what
a physical key means (:meth:`Layout.to_logical`), which key ranges hold legacy
rows (:meth:`Layout.legacy_gaps`), whether a row found somewhere belongs there
(:meth:`Layout.misplaced`, :meth:`Layout.stray_reason`) and how the table's
split-point samples map to logical keys (:meth:`Layout.logical_samples`).

The async and sync tables, the guard and the Beam transforms all ask the
layout, so one rule has one implementation.

A layout whose bucket count changed over time holds :class:`Epochs`
(:meth:`Layout.of_epochs`); today's two shapes (one scheme; a cutoff) are
epoch lists too (:meth:`Layout.as_epochs`) but keep their own fast paths and
rules, so a plain or cutoff table behaves exactly as before epochs existed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from .._exceptions import CutoffError, RowKeyError, SaltSchemeError
from .cutoff import CutoffPolicy
from .epochs import Epoch, Epochs, instant_of
from .ranges import KeyRange
from .salt import SCHEME_ROW_KEY, SaltScheme, prefix_end, to_key

if TYPE_CHECKING:
    from google.cloud.bigtable.data.row import Row

__all__ = ["Layout", "relabel", "samples_in_range"]

#: A hiding rule: why a row under this logical key is left out of reads, or None.
HidingRule = Callable[[bytes], str | None]


#: A cutoff policy's ``unreadable`` as an epoch list's, and back.
_UNREADABLE_EPOCH: Final = {"error": "error", "legacy": "first", "salted": "last"}
_UNREADABLE_CUTOFF: Final = {v: k for k, v in _UNREADABLE_EPOCH.items()}


@final
@dataclass(frozen=True, slots=True)
class Layout:
    """Where each logical key lives: salted, or (with a cutoff) possibly legacy.

    Args:
        scheme: How keys at or after the cutoff (every key, without one) are
            salted; with ``epochs``, the newest epoch's scheme.
        cutoff: Forward-only migration: keys whose timestamp is before the
            cutoff stay unsalted, where they were written.
        epochs: A layout with several salted epochs (see :meth:`of_epochs`,
            the way to make one); None for today's two shapes.

    Raises:
        SaltSchemeError: ``epochs`` that do not match ``scheme``, come with a
            cutoff, or have one of today's shapes (give those as ``scheme``
            and ``cutoff``: :meth:`of_epochs` does).
    """

    scheme: SaltScheme
    cutoff: CutoffPolicy | None = None
    epochs: Epochs | None = None

    def __post_init__(self) -> None:
        epochs = self.epochs
        if epochs is None:
            return
        if not isinstance(epochs, Epochs):
            raise SaltSchemeError(f"epochs must be an Epochs, got {epochs!r}")
        if self.cutoff is not None or epochs.newest != self.scheme or _plain_shape(epochs):
            raise SaltSchemeError(
                "make a layout with epochs with Layout.of_epochs(epochs): it names the newest "
                "scheme and keeps one-scheme and cutoff layouts in their own form"
            )

    @classmethod
    def of_epochs(cls, epochs: Epochs) -> Layout:
        """The layout of an epoch list; one scheme or a cutoff become today's layouts.

        ``Layout.of_epochs(layout.as_epochs()) == layout`` for every layout
        without a stored lead (a lead needs the epoch form).
        """
        if not _plain_shape(epochs):
            return cls(epochs.newest, None, epochs)
        if len(epochs) == 1:
            return cls(epochs.newest)
        assert epochs.timestamp is not None
        assert epochs.epochs[1].start is not None
        policy = CutoffPolicy(
            instant_of(epochs.epochs[1].start),
            epochs.timestamp,
            unreadable=_UNREADABLE_CUTOFF[epochs.unreadable],  # type: ignore[arg-type]
        )
        return cls(epochs.newest, policy)

    def as_epochs(self) -> Epochs:
        """This layout as an epoch list (one scheme: one epoch; a cutoff: two)."""
        if self.epochs is not None:
            return self.epochs
        if self.cutoff is None:
            return Epochs((Epoch(None, self.scheme),))
        cutoff = self.cutoff
        return Epochs(
            (Epoch(None, None), Epoch(cutoff.cutoff_micros, self.scheme)),
            cutoff.timestamp,
            _UNREADABLE_EPOCH[cutoff.unreadable],  # type: ignore[arg-type]
        )

    @property
    def schemes(self) -> tuple[SaltScheme, ...]:
        """Every salt scheme rows of this layout may be stored with, oldest first."""
        return (self.scheme,) if self.epochs is None else self.epochs.schemes

    def locate(self, key: bytes | str) -> tuple[int | None, bytes]:
        """``(bucket, physical_key)``; bucket None means the legacy, unsalted key.

        With epochs, the bucket is of the key's epoch's scheme (see
        :meth:`Epochs.locate`, which names the epoch too).

        Raises:
            RowKeyError: The key cannot be stored (empty, too long, or a legacy
                key that would sit inside the salted key space).
            CutoffError: Its timestamp cannot be read.
        """
        key = to_key(key)
        if not key:
            raise RowKeyError("row keys must not be empty")
        if self.cutoff is None:
            if self.epochs is None:
                return self.scheme.locate(key)
            _, bucket, physical = self.epochs.locate(key)
            return bucket, physical
        if self.cutoff.side_of(key) == "salted":
            return self.scheme.locate(key)
        if key.startswith(SCHEME_ROW_KEY):
            raise RowKeyError(f"{key!r} is saltedtable's reserved layout row")
        if self.scheme.has_prefix(key):
            raise RowKeyError(
                f"legacy (pre-cutoff) key {key!r} starts with a salt prefix of {self.scheme}; "
                "it would be read back as a salted row. Give the scheme a marker "
                "(e.g. SaltScheme(..., marker=b'~')) so the two key spaces cannot meet"
            )
        return None, key

    def locator(self) -> Callable[[bytes | str], tuple[int | None, bytes]]:
        """:meth:`locate` for point writes: see :meth:`SaltScheme.locator`."""
        if self.cutoff is None and self.epochs is None:
            return self.scheme.locator()
        return self.locate

    def salter(self) -> Callable[[bytes | str], bytes]:
        """``locate(key)[1]`` for the write path: see :meth:`SaltScheme.salter`."""
        if self.cutoff is None and self.epochs is None:
            return self.scheme.salter()
        return functools.partial(_physical_key, self)

    def to_logical(self, physical: bytes) -> bytes:
        """The logical key of a physical key written by this layout.

        Raises:
            RowKeyError: Without a cutoff, a key that carries no salt prefix.
        """
        if self.epochs is not None:
            return self.epochs.logical_of(physical)
        if self.scheme.has_prefix(physical):
            return self.scheme.unsalt_key(physical)
        if self.cutoff is None:
            raise RowKeyError(f"{physical!r} does not carry a salt prefix of {self.scheme}")
        return physical

    def salted_holes(self) -> Iterator[tuple[bytes, bytes]]:
        """The salted key space as sorted ``[prefix, prefix_end)`` ranges (b"" = no end)."""
        prefixes = {p for scheme in self.schemes for p in scheme.prefixes}
        for prefix in sorted(prefixes):
            yield prefix, prefix_end(prefix)

    def legacy_gaps(self) -> tuple[KeyRange, ...]:
        """The physical key space outside every salt prefix and the layout row, sorted.

        With a cutoff, this is where legacy rows live; without one, where no
        row of this layout should be.
        """
        if self.epochs is not None:
            return self.epochs.legacy_gaps()
        try:
            return _cached_gaps(self.scheme)
        except TypeError:  # a key part that cannot be hashed: compute it again
            return _legacy_gaps(self.scheme)

    def misplaced(self, physical: bytes, *, copies: bool = False) -> str | None:
        """Why a row found inside a salt prefix range does not belong there, or None.

        A row there must carry the bucket the scheme computes for the rest of
        its key and, with a cutoff, a key time at or after the cutoff, unless
        ``copies``: while a migration backfills the legacy rows, their copies
        (right bucket, key time before the cutoff) are expected there.
        With epochs: the attribution rule (:meth:`Epochs.why_hidden`).
        """
        if self.epochs is not None:
            return self.epochs.why_hidden(physical)
        try:
            _, logical = self.scheme.split_key(physical)
        except RowKeyError as exc:
            return f"{physical!r}: {exc}"
        if self.cutoff is None:
            return None
        if copies and self.salted_stray_reason(logical) is not None:
            return None  # a backfilled copy of a legacy row
        try:
            side = self.cutoff.side_of(logical)
        except CutoffError as exc:
            return f"{physical!r}: {exc}"
        if side != "salted":
            return f"{physical!r}: its key time is before the cutoff, so it is a legacy row"
        return None

    def unexpected_outside(self, physical: bytes) -> str | None:
        """Why a row found outside every salt prefix contradicts the layout, or None.

        Without a cutoff nothing should be there (unsalted data, or rows of
        another bucket count, hash or marker). With one, legacy rows are
        expected there unless their key time puts them on the salted side.
        With epochs: the attribution rule (:meth:`Epochs.why_hidden`).
        """
        if self.epochs is not None:
            return self.epochs.why_hidden(physical)
        if self.cutoff is None:
            return (
                f"{physical!r}: outside every salt prefix of this scheme (written unsalted, "
                "or with another bucket count, hash or marker)"
            )
        try:
            side = self.cutoff.side_of(physical)
        except CutoffError:
            return None
        if side == "salted":
            return (
                f"{physical!r}: an unsalted row whose key time is at or after the cutoff "
                "(reads look for it on the salted side; choose a later cutoff)"
            )
        return None

    def stray_reason(self, key: bytes) -> str | None:
        """Why a row on the legacy side must be left out of scans, or None to keep it.

        A legacy row whose key time says it lives on the salted side
        contradicts the layout (it was written unsalted after the cutoff):
        point reads look for it on the salted side, so a scan that showed it
        would show a row that reads cannot find, or show a key twice.
        """
        if self.epochs is not None:
            return self.epochs.hidden_under(b"", key) if self.epochs.has_legacy else None
        cutoff = self.cutoff
        if cutoff is None:
            return None
        try:
            if cutoff.key_time(key) < cutoff.cutoff_micros:
                return None
            return f"its key time is at or after the cutoff {cutoff.cutoff.isoformat()}"
        except ValueError:
            # No readable time: only unreadable="salted" sends such keys elsewhere.
            if cutoff.unreadable != "salted":
                return None
            return "its key time is unreadable and the policy sends those to the salted side"

    def salted_stray_reason(self, key: bytes) -> str | None:
        """Why a row in a salt bucket must be left out of scans, or None to keep it.

        The exact complement of :meth:`stray_reason`, so that every key is
        shown on one side only. With a cutoff, a bucket row whose key time
        (or unreadable time) puts it on the legacy side is not where point
        reads look for it, so a scan that showed it would show a row reads
        cannot find, or a key twice. Such rows are the copies a backfill
        writes before the cut-over (``saltedtable.beam.BackfillLegacy``).
        With epochs, only the key's time is checked (a row under a prefix
        needs :meth:`hiding_under`, which checks its bucket too).
        """
        if self.epochs is not None:
            return _salted_epoch_reason(self.epochs, key)
        cutoff = self.cutoff
        if cutoff is None:
            return None
        try:
            if cutoff.key_time(key) >= cutoff.cutoff_micros:
                return None
        except ValueError:
            if cutoff.unreadable == "salted":
                return None
            return "its key time is unreadable and the policy reads such keys on the legacy side"
        return f"its key time is before the cutoff {cutoff.cutoff.isoformat()} (a legacy row)"

    def hidden_reason(self, bucket: int | None, key: bytes) -> str | None:
        """Why a row read from ``bucket`` under logical ``key`` is left out of reads, or None.

        The one hiding rule every reader asks (the async and sync tables and
        Beam): outside a migration nothing is hidden; with a cutoff a row is
        shown on one side only, the legacy side (``bucket`` None) by
        :meth:`stray_reason`, a salt bucket by :meth:`salted_stray_reason`.
        """
        rule = self.hiding(bucket)
        return None if rule is None else rule(key)

    def hiding(self, bucket: int | None) -> HidingRule | None:
        """:meth:`hidden_reason` for the rows of one side, as a function of the key.

        For a reader's per-row loop: None when the side hides nothing (no
        cutoff), so the loop pays nothing for it.
        """
        if self.cutoff is None and self.epochs is None:
            return None
        return self.stray_reason if bucket is None else self.salted_stray_reason

    def hiding_under(self, bucket: int | None, prefix: bytes) -> HidingRule | None:
        """:meth:`hiding` for the rows read under one sub-query's ``prefix``.

        Exact for epochs (the attribution rule of :meth:`Epochs.hiding_for`:
        the key's time and its bucket); today's layouts ask :meth:`hiding`.
        """
        if self.epochs is None:
            return self.hiding(bucket)
        return self.epochs.hiding_for(prefix)

    def logical_samples(self, samples: Iterable[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
        """Map ``sample_row_keys`` results of the physical table to logical keys.

        Each sample's share of the data (the offset delta since the previous
        sample) is credited to its logical key; offsets become the running
        total in logical order, so they stay increasing and usable with
        ``ReadRowsQuery.shard``. Split points between buckets, the layout row
        and keys this layout did not write are dropped; a final empty key
        (the table's end) is kept with the total.
        """
        logical: list[tuple[bytes, int]] = []
        previous = total = 0
        last_key: bytes | None = None
        for physical, offset in samples:
            delta, previous = offset - previous, offset
            total, last_key = offset, physical
            if not physical or physical.startswith(SCHEME_ROW_KEY):
                continue
            try:
                logical.append((self.to_logical(physical), delta))
            except RowKeyError:
                continue
        logical.sort()
        out: list[tuple[bytes, int]] = []
        running = 0
        for key, delta in logical:
            running += delta
            out.append((key, running))
        if last_key is not None and not last_key:
            out.append((b"", total))
        return out


def relabel(row: Row, key: bytes) -> Row:
    """Give ``row`` and every cell in it the logical ``key`` (cells carry the key too).

    Every reader returns rows under their logical key, so Bigtable's physical
    (salted) key must not show through a cell either. Returns the same row.
    """
    row.row_key = key
    for cell in row.cells:
        cell.row_key = key
    return row


def samples_in_range(
    samples: Iterable[tuple[bytes, int]], start: bytes | None, end: bytes | None
) -> list[tuple[bytes, int]]:
    """The part of :meth:`Layout.logical_samples` a row range asks for.

    What ``sample_row_keys(row_range=...)`` answers: the samples strictly inside
    ``(start, end)``, then one at ``end`` (``b""`` without an end: the table's
    end). Offsets count from ``start``; the last one is the estimate up to the
    first sample at or after ``end``.

    Args:
        samples: Logical samples in key order, offsets increasing; a final
            ``b""`` sample is the table's end.
        start: The range's start key (None or empty: the table's start).
        end: The range's end key (None or empty: the table's end).
    """
    base = 0
    inside: list[tuple[bytes, int]] = []
    end_offset: int | None = None
    last = 0
    for key, offset in samples:
        last = offset
        if not key:
            break  # the table's end
        if start and key <= start:
            base = offset
        elif end and key >= end:
            end_offset = offset
            break
        else:
            inside.append((key, offset - base))
    tail = last if end_offset is None else end_offset
    return [*inside, (end or b"", max(tail - base, 0))]


def _legacy_gaps(scheme: SaltScheme) -> tuple[KeyRange, ...]:
    gaps: list[KeyRange] = []
    start = b""
    # The reserved layout row is not data: keep it out of legacy scans too.
    for prefix in sorted({*scheme.prefixes, SCHEME_ROW_KEY}):
        if prefix < start:
            continue  # inside the previous hole (it starts with that prefix)
        if start < prefix:
            gaps.append(KeyRange(start, True, prefix, False))
        start = prefix_end(prefix)
        if not start:
            return tuple(gaps)
    gaps.append(KeyRange(start, True, b"", False))
    return tuple(gaps)


_cached_gaps = functools.lru_cache(maxsize=64)(_legacy_gaps)


def _plain_shape(epochs: Epochs) -> bool:
    """True for the lists today's layouts express: one salted epoch; unsalted then salted."""
    if epochs.min_lead is not None:
        return False  # a lead is stored only in the epoch form
    if len(epochs) == 1:
        return True
    return len(epochs) == 2 and epochs.has_legacy


def _salted_epoch_reason(epochs: Epochs, key: bytes) -> str | None:
    try:
        epoch = epochs.epoch_of(key)
    except CutoffError:
        return "its key time is unreadable, and such keys are refused"
    if epochs.epochs[epoch].scheme is None:
        return f"its key time puts it in the unsalted epoch {epoch}"
    return None


def _physical_key(layout: Layout, key: bytes | str) -> bytes:
    """Where ``key`` is stored under ``layout`` (its :meth:`Layout.salter` with a cutoff)."""
    return layout.locate(key)[1]
