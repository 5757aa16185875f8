"""Forward-only migration (time cutoff): policy, readers, routing, planning, FakeTable reads.

The strongest check is the differential one at the end: a plain FakeTable and a FakeTable
holding a pre-existing unsalted (legacy) table plus rows written through
``SaltedTableAsync(cutoff=...)`` on both sides of the cutoff (late-arriving old rows
included) answer every read shape identically.

Tests named after the bugs they found (bounds with extra separators, unenforced
widths, unreadable fallbacks, sample_row_keys on the legacy side, ...) stay as
regression tests.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule, IncrementRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    FamilyNameRegexFilter,
    RowFilter,
    RowFilterChain,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import saltedtable._scheme.cutoff as cutoff_module
from saltedtable import (
    CutoffError,
    CutoffPolicy,
    KeyRange,
    Layout,
    LayoutError,
    ReadBudget,
    RowKeyError,
    SaltedTableAsync,
    SaltScheme,
    TimestampReader,
    big_endian_int,
    epoch_field,
    fields,
    iso8601_field,
    plan_reads,
    prefix_end,
    reversed_epoch_field,
)
from saltedtable._scheme.cutoff import LONG_MAX, to_micros
from saltedtable._scheme.layout import _legacy_gaps
from saltedtable._scheme.salt import SCHEME_ROW_KEY
from tests.fakes import ABANDONED, FakeTable, in_range

PROPERTY = settings(max_examples=80, deadline=None)

CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
CUTOFF_S = 1_704_067_200
CUTOFF_MS = CUTOFF_S * 1000
CUTOFF_US = CUTOFF_MS * 1000

S8 = SaltScheme(8)
MARKED8 = SaltScheme(8, marker=b"~")
SCHEMES = {
    "crc32-8": S8,
    "crc32-1": SaltScheme(1),
    "marker-8": MARKED8,
    "java-8": SaltScheme(8, hash="java"),
    "phoenix-16": SaltScheme(16, hash="phoenix"),
    "fields-4": SaltScheme(4, key_part=fields(1, b"#")),
}


def policy(
    reader: Callable[[bytes], int | dt.datetime] | None = None,
    unreadable: Any = "error",
    cutoff: dt.datetime = CUTOFF,
) -> CutoffPolicy:
    """A cutoff policy at CUTOFF reading a 13-digit millisecond field after the last '#'."""
    return CutoffPolicy(cutoff, reader or epoch_field("ms", digits=13), unreadable)


def bounded_policy(unreadable: Any = "error") -> CutoffPolicy:
    """As policy(), but the field is counted from the start, so ranges can be bounded."""
    return policy(epoch_field("ms", index=1, digits=13), unreadable)


def ms_key(lead: bytes, ms: int) -> bytes:
    """``lead#<13-digit epoch millis>``."""
    return lead + b"#%013d" % ms


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run on a fresh asyncio loop (sync hypothesis tests drive async code through this)."""
    return asyncio.run(fn())


# -- CutoffPolicy --------------------------------------------------------------


def test_naive_cutoff_is_refused() -> None:
    """A naive datetime cutoff is a CutoffError that says to give a timezone."""
    with pytest.raises(CutoffError, match="naive"):
        CutoffPolicy(dt.datetime(2024, 1, 1), epoch_field())


@pytest.mark.parametrize("value", [dt.date(2024, 1, 1), "2024-01-01T00:00:00Z", CUTOFF_S, None])
def test_cutoff_that_is_not_a_datetime_is_refused(value: object) -> None:
    """A date, a string, a number or None is not a cutoff instant."""
    with pytest.raises(CutoffError):
        CutoffPolicy(value, epoch_field())  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "Error", "LEGACY", "both", "fallback", None, 0, True])
def test_bad_unreadable_values_are_refused(value: object) -> None:
    """``unreadable`` is exactly one of 'error', 'legacy' or 'salted'."""
    with pytest.raises(CutoffError, match="unreadable"):
        CutoffPolicy(CUTOFF, epoch_field(), value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["error", "legacy", "salted"])
def test_good_unreadable_values_are_accepted(value: Any) -> None:
    """The three documented ``unreadable`` values construct a policy."""
    assert CutoffPolicy(CUTOFF, epoch_field(), value).unreadable == value


def test_timestamp_must_be_callable() -> None:
    """A non-callable timestamp reader is a CutoffError."""
    with pytest.raises(CutoffError, match="callable"):
        CutoffPolicy(CUTOFF, b"#")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cutoff",
    [
        CUTOFF,
        dt.datetime(2024, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        dt.datetime(2023, 12, 31, 19, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    ],
)
def test_cutoff_instant_is_independent_of_its_timezone(cutoff: dt.datetime) -> None:
    """The same instant written in any timezone gives the same cutoff in microseconds."""
    assert policy(cutoff=cutoff).cutoff_micros == CUTOFF_US


def test_to_micros_before_the_epoch_and_with_microseconds() -> None:
    """to_micros counts microseconds exactly, negative before 1970."""
    assert to_micros(dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)) == -1
    assert to_micros(dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC)) == 1_000_005


BAD_READERS: dict[str, Callable[[], object]] = {
    "epoch-unit": lambda: epoch_field("h"),
    "epoch-empty-sep": lambda: epoch_field("ms", sep=b""),
    "epoch-str-sep": lambda: epoch_field("ms", sep="#"),  # type: ignore[arg-type]
    "epoch-digits": lambda: epoch_field("ms", digits=0),
    "reversed-unit": lambda: reversed_epoch_field("minutes"),
    "reversed-digits": lambda: reversed_epoch_field(digits=-1),
    "iso-empty-sep": lambda: iso8601_field(sep=b""),
    "int-width": lambda: big_endian_int(width=0),
    "int-unit": lambda: big_endian_int(unit="ns"),
}


@pytest.mark.parametrize("name", sorted(BAD_READERS))
def test_bad_reader_configuration_is_refused(name: str) -> None:
    """Readers refuse units, separators and widths that cannot work, with CutoffError."""
    with pytest.raises(CutoffError):
        BAD_READERS[name]()


def test_ready_made_readers_with_bounds_are_timestamp_readers() -> None:
    """Readers that can bound a range satisfy the TimestampReader protocol."""
    for reader in (epoch_field(), reversed_epoch_field(), big_endian_int()):
        assert isinstance(reader, TimestampReader)


# -- readers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "field", "micros"),
    [
        ("s", b"1704067200", CUTOFF_US),
        ("ms", b"1704067200123", CUTOFF_US + 123_000),
        ("us", b"1704067200123456", CUTOFF_US + 123_456),
        ("s", b"0", 0),
        ("s", b"0000000007", 7_000_000),
    ],
)
def test_epoch_field_reads_each_unit(unit: str, field: bytes, micros: int) -> None:
    """epoch_field reads decimal seconds, milliseconds or microseconds after the last '#'."""
    assert epoch_field(unit)(b"user#7#" + field) == micros
    assert epoch_field(unit, sep=b"/")(b"a/" + field) == micros
    assert epoch_field(unit)(field) == micros  # no separator: the whole key is the field


def test_epoch_field_reads_the_field_at_its_index() -> None:
    """``index`` picks the field: 0 = first, 1 = second, -2 = second from last."""
    key = b"1704067200#user#x"
    assert epoch_field("s", index=0)(key) == CUTOFF_US
    assert epoch_field("s", index=-3)(key) == CUTOFF_US
    assert epoch_field("s", index=1, sep=b"|")(b"u|1704067200|x") == CUTOFF_US


@pytest.mark.parametrize(
    "key",
    [
        b"user#",
        b"user#abc",
        b"user#-5",
        b"user#+5",
        b"user# 5",
        b"user#1_000",
        b"user#1.5",
        b"user#0x10",
        b"user#\xd9\xa1",  # Arabic-Indic digit one: int() would take it, a key must not
        b"",
    ],
)
def test_epoch_field_raises_value_error_on_bad_keys(key: bytes) -> None:
    """A field that is not plain ASCII decimal digits is a ValueError."""
    with pytest.raises(ValueError, match="decimal"):
        epoch_field()(key)


def test_epoch_field_missing_index_is_a_value_error() -> None:
    """A key with fewer fields than ``index`` asks for is a ValueError."""
    with pytest.raises(ValueError, match="no field"):
        epoch_field(index=3)(b"a#1#2")


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(0, 10**11),
    lead=st.binary(max_size=6).filter(lambda b: b"#" not in b),
    unit=st.sampled_from(["s", "ms", "us"]),
)
def test_epoch_field_round_trips(seconds: int, lead: bytes, unit: str) -> None:
    """Any non-negative integer written after the separator reads back times its unit."""
    scale = {"s": 1_000_000, "ms": 1000, "us": 1}[unit]
    assert epoch_field(unit)(lead + b"#" + str(seconds).encode()) == seconds * scale


def test_reversed_epoch_field_reads_long_max_minus_millis() -> None:
    """The Java latest-first layout ``Long.MAX_VALUE - millis`` reads back the millis."""
    millis = CUTOFF_MS + 42
    key = b"sensor9#" + str(LONG_MAX - millis).encode()
    assert LONG_MAX == 9_223_372_036_854_775_807
    assert reversed_epoch_field()(key) == millis * 1000
    assert reversed_epoch_field("s", base=10**10)(b"k#%d" % (10**10 - CUTOFF_S)) == CUTOFF_US


def test_reversed_epoch_field_orders_latest_first() -> None:
    """A later time gives a smaller field, so it sorts first."""
    older = b"s#%019d" % (LONG_MAX - CUTOFF_MS)
    newer = b"s#%019d" % (LONG_MAX - CUTOFF_MS - 1)
    assert newer < older
    assert reversed_epoch_field()(newer) > reversed_epoch_field()(older)


@pytest.mark.parametrize("key", [b"s#", b"s#x", b"s#-1", b"s"])
def test_reversed_epoch_field_raises_value_error_on_bad_keys(key: bytes) -> None:
    """A reversed field that is not decimal is a ValueError."""
    with pytest.raises(ValueError, match="decimal"):
        reversed_epoch_field()(key)


@pytest.mark.parametrize(
    ("field", "micros"),
    [
        (b"2024-01-01T00:00:00+00:00", CUTOFF_US),
        (b"2024-01-01T00:00:00Z", CUTOFF_US),
        (b"2024-01-01T02:00:00+02:00", CUTOFF_US),
        (b"2023-12-31T19:00:00-05:00", CUTOFF_US),
        (b"2024-01-01T00:00:00.000123+00:00", CUTOFF_US + 123),
        (b"2024-01-01T00:00:00", CUTOFF_US),  # no offset: UTC by default
        (b"2024-01-01", CUTOFF_US),
    ],
)
def test_iso8601_field_reads_with_and_without_offset(field: bytes, micros: int) -> None:
    """ISO-8601 fields with an offset are converted to UTC; without one they are UTC."""
    assert iso8601_field()(b"user1#" + field) == micros


def test_iso8601_field_without_offset_is_unreadable_when_not_assuming_utc() -> None:
    """With ``assume_utc=False`` a field without an offset is a ValueError; one with is fine."""
    reader = iso8601_field(assume_utc=False)
    with pytest.raises(ValueError, match="offset"):
        reader(b"u#2024-01-01T00:00:00")
    assert reader(b"u#2024-01-01T00:00:00+00:00") == CUTOFF_US


@pytest.mark.parametrize("key", [b"u#yesterday", b"u#", b"u#2024-13-01T00:00:00Z", b"u#\xff\xfe"])
def test_iso8601_field_raises_value_error_on_bad_keys(key: bytes) -> None:
    """Non-ISO text, an empty field, an impossible date or non-ASCII bytes: ValueError."""
    with pytest.raises(ValueError, match="ISO-8601"):
        iso8601_field()(key)


def test_big_endian_int_reads_at_positive_and_negative_offsets() -> None:
    """big_endian_int reads ``width`` bytes at ``offset`` (from the end when negative)."""
    ts = CUTOFF_MS.to_bytes(8, "big")
    assert big_endian_int()(ts + b"#dev") == CUTOFF_US
    assert big_endian_int(offset=4)(b"dev#" + ts + b"#x") == CUTOFF_US
    assert big_endian_int(offset=-8)(b"dev#" + ts) == CUTOFF_US
    assert big_endian_int(offset=-10)(b"dev#" + ts + b"#x") == CUTOFF_US
    assert big_endian_int(width=4, unit="s")(CUTOFF_S.to_bytes(4, "big")) == CUTOFF_US
    assert big_endian_int(width=8, unit="us")(CUTOFF_US.to_bytes(8, "big")) == CUTOFF_US


@pytest.mark.parametrize(
    ("reader", "key"),
    [
        (big_endian_int(), b"short"),
        (big_endian_int(offset=4), b"dev#1234567"),
        (big_endian_int(offset=-8), b"1234567"),
        (big_endian_int(offset=-10, width=4), b"12345678"),
    ],
)
def test_big_endian_int_raises_value_error_on_short_keys(
    reader: big_endian_int, key: bytes
) -> None:
    """A key without ``width`` bytes at ``offset`` is a ValueError."""
    with pytest.raises(ValueError, match="byte integer"):
        reader(key)


def test_callable_reader_returning_int_or_aware_datetime() -> None:
    """Any callable works: ints are microseconds, aware datetimes are converted."""
    as_int = policy(lambda key: int(key[-4:]) * 1_000_000)
    as_dt = policy(lambda key: dt.datetime.fromtimestamp(int(key[-10:]), dt.UTC))
    assert as_int.key_time(b"k#1234") == 1_234_000_000
    assert as_dt.key_time(b"k#1704067200") == CUTOFF_US
    assert as_dt.side_of(b"k#1704067200") == "salted"
    assert as_dt.side_of(b"k#1704067199") == "legacy"


@pytest.mark.parametrize("value", [1.5, "1704067200", True, None, dt.datetime(2024, 1, 1)])
def test_callable_reader_returning_anything_else_is_unreadable(value: object) -> None:
    """A float, str, bool, None or naive datetime from a reader makes the key unreadable."""
    pol = policy(lambda key: value)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=r"need int or datetime|naive"):
        pol.key_time(b"k")
    with pytest.raises(CutoffError, match="cannot read a timestamp"):
        pol.side_of(b"k")
    assert policy(lambda key: value, "legacy").side_of(b"k") == "legacy"  # type: ignore[arg-type, return-value]


# -- routing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta_us", "side"),
    [(-1, "legacy"), (0, "salted"), (1, "salted"), (-86_400_000_000, "legacy")],
)
def test_locate_routes_by_key_time_at_the_boundary(delta_us: int, side: str) -> None:
    """key time >= cutoff: salted; < cutoff: legacy; exactly at the cutoff: salted."""
    key = b"dev#%d" % (CUTOFF_US + delta_us)
    layout = Layout(S8, policy(epoch_field("us")))
    bucket, physical = layout.locate(key)
    if side == "salted":
        assert (bucket, physical) == S8.locate(key)
    else:
        assert (bucket, physical) == (None, key)
    assert layout.salter()(key) == physical  # the write path's salter routes alike


@PROPERTY
@given(
    cutoff_us=st.integers(-(10**15), 10**17),
    key_us=st.integers(0, 10**17),
    scheme_name=st.sampled_from(sorted(SCHEMES)),
)
def test_locate_depends_only_on_key_time_and_cutoff(
    cutoff_us: int, key_us: int, scheme_name: str
) -> None:
    """Routing is a function of (key time, cutoff) alone: past, present or far future."""
    cutoff = cutoff_module._EPOCH + dt.timedelta(microseconds=cutoff_us)
    scheme = SCHEMES[scheme_name]
    key = b"dev#%d" % key_us
    bucket, physical = Layout(scheme, policy(epoch_field("us"), cutoff=cutoff)).locate(key)
    if key_us >= cutoff_us:
        assert (bucket, physical) == scheme.locate(key)
    else:
        assert (bucket, physical) == (None, key)


def test_routing_never_reads_the_clock() -> None:
    """The cutoff module is pure: no clock calls; late old keys go legacy, future keys salted."""
    source = inspect.getsource(cutoff_module)
    for clock in ("now(", "utcnow(", "today(", "time.time", "monotonic"):
        assert clock not in source
    layout = Layout(S8, policy(cutoff=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)))
    assert layout.locate(ms_key(b"late", 946_684_799_999))[0] is None  # 1999, written today
    future = Layout(S8, policy(cutoff=dt.datetime(2200, 1, 1, tzinfo=dt.UTC)))
    assert future.locate(ms_key(b"now", CUTOFF_MS))[0] is None  # "now" is before 2200


def test_unreadable_key_raises_cutoff_error_by_default() -> None:
    """With ``unreadable='error'`` a key without a timestamp is refused with the key named."""
    with pytest.raises(CutoffError, match=r"b'meta'.*cutoff 2024-01-01T00:00:00\+00:00"):
        Layout(S8, policy()).locate(b"meta")


@pytest.mark.parametrize(("fallback", "expected"), [("legacy", None), ("salted", S8.bucket_of)])
def test_unreadable_key_goes_to_the_declared_side(fallback: str, expected: Any) -> None:
    """With ``unreadable='legacy'|'salted'`` every unreadable key goes to that side."""
    layout = Layout(S8, policy(unreadable=fallback))
    for key in (b"meta", b"config#x", b"#"):
        bucket, physical = layout.locate(key)
        if expected is None:
            assert (bucket, physical) == (None, key)
        else:
            assert (bucket, physical) == S8.locate(key)


@pytest.mark.parametrize(
    ("scheme", "key"),
    [
        (S8, b"3-abc#1500000000000"),
        (S8, b"7-#0000000000001"),
        (SaltScheme(16), b"07-x#0000000000001"),
        (SaltScheme(8, hash="java"), b"-3-abc#0000000000001"),
        (SaltScheme(8, hash="java"), b"0-abc#0000000000001"),
        (SaltScheme(16, hash="phoenix"), b"\x03abc#0000000000001"),
        (MARKED8, b"~3-abc#0000000000001"),
    ],
)
def test_legacy_key_that_looks_salted_is_refused(scheme: SaltScheme, key: bytes) -> None:
    """A pre-cutoff key starting with a salt prefix is a RowKeyError that names the marker."""
    with pytest.raises(RowKeyError, match="marker"):
        Layout(scheme, policy()).locate(key)


@pytest.mark.parametrize(
    "key", [b"3-abc#1500000000000", b"07-x#0000000000001", b"-3-abc#0000000000001"]
)
def test_legacy_key_that_looks_salted_is_accepted_with_a_marker(key: bytes) -> None:
    """A marker moves the salted key space away, so such legacy keys stay where they are."""
    assert Layout(MARKED8, policy()).locate(key) == (None, key)
    assert Layout(SaltScheme(8, hash="java", marker=b"~"), policy()).locate(key) == (None, key)


def test_look_alike_keys_after_the_cutoff_are_simply_salted() -> None:
    """A post-cutoff key that looks salted is salted again, which is unambiguous."""
    key = ms_key(b"3-abc", CUTOFF_MS)
    assert Layout(S8, policy()).locate(key) == S8.locate(key)


@PROPERTY
@given(
    lead=st.binary(min_size=1, max_size=6),
    ms=st.integers(CUTOFF_MS - 10**6, CUTOFF_MS + 10**6),
    scheme_name=st.sampled_from(sorted(SCHEMES)),
)
def test_to_logical_inverts_locate_on_both_sides(lead: bytes, ms: int, scheme_name: str) -> None:
    """Layout.to_logical(locate(k)[1]) == k for every storable key, legacy or salted."""
    scheme = SCHEMES[scheme_name]
    layout = Layout(scheme, policy())
    key = ms_key(lead, ms)
    if scheme.hash == "java":
        assume(_is_utf8(key))
    try:
        bucket, physical = layout.locate(key)
    except RowKeyError:
        assert ms < CUTOFF_MS
        assert scheme.has_prefix(key)  # only look-alike legacy keys are refused
        return
    assert (bucket is None) == (ms < CUTOFF_MS)
    assert layout.to_logical(physical) == key


def test_to_logical_without_cutoff_refuses_unsalted_keys() -> None:
    """Without a cutoff every physical key must carry a salt prefix."""
    with pytest.raises(RowKeyError):
        Layout(S8).to_logical(b"plain")
    assert Layout(S8, policy()).to_logical(b"plain") == b"plain"


def _is_utf8(key: bytes) -> bool:
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- time bounds ---------------------------------------------------------------

_LEAD = st.binary(min_size=1, max_size=4).map(lambda b: bytes(b"ab-\x00\xff"[x % 5] for x in b))


@PROPERTY
@given(
    lead=_LEAD,
    other_lead=_LEAD,
    times=st.lists(st.integers(0, 10**10 - 1), min_size=3, max_size=3),
    same=st.booleans(),
)
def test_epoch_field_bounds_contain_every_key_between(
    lead: bytes, other_lead: bytes, times: list[int], same: bool
) -> None:
    """For fixed-width keys start <= k <= end, time_bounds(start, end) contains k's time."""
    assume(b"#" not in lead and b"#" not in other_lead)
    reader = epoch_field("s", index=1, digits=10)
    a, t, b = sorted(times)
    start, end = lead + b"#%010d" % a, lead + b"#%010d" % b
    key = (lead if same else other_lead) + b"#%010d" % t
    assume(start <= key <= end)
    bounds = reader.time_bounds(start, end)
    assert bounds is not None
    assert bounds[0] <= reader(key) <= bounds[1]


