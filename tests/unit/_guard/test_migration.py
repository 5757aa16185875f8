"""Migration states of the layout record, and the rule that hides backfilled copies from scans."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    Layout,
    LayoutError,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    epoch_field,
)
from saltedtable._guard.migration import (
    migration_record,
    migration_state,
    tolerates_copies,
    tolerates_legacy_rows,
)
from saltedtable._guard.record import (
    BACKFILL,
    CUTOVER,
    DELETING,
    SCHEME_QUALIFIER,
    MigrationState,
    encode_layout,
    open_differences,
)
from tests.fakes import FakeTable

SCHEME = SaltScheme(4)
C = 1_704_067_200  # the cutoff, epoch seconds
POLICY = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("s", index=1))
OLD = [b"u%d#%d" % (i, C - 100 - i) for i in range(6)]
NEW = [b"u%d#%d" % (i, C + 100 + i) for i in range(6)]


def test_open_differences_follow_the_state() -> None:
    """cutoff: cutoff readers only; backfill: the same; cutover: also the fully salted layout."""
    cutoff, salted = describe_layout(SCHEME, POLICY), describe_layout(SCHEME)
    assert open_differences(cutoff, cutoff) == []
    assert open_differences(cutoff, salted) != []
    backfill = migration_record(SCHEME, POLICY, BACKFILL)
    assert open_differences(backfill, cutoff) == []
    assert open_differences(backfill, salted) != []
    cutover = migration_record(SCHEME, POLICY, CUTOVER)
    assert open_differences(cutover, cutoff) == []
    assert open_differences(cutover, salted) == []
    assert open_differences(cutover, describe_layout(SaltScheme(8))) != []
    deleting = migration_record(SCHEME, POLICY, DELETING)
    assert any("being deleted" in d for d in open_differences(deleting, cutoff))
    assert open_differences(deleting, salted) == []
    assert open_differences(deleting, describe_layout(SaltScheme(8))) != []
    assert any(
        "unknown state" in d
        for d in open_differences(dataclasses.replace(cutoff, migration="x"), cutoff)
    )


def test_states_and_tolerances() -> None:
    """Copies are expected from the backfill on; legacy rows by salted readers from the cut-over."""
    assert migration_state(None) is None
    assert migration_state(describe_layout(SCHEME, POLICY)) is None
    backfill = migration_record(SCHEME, POLICY, BACKFILL)
    cutover = migration_record(SCHEME, POLICY, CUTOVER)
    assert (tolerates_copies(backfill), tolerates_legacy_rows(backfill)) == (True, False)
    assert (tolerates_copies(cutover), tolerates_legacy_rows(cutover)) == (True, True)
    deleting = migration_record(SCHEME, POLICY, DELETING)
    assert (tolerates_copies(deleting), tolerates_legacy_rows(deleting)) == (True, True)
    assert [migration_state(r) for r in (backfill, cutover, deleting)] == [
        BACKFILL,
        CUTOVER,
        DELETING,
    ]
    assert migration_state(dataclasses.replace(cutover, migration="done")) is None
    assert not tolerates_copies(describe_layout(SCHEME, POLICY))
    with pytest.raises(ValueError, match="migration state"):
        migration_record(SCHEME, POLICY, "done")  # type: ignore[arg-type]


def test_salted_stray_reason_mirrors_the_legacy_rule() -> None:
    """With a cutoff, a bucket row from before it is left out of scans; newer rows are kept."""
    layout = Layout(SCHEME, POLICY)
    assert layout.salted_stray_reason(OLD[0]) is not None
    assert layout.salted_stray_reason(NEW[0]) is None
    # Every key is shown on exactly one side, unreadable times included.
    for policy in (
        POLICY,
        *(
            CutoffPolicy(POLICY.cutoff, POLICY.timestamp, unreadable=u)
            for u in ("legacy", "salted")
        ),
    ):
        both = Layout(SCHEME, policy)
        for key in (*OLD, *NEW, b"no-time", b"u#x"):
            assert (both.stray_reason(key) is None) != (both.salted_stray_reason(key) is None)
    assert Layout(SCHEME).salted_stray_reason(OLD[0]) is None
    assert layout.misplaced(SCHEME.salt_key(OLD[0])) is not None
    assert layout.misplaced(SCHEME.salt_key(OLD[0]), copies=True) is None
    wrong_bucket = SCHEME.prefix((SCHEME.bucket_of(OLD[0]) + 1) % 4) + OLD[0]
    assert layout.misplaced(wrong_bucket, copies=True) is not None


async def _table_with_copies(state: MigrationState | None) -> FakeTable:
    """Legacy rows, their salted copies, new salted rows, and a record in ``state``."""
    fake = FakeTable()
    cell = [SetCell("cf", b"q", b"v", 1000)]
    entries = [RowMutationEntry(key, cell) for key in OLD]
    entries += [RowMutationEntry(SCHEME.salt_key(key), cell) for key in OLD + NEW]
    record = describe_layout(SCHEME, POLICY)
    if state is not None:
        record = migration_record(SCHEME, POLICY, state)
    entries.append(
        RowMutationEntry(SCHEME_ROW_KEY, SetCell("cf", SCHEME_QUALIFIER, encode_layout(record)))
    )
    await fake.bulk_mutate_rows(entries)
    return fake


async def test_cutoff_scans_show_each_row_once_while_copies_exist() -> None:
    """A cutoff reader's scans leave the copies out: every key once, as before the backfill."""
    fake = await _table_with_copies(BACKFILL)
    table = await SaltedTableAsync.open(fake, SCHEME, cutoff=POLICY)
    keys = [row.row_key for row in await table.read_rows(ReadRowsQuery())]
    assert keys == sorted(OLD + NEW)
    unordered = [row.row_key async for row in await table.read_rows_stream(ReadRowsQuery())]
    assert sorted(unordered) == sorted(OLD + NEW)
    assert await table.read_row(OLD[0]) is not None


