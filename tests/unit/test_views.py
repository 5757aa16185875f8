"""Authorized views: the row prefixes a view of one logical prefix needs, and a salted table
over a view-like table (the emulator does not implement authorized views: it answers 501)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from google.api_core.exceptions import PermissionDenied
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell
from hypothesis import given
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
    fields,
    view_row_prefixes,
)
from tests.fakes import FakeTable

SCHEMES = [SaltScheme(4), SaltScheme(16, hash="java"), SaltScheme(8, marker=b"~")]


@given(
    st.sampled_from(SCHEMES),
    st.text("ab#-09~", min_size=1, max_size=6).map(str.encode),
    st.text("ab#-09~", max_size=6).map(str.encode),
)
def test_every_key_of_the_logical_prefix_lies_under_a_view_prefix(
    scheme: SaltScheme, prefix: bytes, rest: bytes
) -> None:
    physical = scheme.salt_key(prefix + rest)
    prefixes = view_row_prefixes(scheme, prefix, record=False)
    assert len(prefixes) == len(scheme.prefixes)
    assert sum(physical.startswith(p) for p in prefixes) == 1


def test_a_key_part_that_fixes_the_bucket_needs_one_prefix() -> None:
    scheme = SaltScheme(16, key_part=fields(1))
    prefixes = view_row_prefixes(scheme, b"user1#", record=False)
    assert prefixes == [scheme.salt_key(b"user1#")]
    assert scheme.salt_key(b"user1#2024").startswith(prefixes[0])
    assert len(view_row_prefixes(scheme, b"user1", record=False)) == 16  # not fixed yet


def test_the_record_row_and_the_legacy_prefix_are_added_when_asked() -> None:
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    prefixes = view_row_prefixes(SaltScheme(4), b"s1#", cutoff=cutoff)
    assert SCHEME_ROW_KEY in prefixes
    assert b"s1#" in prefixes
    assert len(prefixes) == 6


def test_an_empty_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        view_row_prefixes(SaltScheme(4), b"")


class FakeView(FakeTable):
    """An authorized view: only rows under its prefixes are read or written."""

    def __init__(self, table: FakeTable, prefixes: list[bytes]) -> None:
        super().__init__()
        self.__dict__.update({k: v for k, v in table.__dict__.items()})
        self.prefixes = prefixes

    def _inside(self, key: bytes) -> bool:
        return any(key.startswith(p) for p in self.prefixes)

    def _select(self, query: ReadRowsQuery) -> list[Any]:
        return [row for row in super()._select(query) if self._inside(row.row_key)]

    def _apply(self, key: bytes, mutations: Any) -> None:
        if not self._inside(key):
            raise PermissionDenied(f"row {key!r} is outside the authorized view")
        super()._apply(key, mutations)

    async def read_row(self, row_key: bytes | str, **kwargs: Any) -> Any:
        key = row_key if isinstance(row_key, bytes) else row_key.encode()
        return await super().read_row(key, **kwargs) if self._inside(key) else None


async def test_a_salted_table_over_a_view_reads_writes_and_guards_through_it() -> None:
    scheme = SaltScheme(4)
    table = FakeTable(families=["cf"])
    writer = await SaltedTableAsync.open(table, scheme, family="cf")
    await writer.bulk_mutate_rows(
        [
            RowMutationEntry(f"{u}#{i}", SetCell("cf", b"q", b"v"))
            for u in ("a", "b")
            for i in range(5)
        ]
    )
    view = FakeView(table, view_row_prefixes(scheme, b"a#"))
    over = SaltedTableAsync(view, scheme)
    rows = await over.read_rows(ReadRowsQuery())
    assert [r.row_key for r in rows] == [b"a#%d" % i for i in range(5)]
    assert over.stored_layout is not None  # the record was read through the view
    await over.mutate_row(b"a#9", SetCell("cf", b"q", b"v"))
    with pytest.raises(PermissionDenied):
        await over.mutate_row(b"b#9", SetCell("cf", b"q", b"v"))