@PROPERTY
@given(
    lead=_LEAD,
    times=st.lists(st.integers(0, 10**13), min_size=3, max_size=3),
)
def test_reversed_field_bounds_contain_every_key_between(lead: bytes, times: list[int]) -> None:
    """The same for Long.MAX_VALUE - millis fields: the bounds flip, and still hold."""
    assume(b"#" not in lead)
    reader = reversed_epoch_field(index=1, digits=19)
    keys = sorted(lead + b"#%019d" % (LONG_MAX - ms) for ms in times)
    start, key, end = keys
    bounds = reader.time_bounds(start, end)
    assert bounds is not None
    assert bounds[0] <= reader(key) <= bounds[1]
    assert bounds == (reader(end), reader(start))


_BYTES = st.binary(max_size=12).map(lambda b: bytes(b"\x00\x01\x7f\x80\xfe\xff"[x % 6] for x in b))


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(_BYTES, min_size=3, max_size=3),
    offset=st.integers(0, 3),
    width=st.integers(1, 4),
)
def test_big_endian_int_bounds_contain_every_key_between(
    keys: list[bytes], offset: int, width: int
) -> None:
    """For any start <= k <= end with a readable k, the bounds (when given) contain k's time."""
    reader = big_endian_int(offset=offset, width=width, unit="us")
    start, key, end = sorted(keys)
    assume(len(key) >= offset + width)
    bounds = reader.time_bounds(start, end)
    if bounds is not None:
        assert bounds[0] <= reader(key) <= bounds[1]


