"""Appending a layout epoch to a live table (``append_epoch``, ``resalt``) on the emulator.

A plain salted table (N=4) whose keys are ``s<n>#<13-digit ms>`` gets an epoch of N=16
starting a few seconds ahead; the record becomes version 2 and stores the lead; rows
written before stay readable; a second operator appending at the same moment is refused
with nothing written; a too-soon start and rows the new epoch would hide are refused.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
)
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    LayoutError,
    RowKeyError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SaltSchemeError,
    SchemeMismatchError,
    append_epoch,
    epoch_field,
)
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import record_of_row
from saltedtable._scheme.cutoff import CutoffPolicy
from saltedtable._scheme.layout import Layout
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT
from tests.cli_helpers import assert_one_line_error, run
from tests.sync_view import AsyncView

MakeTable = Callable[..., str]
READER = epoch_field("ms", index=1, digits=13)
WHERE = ("--project", PROJECT, "--instance", INSTANCE)
REPO = Path(__file__).resolve().parents[2]


def k(sensor: int, ms: int) -> bytes:
    """``s<n>#<13-digit epoch millis>``."""
    return b"s%d#%013d" % (sensor, ms)


def now_ms() -> int:
    return int(time.time() * 1000)


def plain_table(make_table: MakeTable, keys: list[bytes], layout: Layout | None = None) -> str:
    """A fresh table written through a salted table of N=4 (its record stored)."""
    name = make_table()
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, name, layout or Layout(SaltScheme(4)))
        table.bulk_mutate_rows([RowMutationEntry(key, SetCell("cf", b"q", key)) for key in keys])
    return name


def stored(name: str) -> dict[str, object]:
    with BigtableDataClient(project=PROJECT) as client:
        record = record_of_row(client.get_table(INSTANCE, name).read_row(SCHEME_ROW_KEY))
    assert record is not None
    return record.as_dict()


def test_a_plain_table_gets_an_epoch_and_reads_every_row(make_table: MakeTable) -> None:
    """The record becomes version 2 with the lead; rows old and new are read through it."""
    t0 = now_ms()
    old = [k(s, t0 - 60_000 * m) for s in range(5) for m in range(3)]
    name = plain_table(make_table, old)
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        result = append_epoch(raw, SaltScheme(16), at, timestamp=READER, min_lead=1.5)
        assert result.stored
        assert result.rows_checked == len(old)
        record = record_of_row(raw.read_row(SCHEME_ROW_KEY))
        assert record is not None
        assert record.version == 2
        assert record.buckets == 16
        assert record.epochs is not None
        assert record.epochs.min_lead_s == 1.5
        assert [e.buckets for e in record.epochs.epochs] == [4, 16]
        layout = layout_of_record(record)
        table = SaltedTable(raw, layout, record_refresh=1.0)
        time.sleep(max(0.0, at.timestamp() + 0.1 - time.time()))  # past the start
        new = [k(s, now_ms()) for s in range(5)]
        for key in new:
            table.mutate_row(key, SetCell("cf", b"q", key))
        assert [r.row_key for r in table.read_rows(ReadRowsQuery())] == sorted(old + new)
        physical = {r.row_key for r in raw.read_rows(ReadRowsQuery())} - {SCHEME_ROW_KEY}
        assert {p for p in physical if p[:3] in {b"%02d-" % b for b in range(16)}} == {
            layout.locate(key)[1] for key in new
        }


def test_an_epoch_sooner_than_the_lead_is_refused_naming_the_minimum(
    make_table: MakeTable,
) -> None:
    """The stored lead counts; nothing is written."""
    name = plain_table(make_table, [k(1, now_ms() - 1000)])
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        before = stored(name)
        with pytest.raises(SaltSchemeError, match=r"minimum lead of 120 s .* start it at"):
            append_epoch(raw, SaltScheme(16), soon, timestamp=READER)
        assert stored(name) == before
        append_epoch(raw, SaltScheme(16), soon, timestamp=READER, min_lead=10)
        with pytest.raises(SaltSchemeError, match="minimum lead of 10 s"):
            append_epoch(raw, SaltScheme(32), dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))


