"""A read streams over as many buckets as the table has slots, in few, full requests.

The table's slots keep a reserve for small reads (``total // RESERVE_SHARE``). A read
whose buckets stream needs one slot per bucket for as long as it runs: with 64 buckets
and the default 64 slots, the reserve left 8 buckets waiting for a slot at all times,
so every stream gave its slot up at each grant's end (someone waited) and every paused
one was ended for a waiter: the 64-bucket scan ran in thousands of requests of a few
dozen rows (22,828 requests of about 35 rows over 800,000 rows on the emulator). Its
streams now book their slots, and the reserve shrinks to what they leave.
"""

from __future__ import annotations

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import CallStats, ReadBudget, SaltedTableAsync, SaltScheme
from saltedtable._engine.budget import DEFAULT_MAX_CONCURRENT_SUBSCANS, row_cost, stream_rows
from tests.fakes import FakeTable

BUCKETS = 64
PER_BUCKET = 600
#: What one row (a 6-byte logical key and a 6-byte value) counts.
ROW_COST = row_cost(12, 1)
#: A budget whose share per bucket is a streamed request of 300 rows (its grants, half a
#: share of the bytes at the rows' cost as objects, are of 18 rows: wide enough to stream).
BUDGET = ReadBudget(bytes=BUCKETS * 300 * (ROW_COST // 8))


@pytest.mark.parametrize("ordered", [True, False])
async def test_a_64_bucket_scan_with_64_slots_streams_in_full_requests(ordered: bool) -> None:
    share = stream_rows(BUDGET, BUCKETS, ROW_COST)
    assert share == 300
    keys = [b"k%05d" % i for i in range(BUCKETS * PER_BUCKET)]
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(BUCKETS), budget=BUDGET)  # type: ignore[arg-type]
    assert table.limiter.total_tokens == DEFAULT_MAX_CONCURRENT_SUBSCANS == BUCKETS
    await table.bulk_mutate_rows([RowMutationEntry(k, SetCell("f1", b"q", k, 1)) for k in keys])
    await table.read_rows(ReadRowsQuery(limit=1))  # (the table measures its rows)
    fake.stats.queries.clear()
    fake.stats.rows_sent = 0
    stats = CallStats()
    stream = await table.read_rows_stream(ReadRowsQuery(), ordered=ordered, stats=stats)
    got = [row.row_key async for row in stream]
    assert (got if ordered else sorted(got)) == keys
    assert fake.stats.rows_sent == len(keys)  # (every row once)
    # Per bucket: its first request, then streamed ones of its share each (600 rows:
    # two), and one that finds the bucket's end; a few more where buckets finish
    # at different times. Before: 2,000 to 3,000 requests of 7 to 10 rows.
    requests = len(fake.stats.queries)
    assert requests == stats.requests
    assert requests <= BUCKETS * (PER_BUCKET // share + 3), requests
    assert len(keys) / requests >= share / 2
    assert table.limiter.borrowed_tokens == 0
    assert stats.peak_buffered_bytes <= BUDGET.bytes + BUCKETS * ROW_COST