def test_time_bounds_are_none_when_nothing_is_proven() -> None:
    """Different leading parts, missing widths or negative offsets give no bounds."""
    assert epoch_field().time_bounds(b"a#1", b"b#2") is None  # no digits declared
    assert epoch_field(digits=1).time_bounds(b"a#1", b"b#2") is None  # different leads
    assert epoch_field(digits=2).time_bounds(b"a#1", b"a#22") is None  # a short field
    assert epoch_field(digits=2).time_bounds(b"a#11", b"a#22") is None  # last field: no proof
    assert epoch_field("s", digits=2, index=0).time_bounds(b"11#a", b"22#a") == (
        11_000_000,
        22_000_000,
    )
    assert big_endian_int(offset=-8).time_bounds(b"x" * 9, b"y" * 9) is None
    assert big_endian_int(offset=2).time_bounds(b"ab\x00", b"ac\x00") is None


def test_unbounded_ranges_are_both_sides() -> None:
    """An open-ended range can hold any time: both sides are possible."""
    pol = policy()
    assert pol.sides_of_range(b"", b"") == (True, True)
    assert pol.sides_of_range(ms_key(b"d", 0), b"") == (True, True)
    assert pol.sides_of_range(b"", ms_key(b"d", 0)) == (True, True)


# -- plan_reads with a cutoff ------------------------------------------------------


