"""The window's operations (``saltedtable window``'s functions) over the sync fake table."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from google.cloud.bigtable.data import RowMutationEntry, SetCell
from google.cloud.bigtable.data.mutations import DeleteAllFromRow

from saltedtable import (
    SCHEME_ROW_KEY,
    LayoutError,
    SaltedTable,
    SaltScheme,
    WindowError,
    backfill_resalt_window,
    close_resalt_window,
    open_resalt_window,
    resalt_window_status,
    verify_resalt_window,
)
from saltedtable._guard.record import SCHEME_QUALIFIER, LayoutRecord, describe_layout
from tests.fakes import FakeTable, SyncFakeTable

OLD, NEW = SaltScheme(16), SaltScheme(64)
LEAD = 0.05
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _stored(fake: FakeTable) -> LayoutRecord:
    cells = [c for c in fake.cells_of(SCHEME_ROW_KEY) if c[1] == SCHEME_QUALIFIER]
    return LayoutRecord.decode(max(cells, key=lambda c: c[2])[3])


def _written(keys: list[bytes]) -> tuple[FakeTable, SyncFakeTable]:
    """A table of ``keys`` written on 16 buckets through a guarded table (record stored)."""
    fake = FakeTable()
    raw = SyncFakeTable(fake)
    table = SaltedTable(raw, OLD)
    table.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", k)) for k in keys])
    return fake, raw


def _started(raw: SyncFakeTable) -> None:
    """Open a window with a short lead and wait for its start."""
    step = open_resalt_window(raw, 64, min_lead=LEAD)
    assert step.window is not None
    time.sleep(max(0.0, step.window.start_micros / 1e6 + 0.01 - time.time()))


def test_open_stores_a_window_the_lead_ahead_and_a_dry_run_stores_nothing() -> None:
    """The default start is now plus the lead; --dry-run leaves the record as it was."""
    fake, raw = _written([b"a"])
    dry = open_resalt_window(raw, 64, min_lead=30, dry_run=True, clock=lambda: NOW)
    assert not dry.changed
    assert _stored(fake) == describe_layout(OLD)
    step = open_resalt_window(raw, 64, min_lead=30, clock=lambda: NOW)
    assert step.changed
    assert step.window is not None
    assert step.window.start_micros == int(NOW.timestamp() * 1e6) + 30_000_000
    assert (step.window.old_buckets, step.window.new_buckets) == (16, 64)
    assert resalt_window_status(raw).window == step.window
    with pytest.raises(LayoutError, match="already holds a window"):
        open_resalt_window(raw, 32, min_lead=30)


def test_open_refuses_a_start_sooner_than_the_lead_and_a_table_without_record() -> None:
    """The error names the earliest start; nothing is stored."""
    fake, raw = _written([b"a"])
    soon = NOW + dt.timedelta(seconds=5)
    with pytest.raises(LayoutError, match="earliest start"):
        open_resalt_window(raw, 64, at=soon, min_lead=30, clock=lambda: NOW)
    assert _stored(fake) == describe_layout(OLD)
    with pytest.raises(ValueError, match="UTC offset"):
        open_resalt_window(raw, 64, at=dt.datetime(2026, 1, 1), min_lead=30)
    with pytest.raises(LayoutError, match="no layout record"):
        open_resalt_window(SyncFakeTable(FakeTable()), 64)


def test_backfill_before_the_start_is_refused_naming_it() -> None:
    """The backfill runs once every writer writes the new layout."""
    _, raw = _written([b"a"])
    open_resalt_window(raw, 64, min_lead=30)
    with pytest.raises(WindowError, match="starts at"):
        backfill_resalt_window(raw)


def test_verify_close_and_their_refusals() -> None:
    """close needs backfilled and nothing left; verify moves to backfilled when nothing is."""
    keys = [b"k%02d" % i for i in range(12)]
    fake, raw = _written(keys)
    _started(raw)
    with pytest.raises(LayoutError, match="not backfilled"):
        close_resalt_window(raw, wait=False)
    left = verify_resalt_window(raw)
    assert left.progress is not None
    assert left.progress.left > 0
    assert not left.changed
    done = backfill_resalt_window(raw, limit=5)
    assert done.progress is not None
    assert done.progress.copied > 0
    verified = verify_resalt_window(raw)
    assert verified.changed
    assert verified.window is not None
    assert verified.window.state == "backfilled"
    # A row appears in the old layout (a raw writer): close refuses, nothing deleted.
    fake.set_cell(OLD.salt_key(b"late"), "cf", b"q", b"v")
    before = fake.data_keys()
    with pytest.raises(LayoutError, match="not fully copied"):
        close_resalt_window(raw, wait=False)
    assert fake.data_keys() == before
    backfill_resalt_window(raw)
    table = SaltedTable(raw, OLD, record_refresh=LEAD)
    # A key whose two rows differ: its delete writes a tombstone.
    gone = next(k for k in keys if OLD.salt_key(k) != NEW.salt_key(k))
    table.mutate_row(gone, DeleteAllFromRow())
    slept: list[float] = []
    closed = close_resalt_window(raw, sleep=slept.append)
    assert slept == [LEAD]
    assert closed.window is None
    assert closed.tombstones >= 1
    assert _stored(fake) == describe_layout(NEW)
    assert sorted(fake.data_keys()) == sorted(
        NEW.salt_key(k) for k in [*keys, b"late"] if k != gone
    )
