"""The layout record as a frozen value: its stored form, its checks and its comparison."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from saltedtable import (
    CutoffPolicy,
    CutoffRecord,
    LayoutError,
    LayoutRecord,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    epoch_field,
    fields,
)
from saltedtable._guard.migration import migration_record
from saltedtable._guard.record import decode_layout, encode_layout, open_differences

POLICY = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("s", index=1))
EPOCH = "epoch_field(unit='s', sep=b'#', index=1, digits=None)"

#: Records exactly as saltedtable 0.1.0 stored them (before the record was a value).
STORED = {
    "keyed, cutoff": (
        b'{"buckets": 16, "cutoff": {"at": "2024-01-01T00:00:00+00:00", "at_micros": '
        b'1704067200000000, "timestamp": "' + EPOCH.encode() + b'", "unreadable": "error"}, '
        b'"hash": "crc32", "key_part": "fields(k=2, sep=b\'#\')", "marker": "7e", '
        b'"separator": "23", "version": 1}',
        lambda: describe_layout(
            SaltScheme(16, key_part=fields(2), separator=b"#", marker=b"~"), POLICY
        ),
    ),
    "cut-over": (
        b'{"buckets": 4, "cutoff": {"at": "2024-01-01T00:00:00+00:00", "at_micros": '
        b'1704067200000000, "timestamp": "' + EPOCH.encode() + b'", "unreadable": "error"}, '
        b'"hash": "crc32", "key_part": null, "marker": "", "migration": "cutover", '
        b'"separator": "2d", "version": 1}',
        lambda: migration_record(SaltScheme(4), POLICY, "cutover"),
    ),
    "plain": (
        b'{"buckets": 8, "cutoff": null, "hash": "crc32", "key_part": null, "marker": "", '
        b'"separator": "2d", "version": 1}',
        lambda: describe_layout(SaltScheme(8)),
    ),
}


@pytest.mark.parametrize("name", sorted(STORED))
def test_a_record_stored_before_reads_and_encodes_byte_for_byte(name: str) -> None:
    """A record the dict-based code wrote decodes to the same value and encodes back as it was."""
    stored, made = STORED[name]
    record = decode_layout(stored)
    assert record == made()
    assert encode_layout(record) == stored
    assert record.encode() == stored
    assert record.differences(made()) == []


def test_fields_of_a_decoded_record() -> None:
    """The decoded value's fields are typed: bytes for separator and marker, a cutoff value."""
    record = LayoutRecord.decode(STORED["keyed, cutoff"][0])
    assert (record.buckets, record.hash, record.separator, record.marker) == (
        16,
        "crc32",
        b"#",
        b"~",
    )
    assert record.key_part == "fields(k=2, sep=b'#')"
    assert record.cutoff == CutoffRecord(
        "2024-01-01T00:00:00+00:00", 1_704_067_200_000_000, EPOCH, "error"
    )
    assert record.migration is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.buckets = 4  # type: ignore[misc]


def test_an_older_record_missing_fields_reads_them_as_none() -> None:
    """A record that leaves fields out reads them as None, and compares as before (None)."""
    record = LayoutRecord.decode(b'{"buckets": 8}')
    assert (record.hash, record.separator, record.marker, record.cutoff) == (None, None, None, None)
    assert record.differences(describe_layout(SaltScheme(8))) == [
        "hash: stored None, now 'crc32'",
        "marker: stored None, now ''",
        "separator: stored None, now '2d'",
    ]


