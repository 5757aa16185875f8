"""Tables you can trust, on the emulator: where the record lives, create, and AddToCell.

The emulator keeps GC rules and aggregate families in the schema and applies
``AddToCell``; it accepts a ``SetCell`` in an aggregate family (Cloud Bigtable
refuses it), so these tests check where the record is written, not that
Bigtable refuses a wrong place.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import aclosing
from typing import Any

import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.mutations import AddToCell, DeleteAllFromRow
from google.cloud.bigtable_admin_v2 import types

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    LayoutError,
    ReadBudget,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    epoch_field,
)
from saltedtable._admin import admin_client, read_schema, table_path
from saltedtable._create import create_salted_table
from saltedtable._guard.families import RECORD_FAMILY, parse_family
from saltedtable._guard.migration import migration_record
from saltedtable._guard.record import encode_layout
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table, list_tables

pytestmark = pytest.mark.emulator


@pytest.fixture
def table_ids(emulator: Emulator) -> Iterator[list[str]]:
    """Ids handed out by new_id(), deleted after the test."""
    made: list[str] = []
    yield made
    for table_id in made:
        delete_table(emulator.address, table_id, missing_ok=True)


def new_id(made: list[str]) -> str:
    made.append(f"t-{uuid.uuid4().hex[:12]}")
    return made[-1]


def plain_table(emulator: Emulator, made: list[str], *specs: str) -> str:
    """A table with these families (``NAME[:RULE]``) and no reserved family."""
    table_id = new_id(made)
    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(column_families=dict(parse_family(s) for s in specs)),
            )
        )
    return table_id


async def record_cells(client: BigtableDataClientAsync, table_id: str) -> list[str]:
    row = await client.get_table(INSTANCE, table_id).read_row(SCHEME_ROW_KEY)
    return [] if row is None else [cell.family for cell in row.cells]


# -- goal 2: the record lives where nothing collects it -------------------------------------


async def test_a_family_with_a_one_second_max_age_never_holds_the_record(
    emulator: Emulator,
    table_ids: list[str],
    data_client: BigtableDataClientAsync,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Writes to a 1 s max-age family store no record there; naming it is refused."""
    table_id = plain_table(emulator, table_ids, "ts:max_age=1s", "cf")
    table = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(4))
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await table.mutate_row(b"sensor-1", SetCell("ts", b"t", b"20.5"))
    assert await record_cells(data_client, table_id) == []
    assert "max_age=1s" in caplog.text
    assert f"saltedtable guard {table_id}" in caplog.text
    with pytest.raises(LayoutError, match="'ts' has the GC rule max_age=1s"):
        await SaltedTableAsync.open(
            data_client.get_table(INSTANCE, table_id), SaltScheme(4), family="ts"
        )
    assert await record_cells(data_client, table_id) == []
    # A family without a rule may hold it when named.
    await SaltedTableAsync.open(
        data_client.get_table(INSTANCE, table_id), SaltScheme(4), family="cf"
    )
    assert await record_cells(data_client, table_id) == ["cf"]


async def test_the_reserved_family_holds_the_record_beside_a_ttl_family(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    table_id = plain_table(emulator, table_ids, "ts:max_age=1s", RECORD_FAMILY)
    table = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(4))
    await table.mutate_row(b"sensor-1", SetCell("ts", b"t", b"20.5"))
    assert await record_cells(data_client, table_id) == [RECORD_FAMILY]
    assert table.stored_layout == describe_layout(SaltScheme(4))


async def test_add_to_cell_through_a_salted_table(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    """Counters in an aggregate family add up; the record never goes into that family."""
    only_counters = plain_table(emulator, table_ids, "counts:agg=sum")
    created = new_id(table_ids)
    create_salted_table(
        PROJECT, INSTANCE, created, SaltScheme(4), families=["counts:agg=sum"],
        emulator_host=emulator.address,
    )  # fmt: skip
    for table_id, record in ((only_counters, []), (created, [RECORD_FAMILY])):
        table = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(4))
        await table.mutate_row(b"page-1", AddToCell("counts", b"views", 5, 0))
        await table.mutate_row(b"page-1", AddToCell("counts", b"views", 6, 0))
        row = await table.read_row(b"page-1")
        assert row is not None
        assert int.from_bytes(row.cells[0].value, "big") == 11
        assert await record_cells(data_client, table_id) == record


