"""ReadSaltedRows and WriteSaltedRows on a layout with epochs (the emulator, Beam's runner).

The Beam reads plan and hide rows with the same pure epoch module as the tables:
they must return what ``SaltedTableAsync.read_rows`` returns, and Beam writes must
land where the table reads them.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.pvalue import PCollection
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row import Row

from saltedtable import Epoch, Epochs, Layout, SaltedTableAsync, SaltScheme, epoch_field
from saltedtable.beam import BigtableTarget, ReadSaltedRows, WriteSaltedRows
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import run_collect, snapshot
from tests.conftest import MakeTable

C = 1_704_067_200_000  # ms
MIN = 60_000
LAYOUT = Layout.of_epochs(
    Epochs(
        (
            Epoch(None, None),
            Epoch(C * 1000, SaltScheme(12)),
            Epoch((C + 5 * MIN) * 1000, SaltScheme(40)),
        ),
        epoch_field("ms", index=1, digits=13),
    )
)


def k(sensor: int, ms: int) -> bytes:
    """``s<n>#<13-digit epoch millis>``."""
    return b"s%d#%013d" % (sensor, ms)


async def test_beam_reads_and_writes_a_layout_with_epochs(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Legacy rows, rows of both salted epochs: Beam reads what the table reads, and writes
    where it reads."""
    table_id = make_table(("cf",))
    raw = data_client.get_table(INSTANCE, table_id)
    legacy = [k(s, C - m * MIN) for s in range(4) for m in (1, 2)]
    await raw.bulk_mutate_rows(
        [RowMutationEntry(key, SetCell("cf", b"v", key, 1000)) for key in legacy]
    )
    table = await SaltedTableAsync.open(raw, LAYOUT, family="cf")
    new = [k(s, C + m * MIN) for s in range(4) for m in range(10)]
    await table.bulk_mutate_rows(
        [RowMutationEntry(key, SetCell("cf", b"v", key, 1000)) for key in new]
    )
    # A row no epoch owns: N=12's bucket for a key of the N=40 epoch (a stale writer's).
    stale = next(
        SaltScheme(12).salt_key(key)
        for key in (k(8, C + 6 * MIN + i) for i in range(100))
        if SaltScheme(12).salt_key(key) != SaltScheme(40).salt_key(key)
    )
    await raw.mutate_row(stale, SetCell("cf", b"v", b"stale", 1000))
    target = BigtableTarget(PROJECT, INSTANCE, table_id)
    for query in (
        ReadRowsQuery(),
        ReadRowsQuery(row_ranges=RowRange(k(1, C - MIN), k(2, C + 6 * MIN))),
        ReadRowsQuery(row_keys=[k(0, C - MIN), k(1, C + MIN), k(2, C + 7 * MIN), k(9, C)]),
    ):
        expected = snapshot(await table.read_rows(query))
        read = ReadSaltedRows(target, LAYOUT, query, split_bytes=2_000)

        def build(p: beam.Pipeline, read: ReadSaltedRows = read) -> PCollection[Row]:
            out: PCollection[Row] = p | read
            return out

        rows, _ = run_collect(build)
        assert snapshot(rows) == expected
        assert b"stale" not in {c.value for r in rows for c in r.cells}
    written = [k(7, C + m * MIN) for m in (-1, 0, 4, 5, 9)]
    entries = [RowMutationEntry(key, SetCell("cf", b"w", b"beam", 1000)) for key in written]
    with beam.Pipeline() as p:
        _ = p | beam.Create(entries) | WriteSaltedRows(target, LAYOUT)
    got = await table.read_rows(ReadRowsQuery(row_ranges=RowRange(b"s7", b"s8")))
    assert [r.row_key for r in got] == written
    epochs = LAYOUT.epochs
    assert epochs is not None
    assert {epochs.epoch_of(key) for key in written} == {0, 1, 2}