def test_rows_the_new_epoch_would_hide_refuse_the_append(make_table: MakeTable) -> None:
    """A row written under the old layout with a key time past the start: refused, named."""
    t0 = now_ms()
    future = k(7, t0 + 3_600_000)  # a scheduled event, an hour ahead
    name = plain_table(make_table, [k(1, t0 - 1000), future])
    at = dt.datetime.fromtimestamp(t0 / 1000 + 60, dt.UTC)
    before = stored(name)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        with pytest.raises(LayoutError, match=r"1 row\(s\) .*s7#") as info:
            append_epoch(raw, SaltScheme(16), at, timestamp=READER, min_lead=1)
        assert "nothing was changed" in str(info.value)
        assert stored(name) == before
        # After the scheduled key: nothing is hidden.
        later = dt.datetime.fromtimestamp(t0 / 1000 + 7200, dt.UTC)
        assert append_epoch(raw, SaltScheme(16), later, timestamp=READER, min_lead=1).stored


def test_two_operators_appending_at_once_one_wins(make_table: MakeTable) -> None:
    """Both read the record before either swaps (a barrier); exactly one is stored."""
    name = plain_table(make_table, [k(1, now_ms() - 1000)])
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    barrier = threading.Barrier(2, timeout=30)
    outcomes: dict[int, object] = {}

    def operator(n: int) -> None:
        calls = 0

        def clock() -> dt.datetime:
            nonlocal calls
            calls += 1
            if calls == 2:  # read and checked; wait for the other before swapping
                barrier.wait()
            return dt.datetime.now(dt.UTC)

        with BigtableDataClient(project=PROJECT) as client:
            raw = client.get_table(INSTANCE, name)
            try:
                outcomes[n] = append_epoch(
                    raw, SaltScheme(n), at, timestamp=READER, min_lead=1, clock=clock
                )
            except LayoutError as exc:
                outcomes[n] = exc

    threads = [threading.Thread(target=operator, args=(n,)) for n in (16, 32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [o for o in outcomes.values() if isinstance(o, LayoutError)]
    assert len(errors) == 1
    assert "changed while this append ran" in str(errors[0])
    winner = next(n for n, o in outcomes.items() if not isinstance(o, LayoutError))
    record = stored(name)
    assert record["buckets"] == winner
    assert [e["buckets"] for e in record["epochs"]["list"]] == [4, winner]  # type: ignore[index]


def test_a_cutoff_table_becomes_three_epochs(make_table: MakeTable) -> None:
    """Unsalted, N=4 from the cutoff, N=16 from the new start: a version 2 record."""
    t0 = now_ms()
    cutoff = CutoffPolicy(dt.datetime.fromtimestamp(t0 / 1000 - 3600, dt.UTC), READER)
    name = plain_table(
        make_table, [k(1, t0 - 7_200_000), k(2, t0 - 1000)], Layout(SaltScheme(4), cutoff)
    )
    at = dt.datetime.fromtimestamp(t0 / 1000 + 60, dt.UTC)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        # Through a salted table: its physical table and its layout (which must agree).
        append_epoch(
            SaltedTable(raw, Layout(SaltScheme(4), cutoff)), SaltScheme(16), at, min_lead=1
        )
        record = record_of_row(raw.read_row(SCHEME_ROW_KEY))
        assert record is not None
        assert record.cutoff is None
        assert record.epochs is not None
        assert [e.buckets for e in record.epochs.epochs] == [None, 4, 16]
        rows = SaltedTable(raw, layout_of_record(record), record_refresh=0.5).read_rows(
            ReadRowsQuery()
        )
        assert [r.row_key for r in rows] == [k(1, t0 - 7_200_000), k(2, t0 - 1000)]


def test_the_resalt_command_dry_run_stores_nothing_then_appends(
    make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """`resalt --dry-run` prints the record; `resalt` stores it; too soon is one line, exit 1."""
    name = plain_table(make_table, [k(1, now_ms() - 1000)])
    before = stored(name)
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)).isoformat()
    args = ("resalt", name, *WHERE, "-n", "16", "--at", at, "--time", "epoch:ms:1:13")
    code, out, _ = run(capsys, *args, "--min-lead", "5", "--dry-run")
    assert code == 0
    assert "would store 2 epochs" in out
    assert '"buckets": 16' in out
    assert stored(name) == before
    code, out, _ = run(capsys, *args, "--min-lead", "5")
    assert code == 0
    assert "stored 2 epochs" in out
    assert json.loads(json.dumps(stored(name)))["epochs"]["min_lead_s"] == 5.0
    # The read commands open the table with a refresh within the stored lead.
    code, out, err = run(capsys, "count", name, *WHERE)
    assert (code, out.split()[0]) == (0, "1"), err
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    code, _, err = run(capsys, "resalt", name, *WHERE, "-n", "32", "--at", soon)
    assert code == 1
    assert_one_line_error(err, "minimum lead of 5 s")


# -- long-lived objects across an append -----------------------------------------------


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_long_lived_writer_and_reader_adopt_the_epoch_across_its_start(
    make_table: MakeTable, data_client: BigtableDataClientAsync, flavour: str
) -> None:
    """Opened on N=4 before the append: both adopt it within their refresh, the writer keeps
    its horizon, keys from the start go to N=16, and the reader sees every row."""
    t0 = now_ms()
    old = [k(s, t0 - 1000) for s in range(3)]
    name = plain_table(make_table, old)
    sync_client = BigtableDataClient(project=PROJECT)

    def opened(**kwargs: object) -> Any:
        if flavour == "async":
            return SaltedTableAsync(data_client.get_table(INSTANCE, name), SaltScheme(4), **kwargs)
        return AsyncView(
            SaltedTable(sync_client.get_table(INSTANCE, name), SaltScheme(4), **kwargs)
        )

    try:
        writer, reader = opened(record_refresh=0.3), opened(record_refresh=0.3)
        assert len(await reader.read_rows(ReadRowsQuery())) == 3  # both have read the record
        await writer.mutate_row(k(9, now_ms()), SetCell("cf", b"q", b"before"))
        start_ms = now_ms() + 3_000
        at = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC)
        append_epoch(
            sync_client.get_table(INSTANCE, name), SaltScheme(16), at, timestamp=READER,
            min_lead=2,
        )  # fmt: skip
        await anyio.sleep(0.4)  # past the writer's refresh: its next write reads the record first
        await writer.mutate_row(k(8, now_ms()), SetCell("cf", b"q", b"adopted"))
        layout = writer.layout if flavour == "async" else writer.sync.layout
        assert layout.epochs is not None
        assert [e.scheme.buckets for e in layout.epochs] == [4, 16]  # type: ignore[union-attr]
        with pytest.raises(RowKeyError, match="horizon"):
            await writer.mutate_row(k(7, now_ms() + 60_000), SetCell("cf", b"q", b"later"))
        await anyio.sleep(max(0.0, (start_ms + 200) / 1000 - time.time()))  # it has started
        new = [k(s, now_ms()) for s in range(3)]
        for key in new:
            await writer.mutate_row(key, SetCell("cf", b"q", b"new"))
        async with data_client.get_table(INSTANCE, name) as raw:
            physical = {r.row_key async for r in await raw.read_rows_stream(ReadRowsQuery())}
        for key in new:
            assert SaltScheme(16).salt_key(key) in physical
        got = [r.row_key for r in await reader.read_rows(ReadRowsQuery())]
        assert len(got) == 8  # 3 old, one before the append, one after it, 3 new
        assert got == sorted(got)
        assert {*old, *new} <= set(got)
    finally:
        sync_client.close()