# -- goal 1: create ---------------------------------------------------------------------------


async def test_create_splits_adds_the_record_family_and_stores_the_record(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    table_id = new_id(table_ids)
    scheme = SaltScheme(8)
    result = create_salted_table(
        PROJECT, INSTANCE, table_id, scheme, families=["cf", "ts:max_age=7d"],
        emulator_host=emulator.address,
    )  # fmt: skip
    assert result.created
    assert result.splits == tuple(sorted(scheme.prefixes))
    with admin_client(emulator_host=emulator.address) as admin:
        schema = read_schema(admin, table_path(PROJECT, INSTANCE, table_id))
    assert sorted(schema) == ["cf", RECORD_FAMILY, "ts"]
    assert schema["ts"].gc_rule == "max_age=7d"
    assert schema[RECORD_FAMILY].gc_rule == "none"
    assert await record_cells(data_client, table_id) == [RECORD_FAMILY]
    table = SaltedTableAsync.from_client(
        data_client, INSTANCE, table_id, scheme, require_record=True
    )
    await table.mutate_row(b"a", SetCell("cf", b"q", b"v"))
    assert [r.row_key for r in await table.read_rows(ReadRowsQuery())] == [b"a"]


def test_create_refuses_an_existing_table_and_accepts_it_if_asked(
    emulator: Emulator, table_ids: list[str]
) -> None:
    table_id = new_id(table_ids)
    create_salted_table(PROJECT, INSTANCE, table_id, SaltScheme(8), emulator_host=emulator.address)
    with pytest.raises(LayoutError, match=f"table '{table_id}' already exists"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(8), emulator_host=emulator.address
        )
    again = create_salted_table(
        PROJECT, INSTANCE, table_id, SaltScheme(8), if_not_exists=True,
        emulator_host=emulator.address,
    )  # fmt: skip
    assert not again.created
    with pytest.raises(LayoutError, match="buckets: stored 8, now 16"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(16), if_not_exists=True,
            emulator_host=emulator.address,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("families", "message"),
    [
        (["bad name"], "not a valid Bigtable family id"),
        (["cf", "cf"], "given twice"),
        (["cf:max_age=forever"], "max_age needs"),
        ([f"{RECORD_FAMILY}:max_age=1d"], "must keep its latest version"),
        ([f"{RECORD_FAMILY}:agg=sum"], "aggregate"),
    ],
)
def test_create_refuses_bad_families_and_creates_nothing(
    emulator: Emulator, table_ids: list[str], families: list[str], message: str
) -> None:
    table_id = new_id(table_ids)
    with pytest.raises(ValueError, match=message):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(4), families=families,
            emulator_host=emulator.address,
        )  # fmt: skip
    assert table_id not in list_tables(emulator.address)


@pytest.mark.parametrize("table_id", ["-events", ".events", "e" * 51, "", "ev ents", "ev/ents"])
def test_create_refuses_a_table_id_bigtable_refuses(emulator: Emulator, table_id: str) -> None:
    with pytest.raises(ValueError, match="not a valid Bigtable table id"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(4), emulator_host=emulator.address
        )
    assert table_id not in list_tables(emulator.address)


def test_create_accepts_the_longest_and_underscore_ids(
    emulator: Emulator, table_ids: list[str]
) -> None:
    for table_id in ("_e-v.1", "e" * 50):
        table_ids.append(table_id)
        result = create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(4), emulator_host=emulator.address
        )
        assert result.created


def test_a_failed_create_leaves_no_table(
    emulator: Emulator, table_ids: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record cannot be stored (injected): the new table is deleted again."""
    import saltedtable._create as create_module

    def refuse(*args: object) -> str:
        raise LayoutError("injected: the record could not be stored")

    monkeypatch.setattr(create_module, "_store_record", refuse)
    table_id = new_id(table_ids)
    with pytest.raises(LayoutError, match="injected"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(4), emulator_host=emulator.address
        )
    assert table_id not in list_tables(emulator.address)


def test_a_failed_cleanup_keeps_the_first_error_and_names_the_table_left(
    emulator: Emulator, table_ids: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record cannot be stored and the delete fails too (both injected)."""
    from google.api_core.exceptions import ServiceUnavailable
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient

    import saltedtable._create as create_module

    def refuse(*args: object) -> str:
        raise LayoutError("injected: the record could not be stored")

    def fail_delete(*args: object, **kwargs: object) -> None:
        raise ServiceUnavailable("injected: the admin API is away")

    monkeypatch.setattr(create_module, "_store_record", refuse)
    monkeypatch.setattr(BigtableTableAdminClient, "delete_table", fail_delete)
    table_id = new_id(table_ids)
    with pytest.raises(LayoutError, match="injected: the record") as failed:
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(4), emulator_host=emulator.address
        )
    notes = " ".join(getattr(failed.value, "__notes__", []))
    assert f"the new table {table_id!r}" in notes
    assert "ServiceUnavailable" in notes
    assert table_id in list_tables(emulator.address)  # left behind, as the note says


