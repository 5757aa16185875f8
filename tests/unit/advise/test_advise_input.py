"""The advisor's input readers: CSV and NDJSON files, stdin, and their one-line errors."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    CutoffRecord,
    LayoutRecord,
    SaltScheme,
    describe_layout,
    epoch_field,
    fields,
)
from saltedtable._exceptions import InputError, MissingInputError
from saltedtable._scheme.layout import Layout
from saltedtable.advise import Access
from saltedtable.advise.input import (
    Progress,
    logical_sample,
    parse_count,
    parse_time,
    plan_sample,
    read_file,
)
from tests.cli_helpers import set_stdin


def read_text(tmp_path: Path, text: str, **kwargs: object) -> tuple[list[Access], str]:
    """Write ``text`` to a file and read it with read_file."""
    path = tmp_path / "sample.txt"
    path.write_text(text)
    return read_file(str(path), **kwargs)  # type: ignore[arg-type]


CSV_ERRORS = [
    ("key,count\na,1\nb,x\n", "line 3: count 'x' is not a number"),
    ("a,-1\n", "line 1: count '-1' must be a finite number >= 0"),
    ("a,inf\n", "line 1: count 'inf'"),
    ("a,1,5,6\n", "line 1: 4 fields; expected key,count,time"),
    ("a,1,5\nb,1\n", "line 2: has no time, but line 1 has one"),
    ("a,1\nb,1,7\n", "line 2: has a time, but line 1 has none"),
    ("a,0\nb,1,7\nc,1\n", "line 3: has no time, but line 2 has one"),
    ("a,1,yesterday\n", "line 1: time 'yesterday' is neither a number nor an ISO 8601 date"),
    ("key,cnt\na,1\n", "line 1: header 'key,cnt'"),
    (",1\n", "line 1: empty key"),
    ("", "no keys in the input"),
    ('"a,1\n', "line 1: malformed CSV: unexpected end of data"),
    ('"a"b,1\n', "line 1: malformed CSV"),
    ("short\n" + "k" * 5000 + "\n", "line 2: key is 5000 bytes"),
]


@pytest.mark.parametrize(("text", "needle"), CSV_ERRORS)
def test_malformed_csv_names_the_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    """A malformed CSV row raises InputError naming the file and the line."""
    with pytest.raises(InputError) as caught:
        read_text(tmp_path, text)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "sample.txt") + ": ")
    assert needle in message


def test_storage_lines_may_leave_the_time_out(tmp_path: Path) -> None:
    """Count-0 lines list keys for storage only: they may leave out the time the accesses have."""
    accesses, _ = read_text(tmp_path, "key,count,time\na,0\nb,0\nb,1,7\nc,2,8\n")
    assert [(a.key, a.count, a.time) for a in accesses] == [
        (b"a", 0.0, None),
        (b"b", 0.0, None),
        (b"b", 1.0, 7.0),
        (b"c", 2.0, 8.0),
    ]


NDJSON_ERRORS = [
    ('{"key": "a"}\nnot json\n', "line 2: not JSON"),
    ('{"key": "a"}\n[1, 2]\n', "line 2: expected an object"),
    ('{"key": "a"}\n{"key": 1}\n', 'line 2: "key" must be a string'),
    ('{"key": "a"}\n{"count": 1}\n', 'line 2: "key" must be a string, got None'),
    ('{"key": "a", "count": "3"}\n', 'line 1: "count" must be a number'),
    ('{"key": "a", "count": true}\n', '"count" must be a number'),
    ('{"key": "a", "time": [1]}\n', '"time" must be a number or an ISO 8601 date'),
    ('{"key": "a", "time": "soon"}\n', "time 'soon' is neither"),
    ('{"key": ""}\n', "line 1: empty key"),
]


@pytest.mark.parametrize(("text", "needle"), NDJSON_ERRORS)
def test_malformed_ndjson_on_stdin_names_stdin_and_line(
    monkeypatch: pytest.MonkeyPatch, text: str, needle: str
) -> None:
    """A malformed NDJSON line on stdin raises InputError naming stdin and the line."""
    set_stdin(monkeypatch, text.encode())
    with pytest.raises(InputError, match=r"^stdin: ") as caught:
        read_file("-")
    assert needle in str(caught.value)


def test_bad_hex_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With as_hex, a key that is not hex is an error on its line."""
    set_stdin(monkeypatch, b"6162\nxyz\n")
    with pytest.raises(InputError, match="line 2: key 'xyz' is not hex"):
        read_file("-", as_hex=True)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    """A missing file is MissingInputError; a directory is InputError 'cannot read'."""
    with pytest.raises(MissingInputError, match=r"no such file: .*nope\.csv"):
        read_file(str(tmp_path / "nope.csv"))
    with pytest.raises(InputError, match="cannot read"):
        read_file(str(tmp_path))


