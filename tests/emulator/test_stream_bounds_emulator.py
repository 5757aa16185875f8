"""Streamed scans of small rows on the emulator: every request carries a row limit (issue 38).

A scan without a limit whose buckets fit the slots streams: one request carries one
grant after another. gRPC grows a stream's flow-control window to megabytes and keeps
it full while the bucket pauses, so a request without a row limit could bring in
bytes without end, outside the budget. Each streamed request's row limit is its
bucket's share of the budget's bytes (``stream_rows``): what the open requests may
still bring in stays within the budget, as does what the read holds, and a bucket whose
rows exceed its share takes several requests, each resuming after the last.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery

from saltedtable import CallStats, ReadBudget, SaltedTableAsync
from saltedtable._engine.budget import row_cost, stream_rows, wire_bytes
from saltedtable.testing import INSTANCE, PROJECT, Emulator, create_table, delete_table
from tests.emulator.test_wide_rows_emulator import SCHEME, SLACK, UNBOUNDED, AskMeter, load

pytestmark = pytest.mark.emulator

#: 1,000 rows of 100 B a bucket.
ROWS, SIZE = 16 * 1000, 100
#: A row's key and value on the wire (the meter's unit) and what it counts in the budget.
WIRE = SIZE + len(b"k00000") + SLACK
COST = row_cost(SIZE + len(b"k00000"), 1)


@pytest.fixture(scope="module")
def table_id(emulator: Emulator) -> Iterator[str]:
    """ROWS rows of SIZE bytes, written once: both shapes only read them."""
    made = f"bounds-{uuid.uuid4().hex[:12]}"
    create_table(emulator.address, made, ["cf"])

    async def write() -> None:
        async with BigtableDataClientAsync(project=PROJECT) as client:
            await load(client, made, ROWS, SIZE)

    try:
        asyncio.run(write())
        yield made
    finally:
        delete_table(emulator.address, made, missing_ok=True)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_a_streamed_scan_bounds_every_request(
    table_id: str, data_client: BigtableDataClientAsync, ordered: bool
) -> None:
    # 32 KiB a bucket: streams (a page's cap holds 16 rows and more), 309 rows a request.
    budget = ReadBudget(bytes=512 << 10)
    share = stream_rows(budget, SCHEME.buckets, COST)
    assert share == (512 << 10) // SCHEME.buckets // wire_bytes(COST) == 309
    meter = AskMeter(WIRE)
    physical = meter.wrap(data_client.get_table(INSTANCE, table_id))
    table = SaltedTableAsync(physical, SCHEME, budget=budget, guard=False)
    assert len(await table.read_rows(ReadRowsQuery(limit=1))) == 1  # (measures the rows)
    meter.reset()
    stats = CallStats()
    keys = []
    async for row in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered, stats=stats):
        meter.hand(row)
        keys.append(row.row_key)
    assert (keys if ordered else sorted(keys)) == [b"k%05d" % i for i in range(ROWS)]
    # No request without a row limit was ever open. What the open requests could still
    # bring in stayed within the budget (their row limits, counted at the rows' bytes on
    # the wire), and what the read held within the budget and a row per bucket (counted
    # at the rows' cost, fewer on the wire): twice the budget at most, in the meter's
    # unit, where an unbounded stream has no end.
    assert meter.peak < UNBOUNDED
    assert meter.peak <= 2 * budget.bytes + SCHEME.buckets * COST, meter.peak
    assert 0 < stats.peak_buffered_bytes <= budget.bytes + SCHEME.buckets * COST
    # The limit, not the grants, ended the streams: several requests a bucket.
    assert stats.requests >= SCHEME.buckets * (1000 // share)