# -- goal 4: long-lived objects see migrations ------------------------------------------------


async def test_a_running_cutoff_reader_stops_when_the_record_moves_to_deleting(
    bigtable_table_factory: Callable[..., str], data_client: BigtableDataClientAsync
) -> None:
    """The record moves under a running scan: the scan stops, it does not miss rows quietly."""
    scheme = SaltScheme(4)
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    at = int(cutoff.cutoff.timestamp())
    raw = data_client.get_table(INSTANCE, bigtable_table_factory(["cf"]))
    legacy = [b"s%d#%010d" % (i, at - 1000 + i) for i in range(40)]
    await raw.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in legacy])
    writer = await SaltedTableAsync.open(raw, scheme, cutoff=cutoff, family="cf")
    salted = [b"s%d#%010d" % (i, at + i) for i in range(40)]
    await writer.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in salted])
    # A reader that reads the record again whenever it is due (every row, here).
    reader = SaltedTableAsync(
        raw, scheme, cutoff=cutoff, record_refresh=1e-9, budget=ReadBudget(rows=8)
    )
    deleting = migration_record(scheme, cutoff, "deleting")
    got: list[bytes] = []

    async def scan() -> None:
        stream = await reader.read_rows_stream(ReadRowsQuery())
        async with aclosing(stream):
            async for row in stream:
                got.append(row.row_key)
                if len(got) == 10:  # `migrate delete-legacy` moves the record now
                    await raw.mutate_row(
                        SCHEME_ROW_KEY,
                        [DeleteAllFromRow(), SetCell("cf", b"scheme", encode_layout(deleting))],
                    )

    with pytest.raises(SchemeMismatchError, match="migration: stored 'deleting'"):
        await scan()
    assert len(got) == 10
    # From then on the object refuses every operation; a fully salted reader opens.
    with pytest.raises(SchemeMismatchError):
        await reader.read_row(legacy[0])
    await SaltedTableAsync(raw, scheme).read_row(salted[0])


async def test_a_reader_without_refresh_reads_the_record_once(
    bigtable_table_factory: Callable[..., str], data_client: BigtableDataClientAsync
) -> None:
    """record_refresh=None keeps the old behaviour: the record is read once per object."""
    scheme = SaltScheme(4)
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    raw = data_client.get_table(INSTANCE, bigtable_table_factory(["cf"]))
    writer = await SaltedTableAsync.open(raw, scheme, cutoff=cutoff, family="cf")
    await writer.mutate_row(b"s#%010d" % 1, SetCell("cf", b"q", b"v"))
    reader = SaltedTableAsync(raw, scheme, cutoff=cutoff, record_refresh=None)
    assert await reader.read_row(b"s#%010d" % 1) is not None
    deleting = migration_record(scheme, cutoff, "deleting")
    await raw.mutate_row(
        SCHEME_ROW_KEY, [DeleteAllFromRow(), SetCell("cf", b"scheme", encode_layout(deleting))]
    )
    assert len(await reader.read_rows(ReadRowsQuery())) == 1


# A scan whose last rows are deleted under it: the end of the stream checks the record.

#: A real refresh interval, short; the tests wait it out before the record moves.
SHORT_REFRESH = 0.5
TAIL_CUTOFF = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
TAIL_AT = int(TAIL_CUTOFF.cutoff.timestamp())
#: Logical keys after the cutoff (salted) and before it (legacy, unsalted), all from b"z".
TAIL_SALTED = [b"z%d#%010d" % (i, TAIL_AT + i) for i in range(8)]
TAIL_LEGACY = [b"z%d#%010d" % (i, TAIL_AT - 1000 + i) for i in range(20)]
TAIL_QUERY = ReadRowsQuery(row_ranges=RowRange(start_key=b"z"))


