"""Custom key parts carry a stable name in the layout record; unnamed ones are refused."""

from __future__ import annotations

import functools

import pytest

from saltedtable import (
    LayoutError,
    SaltedTableAsync,
    SaltScheme,
    SaltSchemeError,
    before_last,
    describe_layout,
    fields,
    named_key_part,
)
from saltedtable._scheme.layout import _legacy_gaps
from saltedtable._scheme.named import key_part_identity
from tests.fakes import FakeTable


def first_eight(key: bytes) -> bytes:
    return key[:8]


def first_four(key: bytes) -> bytes:
    return key[:4]


class Cut:
    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, key: bytes) -> bytes:
        return key[: self.n]


def nested() -> object:
    def part(key: bytes) -> bytes:
        return key

    return part


@pytest.mark.parametrize(
    "part",
    [
        lambda key: key[:8],
        functools.partial(lambda key, n: key[:n], n=8),
        Cut(8),
        nested(),
    ],
    ids=["lambda", "partial", "callable-object", "nested-function"],
)
def test_a_key_part_without_a_stable_name_is_refused_with_the_way_out(part: object) -> None:
    with pytest.raises(LayoutError, match=r"no stable name.*named_key_part\('my-part/v1'"):
        describe_layout(SaltScheme(8, key_part=part))  # type: ignore[arg-type]


def test_two_lambdas_never_compare_equal_once_named() -> None:
    """The issue's hole: every lambda had the same record; named ones differ by name."""
    a = SaltScheme(8, key_part=named_key_part("tenant/v1", lambda k: k[:8]))
    b = SaltScheme(8, key_part=named_key_part("tenant/v2", lambda k: k[:4]))
    same = SaltScheme(8, key_part=named_key_part("tenant/v1", lambda k: k[:8]))
    assert describe_layout(a).key_part == "name:tenant/v1"
    assert describe_layout(a) != describe_layout(b)
    assert describe_layout(a) == describe_layout(same)


def test_module_functions_are_named_by_their_import_path() -> None:
    eight = key_part_identity(first_eight)
    four = key_part_identity(first_four)
    assert eight == f"{__name__}.first_eight"
    assert eight != four


def test_ready_made_parts_keep_their_value_as_identity() -> None:
    assert key_part_identity(fields(2)) == repr(fields(2))
    assert key_part_identity(before_last()) != key_part_identity(before_last(b"#"))
    assert key_part_identity(None) is None


@pytest.mark.parametrize("module", ["saltedtable", "saltedtable._salt", "elsewhere"])
def test_a_ready_made_part_is_known_by_its_class_not_its_module_name(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """The record's text for fields(...) stays the same wherever the class says it lives."""
    monkeypatch.setattr(fields, "__module__", module)
    monkeypatch.setattr(before_last, "__module__", module)
    assert key_part_identity(fields(2, b"/")) == "fields(k=2, sep=b'/')"
    assert key_part_identity(before_last()) == "before_last(sep=b'-')"
    assert describe_layout(SaltScheme(8, key_part=fields(1))).key_part == "fields(k=1, sep=b'#')"


def test_a_named_part_salts_and_plans_like_its_function() -> None:
    named = SaltScheme(16, key_part=named_key_part("f2", fields(2)))
    plain = SaltScheme(16, key_part=fields(2))
    for key in (b"a#b#c", b"a#b#d", b"x", b"user1#2024#9"):
        assert named.bucket_of(key) == plain.bucket_of(key)
    assert named.key_part is not None
    assert named.key_part.shared_part(b"a#b#") == b"a#b"  # type: ignore[attr-defined]
    assert named_key_part("n", first_eight).shared_part(b"abc") is None
    assert _legacy_gaps(named) == _legacy_gaps(plain)


@pytest.mark.parametrize("name", ["", "   ", None])
def test_a_key_part_name_must_be_given(name: object) -> None:
    with pytest.raises(SaltSchemeError, match="name must be a non-empty string"):
        named_key_part(name, first_eight)  # type: ignore[arg-type]


def test_a_guarded_table_refuses_an_unnamed_part_and_an_unguarded_one_takes_it() -> None:
    with pytest.raises(LayoutError, match="no stable name"):
        SaltedTableAsync(FakeTable(), SaltScheme(8, key_part=lambda k: k))
    SaltedTableAsync(FakeTable(), SaltScheme(8, key_part=lambda k: k), guard=False)
