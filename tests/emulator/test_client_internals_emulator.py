"""The client_internals switch on the emulator: every kind of read goes through the client's own.

A read of the client's own table normally runs the client's read operation with
saltedtable's merged attempts (``_async/chunks.py``, whose RPC is ``_call``). With
the switch off (the argument, or ``SALTEDTABLE_CLIENT_INTERNALS=off`` for the
CLI) no attempt may take that path: each request is an attempt of the client's
own read operation (counted on its class, which the merged operation overrides),
and the rows are the same. With the switch on the same reads do use ``_call``,
so the counters can tell the two apart.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
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
from google.cloud.bigtable.data._async._read_rows import _ReadRowsOperationAsync
from google.cloud.bigtable.data._sync_autogen._read_rows import _ReadRowsOperation
from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup

import saltedtable._async.chunks as _chunks
import saltedtable._sync_autogen.chunks as _chunks_sync
from saltedtable import SCHEME_ROW_KEY, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import INSTANCE, PROJECT, Emulator
from tests.cli_helpers import run
from tests.conftest import MakeTable, salted_table_of

SCHEME = SaltScheme(4)
KEYS = [b"key-%04d" % i for i in range(300)]
WHERE = ("--project", PROJECT, "--instance", INSTANCE)


@pytest.fixture
def table_id(emulator: Emulator, make_table: MakeTable) -> str:
    return salted_table_of(make_table, SCHEME, KEYS)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts requests by path: "merged" (saltedtable's RPC) and "own" (the client's attempts)."""
    seen: Counter[str] = Counter()

    def counting(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return func(*args, **kwargs)

        return spy

    for module in (_chunks, _chunks_sync):
        monkeypatch.setattr(module, "_call", counting("merged", module._call))
    for cls in (_ReadRowsOperationAsync, _ReadRowsOperation):
        monkeypatch.setattr(cls, "_read_rows_attempt", counting("own", cls._read_rows_attempt))
    return seen


def keys(rows: Any) -> list[bytes]:
    return [r.row_key for r in rows]


RANGE = ReadRowsQuery(row_ranges=RowRange(b"key-0100", b"key-0200"))


@pytest.mark.parametrize("internals", [False, True])
async def test_every_async_read_takes_the_clients_own_path_when_switched_off(
    emulator: Emulator, table_id: str, paths: Counter[str], internals: bool
) -> None:
    async with BigtableDataClientAsync(project=PROJECT) as client:
        salted = SaltedTableAsync.from_client(
            client, INSTANCE, table_id, SCHEME, client_internals=internals
        )
        reads: dict[str, Callable[[], Any]] = {
            "check_layout": lambda: salted.check_layout(sample_rows=5),
            "read_rows": lambda: salted.read_rows(ReadRowsQuery()),
            "unordered": lambda: salted.read_rows(RANGE, ordered=False),
            "one request": lambda: salted.read_rows(ReadRowsQuery(limit=3)),
            "read_row": lambda: salted.read_row(b"key-0007"),
            "row_exists": lambda: salted.row_exists(b"key-0008"),
            "sharded": lambda: salted.read_rows_sharded([RANGE, ReadRowsQuery(limit=2)]),
        }
        got: dict[str, Any] = {}
        by_kind: dict[str, Counter[str]] = {}
        for kind, read in reads.items():
            before = Counter(paths)
            got[kind] = await read()
            by_kind[kind] = paths - before
        before = Counter(paths)
        async with aclosing(await salted.read_rows_stream(RANGE)) as stream:
            got["stream"] = [row async for row in stream]
        by_kind["stream"] = paths - before
        before = Counter(paths)
        async with aclosing(salted.read_prefix(b"key-02")) as stream:
            got["prefix"] = [row async for row in stream]
        by_kind["prefix"] = paths - before
    assert keys(got["read_rows"]) == KEYS
    assert sorted(keys(got["unordered"])) == KEYS[100:200]
    assert keys(got["one request"]) == KEYS[:3]
    assert got["read_row"].row_key == b"key-0007"
    assert got["row_exists"] is True
    assert sorted(keys(got["sharded"])) == sorted(KEYS[100:200] + KEYS[:2])
    assert keys(got["stream"]) == KEYS[100:200]
    assert keys(got["prefix"]) == KEYS[200:300]
    for kind, seen in by_kind.items():
        assert seen["own"] >= 1 or seen["merged"] >= 1, kind
        if not internals:
            assert seen["merged"] == 0, kind
    if internals:  # (the counters tell the paths apart)
        assert by_kind["read_rows"]["merged"] >= SCHEME.buckets


@pytest.mark.parametrize("internals", [False, True])
def test_every_sync_read_takes_the_clients_own_path_when_switched_off(
    emulator: Emulator, table_id: str, paths: Counter[str], internals: bool
) -> None:
    with BigtableDataClient(project=PROJECT) as client:
        salted = SaltedTable.from_client(
            client, INSTANCE, table_id, SCHEME, client_internals=internals
        )
        salted.check_layout(sample_rows=5)
        assert keys(salted.read_rows(ReadRowsQuery())) == KEYS
        assert keys(salted.read_rows(ReadRowsQuery(limit=3))) == KEYS[:3]
        assert keys(salted.read_rows_stream(RANGE)) == KEYS[100:200]
        assert salted.row_exists(b"key-0001")
        assert sorted(keys(salted.read_rows_sharded([RANGE]))) == KEYS[100:200]
    assert paths["own"] >= 1 or internals
    assert (paths["merged"] == 0) is (not internals)


@pytest.mark.parametrize("setting", ["off", "on"])
def test_the_cli_reads_through_the_clients_own_path_with_the_variable_off(
    emulator: Emulator,
    table_id: str,
    paths: Counter[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
) -> None:
    monkeypatch.setenv("SALTEDTABLE_CLIENT_INTERNALS", setting)
    code, out, err = run(capsys, "read", table_id, *WHERE, "--prefix", "key-01", "--json")
    assert (code, err) == (0, "")
    assert [json.loads(line)["key"] for line in out.splitlines()] == [
        k.decode() for k in KEYS[100:200]
    ]
    assert paths["own"] >= 1 or setting == "on"
    assert (paths["merged"] == 0) is (setting == "off")


def test_a_bad_variable_is_a_one_line_cli_error(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SALTEDTABLE_CLIENT_INTERNALS", "maybe")
    code, _, err = run(capsys, "read", table_id, *WHERE, "--count", "1")
    assert code != 0
    assert "SALTEDTABLE_CLIENT_INTERNALS" in err


def _bulk_entries(tag: bytes) -> list[RowMutationEntry]:
    return [
        RowMutationEntry(b"%s-%04d" % (tag, i), SetCell("cf", b"q", b"v%d" % i, 1000))
        for i in range(500)
    ]


@pytest.mark.parametrize("internals", [False, True])
async def test_bulk_writes_land_under_the_salted_keys_on_either_path(
    emulator: Emulator, make_table: MakeTable, internals: bool
) -> None:
    """The client's own operation with the caller's entries (switch on), the table's own
    ``bulk_mutate_rows`` with physical copies (off): the same rows, both flavours; a bad
    family fails every entry naming the caller's own objects, on either path."""
    table_id = make_table()
    written = _bulk_entries(b"a")
    sync_written = _bulk_entries(b"s")
    async with BigtableDataClientAsync(project=PROJECT) as client:
        salted = SaltedTableAsync.from_client(
            client, INSTANCE, table_id, SCHEME, client_internals=internals
        )
        await salted.bulk_mutate_rows(written)
        bad = [RowMutationEntry(b"bad-%d" % i, SetCell("nope", b"q", b"v", 1000)) for i in range(3)]
        with pytest.raises(MutationsExceptionGroup) as caught:
            await salted.bulk_mutate_rows(bad)
        failed = caught.value.exceptions
        assert [(e.index, e.entry) for e in failed] == list(enumerate(bad))  # type: ignore[attr-defined]
        assert all(e.entry is bad[e.index] for e in failed)  # type: ignore[attr-defined]
        raw = client.get_table(INSTANCE, table_id)
        physical = [k for k in keys(await raw.read_rows(ReadRowsQuery())) if k != SCHEME_ROW_KEY]
    with BigtableDataClient(project=PROJECT) as sync_client:
        sync = SaltedTable.from_client(
            sync_client, INSTANCE, table_id, SCHEME, client_internals=internals
        )
        sync.bulk_mutate_rows(sync_written)
        got = keys(sync.read_rows(ReadRowsQuery()))
    expected = [e.row_key for e in written]
    assert sorted(physical) == sorted(SCHEME.salt_key(k) for k in expected)
    assert got == sorted(expected + [e.row_key for e in sync_written])
