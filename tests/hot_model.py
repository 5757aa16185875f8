"""A single-row model of Bigtable's cell semantics, for the hot-row tests (unit and emulator).

:class:`RowModel` applies ``SetCell``, ``AddToCell`` (sum, min, max),
``DeleteRangeFromColumn``, ``DeleteAllFromFamily`` and ``DeleteAllFromRow``
as one Bigtable row does. The tests apply the same calls to one plain row and,
through :func:`~saltedtable._scheme.hot.route_mutations`, to the sub-rows of a
split row, then compare the plain row with the combined one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row
from hypothesis import strategies as st

from saltedtable._scheme.hot import HotLayout, combine_rows, read_keys, route_mutations

PLAIN: tuple[str, ...] = ("cf", "cg")
AGGREGATES: Mapping[str, str] = {"sm": "int64 sum", "mn": "int64 min", "mx": "int64 max"}
#: What the emulator tables are created with (``NAME[:RULE]``, see parse_family).
FAMILY_SPECS: tuple[str, ...] = ("cf", "cg", "sm:agg=sum", "mn:agg=min", "mx:agg=max")
QUALIFIERS: tuple[bytes, ...] = (b"a", b"b", b"c", b"d", b"e")
#: Few timestamps, so that calls meet at the same (column, timestamp).
TIMESTAMPS: tuple[int, ...] = (1000, 2000, 3000, 4000)
_INT64: int = 1 << 64


def _wrap(value: int) -> int:
    return (value + (1 << 63)) % _INT64 - (1 << 63)


@dataclass
class RowModel:
    """One Bigtable row: ``{(family, qualifier): {timestamp: value}}``."""

    cells: dict[tuple[str, bytes], dict[int, bytes | int]] = field(default_factory=dict)

    def apply(self, mutation: Mutation) -> None:
        """Apply one mutation as Bigtable does."""
        if isinstance(mutation, SetCell):
            column = self.cells.setdefault((mutation.family, mutation.qualifier), {})
            column[mutation.timestamp_micros] = mutation.new_value
        elif isinstance(mutation, AddToCell):
            column = self.cells.setdefault((mutation.family, mutation.qualifier), {})
            kind = AGGREGATES[mutation.family].split()[-1]
            old = column.get(mutation.timestamp)
            new = mutation.value
            if isinstance(old, int):
                pick = min if kind == "min" else max
                new = _wrap(old + new) if kind == "sum" else pick(old, new)
            column[mutation.timestamp] = new
        elif isinstance(mutation, DeleteRangeFromColumn):
            column = self.cells.get((mutation.family, mutation.qualifier), {})
            start = mutation.start_timestamp_micros or 0
            end = mutation.end_timestamp_micros
            for ts in [t for t in column if t >= start and (end is None or t < end)]:
                del column[ts]
        elif isinstance(mutation, DeleteAllFromFamily):
            for column_id in [c for c in self.cells if c[0] == mutation.family_to_delete]:
                del self.cells[column_id]
        elif isinstance(mutation, DeleteAllFromRow):
            self.cells.clear()
        else:  # pragma: no cover - the generators make no other kind
            raise TypeError(mutation)

    def row(self, key: bytes) -> Row | None:
        """The row as Bigtable returns it (family, qualifier, newest first), or None."""
        cells = [
            Cell(
                value.to_bytes(8, "big", signed=True) if isinstance(value, int) else value,
                key,
                family,
                qualifier,
                ts,
            )
            for (family, qualifier), column in sorted(self.cells.items())
            for ts, value in sorted(column.items(), reverse=True)
        ]
        return Row(key, cells) if cells else None


def cells_of(row: Row | None) -> list[tuple[str, bytes, int, bytes, tuple[str, ...]]]:
    """A row's cells as plain tuples, in the row's order (None: no cells)."""
    if row is None:
        return []
    return [
        (c.family, c.qualifier, c.timestamp_micros, c.value, tuple(c.labels)) for c in row.cells
    ]


@dataclass
class SplitModel:
    """The physical rows of a table that stores one logical row, maybe split."""

    rows: dict[bytes, RowModel] = field(default_factory=dict)

    def write(
        self,
        key: bytes,
        mutations: Sequence[Mutation],
        layout: HotLayout,
        spread: int,
        previous: HotLayout | None = None,
    ) -> None:
        """Route one logical call and apply each physical row's share."""
        routed = route_mutations(
            key, mutations, layout=layout, aggregates=AGGREGATES, spread=spread, previous=previous
        )
        for physical, share in routed:
            for mutation in share:
                self.rows.setdefault(physical, RowModel()).apply(mutation)

    def read(self, key: bytes, layout: HotLayout, previous: HotLayout | None = None) -> Row | None:
        """The combined logical row, read the way a point read would."""
        subs = [
            self.rows[p].row(p) if p in self.rows else None
            for p in read_keys(previous, layout, key)
        ]
        return combine_rows(key, subs, AGGREGATES)


# -- generators ---------------------------------------------------------------------------


def _delete_range(start: int | None, end: int | None, family: str, q: bytes) -> Mutation:
    if start is not None and end is not None and start >= end:
        start, end = end - 1000 if end > 1000 else None, start + 1000
    return DeleteRangeFromColumn(family, q, start, end)


_bounds = st.sampled_from((None, *TIMESTAMPS, 5000))
_ts = st.sampled_from(TIMESTAMPS)
_q = st.sampled_from(QUALIFIERS[:3])


def mutation_strategy(*, big: bool = False) -> st.SearchStrategy[Mutation]:
    """One mutation of the kinds a split row routes (``big``: sums near the int64 ends)."""
    values = st.integers(-(2**63) + 1, 2**63 - 1) if big else st.integers(-20, 100)
    families = st.sampled_from((*PLAIN, *AGGREGATES))
    sets = st.builds(SetCell, st.sampled_from(PLAIN), _q, st.sampled_from((b"v0", b"v1")), _ts)
    adds = st.builds(AddToCell, st.sampled_from(tuple(AGGREGATES)), _q, values, _ts)
    deletes = st.builds(_delete_range, _bounds, _bounds, families, _q)
    # Weighted by repetition: whole-family and whole-row deletes wipe what the rest builds.
    return st.one_of(
        sets,
        sets,
        sets,
        adds,
        adds,
        adds,
        deletes,
        deletes,
        st.builds(DeleteAllFromFamily, families),
        st.builds(DeleteAllFromRow),
    )


def random_mutation(rng: random.Random, adds_to: Sequence[str] = tuple(AGGREGATES)) -> Mutation:
    """One mutation drawn by ``rng`` (the emulator test's seeded generator).

    ``adds_to``: the aggregate families ``AddToCell`` writes to.
    """
    roll = rng.random()
    q = rng.choice(QUALIFIERS[:3])
    ts = rng.choice(TIMESTAMPS)
    if roll < 0.40:
        return SetCell(rng.choice(PLAIN), q, rng.choice((b"v0", b"v1", b"v2")), ts)
    if roll < 0.80:
        return AddToCell(rng.choice(adds_to), q, rng.randint(-20, 100), ts)
    if roll < 0.90:
        bounds = (None, *TIMESTAMPS, 5000)
        return _delete_range(
            rng.choice(bounds), rng.choice(bounds), rng.choice((*PLAIN, *AGGREGATES)), q
        )
    if roll < 0.98:
        return DeleteAllFromFamily(rng.choice((*PLAIN, *AGGREGATES)))
    return DeleteAllFromRow()
