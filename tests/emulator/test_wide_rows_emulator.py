"""Wide rows on the emulator: the byte budget holds at 64 KiB and 1 MiB rows (issue 23).

In-process reads wrap the physical table's ``read_rows_stream`` and count the
bytes the client delivered and the bytes handed to the caller
(:class:`ClientMeter`): what was delivered and not yet handed over stays within
the budget plus one row per bucket, for every read shape, async and sync
(``CallStats.peak_buffered_bytes``, the engine's own account, is checked too).
A larger scan (:class:`AskMeter`) also counts what each open request may still
bring in by its row limit: rows this wide are paged, never streamed.
A fresh child process measures the peak RSS of a streaming salted scan
against the raw client's single scan of the same rows; the assertion is on
memory, never on time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable, Iterator
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
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import StripValueTransformerFilter

from saltedtable import CallStats, ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, Emulator

SCHEME = SaltScheme(16)
KIB = 1024
#: The salt prefix the client's keys carry and the caller's do not.
SLACK = len(SCHEME.prefix(0))


def row_bytes(row: Row) -> int:
    return len(row.row_key) + sum(len(cell.value) for cell in row.cells)


class ClientMeter:
    """Bytes the client delivered (in the physical table's stream) and not yet handed over.

    The one request over every bucket (a query of several ranges) is counted
    apart: when it misses, its rows are dropped and the buckets read them again.
    """

    def __init__(self) -> None:
        self.sent = self.handed = self.peak = self.one_sent = 0
        self.lock = threading.Lock()

    def send(self, row: Row, apart: bool) -> None:
        # Counted before the salted table relabels the row: the client's key.
        nbytes = row_bytes(row)
        with self.lock:
            if apart:
                self.one_sent += nbytes
                return
            self.sent += nbytes
            self.peak = max(self.peak, self.sent - self.handed)

    def hand(self, row: Row) -> None:
        with self.lock:
            self.handed += row_bytes(row) + SLACK

    def wrap_async(self, table: Any) -> Any:
        original = table.read_rows_stream

        async def read_rows_stream(query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
            stream = await original(query, **kwargs)
            apart = len(query.row_ranges) > 1

            async def counted() -> AsyncIterator[Row]:
                async for row in stream:
                    self.send(row, apart)
                    yield row

            return counted()

        table.read_rows_stream = read_rows_stream
        return table

    def wrap_sync(self, table: Any) -> Any:
        original = table.read_rows_stream

        def read_rows_stream(query: ReadRowsQuery, **kwargs: Any) -> Iterator[Row]:
            stream = original(query, **kwargs)
            apart = len(query.row_ranges) > 1

            def counted() -> Iterator[Row]:
                for row in stream:
                    self.send(row, apart)
                    yield row

            return counted()

        table.read_rows_stream = read_rows_stream
        return table


async def load(client: BigtableDataClientAsync, table_id: str, rows: int, size: int) -> None:
    """Rows k00000.. of one ``size``-byte cell each, written through a salted table."""
    table = SaltedTableAsync.from_client(client, INSTANCE, table_id, SCHEME)
    value = b"v" * size
    batch = max(1, (4 << 20) // size)
    for start in range(0, rows, batch):
        entries = [
            RowMutationEntry(b"k%05d" % i, SetCell("cf", b"q", value, 1000))
            for i in range(start, min(rows, start + batch))
        ]
        await table.bulk_mutate_rows(entries)


SHAPES: dict[str, tuple[ReadRowsQuery, bool]] = {
    "ordered": (ReadRowsQuery(), True),
    "unordered": (ReadRowsQuery(), False),
    "limited": (ReadRowsQuery(limit=40), True),
    "one-request": (ReadRowsQuery(row_ranges=RowRange(b"k", b"l")), True),
}


@pytest.mark.parametrize("size", [64 * KIB, 1024 * KIB], ids=["64KiB", "1MiB"])
async def test_wide_row_reads_keep_the_byte_bound(
    make_table: Callable[..., str], data_client: BigtableDataClientAsync, size: int
) -> None:
    rows = 160 if size == 64 * KIB else 24
    table_id = make_table(families=("cf",))
    await load(data_client, table_id, rows, size)
    budget = ReadBudget(bytes=1 << 20)  # 16 rows of 64 KiB; less than one row of 1 MiB
    bound = budget.bytes + 16 * (size + 16)
    for name, (query, ordered) in SHAPES.items():
        meter = ClientMeter()
        physical = meter.wrap_async(data_client.get_table(INSTANCE, table_id))
        table = SaltedTableAsync(physical, SCHEME, budget=budget)
        stats = CallStats()
        keys = []
        async for row in await table.read_rows_stream(query, ordered=ordered, stats=stats):
            meter.hand(row)
            keys.append(row.row_key)
        expected = [b"k%05d" % i for i in range(rows)][: query.limit]
        assert (keys if ordered else sorted(keys)) == expected, name
        assert 0 < meter.peak <= bound, (name, meter.peak, bound)
        assert meter.one_sent <= budget.bytes + size + 16, name
        assert 0 < stats.peak_buffered_bytes <= bound, (name, stats.peak_buffered_bytes, bound)


def test_sync_wide_row_reads_keep_the_byte_bound(
    make_table: Callable[..., str], emulator: Emulator
) -> None:
    table_id = make_table(families=("cf",))
    budget = ReadBudget(bytes=1 << 20)
    size, rows = 64 * KIB, 160
    bound = budget.bytes + 16 * (size + 16)
    with BigtableDataClient(project=PROJECT) as client:
        writer = SaltedTable.from_client(client, INSTANCE, table_id, SCHEME, budget=budget)
        value = b"v" * size
        writer.bulk_mutate_rows(
            [RowMutationEntry(b"k%05d" % i, SetCell("cf", b"q", value, 1000)) for i in range(rows)]
        )
        for name, (query, ordered) in SHAPES.items():
            meter = ClientMeter()
            physical = meter.wrap_sync(client.get_table(INSTANCE, table_id))
            table = SaltedTable(physical, SCHEME, budget=budget)
            stats = CallStats()
            keys = []
            for row in table.read_rows_stream(query, ordered=ordered, stats=stats):
                meter.hand(row)
                keys.append(row.row_key)
            expected = [b"k%05d" % i for i in range(rows)][: query.limit]
            assert (keys if ordered else sorted(keys)) == expected, name
            assert 0 < meter.peak <= bound, (name, meter.peak, bound)
            assert meter.one_sent <= budget.bytes + size + 16, name
            assert 0 < stats.peak_buffered_bytes <= bound, name


CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery
    from saltedtable import CallStats, ReadBudget, SaltedTableAsync, SaltScheme

    def peak_mb():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")

    async def main(project, instance, table_id, how, budget_bytes):
        async with BigtableDataClientAsync(project=project) as client:
            raw = client.get_table(instance, table_id)
            await raw.read_rows(ReadRowsQuery(limit=1))  # open the channel: the baseline
            base = peak_mb()
            stats = CallStats()
            n = 0
            if how == "raw":
                async for _ in await raw.read_rows_stream(ReadRowsQuery()):
                    n += 1
            else:
                table = SaltedTableAsync.from_client(
                    client, instance, table_id, SaltScheme(16),
                    budget=ReadBudget(bytes=budget_bytes),
                )
                stream = await table.read_rows_stream(
                    ReadRowsQuery(), ordered=how == "ordered", stats=stats
                )
                async for _ in stream:
                    n += 1
        print(json.dumps({"rows": n, "growth_mb": peak_mb() - base,
                          "peak_buffered_bytes": stats.peak_buffered_bytes}))

    asyncio.run(main(*sys.argv[1:5], int(sys.argv[5])))
    """
)


