"""A table whose layout record the pre-move saltedtable (3563838) stored opens with the guard today.

The record's cell is written with the raw client, byte for byte as that commit stored it
(``tests/vectors/layout_records_before_move.json``; see
``tests/unit/_guard/test_record_compat.py``);
the salted table is then opened with the matching layout, writes and reads a row,
and leaves the stored record as it was. A layout that differs is still refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell

from saltedtable import (
    RECORD_FAMILY,
    SCHEME_ROW_KEY,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
)
from saltedtable._guard.decisions import SCHEME_QUALIFIER
from saltedtable._guard.migration import DELETING
from saltedtable.testing import INSTANCE, PROJECT
from tests.vectors import layout_records

MakeTable = Callable[..., str]
STORED = json.loads(layout_records.STORED.read_text(encoding="utf-8"))["records"]
AFTER_CUT_MS = b"1704067300000"  # 100 s after the cases' cutoff, in epoch milliseconds

#: A stored case, and a logical key its layout writes (after the cutoff, if it has one).
CASES: dict[str, bytes] = {
    "crc32, 16 buckets": b"user1",
    "fields(3, b'/')": b"a/b/c/d",
    "before_last(b'#')": b"tenant#site#1",
    "named_key_part over a function": b"tenant-1",
    "custom top-level function": b"abcdefgh",
    "cutoff, epoch_field(ms, '/', 1, 13)": b"u1/" + AFTER_CUT_MS + b"/x",
    "cutoff, reversed_epoch_field()": b"u1#" + str((1 << 63) - 1 - 1704067300000).encode(),
    "cutoff, iso8601_field()": b"u1#2024-01-02T00:00:00",
    "cutoff, big_endian_int(4, 4, s)": b"abcd" + (1704067300).to_bytes(4, "big") + b"-x",
    "migration, cutover": b"u1/" + AFTER_CUT_MS + b"/x",
    "migration, deleting": b"u1/" + AFTER_CUT_MS + b"/x",
}


def _layout(name: str) -> tuple[SaltScheme, object]:
    """The scheme and cutoff a reader opens the case's table with (none while deleting)."""
    entry = STORED[name]
    names = layout_records.namespace()
    scheme = eval(entry["scheme"], dict(names))
    if entry["cutoff"] is None or entry["migration"] == DELETING:
        return scheme, None
    return scheme, eval(entry["cutoff"], dict(names))


async def _store_old_record(
    data_client: BigtableDataClientAsync, table_id: str, name: str
) -> bytes:
    value: bytes = STORED[name]["stored"].encode()
    raw = data_client.get_table(INSTANCE, table_id)
    await raw.mutate_row(SCHEME_ROW_KEY, SetCell(RECORD_FAMILY, SCHEME_QUALIFIER, value))
    return value


async def _stored_now(data_client: BigtableDataClientAsync, table_id: str) -> list[bytes]:
    row = await data_client.get_table(INSTANCE, table_id).read_row(SCHEME_ROW_KEY)
    assert row is not None
    return [cell.value for cell in row.cells]


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_table_whose_record_the_pre_move_code_stored_opens_with_the_guard(
    data_client: BigtableDataClientAsync, make_table: MakeTable, name: str
) -> None:
    """The guard reads the old record, agrees, and the table writes and reads a row."""
    table_id = make_table(("cf", RECORD_FAMILY))
    value = await _store_old_record(data_client, table_id, name)
    scheme, cutoff = _layout(name)
    key = CASES[name]
    table = SaltedTableAsync.from_client(
        data_client,
        INSTANCE,
        table_id,
        scheme,
        cutoff=cutoff,  # type: ignore[arg-type]
        require_record=True,
    )
    await table.mutate_row(key, SetCell("cf", b"q", b"v"))
    row = await table.read_row(key)
    assert row is not None
    assert (row.row_key, row.cells[0].value) == (key, b"v")
    assert await _stored_now(data_client, table_id) == [value]


def test_the_sync_table_opens_it_too(make_table: MakeTable) -> None:
    from google.cloud.bigtable.data import BigtableDataClient

    name = "cutoff, epoch_field(ms, '/', 1, 13)"
    table_id = make_table(("cf", RECORD_FAMILY))
    value = STORED[name]["stored"].encode()
    scheme, cutoff = _layout(name)
    with BigtableDataClient(project=PROJECT) as client:
        client.get_table(INSTANCE, table_id).mutate_row(
            SCHEME_ROW_KEY, SetCell(RECORD_FAMILY, SCHEME_QUALIFIER, value)
        )
        table = SaltedTable.from_client(
            client,
            INSTANCE,
            table_id,
            scheme,
            cutoff=cutoff,  # type: ignore[arg-type]
            require_record=True,
        )
        table.mutate_row(CASES[name], SetCell("cf", b"q", b"v"))
        row = table.read_row(CASES[name])
        assert row is not None
        assert row.cells[0].value == b"v"
        stored = client.get_table(INSTANCE, table_id).read_row(SCHEME_ROW_KEY)
        assert stored is not None
        assert [cell.value for cell in stored.cells] == [value]


async def test_another_layout_is_refused_by_the_old_record(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """The old record is read, not ignored: a reader with another key part is refused."""
    table_id = make_table(("cf", RECORD_FAMILY))
    value = await _store_old_record(data_client, table_id, "fields(3, b'/')")
    table = SaltedTableAsync.from_client(
        data_client, INSTANCE, table_id, SaltScheme(16, key_part=layout_records.tenant_part)
    )
    with pytest.raises(SchemeMismatchError):
        await table.read_row(b"a/b/c/d")
    assert await _stored_now(data_client, table_id) == [value]
