"""Split rows against the emulator's own cell semantics: routed, read, combined, compared.

Random calls (``SetCell`` at explicit timestamps, ``AddToCell`` in sum, min and max
families, column, family and row deletes) go to one plain row and, through the hot-row
routing, to the K sub-rows of a split row of the same table; the split starts part-way
through, so earlier writes sit in the unsplit row. The sub-rows are read in one request
with each filter's per-sub-row part, combined, and given the filter's remaining steps:
the result must be what the emulator itself returns for the plain row with the whole
filter. So the aggregate combining, the tie and version rules and the filter split are
checked against Bigtable's semantics as the emulator implements them, not against the
unit tests' model (which is checked against the emulator here too).

``AddToCell`` goes to the sum family only: the emulator (Cloud SDK 528) keeps the last
value in min and max families (66, 37, 65 reads 65 in both; probed), so it cannot judge
their combining; the unit tests' model does, with Bigtable's documented min and max.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, RowRange
from google.cloud.bigtable.data import row_filters as rf
from google.cloud.bigtable.data.mutations import AddToCell, Mutation, SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable_admin_v2 import types

from saltedtable import SaltScheme, fields
from saltedtable._admin import admin_client
from saltedtable._guard.families import parse_family
from saltedtable._scheme.hot import (
    HotLayout,
    combine_rows,
    plan_split_filter,
    read_buckets,
    read_keys,
    route_mutations,
)
from saltedtable._scheme.salt import prefix_end
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table
from tests.hot_model import AGGREGATES, FAMILY_SPECS, RowModel, cells_of, random_mutation

pytestmark = pytest.mark.emulator

N = 8
SEQUENCES = 40


def _micros(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)


#: Filters whose split the combined read must honour (see plan_split_filter). Bigtable
#: leaves the mutual order of a row's families unspecified (the emulator keeps the
#: table's), so row limits and offsets are tested within one family, and across
#: families (the keys-only probe) by the number of cells only.
FILTERS: tuple[rf.RowFilter | None, ...] = (
    None,
    rf.CellsColumnLimitFilter(1),
    rf.RowFilterChain([rf.FamilyNameRegexFilter("sm|cf"), rf.CellsColumnLimitFilter(2)]),
    rf.RowFilterChain(
        [rf.TimestampRangeFilter(_micros(2000), _micros(4000)), rf.CellsColumnLimitFilter(1)]
    ),
    rf.RowFilterChain(
        [
            rf.FamilyNameRegexFilter("cf"),
            rf.ColumnQualifierRegexFilter(b"a|b"),
            rf.CellsRowOffsetFilter(2),
            rf.CellsRowLimitFilter(3),
        ]
    ),
    rf.RowFilterChain(
        [
            rf.CellsColumnLimitFilter(2),
            rf.FamilyNameRegexFilter("sm"),
            rf.CellsRowLimitFilter(4),
            rf.ApplyLabelFilter("x"),
        ]
    ),
    rf.ColumnRangeFilter("sm", b"a", b"b", inclusive_end=True),
)
#: Row limits across families: the same number of cells.
KEYS_ONLY = rf.RowFilterChain([rf.CellsRowLimitFilter(1), rf.StripValueTransformerFilter(True)])


def by_family(row: Row | None) -> list[tuple[str, bytes, int, bytes, tuple[str, ...]]]:
    """A row's cells with the families in name order (within a family, the row's order)."""
    return sorted(cells_of(row), key=lambda cell: cell[0])


@pytest.fixture
def aggregate_table(emulator: Emulator) -> Iterator[str]:
    """A table with plain and aggregate (sum, min, max) families, deleted after the test."""
    table_id = f"hot-{uuid.uuid4().hex[:12]}"
    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(column_families=dict(parse_family(s) for s in FAMILY_SPECS)),
            )
        )
    yield table_id
    delete_table(emulator.address, table_id, missing_ok=True)


async def test_split_rows_read_as_the_emulators_plain_row(
    aggregate_table: str, data_client: BigtableDataClientAsync
) -> None:
    """Every filter's combined read of K sub-rows equals the plain row's, for K in 2, 3 and N."""
    rng = random.Random(40)
    scheme = SaltScheme(N)
    async with data_client.get_table(INSTANCE, aggregate_table) as table:
        for i in range(SEQUENCES):
            k = (2, 3, N)[i % 3]
            key, plain_key = f"hot-{i}".encode(), f"plain-{i}".encode()
            calls = rng.randint(4, 14)
            split_at = rng.randint(0, calls)
            unsplit, split = HotLayout(scheme), HotLayout(scheme, rows={key: k})
            model = RowModel()
            for n in range(calls):
                layout, previous = (unsplit, None) if n < split_at else (split, unsplit)
                mutations: list[Mutation] = [
                    random_mutation(rng, adds_to=("sm",)) for _ in range(rng.randint(1, 3))
                ]
                await table.mutate_row(plain_key, mutations)
                for mutation in mutations:
                    model.apply(mutation)
                routed = route_mutations(
                    key,
                    mutations,
                    layout=layout,
                    aggregates=AGGREGATES,
                    spread=rng.randrange(1 << 30),
                    previous=previous,
                )
                for physical, share in routed:
                    await table.mutate_row(physical, share)
            plain = await table.read_row(plain_key)
            assert by_family(model.row(plain_key)) == by_family(plain), f"model, sequence {i}"
            subs = read_keys(unsplit, split, key)
            assert len(subs) == k
            plan = plan_split_filter(KEYS_ONLY, key)
            found = {
                r.row_key: r for r in await table.read_rows(ReadRowsQuery(row_keys=list(subs)))
            }
            probe = plan.apply(combine_rows(key, [found.get(p) for p in subs], AGGREGATES))
            expected = await table.read_row(plain_key, row_filter=KEYS_ONLY)
            assert len(cells_of(probe)) == len(cells_of(expected)) <= 1
            for row_filter in FILTERS:
                plan = plan_split_filter(row_filter, key)
                found = {
                    row.row_key: row
                    for row in await table.read_rows(
                        ReadRowsQuery(row_keys=list(subs), row_filter=plan.down)
                    )
                }
                combined = plan.apply(combine_rows(key, [found.get(p) for p in subs], AGGREGATES))
                expected = await table.read_row(plain_key, row_filter=row_filter)
                assert by_family(combined) == by_family(expected), (
                    f"sequence {i}, K={k}, split after {split_at} of {calls} calls, "
                    f"filter {row_filter!r}"
                )


async def test_the_emulators_int64_sum_wraps_as_the_combine_does(
    aggregate_table: str, data_client: BigtableDataClientAsync
) -> None:
    """One row's sum past 2**63 - 1 wraps; partials in two sub-rows combine to the same."""
    layout = HotLayout(SaltScheme(N), rows={b"ctr": 2})
    adds = [AddToCell("sm", b"n", 2**63 - 1, 0), AddToCell("sm", b"n", 2, 0)]
    async with data_client.get_table(INSTANCE, aggregate_table) as table:
        for spread, add in enumerate(adds):
            await table.mutate_row(b"plain", [add])
            for physical, share in route_mutations(
                b"ctr", [add], layout=layout, aggregates=AGGREGATES, spread=spread
            ):
                await table.mutate_row(physical, share)
        plain = await table.read_row(b"plain")
        subs = [await table.read_row(p) for p in layout.physical_keys(b"ctr")]
    assert all(sub is not None for sub in subs)
    assert plain is not None
    assert int(plain.cells[0]) == -(2**63) + 1
    assert by_family(combine_rows(b"ctr", subs, AGGREGATES)) == by_family(plain)


