"""Table objects adopting an appended epoch, over the in-memory fake table (both flavours).

An object opened on N=4 reads the record again after its (short) refresh; the record now
has an epoch of N=16 appended: every write method places keys by the longer layout, keys
past the object's horizon are refused with nothing written, and keys from the new
epoch's start land under the 16 buckets' prefixes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from google.cloud.bigtable.data import RowMutationEntry, SetCell
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule

from saltedtable import (
    SCHEME_ROW_KEY,
    RowKeyError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
)
from saltedtable._guard.record import SCHEME_QUALIFIER
from saltedtable._guard.resalt import plan_append
from tests.fakes import FakeTable, SyncFakeTable

READER = epoch_field("ms", index=1, digits=13)
LEAD = 0.4


def k(sensor: int, seconds_ahead: float = 0.0) -> bytes:
    return b"s%d#%013d" % (sensor, int((time.time() + seconds_ahead) * 1000))


def append(fake: FakeTable, family: str, start_in: float) -> dt.datetime:
    """Store the record with an N=16 epoch appended, starting ``start_in`` seconds ahead."""
    from saltedtable._guard.record import decode_layout

    cells = [c for c in fake.cells_of(SCHEME_ROW_KEY) if c[1] == SCHEME_QUALIFIER]
    stored = decode_layout(max(cells, key=lambda c: c[2])[3])
    now = dt.datetime.now(dt.UTC)
    at = now + dt.timedelta(seconds=start_in)
    plan = plan_append(stored, SaltScheme(16), at, now, timestamp=READER, min_lead=LEAD)
    fake.set_cell(
        SCHEME_ROW_KEY, family, SCHEME_QUALIFIER, plan.record.encode(), 2**60 // 1000 * 1000
    )
    return at


def n16(fake: FakeTable) -> set[bytes]:
    """The physical keys under a 16-bucket prefix."""
    prefixes = set(SaltScheme(16).prefixes)
    return {key for key in fake.data_keys() if key[:3] in prefixes}


def test_the_async_table_adopts_and_every_write_keeps_the_horizon() -> None:
    async def scenario() -> None:
        fake = FakeTable()
        table = SaltedTableAsync(fake, SaltScheme(4), record_refresh=0.05)
        await table.mutate_row(k(0), SetCell("cf", b"q", b"v"))  # stores the record
        family = table._guard.stored_family
        assert family is not None
        # Two more objects, settled before the append: their first write after the start
        # adopts the epoch and must place its key by it.
        bulk, single = (SaltedTableAsync(fake, SaltScheme(4), record_refresh=0.05) for _ in "ab")
        await bulk.read_row(k(0))
        await single.read_row(k(0))
        at = append(fake, family, LEAD + 0.3)
        await asyncio.sleep(0.06)  # the refresh is due
        await table.bulk_mutate_rows([RowMutationEntry(k(1), SetCell("cf", b"q", b"v"))])
        assert table.layout.epochs is not None
        assert len(table.layout.epochs) == 2
        before = fake.data_keys()
        far = k(9, 60)
        with pytest.raises(RowKeyError, match="horizon"):
            await table.bulk_mutate_rows(
                [
                    RowMutationEntry(k(2), SetCell("cf", b"q", b"v")),
                    RowMutationEntry(far, SetCell("cf", b"q", b"v")),
                ]
            )
        with pytest.raises(RowKeyError, match="horizon"):
            await table.mutate_row(far, SetCell("cf", b"q", b"v"))
        with pytest.raises(RowKeyError, match="horizon"):
            await table.read_modify_write_row(far, AppendValueRule("cf", b"q", b"+"))
        async with table.mutations_batcher(flush_interval=None) as batcher:
            with pytest.raises(RowKeyError, match="horizon"):
                await batcher.append(RowMutationEntry(far, SetCell("cf", b"q", b"v")))
        assert fake.data_keys() == before  # nothing was written
        await asyncio.sleep(max(0.0, at.timestamp() + 0.05 - time.time()))
        new = [k(3), k(4), k(5), k(6)]
        await table.mutate_row(new[0], SetCell("cf", b"q", b"v"))
        await table.bulk_mutate_rows([RowMutationEntry(new[1], SetCell("cf", b"q", b"v"))])
        await table.check_and_mutate_row(
            new[2], None, false_case_mutations=SetCell("cf", b"q", b"v")
        )
        async with table.mutations_batcher(flush_interval=None) as batcher:
            await batcher.append(RowMutationEntry(new[3], SetCell("cf", b"q", b"v")))
        late = [k(7), k(8)]
        await bulk.bulk_mutate_rows([RowMutationEntry(late[0], SetCell("cf", b"q", b"v"))])
        await single.mutate_row(late[1], SetCell("cf", b"q", b"v"))
        assert n16(fake) == {SaltScheme(16).salt_key(key) for key in [*new, *late]}

    asyncio.run(scenario())


def test_the_sync_table_adopts_in_a_batcher_opened_before_the_append() -> None:
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4), record_refresh=0.05)
    table.mutate_row(k(0), SetCell("cf", b"q", b"v"))
    family = table._guard.stored_family
    assert family is not None
    with table.mutations_batcher(flush_interval=None) as batcher:
        at = append(fake, family, LEAD + 0.2)
        time.sleep(max(0.0, at.timestamp() + 0.05 - time.time()))
        late = k(7)
        batcher.append(RowMutationEntry(late, SetCell("cf", b"q", b"v")))
        with pytest.raises(RowKeyError, match="horizon"):
            batcher.append(RowMutationEntry(k(8, 60), SetCell("cf", b"q", b"v")))
    assert n16(fake) == {SaltScheme(16).salt_key(late)}
    assert table.layout.epochs is not None


def test_an_open_batcher_follows_an_adoption_made_by_another_call() -> None:
    """A batcher places keys by the layout the table adopted on a read, and keeps the horizon."""

    async def scenario() -> None:
        fake = FakeTable()
        table = SaltedTableAsync(fake, SaltScheme(4), record_refresh=0.05)
        await table.mutate_row(k(0), SetCell("cf", b"q", b"v"))
        family = table._guard.stored_family
        async with table.mutations_batcher(flush_interval=None) as batcher:
            await batcher.append(RowMutationEntry(k(1), SetCell("cf", b"q", b"v")))
            at = append(fake, family, LEAD + 0.2)
            await asyncio.sleep(max(0.0, at.timestamp() + 0.05 - time.time()))
            await table.read_row(k(0))  # the table adopts the appended epoch here
            assert table.layout.epochs is not None
            late = k(7)
            await batcher.append(RowMutationEntry(late, SetCell("cf", b"q", b"v")))
            with pytest.raises(RowKeyError):
                await batcher.append(RowMutationEntry(k(8, 60), SetCell("cf", b"q", b"v")))
        assert n16(fake) == {SaltScheme(16).salt_key(late)}

    asyncio.run(scenario())


def test_read_prefix_reads_the_record_before_it_is_planned() -> None:
    """A prefix scan whose refresh is due plans by the layout the refresh adopts."""

    async def scenario() -> None:
        fake = FakeTable()
        table = SaltedTableAsync(fake, SaltScheme(4), record_refresh=0.05)
        await table.mutate_row(k(0), SetCell("cf", b"q", b"v"))
        family = table._guard.stored_family
        assert family is not None
        at = append(fake, family, LEAD + 0.1)
        await asyncio.sleep(max(0.0, at.timestamp() + 0.06 - time.time()))
        writer = SaltedTableAsync(fake, SaltScheme(4), record_refresh=0.05)
        late = k(1)
        await writer.mutate_row(late, SetCell("cf", b"q", b"v"))  # under 16 buckets
        assert n16(fake) == {SaltScheme(16).salt_key(late)}
        assert table._guard.due()
        rows = [r.row_key async for r in table.read_prefix(b"s1#")]
        assert rows == [late]
        assert table.layout.epochs is not None

    asyncio.run(scenario())


def test_the_sync_read_prefix_reads_the_record_before_it_is_planned() -> None:
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4), record_refresh=0.05)
    table.mutate_row(k(0), SetCell("cf", b"q", b"v"))
    family = table._guard.stored_family
    assert family is not None
    at = append(fake, family, LEAD + 0.1)
    time.sleep(max(0.0, at.timestamp() + 0.06 - time.time()))
    writer = SaltedTable(SyncFakeTable(fake), SaltScheme(4), record_refresh=0.05)
    late = k(1)
    writer.mutate_row(late, SetCell("cf", b"q", b"v"))
    assert [r.row_key for r in table.read_prefix(b"s1#")] == [late]
