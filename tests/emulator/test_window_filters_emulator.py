"""The dual-layout window's local rules against the emulator's own semantics.

* Filters: a random row is written to a plain table and read back with a random
  filter the window allows; the window's local application of that filter to
  the same row gives the same cells.
* The window's read path: an old row and a new row (written through the
  window's write plan, tombstones included) are read through the planned server
  filter, combined and filtered locally; the result is the model row filtered.
* The backfill's predicate on the emulator's ``check_and_mutate_row``: a delete
  or a write that lands between the backfill's read and its copy wins.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClient
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.row_filters import (
    RowFilter,
    ValueRegexFilter,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from saltedtable._scheme.salt import SaltScheme
from saltedtable._scheme.window import WINDOW_FAMILY, Window, apply_filter, plan_filter
from saltedtable.testing import INSTANCE, PROJECT
from tests.window_cases import (
    FAMILIES,
    allowed_filters,
    apply_mutations,
    as_row,
    as_tuples,
    cell_tuples,
    cells_dict,
    mutation_lists,
)

WINDOW = Window(SaltScheme(16), SaltScheme(64))
FAST = settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)


@pytest.fixture
def table(make_table) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """A plain emulator table with the test families and the window's family."""
    name = make_table(families=(*FAMILIES, WINDOW_FAMILY))
    with BigtableDataClient(project=PROJECT) as client:
        yield client.get_table(INSTANCE, name)


_ids = itertools.count()


def _write(table: object, key: bytes, cells: dict[tuple[str, bytes, int], bytes]) -> None:
    if cells:
        table.mutate_row(  # type: ignore[attr-defined]
            key, [SetCell(f, q, v, ts) for (f, q, ts), v in cells.items()]
        )


@FAST
@given(cells=st.lists(cell_tuples, min_size=1, max_size=8), row_filter=allowed_filters)
@example(cells=[("cf", b"a", 1000, b"x\n1")], row_filter=ValueRegexFilter(b"\\C*1"))
@example(cells=[("cf", b"a", 1000, b"\xc3\xa91")], row_filter=ValueRegexFilter(b"..1"))
def test_local_filters_match_the_emulator(
    table: object, cells: list[tuple[str, bytes, int, bytes]], row_filter: RowFilter
) -> None:
    """Every filter the window re-applies gives, locally, the emulator's cells for the row."""
    key = b"f%06d" % next(_ids)
    stored = cells_dict(cells)
    _write(table, key, stored)
    served = table.read_row(key, row_filter=row_filter)  # type: ignore[attr-defined]
    local = apply_filter(row_filter, as_row(key, stored))
    assert as_tuples(served) == as_tuples(local)


@FAST
@given(
    old=st.lists(cell_tuples, max_size=6),
    mutations=mutation_lists,
    row_filter=st.none() | allowed_filters,
)
def test_window_read_path_matches_the_model(
    table: object,
    old: list[tuple[str, bytes, int, bytes]],
    mutations: list[Mutation],
    row_filter: RowFilter | None,
) -> None:
    """Old row + window writes, read through the planned filter and combined: the model's row."""
    key = b"user-%06d" % next(_ids)
    model = cells_dict(old)
    _write(table, WINDOW.old.salt_key(key), model)
    plan = WINDOW.write(key, mutations, token=key, now_micros=7_000_000)
    table.mutate_row(plan.new_key, list(plan.new_mutations))  # type: ignore[attr-defined]
    if plan.old_key is not None:
        table.mutate_row(plan.old_key, list(plan.old_mutations))  # type: ignore[attr-defined]
    apply_mutations(model, mutations)
    planned = plan_filter(row_filter, window=str(WINDOW))
    new_key, old_key = WINDOW.physical_keys(key)
    read_old = (
        None if old_key is None else table.read_row(old_key, row_filter=planned.server)  # type: ignore[attr-defined]
    )
    read_new = table.read_row(new_key, row_filter=planned.server)  # type: ignore[attr-defined]
    got = planned.apply(WINDOW.combine(key, read_old, read_new))
    assert as_tuples(got) == as_tuples(apply_filter(row_filter, as_row(key, model)))


def _split_key() -> bytes:
    return next(k for i in itertools.count() if not WINDOW.shares_row(k := b"acct%d" % i))


def test_backfill_predicate_on_the_emulator(table: object) -> None:
    """A racing delete and a racing write make the emulator's check match; a clean copy lands."""
    key = _split_key()
    new_key, old_key = WINDOW.physical_keys(key)
    assert old_key is not None
    _write(table, old_key, {("cf", b"a", 1000): b"old-a", ("cf", b"b", 1000): b"old-b"})

    def plan() -> list:  # type: ignore[type-arg]
        old = table.read_row(old_key)  # type: ignore[attr-defined]
        return WINDOW.backfill(key, old, table.read_row(new_key))  # type: ignore[attr-defined]

    def send(copies: list) -> list[bool]:  # type: ignore[type-arg]
        return [
            table.check_and_mutate_row(  # type: ignore[attr-defined]
                c.row_key, c.predicate, false_case_mutations=list(c.mutations)
            )
            for c in copies
        ]

    # A write of a cell the copy holds lands first: the copy must not overwrite it.
    racing = plan()
    table.mutate_row(new_key, SetCell("cf", b"a", b"new-a", 1000))  # type: ignore[attr-defined]
    assert send(racing) == [True]
    # Planned again, the copy takes only the column the new row lacks.
    assert send(plan()) == [False]
    assert WINDOW.retire_old(
        key,
        table.read_row(old_key),  # type: ignore[attr-defined]
        table.read_row(new_key),  # type: ignore[attr-defined]
    ) == (old_key, (DeleteAllFromRow(),))
    row = WINDOW.combine(
        key,
        table.read_row(old_key),  # type: ignore[attr-defined]
        table.read_row(new_key),  # type: ignore[attr-defined]
    )
    assert as_tuples(row) == [("cf", b"a", 1000, b"new-a"), ("cf", b"b", 1000, b"old-b")]

    # A second key: the backfill reads, the row is deleted through the window, the copy is sent.
    key2 = next(k for i in itertools.count() if not WINDOW.shares_row(k := b"acct-del%d" % i))
    new2, old2 = WINDOW.physical_keys(key2)
    assert old2 is not None
    _write(table, old2, {("cg", b"c", 3000): b"gone"})
    copies = WINDOW.backfill(key2, table.read_row(old2), None)  # type: ignore[attr-defined]
    delete = WINDOW.write(key2, [DeleteAllFromRow()], token=b"tok", now_micros=9_000_000)
    table.mutate_row(delete.new_key, list(delete.new_mutations))  # type: ignore[attr-defined]
    assert send(copies) == [True]
    assert (
        WINDOW.combine(
            key2,
            table.read_row(old2),  # type: ignore[attr-defined]
            table.read_row(new2),  # type: ignore[attr-defined]
        )
        is None
    )
