"""Nothing stores a layout record it has not checked against the rows (the in-memory fakes).

A table written with 4 buckets by another tool, without a record: every path that
would store a record for 8 buckets (``open(family=...)``, ``guard_scheme``, the first
write, an override) samples the rows first and refuses, storing nothing; the right
layout still opens afterwards. Async and the generated sync table alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    LayoutError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
)
from saltedtable._guard.decisions import SAMPLE_REQUESTS, STORE_SAMPLE_ROWS, sample_queries
from saltedtable._guard.families import RECORD_FAMILY
from saltedtable._guard.record import decode_layout
from saltedtable._scheme.layout import Layout
from saltedtable._scheme.ranges import KeyRange
from tests.fakes import FakeTable, SyncFakeTable, query_keys

FLAVOURS = ["async", "sync"]
KEYS = [b"user%05d" % i for i in range(400)]


def fake_table() -> FakeTable:
    return FakeTable(families=["cf", RECORD_FAMILY])


def written_by_another_tool(fake: FakeTable, scheme: SaltScheme, keys: Iterable[bytes]) -> None:
    """Rows salted by ``scheme``, as a tool without saltedtable's guard writes them: no record."""
    for key in keys:
        asyncio.run(fake.mutate_row(scheme.salt_key(key), SetCell("cf", b"q", b"v", 1000)))


def salted(flavour: str, fake: FakeTable, scheme: SaltScheme, **kwargs: Any) -> Any:
    """A salted table of the flavour over ``fake``: run its methods with :func:`call`."""
    if flavour == "async":
        return SaltedTableAsync(fake, scheme, **kwargs)
    return SaltedTable(SyncFakeTable(fake), scheme, **kwargs)  # type: ignore[arg-type]


def call(result: Any) -> Any:
    """The result of an async method's coroutine (run to its end), or a sync method's."""
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def open_table(flavour: str, fake: FakeTable, scheme: SaltScheme, **kwargs: Any) -> Any:
    if flavour == "async":
        return asyncio.run(SaltedTableAsync.open(fake, scheme, **kwargs))
    return SaltedTable.open(SyncFakeTable(fake), scheme, **kwargs)  # type: ignore[arg-type]


def stored_record(fake: FakeTable) -> Any:
    cells = fake.cells_of(SCHEME_ROW_KEY)
    return decode_layout(cells[-1][3]) if cells else None


# -- open(), guard_scheme(): refused, nothing stored --------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("family", ["cf", RECORD_FAMILY])
def test_open_with_another_bucket_count_stores_nothing_and_the_right_one_opens(
    flavour: str, family: str
) -> None:
    """open(N=8, family=...) over N=4 rows: LayoutError before any record; N=4 opens after."""
    fake = fake_table()
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    refusal = r"was not stored: \d+ sampled row\(s\) do not fit the layout of SaltScheme"
    with pytest.raises(LayoutError, match=refusal):
        open_table(flavour, fake, SaltScheme(8), family=family)
    assert fake.cells_of(SCHEME_ROW_KEY) == []
    table = open_table(flavour, fake, SaltScheme(4), family=family)
    assert stored_record(fake) == describe_layout(SaltScheme(4))
    assert table._guard.outcome == "stored"
    assert table._guard.sampled > 0
    row = call(table.read_row(KEYS[7]))
    assert row is not None
    assert row.row_key == KEYS[7]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_open_with_sample_rows_0_still_samples_before_it_stores(flavour: str) -> None:
    """sample_rows=0 skips check_layout, not the sample before a record is stored."""
    fake = fake_table()
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    with pytest.raises(LayoutError, match="was not stored"):
        open_table(flavour, fake, SaltScheme(8), family="cf", sample_rows=0)
    assert fake.cells_of(SCHEME_ROW_KEY) == []


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_guard_scheme_refuses_to_store_a_layout_the_rows_do_not_fit(flavour: str) -> None:
    """guard_scheme(family=...) samples before it stores; a refusal leaves the row empty."""
    fake = fake_table()
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    table = salted(flavour, fake, SaltScheme(8))
    with pytest.raises(LayoutError, match="was not stored"):
        call(table.guard_scheme(family=RECORD_FAMILY))
    assert fake.cells_of(SCHEME_ROW_KEY) == []