def _legacy_scan(query: Any) -> bool:
    """Whether a sub-scan reads the legacy (unsalted) key space: its keys start with b"z"."""
    return any((r.start_key or b"").startswith(b"z") for r in query.row_ranges)


class HeldLegacyAsync:
    """The raw table; a scan of the legacy key space starts only once ``go`` is set."""

    def __init__(self, table: Any, go: asyncio.Event) -> None:
        self._table, self._go = table, go

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    async def read_rows_stream(self, query: Any, **kwargs: Any) -> Any:
        if _legacy_scan(query):
            await self._go.wait()
        return await self._table.read_rows_stream(query, **kwargs)


class HeldLegacy:
    """The sync raw table; a scan of the legacy key space starts only once ``go`` is set."""

    def __init__(self, table: Any, go: threading.Event) -> None:
        self._table, self._go = table, go

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def read_rows_stream(self, query: Any, **kwargs: Any) -> Any:
        if _legacy_scan(query):
            self._go.wait()
        return self._table.read_rows_stream(query, **kwargs)


def _deleting_then_gone() -> tuple[list[Any], list[RowMutationEntry]]:
    """What `migrate delete-legacy` does: move the record, then delete the legacy rows."""
    deleting = migration_record(SaltScheme(4), TAIL_CUTOFF, "deleting")
    move = [DeleteAllFromRow(), SetCell("cf", b"scheme", encode_layout(deleting))]
    return move, [RowMutationEntry(k, DeleteAllFromRow()) for k in TAIL_LEGACY]


async def test_a_cutoff_scan_whose_tail_is_deleted_under_it_stops_at_its_end(
    bigtable_table_factory: Callable[..., str], data_client: BigtableDataClientAsync
) -> None:
    """No row comes after the deletion, so only the end's check can see the record move."""
    scheme = SaltScheme(4)
    raw = data_client.get_table(INSTANCE, bigtable_table_factory(["cf"]))
    await raw.bulk_mutate_rows(
        [RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in TAIL_LEGACY]
    )
    writer = await SaltedTableAsync.open(raw, scheme, cutoff=TAIL_CUTOFF, family="cf")
    await writer.bulk_mutate_rows(
        [RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in TAIL_SALTED]
    )
    go, salted_seen = asyncio.Event(), asyncio.Event()
    reader = SaltedTableAsync(
        HeldLegacyAsync(raw, go), scheme, cutoff=TAIL_CUTOFF, record_refresh=SHORT_REFRESH
    )
    move, delete = _deleting_then_gone()

    async def migrate() -> None:
        await salted_seen.wait()
        await asyncio.sleep(SHORT_REFRESH)  # the reader's record is due from now on
        await raw.mutate_row(SCHEME_ROW_KEY, move)
        await raw.bulk_mutate_rows(delete)
        go.set()

    got: list[bytes] = []

    async def scan() -> None:
        stream = await reader.read_rows_stream(TAIL_QUERY, ordered=False)
        async with aclosing(stream):
            async for row in stream:
                got.append(row.row_key)
                if len(got) == len(TAIL_SALTED):
                    salted_seen.set()

    mover = asyncio.create_task(migrate())
    with pytest.raises(SchemeMismatchError, match="migration: stored 'deleting'"):
        await scan()
    await mover
    assert sorted(got) == TAIL_SALTED  # the legacy rows were gone before the scan got there


