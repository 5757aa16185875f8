"""Pure pieces behind parity with TableAsync: dict queries the client cannot build, and the
samples ``sample_row_keys(row_range=...)`` answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from saltedtable._read.query import as_query
from saltedtable._scheme.layout import samples_in_range

KEYS = st.binary(min_size=1, max_size=3)


@st.composite
def logical_samples(draw: st.DrawFn) -> list[tuple[bytes, int]]:
    """What ``Layout.logical_samples`` returns: sorted keys, running offsets, maybe an end."""
    keys = sorted(set(draw(st.lists(KEYS, max_size=12))))
    offsets = draw(st.lists(st.integers(0, 100), min_size=len(keys), max_size=len(keys)))
    running, out = 0, []
    for key, delta in zip(keys, offsets, strict=True):
        running += delta
        out.append((key, running))
    if draw(st.booleans()):
        out.append((b"", running + draw(st.integers(0, 100))))
    return out


@given(logical_samples(), st.none() | KEYS, st.none() | KEYS)
def test_samples_in_range_lie_inside_it_and_end_at_its_end(
    samples: list[tuple[bytes, int]], start: bytes | None, end: bytes | None
) -> None:
    """Keys strictly inside the range, in order, then its end; offsets count up from 0."""
    got = samples_in_range(samples, start, end)
    *inside, (last_key, _) = got
    assert last_key == (end or b"")
    assert all((not start or key > start) and (not end or key < end) for key, _ in inside)
    assert [key for key, _ in inside] == sorted(key for key, _ in inside)
    offsets = [offset for _, offset in got]
    assert offsets == sorted(offsets)
    assert all(offset >= 0 for offset in offsets)
    expected_inside = [
        key for key, _ in samples if key and (not start or key > start) and (not end or key < end)
    ]
    assert [key for key, _ in inside] == expected_inside


def test_samples_in_range_count_from_the_start_and_up_to_the_end() -> None:
    """Offsets are relative to the last sample at or before the start; the end gets the
    offset of the first sample at or after it."""
    samples = [(b"b", 10), (b"d", 25), (b"f", 40), (b"h", 70), (b"", 100)]
    assert samples_in_range(samples, b"c", b"g") == [(b"d", 15), (b"f", 30), (b"g", 60)]
    assert samples_in_range(samples, None, None) == [*samples[:-1], (b"", 100)]
    assert samples_in_range(samples, b"g", None) == [(b"h", 30), (b"", 60)]
    assert samples_in_range([], b"a", b"z") == [(b"z", 0)]


@pytest.mark.parametrize("field", ["table_name", "app_profile_id"])
def test_dict_query_naming_a_field_the_table_sets_is_a_type_error(field: str) -> None:
    """As in the client, which cannot build the request: TypeError, before anything is sent."""
    with pytest.raises(TypeError, match=field):
        as_query({field: "x"})


def test_dict_query_keeps_its_keys_ranges_limit_and_filter() -> None:
    """A dict of ReadRowsRequest fields becomes the same ReadRowsQuery."""
    query = as_query(
        {
            "rows": {
                "row_keys": [b"a"],
                "row_ranges": [{"start_key_open": b"b", "end_key_closed": b"c"}],
            },
            "rows_limit": 3,
            "filter": {"family_name_regex_filter": "cf"},
        }
    )
    assert query.row_keys == [b"a"]
    [row_range] = query.row_ranges
    assert (row_range.start_key, row_range.start_is_inclusive) == (b"b", False)
    assert (row_range.end_key, row_range.end_is_inclusive) == (b"c", True)
    assert query.limit == 3
    assert query.filter is not None
    assert query.filter._to_dict() == {"family_name_regex_filter": b"cf"}
