"""A stored layout record shown as the command-line flags that reproduce it."""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    CutoffPolicy,
    LayoutRecord,
    SaltScheme,
    SchemeMismatchError,
    before_last,
    big_endian_int,
    describe_layout,
    epoch_field,
    fields,
    iso8601_field,
    named_key_part,
    reversed_epoch_field,
)
from saltedtable._cli.admin import _layout
from saltedtable._cli.main import _parser
from saltedtable._scheme.flags import (
    layout_flags,
    rebuild_key_part,
    rebuild_time_reader,
    time_reader_from_spec,
)

WHEN = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def read_at_ms(key: bytes) -> int:
    """A custom time reader defined at the top of a module: stored by its name."""
    return int(key[:13]) * 1000


def parsed(words: tuple[str, ...]) -> argparse.Namespace:
    """The arguments ``saltedtable inspect T WORDS`` parses to."""
    return _parser().parse_args(["inspect", "T", *words])


def rebuilt(record: LayoutRecord) -> LayoutRecord:
    """The record of the layout the record's own flags give the command line."""
    scheme, cutoff = _layout(parsed(record.cli_flags().words))
    return describe_layout(scheme, cutoff)


def test_a_cutoff_records_time_reader_is_shown_as_the_time_flag() -> None:
    """The issue's case: epoch milliseconds in field 1, 13 digits, is --time epoch:ms:1:13."""
    policy = CutoffPolicy(WHEN, epoch_field(unit="ms", index=1, digits=13))
    record = describe_layout(SaltScheme(8), policy)
    assert record.cutoff is not None
    assert record.cutoff.timestamp == "epoch_field(unit='ms', sep=b'#', index=1, digits=13)"
    assert str(record.cli_flags()) == (
        "-n 8 --cutoff 2024-05-01T00:00:00+00:00 --time epoch:ms:1:13"
    )
    assert rebuilt(record) == record


@pytest.mark.parametrize(
    ("reader", "flags"),
    [
        (epoch_field(), "--time epoch:s"),
        (epoch_field(unit="us", index=-1, digits=16), "--time epoch:us:-1:16"),
        (epoch_field(unit="ms", sep=b"|", index=2), "--time epoch:ms:2 --time-sep '|'"),
        (reversed_epoch_field(), "--time reversed:ms"),
        (reversed_epoch_field(unit="s", index=0, digits=19), "--time reversed:s:0:19"),
        (iso8601_field(), "--time iso"),
        (iso8601_field(sep=b"/", index=1), "--time iso:1 --time-sep /"),
        (big_endian_int(offset=-8, width=8, unit="us"), "--time be:-8:8:us"),
    ],
)
def test_each_ready_made_reader_has_its_flags(reader: Any, flags: str) -> None:
    """Every ready-made reader the CLI can build is shown as the --time spec that builds it."""
    record = describe_layout(SaltScheme(4), CutoffPolicy(WHEN, reader, unreadable="legacy"))
    shown = str(record.cli_flags())
    assert shown == f"-n 4 --cutoff 2024-05-01T00:00:00+00:00 {flags} --unreadable legacy"
    assert rebuilt(record) == record


@pytest.mark.parametrize(
    "reader",
    [
        epoch_field(),
        epoch_field(unit="us", index=-1, digits=16),
        epoch_field(unit="ms", sep=b"|", index=2),
        reversed_epoch_field(unit="s", index=0, digits=19),
        iso8601_field(sep=b"/", index=1),
        big_endian_int(offset=-8, width=8, unit="us"),
    ],
)
def test_a_time_flag_reads_back_as_its_reader(reader: Any) -> None:
    """The flags module reads a --time spec back into the reader it was shown for, no parser."""
    record = describe_layout(SaltScheme(4), CutoffPolicy(WHEN, reader)).as_dict()
    words = dict(zip(*[iter(layout_flags(record).words)] * 2, strict=True))
    back = time_reader_from_spec(words["--time"], words.get("--time-sep", "#").encode())
    assert repr(back) == repr(reader)


@pytest.mark.parametrize(
    ("reader", "named"),
    [
        (read_at_ms, f"the time reader {read_at_ms.__module__}.read_at_ms"),
        (reversed_epoch_field(base=10**13), "the time reader reversed_epoch_field("),
        (iso8601_field(assume_utc=False), "the time reader iso8601_field("),
    ],
)
def test_a_reader_no_flag_gives_is_named(reader: Any, named: str) -> None:
    """A custom function is shown by its name, as is a ready-made reader the CLI cannot build."""
    flags = describe_layout(SaltScheme(4), CutoffPolicy(WHEN, reader)).cli_flags()
    assert flags.words == ("-n", "4", "--cutoff", "2024-05-01T00:00:00+00:00")
    assert len(flags.missing) == 1
    assert flags.missing[0].startswith(named)
    assert str(flags).endswith(f" (no flag gives {flags.missing[0]})")


def test_key_parts_separators_markers_and_hashes_have_flags() -> None:
    """Every part of the scheme a flag can give is given; defaults are left out."""
    record = describe_layout(
        SaltScheme(300, hash="java", key_part=before_last(b"/"), separator=b"_", marker=b"~")
    )
    assert str(record.cli_flags()) == (
        "-n 300 --hash java --key-part before-last:/ --separator _ --marker '~'"
    )
    assert rebuilt(record) == record
    plain = describe_layout(SaltScheme(16, key_part=fields(2)))
    assert str(plain.cli_flags()) == "-n 16 --key-part fields:2"