async def test_an_object_whose_refresh_is_longer_than_the_lead_is_refused(
    make_table: MakeTable, data_client: BigtableDataClientAsync
) -> None:
    """A stored lead of 2 s: record_refresh=5, or None, is refused naming the lead."""
    name = plain_table(make_table, [k(1, now_ms() - 1000)])
    with BigtableDataClient(project=PROJECT) as client:
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
        append_epoch(client.get_table(INSTANCE, name), SaltScheme(16), at, timestamp=READER,
                     min_lead=2)  # fmt: skip
    for refresh in (5.0, None):
        table = SaltedTableAsync(
            data_client.get_table(INSTANCE, name), SaltScheme(4), record_refresh=refresh
        )
        with pytest.raises(LayoutError, match="minimum lead of 2 s"):
            await table.read_row(k(1, 0))
    # A layout that is not the stored history is refused as before.
    other = SaltedTableAsync(
        data_client.get_table(INSTANCE, name), SaltScheme(8), record_refresh=1.0
    )
    with pytest.raises(SchemeMismatchError):
        await other.read_row(k(1, 0))


def test_the_resalt_example_runs_on_the_emulator() -> None:
    """examples/resalt_live.py runs under ``saltedtable emulator`` as docs/resalt.md says."""
    env = {k: v for k, v in os.environ.items() if k != EMULATOR_HOST_ENV}
    script = shutil.which("saltedtable", path=str(Path(sys.executable).parent))
    assert script is not None, "the saltedtable console script is not installed (make install)"
    harness = [script, "emulator", "--table", "live_events:cf,saltedtable"]
    command = [*harness, "--", sys.executable, "examples/resalt_live.py"]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "2. appended epoch 1: N=16 from" in out
    assert "3. the writer adopted 2 epochs" in out
    assert "from the start: b'sensor2#" in out
    assert "-> epoch 1 (N=16) b'" in out
    assert "4. refused a key an hour ahead: past the writer's horizon" in out
    assert "5. the reader read back 7 of 7 rows, in key order:" in out


