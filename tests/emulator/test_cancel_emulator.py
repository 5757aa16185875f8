"""end_stream and stop_reads on real client streams, and the memory soak of issue 18.

The functional tests pin what end_stream relies on in the installed client library (the
gRPC call is found under ``read_rows_stream``) and what it must guarantee (the RPC has
ended when it returns, quickly, with no warning from the client's metrics).

The soaks run ``examples/tools/leak_probe.py`` modes in a child process each (its RSS after
``malloc_trim``, not this process's), against the session's emulator:

* ``stream-end`` must stay flat: end_stream leaks nothing per stream;
* ``stream-task-cancel`` is a canary: it still leaks while grpc/grpc#43360 is open. When
  it stops leaking (it then xfails, every run), grpcio has released the fix: pin that
  version and simplify;
* ``salted`` (the fan-out, which ends its requests' RPCs before it cancels their readers)
  must stay flat; ``salted-task-cancel`` (the fan-out with that step patched out) shows
  that the soak does see the leak it guards against (it xfails when it sees less).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import ReadBudget, SaltedTableAsync, SaltScheme
from saltedtable._read.cancel_asyncio import end_stream, find_calls, stop_reads
from saltedtable.testing import INSTANCE, Emulator, create_table, delete_table
from tests.scripts import load_script

MakeTable = Any

PROBE_PATH = Path(__file__).resolve().parents[2] / "examples" / "tools" / "leak_probe.py"
#: Rows of the soak tables: enough that every bucket's stream of a 16-bucket scan is
#: still receiving (past the HTTP/2 window) when it is stopped after two rows.
SOAK_ROWS = 20_000
#: Seconds that separate "ended now" from "left to run to its deadline" (20 s): a
#: liveness bound with a wide margin (it takes well under a millisecond), not a benchmark.
QUICK = 2.0
#: RSS growth allowed over a soak (flat modes stay within about 2 MB); the leaking modes
#: grow more than that: cancelled client reads ~15-20 MB, salted fan-outs ~50 MB.
FLAT = 8 * 2**20


def _load_probe() -> ModuleType:
    return load_script("saltedtable_leak_probe", PROBE_PATH)


probe = _load_probe()


async def _fill(data_client: BigtableDataClientAsync, table_id: str, rows: int) -> None:
    table = data_client.get_table(INSTANCE, table_id)
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"r%06d" % i, SetCell("cf", b"q", b"v" * 100)) for i in range(rows)]
    )
    await table.close()


# -- streams left with a bare break ---------------------------------------------------


@pytest.mark.parametrize("limit", [None, 2000, 40])
async def test_a_stream_left_with_a_bare_break_leaves_no_task_once_unreferenced(
    data_client: BigtableDataClientAsync, make_table: MakeTable, limit: int | None
) -> None:
    """break without aclose(), then the last reference dropped: the read's tasks end at once.

    Issue 26 (R6): a limited stream left that way keeps its producers (one per bucket and
    a supervisor) waiting for the next round while the caller still holds it; they hold no
    RPC and no slot, and they end as soon as the stream is unreferenced (asyncio closes an
    async generator nobody refers to), with no garbage collection needed.
    """
    table_id = make_table()
    salted = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), SaltScheme(16))
    await salted.bulk_mutate_rows(
        [RowMutationEntry(b"r%05d" % i, SetCell("cf", b"q", b"v" * 100)) for i in range(6000)]
    )
    before = asyncio.all_tasks()

    async def leave() -> int:
        stream = await salted.read_rows_stream(ReadRowsQuery(limit=limit))
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 20:
                break
        return len(asyncio.all_tasks() - before)

    gc.disable()  # the claim: no garbage collection needed
    try:
        was_running = await leave()  # the stream is unreferenced when leave() returns
        deadline = time.monotonic() + 10  # generous: it takes a few loop turns
        me = {asyncio.current_task()}
        while asyncio.all_tasks() - before - me and time.monotonic() < deadline:  # noqa: ASYNC110 - tasks ending signal nothing
            await asyncio.sleep(0.01)
        left = asyncio.all_tasks() - before - me
    finally:
        gc.enable()
    assert was_running >= 17, was_running  # a supervisor and a producer per bucket
    assert not left, f"{len(left)} tasks of the read outlived it: {left}"


async def quiet(salted: SaltedTableAsync) -> None:
    """Wait until no request of ``salted`` runs or waits for a slot, ten checks in a row."""
    calm = 0
    with anyio.fail_after(30):
        while calm < 10:
            await asyncio.sleep(0.01)
            busy = salted.limiter.borrowed_tokens or salted.limiter.waiting
            calm = 0 if busy else calm + 1


@pytest.mark.parametrize(("limit", "ordered"), [(40, True), (40, False), (None, True)])
async def test_a_stream_left_idle_with_a_bare_break_leaves_no_task_a_loop_turn_later(
    data_client: BigtableDataClientAsync, make_table: MakeTable, limit: int | None, ordered: bool
) -> None:
    """Issue 36: ``async for row in await table.read_rows_stream(...): break`` while the
    read waits idle (its round's requests, or its budget's, have ended): one event-loop
    turn later no task of the read is left, with no garbage collection. Before, its
    producers and supervisor waited until asyncio's finaliser closed the stream, turns
    later (the stream above was left while requests ran: those end between rows first)."""
    table_id = make_table()
    salted = SaltedTableAsync(
        data_client.get_table(INSTANCE, table_id),
        SaltScheme(16),
        budget=ReadBudget(rows=640, one_request_rows=0),  # (the fan-out at once)
    )
    await salted.bulk_mutate_rows(
        [RowMutationEntry(b"r%05d" % i, SetCell("cf", b"q", b"v" * 100)) for i in range(6000)]
    )
    before = asyncio.all_tasks()
    idle: set[asyncio.Task[Any]] = set()
    gc.disable()  # the claim: no garbage collection needed
    try:
        async for _ in await salted.read_rows_stream(ReadRowsQuery(limit=limit), ordered=ordered):
            await quiet(salted)
            idle = asyncio.all_tasks() - before
            break
        await asyncio.sleep(0)
        left = asyncio.all_tasks() - before
    finally:
        gc.enable()
    assert len(idle) >= 17, idle  # a supervisor and a producer per bucket
    assert not left, f"{len(left)} tasks of the read are left: {left}"
    assert salted.limiter.borrowed_tokens == 0


# -- end_stream and stop_reads on client streams ---------------------------------------


async def test_end_stream_cancels_the_rpc_of_a_client_stream(
    data_client: BigtableDataClientAsync, make_table: MakeTable, caplog: pytest.LogCaptureFixture
) -> None:
    """Mid-scan: the call under read_rows_stream is found, cancelled and the stream closed, fast."""
    table_id = make_table()
    await _fill(data_client, table_id, 3000)
    table = data_client.get_table(INSTANCE, table_id)
    for _ in range(3):
        stream = await table.read_rows_stream(ReadRowsQuery())
        await anext(stream)
        await anext(stream)
        calls = find_calls(stream)
        assert len(calls) >= 1, "the client library no longer keeps its call where we look"
        assert not any(call.done() for call in calls)
        started = time.monotonic()
        await end_stream(stream)
        assert time.monotonic() - started < QUICK
        assert all(call.cancelled() for call in calls)
        assert stream.ag_frame is None
    await asyncio.sleep(0.1)  # anything the client would log late
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_end_stream_of_a_stream_that_ended_or_never_started(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """A stream read to its end, or never iterated, is closed without an error."""
    table_id = make_table()
    await _fill(data_client, table_id, 5)
    table = data_client.get_table(INSTANCE, table_id)
    whole = await table.read_rows_stream(ReadRowsQuery())
    assert len([row async for row in whole]) == 5
    await end_stream(whole)
    fresh = await table.read_rows_stream(ReadRowsQuery())
    await end_stream(fresh)
    assert fresh.ag_frame is None


async def test_stop_reads_ends_a_read_that_another_task_waits_in(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """stop_reads cancels the call; the reading task leaves its pending read by itself, fast."""
    table_id = make_table()
    await _fill(data_client, table_id, 3000)
    table = data_client.get_table(INSTANCE, table_id)
    stream = await table.read_rows_stream(ReadRowsQuery())
    reading = asyncio.Event()

    async def drain() -> None:
        rows = 0
        async for _ in stream:
            rows += 1
            if rows == 2:
                reading.set()  # it goes on reading: most of the time it waits in the stream

    reader = asyncio.ensure_future(drain())
    await reading.wait()
    calls = find_calls(stream)
    started = time.monotonic()
    await stop_reads([stream])
    assert not stream.ag_running
    await asyncio.wait([reader], timeout=1)
    assert reader.done()
    assert time.monotonic() - started < QUICK
    assert all(call.cancelled() for call in calls)
    assert reader.cancelled() or reader.exception() is None  # grpc's CancelledError, or the end
    await end_stream(stream)


# -- the soak ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def soak_tables(emulator: Emulator) -> Iterator[tuple[str, str]]:
    """A plain and a 16-bucket salted table of SOAK_ROWS rows, shared by the soaks."""
    suffix = uuid.uuid4().hex[:8]
    names = (f"soak-{suffix}", f"soak-salted-{suffix}")
    for name in names:
        create_table(emulator.address, name, ["cf"])
    try:
        probe.load_tables(*names, SOAK_ROWS)
        yield names
    finally:
        for name in names:
            delete_table(emulator.address, name, missing_ok=True)


def _growth(tables: tuple[str, str], mode: str, scans: int, warmup: int) -> int:
    """RSS growth (bytes) of a fresh process over ``scans`` scans stopped the ``mode`` way."""
    command = [
        sys.executable,
        str(PROBE_PATH),
        "--child",
        mode,
        "--tables",
        ",".join(tables),
        "--counts",
        f"0,{scans}",
        "--warmup",
        str(warmup),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    first, last = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    return int(last["rss"] - first["rss"])


def _expect_leak(growth: int, bound: int, what: str, meaning: str) -> None:
    """Pass when ``growth`` shows grpc/grpc#43360's leak (more than ``bound``), else xfail.

    The leak is upstream's and its size varies with the grpcio release and the machine's
    load (fewer receives are pending when a scan is stopped on a busy machine), so a
    smaller one is reported, never a failure.
    """
    if growth <= bound:
        pytest.xfail(
            f"{what} grew RSS by only {growth / 2**20:.1f} MB (the leak: more than "
            f"{bound / 2**20:.0f} MB): {meaning}"
        )


def test_soak_streams_ended_by_end_stream_stay_flat(soak_tables: tuple[str, str]) -> None:
    """500 client streams ended mid-receive by end_stream: RSS within FLAT (a leak: ~20 MB)."""
    growth = _growth(soak_tables, "stream-end", 500, 100)
    assert growth < FLAT, f"RSS grew {growth / 2**20:.1f} MB over 500 ended streams"


def test_soak_canary_grpcio_still_leaks_a_cancelled_receive(soak_tables: tuple[str, str]) -> None:
    """Cancelling a pending read still leaks (grpc/grpc#43360); xfails once it leaks less.

    A canary: a smaller leak (a fixed grpcio, or a loaded machine that gets fewer reads
    cancelled mid-receive) is news to look into, not a failure of saltedtable.
    """
    growth = _growth(soak_tables, "stream-task-cancel", 500, 100)
    _expect_leak(
        growth,
        FLAT,
        "500 reads cancelled while receiving",
        "if it stays so, this grpcio no longer leaks them: require it, and end_stream "
        "can fall back to plain cancellation",
    )


def test_soak_salted_scans_left_early_stay_flat(soak_tables: tuple[str, str]) -> None:
    """60 16-bucket scans left after two rows: RSS within FLAT."""
    growth = _growth(soak_tables, "salted", 60, 20)
    assert growth < FLAT, f"RSS grew {growth / 2**20:.1f} MB over 60 salted scans left early"


def test_soak_fanout_that_cancels_its_readers_leaks(soak_tables: tuple[str, str]) -> None:
    """The same scans with the merge's stop_requests patched out grow RSS past 2 x FLAT.

    It shows that the soak sees the leak the flat soak above guards against; when it sees
    less (xfail, not a failure: the leak is upstream's), that soak proves less. 120 scans:
    a scan left after two rows has fewer requests mid-receive since its first pages are
    small (64 rows a bucket), and 60 grew RSS by about 10 MB.
    """
    growth = _growth(soak_tables, "salted-task-cancel", 120, 20)
    _expect_leak(
        growth,
        2 * FLAT,
        "120 fan-outs that cancel readers mid-receive",
        "grpc/grpc#43360 may be fixed in this grpcio (see the canary above)",
    )