async def test_a_cell_rewritten_after_the_split_at_its_timestamp_reads_the_new_value(
    aggregate_table: str, data_client: BigtableDataClientAsync
) -> None:
    """The home row's old cell and its sub-row's new one at one timestamp: the new one wins."""
    unsplit = HotLayout(SaltScheme(N))
    split = HotLayout(SaltScheme(N), rows={b"r": 4})
    # A column that leaves the home row once the row is split.
    qualifier = next(q for q in (b"q%d" % i for i in range(99)) if split.sub_row(b"r", "cf", q))
    async with data_client.get_table(INSTANCE, aggregate_table) as table:
        for layout, value in ((unsplit, b"old"), (split, b"new")):
            mutations: list[Mutation] = [SetCell("cf", qualifier, value, 1000)]
            await table.mutate_row(b"plain", mutations)
            for physical, share in route_mutations(
                b"r", mutations, layout=layout, aggregates=AGGREGATES, previous=unsplit
            ):
                await table.mutate_row(physical, share)
        plain = await table.read_row(b"plain")
        subs = [await table.read_row(p) for p in read_keys(unsplit, split, b"r")]
    assert sum(sub is not None for sub in subs) == 2  # the old cell stays in the home row
    assert by_family(combine_rows(b"r", subs, AGGREGATES)) == by_family(plain)
    assert plain is not None
    assert plain.cells[0].value == b"new"


async def test_a_hot_parts_rows_are_found_through_a_k_raise_before_the_backfill(
    aggregate_table: str, data_client: BigtableDataClientAsync
) -> None:
    """Rows written at K = 2, then 4: the union's buckets scan them all; point reads find each."""
    scheme = SaltScheme(N, key_part=fields(1))
    before = HotLayout(scheme, parts={b"t1": 2})
    after = HotLayout(scheme, parts={b"t1": 4})
    keys = [b"t1#%03d" % i for i in range(120)]
    async with data_client.get_table(INSTANCE, aggregate_table) as table:
        for i, key in enumerate(keys):
            layout = before if i < 60 else after
            (physical,) = layout.physical_keys(key)
            await table.mutate_row(physical, [SetCell("cf", b"q", key, 1000)])
        buckets = read_buckets(before, after, b"t1#")
        assert buckets is not None
        assert len(buckets) == 4
        query = ReadRowsQuery(
            row_ranges=[
                RowRange(scheme.prefix(b) + b"t1#", prefix_end(scheme.prefix(b) + b"t1#"))
                for b in buckets
            ]
        )
        scanned = sorted(row.cells[0].value for row in await table.read_rows(query))
        assert scanned == keys
        moved = 0
        for key in keys:
            places = read_keys(before, after, key)
            moved += key in keys[:60] and len(places) == 2
            rows = await table.read_rows(ReadRowsQuery(row_keys=list(places)))
            assert [row.cells[0].value for row in rows] == [key]
    # Raising K from 2 to 4 moves about half of the 60 rows written before it.
    assert 15 <= moved <= 45
