"""The resalt window's Beam steps on the emulator: backfill, verify, retire.

The window comes from the layout record. Every read goes through a table
opened with the window, which must read the same logical rows before, during
and after every step (a crash and resume, a write and a delete racing the
copy), and the same rows through a plain table of the new bucket count once
the window is closed.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import FamilyNameRegexFilter

from saltedtable import SaltedTableAsync, SaltScheme, Window, WindowError
from saltedtable._cli.main import main as saltedtable_main
from saltedtable._exceptions import LayoutError
from saltedtable._guard.record import describe_layout
from saltedtable._guard.window_state import open_window, window_of
from saltedtable._scheme.window import WINDOW_FAMILY
from saltedtable.beam import (
    BigtableTarget,
    backfill_window,
    retire_window,
    verify_window,
)
from saltedtable.beam._record_steps import read_record, swap_record
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import snapshot
from tests.conftest import MakeTable

OLD, NEW = SaltScheme(16), SaltScheme(64)
WINDOW = Window(OLD, NEW)
KEYS = [b"user%03d" % i for i in range(40)]
WIDE = b"user-wide"  # 250 cells: three copy requests of at most 100


def _old_rows(key: bytes) -> list[Mutation]:
    if key == WIDE:
        return [SetCell("cf", b"c%03d" % i, b"v%d" % i, 1000) for i in range(250)]
    return [SetCell("cf", b"a", b"old-" + key, 1000), SetCell("cf", b"b", b"b", 2000)]


def _window_write(key: bytes, mutations: list[Mutation]) -> None:
    """One logical write in the window, as a window table sends it (new row, then old)."""
    now = time.time_ns() // 1000
    write = WINDOW.write(key, mutations, token=uuid.uuid4().bytes, now_micros=now)
    with target_of(_TABLE[0]).opened() as table:
        table.mutate_row(write.new_key, list(write.new_mutations))
        if write.old_key is not None:
            table.mutate_row(write.old_key, list(write.old_mutations))


#: The table a racing write goes to (set by the test that races).
_TABLE: list[str] = []


def target_of(table_id: str) -> BigtableTarget:
    """The test instance's table."""
    return BigtableTarget(PROJECT, INSTANCE, table_id)


async def _table_in_window(
    data_client: BigtableDataClientAsync, make_table: MakeTable, *, start_in: float = 0.0
) -> tuple[str, SaltedTableAsync]:
    """A 16-bucket table with rows, its record holding a window to 64 buckets, and a window table.

    ``start_in``: seconds from now to the window's start (its lead).
    """
    table_id = make_table(("cf", WINDOW_FAMILY))
    raw = data_client.get_table(INSTANCE, table_id)
    await raw.bulk_mutate_rows(
        [RowMutationEntry(OLD.salt_key(key), _old_rows(key)) for key in [*KEYS, WIDE]]
    )
    with target_of(table_id).opened() as table:
        swap_record(table, None, describe_layout(OLD), family="cf")
        stored = read_record(table)
        assert stored is not None
        now = time.time_ns() // 1000
        opened = open_window(
            stored.record,
            new_buckets=64,
            start_micros=now + int(start_in * 1e6),
            now_micros=now,
            min_lead_s=start_in,
        )
        swap_record(table, stored, opened)
    return table_id, SaltedTableAsync(raw, NEW, window=WINDOW, guard=False)


async def _logical(table: SaltedTableAsync) -> list[tuple[bytes, tuple[object, ...]]]:
    return snapshot(await table.read_rows(ReadRowsQuery()))  # type: ignore[return-value]


async def _old_keys(data_client: BigtableDataClientAsync, table_id: str) -> list[bytes]:
    """The physical keys of old rows still in the table (shared rows are new rows)."""
    raw = data_client.get_table(INSTANCE, table_id)
    rows = await raw.read_rows(ReadRowsQuery())
    out = []
    for row in rows:
        placed = WINDOW.place(row.row_key)
        if placed.key is not None and WINDOW.physical_keys(placed.key)[1] == row.row_key:
            out.append(row.row_key)
    return out


