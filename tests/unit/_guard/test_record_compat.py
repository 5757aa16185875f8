"""Layout records written before the module move open now, and the other way round.

``tests/vectors/layout_records_before_move.json`` holds the exact values saltedtable at
commit 3563838 (the last commit before the package's modules moved into folders)
stored for each layout of ``tests/vectors/layout_records.py``: plain schemes, every
ready-made key part, named and custom parts, a cutoff with each ready-made timestamp
reader, and the migration states.

* Rolling forward: each stored value, read as the guard reads the reserved row,
  agrees with the same layout built now (the guard's own decision, ``guard_action``).
* Rolling back: the current code stores the same bytes for the same layout, and the
  release accepts its own bytes, so it opens a table the current code wrote. That
  argument needs no old code; :func:`test_the_release_before_reads_what_is_stored_now`
  also runs the release's decoder on today's bytes, from the git history (it is
  skipped in a clone without that commit, e.g. a shallow one).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.cloud.bigtable.data.row import Cell, Row

from saltedtable import RECORD_FAMILY, SCHEME_ROW_KEY, LayoutRecord
from saltedtable._guard.decisions import (
    SCHEME_QUALIFIER,
    encode_layout,
    found_record,
    guard_action,
    open_differences,
)
from saltedtable._guard.migration import DELETING
from tests.vectors import layout_records

STORED: dict[str, dict[str, Any]] = json.loads(layout_records.STORED.read_text(encoding="utf-8"))[
    "records"
]
NAMES = sorted(STORED)


def _reserved_row(value: bytes, family: str = RECORD_FAMILY) -> Row:
    """The reserved row as a read returns it, holding ``value``."""
    return Row(SCHEME_ROW_KEY, [Cell(value, SCHEME_ROW_KEY, family, SCHEME_QUALIFIER, 1_000)])


def _built_now(name: str) -> LayoutRecord:
    entry = STORED[name]
    record: LayoutRecord = layout_records.build(
        (entry["scheme"], entry["cutoff"], entry["migration"]), layout_records.namespace()
    )
    return record


def _reader_now(name: str) -> LayoutRecord:
    """The record of the layout a reader opens the table with (salted only while deleting)."""
    entry = STORED[name]
    cutoff = None if entry["migration"] == DELETING else entry["cutoff"]
    record: LayoutRecord = layout_records.build(
        (entry["scheme"], cutoff, None), layout_records.namespace()
    )
    return record


def test_the_stored_file_covers_the_cases_and_names_its_release() -> None:
    """Every case has a stored value, and the file says which release wrote it."""
    assert set(STORED) == set(layout_records.CASES)
    assert all(entry["stored"] for entry in STORED.values())
    head = json.loads(layout_records.STORED.read_text(encoding="utf-8"))
    assert head["written_by"].startswith("saltedtable 0.1.0, commit 3563838")
    readers = " ".join(str(entry["cutoff"]) for entry in STORED.values())
    for reader in ("epoch_field", "reversed_epoch_field", "iso8601_field", "big_endian_int"):
        assert f"{reader}(" in readers
    states = {entry["migration"] for entry in STORED.values()}
    assert states == {None, "backfill", "cutover", "deleting"}


@pytest.mark.parametrize("name", NAMES)
def test_a_record_the_release_before_stored_opens_now(name: str) -> None:
    """Read as the guard reads it, the old value is the same layout, and the guard says ok."""
    found = found_record(_reserved_row(STORED[name]["stored"].encode()))
    assert found is not None
    stored, family = found
    assert stored == _built_now(name)
    assert stored.extra == ()  # nothing in it the current code does not know
    reader = _reader_now(name)
    assert open_differences(stored, reader) == []
    assert guard_action(stored, reader, family=family) == "ok"


@pytest.mark.parametrize("name", NAMES)
def test_the_current_code_stores_the_bytes_the_release_before_stored(name: str) -> None:
    """Byte for byte, so the release before (which reads its own bytes) opens them."""
    assert encode_layout(_built_now(name)) == STORED[name]["stored"].encode()


def test_a_different_layout_is_still_refused() -> None:
    """The comparison above can fail: an old record against another key part or reader."""
    stored, _ = found_record(_reserved_row(STORED["fields(1)"]["stored"].encode())) or (None, None)
    assert stored is not None
    other = _built_now("fields(3, b'/')")
    assert open_differences(stored, other) != []
    reader, _ = found_record(
        _reserved_row(STORED["cutoff, big_endian_int(4, 4, s)"]["stored"].encode())
    ) or (None, None)
    assert reader is not None
    assert open_differences(reader, _built_now("cutoff, big_endian_int()")) != []


def _has_commit(commit: str) -> bool:
    root = layout_records.ROOT
    done = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True
    )
    return done.returncode == 0


def test_the_release_before_reads_what_is_stored_now(tmp_path: Path) -> None:
    """The pre-move decoder (3563838), from git, reads today's bytes as today's layouts."""
    if not _has_commit(layout_records.RELEASE):
        pytest.skip(f"commit {layout_records.RELEASE} is not in this clone (shallow?)")
    now = {name: encode_layout(_built_now(name)).decode("ascii") for name in NAMES}
    written = tmp_path / "now.json"
    written.write_text(json.dumps({"records": {n: {"stored": v} for n, v in now.items()}}))
    out = layout_records.run_with_release(
        layout_records.RELEASE, ["--here", "--decode", str(written)]
    )
    decoded = json.loads(out)
    assert decoded == {
        name: {"as_dict": _built_now(name).as_dict(), "differences": []} for name in NAMES
    }
