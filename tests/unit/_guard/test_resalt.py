"""The pure rules of appending an epoch and adopting one (``_guard.resalt``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import pytest

from saltedtable import (
    Layout,
    LayoutError,
    SaltScheme,
    SaltSchemeError,
    SchemeMismatchError,
    epoch_field,
    fields,
    named_key_part,
)
from saltedtable._guard.record import describe_layout, exact_value_regex
from saltedtable._guard.resalt import (
    DEFAULT_MIN_LEAD,
    adoption,
    beyond_horizon,
    lead_problem,
    orphaned,
    plan_append,
    refresh_problem,
)
from saltedtable._scheme.cutoff import CutoffPolicy

READER = epoch_field("ms", index=1, digits=13)
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
PLAIN = describe_layout(SaltScheme(8))


def k(sensor: int, when: dt.datetime) -> bytes:
    return b"s%d#%013d" % (sensor, int(when.timestamp() * 1000))


def test_the_default_lead_is_twice_the_refresh_plus_a_skew_margin() -> None:
    """120 s: what a first epoch record stores unless told otherwise."""
    at = NOW + dt.timedelta(hours=1)
    plan = plan_append(PLAIN, SaltScheme(64), at, NOW, timestamp=READER)
    assert DEFAULT_MIN_LEAD == 120.0
    assert plan.min_lead == 120.0
    assert plan.record.version == 2
    assert plan.record.epochs is not None
    assert plan.record.epochs.min_lead_s == 120.0


def test_a_start_sooner_than_the_lead_names_the_earliest_allowed() -> None:
    with pytest.raises(SaltSchemeError, match=re.escape("2026-11-29T00:02:00+00:00 or later")):
        plan_append(PLAIN, SaltScheme(64), NOW + dt.timedelta(seconds=119), NOW, timestamp=READER)


def test_a_plain_table_needs_a_reader_and_a_stored_lead_stays() -> None:
    with pytest.raises(SaltSchemeError, match="key-time reader"):
        plan_append(PLAIN, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW)
    first = plan_append(
        PLAIN, SaltScheme(16), NOW + dt.timedelta(hours=1), NOW, timestamp=READER, min_lead=10
    )
    with pytest.raises(SaltSchemeError, match="stores a minimum lead of 10 s"):
        plan_append(first.record, SaltScheme(64), NOW + dt.timedelta(hours=2), NOW, min_lead=20)
    second = plan_append(first.record, SaltScheme(64), NOW + dt.timedelta(hours=2), NOW)
    assert [e.scheme.buckets for e in second.appended if e.scheme] == [8, 16, 64]


def test_a_caller_layout_that_disagrees_is_refused() -> None:
    with pytest.raises(SchemeMismatchError):
        plan_append(
            PLAIN,
            SaltScheme(64),
            NOW + dt.timedelta(hours=1),
            NOW,
            timestamp=READER,
            current=Layout(SaltScheme(4)),
        )


def test_rows_at_or_after_the_start_are_orphaned_older_ones_not() -> None:
    at = NOW + dt.timedelta(hours=1)
    plan = plan_append(PLAIN, SaltScheme(64), at, NOW, timestamp=READER)
    old8 = SaltScheme(8)
    keys = [
        old8.salt_key(k(1, NOW)),
        old8.salt_key(k(2, at)),
        old8.salt_key(k(3, at + dt.timedelta(days=1))),
    ]
    assert orphaned(plan.current, plan.appended, keys) == keys[1:]


def test_a_plain_object_adopts_an_appended_epoch_with_the_stored_lead() -> None:
    plan = plan_append(PLAIN, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW, timestamp=READER)
    grown = adoption(Layout(SaltScheme(8)), plan.record)
    assert grown is not None
    assert grown.epochs is not None
    assert grown.epochs.min_lead == 120.0
    assert describe_layout(grown.scheme, epochs=grown.epochs) == plan.record
    # The same record again, or one that does not extend: nothing to adopt.
    assert adoption(grown, plan.record) is None
    assert adoption(Layout(SaltScheme(4)), plan.record) is None


def test_a_cutoff_object_adopts_and_keeps_its_reader() -> None:
    cutoff = CutoffPolicy(NOW - dt.timedelta(days=1), READER)
    record = describe_layout(SaltScheme(8), cutoff)
    plan = plan_append(record, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW)
    grown = adoption(Layout(SaltScheme(8), cutoff), plan.record)
    assert grown is not None
    assert grown.epochs is not None
    assert grown.epochs.timestamp is READER
    assert len(grown.epochs) == 3


def test_an_epoch_whose_key_part_cannot_be_resolved_is_refused() -> None:
    """A named (custom) key part the object does not hold: LayoutError saying what to do."""
    custom = named_key_part("tenant/v1", lambda key: key[:2])
    plan = plan_append(
        PLAIN,
        SaltScheme(64, key_part=custom),
        NOW + dt.timedelta(hours=1),
        NOW,
        timestamp=READER,
    )
    with pytest.raises(LayoutError, match="open a new table object"):
        adoption(Layout(SaltScheme(8)), plan.record)
    # One it holds (its own epoch's) or a ready-made one is resolved.
    own = Layout(SaltScheme(8, key_part=custom))
    again = plan_append(
        describe_layout(own.scheme),
        SaltScheme(64, key_part=custom),
        NOW + dt.timedelta(hours=1),
        NOW,
        timestamp=READER,
        current=own,
    )
    grown = adoption(own, again.record)
    assert grown is not None
    assert grown.scheme.key_part is custom
    ready = plan_append(
        PLAIN, SaltScheme(64, key_part=fields(1)), NOW + dt.timedelta(hours=1), NOW,
        timestamp=READER,
    )  # fmt: skip
    assert adoption(Layout(SaltScheme(8)), ready.record) is not None


def test_refresh_longer_than_the_lead_unset_or_guard_off_is_refused() -> None:
    plan = plan_append(
        PLAIN, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW, timestamp=READER, min_lead=60
    )
    ok = refresh_problem(plan.record, enabled=True, refresh=60.0, name="t")
    assert ok is None
    for enabled, refresh, why in (
        (True, 61.0, "longer than the lead"),
        (True, None, "record_refresh=None"),
        (False, 30.0, "guard is off"),
    ):
        problem = lead_problem(60.0, enabled=enabled, refresh=refresh, name="t")
        assert problem is not None
        assert why in problem
        assert "minimum lead of 60 s" in problem
    assert refresh_problem(PLAIN, enabled=True, refresh=None, name="t") is None


def test_the_horizon_is_the_last_read_plus_the_lead() -> None:
    plan = plan_append(
        PLAIN, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW, timestamp=READER, min_lead=60
    )
    epochs = plan.appended
    read_at = NOW.timestamp()
    assert beyond_horizon(epochs, k(1, NOW + dt.timedelta(seconds=59)), read_at, 60.0) is None
    why = beyond_horizon(epochs, k(1, NOW + dt.timedelta(seconds=60)), read_at, 60.0)
    assert why is not None
    assert "horizon 2026-11-29T00:01:00+00:00" in why
    assert beyond_horizon(epochs, b"no-time", read_at, 60.0) is None


def test_the_exact_value_regex_matches_only_that_value() -> None:
    """Every byte escaped (RE2's \\xHH), anchored at both ends."""
    value = b'{"a": [1, 2], "b": "x.*"}'
    pattern = exact_value_regex(value).decode()
    assert re.fullmatch(pattern.replace("\\A", "^").replace("\\z", "$"), value.decode())
    assert not re.fullmatch(pattern.replace("\\A", "^").replace("\\z", "$"), value.decode() + " ")


def test_an_append_keeps_the_fields_a_newer_release_wrote() -> None:
    newer = dataclasses.replace(PLAIN, extra=(("window", '{"state": "open"}'),))
    plan = plan_append(newer, SaltScheme(64), NOW + dt.timedelta(hours=1), NOW, timestamp=READER)
    assert plan.record.extra == newer.extra


def test_late_range_is_proven_only_for_a_leading_fixed_width_time_field() -> None:
    """Keys outside the range have a time before the start; other readers read everything."""
    from saltedtable._guard.resalt import late_range
    from saltedtable._scheme.cutoff import reversed_epoch_field

    at = 1_764_380_000_123_456
    first = epoch_field("ms", index=0, digits=13)
    start, end = late_range(first, at) or (None, None)
    assert (start, end) == (b"1764380000124", b"")
    assert first(b"1764380000123#x") < at <= first(start + b"#x")
    latest = reversed_epoch_field("ms", index=0, digits=19)
    start, end = late_range(latest, at) or (None, None)
    assert start == b""
    assert end is not None
    assert latest(end + b"#x") < at <= latest(b"%019d#x" % (int(end) - 1))
    assert late_range(epoch_field("ms", index=1, digits=13), at) is None  # not leading
    assert late_range(epoch_field("ms", index=0), at) is None  # no fixed width
    assert late_range(None, at) is None


def test_an_append_is_refused_when_unreadable_keys_live_in_the_last_epoch() -> None:
    """unreadable="last": an append would move every key without a time at once (at the
    append, not at its start) while running writers still place them in the old newest
    epoch, so both the first append that asks for it and a later one are refused."""
    at = NOW + dt.timedelta(hours=1)
    with pytest.raises(LayoutError, match="unreadable='last'"):
        plan_append(PLAIN, SaltScheme(64), at, NOW, timestamp=READER, unreadable="last")
    from saltedtable import Epoch, Epochs

    epochs = Epochs((Epoch(None, SaltScheme(8)), Epoch.at(NOW, SaltScheme(16))), READER, "last")
    stored = describe_layout(SaltScheme(16), epochs=epochs)
    with pytest.raises(LayoutError, match="unreadable='last'"):
        plan_append(stored, SaltScheme(64), at, NOW)
    # "first" and "error" stay allowed.
    plan_append(PLAIN, SaltScheme(64), at, NOW, timestamp=READER, unreadable="first")
