"""append_epoch's I/O around the pure rules, over small stand-ins of the sync Bigtable table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from google.api_core.exceptions import FailedPrecondition
from google.cloud.bigtable.data.row import Cell, Row

from saltedtable import SCHEME_ROW_KEY, LayoutError, SaltScheme, append_epoch, epoch_field
from saltedtable._guard.record import SCHEME_QUALIFIER, describe_layout


class NoTransactions:
    """A table whose app profile refuses check_and_mutate_row (single-row transactions)."""

    def __init__(self) -> None:
        record = describe_layout(SaltScheme(4)).encode()
        cell = Cell(record, SCHEME_ROW_KEY, "saltedtable", SCHEME_QUALIFIER, 1_000)
        self.row = Row(SCHEME_ROW_KEY, [cell])
        self.writes: list[Any] = []

    def read_row(self, key: bytes, **kwargs: Any) -> Row:
        return self.row

    def read_rows_stream(self, query: Any, **kwargs: Any) -> list[Row]:
        return []

    def check_and_mutate_row(self, *args: Any, **kwargs: Any) -> bool:
        raise FailedPrecondition("single-row transactions are not allowed")

    def mutate_row(self, *args: Any, **kwargs: Any) -> None:
        self.writes.append(args)


def test_without_single_row_transactions_nothing_is_written() -> None:
    """No plain write instead of the swap: two operators could both append then."""
    table = NoTransactions()
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    with pytest.raises(LayoutError, match="refuses single-row transactions"):
        append_epoch(table, SaltScheme(16), at, timestamp=epoch_field("ms", index=1))
    assert table.writes == []


def test_a_dry_run_checks_and_stores_nothing() -> None:
    table = NoTransactions()
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    result = append_epoch(
        table, SaltScheme(16), at, timestamp=epoch_field("ms", index=1), dry_run=True
    )
    assert result.stored is False
    assert result.rows_checked == 0
    assert result.record.buckets == 16


def test_the_row_check_reads_only_keys_that_can_be_past_the_start() -> None:
    """A time-first key reader narrows the scan to keys at or after the start, and still
    finds a future-dated row written before the append (it is refused)."""
    from google.cloud.bigtable.data.mutations import SetCell

    from saltedtable import SaltedTable
    from tests.fakes import FakeTable, SyncFakeTable

    reader = epoch_field("ms", index=0, digits=13)
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4))
    now = dt.datetime.now(dt.UTC)
    ms = int(now.timestamp() * 1000)
    for i in range(20):  # rows of the past: they keep their epoch
        table.mutate_row(b"%013d#r%d" % (ms - 60_000 - i, i), SetCell("cf", b"q", b"v"))
    at = now + dt.timedelta(hours=1)
    before = len(fake.stats.queries)
    done = append_epoch(SyncFakeTable(fake), SaltScheme(16), at, timestamp=reader, dry_run=True)
    assert done.rows_checked == 0  # no key of the old prefixes can be that late
    (query,) = fake.stats.queries[before:]
    at_ms = int(at.timestamp() * 1000)
    starts = {r.start_key[:2]: r.start_key for r in query.row_ranges}
    for prefix in SaltScheme(4).prefixes:  # the old epoch's prefixes from the start's key on
        assert prefix + b"%013d" % at_ms <= starts[prefix] <= prefix + b"%013d" % (at_ms + 1)
    # A scheduled event written before the append, past its start: still found.
    late = b"%013d#event" % (int(at.timestamp() * 1000) + 5_000)
    table.mutate_row(late, SetCell("cf", b"q", b"v"))
    with pytest.raises(LayoutError, match="would be hidden by the new epoch"):
        append_epoch(SyncFakeTable(fake), SaltScheme(16), at, timestamp=reader)
