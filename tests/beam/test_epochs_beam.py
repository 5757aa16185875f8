"""ReadSaltedRows and WriteSaltedRows on a layout with epochs (the emulator, Beam's runner).

The Beam reads plan and hide rows with the same pure epoch module as the tables:
they must return what ``SaltedTableAsync.read_rows`` returns, and Beam writes must
land where the table reads them.
"""

from __future__ import annotations

import datetime as dt
import time

import apache_beam as beam
import pytest
from apache_beam.pvalue import PCollection
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row import Row

from saltedtable import (
    SCHEME_ROW_KEY,
    Epoch,
    Epochs,
    Layout,
    LayoutError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    append_epoch,
    epoch_field,
)
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import record_of_row
from saltedtable.beam import BigtableTarget, FailedWrite, ReadSaltedRows, WriteSaltedRows
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import run_collect, snapshot
from tests.conftest import MakeTable

READER = epoch_field("ms", index=1, digits=13)
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


def _plain_table_with_lead(make_table: MakeTable, lead: float, start_in: float) -> str:
    """A 4-bucket table (keys ``s<n>#<ms>``) given an epoch of N=8 ``start_in`` s ahead."""
    name = make_table(("cf",))
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        SaltedTable(raw, SaltScheme(4)).mutate_row(k(0, now_ms()), SetCell("cf", b"v", b"x"))
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=start_in)
        assert append_epoch(raw, SaltScheme(8), at, timestamp=READER, min_lead=lead).stored
    return name


def _stored_layout(name: str) -> Layout:
    with BigtableDataClient(project=PROJECT) as client:
        record = record_of_row(client.get_table(INSTANCE, name).read_row(SCHEME_ROW_KEY))
    assert record is not None
    return layout_of_record(record)


def now_ms() -> int:
    """The wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def test_beam_writes_into_a_table_with_a_stored_lead_keep_its_horizon(
    make_table: MakeTable,
) -> None:
    """Workers refresh within the lead: keys before the horizon are written where the table
    reads them; a key past it comes back as a FailedWrite naming the horizon."""
    name = _plain_table_with_lead(make_table, lead=60.0, start_in=120.0)
    layout = _stored_layout(name)
    target = BigtableTarget(PROJECT, INSTANCE, name)
    now = now_ms()
    ok = [k(1, now - 1000), k(2, now), k(3, now + 10_000)]
    late = k(4, now + 3_600_000)  # an hour ahead: past every worker's horizon
    entries = [RowMutationEntry(key, SetCell("cf", b"w", b"beam")) for key in [*ok, late]]
    write = WriteSaltedRows(target, layout, on_failure="output")

    def build(p: beam.Pipeline) -> PCollection[FailedWrite]:
        out: PCollection[FailedWrite] = p | beam.Create(entries) | write
        return out

    failed, _ = run_collect(build)
    assert [f.row_key for f in failed] == [late]
    assert "horizon" in failed[0].error
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable(client.get_table(INSTANCE, name), layout, record_refresh=30.0)
        got = [r.row_key for r in table.read_rows(ReadRowsQuery(row_keys=[*ok, late]))]
    assert got == ok
    # A refresh longer than the lead, or no guard, is refused before any pipeline runs.
    with pytest.raises(LayoutError, match="record_refresh at most 60 s"):
        WriteSaltedRows(target, layout, record_refresh=90.0)
    with pytest.raises(LayoutError, match="guard is off; give check_layout=True"):
        WriteSaltedRows(target, layout, check_layout=False)


def test_a_beam_writer_adopts_an_epoch_appended_while_it_runs(make_table: MakeTable) -> None:
    """One worker (the DoFn driven by hand): refused past its horizon, it reads the record
    again within the lead, adopts the appended epoch and writes the key under it."""
    name = _plain_table_with_lead(make_table, lead=1.5, start_in=2.0)
    first = _stored_layout(name)
    target = BigtableTarget(PROJECT, INSTANCE, name)
    worker = WriteSaltedRows(target, first, on_failure="output", record_refresh=0.5)._write
    worker.setup()
    try:
        t0 = time.time()
        at = dt.datetime.fromtimestamp(t0 + 4.0, dt.UTC)
        with BigtableDataClient(project=PROJECT) as client:
            raw = client.get_table(INSTANCE, name)
            assert append_epoch(raw, SaltScheme(16), at, timestamp=READER, min_lead=1.5).stored
        key = k(5, int(at.timestamp() * 1000) + 1)  # in the appended epoch
        worker.start_bundle()
        list(worker.process(RowMutationEntry(key, SetCell("cf", b"w", b"early"))))
        failed = list(worker.finish_bundle())
        assert len(failed) == 1
        assert "horizon" in failed[0].value.error
        time.sleep(max(0.0, t0 + 3.0 - time.time()))  # the horizon (a read + 1.5 s) passes it
        worker.start_bundle()
        list(worker.process(RowMutationEntry(key, SetCell("cf", b"w", b"late"))))
        assert list(worker.finish_bundle()) == []
        assert worker.layout.epochs is not None
        assert len(worker.layout.epochs.epochs) == 3
    finally:
        worker.teardown()
    second = _stored_layout(name)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        row = raw.read_row(second.locate(key)[1])
    assert row is not None
    assert row.cells[0].value == b"late"
    assert second.locate(key)[1] != first.locate(key)[1]