def _query(*ranges: RowRange, keys: Sequence[bytes] = (), **kw: Any) -> ReadRowsQuery:
    return ReadRowsQuery(row_keys=list(keys), row_ranges=list(ranges), **kw)


@PROPERTY
@given(
    keys=st.lists(
        st.tuples(st.sampled_from([b"d0", b"d1", b"d12"]), st.integers(-5, 5)),
        min_size=1,
        max_size=12,
    ),
    scheme_name=st.sampled_from(sorted(SCHEMES)),
)
def test_point_keys_go_to_exactly_one_side(keys: list[tuple[bytes, int]], scheme_name: str) -> None:
    """Each point key is read on exactly one side: legacy (as is) or its salted bucket."""
    scheme = SCHEMES[scheme_name]
    logical = [ms_key(lead, CUTOFF_MS + d) for lead, d in keys]
    plan = plan_reads(_query(keys=logical), scheme, policy())
    seen: dict[bytes, list[int | None]] = {}
    for sub in plan.subqueries:
        assert sub.ranges == ()
        for physical in sub.keys:
            seen.setdefault(physical[len(sub.prefix) :], []).append(sub.bucket)
    for key in logical:
        expected = None if int(key[-13:]) < CUTOFF_MS else scheme.bucket_of(key)
        assert seen[key] == [expected]
    assert sum(len(sub.keys) for sub in plan.subqueries) == len(set(logical))


BEFORE = RowRange(ms_key(b"dev1", CUTOFF_MS - 10_000), ms_key(b"dev1", CUTOFF_MS - 1), True, True)
AFTER = RowRange(ms_key(b"dev1", CUTOFF_MS), ms_key(b"dev1", CUTOFF_MS + 10_000), True, True)
ACROSS = RowRange(ms_key(b"dev1", CUTOFF_MS - 1), ms_key(b"dev1", CUTOFF_MS), True, True)


@pytest.mark.parametrize("scheme_name", sorted(SCHEMES))
def test_range_before_the_cutoff_reads_only_the_legacy_side(scheme_name: str) -> None:
    """Both bounds before the cutoff (same lead, declared width): only bucket None is read."""
    plan = plan_reads(_query(BEFORE), SCHEMES[scheme_name], bounded_policy())
    assert plan.buckets == (None,)
    assert plan.subqueries[0].ranges == (KeyRange.from_row_range(BEFORE),)


@pytest.mark.parametrize("scheme_name", sorted(SCHEMES))
def test_range_after_the_cutoff_reads_only_the_salted_side(scheme_name: str) -> None:
    """Both bounds at or after the cutoff: no legacy sub-query when unreadable keys go salted.

    With unreadable="error" the legacy side may hold keys whose time is
    unreadable, so it is still read: skipping it would be unsound.
    """
    scheme = SCHEMES[scheme_name]
    single = scheme.key_part is not None  # fields(1): one lead, one bucket
    expected = (scheme.bucket_of(b"dev1"),) if single else scheme.bucket_ids
    assert plan_reads(_query(AFTER), scheme, bounded_policy("salted")).buckets == expected
    assert plan_reads(_query(AFTER), scheme, bounded_policy()).buckets == (None, *expected)


@pytest.mark.parametrize("scheme_name", sorted(SCHEMES))
@pytest.mark.parametrize(
    "rng",
    [
        ACROSS,
        RowRange(),
        RowRange(ms_key(b"dev1", CUTOFF_MS + 5)),
        RowRange(end_key=ms_key(b"dev1", CUTOFF_MS - 5)),
        RowRange(b"dev1#", b"dev1$"),
        RowRange(ms_key(b"dev1", 0), ms_key(b"dev2", 0)),
    ],
    ids=["across", "unbounded", "start-only", "end-only", "prefix", "two-leads"],
)
def test_ranges_without_a_time_proof_read_both_sides(scheme_name: str, rng: RowRange) -> None:
    """Straddling, unbounded, half-bounded, prefix and cross-lead ranges read both sides."""
    plan = plan_reads(_query(rng), SCHEMES[scheme_name], policy())
    assert plan.buckets[0] is None
    assert len(plan.buckets) > 1


def test_reader_without_time_bounds_reads_both_sides() -> None:
    """iso8601_field and plain callables cannot bound a range: both sides are read."""
    for reader in (iso8601_field(), lambda key: 0, epoch_field("ms")):
        assert plan_reads(_query(BEFORE), S8, policy(reader)).buckets == (None, *range(8))


def test_legacy_side_keeps_the_logical_filter_and_buckets_rewrite_it() -> None:
    """The legacy sub-query sends the caller's row-key regex; salted ones get it prefixed."""
    regex = RowKeyRegexFilter(b"dev1#.*")
    plan = plan_reads(ReadRowsQuery(row_filter=regex, limit=3), S8, policy())
    legacy, *salted = plan.subqueries
    assert legacy.bucket is None
    assert legacy.prefix == b""
    assert legacy.row_filter is regex
    for sub in salted:
        assert isinstance(sub.row_filter, RowKeyRegexFilter)
        assert sub.row_filter.regex.startswith(b"\\x")
    assert plan.limit == 3
    assert "legacy side (unsalted keys, before the cutoff)" in plan.explain()


