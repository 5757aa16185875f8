"""Shared pieces of the dual-layout window's tests: rows, filters, and a physical row store.

``Physical`` keeps physical rows as Bigtable does (one cell per family, qualifier
and timestamp; mutations applied in order) and answers ``check_and_mutate_row``
with the window's own filter semantics, which the emulator test checks against
the emulator. The strategies draw rows and the filters the window allows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from google.cloud.bigtable.data.mutations import (
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable.data.row_filters import (
    BlockAllFilter,
    CellsColumnLimitFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    FamilyNameRegexFilter,
    LiteralValueFilter,
    PassAllFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueRangeFilter,
    ValueRegexFilter,
)
from hypothesis import strategies as st

from saltedtable._scheme.window import apply_filter

FAMILIES = ("cf", "cg")
QUALIFIERS = (b"a", b"b", b"c")
#: Millisecond timestamps, as Bigtable stores them.
STAMPS = (1000, 2000, 3000, 4000)
VALUES = (b"", b"v1", b"v2", b"w", b"x\n1")

CellTuple = tuple[str, bytes, int, bytes]

cell_tuples = st.tuples(
    st.sampled_from(FAMILIES),
    st.sampled_from(QUALIFIERS),
    st.sampled_from(STAMPS),
    st.sampled_from(VALUES),
)


def cells_dict(cells: Sequence[CellTuple]) -> dict[tuple[str, bytes, int], bytes]:
    """Cells as a row holds them: the last write of a family, qualifier and timestamp wins."""
    return {(f, q, ts): v for f, q, ts, v in cells}


def as_row(key: bytes, cells: dict[tuple[str, bytes, int], bytes]) -> Row | None:
    """A client ``Row`` of the cells, in Bigtable's cell order (None when empty)."""
    if not cells:
        return None
    ordered = sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2]))
    return Row(key, [Cell(v, key, f, q, ts) for (f, q, ts), v in ordered])


def as_tuples(row: Row | None) -> list[CellTuple]:
    """A row's cells as sorted tuples (the comparison form of the tests)."""
    if row is None:
        return []
    return sorted(
        ((c.family, c.qualifier, c.timestamp_micros, c.value) for c in row.cells),
        key=lambda t: (t[0], t[1], -t[2], t[3]),
    )


def apply_mutations(
    cells: dict[tuple[str, bytes, int], bytes], mutations: Sequence[Mutation]
) -> None:
    """Apply mutations in order to a row's cells, as Bigtable does."""
    for m in mutations:
        if isinstance(m, SetCell):
            q = m.qualifier if isinstance(m.qualifier, bytes) else m.qualifier.encode()
            cells[(m.family, q, m.timestamp_micros)] = m.new_value
        elif isinstance(m, DeleteAllFromRow):
            cells.clear()
        elif isinstance(m, DeleteAllFromFamily):
            for k in [k for k in cells if k[0] == m.family_to_delete]:
                del cells[k]
        elif isinstance(m, DeleteRangeFromColumn):
            q = m.qualifier if isinstance(m.qualifier, bytes) else m.qualifier.encode()
            lo = m.start_timestamp_micros or 0
            hi = m.end_timestamp_micros
            for k in [
                k
                for k in cells
                if (k[0], k[1]) == (m.family, q) and k[2] >= lo and (hi is None or k[2] < hi)
            ]:
                del cells[k]
        else:
            raise NotImplementedError(type(m).__name__)


class Physical:
    """Physical rows by key, with Bigtable's single-row operations."""

    def __init__(self) -> None:
        self.rows: dict[bytes, dict[tuple[str, bytes, int], bytes]] = {}

    def read(self, key: bytes) -> Row | None:
        return as_row(key, self.rows.get(key, {}))

    def mutate(self, key: bytes, mutations: Sequence[Mutation]) -> None:
        apply_mutations(self.rows.setdefault(key, {}), mutations)

    def check_and_mutate(
        self, key: bytes, predicate: RowFilter, false_case: Sequence[Mutation]
    ) -> bool:
        matched = apply_filter(predicate, self.read(key)) is not None
        if not matched:
            self.mutate(key, false_case)
        return matched


#: Deletes as the tests draw them (ranges with start <= end).
deletes: st.SearchStrategy[Mutation] = st.one_of(
    st.just(DeleteAllFromRow()),
    st.sampled_from(FAMILIES).map(DeleteAllFromFamily),
    st.builds(
        DeleteRangeFromColumn,
        st.sampled_from(FAMILIES),
        st.sampled_from(QUALIFIERS),
        st.sampled_from([None, 1000, 2000]),
        st.sampled_from([None, 3000, 5000]),
    ),
)
sets: st.SearchStrategy[Mutation] = cell_tuples.map(lambda t: SetCell(t[0], t[1], t[3], t[2]))
#: One logical ``mutate_row``: sets and deletes in any order.
mutation_lists = st.lists(st.one_of(sets, deletes), min_size=1, max_size=4)


# -- filters the window allows ---------------------------------------------------


def _moment(micros: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


_bound = st.sampled_from([None, *QUALIFIERS, b"ab", b"b\x00"])
_value_bound = st.sampled_from([None, *VALUES, b"v"])


@st.composite
def column_ranges(draw: st.DrawFn) -> RowFilter:
    start, end = draw(_bound), draw(_bound)
    kwargs: dict[str, bool] = {}
    if start is not None:
        kwargs["inclusive_start"] = draw(st.booleans())
    if end is not None:
        kwargs["inclusive_end"] = draw(st.booleans())
    return ColumnRangeFilter(draw(st.sampled_from(FAMILIES)), start, end, **kwargs)


@st.composite
def value_ranges(draw: st.DrawFn) -> RowFilter:
    start, end = draw(_value_bound), draw(_value_bound)
    kwargs: dict[str, bool] = {}
    if start is not None:
        kwargs["inclusive_start"] = draw(st.booleans())
    if end is not None:
        kwargs["inclusive_end"] = draw(st.booleans())
    return ValueRangeFilter(start, end, **kwargs)


@st.composite
def time_ranges(draw: st.DrawFn) -> RowFilter:
    start = draw(st.sampled_from([None, 0, 1000, 1500, 2000, 3999]))
    end = draw(st.sampled_from([None, 1000, 2000, 2001, 3000, 5000]))
    return TimestampRangeFilter(
        None if start is None else _moment(start), None if end is None else _moment(end)
    )


leaf_filters: st.SearchStrategy[RowFilter] = st.one_of(
    st.sampled_from(
        [
            PassAllFilter(True),
            BlockAllFilter(True),
            StripValueTransformerFilter(True),
            FamilyNameRegexFilter("cf"),
            FamilyNameRegexFilter("c[fg]"),
            ColumnQualifierRegexFilter(b"[ab]"),
            ColumnQualifierRegexFilter(b"c"),
            ValueRegexFilter(b"v.*"),
            ValueRegexFilter(b"\\C*1"),
            LiteralValueFilter(b"w"),
        ]
    ),
    st.integers(1, 3).map(CellsColumnLimitFilter),
    column_ranges(),
    value_ranges(),
    time_ranges(),
)

allowed_filters: st.SearchStrategy[RowFilter] = st.recursive(
    leaf_filters,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(RowFilterChain),
        # Bigtable refuses a chain or an interleave of fewer than two filters.
        st.lists(inner, min_size=2, max_size=3).map(RowFilterUnion),
    ),
    max_leaves=6,
)
