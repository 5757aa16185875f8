"""repair_epochs: rows a stale writer put where no epoch looks are found and moved (fake table).

The reviewer's repro_first_append / repro_refresh_none: an object that had not read an
appended epoch writes a key dated past the new start with the old scheme; readers of the
new record never find it until the repair moves it.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from google.cloud.bigtable.data.mutations import SetCell

from saltedtable import SaltedTable, SaltScheme, append_epoch, epoch_field, repair_epochs
from saltedtable._guard.resalt import misplaced
from saltedtable._scheme.epochs import Epoch, Epochs
from tests.fakes import FakeTable, SyncFakeTable

READER = epoch_field("ms", index=1, digits=13)


def key(sensor: int, seconds_ahead: float) -> bytes:
    return b"s%d#%013d" % (sensor, int((time.time() + seconds_ahead) * 1000))


def stale_write(refresh: float | None) -> tuple[FakeTable, bytes]:
    """A plain N=4 table, an object opened before the first append, and its late write."""
    fake = FakeTable()
    writer = SaltedTable(SyncFakeTable(fake), SaltScheme(4), record_refresh=refresh)
    writer.mutate_row(key(0, 0), SetCell("cf", b"q", b"v", 1_000))  # stores the record
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
    append_epoch(SyncFakeTable(fake), SaltScheme(16), at, timestamp=READER, min_lead=2)
    event = key(1, 3600)  # a scheduled event an hour ahead, past the new start
    writer.mutate_row(event, SetCell("cf", b"q", b"sched", 2_000))  # no horizon yet: accepted
    return fake, event


@pytest.mark.parametrize("refresh", [30.0, None])
def test_a_stale_writers_row_is_found_and_moved_where_readers_look(refresh: float | None) -> None:
    fake, event = stale_write(refresh)
    reader = SaltedTable(SyncFakeTable(fake), SaltScheme(4), record_refresh=1)
    assert reader.read_row(event) is None  # hidden: written with N=4, its time selects N=16
    dry = repair_epochs(SyncFakeTable(fake), dry_run=True)
    (hit,) = dry.found
    assert hit.logical == event
    assert hit.source == SaltScheme(4).salt_key(event)
    assert hit.destination == SaltScheme(16).salt_key(event)
    assert dry.moved == ()
    assert dry.kept == ()
    assert dry.scanned == 2
    done = repair_epochs(SyncFakeTable(fake))
    assert done.moved == (hit.source,)
    assert fake.cells_of(hit.source) == []
    assert fake.cells_of(hit.destination) == [("cf", b"q", 2_000, b"sched")]  # its timestamp kept
    row = reader.read_row(event)
    assert row is not None
    assert row.cells[0].value == b"sched"
    assert repair_epochs(SyncFakeTable(fake)).found == ()  # nothing left


class Racing:
    """A sync table that runs ``before`` once, before the first conditional write to ``key``."""

    def __init__(self, fake: FakeTable, key: bytes, before: Any) -> None:
        self.inner = SyncFakeTable(fake)
        self.key, self.before = key, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def check_and_mutate_row(self, row_key: bytes, *args: Any, **kwargs: Any) -> Any:
        if row_key == self.key and self.before is not None:
            self.before()
            self.before = None
        return self.inner.check_and_mutate_row(row_key, *args, **kwargs)


def test_a_write_racing_the_delete_keeps_the_source_and_a_rerun_finishes() -> None:
    fake, event = stale_write(30.0)
    source = SaltScheme(4).salt_key(event)
    late = lambda: fake.set_cell(source, "cf", b"q2", b"late", 5_000)  # noqa: E731
    done = repair_epochs(Racing(fake, source, late))
    assert done.moved == ()
    ((kept, why),) = done.kept
    assert kept == source
    assert "run the repair again" in why
    assert ("cf", b"q2", 5_000, b"late") in fake.cells_of(source)  # the racing write is kept
    again = repair_epochs(SyncFakeTable(fake))  # the copy is there already: only the new cell
    assert again.moved == (source,)
    dest = SaltScheme(16).salt_key(event)
    assert sorted(fake.cells_of(dest)) == [
        ("cf", b"q", 2_000, b"sched"),
        ("cf", b"q2", 5_000, b"late"),
    ]
    assert fake.cells_of(source) == []


def test_an_older_cell_in_a_new_column_racing_the_delete_is_not_lost() -> None:
    """A stale writer whose clock runs behind adds a column with an older timestamp after
    the copy: the predicate cannot see it, so the delete removes only the copied cells,
    the row stays hidden with the new one, and the next repair moves it too."""
    fake, event = stale_write(30.0)
    source, dest = SaltScheme(4).salt_key(event), SaltScheme(16).salt_key(event)
    late = lambda: fake.set_cell(source, "cf", b"q2", b"late-older", 1_000)  # noqa: E731
    repair_epochs(Racing(fake, source, late))
    assert fake.cells_of(source) == [("cf", b"q2", 1_000, b"late-older")]  # not lost
    again = repair_epochs(SyncFakeTable(fake))
    assert again.moved == (source,)
    assert sorted(fake.cells_of(dest)) == [
        ("cf", b"q", 2_000, b"sched"),
        ("cf", b"q2", 1_000, b"late-older"),
    ]
    assert fake.cells_of(source) == []


def test_a_write_at_the_destination_wins_and_the_source_is_kept() -> None:
    fake, event = stale_write(30.0)
    dest = SaltScheme(16).salt_key(event)
    other = lambda: fake.set_cell(dest, "cf", b"q", b"newer writer", 2_000)  # noqa: E731
    done = repair_epochs(Racing(fake, dest, other))
    ((kept, why),) = done.kept
    assert kept == SaltScheme(4).salt_key(event)
    assert "merge the two rows by hand" in why
    assert fake.cells_of(dest) == [("cf", b"q", 2_000, b"newer writer")]
    assert fake.cells_of(kept) == [("cf", b"q", 2_000, b"sched")]


def test_rows_that_cannot_move_are_reported_not_touched() -> None:
    """A legacy key that starts with a new epoch's prefix (the S1 race) cannot be stored
    unsalted any more: reported with the reason."""
    past = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    epochs = Epochs((Epoch(None, None), Epoch.at(past, SaltScheme(64))), READER, "first")
    prefix = SaltScheme(64).prefix(20)
    hit = misplaced(epochs, prefix + b"abc")
    assert hit is not None
    assert hit.destination is None
    assert "cannot be moved" in hit.why
    assert misplaced(epochs, SaltScheme(64).salt_key(key(1, 0))) is None  # seen: nothing to do


def test_a_key_a_salted_and_an_unsalted_writer_could_both_have_written_is_not_moved() -> None:
    """Legacy, then N=8, then N=64: a hidden row under a N=64 prefix whose hash fits N=64
    and whose time (read unsalted) lies before the first salted epoch could be a legacy key
    or a salted one: reported as ambiguous, not moved to a guess."""
    past = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    later = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    epochs = Epochs(
        (Epoch(None, None), Epoch.at(past, SaltScheme(8)), Epoch.at(later, SaltScheme(64))),
        READER,
        "first",
    )
    n64 = SaltScheme(64)
    logical = next(  # unreadable time: the salted reading is hidden under its N=64 key
        b"user%d" % i for i in range(1000) if n64.salt_key(b"user%d" % i)[:3] != b"00-"
    )
    hit = misplaced(epochs, n64.salt_key(logical))
    assert hit is not None
    assert hit.destination is None
    assert "ambiguous" in hit.why
