"""A dual-layout window run by the guard and ``saltedtable window``, on the emulator.

A writer and a reader are opened on N=16 before the window is stored; the
commands open it (64 buckets, a lead of 2 s), backfill, verify and close it.
Across the start, the backfill and the close, every row written before, during
and after is read exactly once, deletes stay deleted, and the table ends with
every row under the 64 buckets' prefixes.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

from saltedtable import SCHEME_ROW_KEY, SaltedTable, SaltedTableAsync, SaltScheme, WindowError
from saltedtable._guard.record import record_of_row
from saltedtable._guard.window_state import window_of
from saltedtable.testing import INSTANCE, PROJECT
from tests.cli_helpers import assert_one_line_error, run
from tests.sync_view import AsyncView

WHERE = ("--project", PROJECT, "--instance", INSTANCE)
OLD, NEW = SaltScheme(16), SaltScheme(64)


def _set(value: bytes) -> SetCell:
    return SetCell("cf", b"q", value)


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_long_lived_objects_and_the_window_commands_across_start_backfill_and_close(
    make_table: Any,
    data_client: BigtableDataClientAsync,
    capsys: pytest.CaptureFixture[str],
    flavour: str,
) -> None:
    """Every row once, deletes kept, through `window open`, `backfill`, `verify`, `close`."""
    name = make_table(families=("cf", "saltedtable-window"))
    sync_client = BigtableDataClient(project=PROJECT)

    def opened() -> Any:
        if flavour == "async":
            return SaltedTableAsync(data_client.get_table(INSTANCE, name), OLD, record_refresh=0.3)
        return AsyncView(
            SaltedTable(sync_client.get_table(INSTANCE, name), OLD, record_refresh=0.3)
        )

    async def keys(table: Any) -> list[bytes]:
        return [row.row_key for row in await table.read_rows(ReadRowsQuery())]

    try:
        writer, reader = opened(), opened()
        before = [b"user%03d" % i for i in range(40)]
        await writer.bulk_mutate_rows([RowMutationEntry(k, _set(k)) for k in before])
        await writer.mutate_row(b"gone-early", _set(b"x"))
        assert await keys(reader) == sorted([*before, b"gone-early"])

        code, out, err = run(capsys, "window", "open", name, *WHERE, "-n", "64", "--lead", "2")
        assert code == 0, err
        assert "stored window 16 -> 64 buckets, open, starts" in out
        assert "record_refresh=None" in err  # the stale-writer warning (a lost write otherwise)
        assert "restart them" in err
        with sync_client.get_table(INSTANCE, name) as raw:
            record = record_of_row(raw.read_row(SCHEME_ROW_KEY))
        assert record is not None
        state = window_of(record)
        assert state is not None
        code, out, _ = run(capsys, "window", "status", name, *WHERE)
        assert (code, "open" in out) == (0, True)
        code, out, _ = run(capsys, "inspect", name, *WHERE)
        assert "window: 16 -> 64 buckets from" in out
        assert "custom key part" not in out
        code, _, err = run(capsys, "window", "backfill", name, *WHERE)
        assert code == 1
        assert_one_line_error(err, "starts at")

        await anyio.sleep(0.4)  # both objects read the window (their refresh)
        await writer.mutate_row(b"before-start", _set(b"b"))
        await anyio.sleep(max(0.0, state.start_micros / 1e6 + 0.4 - time.time()))
        during = [b"during%02d" % i for i in range(10)]
        await writer.bulk_mutate_rows([RowMutationEntry(k, _set(k)) for k in during])
        await writer.mutate_row(b"gone-early", DeleteAllFromRow())
        await writer.mutate_row(before[0], DeleteAllFromRow())
        with pytest.raises(WindowError, match="window"):
            await writer.check_and_mutate_row(before[1], None, true_case_mutations=_set(b"no"))
        want = sorted([*before[1:], b"before-start", *during])
        assert await keys(reader) == want
        code, out, err = run(capsys, "count", name, *WHERE)  # the read commands follow it too
        assert code == 0, err
        assert out.split()[0] == str(len(want))
        assert await reader.read_row(before[0]) is None

        code, _, err = run(capsys, "window", "close", name, *WHERE)
        assert code == 1
        assert_one_line_error(err, "not backfilled")
        code, out, err = run(capsys, "window", "backfill", name, *WHERE, "--step", "7")
        assert code == 0, err
        code, out, err = run(capsys, "window", "verify", name, *WHERE)
        assert code == 0, err
        assert "0 left to copy; the window is now backfilled" in out
        await anyio.sleep(0.4)
        await writer.mutate_row(b"after-verify", _set(b"v"))
        want = sorted([*want, b"after-verify"])
        assert await keys(reader) == want

        code, out, err = run(capsys, "window", "close", name, *WHERE)
        assert code == 0, err
        assert "no window; the record names 64 buckets" in out
        await writer.mutate_row(b"after-close", _set(b"c"))
        await writer.mutate_row(before[2], DeleteAllFromRow())
        want = sorted([*want, b"after-close"])
        want.remove(before[2])
        got = await keys(reader)
        assert got == want
        layout = writer.layout if flavour == "async" else writer.sync.layout
        assert layout.scheme == NEW
        with sync_client.get_table(INSTANCE, name) as raw:
            rows = [r for r in raw.read_rows(ReadRowsQuery()) if r.row_key != SCHEME_ROW_KEY]
        assert sorted(r.row_key for r in rows) == sorted(NEW.salt_key(k) for k in want)
        assert not any(c.family == "saltedtable-window" for r in rows for c in r.cells)
        fresh = SaltedTableAsync(data_client.get_table(INSTANCE, name), NEW)
        assert await keys(fresh) == want
    finally:
        sync_client.close()


async def test_objects_that_cannot_follow_the_window_are_refused(
    make_table: Any, data_client: BigtableDataClientAsync, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refresh longer than the stored lead, or None, and the new scheme before the close."""
    from saltedtable import LayoutError, SchemeMismatchError

    name = make_table(families=("cf", "saltedtable-window"))
    first = SaltedTableAsync(data_client.get_table(INSTANCE, name), OLD)
    await first.mutate_row(b"a", _set(b"a"))
    code, _, err = run(capsys, "window", "open", name, *WHERE, "-n", "64", "--lead", "2")
    assert code == 0, err
    for refresh in (5.0, None):
        table = SaltedTableAsync(data_client.get_table(INSTANCE, name), OLD, record_refresh=refresh)
        with pytest.raises(LayoutError, match="resalt window with a minimum lead of 2 s"):
            await table.read_row(b"a")
    early = SaltedTableAsync(data_client.get_table(INSTANCE, name), NEW, record_refresh=1.0)
    with pytest.raises(SchemeMismatchError):
        await early.read_row(b"a")