def child_scan(table_id: str, how: str, budget_bytes: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, PROJECT, INSTANCE, table_id, how, str(budget_bytes)],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("size", "rows", "margin_mb"),
    [(64 * KIB, 768, 24), (1024 * KIB, 96, 48)],
    ids=["64KiB", "1MiB"],
)
async def test_a_fresh_process_scanning_wide_rows_grows_like_the_raw_client(
    make_table: Callable[..., str],
    data_client: BigtableDataClientAsync,
    size: int,
    rows: int,
    margin_mb: int,
) -> None:
    """48 MB of 64 KiB rows (or 96 MB of 1 MiB rows): a salted scan with a 2 MiB
    budget holds at most 2 MiB + 16 rows of them; its RSS grows little more than
    the raw client's single scan's (the old sizing, 16,384 rows asked at an
    assumed 512 B, held the whole table). With 1 MiB rows the 16 rows the bound
    allows past the budget (the first wave, before any row is measured) are
    16 MB of the margin."""
    assert os.environ.get(EMULATOR_HOST_ENV)  # the child reaches the emulator through it
    table_id = make_table(families=("cf",))
    budget_bytes = 2 << 20
    await load(data_client, table_id, rows, size)
    raw = child_scan(table_id, "raw", budget_bytes)
    for how in ("ordered", "unordered"):
        salted = child_scan(table_id, how, budget_bytes)
        assert salted["rows"] == rows
        assert raw["rows"] >= rows  # (and the layout record the salted table wrote)
        assert salted["peak_buffered_bytes"] <= budget_bytes + 16 * (size + 16)
        # Memory, not time: the table is 40-48 MB; the salted scan holds ~3 MB of
        # 64 KiB rows, ~18 MB of 1 MiB rows (one a bucket: the rows pass a share).
        assert salted["growth_mb"] <= raw["growth_mb"] + margin_mb, (how, salted, raw)