def test_a_sync_cutoff_scan_whose_tail_is_deleted_under_it_stops_at_its_end(
    emulator: Emulator, bigtable_table_factory: Callable[..., str]
) -> None:
    """The sync table: as above."""
    scheme = SaltScheme(4)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, bigtable_table_factory(["cf"]))
        raw.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in TAIL_LEGACY])
        writer = SaltedTable.open(raw, scheme, cutoff=TAIL_CUTOFF, family="cf")
        writer.bulk_mutate_rows(
            [RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in TAIL_SALTED]
        )
        go, salted_seen = threading.Event(), threading.Event()
        reader = SaltedTable(
            HeldLegacy(raw, go), scheme, cutoff=TAIL_CUTOFF, record_refresh=SHORT_REFRESH
        )
        move, delete = _deleting_then_gone()
        moved: list[BaseException] = []

        def migrate() -> None:
            try:
                salted_seen.wait()
                threading.Event().wait(SHORT_REFRESH)  # the reader's record is due from now on
                raw.mutate_row(SCHEME_ROW_KEY, move)
                raw.bulk_mutate_rows(delete)
            except BaseException as exc:  # reported below
                moved.append(exc)
            finally:
                go.set()

        mover = threading.Thread(target=migrate)
        mover.start()
        got: list[bytes] = []

        def scan() -> None:
            for row in reader.read_rows_stream(TAIL_QUERY, ordered=False):
                got.append(row.row_key)
                if len(got) == len(TAIL_SALTED):
                    salted_seen.set()

        try:
            with pytest.raises(SchemeMismatchError, match="migration: stored 'deleting'"):
                scan()
        finally:
            salted_seen.set()
            mover.join()
            reader.close()
        assert moved == []
        assert sorted(got) == TAIL_SALTED


# -- create --if-not-exists on a table made elsewhere -------------------------------------------


