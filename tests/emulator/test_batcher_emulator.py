"""The salted batchers' flush() and failures over the client's own batchers, on the emulator."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)

from saltedtable import SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, Emulator
from tests.conftest import MakeTable

SCHEME = SaltScheme(16)
REPO = Path(__file__).resolve().parents[2]


def entry(key: bytes, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(key, SetCell(family, b"q", key, 1000))


def failed_entries(group: MutationsExceptionGroup) -> list[RowMutationEntry]:
    out = []
    for exc in group.exceptions:
        assert isinstance(exc, FailedMutationEntryError)
        out.append(exc.entry)
    return out


@pytest.fixture
def sync_client(emulator: Emulator) -> Iterator[BigtableDataClient]:
    """A sync data client on the session's emulator."""
    with BigtableDataClient(project=PROJECT) as client:
        yield client


async def test_flush_returns_once_the_appended_rows_are_readable(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Below every flush limit, flush() writes what was appended; the batcher stays open."""
    keys = [b"user%04d" % i for i in range(300)]
    table = SaltedTableAsync.from_client(data_client, INSTANCE, make_table(), SCHEME)
    async with table.mutations_batcher(flush_interval=None) as batcher:
        for key in keys:
            await batcher.append(entry(key))
        await batcher.flush()
        rows = await table.read_rows(ReadRowsQuery())
        assert [r.row_key for r in rows] == keys
        await batcher.append(entry(b"zz"))
    assert await table.row_exists(b"zz")


async def test_flush_raises_every_failed_entry_by_its_logical_key_once(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """30 entries naming an unknown family: flush() raises all 30 (the client's batcher keeps
    20 for close()), each the caller's own object; close() does not raise them again."""
    table = SaltedTableAsync.from_client(data_client, INSTANCE, make_table(), SCHEME)
    bad = [entry(b"bad%02d" % i, family="nope") for i in range(30)]
    async with table.mutations_batcher(
        flush_interval=None, flush_limit_mutation_count=7
    ) as batcher:
        await batcher.append(entry(b"good"))
        for e in bad:
            await batcher.append(e)
        with pytest.raises(MutationsExceptionGroup) as info:
            await batcher.flush()
    got = failed_entries(info.value)
    assert sorted(e.row_key for e in got) == [e.row_key for e in bad]
    assert {id(e) for e in got} == {id(e) for e in bad}
    assert all(exc.index is None for exc in info.value.exceptions)  # type: ignore[attr-defined]
    assert await table.row_exists(b"good")


async def test_close_raises_every_failure_not_raised_by_a_flush(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    table = SaltedTableAsync.from_client(data_client, INSTANCE, make_table(), SCHEME)
    bad = [entry(b"bad%02d" % i, family="nope") for i in range(25)]
    batcher = table.mutations_batcher(flush_limit_mutation_count=10)
    for e in bad:
        await batcher.append(e)
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.close()
    assert sorted(e.row_key for e in failed_entries(info.value)) == [e.row_key for e in bad]


def test_the_sync_flush_writes_and_raises_failures_with_logical_keys(
    sync_client: BigtableDataClient, make_table: MakeTable
) -> None:
    table = SaltedTable.from_client(sync_client, INSTANCE, make_table(), SCHEME)
    bad = entry(b"bad", family="nope")
    with table.mutations_batcher(flush_interval=None) as batcher:
        batcher.append(entry(b"a"))
        batcher.append(bad)
        with pytest.raises(MutationsExceptionGroup) as info:
            batcher.flush()
        assert failed_entries(info.value) == [bad]
        assert table.row_exists(b"a")
        batcher.append(entry(b"b"))
    assert table.row_exists(b"b")


def test_the_batcher_example_runs(emulator: Emulator, make_table: MakeTable) -> None:
    """examples/batcher_flush.py, as docs/table.md shows it."""
    table_id = make_table()
    env = {
        **os.environ,
        EMULATOR_HOST_ENV: emulator.address,
        "SALTEDTABLE_PROJECT": PROJECT,
        "SALTEDTABLE_INSTANCE": INSTANCE,
        "SALTEDTABLE_TABLE": table_id,
    }
    done = subprocess.run(
        [sys.executable, "examples/batcher_flush.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "failed: b'user3#1700000000'",
        "checkpoint: 3 rows readable",
        "after close: True",
    ]
