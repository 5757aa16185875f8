"""split_hot_key on a part whose rows exist, and finish_hot_move, on a FakeTable."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

import saltedtable._sync_autogen.table as sync_table
from saltedtable import (
    HotLayout,
    LayoutError,
    SaltedTable,
    SaltScheme,
    SaltSchemeError,
    SchemeMismatchError,
    fields,
    finish_hot_move,
    split_hot_key,
)
from saltedtable._guard.families import FamilyInfo
from saltedtable._scheme.hot_move import MOVE_FAMILY
from tests.fakes import FakeTable, SyncFakeTable

SCHEME = SaltScheme(8, key_part=fields(1))
KEYS = [b"t7#%02d" % i for i in range(20)]


def _table() -> tuple[FakeTable, SyncFakeTable]:
    fake = FakeTable(families=[FamilyInfo("cf"), FamilyInfo(MOVE_FAMILY), FamilyInfo("st")])
    sync = SyncFakeTable(fake)
    plain = SaltedTable(sync, SCHEME)  # type: ignore[arg-type]
    plain.guard_scheme(family="st")
    for key in KEYS:
        plain.mutate_row(key, SetCell("cf", b"a", b"old", 1000))
    return fake, sync


def _past() -> dt.datetime:
    """A clock far enough back that a split's start (now plus the lead) has passed."""
    return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=600)


def _rows(sync: SyncFakeTable, hot: HotLayout) -> list[tuple[bytes, list[bytes]]]:
    table = SaltedTable(sync, SCHEME, hot=hot)  # type: ignore[arg-type]
    return [(r.row_key, [c.value for c in r.cells]) for r in table.read_prefix(b"t7#")]


def test_a_part_with_rows_moves_and_the_finish_moves_them() -> None:
    fake, sync = _table()
    before, after = split_hot_key(sync, "part", b"t7", 4, now=_past())
    assert before == HotLayout(SCHEME)
    assert (dict(after.parts), dict(after.moving)) == ({b"t7": 4}, {b"t7": 1})
    with pytest.raises(SaltSchemeError, match="still moving from K=1"):
        split_hot_key(sync, "part", b"t7", 8, now=_past())
    moved = [k for k in KEYS if after.move_keys(k)[1] is not None]
    table = SaltedTable(sync, SCHEME, hot=after)  # type: ignore[arg-type]
    table.mutate_row(moved[0], SetCell("cf", b"b", b"new", 2000))
    table.mutate_row(moved[1], DeleteAllFromRow())
    want = _rows(sync, after)
    assert [k for k, _ in want] == [k for k in KEYS if k != moved[1]]

    done = finish_hot_move(sync, b"t7")
    assert (done.keys, done.retired, done.finished) == (len(moved) - 1, len(moved) - 1, True)
    assert done.tombstones == 1  # moved[1]'s delete left one in its new row
    plain = HotLayout(SCHEME, parts={b"t7": 4})
    assert _rows(sync, plain) == want  # the record's lists now, and no old row left
    olds = {after.move_keys(k)[1] for k in moved}
    assert not olds & set(fake.row_keys())
    assert not any(c[0] == MOVE_FAMILY for k in fake.row_keys() for c in fake.cells_of(k))
    with pytest.raises(LayoutError, match="hot part 't7' is not moving"):
        finish_hot_move(sync, b"t7")


class _Losing(SyncFakeTable):
    """Every backfill copy loses its race (its predicate matches): nothing is copied."""

    def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        if kwargs.get("false_case_mutations"):
            return True
        call = SyncFakeTable.__getattr__(self, "check_and_mutate_row")
        return bool(call(row_key, predicate, **kwargs))


def test_the_finish_refuses_while_rows_are_left_and_names_them() -> None:
    fake, sync = _table()
    _, after = split_hot_key(sync, "part", b"t7", 4, now=_past())
    want = _rows(sync, after)
    with pytest.raises(LayoutError, match=r"row\(s\) of hot part 't7' are still at their old"):
        finish_hot_move(_Losing(fake), b"t7", max_replans=2)
    assert _rows(sync, after) == want  # readers see the same rows
    # The record still names the move: a table made with the same lists but without
    # it adopts it (a superset read) and reads the same rows.
    assert _rows(sync, HotLayout(SCHEME, parts={b"t7": 4})) == want
    # One made without the part listed at all is refused by the guard.
    with pytest.raises(SchemeMismatchError, match="hot"):
        SaltedTable(sync, SCHEME, hot=HotLayout(SCHEME, rows={b"t1#x": 2})).read_row(KEYS[0])  # type: ignore[arg-type]


def test_the_finish_waits_a_clock_margin_past_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer whose clock runs behind writes the old place after the start: not yet finished."""
    fake, sync = _table()
    _, after = split_hot_key(sync, "part", b"t7", 4, min_lead=0.2)
    assert after.start_micros is not None
    key = next(k for k in KEYS if after.move_keys(k)[1] is not None)
    time.sleep(max(0.0, after.start_micros / 1e6 - time.time()) + 0.05)
    with pytest.raises(LayoutError, match="finished only 60 s after the start"):
        finish_hot_move(sync, b"t7")
    with pytest.raises(ValueError, match="clock_margin must be"):
        finish_hot_move(sync, b"t7", clock_margin=-1)
    # The writer 1 s behind still places the key at its old place (before its start)...
    writer = SaltedTable(sync, SCHEME, hot=after)  # type: ignore[arg-type]
    monkeypatch.setattr(sync_table, "wall_micros", lambda: after.start_micros - 1_000_000)
    writer.mutate_row(key, SetCell("cf", b"b", b"late", 3000))
    monkeypatch.undo()
    assert sorted(c[3] for c in fake.cells_of(after.move_keys(key)[1] or b"")) == [b"late", b"old"]
    # ...which a finish run once the margin has passed (here: none) still moves.
    assert finish_hot_move(sync, b"t7", clock_margin=0.05).finished
    reader = SaltedTable(sync, SCHEME, hot=HotLayout(SCHEME, parts={b"t7": 4}), guard=False)  # type: ignore[arg-type]
    row = reader.read_row(key)
    assert row is not None
    assert sorted(c.value for c in row.cells) == [b"late", b"old"]
