"""The prepare step of single-row writes (``_facade.prepare_row_write``): pure, no I/O."""

from __future__ import annotations

import datetime as dt

import pytest
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule, IncrementRule
from hypothesis import given
from hypothesis import strategies as st

from saltedtable import CutoffPolicy, RowKeyError, SaltScheme, epoch_field
from saltedtable._facade import RowWrite, prepare_row_write
from saltedtable._scheme.layout import Layout

SCHEME = SaltScheme(8)
CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@given(st.binary(min_size=1, max_size=64))
def test_a_write_goes_where_the_layout_puts_its_key(key: bytes) -> None:
    """The prepared write's bucket and physical key are the layout's, for bytes and str keys."""
    layout = Layout(SCHEME)
    write = prepare_row_write(layout, key, SetCell("cf", b"q", b"v"), operation_timeout=5)
    assert write == RowWrite(key, *layout.locate(key), "cf")


def test_a_str_key_is_encoded_as_the_client_encodes_it() -> None:
    """A str key is UTF-8, as the client's own write takes it."""
    write = prepare_row_write(Layout(SCHEME), "kéy", [], operation_timeout=5)
    assert write.key == "kéy".encode()
    assert write.physical == SCHEME.salt_key("kéy")


@pytest.mark.parametrize(
    ("changes", "family"),
    [
        ((SetCell("a", b"q", b"v"),), "a"),
        (([DeleteAllFromRow(), SetCell("b", b"q", b"v")],), "b"),
        (([DeleteAllFromRow()],), None),
        ((None, [SetCell("f", b"q", b"v")]), "f"),  # a conditional write's false case
        (([DeleteAllFromRow()], SetCell("f", b"q", b"v")), "f"),
        (([SetCell("t", b"q", b"v")], [SetCell("f", b"q", b"v")]), "t"),
        ((AppendValueRule("r", b"q", b"x"),), "r"),
        (([IncrementRule("r1", b"q", 1), IncrementRule("r2", b"q", 1)],), "r1"),
        ((None, None), None),
    ],
)
def test_the_guard_family_is_the_first_one_named(changes: tuple[object, ...], family: str) -> None:
    """The family the guard stores the record in: the first any change names, in order."""
    write = prepare_row_write(Layout(SCHEME), b"k", *changes, operation_timeout=5)  # type: ignore[arg-type]
    assert write.family == family


def test_a_legacy_key_of_a_cutoff_layout_has_no_bucket() -> None:
    """Before the cutoff a key stays where it was written: unsalted, bucket None."""
    cutoff = CutoffPolicy(CUTOFF, epoch_field("ms", digits=13))
    layout = Layout(SCHEME, cutoff)
    old = b"dev#" + b"%013d" % int(dt.datetime(2023, 6, 1, tzinfo=dt.UTC).timestamp() * 1000)
    new = b"dev#" + b"%013d" % int(dt.datetime(2025, 6, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert prepare_row_write(layout, old, [], operation_timeout=5).bucket is None
    assert prepare_row_write(layout, old, [], operation_timeout=5).physical == old
    assert prepare_row_write(layout, new, [], operation_timeout=5).bucket == SCHEME.bucket_of(new)


@pytest.mark.parametrize(
    ("key", "timeouts", "error"),
    [
        (b"", {"operation_timeout": 5}, RowKeyError),
        (b"k", {"operation_timeout": 0}, ValueError),
        (b"k", {"operation_timeout": 5, "attempt_timeout": -1}, ValueError),
    ],
)
def test_a_bad_write_is_refused_naming_the_problem(
    key: bytes, timeouts: dict[str, float], error: type[Exception]
) -> None:
    """An empty key or a non-positive timeout raises before anything could be sent."""
    with pytest.raises(error):
        prepare_row_write(Layout(SCHEME), key, [], **timeouts)