async def test_backfill_resumes_and_verify_is_clean_only_after_all_of_it(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Half the buckets, then all of them again (a crash and resume); verify, retire, close."""
    table_id, table = await _table_in_window(data_client, make_table)
    target = target_of(table_id)
    # In the window: a partial update, a delete, a new key.
    await table.mutate_row(KEYS[0], SetCell("cf", b"b", b"new", 3000))
    await table.mutate_row(KEYS[1], DeleteAllFromRow())
    await table.mutate_row(b"user-new", SetCell("cf", b"a", b"fresh", 5000))
    before = await _logical(table)
    assert before
    assert KEYS[1] not in {k for k, _ in before}

    first = verify_window(target, NEW, clock_margin=0)
    assert not first.ok
    left = {k: v for k, v in first.counters.items() if k.startswith("window_rows_left.")}
    # Every old row but shared ones and KEYS[1]'s (its delete reached the old row too).
    to_copy = [k for k in [*KEYS, WIDE] if not WINDOW.shares_row(k) and k != KEYS[1]]
    assert sum(left.values()) == len(to_copy)
    assert "run backfill-window again" in " ".join(first.notes)

    half = backfill_window(target, NEW, buckets=range(8), clock_margin=0)
    assert await _logical(table) == before  # a crash after half the buckets reads the same
    halfway = verify_window(target, NEW, clock_margin=0)
    assert not halfway.ok
    left_in = {k for k, v in halfway.counters.items() if k.startswith("window_rows_left.") and v}
    assert left_in
    assert left_in <= {f"window_rows_left.bucket_{b}" for b in range(8, 16)}
    again = backfill_window(target, NEW, clock_margin=0)  # resume: the whole step again
    assert again.counters.get("window_cells_copied", 0) > 0
    with target.opened() as raw:
        stored = read_record(raw)
    assert stored is not None
    assert (state := window_of(stored.record)) is not None
    assert state.state == "open"
    assert await _logical(table) == before
    once_more = backfill_window(target, NEW, clock_margin=0)  # idempotent: nothing left to copy
    assert once_more.counters.get("window_cells_copied", 0) == 0
    assert half.counters.get("window_cells_copied", 0) > 0

    clean = verify_window(target, NEW, clock_margin=0)
    assert clean.ok, clean.lines()
    with target.opened() as raw:
        stored = read_record(raw)
    assert stored is not None
    assert (state := window_of(stored.record)) is not None
    assert state.state == "backfilled"

    retired = retire_window(target, NEW, grace=0)
    assert retired.ok, retired.lines()
    assert await _old_keys(data_client, table_id) == []
    with target.opened() as raw:
        stored = read_record(raw)
        tombstones = list(
            raw.read_rows(ReadRowsQuery(row_filter=FamilyNameRegexFilter(WINDOW_FAMILY)))
        )
    assert stored is not None
    assert window_of(stored.record) is None
    assert stored.record.buckets == 64
    assert tombstones == []
    plain = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), NEW, guard=False)
    assert await _logical(plain) == before


async def test_the_steps_refuse_what_the_record_does_not_allow(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """No window; another scheme; before the start; retire before a clean verify."""
    plain_id = make_table(("cf",))
    with target_of(plain_id).opened() as raw:
        swap_record(raw, None, describe_layout(OLD), family="cf")
    with pytest.raises(LayoutError, match="holds no resalt window"):
        backfill_window(target_of(plain_id), OLD)
    with pytest.raises(LayoutError, match="no layout record"):
        verify_window(target_of(make_table(("cf",))), OLD)

    table_id, _ = await _table_in_window(data_client, make_table, start_in=3600)
    target = target_of(table_id)
    with pytest.raises(LayoutError, match="has 32"):
        backfill_window(target, SaltScheme(32))
    with pytest.raises(LayoutError, match="another scheme"):
        backfill_window(target, SaltScheme(64, hash="crc32c"))
    with pytest.raises(WindowError, match=r"starts at .* from now"):
        backfill_window(target, NEW, clock_margin=0)
    with pytest.raises(WindowError, match="starts at"):
        verify_window(target, NEW, clock_margin=0)
    with pytest.raises(WindowError, match="is open, not backfilled; run verify-window"):
        retire_window(target, NEW)
    # Started just now: writers whose clocks run behind may still delete in the old layout.
    started_id, _ = await _table_in_window(data_client, make_table)
    with pytest.raises(WindowError, match="clock margin of 60 s"):
        backfill_window(target_of(started_id), NEW)


def _racing(monkeypatch: pytest.MonkeyPatch, key: bytes, race: list[Mutation]) -> list[int]:
    """Make the backfill's first plan for ``key`` stale: ``race`` lands between read and copy."""
    real = Window.backfill
    raced: list[int] = []

    def backfill(self: Window, k: bytes | str, old: Row | None, new: Row | None, **kw: int):  # type: ignore[no-untyped-def]
        plan = real(self, k, old, new, **kw)
        if k == key and not raced and plan:
            raced.append(1)
            _window_write(key, race)
        return plan

    monkeypatch.setattr(Window, "backfill", backfill)
    return raced


@pytest.mark.parametrize("what", ["write", "delete"])
async def test_a_write_or_delete_racing_the_backfill_wins(
    data_client: BigtableDataClientAsync,
    make_table: MakeTable,
    monkeypatch: pytest.MonkeyPatch,
    what: str,
) -> None:
    """The copy's predicate sees the racing write or tombstone: nothing old comes back."""
    table_id, table = await _table_in_window(data_client, make_table)
    key = next(k for k in KEYS if not WINDOW.shares_row(k))
    _TABLE[:] = [table_id]
    race: list[Mutation] = (
        # The very cell the copy would write, with a new value: the racer's must stay.
        [SetCell("cf", b"a", b"racer", 1000)] if what == "write" else [DeleteAllFromRow()]
    )
    raced = _racing(monkeypatch, key, race)
    report = backfill_window(target_of(table_id), NEW, clock_margin=0)
    assert raced == [1]
    assert report.counters.get("window_replans", 0) >= 1
    got = await table.read_row(key)
    if what == "delete":
        assert got is None
    else:
        assert got is not None
        assert {(c.qualifier, c.value) for c in got.cells} == {(b"a", b"racer"), (b"b", b"b")}
    assert verify_window(target_of(table_id), NEW, clock_margin=0).ok
    assert snapshot([r for r in [await table.read_row(key)] if r]) == snapshot([got] if got else [])


async def test_the_window_steps_on_the_command_line(
    data_client: BigtableDataClientAsync,
    make_table: MakeTable,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``saltedtable migrate backfill-window | verify-window | retire-window``: exit codes
    and what they print."""
    table_id, table = await _table_in_window(data_client, make_table)
    before = await _logical(table)
    where = ["--bigtable-project", PROJECT, "--instance", INSTANCE, "--table", table_id]

    def run(step: str, *more: str) -> tuple[int, str, str]:
        margin = ["--clock-margin", "0"] if step != "retire-window" else []
        code = saltedtable_main(["migrate", step, *where, "-n", "64", *margin, *more])
        out, err = capsys.readouterr()
        return code, out, err

    code, _, err = run("backfill-window", "--only-buckets", "x")
    assert code == 2
    assert "--only-buckets takes comma-separated bucket numbers" in err
    code, _, err = run("retire-window")
    assert code == 1
    assert "open, not backfilled" in err
    code, out, _ = run("verify-window")
    assert code == 1
    assert "window_rows_left.bucket_" in out
    assert "run backfill-window again" in out
    code, out, _ = run("backfill-window", "--only-buckets", "0,1,2")
    assert code == 0
    assert "window_cells_copied" in out
    assert run("backfill-window")[0] == 0
    code, out, _ = run("verify-window")
    assert code == 0
    assert "the window is backfilled" in out
    code, out, _ = run("retire-window", "--grace", "0")
    assert code == 0, out
    assert "closed: the table has 64 buckets" in out
    code, _, err = run("retire-window", "--grace", "0")
    assert code == 1
    assert "holds no resalt window" in err
    plain = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), NEW, guard=False)
    assert await _logical(plain) == before


def test_python_m_saltedtable_beam_takes_the_window_steps() -> None:
    """The module entry point parses a window step (usage errors exit 2, --help 0)."""
    for argv, code in ((["verify-window", "--help"], 0), (["retire-window", "--table", "t"], 2)):
        done = subprocess.run(
            [sys.executable, "-m", "saltedtable.beam", *argv],
            cwd=Path(__file__).resolve().parents[2],  # this checkout's saltedtable
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == code, done.stderr
    assert "retire-window" in done.stderr
    assert "--bigtable-project" in done.stderr