#: :class:`AskMeter`'s peak while a request without a row limit is open.
UNBOUNDED = 1 << 62


class AskMeter:
    """What the requests of a read may still bring into the process, and what it holds.

    Every physical request is watched, a bucket's first too: a request with a row
    limit may bring in ``(limit - rows delivered) x row size`` more bytes, one
    without (a streamed request) bytes without end, since its transport buffers
    what its flow-control window allows whatever the engine grants. Bytes
    delivered and not yet handed to the caller count too. (A read's first wave,
    sent before it has measured a row, probes each bucket with one row.)
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent = self.handed = self.peak = 0
        self.asked = 0  # what the open requests with a row limit may still bring in
        self.unlimited = 0  # open requests without a row limit (no end to it)
        self.buckets: set[bytes] = set()
        #: The row limit of each bucket's first request (0: none).
        self.first_limits: list[int] = []

    def hand(self, row: Row) -> None:
        self.handed += row_bytes(row) + SLACK

    def reset(self) -> None:
        """Forget what was read so far (no request may be open)."""
        assert not self.asked
        assert not self.unlimited
        self.sent = self.handed = self.peak = 0
        self.buckets.clear()
        self.first_limits.clear()

    def _check(self) -> None:
        held = self.asked + self.sent - self.handed
        self.peak = max(self.peak, UNBOUNDED if self.unlimited else held)

    def wrap(self, table: Any) -> Any:
        original = table.read_rows_stream

        async def read_rows_stream(query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
            bucket = (query.row_ranges[0].start_key or b"")[:SLACK]
            if bucket not in self.buckets:
                self.buckets.add(bucket)
                self.first_limits.append(query.limit or 0)
            left = query.limit or 0  # (0: no row limit)
            stream = await original(query, **kwargs)

            async def counted() -> AsyncIterator[Row]:
                nonlocal left
                self.asked += left * self.size
                self.unlimited += not left
                self._check()
                try:
                    async for row in stream:
                        self.sent += row_bytes(row)
                        if left:
                            left -= 1
                            self.asked -= self.size
                        self._check()
                        yield row
                finally:
                    self.asked -= left * self.size
                    self.unlimited -= not query.limit

            return counted()

        table.read_rows_stream = read_rows_stream
        return table


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_a_larger_wide_row_scan_asks_no_more_than_its_byte_budget(
    make_table: Callable[..., str], data_client: BigtableDataClientAsync, ordered: bool
) -> None:
    """384 rows of 64 KiB (24 a bucket, 24 MiB) with the default 8 MiB budget: several
    requests per bucket. What the open requests may still bring in plus what the read
    holds stays within the budget plus one row per bucket, from the first request on (the
    first wave probes each bucket with one row). A request without a row limit (a stream)
    would make that unbounded: rows this wide are paged, not streamed (`streamable`)."""
    size, rows = 64 * KIB, 384
    table_id = make_table(families=("cf",))
    await load(data_client, table_id, rows, size)
    budget = ReadBudget()
    meter = AskMeter(size + len(b"k00000") + SLACK)
    physical = meter.wrap(data_client.get_table(INSTANCE, table_id))
    table = SaltedTableAsync(physical, SCHEME, budget=budget, guard=False)
    # A keys-only read first: its measure (keys of a few bytes) does not size full rows.
    keys_only = ReadRowsQuery(row_filter=StripValueTransformerFilter(True))
    assert len(await table.read_rows(keys_only)) == rows
    meter.reset()
    stats = CallStats()
    keys = []
    async for row in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered, stats=stats):
        meter.hand(row)
        keys.append(row.row_key)
    assert (keys if ordered else sorted(keys)) == [b"k%05d" % i for i in range(rows)]
    # No read with this filter measured rows before: the first wave probes.
    assert meter.first_limits == [1] * SCHEME.buckets
    bound = budget.bytes + SCHEME.buckets * (size + 16)
    assert 0 < meter.peak <= bound, (meter.peak, bound)
    assert 0 < stats.peak_buffered_bytes <= bound
    assert stats.requests > 2 * SCHEME.buckets  # (the budget, not the table, sized them)
    # The next scan starts from the table's measure: first pages of 3 rows, same bound.
    meter.reset()
    got = 0
    async for row in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered):
        meter.hand(row)
        got += 1
    assert got == rows
    assert meter.first_limits == [3] * SCHEME.buckets
    assert 0 < meter.peak <= bound, (meter.peak, bound)