def test_full_scan_legacy_side_is_the_complement_of_the_salted_key_space() -> None:
    """SaltScheme(8): (-inf,'0-'), ['0.','1-'), ..., ['7.', +inf) minus the reserved layout row."""
    legacy = plan_reads(ReadRowsQuery(), S8, policy()).subqueries[0]
    bounds = [(r.start, r.end) for r in legacy.ranges]
    expected = [(b"", b"0-")] + [(b"%d." % i, b"%d-" % (i + 1)) for i in range(7)]
    expected += [(b"7.", SCHEME_ROW_KEY), (prefix_end(SCHEME_ROW_KEY), b"")]
    assert bounds == expected


_RANGE_KEYS = st.one_of(
    st.binary(min_size=1, max_size=5).map(
        lambda b: bytes(b"0137-.~\x00\x03\x0f\x10\xff"[x % 12] for x in b)
    ),
    st.binary(min_size=1, max_size=5),
)

GAP_SCHEMES = {
    "crc32-8": S8,
    "crc32-16": SaltScheme(16),
    "crc32-1": SaltScheme(1),
    "java-8": SaltScheme(8, hash="java"),
    "java-12": SaltScheme(12, hash="java"),
    "phoenix-16": SaltScheme(16, hash="phoenix"),
    "phoenix-256": SaltScheme(256, hash="phoenix"),
    "marker-8": MARKED8,
    "marker-java": SaltScheme(8, hash="java", marker=b"~"),
    "marker-phoenix": SaltScheme(16, hash="phoenix", marker=b"\x03"),
    "sep-8": SaltScheme(8, separator=b"::"),
}


@settings(max_examples=150, deadline=None)
@given(
    scheme_name=st.sampled_from(sorted(GAP_SCHEMES)),
    start=st.one_of(st.just(b""), _RANGE_KEYS),
    end=st.one_of(st.just(b""), _RANGE_KEYS),
    closed=st.tuples(st.booleans(), st.booleans()),
    probes=st.lists(_RANGE_KEYS, max_size=20),
)
def test_legacy_ranges_never_meet_the_salted_key_space(
    scheme_name: str,
    start: bytes,
    end: bytes,
    closed: tuple[bool, bool],
    probes: list[bytes],
) -> None:
    """Legacy sub-query ranges avoid every salted prefix range, yet cover every legacy key."""
    scheme = GAP_SCHEMES[scheme_name]
    if start and end and start > end:
        start, end = end, start
    rng = KeyRange(start, closed[0], end, closed[1])
    assume(not rng.is_empty)
    plan = plan_reads(_query(rng.to_row_range()), scheme, policy(lambda key: 0))
    legacy = [s for s in plan.subqueries if s.bucket is None]
    pieces = legacy[0].ranges if legacy else ()
    holes = _holes(scheme)
    for piece in pieces:
        assert not piece.is_empty
        for hole in holes:
            assert piece.intersect(hole) is None, (piece, hole)
    edges = [p + b"x" for p in scheme.prefixes[:3]] + [prefix_end(p) for p in scheme.prefixes[-2:]]
    edges += [SCHEME_ROW_KEY, SCHEME_ROW_KEY + b"x", prefix_end(SCHEME_ROW_KEY)]
    for key in [*probes, *edges]:
        if not key:
            continue
        in_legacy = any(in_range(key, p.to_row_range()) for p in pieces)
        legacy_key = in_range(key, rng.to_row_range()) and not _in_a_hole(scheme, key)
        assert in_legacy == legacy_key, (key, pieces)


def _holes(scheme: SaltScheme) -> list[KeyRange]:
    """What the legacy side must never read: every salted prefix range and the layout row."""
    holes = [KeyRange(p, True, prefix_end(p), False) for p in scheme.prefixes]
    if not scheme.has_prefix(SCHEME_ROW_KEY):
        holes.append(KeyRange(SCHEME_ROW_KEY, True, prefix_end(SCHEME_ROW_KEY), False))
    return holes


def _in_a_hole(scheme: SaltScheme, key: bytes) -> bool:
    return scheme.has_prefix(key) or key.startswith(SCHEME_ROW_KEY)


@pytest.mark.parametrize("scheme_name", sorted(GAP_SCHEMES))
def test_legacy_gaps_and_prefix_ranges_tile_the_key_space(scheme_name: str) -> None:
    """Gaps and holes (prefix ranges, layout row), sorted together, tile (-inf, +inf)."""
    scheme = GAP_SCHEMES[scheme_name]
    pieces = sorted(
        [(g.start, g.end) for g in _legacy_gaps(scheme)]
        + [(h.start, h.end) for h in _holes(scheme)]
    )
    assert pieces[0][0] == b""
    assert pieces[-1][1] == b""
    for (_, end), (start, _) in itertools.pairwise(pieces):
        assert end == start


# -- the differential harness on FakeTable ----------------------------------------

RowData = dict[bytes, list[tuple[str, bytes, int, bytes]]]
Shape = list[tuple[bytes, list[tuple[bytes, str, bytes, int, bytes, tuple[str, ...]]]]]