async def test_open_during_a_migration_and_after_it() -> None:
    """Copies refuse a cutoff open without a migration state; cut-over admits both layouts."""
    with pytest.raises(LayoutError, match="before the cutoff"):
        await SaltedTableAsync.open(await _table_with_copies(None), SCHEME, cutoff=POLICY)
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync.open(await _table_with_copies(BACKFILL), SCHEME)
    cutover = await _table_with_copies(CUTOVER)
    await SaltedTableAsync.open(cutover, SCHEME, cutoff=POLICY)
    salted = await SaltedTableAsync.open(cutover, SCHEME)
    keys = [row.row_key for row in await salted.read_rows(ReadRowsQuery())]
    assert keys == sorted(OLD + NEW)
    with pytest.raises(LayoutError, match="outside every salt prefix"):
        await SaltedTableAsync.open(
            await _table_with_copies(BACKFILL), SCHEME, override_scheme=True, family="cf"
        )


async def test_while_legacy_rows_are_deleted_only_fully_salted_readers_open() -> None:
    """In the deleting state a cutoff reader is refused (it would miss rows); a salted one opens."""
    deleting = await _table_with_copies(DELETING)
    with pytest.raises(SchemeMismatchError, match="deleting"):
        await SaltedTableAsync.open(deleting, SCHEME, cutoff=POLICY)
    salted = await SaltedTableAsync.open(deleting, SCHEME)
    keys = [row.row_key for row in await salted.read_rows(ReadRowsQuery())]
    assert keys == sorted(OLD + NEW)


def test_hidden_reason_is_the_one_rule_of_both_sides() -> None:
    """``hidden_reason`` asks the legacy rule for bucket None, the bucket rule for a bucket."""
    layout = Layout(SCHEME, POLICY)
    for key in (*OLD, *NEW, b"no-time"):
        assert layout.hidden_reason(None, key) == layout.stray_reason(key)
        for bucket in range(SCHEME.buckets):
            assert layout.hidden_reason(bucket, key) == layout.salted_stray_reason(key)
    assert layout.hidden_reason(None, NEW[0]) is not None
    assert layout.hidden_reason(2, OLD[0]) is not None
    plain = Layout(SCHEME)
    assert (plain.hiding(None), plain.hiding(0)) == (None, None)
    assert all(plain.hidden_reason(b, k) is None for b in (None, 0, 3) for k in (*OLD, *NEW))


def test_relabel_puts_the_logical_key_on_the_row_and_its_cells() -> None:
    """A row read under its salted key comes back, the same object, under the logical one."""
    from google.cloud.bigtable.data.row import Cell, Row

    from saltedtable._scheme.layout import relabel

    physical = SCHEME.salt_key(b"user")
    row = Row(physical, [Cell(b"v", physical, "cf", b"q", 1), Cell(b"w", physical, "cf", b"r", 2)])
    assert relabel(row, b"user") is row
    assert row.row_key == b"user"
    assert [c.row_key for c in row.cells] == [b"user", b"user"]
    assert [c.value for c in row.cells] == [b"v", b"w"]
