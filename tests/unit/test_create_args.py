"""`saltedtable create`'s arguments, checked and decoded before any request (no Bigtable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from saltedtable import SaltScheme
from saltedtable._create import CreateResult, create_salted_table
from tests.cli_helpers import assert_one_line_error, run

WHERE = ("--project", "p", "--instance", "i")


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Calls of create_salted_table, which answers without a request."""
    calls: list[dict[str, Any]] = []

    def fake(project: str, instance: str, table_id: str, scheme: SaltScheme, **kw: Any) -> Any:
        calls.append(kw)
        splits: Sequence[bytes] = kw["extra_splits"]
        return CreateResult(f"projects/{project}/tables/{table_id}", True, tuple(splits), "st")

    monkeypatch.setattr("saltedtable._create.create_salted_table", fake)
    return calls


def test_hex_split_keys_are_decoded(
    capsys: pytest.CaptureFixture[str], created: list[dict[str, Any]]
) -> None:
    """With --hex, --split 7a7a is the key b"zz" (and 00ff two raw bytes), not the text."""
    code, _, err = run(capsys, "create", "t", *WHERE, "-n", "4", "--hex", "--split", "7a7a",
                       "--split", "00FF")  # fmt: skip
    assert (code, err) == (0, "")
    assert list(created[0]["extra_splits"]) == [b"zz", b"\x00\xff"]


def test_split_keys_without_hex_are_text(
    capsys: pytest.CaptureFixture[str], created: list[dict[str, Any]]
) -> None:
    """Without --hex, --split is the key's text as UTF-8."""
    code, _, _ = run(capsys, "create", "t", *WHERE, "-n", "4", "--split", "zz", "--split", "é")
    assert code == 0
    assert list(created[0]["extra_splits"]) == [b"zz", "é".encode()]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--hex", "--split", "zz"), ("--split 'zz'", "not hex")),
        (("--hex", "--split", "abc"), ("--split 'abc'", "not hex")),
        (("--hex", "--split", ""), ("--split", "empty")),
        (("--split", ""), ("--split", "empty")),
        (("--split", "x" * 4097), ("--split", "4097 bytes", "4096")),
        (("--hex", "--split", "00" * 4097), ("--split", "4097 bytes", "4096")),
        (("--family", "cf:max_age=99999999999999d"), ("max_age", "315576000000s")),
        (("--family", "cf:max_versions=2147483648"), ("max_versions", "2147483647")),
        (("--family", "cf:max_versions=-1"), ("max_versions", "from 1 to")),
    ],
)
def test_bad_create_arguments_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str],
    created: list[dict[str, Any]],
    args: tuple[str, ...],
    needles: tuple[str, ...],
) -> None:
    """Bad split keys and out-of-range GC numbers: exit 2, one line naming them, no request."""
    code, out, err = run(capsys, "create", "t", *WHERE, "-n", "4", *args)
    assert (code, out) == (2, "")
    assert_one_line_error(err, *needles)
    assert created == []


@pytest.mark.parametrize(
    ("split", "needle"),
    [(b"", "empty"), (b"k" * 4097, "4097 bytes"), (b"a\xffb" * 2000, "6000 bytes")],
)
def test_the_python_api_refuses_bad_split_keys_before_any_request(
    split: bytes, needle: str
) -> None:
    """create_salted_table checks extra_splits first (no emulator or server is reached)."""
    with pytest.raises(ValueError, match=needle):
        create_salted_table(
            "p", "i", "t", SaltScheme(4), extra_splits=[split], emulator_host="127.0.0.1:9"
        )
