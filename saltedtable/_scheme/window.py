"""The dual-layout window: change N for keys without a time (pure rules, no I/O).

Keys that carry no time (users, devices) cannot be routed to a layout by time.
To move them from an old salt scheme (N buckets) to a new one (M buckets), a
table opens a *window* during which a logical row may have cells in both
layouts. This module holds every rule the window needs, as pure functions over
the client's own ``Row``/``Cell``, mutations and row filters; the table and
the Beam pipelines only send what these functions return.

The rule (docs/epochs-window.md says the same at more length):

* **Writes** go to the new layout only. The old layout takes no writes while
  the window is open, except the deletes below, so every old cell is older
  (in real time) than every operation of the window.
* **Deletes** apply the user's delete to the new row and, in the same
  ``mutate_row``, write a **tombstone**: a cell in the window's reserved family
  (:data:`WINDOW_FAMILY`), whose qualifier is a token unique to the delete and
  whose value records the delete's scope (row, family, or column and time
  range). The same delete is then applied to the old row (deletes reach both);
  the tombstone keeps the logical row right if that second step never happens
  or if a backfill copies an old cell in between.
* **A logical row** is ``combine(old, new)``: every new cell, plus every old
  cell that no tombstone of the new row hides and whose family, qualifier and
  timestamp no new cell has. So two cells with the same family, qualifier and
  timestamp resolve to the **new** layout's (it was written later, as Bigtable
  keeps the later write of a cell); a partial update in the new layout never
  hides older columns of the old one; a tombstone hides old cells only, never a
  new cell written after the delete. The column family's ``max_versions`` is
  then re-applied, per column, to the union (the newest cells are kept).
* **The backfill** copies an old row's cells (with their timestamps) into the
  new row with ``check_and_mutate_row``: the copy is the false branch of a
  predicate that matches when the new row gained, since the backfill read it,
  a tombstone it did not see, or a cell at the family, qualifier and timestamp
  of a cell it copies. A delete or a write that reached the new row first is
  therefore never overwritten or brought back; a predicate that matches means
  "read again". The copy writes only cells the union already shows, so every
  state in between (a crash, a partial copy, a second run) reads the same.
* **Prefix collisions**: old and new layouts share the hash family, separator
  and marker, so a physical key names one logical key in both. When a key's old
  and new physical keys are equal (N=16 bucket 5 and M=64 bucket 5 both write
  ``05-key``), that row *is* both: it is read once, combined as a new row alone
  (no tombstones: a delete applies once, directly), and the backfill skips it.
* **Filters**: per-cell filters, per-column limits, ``strip_value`` and
  latest-only are re-applied to the union locally (:func:`plan_filter`);
  row-level, conditional, sampling, sink and label filters are refused
  (:class:`~saltedtable._exceptions.WindowFilterError`).
* **Atomic single-row operations** are refused in the window
  (:meth:`Window.refuse_atomic`): half a logical row cannot be checked or
  incremented atomically.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, final

from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable.data.row_filters import (
    ApplyLabelFilter,
    BlockAllFilter,
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    CellsRowOffsetFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    ConditionalRowFilter,
    FamilyNameRegexFilter,
    PassAllFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    RowSampleFilter,
    SinkFilter,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueRangeFilter,
    ValueRegexFilter,
)

from .._exceptions import LayoutError, RowKeyError, SaltSchemeError, WindowError, WindowFilterError
from .salt import SaltScheme, format_key, to_key

__all__ = [
    "WINDOW_FAMILY",
    "BackfillCopy",
    "BackfillProgress",
    "Placement",
    "Tombstone",
    "Window",
    "WindowFilter",
    "WindowWrite",
    "apply_filter",
    "backfill_copies",
    "cells_to_copy",
    "combine",
    "plan_filter",
    "write_both",
]

WINDOW_FAMILY: Final = "saltedtable-window"
"""The column family that holds the window's tombstones (created when a window opens).

