"""The layout a stored record describes, rebuilt for the command line (``layout_of_record``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from saltedtable import named_key_part
from saltedtable._exceptions import LayoutError
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import BACKFILL, CUTOVER, DELETING, LayoutRecord, describe_layout
from saltedtable._scheme.cutoff import (
    CutoffPolicy,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from saltedtable._scheme.flags import rebuild_key_part
from saltedtable._scheme.layout import Layout
from saltedtable._scheme.salt import SaltScheme, before_last, fields

CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))

KEY_PARTS: list[Callable[[bytes], bytes] | None] = [
    None,
    fields(1),
    fields(3, b"::"),
    before_last(),
    before_last(b"|"),
]
READERS: list[Any] = [
    epoch_field(),
    epoch_field("ms", b"#", 1, 13),
    reversed_epoch_field(),
    reversed_epoch_field("s", b"/", 0, 10, base=10**10),
    iso8601_field(),
    iso8601_field(b"_", 2, assume_utc=False),
    big_endian_int(),
    big_endian_int(-8, 8, "us"),
]


@pytest.mark.parametrize("key_part", KEY_PARTS)
@pytest.mark.parametrize(
    "scheme_args",
    [
        {"buckets": 16},
        {"buckets": 4, "hash": "java"},
        {"buckets": 8, "hash": "farmhash", "separator": b"_", "marker": b"~"},
        {"buckets": 3, "hash": "phoenix"},
    ],
)
def test_a_scheme_comes_back_from_its_record(
    key_part: Callable[[bytes], bytes] | None, scheme_args: dict[str, Any]
) -> None:
    """Every hash, separator, marker and ready-made key part is rebuilt equal."""
    scheme = SaltScheme(key_part=key_part, **scheme_args)
    layout = layout_of_record(describe_layout(scheme))
    assert layout == Layout(scheme)


@pytest.mark.parametrize("reader", READERS, ids=repr)
@pytest.mark.parametrize("unreadable", ["error", "legacy", "salted"])
def test_a_cutoff_comes_back_from_its_record(reader: Any, unreadable: Any) -> None:
    """Every ready-made time reader, the instant and the unreadable side are rebuilt."""
    scheme = SaltScheme(4, key_part=fields(1), marker=b"~")
    cutoff = CutoffPolicy(CUTOFF, reader, unreadable=unreadable)
    record = describe_layout(scheme, cutoff)
    layout = layout_of_record(record)
    assert layout == Layout(scheme, cutoff)
    assert describe_layout(layout.scheme, layout.cutoff) == record  # the guard agrees


def test_an_older_record_without_optional_fields_reads_with_the_defaults() -> None:
    """A record leaving out hash, separator and marker means crc32, '-' and none."""
    record = LayoutRecord(8, None, None, None, None)
    assert layout_of_record(record) == Layout(SaltScheme(8))


@pytest.mark.parametrize(
    ("state", "keeps_cutoff"), [(BACKFILL, True), (CUTOVER, True), (DELETING, False)]
)
def test_a_migrations_record_gives_the_layout_that_may_read(state: str, keeps_cutoff: bool) -> None:
    """While the legacy rows go, only the fully salted layout reads; before, the cutoff's."""
    scheme = SaltScheme(4, marker=b"~")
    cutoff = CutoffPolicy(CUTOFF, epoch_field())
    record = dataclasses.replace(describe_layout(scheme, cutoff), migration=state)
    assert layout_of_record(record) == Layout(scheme, cutoff if keeps_cutoff else None)


def test_a_custom_key_part_or_time_reader_is_refused_naming_it() -> None:
    """Only the code that wrote a custom part or reader can rebuild it: a LayoutError says so."""
    named = describe_layout(SaltScheme(4, key_part=named_key_part("tenant/v1", lambda k: k[:4])))
    with pytest.raises(LayoutError, match=r"key part 'name:tenant/v1'.*from Python"):
        layout_of_record(named)
    cutoff = describe_layout(SaltScheme(4), CutoffPolicy(CUTOFF, epoch_field()))
    assert cutoff.cutoff is not None
    custom = dataclasses.replace(
        cutoff, cutoff=dataclasses.replace(cutoff.cutoff, timestamp="my.module.key_time")
    )
    with pytest.raises(LayoutError, match=r"time reader 'my.module.key_time'"):
        layout_of_record(custom)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('false')",
        "fields(k=__import__('os').getpid())",
        "fields(**{'k': 1})",
        "fields(k=1).sep",
        "saltedtable.fields(k=1)",
        "fields(k=0)",
        "fields(k=1, colour='red')",
        "fields(",
        "epoch_field(unit='ms')",
    ],
)
def test_a_key_part_is_rebuilt_only_from_a_known_call_with_literal_arguments(text: str) -> None:
    """Only literals are evaluated; unknown names, bad arguments and other syntax give None."""
    assert rebuild_key_part(text) is None


def test_a_key_part_is_rebuilt_from_its_repr() -> None:
    """The stored text of a ready-made part is its repr, which gives an equal value back."""
    part = fields(2, b"/")
    assert rebuild_key_part(repr(part)) == part
