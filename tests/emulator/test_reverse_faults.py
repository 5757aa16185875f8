"""Reversed scans under connection resets (emulator behind ``emulator/faultproxy.py``).

A reset mid-stream makes the client's read operation retry the bucket's request; a reversed
request must resume *below* the last key it handed over (the client's own revision keeps
what lies above it). What must hold: the exact rows in descending order, with a retry seen.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import pytest
from google.cloud.bigtable.data import Row

from saltedtable import CallStats, SaltedTableAsync
from saltedtable.testing import INSTANCE
from tests.emulator.test_faults import (
    SCHEME,
    check_exact,
    client_at,
    key_of,
    loaded_table,
    loaded_table_id,
    proxy,
    settle,
)

pytestmark = pytest.mark.emulator

__all__ = ["loaded_table", "loaded_table_id", "proxy"]  # (fixtures)

#: (dict query, ordered, the keys expected: a slice of the keys in descending order).
SHAPES: dict[str, tuple[dict[str, Any], bool, slice]] = {
    "full": ({"reversed": True}, True, slice(None)),
    "limit": ({"reversed": True, "rows_limit": 1234}, True, slice(0, 1234)),
    "range": (
        {
            "reversed": True,
            "rows": {
                "row_ranges": [{"start_key_closed": key_of(500), "end_key_open": key_of(2500)}]
            },
        },
        True,
        slice(500, 2500),
    ),
    "unordered": ({"reversed": True}, False, slice(None)),
}


@pytest.mark.parametrize(
    ("after", "times", "shape"),
    [
        (64_000, 1, "full"),
        (700_000, 1, "full"),
        (150_000, 3, "full"),
        (300_000, 1, "limit"),
        (300_000, 1, "range"),
        (300_000, 1, "unordered"),
    ],
)
async def test_a_reversed_scan_reset_mid_stream_resumes_downwards(
    proxy: Any, loaded_table: tuple[str, list[bytes]], after: int, times: int, shape: str
) -> None:
    table_id, keys = loaded_table
    query, ordered, part = SHAPES[shape]
    expected = list(reversed(keys[part])) if shape == "range" else list(reversed(keys))[part]
    async with client_at(proxy.address) as client:
        salted = SaltedTableAsync(client.get_table(INSTANCE, table_id), SCHEME)
        await salted.read_row(key_of(0))  # connect first, so the fault hits the scan
        before = asyncio.all_tasks()
        proxy.reset_after(after, times=times)
        stats = CallStats()
        stream = await salted.read_rows_stream(
            query, operation_timeout=30, attempt_timeout=10, ordered=ordered, stats=stats
        )
        async with aclosing(stream):  # type: ignore[type-var]
            rows: list[Row] = [row async for row in stream]
        proxy.clear()
        left = await settle(before, proxy)
        await salted.close()
    assert proxy.stats.resets == times, "the fault did not fire"
    assert stats.retries >= 1, stats.as_dict()
    assert not left, f"leaked tasks: {left}"
    if not ordered:
        rows.sort(key=lambda row: row.row_key, reverse=True)
    check_exact(rows, expected)