Reserved: user mutations may not name it, and reads never show it. It must
have no garbage-collection rule that could drop a tombstone while the window
is open."""
_FAMILY_NAME: Final = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]*")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The last microsecond a ``datetime`` (so the client's timestamp filter) can name.
_MAX_MICROS: Final = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
#: A Bigtable timestamp's granularity (microseconds per millisecond).
_MILLI: Final = 1000
_ATOMIC: Final = frozenset({"check_and_mutate_row", "read_modify_write_row"})


# -- tombstones --------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Tombstone:
    """The scope of one delete made in the window: which *old* cells it hides.

    ``family=None`` is the whole row (``DeleteAllFromRow``); ``qualifier=None``
    a whole family (``DeleteAllFromFamily``); otherwise one column, restricted
    to timestamps in ``[start_micros, end_micros)`` (``DeleteRangeFromColumn``;
    ``end_micros=None``: no upper bound).
    """

    family: str | None = None
    qualifier: bytes | None = None
    start_micros: int = 0
    end_micros: int | None = None

    @classmethod
    def of(cls, mutation: Mutation) -> Tombstone | None:
        """The scope of a delete mutation, or None when ``mutation`` deletes nothing."""
        if isinstance(mutation, DeleteAllFromRow):
            return cls()
        if isinstance(mutation, DeleteAllFromFamily):
            return cls(mutation.family_to_delete)
        if isinstance(mutation, DeleteRangeFromColumn):
            qualifier = to_key(mutation.qualifier)
            return cls(
                mutation.family,
                qualifier,
                mutation.start_timestamp_micros or 0,
                mutation.end_timestamp_micros,
            )
        return None

    def hides(self, cell: Cell) -> bool:
        """True when the delete this tombstone records covers ``cell`` (an old cell)."""
        if self.family is None:
            return True
        if cell.family != self.family:
            return False
        if self.qualifier is None:
            return True
        return (
            cell.qualifier == self.qualifier
            and cell.timestamp_micros >= self.start_micros
            and (self.end_micros is None or cell.timestamp_micros < self.end_micros)
        )

    def encode(self) -> bytes:
        """The tombstone cell's value: the scope as JSON (qualifier in hex)."""
        scope: dict[str, object] = {"v": 1}
        if self.family is not None:
            scope["family"] = self.family
        if self.qualifier is not None:
            scope["qualifier"] = self.qualifier.hex()
            scope["start"] = self.start_micros
            if self.end_micros is not None:
                scope["end"] = self.end_micros
        return json.dumps(scope, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> Tombstone:
        """Read a tombstone cell's value (see :meth:`encode`).

        Raises:
            LayoutError: The value is not a tombstone this release wrote; reading
                on would either hide live cells or bring deleted ones back.
        """
        try:
            scope = json.loads(value)
            if not isinstance(scope, dict) or scope.get("v") != 1:
                raise ValueError("not a version 1 tombstone")
            family = scope.get("family")
            qualifier = scope.get("qualifier")
            end = scope.get("end")
            return cls(
                None if family is None else str(family),
                None if qualifier is None else bytes.fromhex(qualifier),
                int(scope.get("start", 0)),
                None if end is None else int(end),
            )
        except (ValueError, TypeError) as exc:
            raise LayoutError(
                f"unreadable window tombstone {value[:80]!r}: {exc}; the window's family "
                "holds a cell saltedtable did not write"
            ) from exc


def _tombstones(row: Row | None, family: str) -> list[Tombstone]:
    return (
        [] if row is None else [Tombstone.decode(c.value) for c in row.cells if c.family == family]
    )


# -- the combine rule ----------------------------------------------------------


def _sort_key(cell: Cell) -> tuple[str, bytes, int]:
    return cell.family, cell.qualifier, -cell.timestamp_micros


def _limit_versions(cells: list[Cell], max_versions: int | Mapping[str, int] | None) -> list[Cell]:
    """Keep each column's newest cells (``cells`` sorted newest first per column)."""
    if max_versions is None:
        return cells
    out: list[Cell] = []
    seen: dict[tuple[str, bytes], int] = {}
    for cell in cells:
        limit = max_versions if isinstance(max_versions, int) else max_versions.get(cell.family)
        column = (cell.family, cell.qualifier)
        n = seen.get(column, 0)
        seen[column] = n + 1
        if limit is None or n < limit:
            out.append(cell)
    return out


def combine(
    key: bytes,
    old: Row | None,
    new: Row | None,
    *,
    family: str = WINDOW_FAMILY,
    max_versions: int | Mapping[str, int] | None = None,
) -> Row | None:
    """The logical row of ``key`` from its old-layout and new-layout rows.

    Every new cell; every old cell that no tombstone of the new row hides and
    whose (family, qualifier, timestamp) no new cell has (the new cell wins:
    it was written later); then ``max_versions`` per column (an int for every
    family, or a mapping family -> versions; None keeps all). Cells of the
    window's ``family`` never appear in the result.

    Args:
        key: The logical row key (the cells of the result carry it).
        old: The row read at the key's old physical key (None: no such row).
            None also when the key's two physical keys are one row
            (:meth:`Window.shares_row`): that row is the new row alone.
        new: The row read at the key's new physical key.
        family: The window's tombstone family.
        max_versions: The garbage-collection versions to re-apply.

    Returns:
        The logical row, or None when it has no cell.
    """
    tombs = _tombstones(new, family)
    taken: set[tuple[str, bytes, int]] = set()
    cells: list[Cell] = []
    # A row read through an interleave can hold a cell twice: keep it once.
    for c in [] if new is None else new.cells:
        if c.family != family and (c.family, c.qualifier, c.timestamp_micros) not in taken:
            taken.add((c.family, c.qualifier, c.timestamp_micros))
            cells.append(Cell(c.value, key, c.family, c.qualifier, c.timestamp_micros))
    if old is not None:
        for c in old.cells:
            if c.family == family or (c.family, c.qualifier, c.timestamp_micros) in taken:
                continue
            if any(t.hides(c) for t in tombs):
                continue
            taken.add((c.family, c.qualifier, c.timestamp_micros))
            cells.append(Cell(c.value, key, c.family, c.qualifier, c.timestamp_micros))
    cells.sort(key=_sort_key)
    cells = _limit_versions(cells, max_versions)
    return Row(key, cells) if cells else None


# -- where a key lives ---------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Placement:
    """What a physical row read during the window is (see :meth:`Window.place`).

    Attributes:
        key: The logical key the physical key names (None: no layout writes it).
        old: The row is ``key``'s row in the old layout.
        new: The row is ``key``'s row in the new layout. Both: the shared row.
    """

    key: bytes | None
    old: bool
    new: bool

    @property
    def shared(self) -> bool:
        """The row is the key's row in both layouts (a prefix collision)."""
        return self.old and self.new


@final
@dataclass(frozen=True, slots=True)
class WindowWrite:
    """What one logical ``mutate_row`` becomes in the window (see :meth:`Window.write`).

    Send ``new_mutations`` to ``new_key`` first, then (when ``old_key`` is set)
    ``old_mutations`` to ``old_key``: the tombstones make the second step
    optional for correctness, so a crash between the two loses nothing.
    """

    new_key: bytes
    new_mutations: tuple[Mutation, ...]
    old_key: bytes | None = None
    old_mutations: tuple[Mutation, ...] = ()


@final
@dataclass(frozen=True, slots=True)
class BackfillCopy:
    """One ``check_and_mutate_row`` of the backfill (see :meth:`Window.backfill`).

    Send ``check_and_mutate_row(row_key, predicate,
    false_case_mutations=list(mutations))``. A matched predicate
    (``True``) means the new row changed since it was read and nothing was
    written: read both rows again and plan again.
    """

    row_key: bytes
    predicate: RowFilter
    mutations: tuple[SetCell, ...]


@final
@dataclass(slots=True)
class BackfillProgress:
    """What one backfill step did, and where to resume it.

    Attributes:
        cursor: The last old physical key done; pass it as ``after`` to resume
            (None: nothing was done).
        keys: Old rows visited.
        copied: Cells copied (``backfill_rows``).
        replans: Copies refused by their predicate, then read and planned again.
        left: Keys whose old row the new one does not show yet (``verify_rows``).
        retired: Old rows deleted (``retire_rows``), or rows whose tombstones
            were dropped (``drop_tombstones``).
        done: The step reached the end of the old layout.
    """

    cursor: bytes | None = None
    keys: int = 0
    copied: int = 0
    replans: int = 0
    left: int = 0
    retired: int = 0
    done: bool = False


def _micros_time(micros: int) -> datetime:
    # Exact: a float of the seconds would lose microseconds for today's times.
    return _EPOCH + timedelta(microseconds=micros)


def _exact_cell(cell: Cell) -> RowFilter:
    """A filter matching exactly the cell at ``cell``'s family, qualifier and millisecond."""
    start = cell.timestamp_micros - cell.timestamp_micros % _MILLI
    column = ColumnRangeFilter(cell.family, cell.qualifier, cell.qualifier)
    if start + _MILLI > _MAX_MICROS:
        # The client's timestamp filter takes datetimes, which end in year 9999: match
        # the column instead. Safe (a match only means "read again"), but such a copy
        # waits until the new row has no cell in that column.
        return column
    return RowFilterChain(
        [
            column,
            TimestampRangeFilter(_micros_time(start), _micros_time(start + _MILLI)),
        ]
    )


def _unseen_tombstones(family: str, seen: Iterable[bytes]) -> list[RowFilter]:
    """Filters matching every tombstone of ``family`` whose qualifier is not in ``seen``.

    The complement of a finite set of qualifiers is a finite set of open column
    ranges, so no regex (RE2 cannot negate) is needed.
    """
    ordered = sorted(set(seen))
    if not ordered:
        return [ColumnRangeFilter(family)]
    out: list[RowFilter] = [
        ColumnRangeFilter(family, None, ordered[0], inclusive_end=False),
        ColumnRangeFilter(family, ordered[-1], None, inclusive_start=False),
    ]
    for lo, hi in itertools.pairwise(ordered):
        out.append(ColumnRangeFilter(family, lo, hi, inclusive_start=False, inclusive_end=False))
    return out


def write_both(
    new_key: bytes,
    old_key: bytes | None,
    mutations: Sequence[Mutation],
    *,
    token: bytes,
    now_micros: int,
    family: str = WINDOW_FAMILY,
) -> WindowWrite:
    """The window's write rule for a logical row with two physical rows (``old_key`` None: one).

    Every mutation goes to ``new_key``; each delete is followed there by its
    tombstone (qualifier ``token`` + the delete's index, timestamp
    ``now_micros`` at millisecond granularity) and is also sent to ``old_key``.
    With one physical row the mutations go as they are. Any place that moves a
    logical row between two physical keys (a resalt window, a moving hot part)
    writes through this rule; the caller refuses what it cannot combine first.
    """
    if not token:
        raise ValueError("a window write needs a non-empty token")
    if now_micros < 0:
        raise ValueError(f"now_micros must be >= 0, got {now_micros}")
    if old_key is None:
        return WindowWrite(new_key, tuple(mutations))
    stamp = now_micros - now_micros % _MILLI
    new_side: list[Mutation] = []
    old_side: list[Mutation] = []
    for index, m in enumerate(mutations):
        new_side.append(m)
        scope = Tombstone.of(m)
        if scope is not None:
            qualifier = token + index.to_bytes(4, "big")
            new_side.append(SetCell(family, qualifier, scope.encode(), stamp))
            old_side.append(m)
    return WindowWrite(new_key, tuple(new_side), old_key if old_side else None, tuple(old_side))


def cells_to_copy(old: Row | None, new: Row | None, *, family: str = WINDOW_FAMILY) -> list[Cell]:
    """The old row's cells the new row does not yet show: not hidden, not taken by a new cell."""
    if old is None:
        return []
    tombs = _tombstones(new, family)
    taken = (
        set() if new is None else {(c.family, c.qualifier, c.timestamp_micros) for c in new.cells}
    )
    return sorted(
        (
            c
            for c in old.cells
            if c.family != family
            and (c.family, c.qualifier, c.timestamp_micros) not in taken
            and not any(t.hides(c) for t in tombs)
        ),
        key=_sort_key,
    )


def backfill_copies(
    new_key: bytes,
    old: Row | None,
    new: Row | None,
    *,
    family: str = WINDOW_FAMILY,
    max_cells: int = 100,
) -> list[BackfillCopy]:
    """The race-safe copy of an old row into the new row at ``new_key`` (:meth:`Window.backfill`).

    One ``check_and_mutate_row`` per ``max_cells`` cells; its predicate matches
    (and nothing is written) when the new row gained a tombstone the read did
    not see or a cell at the family, qualifier and timestamp of a copied cell.
    """
    if max_cells < 1:
        raise ValueError(f"max_cells must be >= 1, got {max_cells}")
    cells = cells_to_copy(old, new, family=family)
    seen = [] if new is None else [c.qualifier for c in new.cells if c.family == family]
    guard = _unseen_tombstones(family, seen)
    out = []
    for i in range(0, len(cells), max_cells):
        chunk = cells[i : i + max_cells]
        predicate = RowFilterUnion([*guard, *(_exact_cell(c) for c in chunk)])
        copies = tuple(SetCell(c.family, c.qualifier, c.value, c.timestamp_micros) for c in chunk)
        out.append(BackfillCopy(new_key, predicate, copies))
    return out


@final
@dataclass(frozen=True, slots=True)
class Window:
    """A dual-layout window: the logical rows of ``old`` move to ``new``.

    Args:
        old: The layout the rows were written with.
        new: The layout writes go to from now on.
        family: The column family that holds the window's tombstones.

    Raises:
        SaltSchemeError: The layouts differ in hash, separator or marker (then
            one physical key could name two logical keys, and a collision could
            not be told apart), have the same bucket count, or ``family`` is
            not a column family name.
    """

    old: SaltScheme
    new: SaltScheme
    family: str = WINDOW_FAMILY

    def __post_init__(self) -> None:
        for name in ("hash", "separator", "marker"):
            a, b = getattr(self.old, name), getattr(self.new, name)
            if a != b:
                raise SaltSchemeError(
                    f"a resalt window keeps the {name}: old {a!r}, new {b!r}; with another "
                    f"{name} one physical key could name two logical keys. Copy the rows "
                    "to a new table instead (saltedtable.beam.resalt)"
                )
        if self.old.buckets == self.new.buckets:
            raise SaltSchemeError(
                f"a resalt window needs a new bucket count; both layouts have {self.old.buckets}"
            )
        if not isinstance(self.family, str) or not _FAMILY_NAME.fullmatch(self.family):
            raise SaltSchemeError(f"the window family {self.family!r} is not a column family name")

    def __str__(self) -> str:
        return f"resalt window {self.old} -> {self.new}"

    # -- keys ------------------------------------------------------------------

    def physical_keys(self, key: bytes | str) -> tuple[bytes, bytes | None]:
        """``(new physical key, old physical key)`` of a logical key.

        The old key is None when it equals the new one (:meth:`shares_row`). A
        point read asks for both in one request.
        """
        new = self.new.locate(key)[1]
        old = self.old.locate(key)[1]
        return new, (None if old == new else old)

    def shares_row(self, key: bytes | str) -> bool:
        """True when the key's old and new physical rows are the same row.

        Same prefix width and the same bucket number in both layouts. That row
        is read once and combined as a new row alone; deletes apply to it once,
        without a tombstone; the backfill skips it.
        """
        return self.physical_keys(key)[1] is None

    def place(self, physical_key: bytes) -> Placement:
        """What a physical row met in a scan of either layout's ranges belongs to.

        A scan reads each physical range once, even when both layouts' buckets
        cover it (same prefix width), then places each row: the row is the
        key's old row, its new row, both (a shared row), or neither (a row no
        layout writes there: not part of the logical table, like today's
        misplaced rows).
        """
        # Same hash, separator and marker: both layouts read one logical key from
        # a physical key, so a key both accept is the same key.
        found = {}
        for name, scheme in (("old", self.old), ("new", self.new)):
            with contextlib.suppress(RowKeyError):
                found[name] = scheme.split_key(physical_key)[1]
        key = found.get("new", found.get("old"))
        return Placement(key, "old" in found, "new" in found)

    @property
    def divides(self) -> bool:
        """True when the new count is a multiple of the old and the key part is the same.

        Then every new bucket holds keys of exactly one old bucket
        (:meth:`old_bucket`), and the backfill can move one old bucket at a time.
        """
        return self.new.buckets % self.old.buckets == 0 and self.old.key_part == self.new.key_part

    def old_bucket(self, new_bucket: int) -> int:
        """The one old bucket of every key in ``new_bucket`` (needs :attr:`divides`).

        ``h mod kN mod N == h mod N``; Java's signed remainder keeps the sign, so
        its buckets map by the same signed remainder.

        Raises:
            SaltSchemeError: The window does not divide, or ``new_bucket`` is
                not a bucket of the new layout.
        """
        if not self.divides:
            raise SaltSchemeError(
                f"{self}: the new bucket count is not a multiple of the old (with the "
                "same key part), so a new bucket holds keys of several old buckets"
            )
        self.new.prefix(new_bucket)  # checks it is a bucket of the new layout
        n = self.old.buckets
        return -(-new_bucket % n) if new_bucket < 0 else new_bucket % n

    # -- operations ------------------------------------------------------------

    def refuse_atomic(self, operation: str, key: bytes | str) -> None:
        """Refuse an atomic single-row operation on a key while the window is open.

        Args:
            operation: ``"check_and_mutate_row"`` or ``"read_modify_write_row"``.
            key: The logical key.

        Raises:
            WindowError: Always (for those two operations): the logical row may
                be split across both layouts, and one ``CheckAndMutateRow`` or
                ``ReadModifyWriteRow`` sees only one physical row.
        """
        if operation not in _ATOMIC:
            raise ValueError(f"{operation!r} is not an atomic single-row operation")
        raise WindowError(
            f"{operation} on key {format_key(to_key(key))!r} is refused during the {self}: "
            "the logical row may be split across both layouts, and the operation would "
            "see or change only one of them. Retry after the window closes (the backfill "
            "has copied every row and the old layout is retired)."
        )

    def write(
        self, key: bytes | str, mutations: Sequence[Mutation], *, token: bytes, now_micros: int
    ) -> WindowWrite:
        """What one logical ``mutate_row`` sends in the window.

        Writes go to the new row. Each delete is followed, in the same request,
        by its tombstone (qualifier ``token`` + the delete's index, timestamp
        ``now_micros`` at millisecond granularity), and is also sent to the old
        row. A key whose rows are one (:meth:`shares_row`) gets the mutations
        as they are: there is no other row to hide.

        Args:
            key: The logical key.
            mutations: The caller's mutations, in order.
            token: Bytes unique to this call (``uuid.uuid4().bytes``): the
                backfill tells a new delete by its tombstone's qualifier.
            now_micros: The time the tombstones carry (informational; the rule
                never compares it).

        Raises:
            WindowError: A mutation names the window's family, or adds to an
                aggregate cell (``AddToCell``: the two layouts' partial sums
                cannot be combined cell by cell).
        """
        if not token:
            raise ValueError("a window write needs a non-empty token")
        if now_micros < 0:
            raise ValueError(f"now_micros must be >= 0, got {now_micros}")
        for m in mutations:
            named = getattr(m, "family", None) or getattr(m, "family_to_delete", None)
            if named == self.family:
                raise WindowError(
                    f"{type(m).__name__} names the family {self.family!r}, which the {self} "
                    "reserves for its tombstones"
                )
            if isinstance(m, AddToCell):
                raise WindowError(
                    f"AddToCell is refused during the {self}: an aggregate cell split across "
                    "two layouts has no one value"
                )
        new_key, old_key = self.physical_keys(key)
        return write_both(
            new_key, old_key, mutations, token=token, now_micros=now_micros, family=self.family
        )

    def to_copy(self, old: Row | None, new: Row | None) -> list[Cell]:
        """The old cells the new row does not yet show: not hidden, not taken by a new cell."""
        return cells_to_copy(old, new, family=self.family)

    def backfill(
        self, key: bytes | str, old: Row | None, new: Row | None, *, max_cells: int = 100
    ) -> list[BackfillCopy]:
        """The backfill's copy of one key's old row into its new row.

        Args:
            key: The logical key.
            old: The old row as read (None: none).
            new: The new row as read (None: none), in either order or one request
                with ``old``: the predicate catches every delete or write the reads
                missed.
            max_cells: The most cells one request copies (wide rows take several).

        Returns:
            The requests to send, in any order; none when the old row is already
            represented in the new one (it may then be deleted) or the rows are
            one (:meth:`shares_row`).
        """
        if max_cells < 1:
            raise ValueError(f"max_cells must be >= 1, got {max_cells}")
        new_key, old_key = self.physical_keys(key)
        if old_key is None:
            return []
        return backfill_copies(new_key, old, new, family=self.family, max_cells=max_cells)

    def retire_old(
        self, key: bytes | str, old: Row | None, new: Row | None
    ) -> tuple[bytes, tuple[Mutation, ...]] | None:
        """``(old physical key, mutations)`` deleting the old row once the new row shows it.

        None while an old cell still needs copying, or when the rows are one.

        Safe at any later time too: the old layout takes no writes, and neither a
        delete nor a write in the new row can make an old cell needed again.
        """
        old_key = self.physical_keys(key)[1]
        if old_key is None or old is None or self.to_copy(old, new):
            return None
        return old_key, (DeleteAllFromRow(),)

    def logical_rows(
        self,
        rows: Iterable[Row],
        *,
        max_versions: int | Mapping[str, int] | None = None,
    ) -> Iterator[Row]:
        """The logical rows of a scan's physical rows, given in logical-key order.

        Each physical row is placed (:meth:`place`); rows no layout writes there
        are dropped; a key's old and new rows (adjacent, in either order) are
        combined; a key whose combination is empty (tombstones only) yields
        nothing. The rows must come ordered by logical key, as the merged read
        of both layouts' buckets hands them out.
        """
        key: bytes | None = None
        old: Row | None = None
        new: Row | None = None
        for row in rows:
            placed = self.place(row.row_key)
            if placed.key is None:
                continue
            if placed.key != key:
                if key is not None:
                    got = combine(key, old, new, family=self.family, max_versions=max_versions)
                    if got is not None:
                        yield got
                key, old, new = placed.key, None, None
            if placed.new:
                new = row
            else:
                old = row
        if key is not None:
            got = combine(key, old, new, family=self.family, max_versions=max_versions)
            if got is not None:
                yield got

    def combine(
        self,
        key: bytes | str,
        old: Row | None,
        new: Row | None,
        *,
        max_versions: int | Mapping[str, int] | None = None,
    ) -> Row | None:
        """:func:`combine` for this window, ignoring ``old`` when the rows are one."""
        logical = to_key(key)
        if self.shares_row(logical):
            old = None
        return combine(logical, old, new, family=self.family, max_versions=max_versions)


# -- filters -------------------------------------------------------------------

#: Per-cell predicates that look only at the key, family, qualifier and timestamp:
#: they commute with the union and may be sent to both layouts.
_SELECTORS: Final = (
    RowKeyRegexFilter,
    FamilyNameRegexFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    TimestampRangeFilter,
)
#: Re-applied after the union, never sent: they look at values, or at a column's cells.
_LOCAL: Final = (
    ValueRegexFilter,
    ValueRangeFilter,
    CellsColumnLimitFilter,
    StripValueTransformerFilter,
)
_WHY: Final[dict[type[RowFilter], str]] = {
    CellsRowLimitFilter: "limits the cells of a whole row",
    CellsRowOffsetFilter: "skips cells of a whole row",
    ConditionalRowFilter: "decides on a whole row",
    RowSampleFilter: "samples rows",
    SinkFilter: "sinks cells out of a chain",
    ApplyLabelFilter: "labels cells",
}


@final
@dataclass(frozen=True, slots=True)
class WindowFilter:
    """A user filter split for the window (see :func:`plan_filter`).

    Attributes:
        server: What to send to both layouts (None: no filter): it keeps every
            cell the user filter's result depends on, and every tombstone.
        local: The user's filter, re-applied to the combined row.
    """

    server: RowFilter | None
    local: RowFilter | None

    def apply(self, row: Row | None) -> Row | None:
        """The user filter's result on a combined row (None: nothing comes out)."""
        return apply_filter(self.local, row)


def _describe(row_filter: RowFilter) -> str:
    return repr(row_filter)


def _check(row_filter: RowFilter, where: str, window: str) -> None:
    if isinstance(row_filter, RowFilterChain | RowFilterUnion):
        kind = "RowFilterChain" if isinstance(row_filter, RowFilterChain) else "RowFilterUnion"
        for i, f in enumerate(row_filter.filters):
            _check(f, f"{where}{kind}[{i}] > ", window)
        return
    if isinstance(row_filter, PassAllFilter | BlockAllFilter | StripValueTransformerFilter):
        if not row_filter.flag:
            # The emulator strips values even for strip_value False: no one meaning to re-apply.
            raise WindowFilterError(
                f"{where}{_describe(row_filter)} is refused during the {window}: a filter "
                "flag of False has no one meaning in Bigtable; leave the filter out"
            )
        return
    if isinstance(row_filter, _SELECTORS + _LOCAL):
        return
    why = next((w for t, w in _WHY.items() if isinstance(row_filter, t)), None)
    raise WindowFilterError(
        f"{where}{_describe(row_filter)} is refused during the {window}: it "
        f"{why or 'is not a filter the window can re-apply after the union'}, and a logical "
        "row is the union of two physical rows until the window closes. Filter per cell "
        "or per column (family, qualifier, timestamp, value, strip_value, cells per "
        "column), or filter the rows after reading them."
    )


def _is_selector(row_filter: RowFilter) -> bool:
    """A filter built only of key/family/qualifier/timestamp predicates."""
    if isinstance(row_filter, RowFilterChain | RowFilterUnion):
        return bool(row_filter.filters) and all(_is_selector(f) for f in row_filter.filters)
    return isinstance(row_filter, _SELECTORS)


def _selector(row_filter: RowFilter) -> RowFilter | None:
    """A predicate S with F(R) == F(R ∩ S) for every row R (None: every cell)."""
    if _is_selector(row_filter):
        return row_filter
    if isinstance(row_filter, RowFilterChain):
        lead: list[RowFilter] = []
        for f in row_filter.filters:
            if not _is_selector(f):
                break
            lead.append(f)
        if lead:
            return lead[0] if len(lead) == 1 else RowFilterChain(lead)
        return _selector(row_filter.filters[0]) if row_filter.filters else None
    if isinstance(row_filter, RowFilterUnion) and row_filter.filters:
        parts = [_selector(f) for f in row_filter.filters]
        if any(p is None for p in parts):
            return None
        return RowFilterUnion([p for p in parts if p is not None])
    if isinstance(row_filter, BlockAllFilter):
        return row_filter
    return None


def plan_filter(
    row_filter: RowFilter | None, *, window: str, family: str = WINDOW_FAMILY
) -> WindowFilter:
    """Split a user filter into what both layouts are sent and what is re-applied locally.

    Allowed: family, qualifier, column-range, timestamp-range, row-key and value
    filters, per-column cell limits (latest-only is a limit of 1) and
    ``strip_value``, in chains and interleaves. The server filter is the
    leading key/family/qualifier/timestamp part (which commutes with the union,
    as the union decides per family, qualifier and timestamp), interleaved with
    the tombstone family; the whole user filter is re-applied to the union, so
    the result is the one the logical row would give.

    Args:
        row_filter: The user's filter (None: none).
        window: The window's name, for the error (``str(Window)``).
        family: The window's tombstone family.

    Raises:
        WindowFilterError: The filter (or a part of it, named by its path)
            depends on a whole row, decides on a condition, samples, sinks or
            labels.
    """
    if row_filter is None:
        return WindowFilter(None, None)
    _check(row_filter, "", window)
    selector = _selector(row_filter)
    if selector is None:
        return WindowFilter(None, row_filter)
    return WindowFilter(RowFilterUnion([selector, ColumnRangeFilter(family)]), row_filter)


def _translate(regex: bytes) -> bytes:
    r"""RE2's ``\C`` (any byte) in Python's dialect; everything else is shared."""
    out = bytearray()
    i = 0
    while i < len(regex):
        if regex[i : i + 1] == b"\\" and i + 1 < len(regex):
            pair = regex[i : i + 2]
            out += rb"[\x00-\xff]" if pair == rb"\C" else pair
            i += 2
        else:
            out += regex[i : i + 1]
            i += 1
    return bytes(out)


def _matches(regex: bytes | str, subject: bytes) -> bool:
    # Bigtable matches these regexes (RE2) against the whole subject.
    pattern = regex.encode() if isinstance(regex, str) else regex
    return re.fullmatch(_translate(pattern), subject) is not None


def _in_range(
    value: bytes,
    start: bytes | None,
    end: bytes | None,
    inclusive_start: bool,
    inclusive_end: bool,
) -> bool:
    if start is not None and (value < start if inclusive_start else value <= start):
        return False
    return not (end is not None and (value > end if inclusive_end else value >= end))


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _in_time(row_filter: TimestampRangeFilter, ts: int) -> bool:
    # The client sends the start down and the end up to whole milliseconds.
    rng = row_filter.range_
    if rng.start is not None:
        start = _micros(rng.start)
        if ts < start - start % _MILLI:
            return False
    if rng.end is not None:
        end = _micros(rng.end)
        end = end if end % _MILLI == 0 else end - end % _MILLI + _MILLI
        if ts >= end:
            return False
    return True


def _copy(cell: Cell, value: bytes) -> Cell:
    return Cell(value, cell.row_key, cell.family, cell.qualifier, cell.timestamp_micros)


def _filter_cells(row_filter: RowFilter, key: bytes, cells: list[Cell]) -> list[Cell]:
    """Bigtable's semantics of an allowed filter on one row's cells (in cell order)."""
    if isinstance(row_filter, PassAllFilter):
        return cells
    if isinstance(row_filter, BlockAllFilter):
        return []
    if isinstance(row_filter, RowKeyRegexFilter):
        return cells if _matches(row_filter.regex, key) else []
    if isinstance(row_filter, FamilyNameRegexFilter):
        return [c for c in cells if _matches(row_filter.regex, c.family.encode())]
    if isinstance(row_filter, ColumnQualifierRegexFilter):
        return [c for c in cells if _matches(row_filter.regex, c.qualifier)]
    if isinstance(row_filter, ValueRegexFilter):
        return [c for c in cells if _matches(row_filter.regex, c.value)]
    if isinstance(row_filter, ColumnRangeFilter):
        f = row_filter
        return [
            c
            for c in cells
            if c.family == f.family_id
            and _in_range(
                c.qualifier, f.start_qualifier, f.end_qualifier, f.inclusive_start, f.inclusive_end
            )
        ]
    if isinstance(row_filter, ValueRangeFilter):
        v = row_filter
        return [
            c
            for c in cells
            if _in_range(c.value, v.start_value, v.end_value, v.inclusive_start, v.inclusive_end)
        ]
    if isinstance(row_filter, TimestampRangeFilter):
        return [c for c in cells if _in_time(row_filter, c.timestamp_micros)]
    if isinstance(row_filter, CellsColumnLimitFilter):
        return _limit_versions(cells, row_filter.num_cells)
    if isinstance(row_filter, StripValueTransformerFilter):
        return [_copy(c, b"") for c in cells]
    if isinstance(row_filter, RowFilterChain):
        for step in row_filter.filters:
            cells = _filter_cells(step, key, cells)
        return cells
    if isinstance(row_filter, RowFilterUnion):
        # Every branch sees the whole row; the outputs merge in cell order with
        # duplicates kept (a cell two branches pass comes out twice).
        merged = [
            (_sort_key(c), n, c)
            for n, f in enumerate(row_filter.filters)
            for c in _filter_cells(f, key, cells)
        ]
        merged.sort(key=lambda t: (t[0], t[1]))
        return [c for _, _, c in merged]
    raise WindowFilterError(f"{_describe(row_filter)} cannot be applied after the union")


def apply_filter(row_filter: RowFilter | None, row: Row | None) -> Row | None:
    """Apply an allowed filter to a (combined) row, as Bigtable would on one row.

    Regexes are matched in full with Python's ``re`` on bytes (RE2's ``\\C``
    translated); they agree with RE2 for ASCII patterns.

    Raises:
        WindowFilterError: The filter is one :func:`plan_filter` refuses.
    """
    if row is None:
        return None
    if row_filter is None:
        return row
    cells = _filter_cells(row_filter, row.row_key, sorted(row.cells, key=_sort_key))
    return Row(row.row_key, cells) if cells else None
