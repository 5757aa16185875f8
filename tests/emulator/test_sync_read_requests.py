"""A sync read runs few requests at once, on the emulator (issue 26's fair sharing).

The client's sync streams reach the process through one event thread per
channel, which hands each running stream's rows over in turn: every request
a read keeps running delays every other read's rows. So a sync read runs
:data:`~saltedtable._engine.runtime_threads.READ_REQUESTS` requests at once at most,
in as many worker threads, whatever the table's slots allow. Before, at the
default 64 slots, each 16-bucket scan ran 16 and kept 16 worker threads.
Threads and statistics are counted, not timed.
"""

from __future__ import annotations

import threading
import time

import pytest
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowRange

from saltedtable import CallStats, SaltedTable, SaltScheme
from saltedtable._engine.runtime_threads import READ_REQUESTS
from saltedtable.testing import INSTANCE, PROJECT, Emulator
from tests.conftest import MakeTable, salted_table_of

SCHEME = SaltScheme(16)
KEYS = [b"key-%05d" % i for i in range(4000)]
SMALL = ReadRowsQuery(row_ranges=RowRange(b"key-01000", b"key-01010"))
SCANS = 3


@pytest.fixture
def table_id(emulator: Emulator, make_table: MakeTable) -> str:
    return salted_table_of(make_table, SCHEME, KEYS)


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("saltedtable-subscan")]


def test_sync_scans_at_64_slots_keep_few_workers_and_stay_exact(
    emulator: Emulator, table_id: str
) -> None:
    with BigtableDataClient(project=PROJECT) as client:
        salted = SaltedTable.from_client(
            client, INSTANCE, table_id, SCHEME, max_concurrent_subscans=64, guard=False
        )
        stats = [CallStats() for _ in range(SCANS)]
        scans = [iter(salted.read_rows_stream(ReadRowsQuery(), stats=s)) for s in stats]
        try:
            # Every scan's consumer took its first row: each scan's 16 buckets
            # have all answered (an ordered merge needs a row from each).
            firsts = [next(scan) for scan in scans]
            assert [r.row_key for r in firsts] == [KEYS[0]] * SCANS
            assert len(workers()) <= SCANS * READ_REQUESTS  # before: 16 a scan
            deadline = time.monotonic() + 60
            while salted.limiter.free < salted.limiter.total:  # the scans' pages end
                assert time.monotonic() < deadline, "the scans never settled"
                time.sleep(0.02)
            rows = salted.read_rows(SMALL)
            assert [r.row_key for r in rows] == KEYS[1000:1010]
            # One scan read to its end, exact, still with few workers.
            assert [r.row_key for r in scans[0]] == KEYS[1:]
            assert len(workers()) <= SCANS * READ_REQUESTS
        finally:
            for scan in scans:
                scan.close()  # type: ignore[attr-defined]
        assert not workers()
        assert all(len(s.buckets) == SCHEME.buckets for s in stats)
        assert salted.limiter.free == salted.limiter.total
