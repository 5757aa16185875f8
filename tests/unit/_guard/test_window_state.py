"""The dual-layout window's state in the layout record: opening, advancing, storing."""

from __future__ import annotations

import pytest

from saltedtable import LayoutError, SaltScheme, Window
from saltedtable._guard.record import LayoutRecord, describe_layout
from saltedtable._guard.window_state import (
    WindowState,
    advance_window,
    open_window,
    window_of,
)

NOW = 1_700_000_000_000_000
RECORD = describe_layout(SaltScheme(16))


def _opened() -> LayoutRecord:
    return open_window(
        RECORD, new_buckets=64, start_micros=NOW + 120_000_000, now_micros=NOW, min_lead_s=120
    )


def test_a_window_opens_at_least_the_lead_ahead_and_survives_a_round_trip() -> None:
    """The stored record decodes to the same window; the old scheme stays named."""
    record = _opened()
    stored = LayoutRecord.decode(record.encode())
    state = window_of(stored)
    assert state == WindowState(16, 64, NOW + 120_000_000, 120, "open")
    assert stored.buckets == 16
    assert window_of(RECORD) is None
    assert state.window(SaltScheme(16)) == Window(SaltScheme(16), SaltScheme(64))
    assert state.mode_at(NOW) == "old"
    assert state.mode_at(NOW + 120_000_000) == "window"


def test_a_start_sooner_than_the_lead_is_refused_naming_the_earliest() -> None:
    """One microsecond short of the lead: refused, with the earliest start in the message."""
    with pytest.raises(LayoutError, match=str(NOW + 120_000_000)):
        open_window(
            RECORD, new_buckets=64, start_micros=NOW + 119_999_999, now_micros=NOW, min_lead_s=120
        )


def test_states_advance_in_order_and_closing_names_the_new_scheme() -> None:
    """open -> backfilled -> closed; skipping or repeating a state is refused."""
    record = _opened()
    with pytest.raises(LayoutError, match="next state is backfilled"):
        advance_window(record, "closed")
    record = advance_window(record, "backfilled")
    state = window_of(record)
    assert state is not None
    assert state.state == "backfilled"
    with pytest.raises(LayoutError, match="already holds a window"):
        open_window(record, new_buckets=32, start_micros=NOW * 2, now_micros=NOW, min_lead_s=1)
    closed = advance_window(record, "closed")
    assert window_of(closed) is None
    assert closed == describe_layout(SaltScheme(64))


def test_a_window_needs_one_plain_scheme_and_a_new_count() -> None:
    """The same bucket count, or a record that is not one plain scheme, is refused."""
    with pytest.raises(LayoutError, match="new bucket count"):
        open_window(RECORD, new_buckets=16, start_micros=NOW * 2, now_micros=NOW, min_lead_s=1)
    with pytest.raises(LayoutError, match="holds no window"):
        advance_window(RECORD, "backfilled")
    with pytest.raises(LayoutError, match="not an object"):
        WindowState.from_dict([1])
