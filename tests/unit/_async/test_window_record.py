"""Opening and advancing a window in the stored layout record, by compare-and-swap."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from saltedtable import SCHEME_ROW_KEY, LayoutError, SaltScheme
from saltedtable._async.window_table import swap_record
from saltedtable._guard.record import SCHEME_QUALIFIER, LayoutRecord, describe_layout
from saltedtable._guard.window_state import advance_window, open_window, window_of
from tests.fakes import FakeTable

NOW = 1_700_000_000_000_000


def _table() -> FakeTable:
    fake = FakeTable()
    fake.set_cell(
        SCHEME_ROW_KEY, "meta", SCHEME_QUALIFIER, describe_layout(SaltScheme(16)).encode()
    )
    return fake


def _stored(fake: FakeTable) -> LayoutRecord:
    cells = [c for c in fake.cells_of(SCHEME_ROW_KEY) if c[1] == SCHEME_QUALIFIER]
    assert len(cells) == 1
    return LayoutRecord.decode(cells[0][3])


OPEN = functools.partial(
    open_window, new_buckets=64, start_micros=NOW + 60_000_000, now_micros=NOW, min_lead_s=60
)


async def test_a_window_is_opened_advanced_and_closed_in_the_stored_record() -> None:
    """Each swap stores the next record; closing leaves the record of 64 buckets."""
    fake = _table()
    await swap_record(fake, OPEN)
    state = window_of(_stored(fake))
    assert state is not None
    assert (state.old_buckets, state.new_buckets, state.state) == (16, 64, "open")
    await swap_record(fake, functools.partial(advance_window, to="backfilled"))
    await swap_record(fake, functools.partial(advance_window, to="closed"))
    assert _stored(fake) == describe_layout(SaltScheme(64))


async def test_a_record_changed_by_another_operator_is_not_overwritten() -> None:
    """The record changes between the read and the swap: refused, the other change kept."""
    fake = _table()

    def racing(record: LayoutRecord) -> LayoutRecord:
        other = open_window(
            record, new_buckets=32, start_micros=NOW * 2, now_micros=NOW, min_lead_s=1
        )
        fake.set_cell(SCHEME_ROW_KEY, "meta", SCHEME_QUALIFIER, other.encode(), ts=2000)
        return OPEN(record)

    with pytest.raises(LayoutError, match="changed while"):
        await swap_record(fake, racing)
    cells: list[Any] = fake.cells_of(SCHEME_ROW_KEY)
    newest = max(cells, key=lambda c: c[2])
    state = window_of(LayoutRecord.decode(newest[3]))
    assert state is not None
    assert state.new_buckets == 32


async def test_a_table_without_a_record_is_refused() -> None:
    """Nothing to swap: a clear error, nothing written."""
    fake = FakeTable()
    with pytest.raises(LayoutError, match="no layout record"):
        await swap_record(fake, OPEN)
    assert fake.row_keys() == []
