"""The layout record of a layout with epochs (version 2): format, round trip, refusals.

Today's two shapes keep today's bytes; a list of several salted epochs is stored with
its newest scheme at the top level and the list under ``epochs``, which a release that
predates epochs keeps aside and compares, so its guard refuses the table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from saltedtable import (
    CutoffPolicy,
    Layout,
    LayoutError,
    SaltScheme,
    SchemeMismatchError,
    epoch_field,
    fields,
)
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import (
    EPOCHS_VERSION,
    LayoutRecord,
    describe_layout,
    guard_action,
)
from saltedtable._scheme.epochs import Epoch, Epochs
from tests.unit._guard.test_record_compat import _has_commit
from tests.vectors import layout_records

T0 = 1_704_067_200_000_000  # 2024-01-01 in µs
DAY = 86_400_000_000
READER = epoch_field("ms", b"#", 1, 13)


def record_of(layout: Layout) -> LayoutRecord:
    """What the guard stores for ``layout``."""
    return describe_layout(layout.scheme, layout.cutoff, epochs=layout.epochs)


def grown(min_lead: float | None = 300.0) -> Layout:
    """unsalted, N=8 (fields(1)) from T0, N=64 from T0 + 1 day, marker ~."""
    return Layout.of_epochs(
        Epochs(
            (
                Epoch(None, None),
                Epoch(T0, SaltScheme(8, key_part=fields(1), marker=b"~")),
                Epoch(T0 + DAY, SaltScheme(64, marker=b"~")),
            ),
            READER,
            "first",
            min_lead,
        )
    )


def test_a_layout_with_epochs_is_stored_as_version_2_naming_its_newest_scheme() -> None:
    """Top level: the newest scheme, no cutoff; ``epochs``: list, reader, fallback, lead."""
    stored = json.loads(record_of(grown()).encode())
    assert stored["version"] == EPOCHS_VERSION == 2
    assert (stored["buckets"], stored["marker"], stored["cutoff"]) == (64, "7e", None)
    epochs = stored["epochs"]
    assert epochs["time"] == repr(READER)
    assert (epochs["unreadable"], epochs["min_lead_s"]) == ("first", 300.0)
    assert [e["buckets"] for e in epochs["list"]] == [None, 8, 64]
    assert [e["start_micros"] for e in epochs["list"]] == [None, T0, T0 + DAY]
    assert epochs["list"][1]["key_part"] == "fields(k=1, sep=b'#')"
    assert epochs["list"][2]["start"] == "2024-01-02T00:00:00+00:00"


@pytest.mark.parametrize("lead", [None, 60.0])
def test_an_epoch_record_rebuilds_the_same_layout(lead: float | None) -> None:
    """encode -> decode -> layout_of_record gives the layout back, and the guard agrees."""
    layout = grown(lead)
    record = LayoutRecord.decode(record_of(layout).encode())
    assert record == record_of(layout)
    assert layout_of_record(record) == layout
    assert guard_action(record, record_of(layout), family="f") == "ok"


def test_todays_shapes_given_as_epochs_are_stored_as_today() -> None:
    """One scheme, or a cutoff, made from epochs: byte for byte the record of before."""
    pol = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), READER, unreadable="legacy")
    for scheme, cutoff in ((SaltScheme(8), None), (SaltScheme(8, marker=b"~"), pol)):
        before = describe_layout(scheme, cutoff).encode()
        layout = Layout.of_epochs(Layout(scheme, cutoff).as_epochs())
        assert record_of(layout).encode() == before
        assert layout_of_record(LayoutRecord.decode(before)) == layout


def test_a_reader_without_the_epochs_is_refused_naming_them() -> None:
    """A table object made with only the newest scheme meets the stored epochs: mismatch."""
    stored = record_of(grown())
    with pytest.raises(SchemeMismatchError, match="epochs"):
        guard_action(stored, describe_layout(SaltScheme(64, marker=b"~")), family="f")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"buckets": 16}, "newest epoch"),
        ({"cutoff": {"at_micros": 1, "timestamp": "x", "unreadable": "error"}}, "not both"),
        ({"epochs": {"list": []}}, "non-empty"),
        ({"epochs": [1]}, "not an object with a list"),
        ({"epochs": {"list": [3]}}, "not an object"),
        ({"epochs": {"list": [{"buckets": 0}]}}, "buckets"),
        ({"epochs": {"list": [{"buckets": 64}], "min_lead_s": "x"}}, "min_lead_s"),
    ],
)
def test_malformed_epoch_records_are_refused(change: dict[str, object], words: str) -> None:
    """Fields of the wrong shape, a top level that is not the newest epoch: LayoutError."""
    stored = json.loads(record_of(grown()).encode())
    stored.update(change)
    with pytest.raises(LayoutError, match=words):
        LayoutRecord.from_dict(stored)


def test_an_epoch_record_with_a_custom_reader_or_a_migration_is_not_rebuilt() -> None:
    """Only its author's code has a custom reader; migrations run on cutoff layouts only."""
    record = record_of(grown())
    assert record.epochs is not None
    custom = dataclasses.replace(
        record, epochs=dataclasses.replace(record.epochs, time="my.module.reader")
    )
    with pytest.raises(LayoutError, match="only the code that wrote it"):
        layout_of_record(custom)
    with pytest.raises(LayoutError, match="migration"):
        layout_of_record(dataclasses.replace(record, migration="backfill"))


def test_the_release_before_epochs_refuses_a_table_with_epochs(tmp_path: Path) -> None:
    """The pre-move release (3563838), from git, decodes the record and finds it differs."""
    if not _has_commit(layout_records.RELEASE):
        pytest.skip(f"commit {layout_records.RELEASE} is not in this clone (shallow?)")
    # Its own record for "crc32, 16 buckets" is SaltScheme(16): give that as the newest epoch.
    layout = Layout.of_epochs(
        Epochs((Epoch(None, SaltScheme(8)), Epoch(T0, SaltScheme(16))), READER)
    )
    written = tmp_path / "now.json"
    stored = record_of(layout).encode().decode("ascii")
    written.write_text(json.dumps({"records": {"crc32, 16 buckets": {"stored": stored}}}))
    out = layout_records.run_with_release(
        layout_records.RELEASE, ["--here", "--decode", str(written)]
    )
    differences = json.loads(out)["crc32, 16 buckets"]["differences"]
    assert len(differences) == 1
    assert differences[0].startswith("epochs: stored {")


def test_an_override_never_drops_fields_the_table_object_does_not_know() -> None:
    """Hot key lists (or a window's state) in the stored record survive an override."""
    from saltedtable import HotLayout, LayoutError
    from saltedtable._guard.hot_record import with_hot

    scheme = SaltScheme(16)
    stored = with_hot(describe_layout(scheme), HotLayout(scheme, rows={b"counter": 4}))
    with pytest.raises(LayoutError, match="'hot'"):
        guard_action(stored, describe_layout(SaltScheme(32)), family="f", override=True)
    same = with_hot(describe_layout(SaltScheme(32)), HotLayout(SaltScheme(32), rows={b"c": 2}))
    assert guard_action(stored, same, family="f", override=True) == "replace"