def test_advise_on_a_table_with_epochs_reports_them_and_the_resalt_command(
    make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every epoch's rows are logical keys; the newest N differs: the exact command is printed."""
    t0 = now_ms()
    name = plain_table(make_table, [k(s, t0 - 1000 * m) for s in range(20) for m in range(5)])
    with BigtableDataClient(project=PROJECT) as client:
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
        append_epoch(client.get_table(INSTANCE, name), SaltScheme(16), at, timestamp=READER,
                     min_lead=2)  # fmt: skip
    args = ("advise", "--table", name, *WHERE, "--candidates", "32", "--target", "1000")
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    report = json.loads(out)
    recommended = report["recommended"]
    assert recommended in (1, 32)  # (N=1 is always simulated): either differs from 16
    command = (
        f"saltedtable resalt {name} --instance {INSTANCE} --project {PROJECT} "
        f"-n {recommended} --at "
    )
    assert report["resalt"]["newest_buckets"] == 16
    assert report["resalt"]["command"].startswith(command)
    assert report["input"]["left_out"]["outside_layout"] == 0  # every epoch's rows are data
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "epochs (minimum lead 2 s):" in out
    assert "  epoch 0 from -inf: N = 4" in out
    assert "  epoch 1 from " in out
    assert ": N = 16" in out
    assert command in out


def test_inspect_shows_every_epoch_with_its_own_buckets(
    make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """Epochs N=4 then N=16: each listed with its start and buckets keyed by its own prefix."""
    t0 = now_ms()
    name = plain_table(make_table, [k(s, t0 - 1000) for s in range(8)])
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
        append_epoch(raw, SaltScheme(16), at, timestamp=READER, min_lead=2)
        record = record_of_row(raw.read_row(SCHEME_ROW_KEY))
        assert record is not None
        table = SaltedTable(raw, layout_of_record(record), record_refresh=1)
        time.sleep(max(0.0, at.timestamp() - time.time() + 0.1))
        for s in range(8):
            table.mutate_row(k(s, now_ms()), SetCell("cf", b"q", b"new"))
    code, out, err = run(capsys, "inspect", name, *WHERE, "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["stray_keys"] == []
    epochs = report["epochs"]
    assert [(e["epoch"], len(e["buckets"])) for e in epochs] == [(0, 4), (1, 16)]
    assert epochs[0]["start"] == "-inf"
    assert epochs[1]["start"] == at.isoformat()
    assert epochs[1]["shared"] == []  # "3-" and "03-" are different prefixes
    code, out, _ = run(capsys, "inspect", name, *WHERE)
    assert code == 0
    assert "epochs: 2" in out
    assert f"  epoch 1 from {at.isoformat()}: SaltScheme(buckets=16" in out


def test_a_legacy_key_that_starts_with_a_new_prefix_refuses_the_append(
    make_table: MakeTable,
) -> None:
    """Cutoff table (N=4: ``0-``..``3-``), an unsalted ``05-...`` key: N=16 would claim it."""
    t0 = now_ms()
    cutoff = CutoffPolicy(dt.datetime.fromtimestamp(t0 / 1000 - 3600, dt.UTC), READER)
    name = plain_table(make_table, [k(2, t0 - 1000)], Layout(SaltScheme(4), cutoff))
    legacy = b"05-" + k(1, t0 - 7_200_000)
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        raw.mutate_row(legacy, SetCell("cf", b"q", b"old"))
        at = dt.datetime.fromtimestamp(t0 / 1000 + 60, dt.UTC)
        before = stored(name)
        with pytest.raises(LayoutError, match=r"1 row\(s\) .*starts with one of its prefixes"):
            append_epoch(raw, SaltScheme(16), at, min_lead=1)
        assert stored(name) == before
        # N=128 writes 3-digit prefixes ("005-"): the legacy key does not meet them.
        assert append_epoch(raw, SaltScheme(128), at, min_lead=1).stored


# -- repairing rows a stale writer put where no epoch looks --------------------------------


@pytest.mark.parametrize("refresh", [30.0, None])
def test_a_stale_writers_late_key_is_found_and_moved_by_resalt_repair(
    make_table: MakeTable, capsys: pytest.CaptureFixture[str], refresh: float | None
) -> None:
    """An object opened before the first append (no lead stored yet; refresh 30 s, or None)
    writes a scheduled key past the new start with N=4 after the append's row check: readers
    of the new record miss it; `resalt --repair --dry-run` lists it (exit 1), `--repair`
    moves it with its timestamp, and readers then find it."""
    name = plain_table(make_table, [k(1, now_ms() - 1000)])
    with BigtableDataClient(project=PROJECT) as client:
        writer = SaltedTable(
            client.get_table(INSTANCE, name), SaltScheme(4), record_refresh=refresh
        )
        writer.read_row(b"x")  # has read the record: no epochs, no horizon
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
        append_epoch(
            client.get_table(INSTANCE, name), SaltScheme(16), at, timestamp=READER, min_lead=2
        )
        event = k(2, now_ms() + 3_600_000)  # an hour ahead: past the new start
        writer.mutate_row(event, SetCell("cf", b"q", b"sched", 7_000))  # accepted: stale
        reader = SaltedTable(client.get_table(INSTANCE, name), SaltScheme(4), record_refresh=1)
        assert reader.read_row(event) is None
        code, out, _ = run(capsys, "resalt", name, *WHERE, "--repair", "--dry-run")
        assert code == 1
        assert "1 hidden row(s)" in out
        assert reader.read_row(event) is None  # a dry run moves nothing
        code, out, _ = run(capsys, "resalt", name, *WHERE, "--repair")
        assert code == 0, out
        assert "moved 1, kept 0" in out
        row = reader.read_row(event)
        assert row is not None
        assert [(c.value, c.timestamp_micros) for c in row.cells] == [(b"sched", 7_000)]
        raw = {r.row_key for r in client.get_table(INSTANCE, name).read_rows(ReadRowsQuery())}
        assert SaltScheme(4).salt_key(event) not in raw
        code, out, _ = run(capsys, "resalt", name, *WHERE, "--repair", "--dry-run")
        assert code == 0
        assert "0 hidden row(s)" in out
