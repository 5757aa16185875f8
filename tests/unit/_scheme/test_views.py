"""Authorized views: the row prefixes a view of one logical prefix needs, and a salted table
over a view-like table (the emulator does not implement authorized views: it answers 501)."""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

import pytest
from google.api_core.exceptions import PermissionDenied
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    Layout,
    LayoutError,
    QueryPlanError,
    RecordMissingError,
    RowKeyError,
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
    """A view of every row is the table itself: an empty prefix is refused."""
    with pytest.raises(QueryPlanError, match="must not be empty"):
        view_row_prefixes(SaltScheme(4), b"")


# -- exactness with a cutoff: legacy keys before it, salted keys after it -------------------

CUTOFF = CutoffPolicy(
    dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10), unreadable="legacy"
)
BEFORE, AFTER = 1_700_000_000, 1_720_000_000  # 2023-11 and 2024-07, in epoch seconds
CUTOFF_SCHEMES = [
    SaltScheme(16),
    SaltScheme(4),
    SaltScheme(100),
    SaltScheme(16, hash="java"),
    SaltScheme(8, marker=b"~"),
    SaltScheme(64, hash="phoenix"),
    SaltScheme(16, key_part=fields(1)),
]


BACKGROUND = [
    b"%s%d#%d" % (t, i, when) for t in (b"", b"t") for i in range(100) for when in (BEFORE, AFTER)
]


def shown(view: list[bytes], physical: bytes) -> bool:
    """Whether a view of these row prefixes lets the row ``physical`` through."""
    return any(physical.startswith(prefix) for prefix in view)