@pytest.mark.parametrize(
    ("data", "claimed"),
    [
        (SaltScheme(4), SaltScheme(8)),
        (SaltScheme(8), SaltScheme(4)),
        (SaltScheme(16), SaltScheme(8)),
        (SaltScheme(8), SaltScheme(16)),
        (SaltScheme(16), SaltScheme(16, hash="java")),
        (SaltScheme(16), SaltScheme(16, marker=b"~")),
        (SaltScheme(2048), SaltScheme(4096)),
        (SaltScheme(4096), SaltScheme(2048)),
        (SaltScheme(4096), SaltScheme(4095)),
    ],
    ids=str,
)
def test_a_wrong_layout_is_caught_by_the_bounded_sample(
    data: SaltScheme, claimed: SaltScheme
) -> None:
    """Another bucket count (4,096 included), hash or marker: the sample finds misfits."""
    fake = fake_table()
    written_by_another_tool(fake, data, KEYS)
    with pytest.raises(LayoutError, match="was not stored"):
        open_table("async", fake, claimed, family="cf")
    assert fake.cells_of(SCHEME_ROW_KEY) == []


def test_a_sparse_table_is_read_whole_by_the_sample_at_4096_buckets() -> None:
    """A misfit row in the last of 4,096 buckets is found: every bucket is in one request."""
    scheme = SaltScheme(4096)
    fake = fake_table()
    written_by_another_tool(fake, scheme, KEYS[:50])
    last = scheme.prefix(scheme.buckets - 1)
    stray = next(last + k for k in KEYS if scheme.bucket_of(k) != scheme.buckets - 1)
    asyncio.run(fake.mutate_row(stray, SetCell("cf", b"q", b"v", 1000)))
    with pytest.raises(LayoutError, match="1 sampled row"):
        open_table("async", fake, scheme, family="cf")
    assert fake.cells_of(SCHEME_ROW_KEY) == []


# -- the first write --------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("how", ["mutate_row", "bulk_mutate_rows"])
def test_the_first_write_does_not_store_a_layout_the_rows_do_not_fit(
    flavour: str, how: str
) -> None:
    """A first write with N=8 over N=4 rows: refused, neither record nor row written."""
    fake = fake_table()
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    before = fake.row_keys()
    table = salted(flavour, fake, SaltScheme(8))
    cell = SetCell("cf", b"q", b"v")
    args = (b"new", cell) if how == "mutate_row" else ([RowMutationEntry(b"new", cell)],)
    with pytest.raises(LayoutError, match="was not stored"):
        call(getattr(table, how)(*args))
    assert fake.row_keys() == before
    with pytest.raises(LayoutError, match="was not stored"):  # the object keeps refusing
        call(table.read_row(KEYS[0]))
    right = salted(flavour, fake, SaltScheme(4))
    call(right.mutate_row(b"new", SetCell("cf", b"q", b"v")))
    assert stored_record(fake) == describe_layout(SaltScheme(4))
    assert call(right.read_row(b"new")) is not None


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_first_write_on_an_empty_table_stores_the_record(flavour: str) -> None:
    """An empty table: the sample finds nothing, the record is stored with the first write."""
    fake = fake_table()
    table = salted(flavour, fake, SaltScheme(8))
    call(table.mutate_row(b"k", SetCell("cf", b"q", b"v")))
    assert stored_record(fake) == describe_layout(SaltScheme(8))
    assert (table._guard.outcome, table._guard.sampled) == ("stored", 0)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_record_stored_meanwhile_by_another_writer_is_agreed_with_not_claimed(
    flavour: str,
) -> None:
    """The conditional create finds another writer's equal record: "agrees", not "stored"."""
    fake = fake_table()
    create = fake.check_and_mutate_row

    async def racing(*args: Any, **kwargs: Any) -> bool:
        other = describe_layout(SaltScheme(8)).encode()
        await fake.mutate_row(SCHEME_ROW_KEY, SetCell(RECORD_FAMILY, b"scheme", other))
        return await create(*args, **kwargs)

    fake.check_and_mutate_row = racing  # type: ignore[method-assign]
    table = salted(flavour, fake, SaltScheme(8))
    call(table.guard_scheme(family=RECORD_FAMILY))
    assert table._guard.outcome == "agrees"