def test_csv_header_may_reorder_columns_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    """A header names the columns in any order; blank lines are skipped."""
    accesses, fmt = read_text(tmp_path, "time,key,count\n\n1,a,2\n2,b,1\n3,c,5\n")
    assert fmt == "csv"
    assert accesses == [Access(b"a", 2.0, 1.0), Access(b"b", 1.0, 2.0), Access(b"c", 5.0, 3.0)]


def test_plain_key_list_and_non_utf8_bytes(tmp_path: Path) -> None:
    """One key per line, count 1 and no time; bytes that are not UTF-8 survive as keys."""
    path = tmp_path / "keys.txt"
    path.write_bytes(b"k1\nk\xff2\n")
    accesses, _ = read_file(str(path))
    assert accesses == [Access(b"k1"), Access(b"k\xff2")]


def test_ndjson_hex_keys_and_iso_times(tmp_path: Path) -> None:
    """NDJSON is detected by its first line; hex keys decode and ISO dates become epoch seconds."""
    lines = [
        json.dumps({"key": b"u1".hex(), "time": "2024-05-01T10:00:00Z", "count": 3}),
        json.dumps({"key": b"u2".hex(), "time": "2024-05-01T10:00:01"}),
    ]
    accesses, fmt = read_text(tmp_path, "\n".join(lines) + "\n", as_hex=True)
    assert fmt == "ndjson"
    assert accesses == [Access(b"u1", 3.0, 1714557600.0), Access(b"u2", 1.0, 1714557601.0)]


def test_parse_time_and_count() -> None:
    """Times are numbers or ISO dates (naive = UTC); counts are finite and >= 0."""
    assert parse_time("12.5") == 12.5
    assert parse_time("1970-01-01T00:01:00") == 60.0
    assert parse_count("3") == 3.0
    with pytest.raises(ValueError, match="not finite"):
        parse_time("nan")
    with pytest.raises(ValueError, match=">= 0"):
        parse_count("-2")


def test_progress_bar_draws_only_when_asked() -> None:
    """Progress writes a bar ending in 100% and a newline to its stream; None writes nothing."""
    stream = io.StringIO()
    bar = Progress("reading x", 10, stream)
    bar.update(5, force=True)
    bar.close(10)
    assert stream.getvalue().endswith("[" + "#" * 30 + "] 100%\n")
    Progress("quiet", 10, None).close(10)  # no stream: nothing to write, no error


def test_plan_sample_splits_in_proportion_to_size() -> None:
    """Rows follow the bytes per tablet, the ranges tile the table, and they add up."""
    plan = plan_sample([(b"b", 10), (b"c", 20), (b"", 40)], 8)
    assert plan == [(None, b"b", 2), (b"b", b"c", 2), (b"c", None, 4)]


def test_plan_sample_merges_tiny_ranges_and_handles_no_samples() -> None:
    """Ranges too small for one row merge into the next; no samples means one range."""
    assert plan_sample([(b"b", 10), (b"c", 11), (b"", 40)], 8) == [
        (None, b"b", 2),
        (b"b", None, 6),
    ]
    assert plan_sample([], 5) == [(None, None, 5)]
    many = plan_sample([(b"a%03d" % i, i) for i in range(1, 100)] + [(b"", 100)], 3)
    assert sum(rows for _, _, rows in many) == 3
    assert many[0][0] is None
    assert many[-1][1] is None


# -- a table's rows as logical keys ------------------------------------------------------

CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
BEFORE_MS, AFTER_MS = 1_700_000_000_000, 1_710_000_000_000


