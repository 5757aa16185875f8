"""A split with a future start on the emulator: objects opened before it adopt it.

A writer (``mutate_row``, ``bulk_mutate_rows`` and a batcher opened before the
split) and a reader are opened, then ``saltedtable split`` lists a counter row and
a tenant's part with a short lead. Across the start, every read of the counter
equals the adds made so far and every tenant row written is found (point reads
and a prefix scan); the counter's adds land in the home row until the start and
in its K sub-rows from it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry
from google.cloud.bigtable.data.mutations import AddToCell, SetCell
from google.cloud.bigtable_admin_v2 import types

from saltedtable import SaltedTableAsync, SaltScheme, fields
from saltedtable._admin import admin_client
from saltedtable._guard.families import parse_family
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table
from tests.cli_helpers import run
from tests.hot_model import AGGREGATES, FAMILY_SPECS

pytestmark = pytest.mark.emulator
WHERE = ("--project", PROJECT, "--instance", INSTANCE)
SCHEME = SaltScheme(8, key_part=fields(1))
CTR = b"t2#ctr"


@pytest.fixture
def table_id(emulator: Emulator) -> Iterator[str]:
    """A table with plain and aggregate families, deleted after the test."""
    name = f"adopt-{uuid.uuid4().hex[:12]}"
    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=name,
                table=types.Table(column_families=dict(parse_family(s) for s in FAMILY_SPECS)),
            )
        )
    yield name
    delete_table(emulator.address, name, missing_ok=True)


def _total(row: object) -> int:
    assert row is not None
    return sum(int.from_bytes(c.value, "big", signed=True) for c in row.cells)  # type: ignore[attr-defined]


async def test_a_reader_and_writer_opened_before_a_split_keep_every_row_across_its_start(
    table_id: str, capsys: pytest.CaptureFixture[str], data_client: BigtableDataClientAsync
) -> None:
    raw = data_client.get_table(INSTANCE, table_id)
    opts = {"record_refresh": 0.2, "aggregates": AGGREGATES}
    writer = SaltedTableAsync(raw, SCHEME, **opts)  # type: ignore[arg-type]
    await writer.guard_scheme(family="cf")
    reader = SaltedTableAsync(raw, SCHEME, **opts)  # type: ignore[arg-type]
    added, tenant = 0, []
    async with writer.mutations_batcher(flush_interval=None) as batcher:
        await writer.mutate_row(CTR, AddToCell("sm", b"n", 1, 0))
        added += 1
        code, out, _ = run(
            capsys, "split", table_id, *WHERE, "--row", CTR.decode(), "-k", "4", "--min-lead", "1.5"
        )
        assert code == 0
        assert "it starts at" in out
        started = time.time() + 1.5  # (the CLI's start is no earlier than this)
        home_only = True
        while time.time() < started + 1.0:
            before_start = time.time() < started - 0.3
            await writer.mutate_row(CTR, AddToCell("sm", b"n", 1, 0))
            await writer.bulk_mutate_rows([RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0))])
            await batcher.append(RowMutationEntry(CTR, AddToCell("sm", b"n", 1, 0)))
            await batcher.flush()
            added += 3
            key = b"t1#%04d" % len(tenant)
            await writer.mutate_row(key, SetCell("cf", b"a", b"v", 1000))
            tenant.append(key)
            if before_start:
                subs = await raw.read_rows(_sub_rows_query())
                home_only = home_only and [r.row_key for r in subs] == [SCHEME.salt_key(CTR)]
            assert _total(await reader.read_row(CTR)) == added
            await asyncio.sleep(0.05)
    assert home_only  # before the start every add went to the unsplit row
    subs = await raw.read_rows(_sub_rows_query())
    assert len(subs) == 4  # from the start the adds spread over the sub-rows
    assert _total(await reader.read_row(CTR)) == added
    assert reader.hot == writer.hot
    assert reader.hot is not None
    assert reader.hot.rows == {CTR: 4}
    for key in tenant:
        assert await reader.row_exists(key)
    assert [r.row_key async for r in reader.read_prefix(b"t1#")] == tenant


def _sub_rows_query() -> object:
    from google.cloud.bigtable.data import ReadRowsQuery

    from saltedtable._scheme.hot import HotLayout

    return ReadRowsQuery(row_keys=list(HotLayout(SCHEME, rows={CTR: 4}).physical_keys(CTR)))


async def test_a_parts_rows_written_before_and_after_its_start_are_all_found(
    table_id: str, capsys: pytest.CaptureFixture[str], data_client: BigtableDataClientAsync
) -> None:
    raw = data_client.get_table(INSTANCE, table_id)
    writer = SaltedTableAsync(raw, SCHEME, record_refresh=0.2)
    await writer.guard_scheme(family="cf")
    reader = SaltedTableAsync(raw, SCHEME, record_refresh=0.2)
    assert await reader.read_row(b"t3#none") is None
    code, _, _ = run(
        capsys, "split", table_id, *WHERE, "--part", "t3", "-k", "4", "--min-lead", "1"
    )
    assert code == 0
    written = []
    started = time.time() + 1.0
    while time.time() < started + 0.8:
        key = b"t3#%04d" % len(written)
        await writer.mutate_row(key, SetCell("cf", b"a", b"v", 1000))
        written.append(key)
        await asyncio.sleep(0.05)
    assert writer.hot is not None
    assert writer.hot.parts == {b"t3": 4}
    every = await raw.read_rows(_all_query())
    assert len({r.row_key[:2] for r in every if b"t3#" in r.row_key}) > 1  # spread from the start
    for key in written:
        assert await reader.read_row(key) is not None, key
    assert [r.row_key async for r in reader.read_prefix(b"t3#")] == written
    code, out, _ = run(capsys, "inspect", table_id, *WHERE, "--json")
    assert '"stray_keys": []' in out  # the rows written before the start, home, included
    assert '"from": "20' in out  # the part's split, with its start


def _all_query() -> object:
    from google.cloud.bigtable.data import ReadRowsQuery

    return ReadRowsQuery()