# -- what the guard says it did ---------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_outcome_is_stored_then_agrees_then_moved(flavour: str) -> None:
    """ "stored" only when this object wrote the record; "agrees" when one was there."""
    fake = fake_table()
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    first = open_table(flavour, fake, SaltScheme(4), family="cf")
    assert (first._guard.outcome, first._guard.sampled) == ("stored", 400)
    again = open_table(flavour, fake, SaltScheme(4), family="cf")
    assert (again._guard.outcome, again._guard.sampled) == ("agrees", None)
    moved = open_table(flavour, fake, SaltScheme(4), family=RECORD_FAMILY)
    assert moved._guard.outcome == "moved"
    assert moved._guard.stored_family == RECORD_FAMILY
    plain = salted(flavour, fake_table(), SaltScheme(4))
    call(plain.guard_scheme())
    assert plain._guard.outcome == "none"


# -- override ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_override_checks_the_rows_against_the_new_layout(flavour: str) -> None:
    """override before the rewrite: refused, the old record stays; after it: replaced."""
    fake = fake_table()
    open_table(flavour, fake, SaltScheme(4), family="cf")
    written_by_another_tool(fake, SaltScheme(4), KEYS)
    with pytest.raises(LayoutError, match="was not replaced"):
        open_table(flavour, fake, SaltScheme(8), family="cf", override_scheme=True)
    assert stored_record(fake) == describe_layout(SaltScheme(4))
    # The deliberate rewrite: every row moves to its 8-bucket key.
    for key in KEYS:
        asyncio.run(fake.mutate_row(SaltScheme(4).salt_key(key), DeleteAllFromRow()))
    written_by_another_tool(fake, SaltScheme(8), KEYS)
    table = open_table(flavour, fake, SaltScheme(8), family="cf", override_scheme=True)
    assert (table._guard.outcome, table._guard.sampled) == ("replaced", 400)
    assert stored_record(fake) == describe_layout(SaltScheme(8))
    with pytest.raises(SchemeMismatchError):
        open_table(flavour, fake, SaltScheme(4))


# -- what the sample costs ----------------------------------------------------------------------


@pytest.mark.parametrize(("buckets", "requests"), [(4, 5), (16, 17), (17, 17), (4096, 17)])
def test_the_sample_before_a_store_costs_at_most_17_requests(buckets: int, requests: int) -> None:
    """One request per bucket up to 16, then one per run of buckets, plus one outside them."""
    fake = fake_table()
    table = asyncio.run(SaltedTableAsync.open(fake, SaltScheme(buckets), family="cf"))
    assert table._guard.outcome == "stored"
    assert len(fake.stats.queries) == requests  # check_layout did not sample them again
    assert all(q.limit == STORE_SAMPLE_ROWS for q in fake.stats.queries)
    fake.stats.queries.clear()
    asyncio.run(table.check_layout())
    assert len(fake.stats.queries) == requests == min(buckets, SAMPLE_REQUESTS) + 1


@pytest.mark.parametrize("buckets", [1, 5, 16, 17, 100, 4096])
def test_every_bucket_lies_in_exactly_one_sample_request(buckets: int) -> None:
    """The runs of neighbouring buckets cover every prefix once; the last query reads outside."""
    scheme = SaltScheme(buckets)
    layout = Layout(scheme)
    queries = sample_queries(layout, 10)
    inside, outside = queries[:-1], queries[-1]
    assert len(inside) == min(buckets, SAMPLE_REQUESTS)
    asked = [KeyRange.from_row_range(r) for q in inside for r in q.row_ranges]
    holes = [KeyRange(start, True, end, False) for start, end in layout.salted_holes()]
    assert asked == holes  # each prefix once, in key order
    keys = [b"unsalted", b"99999-x", scheme.salt_key(b"k"), SCHEME_ROW_KEY]
    assert query_keys(outside, sorted(keys)) == [b"99999-x", b"unsalted"]