def physical_rows(layout: Layout, keys: list[bytes]) -> list[Access]:
    """The rows a table written with ``layout`` holds for ``keys``, plus its record row."""
    rows = [Access(layout.locate(k)[1], 1.0, float(i)) for i, k in enumerate(keys)]
    return [*rows, Access(SCHEME_ROW_KEY, 1.0, 0.0)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        # Text: hash="java" salts UTF-8 keys only.
        st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12).map(
            str.encode
        ),
        min_size=1,
        max_size=60,
        unique=True,
    ),
    st.integers(1, 300),
    st.sampled_from(["crc32", "java", "farmhash"]),
    st.sampled_from([b"", b"~"]),
    st.sampled_from([None, fields(1, b"#")]),
)
def test_a_salted_tables_rows_are_read_as_their_logical_keys(
    keys: list[bytes], buckets: int, hash_name: str, marker: bytes, part: Any
) -> None:
    """Whatever the scheme: every row comes back under its logical key, with its count and
    time, the record row left out, and the key part (which only picks buckets) not needed."""
    scheme = SaltScheme(buckets, hash=hash_name, key_part=part, marker=marker)
    record = describe_layout(scheme)
    rows = physical_rows(Layout(scheme), keys)
    sample = logical_sample(rows, record, "saltedtable")
    assert [a.key for a in sample.accesses] == keys
    assert [a.time for a in sample.accesses] == [float(i) for i in range(len(keys))]
    assert (sample.rows, sample.record_rows, sample.outside, sample.hidden) == (
        len(keys) + 1,
        1,
        0,
        0,
    )


def test_a_cutoff_tables_legacy_rows_stay_and_copies_are_hidden() -> None:
    """With a cutoff: legacy rows keep their key, salted rows lose their prefix, and the
    backfilled copy of a legacy row in a bucket is left out, as every reader leaves it out."""
    policy = CutoffPolicy(CUTOFF, epoch_field("ms", index=0, digits=13))
    layout = Layout(SaltScheme(8), policy)
    legacy = [b"%d#old%d" % (BEFORE_MS + i, i) for i in range(5)]
    new = [b"%d#new%d" % (AFTER_MS + i, i) for i in range(5)]
    rows = physical_rows(layout, legacy + new)
    copy = SaltScheme(8).salt_key(legacy[0])
    rows.append(Access(copy, 1.0, 9.0))
    sample = logical_sample(rows, describe_layout(SaltScheme(8), policy), "saltedtable")
    assert [a.key for a in sample.accesses] == legacy + new
    assert (sample.record_rows, sample.outside, sample.hidden) == (1, 0, 1)
    assert sample.describe() == (
        "logical keys, unsalted with the table's layout record (family 'saltedtable': -n 8 "
        "--cutoff 2024-01-01T00:00:00+00:00 --time epoch:ms:0:13); left out: 1 record row, "
        "1 row readers hide"
    )


def test_rows_outside_a_layout_without_cutoff_are_left_out_and_counted() -> None:
    """Without a cutoff, a row outside every salt prefix is not the layout's data."""
    scheme = SaltScheme(4)
    rows = [*physical_rows(Layout(scheme), [b"a", b"b"]), Access(b"unsalted", 1.0, 1.0)]
    sample = logical_sample(rows, describe_layout(scheme), "cf")
    assert [a.key for a in sample.accesses] == [b"a", b"b"]
    assert sample.outside == 1
    assert "left out: 1 record row, 1 row outside its layout" in sample.describe()


def test_without_a_record_the_keys_are_kept_as_stored_but_the_reserved_row() -> None:
    """No record: keys as stored (nothing says how to unsalt them), the reserved row still out."""
    rows = [Access(b"03-a", 1.0, 1.0), Access(SCHEME_ROW_KEY + b"x", 1.0, 1.0)]
    sample = logical_sample(rows, None)
    assert [a.key for a in sample.accesses] == [b"03-a"]
    assert sample.describe() == (
        "keys as stored: the table has no layout record; left out: 1 record row"
    )


def test_a_custom_time_reader_still_unsalts_the_keys() -> None:
    """A cutoff whose time reader only its author's code has: keys still unsalted, none hidden."""
    policy = CutoffPolicy(CUTOFF, lambda k: int(k[:13]) * 1000)
    record = LayoutRecord(
        8, "crc32", None, b"-", b"", CutoffRecord(CUTOFF.isoformat(), 0, "app.read_time", "error")
    )
    layout = Layout(SaltScheme(8), policy)
    keys = [b"%d#x" % BEFORE_MS, b"%d#y" % AFTER_MS]
    sample = logical_sample(physical_rows(layout, keys), record, "saltedtable")
    assert [a.key for a in sample.accesses] == keys
    assert "(no flag gives the time reader app.read_time)" in sample.describe()