async def test_create_if_not_exists_accepts_an_agreeing_record_in_another_family(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    table_id = plain_table(emulator, table_ids, "cf")
    await SaltedTableAsync.open(
        data_client.get_table(INSTANCE, table_id), SaltScheme(4), family="cf"
    )
    result = create_salted_table(
        PROJECT, INSTANCE, table_id, SaltScheme(4), if_not_exists=True,
        emulator_host=emulator.address,
    )  # fmt: skip
    assert not result.created
    assert result.record_family == "cf"
    assert await record_cells(data_client, table_id) == ["cf"]  # left where it was
    with pytest.raises(SchemeMismatchError, match="buckets: stored 4, now 8"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(8), if_not_exists=True,
            emulator_host=emulator.address,
        )  # fmt: skip


async def test_create_if_not_exists_gives_a_record_less_table_one_or_names_the_fix(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    with_reserved = plain_table(emulator, table_ids, "cf", RECORD_FAMILY)
    result = create_salted_table(
        PROJECT, INSTANCE, with_reserved, SaltScheme(4), if_not_exists=True,
        emulator_host=emulator.address,
    )  # fmt: skip
    assert (result.created, result.record_family) == (False, RECORD_FAMILY)
    assert await record_cells(data_client, with_reserved) == [RECORD_FAMILY]

    without = plain_table(emulator, table_ids, "cf")
    with pytest.raises(LayoutError, match=f"table '{without}' exists") as refused:
        create_salted_table(
            PROJECT, INSTANCE, without, SaltScheme(4), if_not_exists=True,
            emulator_host=emulator.address,
        )  # fmt: skip
    assert f"saltedtable guard {without} " in str(refused.value)
    assert "--add-family" in str(refused.value)
    assert await record_cells(data_client, without) == []  # nothing written
    with admin_client(emulator_host=emulator.address) as admin:
        assert sorted(read_schema(admin, table_path(PROJECT, INSTANCE, without))) == ["cf"]


# -- nothing stores a record it has not checked against the rows -------------------------------

USERS = [b"user%05d" % i for i in range(300)]


async def four_bucket_rows_without_record(
    emulator: Emulator, made: list[str], client: BigtableDataClientAsync
) -> str:
    """A table written with 4 buckets by a tool without the guard: rows, no record."""
    table_id = plain_table(emulator, made, "cf", RECORD_FAMILY)
    other_tool = SaltedTableAsync.from_client(
        client, INSTANCE, table_id, SaltScheme(4), guard=False
    )
    await other_tool.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", k)) for k in USERS])
    return table_id


async def test_open_with_the_wrong_bucket_count_stores_nothing(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    """SaltedTableAsync.open(N=8, family=...) over N=4 rows: refused before any record."""
    table_id = await four_bucket_rows_without_record(emulator, table_ids, data_client)
    raw = data_client.get_table(INSTANCE, table_id)
    for family in ("cf", RECORD_FAMILY):
        with pytest.raises(LayoutError, match=f"the layout record of {table_id} was not stored"):
            await SaltedTableAsync.open(raw, SaltScheme(8), family=family)
        assert await record_cells(data_client, table_id) == []
    right = await SaltedTableAsync.open(raw, SaltScheme(4), family=RECORD_FAMILY)
    assert await record_cells(data_client, table_id) == [RECORD_FAMILY]
    row = await right.read_row(USERS[5])
    assert row is not None
    assert row.cells[0].value == USERS[5]


def test_sync_open_with_the_wrong_bucket_count_stores_nothing(
    emulator: Emulator, table_ids: list[str]
) -> None:
    """SaltedTable.open (sync) does the same: refused, nothing stored; N=4 opens after."""
    with BigtableDataClient(project=PROJECT) as client:

        async def setup() -> str:
            async with BigtableDataClientAsync(project=PROJECT) as async_client:
                return await four_bucket_rows_without_record(emulator, table_ids, async_client)

        table_id = asyncio.run(setup())
        raw = client.get_table(INSTANCE, table_id)
        with pytest.raises(LayoutError, match="was not stored"):
            SaltedTable.open(raw, SaltScheme(8), family=RECORD_FAMILY)
        assert raw.read_row(SCHEME_ROW_KEY) is None
        right = SaltedTable.open(raw, SaltScheme(4), family=RECORD_FAMILY)
        assert right.stored_layout == describe_layout(SaltScheme(4))
        assert right.read_row(USERS[5]) is not None


async def test_the_first_write_with_the_wrong_bucket_count_stores_nothing(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    """A first write with N=8 over N=4 rows: refused; no record, no row; N=4 writes after."""
    table_id = await four_bucket_rows_without_record(emulator, table_ids, data_client)
    wrong = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(8))
    with pytest.raises(LayoutError, match="was not stored"):
        await wrong.mutate_row(b"new", SetCell("cf", b"q", b"v"))
    assert await record_cells(data_client, table_id) == []
    raw = data_client.get_table(INSTANCE, table_id)
    assert await raw.read_row(SaltScheme(8).salt_key(b"new")) is None
    right = SaltedTableAsync.from_client(data_client, INSTANCE, table_id, SaltScheme(4))
    await right.mutate_row(b"new", SetCell("cf", b"q", b"v"))
    assert await record_cells(data_client, table_id) == [RECORD_FAMILY]
    assert await right.read_row(b"new") is not None


def test_the_sync_first_write_with_the_wrong_bucket_count_stores_nothing(
    emulator: Emulator, table_ids: list[str]
) -> None:
    """The same through the sync table's bulk write."""

    async def setup() -> str:
        async with BigtableDataClientAsync(project=PROJECT) as async_client:
            return await four_bucket_rows_without_record(emulator, table_ids, async_client)

    table_id = asyncio.run(setup())
    with BigtableDataClient(project=PROJECT) as client:
        wrong = SaltedTable.from_client(client, INSTANCE, table_id, SaltScheme(8))
        with pytest.raises(LayoutError, match="was not stored"):
            wrong.bulk_mutate_rows([RowMutationEntry(b"new", SetCell("cf", b"q", b"v"))])
        raw = client.get_table(INSTANCE, table_id)
        assert raw.read_row(SCHEME_ROW_KEY) is None
        right = SaltedTable.from_client(client, INSTANCE, table_id, SaltScheme(4))
        right.bulk_mutate_rows([RowMutationEntry(b"new", SetCell("cf", b"q", b"v"))])
        assert right.stored_layout == describe_layout(SaltScheme(4))


async def test_create_if_not_exists_reports_a_stored_record_and_refuses_misfit_rows(
    emulator: Emulator, table_ids: list[str], data_client: BigtableDataClientAsync
) -> None:
    """create_salted_table(if_not_exists=True): misfit rows refused; then stored, then agrees."""
    table_id = await four_bucket_rows_without_record(emulator, table_ids, data_client)
    with pytest.raises(LayoutError, match="was not stored"):
        create_salted_table(
            PROJECT, INSTANCE, table_id, SaltScheme(8), if_not_exists=True,
            emulator_host=emulator.address,
        )  # fmt: skip
    assert await record_cells(data_client, table_id) == []
    stored = create_salted_table(
        PROJECT, INSTANCE, table_id, SaltScheme(4), if_not_exists=True,
        emulator_host=emulator.address,
    )  # fmt: skip
    assert (stored.created, stored.record_stored, stored.sampled_rows) == (False, True, 300)
    agreed = create_salted_table(
        PROJECT, INSTANCE, table_id, SaltScheme(4), if_not_exists=True,
        emulator_host=emulator.address,
    )  # fmt: skip
    assert (agreed.record_stored, agreed.sampled_rows) == (False, None)