@given(
    scheme=st.sampled_from(CUTOFF_SCHEMES),
    keys=st.lists(
        st.tuples(st.text("0123456789-#~ab", min_size=1, max_size=4), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    data=st.data(),
)
@settings(max_examples=300)
def test_a_cutoff_view_shows_exactly_the_rows_of_its_logical_prefix(
    scheme: SaltScheme, keys: list[tuple[str, bool]], data: st.DataObject
) -> None:
    """A physical row is in the view iff its logical key starts with the prefix, on both sides.

    Keys are ``TENANT#TIME`` (drawn, and 400 others), legacy (unsalted) before the cutoff
    and salted after; the prefix is a piece of one of them or any text. A prefix that
    begins a salt prefix is refused, as no row-prefix view can show it exactly.
    """
    logical = [f"{tenant}#{BEFORE if old else AFTER}".encode() for tenant, old in keys]
    some_key = data.draw(st.sampled_from(logical))
    logical += BACKGROUND  # other tenants' rows on both sides, in every bucket
    prefix = data.draw(
        st.one_of(
            st.integers(1, len(some_key)).map(lambda n: some_key[:n]),
            st.text("0123456789-#~ab", min_size=1, max_size=3).map(str.encode),
        )
    )
    begun = sorted(p for p in scheme.prefixes if p.startswith(prefix) and p != prefix)
    layout = Layout(scheme, CUTOFF)
    if begun:
        with pytest.raises(QueryPlanError, match=re.escape(repr(begun[0]))):
            view_row_prefixes(scheme, prefix, cutoff=CUTOFF, record=False)
        # Refused of necessity: the key equal to the prefix is a legacy key the layout
        # stores unsalted, and every row prefix that lets it through (a prefix of it)
        # lets through the salted rows under begun[0] too.
        assert layout.locate(prefix) == (None, prefix)
        assert all(begun[0].startswith(prefix[:n]) for n in range(len(prefix) + 1))
        return
    view = view_row_prefixes(scheme, prefix, cutoff=CUTOFF, record=False)
    for key in logical:
        try:
            _, physical = layout.locate(key)
        except RowKeyError:
            continue  # a legacy key inside the salted key space: the layout never stores it
        assert shown(view, physical) == key.startswith(prefix), (key, physical, view)


def test_the_issue_example_is_refused_and_its_field_prefix_is_exact() -> None:
    """SaltScheme(16), tenant b"1": the prefix b"1" begins b"10-" to b"15-" and is refused;
    b"1#" shows tenant 1's rows on both sides and none of 1,000 other tenants' rows."""
    scheme = SaltScheme(16)
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    with pytest.raises(QueryPlanError, match=r"b'1'.*b'10-'.*marker"):
        view_row_prefixes(scheme, b"1", cutoff=cutoff)
    layout = Layout(scheme, cutoff)
    view = view_row_prefixes(scheme, b"1#", cutoff=cutoff)
    own = [layout.locate(f"1#{t}")[1] for t in (BEFORE, AFTER)]
    others = [layout.locate(f"t{i}#{AFTER}")[1] for i in range(1_000)]
    assert own[0] == b"1#%d" % BEFORE  # the legacy row, unsalted
    assert all(shown(view, physical) for physical in own)
    assert sum(shown(view, physical) for physical in others) == 0


def test_a_prefix_inside_a_salt_prefix_has_no_legacy_rows_to_show() -> None:
    """A prefix that starts with a salt prefix adds no legacy row prefix: no legacy key
    starts with one, and that row prefix would show another key's salted rows."""
    scheme = SaltScheme(16)
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    other = next(
        b"t%d#%d" % (i, AFTER) for i in range(100) if scheme.bucket_of(b"t%d#%d" % (i, AFTER)) == 10
    )
    view = view_row_prefixes(scheme, b"10-t", cutoff=cutoff, record=False)
    assert b"10-t" not in view
    assert not shown(view, scheme.salt_key(other))
    assert shown(view, scheme.salt_key(b"10-tail"))


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


def test_the_refusal_suggests_a_marker_only_to_a_scheme_without_one() -> None:
    """A prefix that begins the marker itself is refused without advice the scheme followed."""
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("s"))
    with pytest.raises(QueryPlanError) as marked:
        view_row_prefixes(SaltScheme(4, marker=b"~"), b"~", cutoff=cutoff)
    assert "marker" not in str(marked.value).split("begins the salt prefix")[1]
    with pytest.raises(QueryPlanError, match=r"use a scheme with a marker"):
        view_row_prefixes(SaltScheme(16), b"1", cutoff=cutoff)


async def test_a_view_without_the_record_row_on_a_layout_with_a_lead_is_refused_naming_both() -> (
    None
):
    """Blind, an object cannot keep the stored lead: a LayoutError naming the view and the
    lead, not a horizon error from 1970 on every timed write (review S2)."""
    import time

    from saltedtable import Epoch, Epochs, Layout, epoch_field

    past = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    reader = epoch_field("ms", index=1, digits=13)
    epochs = (Epoch(None, SaltScheme(4)), Epoch.at(past, SaltScheme(16)))
    layout = Layout.of_epochs(Epochs(epochs, reader, "error", 120.0))
    table = FakeTable(families=["cf"])
    await SaltedTableAsync.open(table, layout, family="cf")
    key = b"s1#%013d" % int(time.time() * 1000)
    over = SaltedTableAsync(FakeView(table, [b""], refuse_outside=True), layout)
    over.table.read_row = _refusing_record(over.table.read_row)  # type: ignore[method-assign]
    for _ in range(2):  # and it stays refused
        with pytest.raises(LayoutError, match=r"minimum lead of 120 s.*authorized view"):
            await over.mutate_row(key, SetCell("cf", b"q", b"v"))


def _refusing_record(read_row: Any) -> Any:
    async def read(row_key: bytes | str, **kwargs: Any) -> Any:
        key = row_key if isinstance(row_key, bytes) else row_key.encode()
        if key.startswith(SCHEME_ROW_KEY):
            raise PermissionDenied("the view excludes the record row")
        return await read_row(row_key, **kwargs)

    return read
