"""Public names name the package as their module: reprs, tracebacks and pickles say ``saltedtable``.

The classes and functions live in private modules that may move between releases
(they moved once, into folders); what a user sees and what a pickle stores names
the module users import them from.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import os
import pickle
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import saltedtable
from saltedtable import (
    CutoffPolicy,
    KeyRange,
    Layout,
    LayoutRecord,
    ReadBudget,
    SaltScheme,
    SaltSchemeError,
    before_last,
    big_endian_int,
    describe_layout,
    epoch_field,
    fields,
    iso8601_field,
    named_key_part,
    reversed_epoch_field,
)
from saltedtable._public import publish, publish_one

CUT = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def tenant(key: bytes) -> bytes:
    """A custom key part at the top of a module (named, so the guard takes it)."""
    return key[:4]


def _public_objects() -> list[tuple[str, object]]:
    """Every class and function in ``saltedtable.__all__`` (lazy ones loaded)."""
    found = []
    for name in saltedtable.__all__:
        value = getattr(saltedtable, name)
        if isinstance(value, type | types.FunctionType):
            found.append((name, value))
    return found


@pytest.mark.parametrize(
    ("name", "value"), _public_objects(), ids=[name for name, _ in _public_objects()]
)
def test_a_public_name_says_saltedtable_and_resolves_there(name: str, value: object) -> None:
    """``saltedtable.X`` is where ``X`` says it lives, so pickle and reprs find it there."""
    assert getattr(value, "__module__") == "saltedtable"  # noqa: B009
    assert getattr(value, "__qualname__") == name  # noqa: B009
    assert getattr(saltedtable, name) is value


def test_class_reprs_and_tracebacks_name_the_package() -> None:
    assert repr(SaltScheme) == "<class 'saltedtable.SaltScheme'>"
    with pytest.raises(SaltSchemeError) as caught:
        SaltScheme(0)
    assert caught.exconly().startswith("saltedtable.SaltSchemeError: buckets must be >= 1")


def test_a_lazy_name_says_saltedtable_once_loaded() -> None:
    """The names the package imports on first use get the package's name then."""
    code = (
        "import sys, saltedtable\n"
        "assert 'saltedtable._async.table' not in sys.modules\n"
        "print(saltedtable.SaltedTableAsync.__module__, saltedtable.SaltedTable.__module__,"
        " saltedtable.plan_reads.__module__)\n"
    )
    root = Path(saltedtable.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.split() == ["saltedtable"] * 3


#: One of each value a pipeline or a user may pickle.
VALUES: list[object] = [
    SaltScheme(16),
    SaltScheme(64, hash="farmhash", key_part=fields(2, b"/"), separator=b":", marker=b"~"),
    SaltScheme(10, hash="java", key_part=before_last(b"_")),
    SaltScheme(8, hash="phoenix", key_part=named_key_part("tenant/v1", tenant)),
    SaltScheme(8, key_part=tenant),
    CutoffPolicy(CUT, epoch_field(unit="ms", sep=b"/", index=1, digits=13)),
    CutoffPolicy(CUT, reversed_epoch_field(unit="s"), unreadable="legacy"),
    CutoffPolicy(CUT, iso8601_field(sep=b"|", index=0)),
    CutoffPolicy(CUT, big_endian_int(offset=2, width=4, unit="s"), unreadable="salted"),
    Layout(SaltScheme(32, key_part=fields(1)), CutoffPolicy(CUT, epoch_field())),
    Layout(SaltScheme(4)),
    describe_layout(SaltScheme(16, key_part=fields(1)), CutoffPolicy(CUT, epoch_field())),
    describe_layout(SaltScheme(16)),
    KeyRange(b"a", True, b"b", False),
    ReadBudget(),
    fields,
    before_last(),
    epoch_field(),
    describe_layout,
    SaltSchemeError("bad"),
]


@pytest.mark.parametrize("value", VALUES, ids=[str(i) for i in range(len(VALUES))])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_values_pickle_under_the_package_name_and_come_back_equal(
    value: object, protocol: int
) -> None:
    """A pickle names ``saltedtable`` and no private module, so a later layout still loads it."""
    data = pickle.dumps(value, protocol=protocol)
    assert b"saltedtable" in data
    assert b"saltedtable._" not in data, data
    again = pickle.loads(data)
    if isinstance(value, BaseException):
        assert (type(again), again.args) == (type(value), value.args)
    else:
        assert again == value


def test_an_unpickled_scheme_salts_as_before() -> None:
    for value in VALUES:
        if isinstance(value, SaltScheme):
            again = pickle.loads(pickle.dumps(value))
            assert again.salt_key(b"user1/2024#x") == value.salt_key(b"user1/2024#x")
            assert again.prefixes == value.prefixes


@pytest.mark.parametrize(
    "cls",
    [v for _, v in _public_objects() if isinstance(v, type) and dataclasses.is_dataclass(v)],
    ids=lambda c: c.__qualname__,
)
def test_type_hints_of_public_dataclasses_still_resolve(cls: type) -> None:
    """``typing.get_type_hints`` (pydantic, hypothesis) reads them although __module__ moved."""
    hints = typing.get_type_hints(cls)
    assert not [name for name, hint in hints.items() if isinstance(hint, str)]


def test_scheme_type_hints_are_the_objects_the_module_named() -> None:
    hints = typing.get_type_hints(SaltScheme)
    assert hints["buckets"] is int
    assert hints["key_part"] == collections.abc.Callable[[bytes], bytes] | None


def test_publish_touches_only_classes_and_functions_of_private_modules() -> None:
    def made() -> None: ...

    class Private: ...

    class Public: ...

    Private.__module__ = made.__module__ = "saltedtable._somewhere.inner"
    Public.__module__ = "saltedtable.testing"
    namespace = {"made": made, "Private": Private, "Public": Public, "NUMBER": 3, "dict": dict}
    publish(namespace, [*namespace, "missing"], "saltedtable.beam")
    assert (made.__module__, Private.__module__) == ("saltedtable.beam", "saltedtable.beam")
    assert Public.__module__ == "saltedtable.testing"
    assert dict.__module__ == "builtins"
    # The first public module to claim a name keeps it.
    publish_one(Private, "saltedtable")
    assert Private.__module__ == "saltedtable.beam"
    Private.__module__ = "otherpackage._private"
    publish_one(Private, "saltedtable")
    assert Private.__module__ == "otherpackage._private"


def test_the_record_of_a_layout_is_unchanged_by_the_public_module() -> None:
    """The stored text names the ready-made parts and readers by value, never by module."""
    record = describe_layout(
        SaltScheme(16, key_part=fields(2, b"/")),
        CutoffPolicy(CUT, big_endian_int(offset=2, width=4, unit="s")),
    )
    assert isinstance(record, LayoutRecord)
    assert record.key_part == "fields(k=2, sep=b'/')"
    assert record.cutoff is not None
    assert record.cutoff.timestamp == "big_endian_int(offset=2, width=4, unit='s')"
    assert describe_layout(SaltScheme(8, key_part=tenant)).key_part == f"{__name__}.tenant"