def test_a_named_key_part_and_bytes_that_are_not_text_are_named() -> None:
    """A named key part and a marker that is not UTF-8 cannot be typed: they are named."""
    record = describe_layout(
        SaltScheme(4, key_part=named_key_part("tenant/v1", lambda k: k[:4]), marker=b"\xff")
    )
    assert record.cli_flags().missing == ("the key part name:tenant/v1", "the marker b'\\xff'")


def test_an_older_record_without_hash_or_separator_reads_as_the_defaults() -> None:
    """A record that leaves fields out (an older saltedtable) gives the defaults' flags."""
    assert str(LayoutRecord.decode(b'{"buckets": 8}').cli_flags()) == "-n 8"


def test_the_cutoff_text_is_kept_unless_it_disagrees_with_the_instant() -> None:
    """The stored ISO text (with its offset) is shown; an instant it does not name wins."""
    base = {
        "buckets": 2,
        "cutoff": {"timestamp": "epoch_field(unit='s', sep=b'#', index=-1, digits=None)"},
    }
    kept = layout_flags(
        base
        | {
            "cutoff": base["cutoff"]
            | {"at": "2024-05-01T02:00:00+02:00", "at_micros": 1714521600000000}
        }
    )
    assert "--cutoff 2024-05-01T02:00:00+02:00" in str(kept)
    fixed = layout_flags(
        base
        | {
            "cutoff": base["cutoff"]
            | {"at": "2030-01-01T00:00:00+00:00", "at_micros": 1714521600000000}
        }
    )
    assert "--cutoff 2024-05-01T00:00:00+00:00" in str(fixed)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "epoch_field(unit=__import__('os').getcwd())",
        "epoch_field('ms')",
        "epoch_field(unit='ms')",  # not the stored form: every field is written out
        "epoch_field(unit='lightyears', sep=b'#', index=-1, digits=None)",
        "tests.unit._scheme.test_flags.read_at_ms",
        "",
    ],
)
def test_rebuilding_reads_only_the_stored_form_of_a_ready_made_value(text: str) -> None:
    """Nothing in a record's text is run; only the exact stored form of a reader is rebuilt."""
    assert rebuild_time_reader(text) is None
    assert rebuild_key_part(text) is None


_units = st.sampled_from(["s", "ms", "us"])
_seps = st.sampled_from([b"#", b"|", b"::", b"-"])
_readers = st.one_of(
    st.builds(
        epoch_field,
        unit=_units,
        sep=_seps,
        index=st.integers(-3, 3),
        digits=st.none() | st.integers(1, 19),
    ),
    st.builds(
        reversed_epoch_field,
        unit=_units,
        sep=_seps,
        index=st.integers(-3, 3),
        digits=st.none() | st.integers(1, 19),
    ),
    st.builds(iso8601_field, sep=_seps, index=st.integers(-3, 3)),
    st.builds(big_endian_int, offset=st.integers(0, 16), width=st.integers(1, 8), unit=_units),
)
_parts = st.none() | st.builds(fields, st.integers(1, 4), _seps) | st.builds(before_last, _seps)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 4096),
    st.sampled_from(["crc32", "crc32c", "farmhash", "java"]),
    _parts,
    st.sampled_from([b"-", b"#", b"_"]),
    st.sampled_from([b"", b"~", b"s/"]),
    st.none() | _readers,
    st.sampled_from(["error", "legacy", "salted"]),
    st.datetimes(
        min_value=dt.datetime(1990, 1, 1),
        max_value=dt.datetime(2100, 1, 1),
        timezones=st.just(dt.UTC),
    ),
)
def test_the_flags_of_any_ready_made_layout_give_the_same_record(
    buckets: int,
    hash_name: str,
    part: Any,
    separator: bytes,
    marker: bytes,
    reader: Any,
    unreadable: str,
    when: dt.datetime,
) -> None:
    """Parsed by the command line, a record's flags build a layout whose record is the same."""
    scheme = SaltScheme(buckets, hash=hash_name, key_part=part, separator=separator, marker=marker)
    policy = None if reader is None else CutoffPolicy(when, reader, unreadable=unreadable)  # type: ignore[arg-type]
    record = describe_layout(scheme, policy)
    flags = record.cli_flags()
    assert flags.missing == ()
    assert shlex.split(str(flags)) == list(flags.words)
    again = rebuilt(record)
    assert again == record
    assert again.encode() == record.encode()


def test_a_mismatch_message_gives_the_stored_records_flags() -> None:
    """SchemeMismatchError says which flags open the table as it was written."""
    stored = describe_layout(SaltScheme(8), CutoffPolicy(WHEN, epoch_field("ms", index=1)))
    error = SchemeMismatchError(stored, describe_layout(SaltScheme(8)))
    assert (
        "stored, as command-line flags: -n 8 --cutoff 2024-05-01T00:00:00+00:00 --time epoch:ms:1\n"
    ) in str(error)
