"""A bounded soak: hundreds of concurrent fan-out scans and point reads from one process.

Loopback only (the session's emulator), bounded by a round count and a time budget. What
must hold throughout: every scan returns exactly its rows, the table's bound on sub-scans
in flight holds, memory stays flat from round to round, and no task is left behind. The
numbers (throughput, peak concurrency, RSS per round) are printed; run with ``-s``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    Row,
    RowMutationEntry,
    RowRange,
    SetCell,
    TableAsync,
)

from saltedtable import SaltedTableAsync, SaltScheme, TableLikeAsync
from saltedtable.testing import INSTANCE

SCHEME = SaltScheme(16)
ROWS = 1000
CONCURRENT_SCANS = 200
POINT_READS = 200
MAX_SUBSCANS = 32
# Longer soaks by hand: SALTEDTABLE_SOAK_ROUNDS=50 SALTEDTABLE_SOAK_SECONDS=900 pytest ... -s
ROUNDS = int(os.environ.get("SALTEDTABLE_SOAK_ROUNDS", "4"))
BUDGET = float(os.environ.get("SALTEDTABLE_SOAK_SECONDS", "35"))  # no round starts after this
MIN_ROUNDS = 3
#: A round (a few seconds, tens on a loaded machine) that has not ended after this hangs.
ROUND_HANG_SECONDS = 90
RSS_GROWTH_LIMIT = 8 * 1024 * 1024  # bytes, round 1 -> last round
OBJECT_GROWTH_LIMIT = 2000  # live Python objects, round 1 -> last round
PAGE = os.sysconf("SC_PAGE_SIZE")


def key_of(i: int) -> bytes:
    """The i-th logical key (keys sort like their numbers)."""
    return b"soak-%05d" % i


def value_of(key: bytes) -> bytes:
    """A ~100 byte value derived from the key."""
    return key * 10


def rss() -> int:
    """Resident set size of this process in bytes, from /proc/self/statm (after a gc)."""
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def live_objects() -> int:
    """Objects the garbage collector tracks (a leak of rows or tasks shows up here first)."""
    gc.collect()
    return len(gc.get_objects())


class CountingStream:
    """Delegates to a row stream; tells its table once when it ends, however it ends."""

    def __init__(self, owner: CountingTable, inner: AsyncIterator[Row]) -> None:
        self._owner = owner
        self._inner = inner
        self._open = True

    def __aiter__(self) -> CountingStream:
        return self

    async def __anext__(self) -> Row:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._end()
            raise

    async def aclose(self) -> None:
        self._end()
        await self._inner.aclose()  # type: ignore[attr-defined]

    def _end(self) -> None:
        if self._open:
            self._open = False
            self._owner.open_streams -= 1


class CountingTable(TableLikeAsync):
    """A TableLikeAsync over a real TableAsync that tracks concurrently open row streams.

    A stream counts as open from the moment ``read_rows_stream`` is called until it is
    exhausted, fails or is closed.
    """

    def __init__(self, table: TableAsync) -> None:
        self._table = table
        self.open_streams = 0
        self.peak_streams = 0
        self.streams = 0
        self.point_reads = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("default_"):  # the table's default timeouts
            return getattr(self._table, name)
        raise AttributeError(name)

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> CountingStream:
        self.open_streams += 1
        self.streams += 1
        self.peak_streams = max(self.peak_streams, self.open_streams)
        try:
            inner = await self._table.read_rows_stream(query, **kwargs)
        except BaseException:
            self.open_streams -= 1
            raise
        return CountingStream(self, inner)

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        self.point_reads += 1
        return await self._table.read_row(row_key, **kwargs)  # type: ignore[no-any-return]

    async def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        return await self._table.row_exists(row_key, **kwargs)  # type: ignore[no-any-return]

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        return await self._table.sample_row_keys(**kwargs)  # type: ignore[no-any-return]

    def mutations_batcher(self, **kwargs: Any) -> Any:
        return self._table.mutations_batcher(**kwargs)

    async def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> None:
        await self._table.mutate_row(row_key, mutations, **kwargs)

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        await self._table.bulk_mutate_rows(mutation_entries, **kwargs)

    async def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        return await self._table.check_and_mutate_row(  # type: ignore[no-any-return]
            row_key, predicate, **kwargs
        )

    async def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        return await self._table.read_modify_write_row(  # type: ignore[no-any-return]
            row_key, rules, **kwargs
        )

    async def close(self) -> None:
        await self._table.close()


def plan_round(rng: random.Random) -> list[tuple[int, int]]:
    """The scans of one round as key index ranges [lo, hi): one in ten reads everything,
    the others from a 40th to a fifth of the table."""
    scans = []
    for i in range(CONCURRENT_SCANS):
        if i % 10 == 0:
            scans.append((0, ROWS))
        else:
            lo = rng.randrange(0, ROWS - ROWS // 40)
            scans.append((lo, min(ROWS, lo + rng.randrange(ROWS // 40, ROWS // 5))))
    return scans


# Warm-up plus up to ROUNDS rounds; a hang is caught per round (ROUND_HANG_SECONDS), so the
# whole test gets room for a slow, shared machine.
@pytest.mark.timeout(BUDGET + 4 * ROUND_HANG_SECONDS)
async def test_soak_concurrent_scans_and_point_reads(
    data_client: BigtableDataClientAsync, make_table: Any
) -> None:
    """200 concurrent 16-bucket scans plus point reads per round: exact, bounded, flat memory."""
    table_id = make_table()
    keys = [key_of(i) for i in range(ROWS)]
    inner = data_client.get_table(INSTANCE, table_id)
    counting = CountingTable(inner)
    salted = SaltedTableAsync(counting, SCHEME, max_concurrent_subscans=MAX_SUBSCANS)
    await salted.bulk_mutate_rows(
        [RowMutationEntry(k, [SetCell("cf", b"q", value_of(k), 1000)]) for k in keys]
    )
    rng = random.Random(20240531)
    bad: list[str] = []
    rows_read = 0

    async def scan(lo: int, hi: int) -> None:
        nonlocal rows_read
        query = (
            ReadRowsQuery()
            if (lo, hi) == (0, ROWS)
            else ReadRowsQuery(row_ranges=RowRange(keys[lo], keys[hi] if hi < ROWS else None))
        )
        stream = await salted.read_rows_stream(query)
        async with aclosing(stream):  # type: ignore[type-var]
            got = [row async for row in stream]
        rows_read += len(got)
        if [r.row_key for r in got] != keys[lo:hi]:
            bad.append(f"scan [{lo}, {hi}): {len(got)} rows")
        elif any(r.cells[0].value != value_of(r.row_key) for r in got):
            bad.append(f"scan [{lo}, {hi}): wrong values")

    async def point(i: int) -> None:
        row = await salted.read_row(keys[i])
        if row is None or row.row_key != keys[i] or row.cells[0].value != value_of(keys[i]):
            bad.append(f"point read {keys[i]!r}: {row}")

    async def run_round() -> float:
        round_start = time.monotonic()
        with anyio.fail_after(ROUND_HANG_SECONDS):  # a hang fails here, naming the round
            await all_of_a_round()
        assert not bad, bad[:5]
        return time.monotonic() - round_start

    async def all_of_a_round() -> None:
        async with anyio.create_task_group() as tg:
            for lo, hi in plan_round(rng):
                tg.start_soon(scan, lo, hi)
            for _ in range(POINT_READS):
                tg.start_soon(point, rng.randrange(ROWS))

    rss_rounds: list[int] = []
    objects: list[int] = []
    round_times: list[float] = []
    # A full round first (connection, code paths, allocator arenas at peak
    # concurrency), so the rounds measured start from a settled process.
    warm_up = await run_round()
    rows_read = 0
    before_tasks = asyncio.all_tasks()
    start = time.monotonic()
    for r in range(ROUNDS):
        if r >= MIN_ROUNDS and time.monotonic() - start > BUDGET:
            break
        round_times.append(await run_round())
        rss_rounds.append(rss())
        objects.append(live_objects())
    elapsed = time.monotonic() - start
    with anyio.move_on_after(2):  # gRPC keeps a task per call until its status arrives
        while asyncio.all_tasks() != before_tasks:  # noqa: ASYNC110 - nothing to wait on
            await asyncio.sleep(0.02)
    leaked = asyncio.all_tasks() - before_tasks
    await salted.close()

    rounds = len(round_times)
    scans = rounds * CONCURRENT_SCANS
    mib = [f"{b / 2**20:.1f}" for b in rss_rounds]
    print(
        f"\nsoak: {rounds} rounds x ({CONCURRENT_SCANS} concurrent scans x {SCHEME.buckets}"
        f" buckets + {POINT_READS} point reads) over {ROWS} rows in {elapsed:.1f}s"
        f"\n  throughput: {scans / elapsed:.0f} scans/s, {rows_read / elapsed:.0f} rows/s,"
        f" {rounds * POINT_READS / elapsed:.0f} point reads/s;"
        f" round times {', '.join(f'{t:.1f}' for t in round_times)} s (warm-up {warm_up:.1f} s)"
        f"\n  sub-scan streams: {counting.streams} opened, peak {counting.peak_streams} open"
        f" (bound {MAX_SUBSCANS})"
        f"\n  RSS per round (MiB): {', '.join(mib)};"
        f" growth round 1 -> {rounds}: {(rss_rounds[-1] - rss_rounds[0]) / 2**20:+.1f} MiB"
        f"\n  live objects per round: {', '.join(map(str, objects))}"
    )
    assert not bad, bad[:5]
    assert counting.peak_streams <= MAX_SUBSCANS
    assert counting.peak_streams == MAX_SUBSCANS  # the bound was reached, so it was tested
    assert counting.open_streams == 0
    assert not leaked, leaked
    assert rounds >= MIN_ROUNDS
    assert rss_rounds[-1] - rss_rounds[0] <= RSS_GROWTH_LIMIT, mib
    assert objects[-1] - objects[0] <= OBJECT_GROWTH_LIMIT, objects
