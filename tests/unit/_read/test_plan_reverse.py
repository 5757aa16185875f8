"""Reversed reads' planning: pages walk down, each below the last key read; the plan says so."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from hypothesis import given, settings
from hypothesis import strategies as st

import saltedtable._read.plan as plan_module
from saltedtable import KeyRange, QueryPlanError, SaltScheme
from saltedtable._read.plan import PageCursor, SubQuery, plan_reads
from saltedtable._read.query import as_query, is_reversed, reversed_request
from tests.fakes import query_keys
from tests.unit._read.test_plan import key_ranges, small_keys


def serve_backwards(query: ReadRowsQuery, table: list[bytes]) -> list[bytes]:
    """A reversed read over sorted keys: the selected keys, largest first, up to the limit."""
    rows = query_keys(query, table)[::-1]
    return rows[: query.limit] if query.limit else rows


def walk_backwards(sub: SubQuery, table: list[bytes], sizes: Iterator[int]) -> list[bytes]:
    cursor = PageCursor(sub, reverse=True)
    out: list[bytes] = []
    for _ in range(100_000):
        size = next(sizes)
        query = cursor.next_query(size)
        if query is None:
            assert cursor.done
            return out
        assert query.row_keys or query.row_ranges, "an empty query would read the whole table"
        assert len(query.row_keys) <= plan_module.MAX_KEYS_PER_REQUEST
        page = serve_backwards(query, table)
        out.extend(page)
        cursor.advance(len(page), size, page[-1] if page else None)
    raise AssertionError("the cursor never finished")


@settings(max_examples=150, deadline=None)
@given(
    table=st.lists(small_keys, max_size=40, unique=True).map(sorted),
    extra_keys=st.lists(small_keys, max_size=15),
    ranges=st.lists(key_ranges(), max_size=3),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    chunk=st.integers(1, 4),
    data=st.data(),
)
def test_reversed_paging_never_skips_or_duplicates(
    table: list[bytes],
    extra_keys: list[bytes],
    ranges: list[KeyRange],
    sizes: list[int],
    chunk: int,
    data: st.DataObject,
) -> None:
    """Any page sizes and key chunking: exactly the sub-query's rows, in descending order."""
    points = sorted(
        set(data.draw(st.lists(st.sampled_from(table))) if table else []) | set(extra_keys)
    )
    sub = SubQuery(0, b"", tuple(points), tuple(ranges))
    full = ReadRowsQuery(row_keys=list(points), row_ranges=[r.to_row_range() for r in ranges])
    expected = serve_backwards(full, table) if points or ranges else []

    def cycle() -> Iterator[int]:
        while True:
            yield from sizes

    with mock.patch.object(plan_module, "MAX_KEYS_PER_REQUEST", chunk):
        assert walk_backwards(sub, table, cycle()) == expected


def test_a_reversed_dict_query_plans_a_reversed_read() -> None:
    query = reversed_request(
        ReadRowsQuery(row_ranges=[KeyRange(b"a", True, b"b").to_row_range()], limit=5)
    )
    assert is_reversed(query)
    plan = plan_reads(as_query(query, reversed_ok=True), SaltScheme(4), reverse=True)
    assert plan.reverse
    assert plan.limit == 5
    assert len(plan.subqueries) == 4
    assert "reversed" in plan.explain()


def test_a_reader_that_cannot_reverse_refuses_a_reversed_query() -> None:
    with pytest.raises(QueryPlanError, match="cannot be reversed"):
        as_query({"reversed": True})