def test_fields_a_newer_saltedtable_wrote_are_kept_and_compared() -> None:
    """An unknown field survives decode and encode, and makes the records differ."""
    stored = b'{"buckets": 8, "cutoff": null, "future": [1, 2], "hash": "crc32", "key_part": null, "marker": "", "separator": "2d", "version": 2}'  # noqa: E501
    record = LayoutRecord.decode(stored)
    assert record.extra == (("future", "[1, 2]"),)
    assert record.encode() == stored
    assert record.differences(describe_layout(SaltScheme(8))) == ["future: stored [1, 2], now None"]


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        (b"\xff\x00nonsense", "not a layout record"),
        (b"[1, 2]", "holds [1, 2]"),
        (b'{"hash": "crc32"}', "holds {'hash': 'crc32'}"),
        (b'{"buckets": 0}', "buckets is 0"),
        (b'{"buckets": true}', "buckets is True"),
        (b'{"buckets": 8, "hash": 3}', "'hash' is 3, not a str"),
        (b'{"buckets": 8, "separator": "zz"}', "'separator' is 'zz', not hex"),
        (b'{"buckets": 8, "cutoff": "soon"}', "cutoff is 'soon', not an object"),
        (b'{"buckets": 8, "cutoff": {"at_micros": "x"}}', "'at_micros' is 'x', not a int"),
    ],
)
def test_a_stored_value_that_is_no_record_is_refused(stored: bytes, problem: str) -> None:
    """Decoding names what is wrong with the stored value."""
    with pytest.raises(LayoutError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        LayoutRecord.decode(stored)


def test_construction_checks_the_fields() -> None:
    """A record cannot be made with a bad bucket count or a field of the wrong type."""
    with pytest.raises(LayoutError, match="buckets must be an int >= 1"):
        LayoutRecord(0, "crc32", None, b"-", b"")
    with pytest.raises(LayoutError, match="separator must be bytes"):
        LayoutRecord(8, "crc32", None, "-", b"")  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="cutoff must be CutoffRecord"):
        LayoutRecord(8, "crc32", None, b"-", b"", {"at": None})  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="cutoff at_micros must be int"):
        CutoffRecord(None, "x", None, None)  # type: ignore[arg-type]


def test_comparison_leaves_out_the_version_and_the_cutoff_text() -> None:
    """Records differ by what they mean: not the format version, not how the instant is written."""
    record = describe_layout(SaltScheme(8), POLICY)
    assert record.cutoff is not None
    other_text = dataclasses.replace(
        record,
        version=7,
        cutoff=dataclasses.replace(record.cutoff, at="2024-01-01T01:00:00+01:00"),
    )
    assert record.differences(other_text) == []
    assert record == other_text  # == compares what differences() compares
    assert record.differences(describe_layout(SaltScheme(8))) != []
    assert record != describe_layout(SaltScheme(8))


def test_the_mismatch_error_shows_both_records() -> None:
    """SchemeMismatchError keeps both values and shows their JSON."""
    stored, current = describe_layout(SaltScheme(16)), describe_layout(SaltScheme(8))
    error = SchemeMismatchError(stored, current)
    assert (error.stored, error.current) == (stored, current)
    assert "buckets: stored 16, now 8" in str(error)
    assert f"stored:  {stored}" in str(error)
    assert "saltedtable guard TABLE --override" in str(error)  # the shell's way, not only Python's


def test_item_access_still_works_with_a_deprecation_warning() -> None:
    """``record["buckets"]`` (the record was a dict) warns and answers the JSON field."""
    record = describe_layout(SaltScheme(8, separator=b"#"))
    with pytest.warns(DeprecationWarning, match="LayoutRecord"):
        assert record["buckets"] == 8
    with pytest.warns(DeprecationWarning, match="separator"):
        assert record["separator"] == "23"


def test_open_differences_take_values() -> None:
    """A cut-over record opens the fully salted layout and the cutoff one, not another scheme."""
    cutover = migration_record(SaltScheme(4), POLICY, "cutover")
    assert open_differences(cutover, describe_layout(SaltScheme(4))) == []
    assert open_differences(cutover, describe_layout(SaltScheme(4), POLICY)) == []
    assert open_differences(cutover, describe_layout(SaltScheme(8))) != []


@given(
    buckets=st.integers(1, 4096),
    hash_=st.sampled_from(["crc32", "md5", "phoenix"]),
    separator=st.binary(max_size=3),
    marker=st.binary(max_size=3),
    migration=st.none() | st.sampled_from(["backfill", "cutover", "deleting"]),
)
def test_any_record_round_trips(
    buckets: int, hash_: str, separator: bytes, marker: bytes, migration: str | None
) -> None:
    """decode(encode(r)) == r, and a record never differs from itself."""
    record = LayoutRecord(buckets, hash_, None, separator, marker, None, migration)
    assert LayoutRecord.decode(record.encode()) == record
    assert record.differences(record) == []


def test_the_guide_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The LayoutRecord snippet of docs/guard.md runs and prints what its comment says."""
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "guard.md").read_text(encoding="utf-8")
    code = doc.split("```python\nfrom saltedtable import LayoutRecord", 1)[1].split("```", 1)[0]
    exec(compile("from saltedtable import LayoutRecord" + code, "guard.md", "exec"), {})
    assert capsys.readouterr().out == "['buckets: stored 8, now 16']\n"
