"""How ``saltedtable read`` and ``lookup`` print rows: cbt's text layout, and JSON."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from google.cloud.bigtable.data.row import Cell, Row
from hypothesis import given
from hypothesis import strategies as st

from saltedtable._cli.row_output import (
    bytes_text,
    cbt_time,
    go_quote,
    row_json,
    row_text,
    text_bytes,
)

MAY_1: int = 1_714_564_800_000_000  # 2024-05-01T12:00:00Z in microseconds


def make_row(key: bytes, *cells: tuple[str, bytes, int, bytes]) -> Row:
    return Row(key, [Cell(value, key, family, qual, ts) for family, qual, ts, value in cells])


@pytest.mark.parametrize(
    ("data", "quoted"),
    [
        (b"", '""'),
        (b"plain text", '"plain text"'),
        (b'say "hi"\\', '"say \\"hi\\"\\\\"'),
        (b"\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
        (b"\x00\x01\x1f\x7f", '"\\x00\\x01\\x1f\\x7f"'),
        (b"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", '"café € \U0001f600"'),
        (b"\xff\xfe", '"\\xff\\xfe"'),  # not UTF-8: byte by byte
        (b"\xc0\xaf", '"\\xc0\\xaf"'),  # an overlong encoding is not UTF-8 either
        (b"\xed\xa0\x80", '"\\xed\\xa0\\x80"'),  # nor is an encoded surrogate
        (b"\xe2\x82", '"\\xe2\\x82"'),  # a character cut short
        (b"\xc2\xa0\xe2\x80\x8b", '"\\u00a0\\u200b"'),  # UTF-8 that does not print
        (b"\xf4\x8f\xbf\xbf", '"\\U0010ffff"'),
    ],
)
def test_go_quote_writes_what_go_percent_q_writes(data: bytes, quoted: str) -> None:
    """Values are quoted as cbt quotes them (Go's strconv.Quote of the bytes)."""
    assert go_quote(data) == quoted


def test_cbt_time_is_cbts_layout_in_the_given_zone() -> None:
    """A cell time: YYYY/MM/DD-HH:MM:SS.ffffff, in the zone asked for."""
    assert cbt_time(MAY_1 + 123, dt.UTC) == "2024/05/01-12:00:00.000123"
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert cbt_time(MAY_1, plus2) == "2024/05/01-14:00:00.000000"
    assert cbt_time(0, dt.UTC) == "1970/01/01-00:00:00.000000"


def test_row_text_is_cbts_layout() -> None:
    """Dashes, the key, then each cell by family and qualifier, padded to 40, value quoted."""
    row = make_row(
        b"user1",
        ("cf", b"q", MAY_1, b"v1"),
        ("a", b"z", MAY_1 + 1, b"\x00"),
        ("cf", b"b", MAY_1 + 2, b"new"),
        ("cf", b"b", MAY_1 + 1, b"old"),
    )
    assert row_text(row, tz=dt.UTC) == (
        "----------------------------------------\n"
        "user1\n"
        "  a:z                                      @ 2024/05/01-12:00:00.000001\n"
        '    "\\x00"\n'
        "  cf:b                                     @ 2024/05/01-12:00:00.000002\n"
        '    "new"\n'
        "  cf:b                                     @ 2024/05/01-12:00:00.000001\n"
        '    "old"\n'
        "  cf:q                                     @ 2024/05/01-12:00:00.000000\n"
        '    "v1"\n'
        "\n"
    )


def test_row_text_escapes_keys_and_qualifiers_or_shows_hex() -> None:
    """Keys and qualifiers show printable ASCII and \\xNN for other bytes; --hex: keys as hex."""
    row = make_row(b"k\xff#1", ("cf", b"q\x00" + b"x" * 40, MAY_1, b"v"))
    lines = row_text(row, tz=dt.UTC).splitlines()
    assert lines[1] == "k\\xff#1"
    assert lines[2] == f"  cf:q\\x00{'x' * 40} @ 2024/05/01-12:00:00.000000"  # longer than 40
    hexed = row_text(row, hex=True, tz=dt.UTC).splitlines()
    assert hexed[1:3] == ["6bff2331", lines[2]]  # the key as hex, the qualifier as before


def test_row_json_has_key_cells_family_qualifier_time_and_value() -> None:
    """One object per row; bytes as one character per byte; the key as hex with hex."""
    row = make_row(b"user1", ("cf", b"q", MAY_1, b"\x00\xffv"))
    assert row_json(row) == {
        "key": "user1",
        "cells": [
            {
                "family": "cf",
                "qualifier": "q",
                "timestamp_micros": MAY_1,
                "value": "\x00\xffv",
            }
        ],
    }
    assert row_json(row, hex=True)["key"] == "7573657231"


@given(st.binary(min_size=1, max_size=40), st.binary(max_size=20), st.binary(max_size=60))
def test_json_bytes_round_trip_through_json_text(
    key: bytes, qualifier: bytes, value: bytes
) -> None:
    """Every byte string comes back exactly from the JSON line (``text.encode('latin-1')``)."""
    row = make_row(key, ("cf", qualifier, MAY_1, value))
    parsed = json.loads(json.dumps(row_json(row)))
    assert text_bytes(parsed["key"]) == key
    cell = parsed["cells"][0]
    assert (text_bytes(cell["qualifier"]), text_bytes(cell["value"])) == (qualifier, value)
    assert bytes_text(key).isascii() == key.isascii()