def shape(rows: Sequence[Row]) -> Shape:
    """Everything a caller can see of rows: keys, and each cell with its own row key."""
    return [
        (
            r.row_key,
            [
                (c.row_key, c.family, c.qualifier, c.timestamp_micros, c.value, tuple(c.labels))
                for c in r.cells
            ],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class KeyFormat:
    """How a timestamp is written into a key, and the reader for it."""

    name: str
    make: Callable[[bytes, int], bytes]
    reader: Callable[[bytes], int | dt.datetime]


def _iso(ms: int) -> bytes:
    instant = cutoff_module._EPOCH + dt.timedelta(milliseconds=ms)
    return instant.isoformat(timespec="milliseconds").encode()


FORMATS = {
    "epoch-ms": KeyFormat("epoch-ms", ms_key, epoch_field("ms", digits=13)),
    "epoch-ms-nodigits": KeyFormat("epoch-ms-nodigits", ms_key, epoch_field("ms")),
    "reversed": KeyFormat(
        "reversed",
        lambda lead, ms: lead + b"#%019d" % (LONG_MAX - ms),
        reversed_epoch_field(digits=19),
    ),
    "iso8601": KeyFormat("iso8601", lambda lead, ms: lead + b"#" + _iso(ms), iso8601_field()),
    "big-endian": KeyFormat(
        "big-endian", lambda lead, ms: lead + b"#" + ms.to_bytes(8, "big"), big_endian_int(-8)
    ),
}

LEADS = [b"dev0", b"dev1", b"dev12", b"dev2"]
# Millisecond offsets from the cutoff: the boundary itself and either side of it.
OFFSETS = st.one_of(
    st.sampled_from([-86_400_000, -1000, -1, 0, 1, 1000, 86_400_000]),
    st.integers(-5000, 5000),
)


@dataclass
class Scenario:
    """Logical rows by how they arrive: legacy (raw, before the policy) and through the table."""

    legacy: RowData
    new: RowData  # key time >= cutoff, written after the policy is on
    late: RowData  # key time < cutoff, written after the policy is on
    meta: RowData  # no readable time (only with unreadable="legacy")
    deleted: list[bytes]
    universe: list[bytes]  # present and missing keys to query


@st.composite
def scenarios(draw: st.DrawFn, fmt: KeyFormat, with_meta: bool) -> Scenario:
    """Legacy rows, new rows, late old rows (some landing on legacy rows), deletions."""

    def cells(key: bytes, value: bytes) -> list[tuple[str, bytes, int, bytes]]:
        out = [("f1", b"q", 1000, value + key[-4:])]
        if draw(st.booleans()):
            out.append(("f2", b"r", 2000, value))
        return out

    def keys(before: bool, n: int) -> list[bytes]:
        found = draw(st.lists(st.tuples(st.sampled_from(LEADS), OFFSETS), max_size=n))
        ms = [(lead, CUTOFF_MS + (min(d, -1 - d) if before else max(d, -d))) for lead, d in found]
        return [fmt.make(lead, t) for lead, t in ms]

    legacy = {k: cells(k, b"old") for k in keys(True, 10)}
    new = {k: cells(k, b"new") for k in keys(False, 10)}
    late_keys = keys(True, 6)
    if legacy and draw(st.booleans()):
        late_keys.append(draw(st.sampled_from(sorted(legacy))))  # a late cell on a legacy row
    late = {k: [("f1", b"late", 3000, b"late")] for k in late_keys}
    meta: RowData = {}
    if with_meta:
        meta = {b"meta%d" % i: [("f1", b"q", 1000, b"m")] for i in range(draw(st.integers(0, 2)))}
    present = sorted({*legacy, *new, *late, *meta})
    deleted = draw(st.lists(st.sampled_from(present), max_size=3, unique=True)) if present else []
    missing = [fmt.make(b"dev7", CUTOFF_MS - 1), fmt.make(b"dev7", CUTOFF_MS)]
    missing += keys(True, 2) + keys(False, 2)
    return Scenario(legacy, new, late, meta, deleted, sorted({*present, *missing}))


@st.composite
def row_ranges(draw: st.DrawFn, universe: list[bytes]) -> RowRange:
    """A RowRange of any boundedness over keys of the scenario and prefix-like bounds."""
    fixed = [b"dev", b"dev1", b"dev1#", b"dev1$", b"dev12#", b"dev2", b"meta"]
    bounds = st.one_of(st.none(), st.sampled_from(universe or fixed), st.sampled_from(fixed))
    start, end = draw(bounds), draw(bounds)
    if start is not None and end is not None and start > end:
        start, end = end, start
    return RowRange(start, end, draw(st.booleans()), draw(st.booleans()))


FILTERS: list[RowFilter | None] = [
    None,
    RowKeyRegexFilter(b"dev1#.*"),
    RowKeyRegexFilter(b".*2.*"),
    RowKeyRegexFilter(b"dev(0|12)#.*|meta.*"),
    CellsRowLimitFilter(1),
    FamilyNameRegexFilter(b"f2"),
    RowFilterChain([FamilyNameRegexFilter(b"f1"), StripValueTransformerFilter(True)]),
]


@st.composite
def queries(draw: st.DrawFn, universe: list[bytes]) -> ReadRowsQuery:
    """Point sets, ranges, both or nothing; a limit; a filter (row-key regexes included)."""
    use_points = bool(universe) and draw(st.booleans())
    points = draw(st.lists(st.sampled_from(universe), max_size=6)) if use_points else []
    ranges = draw(st.lists(row_ranges(universe), max_size=3)) if draw(st.booleans()) else []
    return ReadRowsQuery(
        row_keys=points,
        row_ranges=ranges,
        limit=draw(st.one_of(st.none(), st.integers(1, 8))),
        row_filter=draw(st.sampled_from(FILTERS)),
    )


def _entries(data: RowData) -> list[RowMutationEntry]:
    return [
        RowMutationEntry(key, [SetCell(f, q, v, ts) for f, q, ts, v in cells])
        for key, cells in data.items()
    ]


@dataclass
class Mirror:
    """The same logical history applied to a plain table and, through the cutoff, to ``fake``."""

    plain: FakeTable
    fake: FakeTable
    table: SaltedTableAsync


async def build_mirror(
    scheme: SaltScheme, pol: CutoffPolicy, sc: Scenario, budget: int = 20_000
) -> Mirror:
    """Load legacy rows raw, open with the policy, then write through every write method."""
    plain, fake = FakeTable(), FakeTable()
    for key, cells in sc.legacy.items():  # the pre-existing table, unsalted
        for family, qualifier, ts, value in cells:
            plain.set_cell(key, family, qualifier, value, ts)
            fake.set_cell(key, family, qualifier, value, ts)
    table = await SaltedTableAsync.open(fake, scheme, cutoff=pol, budget=ReadBudget(rows=budget))
    new = _entries(sc.new)
    half = len(new) // 2
    await table.bulk_mutate_rows(new[:half])
    async with table.mutations_batcher() as batcher:
        for e in new[half:]:
            await batcher.append(e)
    for e in _entries({**sc.late, **sc.meta}):
        await table.mutate_row(e.row_key, list(e.mutations))
    await plain.bulk_mutate_rows(_entries(sc.new) + _entries({**sc.late, **sc.meta}))
    for key in sc.deleted:
        await table.mutate_row(key, DeleteAllFromRow())
        await plain.mutate_row(key, DeleteAllFromRow())
    return Mirror(plain, fake, table)


async def assert_same_reads(m: Mirror, qs: list[ReadRowsQuery], universe: list[bytes]) -> None:
    """Every read shape of the cutoff table equals the plain table's answer."""
    for q in qs:
        expected = shape(await m.plain.read_rows(q))
        note = m.table.plan(q).explain()
        assert shape(await m.table.read_rows(q)) == expected, note
        assert shape([r async for r in await m.table.read_rows_stream(q)]) == expected, note
        if not m.table.plan(q).subqueries:
            continue
        unordered = shape(await m.table.read_rows(q, ordered=False))
        if q.limit is None:
            assert sorted(unordered) == expected, note
        else:
            unlimited = ReadRowsQuery(q.row_keys, q.row_ranges, row_filter=q.filter)
            everything = shape(await m.plain.read_rows(unlimited))
            assert len(unordered) == len(expected)
            assert all(r in everything for r in unordered)
    if qs:
        sharded = await m.table.read_rows_sharded(qs)
        plain_sharded = [r for q in qs for r in await m.plain.read_rows(q)]
        assert shape(sharded) == shape(plain_sharded)
    for prefix in (b"", b"dev1", b"dev12#", b"meta"):
        rng = RowRange(prefix or None, prefix_end(prefix) or None)
        expected = shape(await m.plain.read_rows(ReadRowsQuery(row_ranges=rng)))
        assert shape([r async for r in m.table.read_prefix(prefix)]) == expected
        assert shape([r async for r in m.table.read_prefix(prefix, limit=2)]) == expected[:2]
    for key in universe[:: max(1, len(universe) // 8)]:
        got, want = await m.table.read_row(key), await m.plain.read_row(key)
        assert shape([got] if got else []) == shape([want] if want else [])
        assert await m.table.row_exists(key) == await m.plain.row_exists(key)
    assert m.fake.stats.open_now == 0
    assert ABANDONED not in m.fake.stats.endings


def assert_physical_layout(m: Mirror, scheme: SaltScheme, legacy: set[bytes]) -> None:
    """Keys in ``legacy`` are stored as is, every other key under scheme.salt_key; cells equal."""
    expected = []
    for key in m.plain.row_keys():
        expected.append(key if key in legacy else scheme.salt_key(key))
        assert m.fake.cells_of(expected[-1]) == m.plain.cells_of(key)
    assert sorted(expected) == m.fake.data_keys()


def time_windows(fmt: KeyFormat) -> list[ReadRowsQuery]:
    """Per lead: a window before the cutoff, one from it, one across it, closed and open."""
    out = []
    for lead in LEADS:
        for lo, hi in ((-86_400_000, -1), (0, 86_400_000), (-1000, 1000), (-1, 0)):
            a, b = sorted([fmt.make(lead, CUTOFF_MS + lo), fmt.make(lead, CUTOFF_MS + hi)])
            out.append(ReadRowsQuery(row_ranges=RowRange(a, b, True, True)))
            out.append(ReadRowsQuery(row_ranges=RowRange(a, b, False, False), limit=2))
    return out


class _Warnings(logging.Handler):
    """Collects the saltedtable logger's warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def differential(
    scheme: SaltScheme, fmt: KeyFormat, with_meta: bool = False
) -> Callable[..., None]:
    """A hypothesis test: a random history, then random queries, cutoff table == plain table."""
    pol = policy(fmt.reader, "legacy" if with_meta else "error")
    windows = time_windows(fmt)

    @settings(max_examples=10, deadline=None)
    @given(
        data=st.data(),
        sc=scenarios(fmt, with_meta),
        budget=st.sampled_from([20_000, 2]),
    )
    def check(data: st.DataObject, sc: Scenario, budget: int) -> None:
        qs = [data.draw(queries(sc.universe), label=f"query {i}") for i in range(3)]
        qs += [ReadRowsQuery(), *data.draw(st.permutations(windows), label="windows")[:4]]

        async def main() -> None:
            m = await build_mirror(scheme, pol, sc, budget)
            assert_physical_layout(m, scheme, {*sc.legacy, *sc.late, *sc.meta})
            await assert_same_reads(m, qs, sc.universe)

        # No stray row exists here, so the legacy side must never meet a salted row
        # (the scan would drop and log it, hiding a planning bug from the comparison).
        log, handler = logging.getLogger("saltedtable"), _Warnings()
        log.addHandler(handler)
        try:
            run(main)
        finally:
            log.removeHandler(handler)
        assert handler.messages == []

    return check


@pytest.mark.parametrize("scheme_name", sorted(SCHEMES))
def test_cutoff_reads_equal_plain_reads(scheme_name: str) -> None:
    """Legacy + new + late rows, every read shape: the cutoff table answers like a plain one."""
    differential(SCHEMES[scheme_name], FORMATS["epoch-ms"])()


@pytest.mark.parametrize("fmt", sorted(set(FORMATS) - {"epoch-ms"}))
def test_cutoff_reads_equal_plain_reads_for_every_reader(fmt: str) -> None:
    """The same differential with reversed, ISO-8601, big-endian and width-less fields."""
    differential(S8, FORMATS[fmt])()


def test_cutoff_reads_equal_plain_reads_with_unreadable_legacy_keys() -> None:
    """With ``unreadable='legacy'``, keys without a time live unsalted and read back alike."""
    differential(MARKED8, FORMATS["epoch-ms"], with_meta=True)()


async def test_check_and_mutate_and_read_modify_write_route_like_writes() -> None:
    """check_and_mutate_row and read_modify_write_row hit the same row on either side."""
    old, new = ms_key(b"dev1", CUTOFF_MS - 1), ms_key(b"dev1", CUTOFF_MS)
    sc = Scenario(
        {old: [("f1", b"q", 1000, b"x")]}, {new: [("f1", b"q", 1000, b"y")]}, {}, {}, [], []
    )
    m = await build_mirror(S8, policy(), sc)
    for target in (m.table, m.plain):
        for key in (old, new, ms_key(b"dev9", CUTOFF_MS - 5), ms_key(b"dev9", CUTOFF_MS + 5)):
            regex = RowKeyRegexFilter(b"dev1#.*")
            hit = await target.check_and_mutate_row(
                key,
                regex,
                true_case_mutations=SetCell("f1", b"hit", b"1", 5000),
                false_case_mutations=SetCell("f1", b"miss", b"1", 5000),
            )
            assert hit == key.startswith(b"dev1#")
            row = await target.read_modify_write_row(
                key, [AppendValueRule("f1", b"log", b"+"), IncrementRule("f1", b"n", 2)]
            )
            assert row.row_key == key
            assert all(c.row_key == key for c in row.cells)
    assert_physical_layout(m, S8, {old, ms_key(b"dev9", CUTOFF_MS - 5)})
    await assert_same_reads(m, [ReadRowsQuery()], [old, new])
    assert m.fake.data_keys().count(old) == 1  # the late write landed on the legacy row


async def test_bad_key_in_a_bulk_write_writes_nothing() -> None:
    """A bulk write with an unreadable or look-alike legacy key fails before sending anything."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, S8, cutoff=policy())
    good = RowMutationEntry(ms_key(b"dev1", CUTOFF_MS), SetCell("f1", b"q", b"v", 1))
    for bad_key, error in ((b"meta", CutoffError), (ms_key(b"3-x", 0), RowKeyError)):
        bad = RowMutationEntry(bad_key, SetCell("f1", b"q", b"v", 1))
        with pytest.raises(error):
            await table.bulk_mutate_rows([good, bad])
        with pytest.raises(error):
            await table.mutate_row(bad_key, SetCell("f1", b"q", b"v", 1))
        with pytest.raises(error):
            await table.read_row(bad_key)
    assert fake.data_keys() == []


# -- the ambiguity guard and stray legacy rows ------------------------------------


async def test_open_refuses_a_legacy_key_that_looks_salted() -> None:
    """open() raises LayoutError naming b'3-abc#1500000000' and pointing to a marker."""
    fake = FakeTable()
    fake.set_cell(b"3-abc#1500000000", "f1", b"q", b"v")
    fake.set_cell(b"user#1500000000", "f1", b"q", b"v")
    pol = policy(epoch_field("s"))
    with pytest.raises(LayoutError, match=r"(?s)b'3-abc#1500000000'.*marker=b'~'"):
        await SaltedTableAsync.open(fake, SaltScheme(8), cutoff=pol)
    with pytest.raises(LayoutError):
        await SaltedTableAsync(fake, SaltScheme(8), cutoff=pol).check_layout()
    table = await SaltedTableAsync.open(fake, SaltScheme(8, marker=b"~"), cutoff=pol)
    rows = await table.read_rows(ReadRowsQuery())
    assert [r.row_key for r in rows] == [b"3-abc#1500000000", b"user#1500000000"]
    assert await table.read_row(b"3-abc#1500000000") is not None


@pytest.mark.parametrize("matching_bucket", [True, False])
async def test_guard_catches_look_alikes_whatever_their_hash(matching_bucket: bool) -> None:
    """A look-alike is refused whether or not its prefix is the bucket of the rest."""
    rest = next(
        b"abc%d#1500000000" % i
        for i in range(100)
        if (S8.bucket_of(b"abc%d#1500000000" % i) == 3) == matching_bucket
    )
    fake = FakeTable()
    fake.set_cell(b"3-" + rest, "f1", b"q", b"v")
    with pytest.raises(LayoutError, match="3-abc"):
        await SaltedTableAsync.open(fake, S8, cutoff=policy(epoch_field("s")))


async def test_open_passes_on_a_clean_legacy_table_and_after_migration() -> None:
    """A legacy table, then rows on both sides written by the layout, pass check_layout."""
    fake = FakeTable()
    fake.set_cell(ms_key(b"dev1", CUTOFF_MS - 1), "f1", b"q", b"v")
    table = await SaltedTableAsync.open(fake, S8, cutoff=policy())
    await table.mutate_row(ms_key(b"dev1", CUTOFF_MS), SetCell("f1", b"q", b"v"))
    await table.mutate_row(ms_key(b"dev2", CUTOFF_MS - 7), SetCell("f1", b"q", b"v"))
    await table.check_layout()
    await SaltedTableAsync.open(fake, S8, cutoff=policy(), sample_rows=1)


async def test_salted_row_before_the_cutoff_is_reported() -> None:
    """A salted row whose key time is before the cutoff (written without a cutoff) is reported."""
    fake = FakeTable()
    # Written without a layout record (guard off, as an older tool would have).
    await SaltedTableAsync(fake, S8, guard=False).mutate_row(
        ms_key(b"dev1", CUTOFF_MS - 1), SetCell("f1", b"q", b"v")
    )
    with pytest.raises(LayoutError, match="before the cutoff"):
        await SaltedTableAsync.open(fake, S8, cutoff=policy())


async def test_stray_legacy_row_after_the_cutoff_is_skipped_logged_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unsalted row with key time >= cutoff: scans skip it with a warning, open() refuses."""
    fake = FakeTable()
    stray = ms_key(b"dev1", CUTOFF_MS + 1)
    good = ms_key(b"dev1", CUTOFF_MS - 1)
    fake.set_cell(stray, "f1", b"q", b"stray")
    fake.set_cell(good, "f1", b"q", b"good")
    with pytest.raises(LayoutError, match=r"(?s)dev1#1704067200001.*at or after the cutoff"):
        await SaltedTableAsync.open(fake, S8, cutoff=policy())
    table = SaltedTableAsync(fake, S8, cutoff=policy(), budget=ReadBudget(rows=1))
    with caplog.at_level(logging.WARNING, logger="saltedtable"):
        rows = await table.read_rows(ReadRowsQuery())
        limited = await table.read_rows(ReadRowsQuery(limit=1))
        prefixed = [r async for r in table.read_prefix(b"dev1#")]
    assert [r.row_key for r in rows] == [good]
    assert [r.row_key for r in limited] == [good]
    assert [r.row_key for r in prefixed] == [good]
    assert await table.read_row(stray) is None  # point reads look on the salted side
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # One per read that met the stray row (the limited read stops before it).
    assert len(warnings) == 2
    assert all("left out 1 legacy row(s)" in r.getMessage() for r in warnings)
    assert "dev1#1704067200001" in warnings[0].getMessage()


async def test_many_stray_rows_do_not_break_a_limited_scan() -> None:
    """A legacy side made mostly of stray rows still yields exactly ``limit`` good rows."""
    fake = FakeTable()
    for i in range(30):
        fake.set_cell(ms_key(b"a%02d" % i, CUTOFF_MS + i), "f1", b"q", b"stray")
    for i in range(5):
        fake.set_cell(ms_key(b"b%02d" % i, CUTOFF_MS - 1 - i), "f1", b"q", b"good")
    table = SaltedTableAsync(fake, S8, cutoff=policy(), budget=ReadBudget(rows=4))
    for limit in (1, 3, 5, None):
        rows = await table.read_rows(ReadRowsQuery(limit=limit))
        assert [r.row_key[:3] for r in rows] == [b"b%02d" % i for i in range(5)][:limit]


# -- bugs found --------------------------------------------------------------------


async def test_bounds_hold_when_the_leading_part_holds_the_separator() -> None:
    """A key whose leading part contains '#' is still found by a time-pruned range scan."""
    pol = policy(epoch_field("s", digits=10), cutoff=dt.datetime(2014, 1, 1, tzinfo=dt.UTC))
    key = b"u#1600000000#1000000000"  # last field 1000000000 s = 2001: legacy
    plain, fake = FakeTable(), FakeTable()
    table = SaltedTableAsync(fake, S8, cutoff=pol)
    for target in (plain, table):
        await target.mutate_row(key, SetCell("f1", b"q", b"v", 1))
    query = ReadRowsQuery(row_ranges=RowRange(b"u#1500000000", b"u#1700000000"))
    assert shape(await table.read_rows(query)) == shape(await plain.read_rows(query))


async def test_unreadable_fallback_side_is_scanned_for_bounded_ranges() -> None:
    """A short (unreadable, unreadable='legacy') key inside a bounded range is not lost."""
    pol = policy(big_endian_int(offset=0, width=8), "legacy")
    start = CUTOFF_MS.to_bytes(8, "big") + b"#a"
    end = (CUTOFF_MS + 2**24).to_bytes(8, "big") + b"#a"
    short = (CUTOFF_MS + 2**23).to_bytes(8, "big")[:6]  # 6 bytes: no 8-byte time -> legacy
    assert start < short < end
    plain, fake = FakeTable(), FakeTable()
    table = SaltedTableAsync(fake, S8, cutoff=pol)
    for target in (plain, table):
        await target.mutate_row(short, SetCell("f1", b"q", b"v", 1))
    query = ReadRowsQuery(row_ranges=RowRange(start, end))
    assert shape(await table.read_rows(query)) == shape(await plain.read_rows(query))


async def test_declared_width_is_enforced_or_not_trusted() -> None:
    """A key whose field breaks the declared width is refused, or found by range scans."""
    pol = policy(epoch_field("s", digits=10), cutoff=dt.datetime(2014, 1, 1, tzinfo=dt.UTC))
    plain, fake = FakeTable(), FakeTable()
    table = SaltedTableAsync(fake, S8, cutoff=pol)
    try:
        await table.mutate_row(b"u#16", SetCell("f1", b"q", b"v", 1))
    except CutoffError:
        return  # refused: fine
    await plain.mutate_row(b"u#16", SetCell("f1", b"q", b"v", 1))
    query = ReadRowsQuery(row_ranges=RowRange(b"u#1500000000", b"u#1700000000"))
    assert shape(await table.read_rows(query)) == shape(await plain.read_rows(query))


def test_open_end_at_the_cutoff_plans_only_the_legacy_side() -> None:
    """'Everything before the cutoff' (default exclusive end) reads only the legacy side."""
    before = RowRange(ms_key(b"dev1", CUTOFF_MS - 10_000), ms_key(b"dev1", CUTOFF_MS))
    assert plan_reads(_query(before), S8, bounded_policy()).buckets == (None,)


async def test_open_passes_a_bigtable_error_through() -> None:
    """A failing sample read in open() raises the Bigtable error, not an ExceptionGroup."""
    fake = FakeTable(fail_when=lambda q: True, fail_with=ServiceUnavailable("down"))
    with pytest.raises(ServiceUnavailable):
        await SaltedTableAsync.open(fake, S8, cutoff=policy())


async def test_sample_row_keys_keeps_legacy_split_points() -> None:
    """Split points on the legacy side come back as (logical) keys."""
    fake = FakeTable(sample_every=2)
    for i in range(10):
        fake.set_cell(ms_key(b"dev1", CUTOFF_MS - 100 + i), "f1", b"q", b"v")
    table = SaltedTableAsync(fake, S8, cutoff=policy())
    samples = await table.sample_row_keys()
    assert [k for k, _ in samples if k] == [k for k, _ in await fake.sample_row_keys() if k]


def test_big_endian_int_refuses_a_window_past_the_key_end() -> None:
    """A negative offset closer to the end than ``width`` bytes is a CutoffError."""
    with pytest.raises(CutoffError):
        big_endian_int(offset=-4, width=8)


def test_empty_key_is_a_row_key_error_with_a_cutoff() -> None:
    """An empty key is refused as a bad key, as without a cutoff."""
    with pytest.raises(RowKeyError, match="empty"):
        Layout(S8, policy()).locate(b"")
