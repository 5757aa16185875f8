"""A table's hot keys: what its reads and writes do with split rows and hot parts (pure).

A table object made with a :class:`~saltedtable._scheme.hot.HotLayout`
(``hot=``) places the rows of a hot key part in one of the part's K buckets
(the read planner knows, :func:`saltedtable._read.plan.plan_reads`), and
reads and writes a split row through the rules of :mod:`saltedtable._scheme.hot`.
This module holds the table's side of those rules, with no I/O (the writers'
clock, which places rows by the lists before a split's start, is read by
:func:`wall_micros` and handed in):

* :meth:`HotKeys.cut` takes the split rows out of a logical query (its keys,
  and every range cut around them), so that the read engine never meets a
  sub-row: it reads the rest, with the query's own limit;
* :meth:`HotKeys.sub_row_queries` is the one request (or, with a row-key regex,
  one per bucket prefix) that reads the sub-rows of those split rows;
* :meth:`HotKeys.combined` combines them (:func:`combine_rows`) and re-applies
  the filter's row-level steps (:func:`plan_split_filter`);
* :func:`splice` merges the two in key order and cuts at the limit, which
  counts logical rows.

While a hot part **moves** (``HotLayout.moving``, :mod:`saltedtable._scheme.hot_move`)
a key of it may have an old and a new physical row: :meth:`HotKeys.route`
writes such a key by the window's rule (new row, tombstones, deletes to both),
:meth:`HotKeys.cut_moving` takes the moving parts out of a query like split
rows (keys, and each range's piece inside a moving part), and the table reads
them itself: the keys in one request carrying both physical keys
(:meth:`HotKeys.moving_key_query`), the pieces one request per bucket of the
part (:meth:`HotKeys.piece_queries`), combined by :meth:`HotKeys.moving_rows`.

A table without hot lists never gets here: its requests are byte for byte
those of a table made without ``hot=``.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
)
from google.cloud.bigtable.data.row_filters import (
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
)

from ._exceptions import SaltSchemeError, SplitKeyError
from ._read.plan import rewrite_filter
from ._read.query import reversed_request
from ._scheme.hot import (
    HotLayout,
    SplitFilter,
    combine_rows,
    plan_split_filter,
    read_keys,
    refuse_atomic,
    route_mutations,
)
from ._scheme.hot_move import combine_move, move_logical_rows, move_place, move_write, part_ranges
from ._scheme.layout import Layout
from ._scheme.ranges import KeyRange
from ._scheme.salt import format_key, to_key
from ._scheme.window import WindowFilter, plan_filter

if TYPE_CHECKING:
    from google.cloud.bigtable.data.mutations import Mutation
    from google.cloud.bigtable.data.row import Row

__all__ = ["HotKeys", "splice", "wall_micros"]


#: The mutations that delete (they reach every place a reader consults).
_DELETES: Final = (DeleteRangeFromColumn, DeleteAllFromFamily, DeleteAllFromRow)


def _has_key_regex(row_filter: RowFilter | None) -> bool:
    if isinstance(row_filter, RowKeyRegexFilter):
        return True
    if isinstance(row_filter, RowFilterChain | RowFilterUnion):
        return any(_has_key_regex(f) for f in row_filter.filters)
    return False


def _contains(rng: KeyRange, key: bytes) -> bool:
    if rng.start and (key < rng.start or (key == rng.start and not rng.start_closed)):
        return False
    return not rng.end or key < rng.end or (key == rng.end and rng.end_closed)


@final
@dataclass(frozen=True, slots=True)
class HotKeys:
    """A table's hot lists and aggregate families, with the reads and writes they imply.

    Args:
        layout: The hot lists (for the table's scheme).
        aggregates: The table's aggregate families, ``{family: "int64 sum"}``:
            ``AddToCell`` to a split row is refused in any other family.

    Raises:
        SaltSchemeError: The table's layout is not one plain scheme (hot lists
            with a cutoff or layout epochs are not supported yet), or the hot
            layout's scheme is another.
    """

    layout: HotLayout
    aggregates: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "aggregates", MappingProxyType(dict(self.aggregates)))

    @classmethod
    def for_table(
        cls, layout: Layout, hot: HotLayout | None, aggregates: Mapping[str, str] | None
    ) -> HotKeys | None:
        """The table's hot keys, or None when it has no hot lists (today's table)."""
        if hot is None:
            return None
        if not isinstance(hot, HotLayout):
            raise TypeError(f"hot must be a HotLayout, got {type(hot).__name__}")
        if layout.cutoff is not None or layout.epochs is not None:
            raise SaltSchemeError(
                "hot lists work on a table with one salt scheme; a cutoff or layout epochs "
                "with hot lists is not supported yet"
            )
        if hot.scheme != layout.scheme:
            raise SaltSchemeError(
                f"the hot layout's scheme {hot.scheme} is not the table's {layout.scheme}"
            )
        if not hot.parts and not hot.rows:
            return None
        return cls(hot, aggregates or {})

    # -- keys --------------------------------------------------------------------

    def is_split(self, key: bytes) -> bool:
        """Whether the logical row is stored as K sub-rows."""
        return key in self.layout.rows

    def is_hot(self, key: bytes) -> bool:
        """Whether the row is split or belongs to a hot part (placed by the hot lists)."""
        if key in self.layout.rows:
            return True
        parts = self.layout.parts
        return bool(parts) and self.layout.scheme.hashed_part(key) in parts

    def place(self, key: bytes, now_micros: int | None = None) -> tuple[int, bytes]:
        """``(bucket, physical key)`` of an unsplit row (a hot part's: one of its K).

        ``now_micros``: a writer's clock; before a split's start a row is
        placed by the lists before it (:meth:`HotLayout.writers_at`). None:
        by these lists (a reader, for a row with one place, :meth:`places`).
        """
        layout = self.layout if now_micros is None else self.layout.writers_at(now_micros)
        return layout.bucket_of(key), layout.physical_keys(key)[0]

    def places(self, key: bytes) -> tuple[bytes, ...]:
        """Where a reader looks for a logical row: the previous lists' places, then these.

        More than one for a split row, and for a row of a hot part that the
        latest split placed elsewhere (it may have been written before the start).
        """
        return read_keys(self.layout.previous, self.layout, key)

    def reads_combined(self, key: bytes) -> bool:
        """Whether a read combines the key's places as a split row's sub-rows.

        A split row, and a key the latest split placed elsewhere (read in both
        places), except a moving part's key: that one is read by the move's
        rule (:meth:`is_moving`), whose tombstones hide what was deleted.
        """
        if key in self.layout.rows:
            return True
        return (
            self.layout.previous is not None
            and len(self.places(key)) > 1
            and not self.is_moving(key)
        )

    def place_buckets(self, key: bytes) -> dict[bytes, int]:
        """The bucket of each place a reader looks for ``key`` (for the read's statistics)."""
        found: dict[bytes, int] = {}
        for layout in (self.layout.previous, self.layout):
            if layout is not None:
                for bucket in layout.row_buckets(key):
                    found[layout.scheme.prefix(bucket) + key] = bucket
        return found

    # -- writes ------------------------------------------------------------------

    def route(
        self,
        key: bytes | str,
        mutations: Mutation | Sequence[Mutation],
        spread: int,
        now_micros: int,
    ) -> list[tuple[bytes, list[Mutation]]]:
        """The physical writes of one logical ``mutate_row`` (see :func:`route_mutations`).

        Before a split's start (``now_micros``, the writer's clock) writes go
        where the lists before it put them, deletes to every place a reader
        of those lists consults; from the start, writes follow these lists and
        deletes reach the places of both.
        """
        listed: list[Mutation] = (
            list(mutations) if isinstance(mutations, list | tuple) else [mutations]  # type: ignore[list-item]
        )
        layout = self.layout.writers_at(now_micros)
        if layout is not self.layout:
            # Before the start: writes by the lists before it; deletes also reach the
            # places of these lists, where a writer whose clock is ahead may already
            # have written (with no tombstone: one would hide the old place's writes
            # of writers still before the start).
            routed = self._route(key, listed, spread, now_micros, layout, None)
            deletes = [m for m in listed if isinstance(m, _DELETES)]
            if deletes:
                targeted = {place for place, _ in routed}
                routed += [
                    (p, list(deletes)) for p in self.places(to_key(key)) if p not in targeted
                ]
            return routed
        return self._route(key, listed, spread, now_micros, layout, self.layout.previous)

    def _route(
        self,
        key: bytes | str,
        listed: list[Mutation],
        spread: int,
        now_micros: int,
        layout: HotLayout,
        previous: HotLayout | None,
    ) -> list[tuple[bytes, list[Mutation]]]:
        if layout.moving:
            # A key whose part moves (from the split's start on: before it writers
            # place the part's rows by its old fan-out): the window's rule (the new
            # row with the deletes' tombstones first, then the deletes to the old row).
            plan = move_write(
                layout,
                key,
                listed,
                token=uuid.uuid4().bytes,
                now_micros=now_micros,
            )
            if plan is not None:
                out = [(plan.new_key, list(plan.new_mutations))]
                if plan.old_key is not None:
                    out.append((plan.old_key, list(plan.old_mutations)))
                return out
        return route_mutations(
            key,
            listed,
            layout=layout,
            aggregates=self.aggregates,
            spread=spread,
            previous=previous,
        )

    def refuse_atomic(self, key: bytes | str, operation: str) -> None:
        """Refuse ``check_and_mutate_row`` and ``read_modify_write_row`` on a split row,
        and on a row the latest split placed elsewhere (it may sit in two places)."""
        refuse_atomic(self.layout, key, operation, self.layout.previous)

    # -- reads -------------------------------------------------------------------

    def cut(self, query: ReadRowsQuery) -> tuple[ReadRowsQuery | None, tuple[bytes, ...]]:
        """The query without its split rows, and those rows (in key order).

        Keys of the query read in two places (:meth:`places`) are taken out too;
        a range's rows of a hot part are read by the engine in the part's
        buckets, which hold both places (the lists for K hold those for less).

        The first is None when nothing but split rows is left to read (an
        empty query would read the whole table).
        """
        rows = self.layout.rows
        keys = [to_key(k) for k in query.row_keys]
        # A listed key read in two places (a hot part's row that the latest split
        # placed elsewhere) is read like a split row: both places in one request.
        split = {k for k in keys if self.reads_combined(k)}
        kept_keys: list[str | bytes] = [k for k in keys if k not in split]
        ranges = [KeyRange.from_row_range(r) for r in query.row_ranges]
        if not keys and not ranges:
            ranges = [KeyRange()]
        cut_ranges: list[KeyRange] = []
        for rng in ranges:
            inside = sorted(k for k in rows if _contains(rng, k))
            split.update(inside)
            start, start_closed = rng.start, rng.start_closed
            for k in inside:
                piece = KeyRange(start, start_closed, k, False)
                if not piece.is_empty:
                    cut_ranges.append(piece)
                start, start_closed = k, False
            last = KeyRange(start, start_closed, rng.end, rng.end_closed)
            if not last.is_empty:
                cut_ranges.append(last)
        if not split:
            return query, ()
        if not kept_keys and not cut_ranges:
            return None, tuple(sorted(split))
        cut = ReadRowsQuery(
            row_keys=kept_keys or None,
            row_ranges=[r.to_row_range() for r in cut_ranges] or None,
            limit=query.limit or None,
            row_filter=query.filter,
        )
        return cut, tuple(sorted(split))

    # -- a moving part ---------------------------------------------------------

    def is_moving(self, key: bytes) -> bool:
        """Whether the key's part moves and the key has two physical rows."""
        return bool(self.layout.moving) and self.layout.move_keys(key)[1] is not None

    def move_filter(self, row_filter: RowFilter | None) -> WindowFilter:
        """The filter of a read of moving rows (sent with the tombstones, re-applied after)."""
        parts = ", ".join(format_key(p) for p in self.layout.moving)
        return plan_filter(row_filter, window=f"move of hot part {parts}")

    def cut_moving(
        self, query: ReadRowsQuery, *, reverse: bool
    ) -> tuple[ReadRowsQuery | None, tuple[bytes, ...], tuple[KeyRange, ...]]:
        """The query without its moving keys and the moving parts' pieces of its ranges.

        Returns the rest (None: nothing left; an empty query would read the whole
        table), the keys with two physical rows (sorted), and the pieces of the
        ranges inside a moving part (key order). Keys of a moving part whose rows
        did not move stay in the rest.

        Raises:
            SplitKeyError: A reversed read that meets a moving part.
        """
        moving = self.layout.moving
        if not moving:
            return query, (), ()
        keys = [to_key(k) for k in query.row_keys]
        holes = sorted((r for p in moving for r in part_ranges(self.layout, p)), key=_start)
        ranges = [KeyRange.from_row_range(r) for r in query.row_ranges]
        if not keys and not ranges:
            ranges = [KeyRange()]
        pieces: list[KeyRange] = []
        rest: list[KeyRange] = []
        for rng in ranges:
            inside, outside = _subtract(rng, holes)
            pieces.extend(inside)
            rest.extend(outside)
        # A key a piece reads is read there only (a row comes once, as in Bigtable).
        keys = [k for k in keys if not any(_contains(p, k) for p in pieces)]
        taken = sorted({k for k in keys if self.is_moving(k)})
        kept_keys: list[str | bytes] = [k for k in keys if k not in taken]
        if not taken and not pieces:
            return query, (), ()
        if reverse:
            parts = ", ".join(repr(format_key(p)) for p in moving)
            raise SplitKeyError(
                f"a reversed read meets hot part {parts}, which is moving (its rows may sit "
                "in two places until the move is finished): read it forwards, or after "
                "saltedtable split --finish"
            )
        if not kept_keys and not rest:
            return None, tuple(taken), tuple(pieces)
        cut = ReadRowsQuery(
            row_keys=kept_keys or None,
            row_ranges=[r.to_row_range() for r in rest] or None,
            limit=query.limit or None,
            row_filter=query.filter,
        )
        return cut, tuple(taken), tuple(pieces)

    def moving_key_query(self, keys: Sequence[bytes], plan: WindowFilter) -> ReadRowsQuery:
        """One request carrying both physical keys of every moving key in ``keys``."""
        physical: list[str | bytes] = []
        for key in keys:
            new, old = self.layout.move_keys(key)
            physical.extend([new] if old is None else [old, new])
        # One request names keys under many prefixes: a row-key regex cannot be
        # rewritten for all, so it is applied to the combined rows only.
        server = None if _has_key_regex(plan.server) else plan.server
        return ReadRowsQuery(row_keys=physical, row_filter=server)

    def moving_combined(
        self, keys: Sequence[bytes], found: Mapping[bytes, Row], plan: WindowFilter
    ) -> list[Row]:
        """The logical rows of moving ``keys`` (key order) from their physical rows, filtered."""
        out = []
        for key in keys:
            new, old = self.layout.move_keys(key)
            row = combine_move(
                self.layout, key, None if old is None else found.get(old), found.get(new)
            )
            row = plan.apply(row)
            if row is not None:
                out.append(row)
        return out

    def piece_queries(self, piece: KeyRange, plan: WindowFilter) -> list[ReadRowsQuery]:
        """One query per bucket of the moving part that holds ``piece``.

        The part's buckets at its new K include every old one (the K lists are
        prefixes of each other), so they hold both placements. No row limit is
        sent: a key whose combined row is empty (deleted: tombstones only) or
        that a filter drops would use up a place.
        """
        part = self.layout.scheme.hashed_part(piece.start)
        out = []
        for bucket in self.layout.part_buckets(part):
            prefix = self.layout.scheme.prefix(bucket)
            physical = KeyRange(
                prefix + piece.start, piece.start_closed, prefix + piece.end, piece.end_closed
            )
            out.append(
                ReadRowsQuery(
                    row_ranges=physical.to_row_range(),
                    row_filter=rewrite_filter(plan.server, prefix),
                )
            )
        return out

    def moving_rows(self, rows: Iterable[Row], plan: WindowFilter) -> list[Row]:
        """The logical rows of physical rows read from a moving part's buckets, in key order."""

        def logical(row: Row) -> tuple[bytes, bytes]:
            return move_place(self.layout, row.row_key).key or b"", row.row_key

        out = []
        for row in move_logical_rows(self.layout, sorted(rows, key=logical)):
            got = plan.apply(row)
            if got is not None:
                out.append(got)
        return out

    def split_filter(self, row_filter: RowFilter | None, keys: Sequence[bytes]) -> SplitFilter:
        """The filter's split (refused as :func:`plan_split_filter` refuses, naming a row)."""
        return plan_split_filter(row_filter, keys[0] if keys else b"")

    def sub_row_queries(self, keys: Sequence[bytes], down: RowFilter | None) -> list[ReadRowsQuery]:
        """The requests that read every sub-row of ``keys``: one, unless a row-key regex.

        A row-key regex is rewritten for a bucket's prefix, so with one the
        sub-rows are read one request per bucket prefix.
        """
        physical: list[str | bytes] = [p for k in keys for p in self.places(k)]
        if not _has_key_regex(down):
            return [ReadRowsQuery(row_keys=physical, row_filter=down)]
        by_prefix: dict[bytes, list[str | bytes]] = {}
        for k in keys:
            for p in self.places(k):
                by_prefix.setdefault(p[: len(p) - len(k)], []).append(p)
        return [
            ReadRowsQuery(row_keys=ps, row_filter=rewrite_filter(down, prefix))
            for prefix, ps in sorted(by_prefix.items())
        ]

    def combined(
        self, keys: Sequence[bytes], found: Mapping[bytes, Row], split: SplitFilter
    ) -> list[Row]:
        """The logical rows of ``keys`` (key order) from the sub-rows read, filtered."""
        out = []
        for key in keys:
            subs = [found.get(p) for p in self.places(key)]
            row = split.apply(combine_rows(key, subs, self.aggregates))
            if row is not None:
                out.append(row)
        return out

    def engine_query(self, cut: ReadRowsQuery, reverse: bool) -> ReadRowsQuery | dict[str, Any]:
        """The cut query as the engine takes it (a reversed read's dict form)."""
        return reversed_request(cut) if reverse else cut


def wall_micros() -> int:
    """The writer's clock, microseconds since the Unix epoch (the one clock read here:
    the rules above take it as an argument)."""
    return int(time.time() * 1_000_000)


def _start(rng: KeyRange) -> tuple[bytes, bool]:
    return rng.start, not rng.start_closed


def _subtract(rng: KeyRange, holes: Sequence[KeyRange]) -> tuple[list[KeyRange], list[KeyRange]]:
    """``rng`` cut by sorted, disjoint, bounded ``holes``: the pieces inside them, and the rest."""
    inside: list[KeyRange] = []
    outside: list[KeyRange] = []
    start, start_closed = rng.start, rng.start_closed
    for hole in holes:
        piece = rng.intersect(hole)
        if piece is None:
            continue
        inside.append(piece)
        before = KeyRange(start, start_closed, hole.start, not hole.start_closed)
        if not before.is_empty:
            outside.append(before)
        start, start_closed = hole.end, not hole.end_closed
    last = KeyRange(start, start_closed, rng.end, rng.end_closed)
    if not last.is_empty:
        outside.append(last)
    return inside, outside


def splice(
    engine: Iterable[Row], direct: Sequence[Row], *, reverse: bool, limit: int | None
) -> Iterator[Row]:
    """The engine's rows and the split rows merged in key order, cut at ``limit`` (logical rows)."""
    rows: Iterable[Row]
    if reverse:
        rows = heapq.merge(engine, direct, key=lambda r: r.row_key, reverse=True)
    else:
        rows = heapq.merge(engine, direct, key=lambda r: r.row_key)
    for n, row in enumerate(rows):
        if limit and n >= limit:
            return
        yield row
