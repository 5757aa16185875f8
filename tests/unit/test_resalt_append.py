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
