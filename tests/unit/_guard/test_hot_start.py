"""The hot field's start, lead and previous lists: parsing, writing, the split's rules (pure)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from saltedtable import LayoutError, SaltScheme, fields
from saltedtable._exceptions import SaltSchemeError
from saltedtable._guard.hot_record import HOT_FIELD, hot_layout_of, split_record, with_hot
from saltedtable._guard.record import describe_layout
from saltedtable._scheme.hot import HotLayout

SCHEME = SaltScheme(8, key_part=fields(1))
RECORD = describe_layout(SCHEME)
NOW = 1_800_000_000_000_000


def test_a_field_without_a_start_reads_as_lists_in_effect_since_stored() -> None:
    """Records written before splits had a start open unchanged."""
    old = with_hot(RECORD, HotLayout(SCHEME, rows={b"t1#a": 2}))
    found = hot_layout_of(old, SCHEME)
    assert found == HotLayout(SCHEME, rows={b"t1#a": 2})
    assert found is not None
    assert found.previous is None
    assert not found.pending(NOW)
    assert json.loads(dict(old.extra)[HOT_FIELD]) == {"parts": {}, "rows": {b"t1#a".hex(): 2}}


def test_a_split_stores_its_start_lead_and_previous_lists_and_reads_back_equal() -> None:
    first = split_record(RECORD, SCHEME, "part", b"t0", 4, now_micros=NOW)[2]
    before, after, record = split_record(
        first, SCHEME, "row", b"t1#a", 2, now_micros=NOW + 200_000_000
    )
    assert before.same_lists(HotLayout(SCHEME, parts={b"t0": 4}))
    # (the part listed first is still moving: the lists before the row's split keep its move)
    assert after.previous == HotLayout(SCHEME, parts={b"t0": 4}, moving={b"t0": 1})
    assert after.start_micros == NOW + 200_000_000 + 120_000_000
    assert after.min_lead_s == 120.0
    assert hot_layout_of(record, SCHEME) == after
    stored = json.loads(dict(record.extra)[HOT_FIELD])
    assert set(stored) == {"parts", "rows", "previous", "start_micros", "min_lead_s", "moving"}


def test_writers_place_by_the_previous_lists_until_the_start() -> None:
    after = split_record(RECORD, SCHEME, "row", b"t1#a", 4, now_micros=NOW, min_lead=10)[1]
    assert after.start_micros == NOW + 10_000_000
    assert after.writers_at(NOW) == HotLayout(SCHEME)
    assert after.writers_at(after.start_micros - 1).physical_keys(b"t1#a") == (
        SCHEME.salt_key(b"t1#a"),
    )
    assert after.writers_at(after.start_micros) is after
    assert len(after.writers_at(after.start_micros).physical_keys(b"t1#a")) == 4


def test_a_start_sooner_than_the_lead_names_the_earliest() -> None:
    with pytest.raises(SaltSchemeError, match="2027-01-15T08:02:00"):
        split_record(RECORD, SCHEME, "row", b"t1#a", 2, now_micros=NOW, at_micros=NOW + 1)


def test_a_split_while_another_is_pending_is_refused() -> None:
    record = split_record(RECORD, SCHEME, "row", b"t1#a", 2, now_micros=NOW)[2]
    with pytest.raises(LayoutError, match="previous hot-key split starts at"):
        split_record(record, SCHEME, "row", b"t1#b", 2, now_micros=NOW + 1)


def test_previous_lists_that_the_lists_do_not_extend_are_refused() -> None:
    with pytest.raises(SaltSchemeError, match="K may only rise"):
        HotLayout(
            SCHEME,
            rows={b"t1#a": 2},
            previous=HotLayout(SCHEME, rows={b"t1#a": 4}),
            start_micros=NOW,
        )
    with pytest.raises(SaltSchemeError, match="start_micros"):
        HotLayout(SCHEME, rows={b"t1#a": 2}, previous=HotLayout(SCHEME))


def test_a_malformed_start_is_a_layout_error() -> None:
    bad = with_hot(RECORD, HotLayout(SCHEME, rows={b"t1#a": 2}))
    text = json.loads(dict(bad.extra)[HOT_FIELD])
    text["start_micros"] = "soon"
    bad = dataclasses.replace(bad, extra=((HOT_FIELD, json.dumps(text)),))
    with pytest.raises(LayoutError, match="start_micros"):
        hot_layout_of(bad, SCHEME)
