"""Authorized views: the row prefixes a view of one logical prefix needs, and a salted table
over a view-like table (the emulator does not implement authorized views: it answers 501)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from google.api_core.exceptions import PermissionDenied
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell
from hypothesis import given
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    LayoutError,
    RecordMissingError,
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
    """An authorized view: only rows under its prefixes are read or written.

    Args:
        refuse_outside: Point reads outside the view raise PermissionDenied
            (else they find nothing).
    """

    authorized_view_id = "v1"

    def __init__(
        self, table: FakeTable, prefixes: list[bytes], *, refuse_outside: bool = False
    ) -> None:
        super().__init__()
        self.__dict__.update({k: v for k, v in table.__dict__.items()})
        self.prefixes = prefixes
        self.refuse_outside = refuse_outside

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
        if self._inside(key):
            return await super().read_row(key, **kwargs)
        if self.refuse_outside:
            raise PermissionDenied(f"row {key!r} is outside the authorized view")
        return None


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


async def test_a_salted_table_over_a_view_never_stores_the_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No record yet: writes through the view go on, one warning says to store it via the table."""
    scheme = SaltScheme(4)
    table = FakeTable(families=["cf", "saltedtable"])
    over = SaltedTableAsync(FakeView(table, view_row_prefixes(scheme, b"a#")), scheme)
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await over.mutate_row(b"a#1", SetCell("cf", b"q", b"v"))
        await over.mutate_row(b"a#2", SetCell("cf", b"q", b"v"))
    assert table.cells_of(SCHEME_ROW_KEY) == []
    assert len(caplog.records) == 1
    assert "authorized view does not store it" in caplog.records[0].getMessage()
    with pytest.raises(LayoutError, match="store it through the table"):
        await over.guard_scheme(family="cf")


async def test_a_view_without_the_record_row_turns_the_guard_off_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheme = SaltScheme(4)
    table = FakeTable(families=["cf"])
    await SaltedTableAsync.open(table, scheme, family="cf")
    prefixes = view_row_prefixes(scheme, b"a#", record=False)
    over = SaltedTableAsync(FakeView(table, prefixes, refuse_outside=True), scheme)
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await over.mutate_row(b"a#1", SetCell("cf", b"q", b"v"))
        assert [r.row_key for r in await over.read_rows(ReadRowsQuery())] == [b"a#1"]
    assert len(caplog.records) == 1
    assert "view_row_prefixes(..., record=True)" in caplog.records[0].getMessage()
    strict = SaltedTableAsync(
        FakeView(table, prefixes, refuse_outside=True), scheme, require_record=True
    )
    with pytest.raises(RecordMissingError, match="does not include the layout record row"):
        await strict.read_row(b"a#1")
